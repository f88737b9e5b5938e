"""Where ECO with AdamW breaks, and what each of ECO's approximations costs (MLP).

The problem is the teacher-student MLP of :mod:`ecosim.experiments.mlp_methods` (8 inputs, two
hidden layers of width ``width``, 2 outputs, linear teacher, label noise 0.3, 2048/512
examples), trained with the paper's recipe (AdamW ``b = (0.9, 0.98)``, ``eps = 1e-9``, 10%
warmup from 0.01x then cosine to 0.1x the peak, batch 8). The three weight matrices are
stored in the weight format; the biases stay in float32.

Part 1, ``breakdown`` (``steps`` updates): INT4 with one absmax scale per tensor, ECO with
round-to-nearest (RTN), which diverges, beside controlled variants that change one thing each
(:data:`VARIANTS`): a fixed scale (the initial absmax scale of each matrix, kept), SGD with
momentum instead of AdamW (no ``d``), a slower second moment (``b2`` 0.999, 0.9999), tanh
instead of ReLU (no dead units; per tensor and per row), master weights, and FP8 E4M3 with
row-wise scales for contrast. Every update records the largest ``|m / d|`` over the stored
matrices (``d = sqrt(v / (1 - b2**n)) + eps``: the factor ECO's injection multiplies by; NaN
for SGDM), the largest weight scale relative to its initial value, and the batch loss (these
traces are NaN for part 2, which records only outcomes and losses).

Part 2, ``approx`` (``approx_steps`` updates, FP8 E4M3 row-wise weights, decoupled weight decay
``approx_weight_decay``): the schemes that remove ECO's approximations one at a time
(:data:`APPROX_SCHEMES`): ``master``; ``eco_exact`` (error feedback into the weights: none of
ECO's approximations); ``eco_momentum_exact`` (the error given back through the momentum,
sized with the current ``d``: only the ``e_prev ~ e`` approximation removed); ``eco_wd``
(the memory-free rule with the ``(1 - lr wd)`` factor); ``eco`` (the memory-free rule), each
with SR and RTN.

Outcome of a run (:data:`OUTCOMES`): ``diverged`` (a non-finite loss or gradient, or the
validation loss above ``stop_factor`` times its initial value at an evaluation: the run stops
there), ``stalled`` (completed, but the final validation loss above ``stall_frac`` times the
initial one), else ``trained``. A seed fixes the initial weights, the batch order and the SR
draws (:func:`ecosim.train.train`), the same for every variant (paired).
"""
from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import numpy as np

from .. import recipes
from ..core import rng
from ..optim import adamw, sgdm
from ..problems import MLP
from ..core.quantizer import Quantizer
from ..recipes import weight_quantizer
from ..train import initial_point, train
from .base import at_least, distinct, experiment, interval, non_negative, nonempty, one_of, positive
from .mlp_methods import single_thread_blas
from .mlp_recipe import MLPRecipe

__all__ = ["EcoAdamConfig", "VARIANTS", "APPROX_SCHEMES", "OUTCOMES", "variant_spec"]

#: part 1: name -> what the variant changes from ``eco_rtn`` (INT4 per tensor, AdamW, ReLU)
VARIANTS = {
    "eco_rtn": {},
    "fixed_scale": {"scale": "fixed"},
    "sgdm": {"opt": "sgdm"},
    "b2_0.999": {"b2": 0.999},
    "b2_0.9999": {"b2": 0.9999},
    "tanh": {"activation": "tanh"},
    "tanh_row": {"activation": "tanh", "granularity": "row"},
    "master_rtn": {"scheme": "master"},
    "fp8_row": {"fmt": "fp8"},
}
#: part 2: the schemes, from no approximation to all of ECO's
APPROX_SCHEMES = ("master", "eco_exact", "eco_momentum_exact", "eco_wd", "eco")
#: how a run ended
OUTCOMES = ("trained", "stalled", "diverged")


@dataclasses.dataclass(frozen=True, kw_only=True)
class EcoAdamConfig(MLPRecipe):
    """Where ECO+AdamW breaks (part 1) and the cost of each approximation (part 2)."""

    variants: tuple[str, ...] = tuple(VARIANTS)
    approx_schemes: tuple[str, ...] = APPROX_SCHEMES
    approx_modes: tuple[str, ...] = ("sr", "rtn")
    approx_steps: int = 600
    approx_weight_decay: float = 0.1
    width: int = 32
    lr: float = 3e-3                   # AdamW peak of warmup + cosine
    sgdm_lr: float = 0.1               # SGDM peak (EMA momentum)
    eval_every: int = 50
    stall_frac: float = 0.5
    SMOKE: ClassVar[dict] = {"variants": ("eco_rtn", "sgdm", "fixed_scale"),
                             "approx_schemes": ("master", "eco_momentum_exact", "eco"),
                             "approx_modes": ("sr",), "seeds": 2, "steps": 60,
                             "approx_steps": 40, "width": 8, "n_train": 256, "n_val": 64,
                             "eval_every": 10}
    CHECKS: ClassVar[dict] = {
        "variants": (nonempty, distinct, one_of(sorted(VARIANTS))),
        "approx_schemes": (distinct, one_of(sorted(APPROX_SCHEMES))),
        "approx_modes": (distinct, one_of(["rtn", "sr"])), "approx_steps": at_least(1),
        "approx_weight_decay": non_negative, "width": at_least(1), "lr": positive,
        "sgdm_lr": positive, "eval_every": at_least(1), "stall_frac": interval("(0, 1]")}


