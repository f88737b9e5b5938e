"""Which buffer of an optimizer step breaks first when its mantissa shrinks (figure
``mantissa_sweep``).

The third reference (Tang, Li, Zou, "A Convergence Analysis of Adaptive Optimizers under
Floating-point Quantization", arXiv 2510.21314) models every quantized buffer by a relative
error ``|Q(x) - x| <= 2**-M |x|`` with a wide exponent, and asks which of the weights,
gradients, first and second moments tolerate which mantissa width ``M``. This experiment
measures it with real rounding onto ``custom(8, M)`` (float32's exponent range, ``M``
mantissa bits; a plain cast, no scales) for ``M`` in {23, 10, 7, 5, 4, 3, 2, 1}, one buffer at a
time and all together:

``weights``
    the stored weights, written without a master copy (scheme ``"naive"``: ``theta_hat <-
    Q(theta_hat - lr * update)``, the reference's model of quantized weights);
``weights_eco``
    the same grid with ECO's error injection (Muon: the experimental memory-free variant);
``g``, ``m``, ``v``
    the gradient on entry to the step, the first and the second moment (the optimizers'
    ``states={...}`` quantization points); Muon has ``v`` only for its AdamW parameters;
``all``
    weights (naive), ``g``, ``m`` and ``v`` at once.

Optimizers: AdamW and Muon; problems: Rosenbrock (Muon sees it as a 4x4 matrix) and a
teacher-student MLP (see :mod:`.lowprec` for the setups and learning rates). Each unit is one
(seed, problem, optimizer, component, M) run; the ``fp`` unit of each (seed, problem,
optimizer) is the unquantized reference. The combined results average the final loss over
the seeds, classify it as fine, degraded or failed against the mean reference
(:func:`.lowprec.classify`) and summarise, per component, the smallest ``M`` down to which
every width is fine, and the first widths that degrade and fail.
"""
from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import numpy as np

from ..core.formats import custom
from ..core.quantizer import Quantizer
from . import lowprec as lp
from .base import (ConfigError, at_least, distinct, experiment, interval, non_negative, nonempty,
                   one_of)

__all__ = ["MantissaSweepConfig", "COMPONENTS", "component_setup"]

COMPONENTS = ("weights", "weights_eco", "g", "m", "v", "all")


@dataclasses.dataclass(frozen=True, kw_only=True)
class MantissaSweepConfig(lp.SweepConfig):
    """Mantissa widths x components x optimizers x problems (defaults: the full figure); the
    problems, optimizers, sizes and peak learning rates are :class:`.lowprec.SweepConfig`'s."""

    components: tuple[str, ...] = COMPONENTS
    mantissas: tuple[int, ...] = (23, 10, 7, 5, 4, 3, 2, 1)
    rosen_steps: int = 2000
    mlp_steps: int = 500
    points: int = 25
    seeds: tuple[int, ...] = (0, 1)   # MLP keys (data, teacher, init); Rosenbrock uses the first
    # AdamW's b2 per problem, tuned on the FP32 runs
    rosen_b2: float = 0.99
    mlp_b2: float = 0.999

    SMOKE: ClassVar[dict] = {"components": ("weights", "v"), "mantissas": (7, 1),
                             "rosen_steps": 150, "mlp_sizes": (8, 16, 4), "mlp_train": 256,
                             "mlp_steps": 40, "batch_size": 32, "points": 5, "seeds": (0,)}
    CHECKS: ClassVar[dict] = {
        "components": (nonempty, distinct, one_of(COMPONENTS)),
        # custom(8, M) rounds float32 values: 1 <= M <= 23
        "mantissas": (nonempty, distinct, interval("[1, 23]")),
        "rosen_steps": at_least(1), "mlp_steps": at_least(1), "points": at_least(1),
        "seeds": (nonempty, distinct, non_negative), "rosen_b2": interval("[0, 1)"),
        "mlp_b2": interval("[0, 1)")}

    def __post_init__(self):
        super().__post_init__()
        if self.points > min(self.rosen_steps, self.mlp_steps):
            raise ConfigError("MantissaSweepConfig.points must not exceed the steps")

    def steps(self, problem: str) -> int:
        return self.rosen_steps if problem == "rosenbrock" else self.mlp_steps

    def recipe(self, problem: str) -> dict:
        """The keyword arguments of :func:`.lowprec.make_optimizer` for ``problem``."""
        b2 = self.rosen_b2 if problem == "rosenbrock" else self.mlp_b2
        return {**self.peak_lrs(problem), "b2": b2, **self._shared()}


def _applies(problem: str, optimizer: str, component: str) -> bool:
    """Muon on Rosenbrock has one matrix and no AdamW parameter: ``v`` does not exist."""
    return not (optimizer == "muon" and problem == "rosenbrock" and component == "v")


def component_setup(component: str, q: Quantizer) -> tuple[str, Quantizer | None, dict]:
    """``(scheme, weights, states)`` quantizing ``component`` with ``q``; ``"fp"``: none."""
    if component == "fp":
        return "fp", None, {}
    if component == "weights":
        return "naive", q, {}
    if component == "weights_eco":
        return "eco", q, {}
    if component in ("g", "m", "v"):
        return "fp", None, {component: q}
    if component == "all":
        return "naive", q, {"g": q, "m": q, "v": q}
    raise ValueError(f"unknown component {component!r}")


def _seeds(cfg: MantissaSweepConfig, problem: str) -> tuple[int, ...]:
    """Rosenbrock is deterministic (full batch, the classic start): one run is enough."""
    return cfg.seeds[:1] if problem == "rosenbrock" else cfg.seeds


