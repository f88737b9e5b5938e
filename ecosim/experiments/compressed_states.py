"""How low can static memory go: ECO with compressed optimizer states (figures
``compressed_states`` and ``lowmem_pareto``).

The ECO paper removes the master weights but keeps FP32 moments: 9 bytes/param for AdamW
against 12 with FP32 master weights. This experiment compresses the moments too (BF16 plain
casts; FP8 E4M3/E5M2 and FP4 E2M1 with per-block absmax scales; RTN or SR) and trains the
teacher-student MLP of :mod:`.lowprec` with FP8 E4M3 weights (row-wise absmax, as in the
paper) under each configuration, for AdamW and Muon, measuring

* the final validation loss (per seed, and its mean) and a loss curve;
* static bytes per parameter: the formula at scale (:func:`ecosim.memory.bytes_per_param`,
  scales left out as in the paper's 12 and 9, every parameter a matrix for Muon) and the
  exact bytes of this toy MLP (:func:`ecosim.memory.static_bytes`, scales and biases
  included);
* ``inject_kept`` and ``inject_lost``: the time-averaged fraction of ECO's momentum
  injection (in energy) that the stored momentum actually kept, and the fraction of injected
  elements whose stored momentum did not move at all
  (:meth:`ecosim.optim.QuantizedOptimizer.step` diagnostics): what a momentum grid coarser
  than the injection does to ECO, measured;
* ``m_over_g``: ``||m|| / ||g||`` over the second half of training (seeds that did not
  diverge): how much of the stored momentum is injected error rather than averaged gradient.

A configuration is a short spec string: ``SCHEME-WMODE`` then optional tokens
``w:FMT`` (weight format, default E4M3), ``m:FMT[-MODE]``, ``v:FMT[-MODE]``,
``master:FMT[-MODE]`` (state formats, default FP32; mode default RTN) and ``gain:X`` (Muon's
experimental ECO gain). Example: ``"eco-sr m:e4m3-sr v:bf16"``.
"""
from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import numpy as np

from .. import memory
from ..core.formats import get as get_format
from ..core.quantizer import Quantizer
from . import lowprec as lp
from .base import (Check, ConfigError, at_least, distinct, experiment, interval, non_negative,
                   nonempty, positive)

__all__ = ["CompressedStatesConfig", "parse_spec", "ADAMW_SPECS", "MUON_SPECS"]

ADAMW_SPECS = (
    "fp",
    "master-rtn",                                   # 12 B: the paper's baseline
    "naive-rtn", "naive-sr", "eco-rtn", "eco-sr",   # 9 B: the paper's ECO point
    "master-rtn master:bf16 m:bf16 v:bf16",         # 6 B: BF16 master and moments
    "eco-sr m:bf16 v:bf16",                         # 5 B
    # ECO with RTN weights: the injection must survive the momentum's own rounding
    "eco-rtn m:bf16 v:bf16", "eco-rtn m:e4m3 v:bf16", "eco-rtn m:e5m2 v:bf16",
    "eco-rtn m:e2m1 v:bf16", "naive-rtn m:e2m1 v:bf16", "master-rtn m:e2m1 v:bf16",
    "eco-sr m:bf16 v:e4m3",                         # v in E4M3: its range, not ECO, breaks
    "eco-sr m:e4m3-sr v:e5m2", "naive-sr m:e4m3-sr v:e5m2",          # 3 B
    "eco-sr m:e2m1-sr v:e5m2",                                        # 2.5 B
    "eco-sr w:e2m1 m:e2m1-sr v:e5m2",                                 # 2 B
)
MUON_SPECS = (
    "fp",
    "master-rtn",                                   # 8 B
    "eco_exact-sr",                                 # 9 B: error feedback, = master-sr
    "naive-rtn", "naive-sr", "eco-rtn", "eco-sr",   # 5 B (eco: experimental)
    "eco-sr gain:2",
    "eco-sr m:bf16", "naive-sr m:bf16",             # 3 B
    "eco-sr m:e4m3-sr", "naive-sr m:e4m3-sr",       # 2 B
    "naive-sr m:e2m1-sr",                           # 1.5 B
    "naive-sr w:e2m1 m:e2m1-sr",                    # 1 B
)
_SCHEMES = ("fp", "master", "naive", "eco", "eco_exact", "kahan")


@dataclasses.dataclass(frozen=True)
class Spec:
    """A parsed configuration string."""

    text: str
    scheme: str
    wmode: str
    weights: str
    states: dict
    gain: float


