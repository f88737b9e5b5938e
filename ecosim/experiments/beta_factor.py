"""ECO's price for dropping the master copy: the factor 1/(1 - beta^2), measured.

On the quadratic of :mod:`.floor` the closed forms of docs/theory.md §5.2 give ECO's normalised
floor over master's as

    eco / master = [2 / (2(1-beta^2) - h(1-beta)^2)] / [1 + h(1+beta) / (2(1+beta) - h(1-beta))]

with ``h = L*lr``, which tends to ``1/(1 - beta^2)`` as ``lr -> 0``. Each unit runs one scheme
(master or eco) at one (beta, lr) on one kind of noise: real SR on the uniform grid, the same
with Gaussian gradient noise (``uniform_noise``), real SR on FP8 E4M3
(:func:`.floor.simulate_floor`), or the additive-noise model
(:func:`.floor_additive.simulate_additive`); the combine step forms the ratios with their standard
errors (the two runs are independent) and the theory curves.

Two ratios are formed. ``tab_ratio`` divides each scheme's floor by its own measured rounding
variance first (the normalised floors, where the factor is a theorem of the additive model);
``tab_abs_ratio`` divides the absolute floors ``E||x_hat - x*||^2 / d``, which is what a user
pays. They agree when both schemes' rounding variances are equal (the additive model); with
real SR, ECO's smaller updates near the optimum make its rounding variance smaller than
master's, so the absolute price is below the factor.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from .. import theory
from .base import (at_least, distinct, experiment, interval, nonempty, one_of, positive, rng_key,
                   stack_units)
from .floor import FloorRun, check_stable, simulate_floor
from .floor_additive import simulate_additive

__all__ = ["BetaFactorConfig", "exact_ratio"]

_KINDS = ("uniform", "uniform_noise", "e4m3", "additive")
_SMALLEST_LR_ONLY = ("uniform_noise", "e4m3")  # the claims are about small lr


def exact_ratio(L, lr, beta):
    """ECO's normalised floor over master's, from the closed forms (broadcasts)."""
    return (theory.quadratic_stationary("eco", L, lr, beta, 1.0)
            / theory.quadratic_stationary("master", L, lr, beta, 1.0))


@dataclasses.dataclass(frozen=True, kw_only=True)
class BetaFactorConfig(FloorRun):
    """eco/master floor ratio against beta: simulation vs 1/(1-beta^2) and the exact ratio.

    ``kinds`` are crossed with every (beta, lr), except that ``"uniform_noise"`` and
    ``"e4m3"`` run only at the smallest lr (the claims are about small lr).

    Attributes:
        grad_noise: variance of the Gaussian gradient noise per coordinate of kind
            ``"uniform_noise"``.
    """

    betas: tuple[float, ...] = (0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 0.98)
    lrs: tuple[float, ...] = (0.01, 0.1)
    kinds: tuple[str, ...] = _KINDS
    L: float = 1.0
    grad_noise: float = 0.08
    min_steps: int = 3000      # beta = 0.98 relaxes in ~1/(1 - sqrt(beta)) = 100 steps
    curve_points: int = 200
    key: int = 0
    SMOKE: ClassVar[dict] = {"betas": (0.5, 0.9), "lrs": (0.03,), "d": 64, "horizon": 8.0,
                             "min_steps": 300, "curve_points": 40}
    CHECKS: ClassVar[dict] = {
        "betas": (nonempty, distinct, interval("(0, 1)")), "lrs": (nonempty, distinct, positive),
        "kinds": (nonempty, distinct, one_of(_KINDS)), "L": positive, "grad_noise": positive,
        "curve_points": at_least(2), "key": rng_key}

    def __post_init__(self):
        super().__post_init__()
        check_stable(self, max(self.lrs), self.betas, self.L)


def _units(cfg: BetaFactorConfig):
    small = min(cfg.lrs)
    return [{"kind": k, "lr": lr, "beta": b, "scheme": s}
            for k in cfg.kinds for lr in cfg.lrs if k not in _SMALLEST_LR_ONLY or lr == small
            for b in cfg.betas for s in ("master", "eco")]


def _combine(cfg: BetaFactorConfig, units, results):
    out = stack_units(cfg, units, results)
    rows = {}  # (kind, lr, beta) -> {scheme: unit index}
    for i, u in enumerate(units):
        rows.setdefault((u["kind"], u["lr"], u["beta"]), {})[u["scheme"]] = i
    kind, lr, beta, ratio, se, absr, abse = [], [], [], [], [], [], []
    for (k, l, b), idx in rows.items():
        e, m = idx["eco"], idx["master"]
        re, rm = results[e]["ratio"], results[m]["ratio"]
        r = re / rm
        kind.append(k)
        lr.append(l)
        beta.append(b)
        ratio.append(r)
        # independent runs: relative errors add in quadrature
        se.append(r * np.hypot(results[e]["ratio_se"] / re, results[m]["ratio_se"] / rm))
        ae, am = results[e]["ex2"], results[m]["ex2"]
        absr.append(ae / am)
        abse.append(ae / am * np.hypot(results[e]["ex2_se"] / ae, results[m]["ex2_se"] / am))
    lr, beta = np.array(lr), np.array(beta)
    out["tab_kind"] = np.array(kind)
    out["tab_lr"] = lr
    out["tab_beta"] = beta
    out["tab_ratio"] = np.array(ratio, np.float64)
    out["tab_ratio_se"] = np.array(se, np.float64)
    out["tab_abs_ratio"] = np.array(absr, np.float64)
    out["tab_abs_ratio_se"] = np.array(abse, np.float64)
    out["tab_exact"] = np.asarray(exact_ratio(cfg.L, lr, beta), np.float64)
    out["tab_limit"] = 1.0 / (1.0 - beta**2)
    bmin, bmax = min(cfg.betas), max(cfg.betas)
    # curves on a logit-spaced grid of beta that covers the simulated values
    lo, hi = np.log(bmin / (1 - bmin)) - 0.3, np.log(bmax / (1 - bmax)) + 0.3
    cb = 1.0 / (1.0 + np.exp(-np.linspace(lo, hi, cfg.curve_points)))
    out["curve_beta"] = cb
    out["curve_limit"] = 1.0 / (1.0 - cb**2)
    out["curve_lr"] = np.array(sorted(cfg.lrs), np.float64)
    out["curve_exact"] = np.array([exact_ratio(cfg.L, l, cb) for l in sorted(cfg.lrs)])
    return out


@experiment("beta_factor", BetaFactorConfig, version="2", units=_units, combine=_combine)
def beta_factor(cfg: BetaFactorConfig, unit: dict) -> dict:
    """Floors of master and eco across beta (real SR, with and without gradient noise, and
    additive noise)."""
    if unit["kind"] == "additive":
        out = simulate_additive(unit["scheme"], unit["lr"], unit["beta"],
                                sigma2=cfg.step**2 / 6, d=cfg.d, L=cfg.L, horizon=cfg.horizon,
                                min_steps=cfg.min_steps, key=cfg.key)
    else:
        noisy = unit["kind"] == "uniform_noise"
        out = simulate_floor(unit["scheme"], unit["lr"], unit["beta"], mode="sr",
                             grid="uniform" if noisy else unit["kind"],
                             grad_noise=cfg.grad_noise if noisy else 0.0, d=cfg.d, L=cfg.L, step=cfg.step,
                             horizon=cfg.horizon, min_steps=cfg.min_steps, key=cfg.key)
    keep = ("ex2", "ex2_se", "s2", "ratio", "ratio_se", "closed_form", "steps")
    return {k: np.float64(out[k]) for k in keep}
