"""The lm protocol at the paper's budget, over size, tokens per parameter and learning rate,
read from a shipped results file: experiment ``lm_budget`` (figures ``lm_table``,
``lm_pareto`` and ``lm_scaling``).

The ECO paper trains every model on 100 tokens per parameter; the ``lm`` experiment (what
``make figures`` trains) runs preset ``micro`` on 20. To separate what moves the gap between
ECO and naive master-weight removal, the same protocol (batch 16 x 64 bytes, AdamW (0.9,
0.98), eps 1e-9, weight decay 0.1, clip 1.0, 10% warmup then cosine to 0.1x, validation on 16
batches every tenth of the run, 5 seeds paired by seed) was run at :data:`GROUPS`: ``micro``
(32,928 non-embedding parameters) at 100 tokens per parameter with every method; ``tiny``
(106,816) at 20 with every method; and ``micro`` at 100 tokens per parameter with the peak
learning rate at 1/3 and 3 times the preset's 3e-3 with four methods; and ``tiny`` at 100 tokens
per parameter with five methods (:data:`FIVE`) and 3 seeds. The runs cost far more than ``make figures`` can afford, so they were made once
with the commands of :func:`command`, one per group, and ship with ecosim as one results file
(``ecosim/data/lm_budget.jsonl``, the groups' files concatenated in :data:`GROUPS` order)::

    python benchmarks/lm_protocol.py --jobs 2 --preset micro --tokens-per-param 100 \\
        --out micro_tpp100.jsonl
    ...
    cat micro_tpp100.jsonl ... > ecosim/data/lm_budget.jsonl

This experiment only reads that file (its unit is the file's SHA-256, so the cache follows the
file's contents). The figures set its runs beside the ``lm`` experiment's and refuse them
(saying why, computing nothing from them) when they are not the ``lm`` protocol apart from the
model, the steps and the learning rate (:func:`ecosim.claims.lm.check_protocol`). A slow test
(``tests/test_lm_budget.py``) retrains one run of each group from its command and compares its
outcome with the shipped record's, byte for byte, on the pinned platform.
"""
from __future__ import annotations

import dataclasses
import hashlib
from importlib import resources
from pathlib import Path
from typing import ClassVar

from . import lm as _lm
from .base import Config, experiment

__all__ = ["FIVE", "FOUR", "GROUPS", "PLANNED", "LMBudgetConfig", "SHIPPED", "VARIED", "command", "shipped_file"]

#: the shipped results file, inside the package
SHIPPED = "data/lm_budget.jsonl"

#: the methods of tiny at 100 tokens per parameter: BF16 with master weights, ECO and naive
#: removal, each with SR and RTN
FIVE = ("bf16_master", "fp8_eco_sr", "fp8_naive_sr", "fp8_eco_rtn", "fp8_naive_rtn")
#: the methods of the learning-rate sweep: the headline's three and naive+RTN, whose
#: divergence the paper reports and which a larger lr may bring about
FOUR = ("bf16_master", "fp8_eco_sr", "fp8_naive_sr", "fp8_naive_rtn")

#: the groups of runs, each made by one command (:func:`command`): preset, training tokens
#: per non-embedding parameter, peak learning rate (None: the preset's), methods (None: the
#: lm experiment's eight) and seeds
GROUPS = (
    {"preset": "micro", "tokens_per_param": 100, "lr": None, "methods": None, "seeds": 5},
    {"preset": "micro", "tokens_per_param": 100, "lr": 0.001, "methods": FOUR, "seeds": 5},
    {"preset": "micro", "tokens_per_param": 100, "lr": 0.009, "methods": FOUR, "seeds": 5},
    {"preset": "tiny", "tokens_per_param": 20, "lr": None, "methods": None, "seeds": 5},
    {"preset": "tiny", "tokens_per_param": 100, "lr": None, "methods": FIVE, "seeds": 3},
)
#: groups planned beyond :data:`GROUPS` whose runs are not shipped (none)
PLANNED = ()

#: what the shipped runs may vary against the lm protocol (fields of
#: :func:`ecosim.experiments.lm.run_setting`); everything else must be the same
VARIED = ("model", "steps", "lr")


def command(group: dict, out: str) -> str:
    """The command that makes the runs of ``group`` (an entry of :data:`GROUPS`) into ``out``.

    >>> command(GROUPS[1], "x.jsonl")  # doctest: +NORMALIZE_WHITESPACE
    'python benchmarks/lm_protocol.py --jobs 2 --preset micro --tokens-per-param 100
     --lr 0.001 --seeds 5 --methods bf16_master fp8_eco_sr fp8_naive_sr fp8_naive_rtn
     --out x.jsonl'
    """
    parts = ["python benchmarks/lm_protocol.py --jobs 2", f"--preset {group['preset']}",
             f"--tokens-per-param {group['tokens_per_param']:g}"]
    if group["lr"] is not None:
        parts.append(f"--lr {group['lr']:g}")
    parts.append(f"--seeds {group['seeds']}")
    if group["methods"] is not None:
        parts.append("--methods " + " ".join(group["methods"]))
    return " ".join(parts + [f"--out {out}"])


def shipped_file() -> Path:
    """The path of the shipped results file."""
    return Path(str(resources.files("ecosim").joinpath(SHIPPED)))


@dataclasses.dataclass(frozen=True, kw_only=True)
class LMBudgetConfig(Config):
    """Which results file of the lm protocol at other budgets to read.

    Attributes:
        results_file: a results file of ``python -m ecosim.torch.lm`` runs of the lm
            protocol (other presets, steps or learning rates); empty: the shipped one
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


def _units(cfg: LMBudgetConfig) -> list[dict]:
    return [{"file_sha256": hashlib.sha256(cfg.path().read_bytes()).hexdigest()}]


def _only(cfg: LMBudgetConfig, units: list[dict], results: list) -> dict:
    return results[0]  # one unit: the file's runs, one row each


@experiment("lm_budget", LMBudgetConfig, version="1", units=_units, combine=_only)
def lm_budget(cfg: LMBudgetConfig, unit: dict) -> dict:
    """The lm protocol at other sizes, budgets and learning rates (a shipped file)."""
    records, _ = _lm.unique_runs(_lm.read_records(cfg.path()), source=str(cfg.path()))
    return _lm.records_to_results(records)
