"""How similar consecutive quantization errors are over a training run (figure 6).

ECO injects the current rounding error where the exact correction needs the previous one
(``e_prev ~ e``; docs/theory.md §5.8). This experiment measures how good that approximation is
on a small MLP trained with AdamW under the ECO paper's schedule (linear warmup over 10% of the
steps, cosine to 0.1x the peak), with FP8 E4M3 weights and one absmax scale per output row, for
master weights with RTN, master weights with SR and ECO with SR. The training loop
(:func:`ecosim.train.train`) records, for every step, :func:`ecosim.metrics.error_similarity`
of the previous write's error and this one's over all quantized weights: the cosine, the norm
ratio ``||e_{t+1}||/||e_t||`` (and its deviation ``|ratio - 1|``) and the relative difference
``||e_t - e_{t+1}||/||e_t||``, with their means over ``bins`` windows of steps.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from ..core import formats
from ..optim import adamw, warmup_cosine
from ..problems import MLP
from ..problems.mlp import QUANT_POLICIES
from ..core.quantizer import Quantizer
from ..train import train
from .base import (Check, Config, ConfigError, at_least, distinct, experiment, interval,
                   non_negative, nonempty, one_of, positive, rng_key)

__all__ = ["ErrorSimilarityConfig", "METHODS"]

#: method name -> (scheme, rounding mode)
METHODS = {"master_rtn": ("master", "rtn"), "master_sr": ("master", "sr"),
           "eco_sr": ("eco", "sr"), "eco_rtn": ("eco", "rtn"), "naive_sr": ("naive", "sr"),
           "naive_rtn": ("naive", "rtn")}
_SERIES = ("cos_e", "norm_ratio_e", "rel_diff_e")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ErrorSimilarityConfig(Config):
    """Error similarity over an MLP run, FP8 E4M3 row-wise weights, AdamW, warmup+cosine."""

    methods: tuple[str, ...] = ("master_rtn", "master_sr", "eco_sr")
    sizes: tuple[int, ...] = (16, 64, 64, 4)
    n_train: int = 2048
    n_val: int = 256
    noise: float = 0.1            # label noise of the teacher-student data
    batch_size: int = 64
    steps: int = 3000
    peak_lr: float = 3e-3
    b1: float = 0.9               # the ECO paper's AdamW: betas (0.9, 0.98), eps 1e-9, wd 0.1
    b2: float = 0.98
    eps: float = 1e-9
    weight_decay: float = 0.1
    fmt: str = "float8_e4m3fn"
    granularity: str = "row"
    policy: str = "matrices"      # which parameters are quantized (MLP.quantized_names)
    bins: int = 100
    key: int = 0
    SMOKE: ClassVar[dict] = {"sizes": (8, 32, 32, 4), "n_train": 256, "n_val": 64,
                             "steps": 240, "bins": 24}
    CHECKS: ClassVar[dict] = {
        "methods": (nonempty, distinct, one_of(tuple(METHODS))),
        "sizes": (Check("two or more widths", lambda t: len(t) >= 2, each=False), at_least(1)),
        "n_train": at_least(1), "n_val": at_least(1), "noise": non_negative,
        "batch_size": at_least(1), "steps": at_least(3), "peak_lr": positive,
        "b1": interval("(0, 1)"), "b2": interval("[0, 1)"), "eps": positive,
        "weight_decay": non_negative,
        "fmt": Check("a format name such as float8_e4m3fn", lambda s: bool(formats.get(s))),
        "granularity": one_of("tensor", "row", "column"), "policy": one_of(QUANT_POLICIES),
        "bins": at_least(1), "key": rng_key}

    def __post_init__(self):
        super().__post_init__()
        if self.bins >= self.steps:
            raise ConfigError(f"ErrorSimilarityConfig.bins: expected fewer than steps "
                              f"({self.steps}), got {self.bins}")
        if self.batch_size > self.n_train:
            raise ConfigError(f"ErrorSimilarityConfig.batch_size: expected at most n_train "
                              f"({self.n_train}), got {self.batch_size}")


def _units(cfg: ErrorSimilarityConfig):
    return [{"method": m} for m in cfg.methods]


@experiment("error_similarity", ErrorSimilarityConfig, version="2", units=_units)
def error_similarity(cfg: ErrorSimilarityConfig, unit: dict) -> dict:
    """Cosine, norm ratio and relative difference of consecutive errors over an MLP run."""
    scheme, mode = METHODS[unit["method"]]
    prob = MLP(cfg.sizes, n_train=cfg.n_train, n_val=cfg.n_val, key=cfg.key, noise=cfg.noise)
    q = Quantizer(cfg.fmt, mode, granularity=cfg.granularity)
    weights = {name: q for name in prob.quantized_names(cfg.policy)}
    sched = warmup_cosine(cfg.peak_lr, cfg.steps)
    opt = adamw(sched, cfg.b1, cfg.b2, eps=cfg.eps, weight_decay=cfg.weight_decay,
                scheme=scheme, weights=weights)
    h = train(prob, opt, cfg.steps, key=cfg.key, batch_size=cfg.batch_size, log_every=1,
              eval_every=cfg.steps)
    # step 0 has no previous error: windows start at step 1
    edges = np.linspace(1, cfg.steps, cfg.bins + 1).round().astype(int)
    out = {"lr": h["lr"], "loss": h["loss"]}
    for k in _SERIES:
        out[k] = h[k]
    out["norm_dev_e"] = np.abs(h["norm_ratio_e"] - 1.0)
    win = {"lr": h["lr"], "loss": h["loss"], "norm_dev_e": out["norm_dev_e"],
           **{k: h[k] for k in _SERIES}}
    for k, v in win.items():
        out[f"win_{k}"] = np.array([v[a:b].mean() for a, b in zip(edges[:-1], edges[1:])])
    out["win_lo"], out["win_hi"] = edges[:-1], edges[1:]
    # summaries: the plateau at the peak (after warmup, lr >= 0.9 peak) and the last 10%
    t = np.arange(cfg.steps)
    peak = (t >= sched.warmup_steps) & (h["lr"] >= 0.9 * cfg.peak_lr)
    end = t >= 0.9 * cfg.steps
    for name, sel in (("peak", peak), ("end", end)):
        for k in _SERIES:
            out[f"{k}_{name}"] = np.float64(h[k][sel].mean())
    out["final_val_loss"] = np.float64(h.final_val_loss)
    out["n_quantized"] = np.int64(sum(int(np.prod(p.shape)) for p in prob.param_info
                                      if p.name in weights))
    return out
