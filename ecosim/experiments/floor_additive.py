"""The additive-noise model of the quadratic noise floor, simulated, and its theory curves.

Figure 2 (``noise_floor``) sets real stochastic rounding (the ``floor`` experiment, :mod:`.floor`)
beside the model the closed forms of docs/theory.md §5.2 are derived for: every quantized write is
``q(y) = y + xi`` with i.i.d. ``xi ~ N(0, sigma2)``, whatever ``y`` is. This module simulates that
recursion directly (no grid, no optimizer object: a few vectorised NumPy lines over ``d``
independent coordinates of ``f = L/2 ||x||^2``) and tabulates the closed forms and the Lyapunov
solution on a fine grid of learning rates.

The additive variance defaults to ``sigma2 = step**2 / 6``: the mean SR variance
``step**2 * p(1-p)`` of a value whose position ``p`` in its grid cell is uniform, i.e. what real
SR gives when the update is large against the grid step (master weights). That is the setting in
which the two models can be compared in absolute terms: the additive model keeps ``sigma2`` fixed
as the learning rate falls, real SR does not (its variance shrinks with the update).
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from ..core import rng
from .. import theory
from .base import (at_least, distinct, experiment, interval, nonempty, one_of, positive, rng_key,
                   stack_units)
from .floor import FloorRun, check_stable

__all__ = ["FloorAdditiveConfig", "simulate_additive", "batch_means"]

_SCHEMES = ("master", "naive", "eco")


def batch_means(ex2: np.ndarray, s2: np.ndarray, blocks: int = 20) -> dict:
    """Means of two stationary series, their ratio, and batch-means standard errors.

    The series are cut into ``blocks`` consecutive blocks; block averages are nearly independent
    when a block spans many relaxation times, so their spread over ``sqrt(blocks)`` is the
    standard error of the overall mean (the same estimator as :func:`.floor.simulate_floor`).
    The ratio's error is the delta method with the blocks' covariance.
    """
    nb = max(2, min(blocks, ex2.size // 2))
    bx = np.array([b.mean() for b in np.array_split(ex2, nb)])
    bs = np.array([b.mean() for b in np.array_split(s2, nb)])
    x, s = float(ex2.mean()), float(s2.mean())
    ratio = x / s
    cov = np.cov(bx, bs, ddof=1) / nb
    rel_var = (cov[0, 0] / bx.mean() ** 2 + cov[1, 1] / bs.mean() ** 2
               - 2 * cov[0, 1] / (bx.mean() * bs.mean()))
    return {"ex2": x, "ex2_se": float(np.sqrt(cov[0, 0])), "s2": s, "ratio": ratio,
            "ratio_se": float(abs(ratio) * np.sqrt(max(rel_var, 0.0)))}


def simulate_additive(scheme: str, lr: float, beta: float, *, sigma2: float, d: int = 1000,
                      L: float = 1.0, horizon: float = 40.0, min_steps: int = 2000,
                      burn_frac: float = 0.4, key: int = 0, blocks: int = 20,
                      chunk: int = 512) -> dict:
    """Simulate the additive-noise recursion of one scheme and measure its stationary floor.

    ``f = L/2 ||x||^2`` (optimum 0), exact gradients, EMA momentum, and ``q(y) = y + xi`` with
    ``xi ~ N(0, sigma2)`` drawn independently for every coordinate and write (the rounding error
    is ``e = -xi``). One step, with ``m' = beta*m + (1-beta)*L*x_hat``:

    * master: ``x_hat_t = theta_t + xi_t``, ``theta_{t+1} = theta_t - lr*m'``, ``m = m'``;
    * naive: ``x_hat <- x_hat - lr*m' + xi``, ``m = m'``;
    * eco: as naive, then ``m = m' + alpha*e = m' - alpha*xi``, ``alpha = eco_alpha(lr, beta)``.

    The run length, burn-in and statistics are those of :func:`.floor.simulate_floor`, so the
    two are directly comparable.

    Returns:
        dict with ``ex2`` (time average of ``||x_hat||^2 / d``), ``s2`` (measured mean of
        ``xi**2``), ``ratio = ex2 / s2``, their batch-means standard errors ``ex2_se`` and
        ``ratio_se``, ``closed_form`` (the normalised closed form), ``lyapunov`` (the normalised
        Lyapunov solution) and ``steps``.
    """
    if scheme not in _SCHEMES:
        raise ValueError(f"scheme must be one of {_SCHEMES}, got {scheme!r}")
    steps = int(max(min_steps, round(horizon / (lr * L))))
    alpha = theory.eco_alpha(lr, beta) if scheme == "eco" else 0.0
    gen = np.random.default_rng(rng.fold_in(key, "additive", scheme))
    sd = float(np.sqrt(sigma2))
    x = np.zeros(d)      # x_hat for naive/eco, theta for master
    m = np.zeros(d)
    ex2 = np.empty(steps)
    s2 = np.empty(steps)
    c = (1.0 - beta) * L
    for start in range(0, steps, chunk):
        xi_block = gen.standard_normal((min(chunk, steps - start), d))
        xi_block *= sd
        for j, xi in enumerate(xi_block):
            t = start + j
            if scheme == "master":
                xh = x + xi
                m *= beta
                m += c * xh
                x -= lr * m
            else:
                m *= beta
                m += c * x
                x -= lr * m
                x += xi
                xh = x
                if scheme == "eco":
                    m -= alpha * xi
            ex2[t] = np.dot(xh, xh) / d
            s2[t] = np.dot(xi, xi) / d
    keep = np.arange(steps) >= burn_frac * steps
    out = batch_means(ex2[keep], s2[keep], blocks)
    out["closed_form"] = float(theory.quadratic_stationary(scheme, L, lr, beta, 1.0))
    out["lyapunov"] = float(theory.lyapunov_stationary(scheme, L, lr, beta, sigma2=1.0))
    out["steps"] = steps
    return out


@dataclasses.dataclass(frozen=True, kw_only=True)
class FloorAdditiveConfig(FloorRun):
    """Additive-noise floors beside real SR (figure 2); defaults match ``floor``'s (the noise
    variance is that of SR onto the grid of ``step``: :attr:`sigma2`)."""

    lrs: tuple[float, ...] = (0.3, 0.1, 0.03, 0.01, 0.003)
    betas: tuple[float, ...] = (0.5, 0.9)
    schemes: tuple[str, ...] = _SCHEMES
    L: float = 1.0
    curve_points: int = 121      # learning rates of the theory curves (log-spaced)
    key: int = 0
    SMOKE: ClassVar[dict] = {"lrs": (0.3, 0.03), "betas": (0.9,), "d": 64, "horizon": 8.0,
                             "min_steps": 200, "curve_points": 25}
    CHECKS: ClassVar[dict] = {
        "lrs": (nonempty, distinct, positive), "betas": (nonempty, distinct, interval("(0, 1)")),
        "schemes": (nonempty, distinct, one_of(_SCHEMES)), "L": positive,
        "curve_points": at_least(2), "key": rng_key}

    def __post_init__(self):
        super().__post_init__()
        check_stable(self, max(self.lrs), self.betas, self.L)

    @property
    def sigma2(self) -> float:
        return self.step**2 / 6.0


def _additive_units(cfg: FloorAdditiveConfig):
    return [{"scheme": s, "lr": lr, "beta": b}
            for b in cfg.betas for s in cfg.schemes for lr in cfg.lrs]


def curve_lrs(lrs, points: int) -> np.ndarray:
    """Log-spaced learning rates from ``min(lrs)/2`` to ``2*max(lrs)`` for theory curves."""
    return np.geomspace(min(lrs) / 2.0, 2.0 * max(lrs), points)


def _additive_combine(cfg: FloorAdditiveConfig, units, results):
    out = stack_units(cfg, units, results)
    lrs = curve_lrs(cfg.lrs, cfg.curve_points)
    out["curve_lr"] = lrs
    out["curve_beta"] = np.array(cfg.betas, np.float64)
    for s in cfg.schemes:
        closed = np.empty((len(cfg.betas), lrs.size))
        lyap = np.empty_like(closed)
        for i, b in enumerate(cfg.betas):
            closed[i] = theory.quadratic_stationary(s, cfg.L, lrs, b, 1.0)
            lyap[i] = [theory.lyapunov_stationary(s, cfg.L, lr, b, sigma2=1.0) for lr in lrs]
        out[f"curve_closed_{s}"] = closed
        out[f"curve_lyapunov_{s}"] = lyap
    out["sigma2"] = np.float64(cfg.sigma2)
    out["step"] = np.float64(cfg.step)
    return out


@experiment("floor_additive", FloorAdditiveConfig, version="1", units=_additive_units,
            combine=_additive_combine)
def floor_additive(cfg: FloorAdditiveConfig, unit: dict) -> dict:
    """Additive-noise model q(y) = y + xi on a quadratic: floors vs lr, with theory curves."""
    out = simulate_additive(unit["scheme"], unit["lr"], unit["beta"], sigma2=cfg.sigma2,
                            d=cfg.d, L=cfg.L, horizon=cfg.horizon, min_steps=cfg.min_steps,
                            key=cfg.key)
    return {k: np.float64(v) for k, v in out.items()}