def parse_spec(text: str) -> Spec:
    """Parse ``"SCHEME-WMODE [w:FMT] [m:FMT[-MODE]] [v:...] [master:...] [gain:X]"``."""
    tokens = text.split()
    if not tokens:
        raise ValueError("an empty configuration")
    head = tokens[0]
    scheme, _, wmode = head.partition("-")
    if scheme not in _SCHEMES:
        raise ValueError(f"{text!r}: scheme must be one of {_SCHEMES}")
    if scheme == "fp":
        if wmode or len(tokens) > 1:
            raise ValueError(f"{text!r}: 'fp' takes no options")
    elif wmode not in ("rtn", "sr"):
        raise ValueError(f"{text!r}: write the weight rounding as SCHEME-rtn or SCHEME-sr")
    weights, states, gain = "float8_e4m3fn", {}, 1.0
    for tok in tokens[1:]:
        key, sep, val = tok.partition(":")
        if not sep:
            raise ValueError(f"{text!r}: option {tok!r} is not KEY:VALUE")
        if key == "w":
            weights = get_format(val).name
        elif key in ("m", "v", "master"):
            fmt, _, mode = val.partition("-")
            mode = mode or "rtn"
            if mode not in ("rtn", "sr"):
                raise ValueError(f"{text!r}: mode of {key} must be rtn or sr")
            states[key] = (get_format(fmt).name, mode)
        elif key == "gain":
            gain = float(val)
        else:
            raise ValueError(f"{text!r}: unknown option {key!r}")
    if "master" in states and scheme != "master":
        raise ValueError(f"{text!r}: a master format needs scheme 'master'")
    return Spec(text, scheme, wmode, weights, states, gain)


def _state_q(fmt: str, mode: str, block: int) -> Quantizer:
    f = get_format(fmt)
    if f.bits >= 16:
        return Quantizer(f, mode, scale=1.0)  # a plain cast
    return Quantizer(f, mode, granularity=block if block else "row", scale="absmax")


@dataclasses.dataclass(frozen=True, kw_only=True)
class CompressedStatesConfig(lp.OptimizerConfig):
    """ECO (and baselines) with compressed states on the MLP, AdamW and Muon."""

    adamw_specs: tuple[str, ...] = ADAMW_SPECS
    muon_specs: tuple[str, ...] = MUON_SPECS
    state_block: int = 8       # elements per FP8/FP4 state scale (0: one per row)
    mlp_sizes: tuple[int, ...] = (16, 32, 32, 8)
    mlp_train: int = 2048
    steps: int = 500
    batch_size: int = 64
    points: int = 25
    seeds: tuple[int, ...] = (0, 1)
    adamw_lr: float = 0.04     # peak learning rates, tuned on the FP32 runs
    muon_lr: float = 0.04
    b2: float = 0.999          # AdamW's (and Muon's AdamW parameters')

    SMOKE: ClassVar[dict] = {
        "adamw_specs": ("fp", "master-rtn", "eco-sr", "eco-rtn m:e4m3 v:bf16"),
        "muon_specs": ("fp", "master-rtn", "eco_exact-sr", "eco-sr m:bf16"),
        "mlp_sizes": (8, 16, 8), "mlp_train": 256, "steps": 40, "batch_size": 32,
        "points": 5, "seeds": (0,)}
    CHECKS: ClassVar[dict] = {
        "adamw_specs": (Check("the 'fp' reference among the specs", lambda t: "fp" in t,
                              each=False), distinct),
        "muon_specs": (Check("the 'fp' reference among the specs", lambda t: "fp" in t,
                             each=False), distinct),
        "state_block": non_negative,
        "mlp_sizes": (Check("two or more widths", lambda t: len(t) >= 2, each=False),
                      at_least(1)),
        "mlp_train": at_least(1), "steps": at_least(1), "batch_size": at_least(1),
        "points": at_least(1), "seeds": (nonempty, distinct, non_negative),
        "adamw_lr": positive, "muon_lr": positive, "b2": interval("[0, 1)")}

    def __post_init__(self):
        super().__post_init__()
        for field in ("adamw_specs", "muon_specs"):
            self.parse_entries(field, parse_spec)
        # every width is the last axis of some weight or bias
        if self.state_block and any(n % self.state_block for n in self.mlp_sizes):
            raise ConfigError("CompressedStatesConfig.state_block must divide every layer "
                              "width (the last axis of each weight and bias)")
        if self.batch_size > self.mlp_train:
            raise ConfigError(f"CompressedStatesConfig.batch_size: expected at most mlp_train "
                              f"({self.mlp_train}), got {self.batch_size}")
        if self.points > self.steps:
            raise ConfigError(f"CompressedStatesConfig.points: expected at most steps "
                              f"({self.steps}), got {self.points}")


    def recipe(self, problem: str = "mlp") -> dict:
        """The keyword arguments of :func:`.lowprec.make_optimizer` (the MLP's)."""
        return {"adamw_lr": self.adamw_lr, "muon_lr": self.muon_lr, "b2": self.b2,
                **self._shared()}


def build(cfg: CompressedStatesConfig, optimizer: str, spec: Spec):
    """The optimizer of one configuration."""
    weights = None
    if spec.scheme != "fp":
        weights = Quantizer(spec.weights, spec.wmode, granularity="row")
    states = {k: _state_q(f, m, cfg.state_block) for k, (f, m) in spec.states.items()}
    return lp.make_optimizer(optimizer, cfg.steps, scheme=spec.scheme, weights=weights,
                             states=states, eco_gain=spec.gain, **cfg.recipe())


