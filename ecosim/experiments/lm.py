"""The ECO paper's Table 1 on a language model (figures ``lm_table`` and ``lm_pareto``).

Each unit trains one Llama-style decoder with :func:`ecosim.torch.lm.train` (the torch
backend: ``make torch``) on the default corpus, the Python standard library's own sources
read byte by byte, under one method of the paper's Table 1 (FP8 E4M3 row-wise weights in the
block-internal linear layers; AdamW (0.9, 0.98), eps 1e-9, wd 0.1, clip 1.0, warmup 10% then
cosine to 0.1x). The default sizes are the CPU presets, so ``make figures`` reproduces the
table's *shape* on a laptop, not the paper's numbers; for larger presets run
``python -m ecosim.torch.lm`` (on a GPU) and plot its results file with
``ecosim figures --only lm_table lm_pareto --set lm.results_file=FILE``.

With ``results_file`` set the experiment trains nothing: its single unit is the SHA-256 of the
file (so the cache follows the file's contents) and it reads the records (JSON lines, one per
finished run, as ``python -m ecosim.torch.lm --results FILE`` appends them).

Results (one row per run): ``preset``, ``method``, ``seed``, ``steps``, ``tokens``,
``val_loss`` and ``final_train_loss`` (NaN when diverged), ``diverged``, ``n_nonembed``,
``n_quantized``, ``bytes_formula`` and ``bytes_measured`` (static bytes per parameter of the
quantized linear layers: weights plus optimizer states), ``peak_memory`` (bytes), and the
curves ``curve_step``, ``curve_train``, ``curve_val`` (rows padded with NaN).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from pathlib import Path
from typing import ClassVar

import numpy as np

from .base import Config, ConfigError, experiment

__all__ = ["LMTableConfig", "METHODS", "method_parts", "records_to_results", "read_records"]

#: Table 1's seven methods, in the paper's order (names of ``python -m ecosim.torch.lm``).
METHODS = ("bf16_master", "fp8_master_rtn", "fp8_master_sr", "fp8_naive_rtn", "fp8_naive_sr",
           "fp8_eco_rtn", "fp8_eco_sr")


def method_parts(method: str) -> tuple[str, str, str]:
    """``(weights, scheme, mode)`` of a method name, e.g. ``fp8_eco_sr -> (e4m3, eco, sr)``."""
    if method == "bf16_master":
        return "bf16", "master", "rtn"
    if method == "fp32":
        return "fp32", "fp", "rtn"
    parts = method.split("_")
    if len(parts) != 3 or parts[0] != "fp8" or parts[1] not in ("master", "naive", "eco") \
            or parts[2] not in ("rtn", "sr"):
        raise ValueError(f"unknown method {method!r}; expected one of {METHODS} or 'fp32'")
    return "e4m3", parts[1], parts[2]


@dataclasses.dataclass(frozen=True, kw_only=True)
class LMTableConfig(Config):
    """Which language-model runs to make (or which results file to read).

    Attributes:
        presets: model presets of :mod:`ecosim.torch.lm` (the CPU ones by default).
        methods: Table 1's methods (all seven by default).
        seeds: number of seeds per preset (runs with seeds ``0 .. n-1``; the model init,
            data order and SR keys all follow the seed; every method sees the same seeds).
        steps: optimizer steps per run, one entry per preset (the larger preset is slower
            per step: ``make figures`` gives it fewer).
        batch, seq: sequences per step and tokens per sequence.
        eval_every, eval_batches: validation cadence and size.
        results_file: read these JSON-lines records instead of training (see module doc).
    """

    presets: tuple[str, ...] = ("tiny", "small")
    methods: tuple[str, ...] = METHODS
    seeds: tuple[int, ...] = (3, 1)
    steps: tuple[int, ...] = (400, 100)
    batch: int = 16
    seq: int = 128
    eval_every: int = 50
    eval_batches: int = 16
    results_file: str = ""

    SMOKE: ClassVar[dict] = {"presets": ("tiny",), "methods": ("bf16_master", "fp8_eco_sr"),
                             "steps": (8,), "seeds": (1,), "batch": 4, "seq": 32, "eval_every": 4,
                             "eval_batches": 2}

    def __post_init__(self):
        super().__post_init__()
        for m in self.methods:
            try:
                method_parts(m)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        for name in ("batch", "seq", "eval_every", "eval_batches"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not self.results_file and (len(self.steps) != len(self.presets)
                                      or min(self.steps, default=0) < 1):
            raise ConfigError(f"steps needs one positive entry per preset ({self.presets}), "
                              f"got {self.steps}")
        if self.results_file and not Path(self.results_file).is_file():
            raise ConfigError(f"results_file {self.results_file!r} is not a file")
        if not self.results_file and not (self.presets and self.methods):
            raise ConfigError("presets and methods must not be empty")
        if not self.results_file and (len(self.seeds) != len(self.presets)
                                      or min(self.seeds, default=0) < 1):
            raise ConfigError(f"seeds needs one positive count per preset ({self.presets}), "
                              f"got {self.seeds}")


def _units(cfg: LMTableConfig) -> list[dict]:
    if cfg.results_file:
        path = Path(cfg.results_file)
        return [{"file_sha256": hashlib.sha256(path.read_bytes()).hexdigest()}]
    return [{"preset": p, "method": m, "seed": s, "steps": n}
            for p, n, k in zip(cfg.presets, cfg.steps, cfg.seeds) for s in range(k)
            for m in cfg.methods]


def read_records(path: str | Path) -> list[dict]:
    """The run records of a results file (JSON lines; blank lines skipped)."""
    out = []
    for i, line in enumerate(Path(path).read_text().splitlines(), 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{i}: not a JSON record ({exc.msg})") from None
    if not out:
        raise ValueError(f"{path} holds no records")
    return out


def _num(x) -> float:
    return math.nan if x is None else float(x)


def records_to_results(records: list[dict]) -> dict[str, np.ndarray]:
    """Run records (as ``ecosim.torch.lm.train`` returns them) as result columns."""
    if not records:
        raise ValueError("no records")
    n_curve = max(len(r.get("curve") or []) for r in records)
    curves = np.full((3, len(records), max(n_curve, 1)), np.nan)
    cols: dict[str, list] = {k: [] for k in (
        "preset", "method", "seed", "steps", "tokens", "val_loss", "final_train_loss",
        "diverged", "n_nonembed", "n_quantized", "bytes_formula", "bytes_measured",
        "peak_memory")}
    for i, r in enumerate(records):
        try:
            method_parts(r["method"])
            diverged = bool(r["diverged"])
            cols["preset"].append(str(r["preset"]))
            cols["method"].append(str(r["method"]))
            cols["seed"].append(int(r["seed"]))
            cols["steps"].append(int(r["steps"]))
            cols["tokens"].append(int(r["tokens"]))
            cols["val_loss"].append(math.nan if diverged else _num(r["val_loss"]))
            cols["final_train_loss"].append(math.nan if diverged
                                            else _num(r["final_train_loss"]))
            cols["diverged"].append(diverged)
            cols["n_nonembed"].append(int(r["n_params"]["non_embedding"]))
            cols["n_quantized"].append(int(r["n_params"]["quantized"]))
            cols["bytes_formula"].append(_num(r["bytes_per_param"]["formula"]))
            cols["bytes_measured"].append(_num(r["bytes_per_param"]["measured"]))
            cols["peak_memory"].append(int(r["peak_memory_bytes"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"record {i} ({r.get('preset')!r}, {r.get('method')!r}) is not a "
                             f"run record of ecosim.torch.lm: {exc!r}") from None
        for j, point in enumerate(r.get("curve") or []):
            curves[:, i, j] = [_num(v) for v in point[:3]]
    out = {k: np.array(v) for k, v in cols.items()}
    out["curve_step"], out["curve_train"], out["curve_val"] = curves
    return out


def _combine(cfg: LMTableConfig, units: list[dict], results: list) -> dict:
    width = max(r["curve_step"].shape[1] for r in results)  # curves: pad rows with NaN

    def pad(a):
        if a.ndim == 2 and a.shape[1] < width:
            return np.pad(a, ((0, 0), (0, width - a.shape[1])), constant_values=np.nan)
        return a
    return {k: np.concatenate([pad(r[k]) for r in results]) for k in results[0]}


@experiment("lm", LMTableConfig, version="1", units=_units, combine=_combine,
            requires=("torch",))
def lm(cfg: LMTableConfig, unit: dict) -> dict:
    """Table 1 on a Llama-style decoder: FP8 weights without master copies (torch backend)."""
    if cfg.results_file:
        return records_to_results(read_records(cfg.results_file))
    try:
        from ..torch import lm as tlm
    except ImportError as exc:  # torch missing
        raise RuntimeError("experiment 'lm' trains with the torch backend: run `make torch` "
                           "(or pip install -e '.[torch]')") from exc
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: the same float sums (and bytes) on every machine
    try:
        record = tlm.train(tlm.LMConfig(
            preset=unit["preset"], method=unit["method"], seed=unit["seed"], steps=unit["steps"],
            batch=cfg.batch, seq=cfg.seq, eval_every=cfg.eval_every,
            eval_batches=cfg.eval_batches, quiet=True))
    finally:
        torch.set_num_threads(threads)
    return records_to_results([record])
