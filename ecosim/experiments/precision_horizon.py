"""Precision against horizon: the smallest mantissa per buffer as the step count grows (figure
``precision_horizon``).

Tang, Li and Zou (arXiv 2510.21314; :mod:`ecosim.theory.horizon`) predict that the mantissa a
quantized buffer needs grows like ``a log2 T`` with the horizon ``T``: ``a = 2`` for Adam's
weights and second moment ``v`` (worse as ``b2 -> 1``), ``1`` for Adam's gradient and first
moment, ``1/2`` for Muon's buffers. This experiment measures it: for each horizon ``T``,
``b2``, optimizer and problem it trains once unquantized (the reference) and finds, per buffer,
the smallest ``M`` for which rounding that buffer alone to nearest onto ``custom(8, M)``
(float32's exponent range, ``M`` mantissa bits, a plain cast) keeps the final loss within 20%
of the reference (:func:`.lowprec.classify`'s "fine"; on Rosenbrock both losses floored at
1e-5, which counts as solved).

Buffers: ``weights`` (stored without a master copy, scheme ``"naive"``: the paper's model of
quantized weights), ``g`` (the gradient on entry to the step), ``m``, ``v`` (the moments as
stored). Muon has no second moment for its matrices: ``v`` would only touch the AdamW biases of
the MLP, so it is not searched for Muon. On Rosenbrock, Muon sees the 16-d vector as a 4x4
matrix (as in ``mantissa_sweep``) and has no AdamW parameter, so ``b2`` does not enter; on the
MLP it enters only through the biases and Muon runs at one ``b2`` (``muon_b2``).

The search. ``search="bisect"`` (default) assumes that a buffer fine at ``M`` is fine at every
wider ``M`` and bisects ``[m_min, m_max + 1]``, where ``m_max + 1`` stands for "not fine in
the range" and is never run (``ceil(log2(m_max - m_min + 2))`` runs per buffer: 4 for the
default 1 ... 15); ``"scan"`` trains every ``M`` and reports the smallest ``M`` from which every wider
one is fine, plus whether the cell was monotone: the check of the bisection's assumption.
``m_max + 1`` means "not fine even at ``m_max``".

Every unit also runs all four buffers at once at ``probe_mantissa`` (default 4) and records
whether that run diverged: the claim "Adam diverges on Rosenbrock at M = 4".

Budget. A step of the small MLP costs about four times a Rosenbrock step with AdamW and
about six times with Muon, so the MLP gets the shorter horizons. The default config
(Rosenbrock T in {250, 1k, 4k} with b2 in {0.9, 0.99, 0.999}; the MLP T in {250, 1k} at
b2 = 0.999; one seed) is the reduced grid that ``make figures`` runs (the time table of
``ecosim figures`` gives its CPU time); the full grid of the issue adds T = 16k on
Rosenbrock and b2 in {0.9, 0.99} on the MLP: ``ecosim run precision_horizon --set
rosen_horizons=250,1000,4000,16000 mlp_b2s=0.9,0.99,0.999`` (about four times the CPU time).
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import ClassVar, Literal

import numpy as np

from ..core.formats import custom
from ..core.quantizer import Quantizer
from . import lowprec as lp
from .base import (ConfigError, at_least, distinct, experiment, interval, nonempty, non_negative,
                   one_of)
from .mantissa_sweep import component_setup

__all__ = ["PrecisionHorizonConfig", "BUFFERS", "smallest_fine", "buffers_for"]

BUFFERS = ("weights", "g", "m", "v")


def smallest_fine(is_fine: Callable[[int], bool], lo: int, hi: int, *,
                  search: str = "bisect") -> tuple[int, dict[int, bool], bool]:
    """The smallest ``M`` in ``[lo, hi]`` from which every wider ``M`` (up to ``hi``) is fine.

    Args:
        is_fine: ``M -> bool`` (one training run per call).
        lo, hi: the searched widths, ``1 <= lo <= hi``.
        search: ``"bisect"`` (assumes ``is_fine`` is monotone: fine at ``M`` implies fine at
            ``M + 1``; ``ceil(log2(hi - lo + 2))`` calls; where the assumption fails it returns
            a width that is fine with the next narrower one not fine, which may not be the
            smallest) or ``"scan"`` (every ``M``).

    Returns:
        ``(M, evaluated, monotone)``: ``M`` (``hi + 1`` when ``hi`` is not fine), the calls made
        as ``{M: fine}``, and whether the evaluated points are consistent with monotonicity
        (always true for a bisection, which cannot see a violation).

    Raises:
        ValueError: ``lo < 1``, ``hi < lo``, or an unknown ``search``.
    """
    if not (isinstance(lo, (int, np.integer)) and isinstance(hi, (int, np.integer))
            and 1 <= lo <= hi):
        raise ValueError(f"smallest_fine: expected integers 1 <= lo <= hi, got lo={lo!r}, "
                         f"hi={hi!r}")
    if search not in ("bisect", "scan"):
        raise ValueError(f"smallest_fine: search must be 'bisect' or 'scan', got {search!r}")
    seen: dict[int, bool] = {}

    def fine(m: int) -> bool:
        if m not in seen:
            seen[m] = bool(is_fine(int(m)))
        return seen[m]

    if search == "scan":
        for m in range(hi, lo - 1, -1):
            fine(m)
        best = hi + 1
        for m in range(hi, lo - 1, -1):
            if not seen[m]:
                break
            best = m
        monotone = all(seen[m] <= seen[m + 1] for m in range(lo, hi))
        return best, dict(sorted(seen.items())), monotone
    # bisection on [lo, hi + 1] with hi + 1 standing for "wider than the range" (never run):
    # invariant: bad = lo - 1 or not fine(bad); good = hi + 1 or fine(good)
    bad, good = lo - 1, hi + 1
    while good - bad > 1:
        mid = (bad + good) // 2
        if fine(mid):
            good = mid
        else:
            bad = mid
    return good, dict(sorted(seen.items())), True


def buffers_for(optimizer: str, buffers: tuple[str, ...] = BUFFERS) -> tuple[str, ...]:
    """The buffers searched for ``optimizer`` (Muon: no ``v``; see the module docstring)."""
    return tuple(b for b in buffers if not (optimizer == "muon" and b == "v"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class PrecisionHorizonConfig(lp.SweepConfig):
    """Horizons x b2 x optimizers x problems; per buffer a search over the mantissa width.
    Defaults: the reduced grid of ``make figures`` (see the module docstring for the full one);
    the problems, optimizers, sizes and peak learning rates are
    :class:`.lowprec.SweepConfig`'s."""

    buffers: tuple[str, ...] = BUFFERS
    rosen_horizons: tuple[int, ...] = (250, 1000, 4000)
    mlp_horizons: tuple[int, ...] = (250, 1000)
    rosen_b2s: tuple[float, ...] = (0.9, 0.99, 0.999)
    mlp_b2s: tuple[float, ...] = (0.999,)
    muon_b2: float = 0.999          # Muon's AdamW biases on the MLP (unused on Rosenbrock)
    m_min: int = 1
    m_max: int = 15
    search: Literal["bisect", "scan"] = "bisect"
    probe_mantissa: int = 4
    mlp_sizes: tuple[int, ...] = (8, 16, 4)
    mlp_train: int = 1024
    batch_size: int = 32
    seed: int = 0                   # MLP keys (data, teacher, init, batches); Rosenbrock: none

    SMOKE: ClassVar[dict] = {"rosen_horizons": (50, 100), "mlp_horizons": (30,),
                             "rosen_b2s": (0.99,), "mlp_b2s": (0.99,), "m_max": 6,
                             "mlp_sizes": (4, 8, 2), "mlp_train": 64, "batch_size": 16}
    CHECKS: ClassVar[dict] = {
        "buffers": (nonempty, distinct, one_of(BUFFERS)),
        "rosen_horizons": (nonempty, distinct, at_least(2)),
        "mlp_horizons": (nonempty, distinct, at_least(2)),
        "rosen_b2s": (nonempty, distinct, interval("[0, 1)")),
        "mlp_b2s": (nonempty, distinct, interval("[0, 1)")),
        "muon_b2": interval("[0, 1)"),
        # custom(8, M) rounds float32 values: 1 <= M <= 23
        "m_min": interval("[1, 23]"), "m_max": interval("[1, 23]"),
        "probe_mantissa": interval("[1, 23]"), "seed": non_negative}

    def __post_init__(self):
        super().__post_init__()
        if self.m_min > self.m_max:
            raise ConfigError(f"PrecisionHorizonConfig.m_min: expected at most m_max "
                              f"({self.m_max}), got {self.m_min}")

    def horizons(self, problem: str) -> tuple[int, ...]:
        return self.rosen_horizons if problem == "rosenbrock" else self.mlp_horizons

    def b2s(self, problem: str, optimizer: str) -> tuple[float, ...]:
        """AdamW: the config's grid for the problem; Muon: ``muon_b2`` only."""
        if optimizer == "muon":
            return (self.muon_b2,)
        return self.rosen_b2s if problem == "rosenbrock" else self.mlp_b2s

    def recipe(self, problem: str, b2: float) -> dict:
        """The keyword arguments of :func:`.lowprec.make_optimizer` for ``problem``."""
        return {**self.peak_lrs(problem), "b2": b2, **self._shared()}


