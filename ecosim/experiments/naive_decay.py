"""Naive removal of the master copy under a decaying learning rate (figure 4).

The closed forms of docs/theory.md §5.2 say that, normalised by the quantization-error variance,
naive removal's floor grows like ``1/(2 L lr)`` while ECO's stays at ``1/(1 - beta^2)``. A
learning-rate schedule that decays makes this visible within one run: each unit trains the
quadratic of :mod:`.floor` (``d`` coordinates, fixed uniform grid) with SGD-momentum under the
ECO paper's schedule (linear warmup over 10% of the steps from 0.01x, cosine decay to 0.1x the
peak: :class:`~ecosim.optim.WarmupCosine` with its defaults) for one scheme, rounding mode and
gradient-noise level, and records, in ``bins`` equal windows of steps, the mean error
``||x_hat - x*||^2 / d``, the mean quantization-error variance ``mean(e^2)`` and the mean
learning rate, with two quasi-static predictions at each window's learning rate: the closed form
(normalised, additive-noise model) and the Lyapunov solution with the window's measured
``sigma_emp^2`` and the gradient noise (absolute).
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from ..core import rng
from .. import theory
from ..optim import sgdm, warmup_cosine
from ..problems import Quadratic
from ..train import train
from .base import (ConfigError, at_least, distinct, experiment, interval, non_negative, nonempty,
                   one_of, positive, rng_key)
from .floor import QuadraticSetup, check_stable, quantizer_for

__all__ = ["NaiveDecayConfig", "window_means"]

_SCHEMES = ("master", "naive", "eco")


def window_means(x: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Means of ``x`` over the windows ``[edges[i], edges[i+1])`` (NaN-free input)."""
    return np.array([x[a:b].mean() for a, b in zip(edges[:-1], edges[1:])])


def _ratio(a, b):
    """a / b elementwise, NaN where b is not positive (a stalled run writes no error)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    ok = np.isfinite(b) & (b > 0)
    return np.divide(a, b, out=np.full(np.broadcast(a, b).shape, np.nan), where=ok)


@dataclasses.dataclass(frozen=True, kw_only=True)
class NaiveDecayConfig(QuadraticSetup):
    """master / naive / eco (SR and RTN, with and without gradient noise) under warmup+cosine."""

    steps: int = 6000
    peak_lr: float = 0.1
    beta: float = 0.9
    schemes: tuple[str, ...] = _SCHEMES
    modes: tuple[str, ...] = ("sr", "rtn")
    grad_noises: tuple[float, ...] = (0.0, 0.01)
    L: float = 1.0
    bins: int = 120
    key: int = 0
    SMOKE: ClassVar[dict] = {"steps": 600, "d": 64, "bins": 30}
    CHECKS: ClassVar[dict] = {
        "steps": at_least(1), "peak_lr": positive, "beta": interval("(0, 1)"),
        "schemes": (nonempty, distinct, one_of(_SCHEMES)),
        "modes": (nonempty, distinct, one_of("sr", "rtn")),
        "grad_noises": (nonempty, distinct, non_negative), "L": positive,
        "bins": at_least(1), "key": rng_key}

    def __post_init__(self):
        super().__post_init__()
        if self.bins > self.steps:
            raise ConfigError(f"NaiveDecayConfig.bins: expected at most steps ({self.steps}), "
                              f"got {self.bins}")
        check_stable(self, self.peak_lr, (self.beta,), self.L)

    def schedule(self):
        """The ECO paper's schedule: 10% warmup from 0.01x, cosine to 0.1x the peak."""
        return warmup_cosine(self.peak_lr, self.steps)


def _units(cfg: NaiveDecayConfig):
    out = []
    for g in cfg.grad_noises:
        out.append({"grad_noise": g, "scheme": "fp", "mode": "none"})
        out += [{"grad_noise": g, "scheme": s, "mode": m} for s in cfg.schemes
                for m in cfg.modes]
    return out


@experiment("naive_decay", NaiveDecayConfig, version="2", units=_units)
def naive_decay(cfg: NaiveDecayConfig, unit: dict) -> dict:
    """Error vs step under warmup+cosine: naive's normalised error grows, eco's does not."""
    scheme, gn = unit["scheme"], unit["grad_noise"]
    sched = cfg.schedule()
    q = None if scheme == "fp" else quantizer_for("uniform", unit["mode"], cfg.step)
    opt = sgdm(sched, cfg.beta, scheme=scheme, weights=q)
    prob = Quadratic(cfg.d, L=cfg.L, key=rng.fold_in(cfg.key, "problem") % 2**63,
                     grad_noise=gn)
    h = train(prob, opt, cfg.steps, key=cfg.key, log_every=1, fields=("dist2", "mean_e2"))
    edges = np.linspace(0, cfg.steps, cfg.bins + 1).round().astype(int)
    ex2 = window_means(h["dist2"] / cfg.d, edges)
    lr = window_means(h["lr"], edges)
    s2 = (window_means(h["mean_e2"], edges) if scheme != "fp"
          else np.zeros(cfg.bins))
    # quasi-static theory at each window's learning rate
    closed = (np.asarray(theory.quadratic_stationary(scheme, cfg.L, lr, cfg.beta, 1.0))
              if scheme != "fp" else np.full(cfg.bins, np.nan))
    lyap = np.array([theory.lyapunov_stationary(scheme, cfg.L, a, cfg.beta, sigma2=b,
                                                grad_noise=gn) for a, b in zip(lr, s2)])
    # summary windows: the plateau at the peak (from five relaxation times 1/(peak_lr*L)
    # after the warmup, so that the random start has been forgotten, while lr >= 0.9 peak)
    # and the end (last 10% of the steps, lr within 1% of its final value 0.1 peak)
    t = np.arange(cfg.steps)
    w = sched.warmup_steps + int(np.ceil(5.0 / (cfg.peak_lr * cfg.L)))
    peak = (t >= w) & (h["lr"] >= 0.9 * cfg.peak_lr)
    end = t >= 0.9 * cfg.steps
    out = {"step_lo": edges[:-1], "step_hi": edges[1:], "lr": lr, "ex2": ex2, "s2": s2,
           "normalised": _ratio(ex2, s2), "closed_form": closed, "lyapunov": lyap}
    for name, sel in (("peak", peak), ("end", end)):
        e, s = h["dist2"][sel].mean() / cfg.d, h["mean_e2"][sel].mean() if scheme != "fp" \
            else 0.0
        out[f"ex2_{name}"] = np.float64(e)
        out[f"s2_{name}"] = np.float64(s)
        out[f"normalised_{name}"] = _ratio(e, s)
        out[f"lr_{name}"] = np.float64(h["lr"][sel].mean())
    out["changed_end"] = np.float64(h["changed_frac"][end].mean())
    return out
