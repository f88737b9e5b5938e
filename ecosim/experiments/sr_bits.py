"""How few random bits stochastic rounding can use (figure ``sr_bits``).

Hardware SR draws few random bits per value. With ``n`` bits and the position ``p`` of a value
between its grid neighbours, ecosim's default count rule (``sr_rule="floor"``) rounds up for
``floor(p 2^n)`` of the ``2^n`` words: biased toward zero by about ``2^-(n+1)`` of a grid step
on average; ``sr_rule="nearest"`` counts ``p 2^n`` rounded to nearest (nearly unbiased; docs/
theory.md §2.2). This experiment measures, for each rule and ``n`` in ``nbits`` (and 32 bits as
the reference), two things:

* ``part="quadratic"``: the stationary error ``E||x_hat - x*||^2 / d`` of SGD-momentum on the
  quadratic of :mod:`.floor` (uniform grid of step ``step``, beta 0.9), scheme by scheme
  (master, naive, ECO), with batch-means standard errors (:func:`.floor.simulate_floor`).
* ``part="mlp"``: the final validation loss of ECO+SR and naive+SR with AdamW on the MLP of
  :mod:`.mlp_methods` (width ``width``, its recipe and data) with INT4 weights and one absmax
  scale per tensor: the format where Table 1's SR ordering (ECO+SR below naive+SR) is widest
  at 32 bits. Seeds are paired: the same seed gives the same initial weights, batches and
  random words for every ``(scheme, nbits, rule)``.

At 32 bits the two rules agree (``p`` has at most 24 bits in float32), so 32 bits is run once.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from .. import recipes
from ..core import rng
from ..optim import adamw
from ..core.quantizer import Quantizer
from ..core.rounding import SR_RULES
from .base import at_least, distinct, experiment, interval, nonempty, one_of, positive
from .floor import FloorRun, simulate_floor
from .mlp_methods import make_problem, run_training
from .mlp_recipe import MLPRecipe

__all__ = ["SRBitsConfig"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class SRBitsConfig(MLPRecipe, FloorRun):
    """Few-bit SR under both count rules, on the quadratic and the MLP (module docstring)."""

    nbits: tuple[int, ...] = (1, 2, 3, 4, 6, 8)
    rules: tuple[str, ...] = SR_RULES
    # quadratic (its d, step, horizon and min_steps are FloorRun's)
    quad_schemes: tuple[str, ...] = ("master", "naive", "eco")
    quad_lrs: tuple[float, ...] = (0.1, 0.01)
    beta: float = 0.9
    # MLP (the rest of the recipe is MLPRecipe's)
    mlp_schemes: tuple[str, ...] = ("naive", "eco")
    mlp_nbits: tuple[int, ...] = (1, 2, 4, 8)
    width: int = 32
    depth: int = 2
    lr: float = 3e-3
    log_every: int = 25
    SMOKE: ClassVar[dict] = {**MLPRecipe.SMOKE, "nbits": (1, 4), "mlp_nbits": (2,),
                             "quad_lrs": (0.1,), "d": 64, "min_steps": 200, "horizon": 8.0,
                             "width": 8, "log_every": 5, "lr": 1e-2}
    CHECKS: ClassVar[dict] = {
        "nbits": (nonempty, distinct, interval("[1, 31]")),
        "rules": (nonempty, distinct, one_of(SR_RULES)),
        "quad_schemes": (distinct, one_of(("master", "naive", "eco", "eco_exact", "kahan"))),
        "quad_lrs": (distinct, positive), "beta": interval("(0, 1)"),
        "mlp_schemes": (distinct, one_of(("master", "naive", "eco"))),
        "mlp_nbits": (distinct, interval("[1, 31]")), "width": at_least(1),
        "depth": at_least(1), "lr": positive, "log_every": at_least(1)}


def _settings(nbits, rules):
    """``(nbits, rule)`` pairs: every rule at each ``nbits``, then the 32-bit reference once."""
    return [(n, r) for n in nbits for r in rules] + [(32, "floor")]


def _units(cfg: SRBitsConfig) -> list[dict]:
    units = [{"part": "quadratic", "scheme": s, "lr": lr, "nbits": n, "rule": r, "seed": 0}
             for lr in cfg.quad_lrs for s in cfg.quad_schemes
             for n, r in _settings(cfg.nbits, cfg.rules)]
    units += [{"part": "mlp", "scheme": s, "lr": cfg.lr, "nbits": n, "rule": r, "seed": k}
              for s in cfg.mlp_schemes for n, r in _settings(cfg.mlp_nbits, cfg.rules)
              for k in range(cfg.seeds)]
    return units


def mlp_quantizer(nbits: int, rule: str) -> Quantizer:
    """The MLP's weight quantizer: INT4, one absmax scale per tensor, SR with ``nbits``."""
    return Quantizer("int4", "sr", granularity="tensor", nbits=nbits, sr_rule=rule)


@experiment("sr_bits", SRBitsConfig, version="1", units=_units)
def sr_bits(cfg: SRBitsConfig, unit: dict) -> dict:
    """Few-bit SR (floor and nearest count rules): quadratic floors and MLP final losses."""
    if unit["part"] == "quadratic":
        out = simulate_floor(unit["scheme"], unit["lr"], cfg.beta, mode="sr", d=cfg.d,
                             step=cfg.step, horizon=cfg.horizon, min_steps=cfg.min_steps,
                             key=cfg.key, nbits=unit["nbits"], sr_rule=unit["rule"])
        return {"ex2": np.float64(out["ex2"]), "ex2_se": np.float64(out["ex2_se"]),
                "final_val_loss": np.float64(np.nan), "diverged": np.bool_(False)}
    problem = make_problem(cfg, cfg.width)
    q = mlp_quantizer(unit["nbits"], unit["rule"])
    opt = adamw(recipes.schedule(cfg.lr, cfg.steps), cfg.b1, cfg.b2, cfg.eps, 0.0,
                scheme=unit["scheme"], weights={n: q for n in problem.quantized_names("matrices")})
    out = run_training(problem, opt, cfg.steps, key=rng.fold_in(cfg.key, "mlp", unit["seed"]),
                       batch_size=cfg.batch_size, log_every=cfg.log_every,
                       stop_factor=cfg.stop_factor)
    return {"ex2": np.float64(np.nan), "ex2_se": np.float64(np.nan),
            "final_val_loss": np.float64(out["final_val_loss"]),
            "diverged": np.bool_(out["diverged"])}