def _units(cfg: PrecisionHorizonConfig) -> list[dict]:
    return [{"problem": p, "optimizer": o, "horizon": int(T), "b2": float(b2)}
            for p in cfg.problems for o in cfg.optimizers for T in cfg.horizons(p)
            for b2 in cfg.b2s(p, o)]


def _train(cfg: PrecisionHorizonConfig, unit: dict, component: str, mantissa: int) -> dict:
    p, o, T = unit["problem"], unit["optimizer"], unit["horizon"]
    q = None if component == "fp" else Quantizer(custom(8, mantissa), cfg.mode, scale=1.0)
    scheme, weights, states = component_setup(component, q)
    opt = lp.make_optimizer(o, T, scheme=scheme, weights=weights, states=states,
                            **cfg.recipe(p, unit["b2"]))
    return lp.run_training(cfg.problem(p, o, cfg.seed), opt, T, key=cfg.seed,
                           batch_size=cfg.batch(p), points=1)


def _combine(cfg: PrecisionHorizonConfig, units: list[dict], results: list[dict]) -> dict:
    """One row per (problem, optimizer, horizon, b2, buffer) with the smallest fine M."""
    ms = np.arange(cfg.m_min, cfg.m_max + 1)
    rows: dict[str, list] = {k: [] for k in (
        "problem", "optimizer", "horizon", "b2", "buffer", "smallest", "evals", "monotone",
        "reference", "initial", "ratio", "fine", "probe_final", "probe_diverged", "probe_cls")}
    for u, r in zip(units, results):
        for i, b in enumerate(cfg.buffers):
            if int(r["smallest"][i]) < 0:      # not searched (Muon's v)
                continue
            for k, v in (("problem", u["problem"]), ("optimizer", u["optimizer"]),
                         ("horizon", u["horizon"]), ("b2", u["b2"]), ("buffer", b),
                         ("smallest", int(r["smallest"][i])),
                         ("evals", int(r["evaluated"][i].sum())),
                         ("monotone", bool(r["monotone"][i])),
                         ("reference", float(r["reference"])), ("initial", float(r["initial"])),
                         ("ratio", r["ratio"][i]), ("fine", r["fine"][i]),
                         ("probe_final", float(r["probe_final"])),
                         ("probe_diverged", bool(r["probe_diverged"])),
                         ("probe_cls", str(r["probe_cls"]))):
                rows[k].append(v)
    res = {k: (np.stack(v) if k in ("ratio", "fine") else np.array(v)) for k, v in rows.items()}
    res["horizon"] = res["horizon"].astype(np.int64)
    res["smallest"] = res["smallest"].astype(np.int64)
    res["mantissas"] = ms.astype(np.int64)
    res["m_max"] = np.int64(cfg.m_max)
    res["probe_mantissa"] = np.int64(cfg.probe_mantissa)
    res["search"] = np.array(cfg.search)
    return res


