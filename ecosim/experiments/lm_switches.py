"""The lm protocol with the paper's two switches on, read from a shipped results file:
experiment ``lm_switches`` (figure ``lm_switches``).

The ECO paper's BF16-with-master baseline multiplies in bf16 (``--bf16-autocast``), and its FP8
methods round each quantized linear layer's input to E4M3 (``--act-fp8``: RTN, one absmax
scale per token). The ``lm`` experiment runs with both off. The 21 switched runs (every method
but FP32, seeds 0, 1 and 2: :data:`SEEDS`; the ``lm`` experiment runs 5) would add 21 runs,
none cheaper than a plain one, to the LM part of ``make figures``: too much for it. So they
were made once with the documented commands and ship with
ecosim as a results file
(``ecosim/data/lm_switches.jsonl``)::

    python benchmarks/lm_protocol.py --methods bf16_master --extra=--bf16-autocast \\
        --seeds 3 --out autocast.jsonl
    python benchmarks/lm_protocol.py --methods fp8_master_rtn fp8_master_sr fp8_naive_rtn \\
        fp8_naive_sr fp8_eco_rtn fp8_eco_sr --extra=--act-fp8 --seeds 3 --out act_fp8.jsonl
    cat autocast.jsonl act_fp8.jsonl > ecosim/data/lm_switches.jsonl

This experiment only reads that file (its unit is the file's SHA-256, so the cache follows
the file's contents); the figure pairs each switched run with the ``lm`` experiment's run of
the same method and seed (so over seeds 0-2), and refuses (says so in the figure, computes
nothing) when the two are not the same protocol apart from the switches: the file is then stale and must be remade
with the commands above.
"""
from __future__ import annotations

import dataclasses
import hashlib
from importlib import resources
from pathlib import Path
from typing import ClassVar

from . import lm as _lm
from .base import Config, experiment

__all__ = ["LMSwitchesConfig", "SEEDS", "SHIPPED", "shipped_file"]

#: the shipped results file, inside the package
SHIPPED = "data/lm_switches.jsonl"

#: the seeds of the shipped file's runs (the lm experiment's first three)
SEEDS = (0, 1, 2)


def shipped_file() -> Path:
    """The path of the shipped results file of switched runs."""
    return Path(str(resources.files("ecosim").joinpath(SHIPPED)))


@dataclasses.dataclass(frozen=True, kw_only=True)
class LMSwitchesConfig(Config):
    """Which results file of switched runs to read.

    Attributes:
        results_file: a results file of ``python -m ecosim.torch.lm`` runs with
            ``--bf16-autocast`` and/or ``--act-fp8``; empty: the shipped one
            (:func:`shipped_file`).
    """

    results_file: str = ""

    SMOKE: ClassVar[dict] = {}

    def path(self) -> Path:
        """The results file this config reads."""
        return Path(self.results_file) if self.results_file else shipped_file()

    def __post_init__(self):
        super().__post_init__()
        if self.results_file:  # the same checks as the lm experiment's results_file
            _lm.LMTableConfig(results_file=self.results_file)


def _units(cfg: LMSwitchesConfig) -> list[dict]:
    return [{"file_sha256": hashlib.sha256(cfg.path().read_bytes()).hexdigest()}]


def _only(cfg: LMSwitchesConfig, units: list[dict], results: list) -> dict:
    return results[0]  # one unit: the file's runs, one row each


@experiment("lm_switches", LMSwitchesConfig, version="1", units=_units, combine=_only)
def lm_switches(cfg: LMSwitchesConfig, unit: dict) -> dict:
    """The lm protocol with the paper's bf16 autocast and FP8 activations (a shipped file)."""
    records, _ = _lm.unique_runs(_lm.read_records(cfg.path()), source=str(cfg.path()))
    return _lm.records_to_results(records)