def variant_spec(cfg: EcoAdamConfig, unit: dict) -> dict:
    """The full description of a unit's run: optimizer, scheme, rounding, format, scales,
    activation, ``b2``, weight decay and number of steps."""
    if unit["part"] == "breakdown":
        spec = {"opt": "adamw", "scheme": "eco", "mode": "rtn", "fmt": "int4",
                "granularity": "tensor", "scale": "absmax", "activation": "relu",
                "b2": cfg.b2, "wd": 0.0, "wd_corrected": False, "steps": cfg.steps}
        spec.update(VARIANTS[unit["variant"]])
        return spec
    scheme = unit["variant"]
    return {"opt": "adamw", "scheme": "eco" if scheme == "eco_wd" else scheme,
            "mode": unit["mode"], "fmt": "fp8", "granularity": "row", "scale": "absmax",
            "activation": "relu", "b2": cfg.b2, "wd": cfg.approx_weight_decay,
            "wd_corrected": scheme == "eco_wd", "steps": cfg.approx_steps}


def _units(cfg: EcoAdamConfig) -> list[dict]:
    units = [{"part": "breakdown", "variant": v, "mode": "rtn", "seed": s}
             for v in cfg.variants for s in range(cfg.seeds)]
    units += [{"part": "approx", "variant": v, "mode": m, "seed": s}
              for m in cfg.approx_modes for v in cfg.approx_schemes for s in range(cfg.seeds)]
    return units


def _quantizer(spec: dict) -> Quantizer:
    fmt = "int4" if spec["fmt"] == "int4" else recipes.WEIGHT_FORMATS[spec["fmt"]][0]
    return Quantizer(fmt, spec["mode"], granularity=spec["granularity"])


@experiment("eco_adam_breakdown", EcoAdamConfig, version="1", units=_units)
def eco_adam_breakdown(cfg: EcoAdamConfig, unit: dict) -> dict:
    """Where ECO+AdamW breaks on the MLP (INT4 per tensor) and what its approximations cost."""
    spec = variant_spec(cfg, unit)
    steps = spec["steps"]
    problem = MLP((8, cfg.width, cfg.width, 2), spec["activation"], n_train=cfg.n_train,
                  n_val=cfg.n_val, key=cfg.data_key, noise=cfg.noise, teacher=())
    names = problem.quantized_names("matrices")
    key = rng.fold_in(cfg.key, "eco_adam", unit["seed"])
    q = _quantizer(spec)
    p0 = problem.init(rng.fold_in(key, "init"))   # train()'s initial point for this key
    if spec["scale"] == "fixed":  # the initial absmax scale of each matrix, kept for good
        policy = {n: dataclasses.replace(q, scale=float(q.scales(p0[n]).max())) for n in names}
    else:
        policy = {n: q for n in names}
    if spec["opt"] == "sgdm":
        opt = sgdm(recipes.schedule(cfg.sgdm_lr, steps), cfg.b1, scheme=spec["scheme"],
                   weights=policy)
    else:
        opt = adamw(recipes.schedule(cfg.lr, steps), cfg.b1, spec["b2"], cfg.eps, spec["wd"],
                    scheme=spec["scheme"], weights=policy,
                    wd_corrected_injection=spec["wd_corrected"])
    w_init, _ = initial_point(problem, opt, key)
    init_val = problem.val_loss(w_init)
    scale0 = {n: policy[n].scales(w_init[n]) for n in names}
    n_rec = max(cfg.steps, cfg.approx_steps)  # one length for every unit (NaN after the end)
    trace = {k: np.full(n_rec, np.nan) for k in ("m_over_d", "scale_growth", "loss")}

    def record(t, params, state, rec):
        trace["loss"][t] = rec["loss"]
        growth = [float(np.max(policy[n].scales(params[n]) / scale0[n])) for n in names]
        trace["scale_growth"][t] = max(growth)
        if spec["opt"] == "adamw":
            bc2 = 1.0 - spec["b2"] ** state.step
            r = [np.max(np.abs(state.m[n] / (np.sqrt(state.v[n] / bc2) + cfg.eps)))
                 for n in names]
            trace["m_over_d"][t] = float(max(r))

    cap = cfg.stop_factor * init_val

    def too_high(t, rec):
        return not (math.isnan(rec["val_loss"]) or rec["val_loss"] <= cap)

    with np.errstate(over="ignore", invalid="ignore", divide="ignore"), single_thread_blas():
        if unit["part"] == "breakdown":  # per-step traces
            h = train(problem, opt, steps, key=key, batch_size=cfg.batch_size, log_every=1,
                      eval_every=cfg.eval_every, callbacks=[record], stop=too_high,
                      diverge_on_loss=True, fields=("val_loss",))
        else:  # only the outcome and the final loss (traces left NaN: cheaper)
            h = train(problem, opt, steps, key=key, batch_size=cfg.batch_size,
                      log_every=cfg.eval_every, stop=too_high, diverge_on_loss=True,
                      fields=("val_loss",))
    final = h.final_val_loss if h.outcome == "completed" else math.nan
    if not (h.outcome == "completed" and math.isfinite(final)):
        outcome = "diverged"
    elif final > cfg.stall_frac * init_val:
        outcome = "stalled"
    else:
        outcome = "trained"
    val = np.full(n_rec, np.nan)  # validation loss after update t (every eval_every-th)
    val[h["step"].astype(np.int64)] = h["val_loss"]
    return {**trace, "val_loss": val, "init_val_loss": np.float64(init_val),
            "final_val_loss": np.float64(final), "outcome": np.array(outcome),
            "stopped_at": np.int64(h.stopped_at)}