def _bytes(cfg, optimizer: str, opt, spec: Spec) -> tuple[float, float]:
    """(formula bytes/param at scale, exact bytes/param of this MLP)."""
    if spec.scheme == "fp":
        at_scale = memory.bytes_per_param(optimizer, "fp", states=dict(opt.states)).total
    else:
        at_scale = memory.bytes_per_param(opt).total
    prob = lp.make_problem("mlp", optimizer, rosen_shape=(2, 1), mlp_sizes=cfg.mlp_sizes,
                           mlp_train=cfg.mlp_train, key=0)
    shapes = {p.name: p.shape for p in prob.param_info}
    n = sum(math.prod(s) for s in shapes.values())
    return at_scale, memory.static_bytes(opt, shapes).total / n


def _units(cfg: CompressedStatesConfig) -> list[dict]:
    return [{"optimizer": o, "spec": s, "seed": seed}
            for o, specs in (("adamw", cfg.adamw_specs), ("muon", cfg.muon_specs))
            for s in specs for seed in cfg.seeds]


def _combine(cfg: CompressedStatesConfig, units: list[dict], results: list[dict]) -> dict:
    """One row per (optimizer, configuration): mean over seeds, bytes, class, kept injection."""
    out: dict[str, list] = {k: [] for k in (
        "optimizer", "spec", "scheme", "wmode", "weights", "m", "v", "master", "final",
        "final_min", "final_max", "initial", "reference", "ratio", "cls", "diverged",
        "inject_kept", "inject_lost", "m_over_g", "bytes_at_scale", "bytes_toy")}
    curves = []
    for o, specs in (("adamw", cfg.adamw_specs), ("muon", cfg.muon_specs)):
        runs = {s: [r for u, r in zip(units, results) if u["optimizer"] == o
                    and u["spec"] == s] for s in specs}
        fp = runs["fp"]
        ref = float(np.mean([float(r["final"]) for r in fp]))
        ini = float(np.mean([float(r["initial"]) for r in fp]))
        for s in specs:
            spec = parse_spec(s)
            rs = runs[s]
            finals = np.array([float(r["final"]) for r in rs])
            final = float(finals.mean())
            kept = [float(r["inject_kept"]) for r in rs if math.isfinite(float(r["inject_kept"]))]
            lost = [float(r["inject_lost"]) for r in rs if math.isfinite(float(r["inject_lost"]))]
            mg = [float(r["m_over_g"]) for r in rs if math.isfinite(float(r["m_over_g"]))]
            opt = build(cfg, o, spec)
            at_scale, toy = _bytes(cfg, o, opt, spec)
            row = {"optimizer": o, "spec": s, "scheme": spec.scheme, "wmode": spec.wmode,
                   "weights": "fp32" if spec.scheme == "fp" else spec.weights,
                   "m": "-".join(spec.states.get("m", ("fp32",))),
                   "v": "-".join(spec.states.get("v", ("fp32",))),
                   "master": ("-".join(spec.states.get("master", ("fp32",)))
                              if spec.scheme == "master" else ""),
                   "final": final, "final_min": float(finals.min()),
                   "final_max": float(finals.max()), "initial": ini, "reference": ref,
                   "ratio": final / ref if math.isfinite(final) else math.inf,
                   "cls": lp.classify(final, ref, ini),
                   "diverged": any(bool(r["diverged"]) for r in rs),
                   "inject_kept": float(np.mean(kept)) if kept else math.nan,
                   "inject_lost": float(np.mean(lost)) if lost else math.nan,
                   "m_over_g": float(np.mean(mg)) if mg else math.nan,
                   "bytes_at_scale": at_scale, "bytes_toy": toy}
            for k, v in row.items():
                out[k].append(v)
            with np.errstate(invalid="ignore"):
                curves.append(np.mean([r["curve"] for r in rs], axis=0))
    res = {k: np.array(v) for k, v in out.items()}
    res["curve"] = np.stack(curves)
    res["steps"] = np.int64(cfg.steps)
    res["n_seeds"] = np.int64(len(cfg.seeds))
    # the smallest configuration per optimizer that is fine / that still trains (not failed)
    for o in ("adamw", "muon"):
        for label, ok in (("fine", ("fine",)), ("trains", ("fine", "degraded"))):
            sel = np.flatnonzero((res["optimizer"] == o) & np.isin(res["cls"], ok))
            best = sel[np.lexsort((res["final"][sel], res["bytes_at_scale"][sel]))[0]]
            res[f"smallest_{label}_{o}"] = np.array(res["spec"][best])
    return res


@experiment("compressed_states", CompressedStatesConfig, version="3", units=_units,
            combine=_combine)
def compressed_states(cfg: CompressedStatesConfig, unit: dict) -> dict:
    """ECO with BF16/FP8/FP4 moments (RTN, SR) on the MLP: loss vs static bytes per param."""
    spec = parse_spec(unit["spec"])
    opt = build(cfg, unit["optimizer"], spec)
    prob = lp.make_problem("mlp", unit["optimizer"], rosen_shape=(2, 1),
                           mlp_sizes=cfg.mlp_sizes, mlp_train=cfg.mlp_train, key=unit["seed"])
    return lp.run_training(prob, opt, cfg.steps, key=unit["seed"], batch_size=cfg.batch_size,
                           points=cfg.points, track_momentum=True)
