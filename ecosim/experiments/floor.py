"""Noise floors on a quadratic: real rounding against the closed forms of docs/theory.md §5.2.

One unit trains ``f(x) = L/2 ||x - x*||^2`` (``d`` coordinates, exact gradients, optimum off the
grid) with SGD-momentum under one scheme, learning rate, beta and rounding mode, and measures
in the stationary phase

* ``ex2``: the time average of ``||x_hat - x*||^2 / d`` (the stored iterate's error),
* ``s2``: the time average of ``mean(e**2)``, the measured quantization-error variance
  ``sigma_emp^2`` of that scheme's weight writes,

together with batch-means standard errors. The closed forms predict ``ex2 / s2`` when the
quantization error is additive noise of variance ``s2``; real SR is not additive noise (its
variance shrinks with the update), which is why each scheme is normalised by its *own*
measured ``s2``.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from ..core import rng
from .. import theory
from ..optim import SCHEMES, sgdm
from ..problems import Quadratic
from ..core.quantizer import Quantizer
from ..train import train
from .base import (Config, ConfigError, at_least, distinct, experiment, interval, nonempty, one_of,
                   positive, rng_key)

__all__ = ["FloorConfig", "FloorRun", "QuadraticSetup", "simulate_floor", "quantizer_for",
           "check_stable"]


def quantizer_for(grid: str, mode: str, step: float, *, nbits: int = 32,
                  sr_rule: str = "floor") -> Quantizer:
    """The weight quantizer of a floor run.

    ``grid="uniform"``: int8 codes on a fixed grid of spacing ``step`` (the theory's setting);
    ``grid="e4m3"``: FP8 E4M3 with a per-tensor absmax scale recomputed on every write (the
    non-uniform grid of practice). ``nbits``, ``sr_rule``: SR's random bits and count rule.
    """
    if grid == "uniform":
        return Quantizer("int8", mode, scale=step, nbits=nbits, sr_rule=sr_rule)
    if grid == "e4m3":
        return Quantizer("e4m3", mode, granularity="tensor", scale="absmax", nbits=nbits,
                         sr_rule=sr_rule)
    raise ValueError(f"grid must be 'uniform' or 'e4m3', got {grid!r}")


def simulate_floor(scheme: str, lr: float, beta: float, *, mode: str = "sr", d: int = 1000,
                   L: float = 1.0, grid: str = "uniform", step: float = 2.0**-6,
                   horizon: float = 40.0, min_steps: int = 2000, burn_frac: float = 0.4,
                   heavy_ball: bool = False, grad_noise: float = 0.0, key: int = 0,
                   blocks: int = 20, nbits: int = 32, sr_rule: str = "floor") -> dict:
    """Run one scheme to stationarity and measure its floor (see the module docstring).

    Args:
        scheme: ``"master"``, ``"naive"``, ``"eco"`` (or ``"eco_exact"``, ``"kahan"``, ``"fp"``).
        lr, beta: SGD-momentum hyperparameters (EMA form unless ``heavy_ball``).
        mode: ``"sr"`` or ``"rtn"``.
        d: coordinates (independent identical copies of the scalar problem when L is scalar).
        grid, step: see :func:`quantizer_for`.
        horizon: run ``max(min_steps, horizon / (lr * L))`` steps: ``horizon`` relaxation times.
        burn_frac: fraction of the run discarded as burn-in.
        grad_noise: variance of additive Gaussian gradient noise per coordinate.
        key: the run's key.
        blocks: number of time blocks for the batch-means standard errors.
        nbits, sr_rule: SR with the low ``nbits`` of each random word and that count rule
            (:class:`~ecosim.core.quantizer.Quantizer`).

    Returns:
        dict with ``ex2``, ``s2``, ``ratio`` (= ex2 / s2), their standard errors ``ex2_se``,
        ``ratio_se`` (batch means over ``blocks`` blocks of the stationary phase), the
        closed-form prediction ``closed_form`` (master/naive/eco, else NaN), the Lyapunov
        prediction ``lyapunov`` (with the gradient noise), and ``steps``.
    """
    steps = int(max(min_steps, round(horizon / (lr * L))))
    q = quantizer_for(grid, mode, step, nbits=nbits, sr_rule=sr_rule)
    opt = sgdm(lr, beta, scheme=scheme, weights=None if scheme == "fp" else q,
               heavy_ball=heavy_ball)
    prob = Quadratic(d, L=L, key=rng.fold_in(key, "problem") % 2**63, grad_noise=grad_noise)
    log_every = max(1, steps // 4000)
    h = train(prob, opt, steps, key=key, log_every=log_every, fields=("dist2", "mean_e2"))
    keep = h["step"] >= burn_frac * steps
    ex2 = h["dist2"][keep] / d
    s2 = h["mean_e2"][keep]
    # Batch means: block averages are nearly independent when a block spans many relaxation
    # times; their spread / sqrt(blocks) is the standard error of the overall mean.
    nb = max(2, min(blocks, ex2.size // 2))
    bx = np.array([b.mean() for b in np.array_split(ex2, nb)])
    bs = np.array([b.mean() for b in np.array_split(s2, nb)])
    ratio = ex2.mean() / s2.mean() if scheme != "fp" else np.nan
    # delta method for a ratio of means: var(r)/r^2 = var(x)/x^2 + var(s)/s^2 - 2cov/(x s)
    cov = np.cov(bx, bs, ddof=1) / nb
    rel_var = (cov[0, 0] / bx.mean() ** 2 + cov[1, 1] / bs.mean() ** 2
               - 2 * cov[0, 1] / (bx.mean() * bs.mean()))
    closed = (float(theory.quadratic_stationary(scheme, L, lr, beta, 1.0))
              if scheme in theory.QUADRATIC_SCHEMES and not heavy_ball and grad_noise == 0
              else np.nan)
    lyap = np.nan
    if scheme in theory.SCHEMES:
        s2m = s2.mean() if scheme != "fp" else 0.0
        lyap = float(np.asarray(theory.lyapunov_stationary(
            scheme, np.array([L]), lr, beta, sigma2=s2m, grad_noise=grad_noise,
            heavy_ball=heavy_ball)).ravel()[0])
        if scheme != "fp":
            lyap /= s2m
    return {"ex2": float(ex2.mean()), "ex2_se": float(np.sqrt(cov[0, 0])),
            "s2": float(s2.mean()) if scheme != "fp" else 0.0, "ratio": float(ratio),
            "ratio_se": float(abs(ratio) * np.sqrt(max(rel_var, 0.0))),
            "closed_form": closed, "lyapunov": lyap, "steps": steps}


@dataclasses.dataclass(frozen=True, kw_only=True)
class QuadraticSetup(Config):
    """The quadratic the quantized-write experiments run on: dimension ``d`` and the ``step``
    of the uniform grid the writes round to (their configs derive from this)."""

    d: int = 1000
    step: float = 2.0**-6
    CHECKS: ClassVar[dict] = {"d": at_least(1), "step": positive}


@dataclasses.dataclass(frozen=True, kw_only=True)
class FloorRun(QuadraticSetup):
    """:class:`QuadraticSetup` with the length of a :func:`simulate_floor` run: ``horizon``
    relaxation times, at least ``min_steps`` steps."""

    horizon: float = 40.0
    min_steps: int = 2000
    CHECKS: ClassVar[dict] = {"horizon": positive, "min_steps": at_least(1)}


def check_stable(cfg: Config, lr: float, betas, L: float = 1.0) -> None:
    """Raise :class:`ConfigError` (naming ``cfg``'s class) unless heavy-ball momentum at rate
    ``lr`` is stable on a quadratic of curvature ``L`` at every ``beta`` of ``betas``
    (:func:`ecosim.theory.stability_limit`): the configs of the quadratic experiments check
    their largest rate with it."""
    for b in betas:
        limit = theory.stability_limit(L, b)
        if lr >= limit:
            raise ConfigError(f"{type(cfg).__name__}: lr {lr} is unstable at beta={b} (the limit "
                              f"is {limit:.4g})")


@dataclasses.dataclass(frozen=True, kw_only=True)
class FloorConfig(FloorRun):
    """Noise floor vs learning rate: master, naive, eco under SR and RTN, uniform and FP8."""

    lrs: tuple[float, ...] = (0.3, 0.1, 0.03, 0.01, 0.003)
    betas: tuple[float, ...] = (0.5, 0.9)
    schemes: tuple[str, ...] = ("master", "naive", "eco")
    modes: tuple[str, ...] = ("sr", "rtn")
    grids: tuple[str, ...] = ("uniform", "e4m3")
    key: int = 0
    SMOKE: ClassVar[dict] = {"lrs": (0.3, 0.03), "betas": (0.9,), "d": 64, "horizon": 8.0,
                             "min_steps": 200, "grids": ("uniform",)}
    CHECKS: ClassVar[dict] = {
        "lrs": (nonempty, distinct, positive), "betas": (nonempty, distinct, interval("(0, 1)")),
        "schemes": (nonempty, distinct, one_of(SCHEMES)),
        "modes": (nonempty, distinct, one_of("sr", "rtn")),
        "grids": (nonempty, distinct, one_of("uniform", "e4m3")), "key": rng_key}

    def __post_init__(self):
        super().__post_init__()
        check_stable(self, max(self.lrs), self.betas)  # the quadratic has curvature L = 1


def _floor_units(cfg: FloorConfig):
    return [{"scheme": s, "lr": lr, "beta": b, "mode": m, "grid": g}
            for g in cfg.grids for m in cfg.modes for b in cfg.betas for s in cfg.schemes
            for lr in cfg.lrs]


@experiment("floor", FloorConfig, version="1", units=_floor_units)
def floor(cfg: FloorConfig, unit: dict) -> dict:
    """Stationary error of master/naive/eco vs lr on a quadratic, against the closed forms."""
    out = simulate_floor(unit["scheme"], unit["lr"], unit["beta"], mode=unit["mode"],
                         grid=unit["grid"], d=cfg.d, step=cfg.step, horizon=cfg.horizon,
                         min_steps=cfg.min_steps, key=cfg.key)
    return {k: np.float64(v) for k, v in out.items()}