def _units(cfg: MantissaSweepConfig) -> list[dict]:
    out = []
    for p in cfg.problems:
        for o in cfg.optimizers:
            for seed in _seeds(cfg, p):
                out.append({"seed": seed, "problem": p, "optimizer": o, "component": "fp",
                            "mantissa": 0})
                out += [{"seed": seed, "problem": p, "optimizer": o, "component": c,
                         "mantissa": m}
                        for c in cfg.components if _applies(p, o, c) for m in cfg.mantissas
                        if not _identity(p, m)]
    return out


def _identity(problem: str, mantissa: int) -> bool:
    """custom(8, 23) holds every float32 value: on the float32 MLP quantizing to it (RTN or
    SR) is the identity, so that run *is* the fp run (tests/test_lowprec.py checks this bit
    for bit) and is not computed again."""
    return problem == "mlp" and mantissa == 23


def _combine(cfg: MantissaSweepConfig, units: list[dict], results: list[dict]) -> dict:
    """One row per (problem, optimizer, component, M): the mean final loss over the seeds, its
    class against the mean of the fp references, and a per-component summary."""
    by = {}
    for u, r in zip(units, results):
        by.setdefault((u["problem"], u["optimizer"], u["component"], u["mantissa"]), []).append(r)
    out: dict[str, list] = {k: [] for k in (
        "problem", "optimizer", "component", "mantissa", "final", "final_min", "final_max",
        "initial", "reference", "floor", "ratio", "cls", "diverged", "curve")}
    refs = {}
    for p in cfg.problems:
        for o in cfg.optimizers:
            rs = by[p, o, "fp", 0]
            refs[p, o] = (float(np.mean([float(r["final"]) for r in rs])),
                          float(np.mean([float(r["initial"]) for r in rs])),
                          np.mean([r["curve"] for r in rs], axis=0))
            for c in cfg.components:
                if not _applies(p, o, c):
                    continue
                for m in cfg.mantissas:
                    rs = by[p, o, "fp", 0] if _identity(p, m) else by[p, o, c, m]
                    finals = np.array([float(r["final"]) for r in rs])
                    ref, ini, _ = refs[p, o]
                    floor = cfg.loss_floor(p)
                    final = float(finals.mean())
                    row = {"problem": p, "optimizer": o, "component": c, "mantissa": m,
                           "final": final, "final_min": float(finals.min()),
                           "final_max": float(finals.max()), "initial": ini,
                           "reference": ref, "floor": floor,
                           "ratio": (max(final, floor) / max(ref, floor)
                                     if math.isfinite(final) else math.inf),
                           "cls": lp.classify(final, ref, ini, floor),
                           "diverged": any(bool(r["diverged"]) for r in rs)}
                    with np.errstate(invalid="ignore"):
                        row["curve"] = np.mean([r["curve"] for r in rs], axis=0)
                    for k, v in row.items():
                        out[k].append(v)
    res = {k: (np.stack(v) if k == "curve" else np.array(v)) for k, v in out.items()}
    res["mantissa"] = res["mantissa"].astype(np.int64)
    keys = list(refs)
    res["ref_problem"] = np.array([k[0] for k in keys])
    res["ref_optimizer"] = np.array([k[1] for k in keys])
    res["ref_final"] = np.array([refs[k][0] for k in keys])
    res["ref_initial"] = np.array([refs[k][1] for k in keys])
    res["ref_curve"] = np.stack([refs[k][2] for k in keys])
    # summary per (problem, optimizer, component)
    summ: dict[str, list] = {k: [] for k in ("s_problem", "s_optimizer", "s_component",
                                             "s_fine_down_to", "s_first_degraded",
                                             "s_first_failed")}
    ms = sorted(cfg.mantissas, reverse=True)
    for p, o in keys:
        for c in cfg.components:
            if not _applies(p, o, c):
                continue
            sel = (res["problem"] == p) & (res["optimizer"] == o) & (res["component"] == c)
            worst = {int(m): lp.CLASSES.index(str(k)) for m, k in
                     zip(res["mantissa"][sel], res["cls"][sel])}
            fine_to = 0
            for m in ms:  # the smallest M with every M' >= M fine
                if worst[m] > 0:
                    break
                fine_to = m
            first_deg = next((m for m in ms if worst[m] >= 1), 0)
            first_fail = next((m for m in ms if worst[m] >= 2), 0)
            for k, v in zip(summ, (p, o, c, fine_to, first_deg, first_fail)):
                summ[k].append(v)
    for k, v in summ.items():
        res[k] = np.array(v, np.int64) if k.startswith("s_f") else np.array(v)
    res["mantissas"] = np.array(ms, np.int64)
    res["mode"] = np.array(cfg.mode)
    res["mlp_seeds"] = np.int64(len(cfg.seeds))
    return res


@experiment("mantissa_sweep", MantissaSweepConfig, version="3", units=_units,
            combine=_combine)
def mantissa_sweep(cfg: MantissaSweepConfig, unit: dict) -> dict:
    """Mantissa width M per buffer (weights, g, m, v) for AdamW and Muon: what breaks first."""
    p, o, c = unit["problem"], unit["optimizer"], unit["component"]
    q = None if c == "fp" else Quantizer(custom(8, unit["mantissa"]), cfg.mode, scale=1.0)
    scheme, weights, states = component_setup(c, q)
    steps = cfg.steps(p)
    opt = lp.make_optimizer(o, steps, scheme=scheme, weights=weights, states=states,
                            **cfg.recipe(p))
    prob = cfg.problem(p, o, unit["seed"])
    return lp.run_training(prob, opt, steps, key=unit["seed"], batch_size=cfg.batch(p),
                           points=cfg.points)
