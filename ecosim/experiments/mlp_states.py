"""AdamW vs SGD-momentum under ECO, and ECO with low-precision optimizer states (figures 9, 10).

The MLP, data, weight format (FP8 E4M3, one absmax scale per output row, on the three weight
matrices) and schedule are those of :mod:`.mlp_methods` at one width. A *variant* is a string
``"OPTIMIZER:METHOD:M[:V]"``:

* ``OPTIMIZER``: ``adamw`` (``b = (0.9, 0.98)``, ``eps = 1e-9``, peak lr ``adamw_lr``) or
  ``sgdm`` (EMA momentum ``beta = 0.9``, peak lr ``sgdm_lr``), both under the paper's warmup +
  cosine schedule;
* ``METHOD``: ``fp`` (float32, no quantization) or ``SCHEME_MODE`` with ``SCHEME`` among
  ``master``, ``naive``, ``eco`` and ``MODE`` the weight rounding ``rtn`` or ``sr``;
* ``M`` and ``V``: the storage of the first and second moments (``V`` for AdamW only):
  ``fp32``; ``bf16_rtn`` / ``bf16_sr`` (a bfloat16 cast, round-to-nearest or stochastic);
  ``e4m3_rtn`` / ``e4m3_sr`` and ``e5m2_rtn`` / ``e5m2_sr`` (FP8 with one absmax scale per
  row, as the weights). The moments are rounded when written, and ``m`` again after ECO's
  injection (:func:`ecosim.optim.adamw`).

Units: ``{variant, seed}``; each records what :func:`.mlp_methods.run_training` returns (curve,
final validation loss, divergence, static memory: formula for the real shapes and measured
bytes) and the paper's headline bytes per parameter (:func:`ecosim.memory.bytes_per_param`,
scales left out).

SGD-momentum's peak learning rate (0.1) was chosen to give the same full-precision validation
loss as AdamW at 3e-3 on this problem (0.111 vs 0.112, 4 seeds), not tuned per method.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from .. import memory, recipes
from ..core import rng
from ..optim import adamw, sgdm
from ..core.quantizer import Quantizer
from .base import at_least, distinct, experiment, interval, nonempty, positive
from .mlp_methods import make_problem, run_training, weight_quantizer
from .mlp_recipe import MLPRecipe

__all__ = ["MLPStatesConfig", "STATE_FORMATS", "parse_variant", "state_quantizer_of",
           "variant_label", "build_optimizer"]

#: storage of a moment by name: None (float32) or (format, granularity, rounding)
STATE_FORMATS = {
    "fp32": None,
    "bf16_rtn": ("bfloat16", None, "rtn"),
    "bf16_sr": ("bfloat16", None, "sr"),
    "e4m3_rtn": ("float8_e4m3fn", "row", "rtn"),
    "e4m3_sr": ("float8_e4m3fn", "row", "sr"),
    "e5m2_rtn": ("float8_e5m2", "row", "rtn"),
    "e5m2_sr": ("float8_e5m2", "row", "sr"),
}
_METHODS = ("fp", "master_rtn", "master_sr", "naive_rtn", "naive_sr", "eco_rtn", "eco_sr")

_A, _S = "adamw", "sgdm"
DEFAULT_VARIANTS = (
    # AdamW: the references, then ECO with its moments in ever fewer bits
    f"{_A}:fp:fp32:fp32", f"{_A}:master_sr:fp32:fp32", f"{_A}:naive_sr:fp32:fp32",
    f"{_A}:eco_rtn:fp32:fp32", f"{_A}:eco_sr:fp32:fp32",
    f"{_A}:eco_sr:bf16_rtn:bf16_rtn", f"{_A}:eco_sr:bf16_sr:bf16_sr",
    f"{_A}:eco_sr:e4m3_rtn:bf16_rtn", f"{_A}:eco_sr:e4m3_sr:bf16_rtn",
    f"{_A}:eco_sr:bf16_rtn:e4m3_rtn", f"{_A}:eco_sr:bf16_rtn:e4m3_sr",
    f"{_A}:eco_sr:e4m3_rtn:e4m3_rtn", f"{_A}:eco_sr:e4m3_sr:e4m3_sr",
    f"{_A}:eco_sr:e4m3_rtn:e5m2_rtn", f"{_A}:eco_sr:e4m3_sr:e5m2_sr",
    # SGD-momentum: the same references, ECO with m in bfloat16 and FP8
    f"{_S}:fp:fp32", f"{_S}:master_sr:fp32", f"{_S}:naive_sr:fp32",
    f"{_S}:eco_rtn:fp32", f"{_S}:eco_sr:fp32",
    f"{_S}:eco_sr:bf16_rtn", f"{_S}:eco_sr:bf16_sr",
    f"{_S}:eco_sr:e4m3_rtn", f"{_S}:eco_sr:e4m3_sr",
)

#: one of each kind, for --smoke
SMOKE_VARIANTS = (
    f"{_A}:fp:fp32:fp32", f"{_A}:master_sr:fp32:fp32", f"{_A}:naive_sr:fp32:fp32",
    f"{_A}:eco_sr:fp32:fp32", f"{_A}:eco_sr:bf16_rtn:bf16_rtn", f"{_A}:eco_sr:e4m3_sr:e4m3_sr",
    f"{_S}:fp:fp32", f"{_S}:master_sr:fp32", f"{_S}:eco_sr:fp32", f"{_S}:eco_sr:e4m3_rtn",
)


def parse_variant(variant: str) -> tuple[str, str, str, dict[str, str]]:
    """``"adamw:eco_sr:bf16_rtn:e4m3_sr"`` -> ``("adamw", "eco", "sr", {"m": ..., "v": ...})``.

    The method ``fp`` gives scheme ``"fp"`` and mode ``"none"``. Raises ValueError on anything
    else than the grammar of the module docstring.
    """
    parts = str(variant).split(":")
    opt = parts[0] if parts else ""
    moments = {"adamw": ("m", "v"), "sgdm": ("m",)}.get(opt)
    if moments is None or len(parts) != 2 + len(moments):
        raise ValueError(f"variant {variant!r}: expected 'adamw:METHOD:M:V' or 'sgdm:METHOD:M'")
    method = parts[1]
    if method not in _METHODS:
        raise ValueError(f"variant {variant!r}: method must be one of {_METHODS}")
    states = dict(zip(moments, parts[2:]))
    for k, s in states.items():
        if s not in STATE_FORMATS:
            raise ValueError(f"variant {variant!r}: {k} storage must be one of "
                             f"{sorted(STATE_FORMATS)}")
    if method == "fp" and any(s != "fp32" for s in states.values()):
        raise ValueError(f"variant {variant!r}: the fp reference keeps float32 states")
    scheme, _, mode = method.partition("_")
    return opt, scheme, mode or "none", states


def state_quantizer_of(name: str) -> Quantizer | None:
    """The quantizer of a moment stored as ``name`` (a key of :data:`STATE_FORMATS`)."""
    spec = STATE_FORMATS[name]
    if spec is None:
        return None
    fmt, granularity, mode = spec
    if granularity is None:  # a 16-bit cast: fixed scale 1
        return Quantizer(fmt, mode, scale=1.0)
    return Quantizer(fmt, mode, granularity=granularity)


def _short(name: str) -> str:
    if name == "fp32":
        return "FP32"
    fmt, mode = name.split("_")
    return f"{fmt.upper()} {mode.upper()}"


def variant_label(variant: str) -> str:
    """A display name: ``"AdamW ECO+SR, m BF16 RTN, v E4M3 SR"``."""
    opt, scheme, mode, states = parse_variant(variant)
    head = {"adamw": "AdamW", "sgdm": "SGDM"}[opt]
    if scheme == "fp":
        return f"{head} FP32"
    name = {"master": "master", "naive": "naive", "eco": "ECO"}[scheme]
    text = f"{head} {name}+{mode.upper()}"
    if all(s == "fp32" for s in states.values()):
        return text
    if len(set(states.values())) == 1:
        return f"{text}, m,v {_short(states['m'])}" if opt == "adamw" else \
            f"{text}, m {_short(states['m'])}"
    return text + ", " + ", ".join(f"{k} {_short(s)}" for k, s in states.items())


@dataclasses.dataclass(frozen=True, kw_only=True)
class MLPStatesConfig(MLPRecipe):
    """Optimizers and optimizer-state formats under ECO on the MLP of :mod:`.mlp_methods`."""

    variants: tuple[str, ...] = DEFAULT_VARIANTS
    width: int = 32
    depth: int = 2
    seeds: int = 8
    adamw_lr: float = 3e-3
    sgdm_lr: float = 0.1
    beta: float = 0.9
    log_every: int = 25
    SMOKE: ClassVar[dict] = {**MLPRecipe.SMOKE, "variants": SMOKE_VARIANTS, "width": 8,
                             "log_every": 5, "adamw_lr": 1e-2}

    CHECKS: ClassVar[dict] = {
        "variants": (nonempty, distinct), "width": at_least(1), "depth": at_least(1),
        "adamw_lr": positive, "sgdm_lr": positive, "beta": interval("(0, 1)"),
        "log_every": at_least(1)}

    def __post_init__(self):
        super().__post_init__()
        self.parse_entries("variants", parse_variant)


def build_optimizer(cfg: MLPStatesConfig, variant: str, problem):
    """The optimizer of a variant on ``problem``, and its weight quantizer (None for fp)."""
    opt_name, scheme, mode, states = parse_variant(variant)
    q = None if scheme == "fp" else weight_quantizer("fp8", mode)
    policy = None if q is None else {n: q for n in problem.quantized_names("matrices")}
    sq = {k: state_quantizer_of(s) for k, s in states.items()}
    sq = {k: s for k, s in sq.items() if s is not None}
    if opt_name == "adamw":
        opt = adamw(recipes.schedule(cfg.adamw_lr, cfg.steps), cfg.b1, cfg.b2, cfg.eps, 0.0,
                    scheme=scheme, weights=policy, states=sq)
    else:
        opt = sgdm(recipes.schedule(cfg.sgdm_lr, cfg.steps), cfg.beta, scheme=scheme,
                   weights=policy, states=sq)
    return opt, q


def _units(cfg: MLPStatesConfig) -> list[dict]:
    return [{"variant": v, "seed": s} for v in cfg.variants for s in range(cfg.seeds)]


@experiment("mlp_states", MLPStatesConfig, version="1", units=_units)
def mlp_states(cfg: MLPStatesConfig, unit: dict) -> dict:
    """AdamW vs SGDM under ECO and low-precision optimizer states on the MLP."""
    problem = make_problem(cfg, cfg.width)
    opt, q = build_optimizer(cfg, unit["variant"], problem)
    out = run_training(problem, opt, cfg.steps, key=rng.fold_in(cfg.key, "mlp", unit["seed"]),
                       batch_size=cfg.batch_size, log_every=cfg.log_every,
                       stop_factor=cfg.stop_factor)
    opt_name, scheme, _, states = parse_variant(unit["variant"])
    headline = memory.bytes_per_param(opt_name, scheme, weights=q,
                                      states=dict(opt.states))
    out["mem_headline"] = np.array(headline, np.float64)
    return out
