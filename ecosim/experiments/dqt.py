"""DQT's claims as measured rows on the teacher-student MLP (figures ``dqt`` and ``dqt_claims``).

Zhao et al., "Direct Quantized Training of Language Models with Stochastic Rounding" (arXiv
2412.04787) train with no master copy: the weights live on a ternary or n-bit integer grid
and every AdamW update is written onto it with stochastic rounding (:func:`ecosim.optim.dqt`).
They claim (1) this converges, even ternary; (2) 8-bit DQT is on par with BitNet b1.58;
(3) optimizer states in BF16 or FP8 instead of FP32 cost little; (4) a model trained at 8 bits
can be run with ternary weights. This experiment runs each claim's comparison on the MLP of
:mod:`ecosim.experiments.mlp_methods` (8 inputs, ``depth`` ReLU layers of width ``width``, 2
outputs, linear teacher with label noise 0.3, 2048 training and 512 validation examples,
AdamW with ``b = (0.9, 0.98)``, ``eps = 1e-9``, warmup + cosine, batch 8), training with
:func:`~ecosim.experiments.mlp_methods.run_training`. The three weight matrices are the
quantized tensors; the biases stay in float32.

Methods (the ``method`` field of a unit):

* ``fp32``: AdamW, FP32 weights and states (the reference of every gap);
* ``bitnet``: BitNet b1.58 quantization-aware training: FP32 master weights, the forward on
  absmean-ternary weights and 8-bit per-row absmax activations, gradients by the
  straight-through estimator (:class:`ecosim.problems.QuantizedForward`); its validation loss
  is that of the quantized network;
* ``dqt_{B}_sr``: DQT with weights ``B`` in ``bits`` (``ternary``, ``int2``, ``int4``,
  ``int8``) and stochastic rounding, and ``dqt_{B}_rtn`` for ``B`` in ``rtn_bits`` (round to
  nearest, for contrast); the grid of each step is scaled by ``scale`` of the previous weights
  (``"max"``: the DQT reference code's signed maximum, with which an integer grid never grows;
  see :mod:`ecosim.optim.dqt`);
* ``dqt_{B}_sr_absmax``: DQT+SR with ecosim's default absmax rule instead, for ``B`` in
  ``absmax_bits``: on a two's-complement grid a weight saturated at the most negative code
  grows that scale by ``(rho + 1) / rho`` (x2 for INT2);
* ``eco_{B}_sr``: ECO's momentum injection on the same grids (``eco_bits``), SR;
* ``dqt_{S}_sr_{F}``: DQT at ``states_bits`` with both AdamW moments stored in ``F`` in
  ``state_formats`` (``bf16``: a plain cast; ``e4m3``: FP8 with row-wise absmax scales), RTN;
* ``dqt_{S}_sr_act8``: DQT at ``states_bits`` with the same activation quantization as the
  BitNet baseline (INT{act_bits}, one absmax scale per row, in the training and the validation
  forward): the comparison of claim (2) with the two sides matched, as DQT's reference
  BitLinear quantizes activations too (``dqt_{S}_sr`` keeps FP32 activations);
* ``dqt_{S}_sr_env_bf16`` and ``dqt_{S}_sr_env_fp8``: claim (3)'s training environments. BF16:
  every layer's weights and inputs rounded to BF16 in the forward (products accumulated in
  float32, as BF16 matmul units do) and both AdamW moments stored in BF16. FP8: every layer's
  input in FP8 E4M3 with one absmax scale per row, and both moments in E4M3 with row-wise
  absmax scales;
* ``dqt_{S}_sr_ternary_inference``: the ``dqt_{S}_sr`` run again (same key, so the same
  training trajectory), its validation loss taken with every weight matrix re-quantized to
  ternary with an absmean scale (:class:`~ecosim.problems.QuantizedForward` with
  ``train=False``): the 8-bit model run ternary at inference.

One seed fixes the initial weights, the mini-batch order and the SR draws of every method
(paired by seed). Each unit records what :func:`~ecosim.experiments.mlp_methods.run_training`
returns (curve, final and initial validation loss, divergence) and the static bytes per
parameter of the optimizer (:func:`ecosim.memory.bytes_per_param`). Judging the claims
(outcomes, paired gaps, intervals, verdicts) is :mod:`ecosim.claims.dqt`'s job.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal

import numpy as np

from .. import memory, recipes
from ..core import rng
from ..optim import adamw, dqt as dqt_optimizer
from ..problems import QuantizedForward, bitnet_quantizers
from ..core.quantizer import Quantizer
from .base import at_least, distinct, experiment, non_negative, nonempty, one_of, positive
from .mlp_methods import make_problem, run_training
from .mlp_recipe import MLPRecipe

__all__ = ["DQTConfig", "BITS", "ENVIRONMENTS", "environment_quantizers", "methods",
           "make_optimizer"]

#: weight grids of DQT, by name -> the ``bits`` argument of :func:`ecosim.optim.dqt`
BITS = {"ternary": "ternary", "int2": 2, "int4": 4, "int8": 8}

#: claim (3)'s training environments: the format of the forward's operands and of AdamW's
#: moments
ENVIRONMENTS = {"bf16": "bf16", "fp8": "e4m3"}


def environment_quantizers(env: str) -> tuple[Quantizer | None, Quantizer]:
    """``(weight_q, act_q)`` of the forward in environment ``env`` (a key of
    :data:`ENVIRONMENTS`): BF16 rounds weights and inputs to BF16 (a plain cast); FP8 rounds
    each layer's input to E4M3 with one absmax scale per row (the weights are on DQT's grid)."""
    if env == "bf16":
        cast = Quantizer("bf16", "rtn", granularity="tensor", scale=1.0)
        return cast, cast
    if env == "fp8":
        return None, Quantizer("e4m3", "rtn", granularity="row", scale="absmax")
    raise ValueError(f"environment must be one of {list(ENVIRONMENTS)}, got {env!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DQTConfig(MLPRecipe):
    """DQT against FP32 AdamW, BitNet b1.58 and ECO on the MLP (see the module docstring)."""

    width: int = 32                                # hidden width
    depth: int = 2                                 # hidden layers
    steps: int = 1000
    lr: float = 3e-3                               # peak of warmup + cosine
    weight_decay: float = 0.0
    bits: tuple[str, ...] = ("ternary", "int2", "int4", "int8")   # DQT grids
    rtn_bits: tuple[str, ...] = ("ternary", "int8")  # DQT with RTN, for contrast
    eco_bits: tuple[str, ...] = ("ternary", "int2", "int4", "int8")  # ECO+SR on these grids
    scale: Literal["max", "absmax"] = "max"        # step scale from the previous weights
    absmax_bits: tuple[str, ...] = ("int2",)       # DQT+SR with the absmax scale, contrast
    states_bits: Literal["ternary", "int2", "int4", "int8"] = "int8"  # claims (3) and (4)
    state_formats: tuple[str, ...] = ("bf16", "e4m3")               # m and v stored in these
    act_bits: int = 8                              # BitNet's activation bits
    log_every: int = 25
    SMOKE: ClassVar[dict] = {"width": 8, "seeds": 2, "steps": 30, "n_train": 128, "n_val": 64,
                             "log_every": 10, "lr": 1e-2}
    CHECKS: ClassVar[dict] = {
        "width": at_least(1), "depth": at_least(1), "seeds": at_least(2), "lr": positive,
        "weight_decay": non_negative, "bits": (nonempty, distinct, one_of(*BITS)),
        "rtn_bits": (distinct, one_of(*BITS)), "eco_bits": (distinct, one_of(*BITS)),
        "absmax_bits": (distinct, one_of(*BITS)),
        "state_formats": (distinct, one_of("bf16", "fp16", "e4m3", "e5m2")),
        "act_bits": one_of(4, 8), "log_every": at_least(1)}


def methods(cfg: DQTConfig) -> list[str]:
    """The method names a config runs, in order (see the module docstring)."""
    s = cfg.states_bits
    out = ["fp32", "bitnet"]
    out += [f"dqt_{b}_sr" for b in cfg.bits]
    out += [f"dqt_{b}_rtn" for b in cfg.rtn_bits]
    out += [f"eco_{b}_sr" for b in cfg.eco_bits]
    if cfg.scale != "absmax":
        out += [f"dqt_{b}_sr_absmax" for b in cfg.absmax_bits]
    if f"dqt_{s}_sr" not in out:  # the run claims (3) and (4) compare with
        out.append(f"dqt_{s}_sr")
    out += [f"dqt_{s}_sr_{f}" for f in cfg.state_formats]
    out.append(f"dqt_{s}_sr_act{cfg.act_bits}")
    out += [f"dqt_{s}_sr_env_{e}" for e in ENVIRONMENTS]
    out.append(f"dqt_{s}_sr_ternary_inference")
    return out


def make_optimizer(cfg: DQTConfig, method: str, names: tuple[str, ...]):
    """The optimizer of ``method`` (a name from :func:`methods`) on the weight matrices
    ``names``."""
    sched = recipes.schedule(cfg.lr, cfg.steps)
    hyper = dict(b1=cfg.b1, b2=cfg.b2, eps=cfg.eps, weight_decay=cfg.weight_decay)
    if method in ("fp32", "bitnet"):
        return adamw(sched, scheme="fp", **hyper)
    parts = method.split("_")
    if len(parts) < 3 or parts[0] not in ("dqt", "eco") or parts[1] not in BITS:
        raise ValueError(f"method {method!r}: expected 'fp32', 'bitnet', 'dqt_BITS_MODE...' "
                         f"or 'eco_BITS_sr' with BITS in {list(BITS)}")
    kind, bits, mode, rest = parts[0], parts[1], parts[2], parts[3:]
    states, scale = None, cfg.scale
    if rest == ["absmax"]:
        scale = "absmax"
    elif len(rest) == 2 and rest[0] == "env" and rest[1] in ENVIRONMENTS:
        states = {"m": ENVIRONMENTS[rest[1]], "v": ENVIRONMENTS[rest[1]]}
    elif rest and rest != ["ternary", "inference"] and rest != [f"act{cfg.act_bits}"]:
        if len(rest) != 1:
            raise ValueError(f"method {method!r}: unknown suffix {'_'.join(rest)!r}")
        states = {"m": rest[0], "v": rest[0]}
    return dqt_optimizer(sched, BITS[bits], scheme="naive" if kind == "dqt" else "eco",
                         names=names, mode=mode, states=states, scale=scale, **hyper)


def _units(cfg: DQTConfig) -> list[dict]:
    return [{"method": m, "seed": s} for m in methods(cfg) for s in range(cfg.seeds)]


@experiment("dqt", DQTConfig, version="2", units=_units)
def dqt(cfg: DQTConfig, unit: dict) -> dict:
    """One method on one seed: the curve, the final losses, the divergence flag, the bytes."""
    mlp = make_problem(cfg, cfg.width)
    names = mlp.quantized_names("matrices")
    method = unit["method"]
    problem = mlp
    if method == "bitnet":
        problem = QuantizedForward(mlp, *bitnet_quantizers(cfg.act_bits))
    elif method.endswith("_ternary_inference"):
        ternary = Quantizer("ternary", "rtn", granularity="tensor", scale="absmean")
        problem = QuantizedForward(mlp, ternary, None, train=False)
    elif method.endswith(f"_act{cfg.act_bits}"):
        problem = QuantizedForward(mlp, None, bitnet_quantizers(cfg.act_bits)[1])
    elif "_env_" in method:
        problem = QuantizedForward(mlp, *environment_quantizers(method.rsplit("_", 1)[1]))
    opt = make_optimizer(cfg, method, names)
    out = run_training(problem, opt, cfg.steps, key=rng.fold_in(cfg.key, "dqt", unit["seed"]),
                       batch_size=cfg.batch_size, log_every=cfg.log_every,
                       stop_factor=cfg.stop_factor)
    if method == "bitnet":  # FP32 master + m + v; the ternary working copy is recomputed
        headline = memory.bytes_per_param("adamw", "master")
    elif method == "fp32":
        headline = memory.bytes_per_param("adamw", "fp")
    else:  # every parameter in the weight grid, scales left out (the paper's headline)
        headline = memory.bytes_per_param("adamw", opt.scheme,
                                          weights=opt.weight_quantizer(names[0]),
                                          states=dict(opt.states))
    out["bytes_per_param"] = np.float64(headline.total)
    return out