@experiment("precision_horizon", PrecisionHorizonConfig, version="1", units=_units,
            combine=_combine)
def precision_horizon(cfg: PrecisionHorizonConfig, unit: dict) -> dict:
    """Smallest mantissa M per buffer that keeps the final loss within 20% of FP32, per (T, b2)."""
    p = unit["problem"]
    ref = _train(cfg, unit, "fp", 0)
    final_ref, initial = float(ref["final"]), float(ref["initial"])
    floor = cfg.loss_floor(p)
    ms = np.arange(cfg.m_min, cfg.m_max + 1)
    nb = len(cfg.buffers)
    smallest = np.full(nb, -1, np.int64)
    monotone = np.ones(nb, bool)
    ratio = np.full((nb, ms.size), np.nan)
    evaluated = np.zeros((nb, ms.size), bool)
    fine_at = np.zeros((nb, ms.size), bool)
    searched = buffers_for(unit["optimizer"], cfg.buffers)
    for i, b in enumerate(cfg.buffers):
        if b not in searched:
            continue
        finals: dict[int, float] = {}

        def is_fine(m: int, b=b, finals=finals) -> bool:
            finals[m] = float(_train(cfg, unit, b, m)["final"])
            return lp.classify(finals[m], final_ref, initial, floor) == "fine"

        smallest[i], seen, monotone[i] = smallest_fine(is_fine, cfg.m_min, cfg.m_max,
                                                       search=cfg.search)
        for m, ok in seen.items():
            j = m - cfg.m_min
            evaluated[i, j], fine_at[i, j] = True, ok
            f = finals[m]
            ratio[i, j] = (max(f, floor) / max(final_ref, floor) if math.isfinite(f)
                           else math.inf)
    probe = _train(cfg, unit, "all", cfg.probe_mantissa)
    pf = float(probe["final"])
    return {"smallest": smallest, "monotone": monotone, "ratio": ratio,
            "evaluated": evaluated, "fine": fine_at, "reference": np.float64(final_ref),
            "initial": np.float64(initial), "probe_final": np.float64(pf),
            "probe_diverged": np.bool_(bool(probe["diverged"])),
            "probe_cls": np.array(lp.classify(pf, final_ref, initial, floor))}
