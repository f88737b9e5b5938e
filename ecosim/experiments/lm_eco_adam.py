"""ECO's approximations for AdamW on the language model, under Table 1's protocol.

The LM side of issue 12's part 4 (the MLP's is the ``eco_adam_breakdown`` experiment): the runs
of the ``lm`` experiment's protocol (:mod:`ecosim.experiments.lm`: preset ``micro``, 650 steps
of 16 x 64 bytes, AdamW (0.9, 0.98), eps 1e-9, wd 0.1, clip 1.0, warmup + cosine, 3 seeds paired
by seed, validation on 16 batches every 65 steps, one CPU thread) with ECO's variants of
:data:`ecosim.recipes.ECO_ADAM_VARIANTS`, FP8 E4M3 weights with one absmax scale per row:

* ``fp8_ecomx_*``: scheme ``eco_momentum_exact``: the error of the last write stored (4 bytes
  per weight) and given back through the momentum with the current ``d``, so that only ECO's
  ``e_prev ~ e`` approximation is gone;
* ``fp8_ecowd_*``: ECO with ``wd_corrected_injection`` (the coefficient times ``1 - lr wd``);
* ``fp8_ecoguard_*``: ECO with ``schedule_guard`` (the injection sized with the ``b1``-weighted
  mean of the later learning rates, which the recipe's warmup makes up to ~11 times the
  first step's).

Their gaps are paired, seed by seed, with the ``lm`` experiment's ``fp8_master_*`` and
``fp8_eco_*`` runs of the same mode (figure ``lm_eco_adam``), so this experiment trains only
the variants: each unit is one :func:`ecosim.torch.lm.train` run exactly as the ``lm``
experiment makes it (the shared unit :func:`ecosim.experiments.lm.train_run` of its run
config, so a method ``lm`` runs too would be trained once; none of the defaults is). Default:
four of the six (:data:`DEFAULT_METHODS`: every variant with RTN, and the momentum-exact rule
with SR as well), 12 runs on one thread each, each costing about what an ``lm`` run of the
same mode costs; the other two with ``--set lm_eco_adam.methods=...``.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

from .. import recipes
from .base import experiment
from .lm import LMTableConfig, combine_runs, run_units, shared_run
from .lm import lm as _lm_unit

__all__ = ["ECO_ADAM_METHODS", "DEFAULT_METHODS", "LMEcoAdamConfig"]

#: every variant of ECO for AdamW the LM runner has (RTN and SR each)
ECO_ADAM_METHODS = recipes.lm_methods(kind="eco_adam")

#: what ``make figures`` runs: the three variants with RTN (ECO+RTN has the larger gap to
#: master on this protocol, so there is most room to see what a correction changes) and the
#: momentum-exact rule with SR too (ECO+SR's own gap is within noise; the exact rule shows
#: whether removing e_prev ~ e moves it). The guard with SR and wd with SR: ``--set``.
DEFAULT_METHODS = ("fp8_ecomx_rtn", "fp8_ecomx_sr", "fp8_ecowd_rtn", "fp8_ecoguard_rtn")


@dataclasses.dataclass(frozen=True, kw_only=True)
class LMEcoAdamConfig(LMTableConfig):
    """The ``lm`` experiment's protocol with ECO's variants for AdamW (module docstring)."""

    methods: tuple[str, ...] = DEFAULT_METHODS
    seeds: tuple[int, ...] = (3,)  # the lm experiment's first 3 (it runs 5)

    ONLY: ClassVar[tuple[str, ...]] = ECO_ADAM_METHODS
    SMOKE: ClassVar[dict] = {**LMTableConfig.SMOKE, "methods": ("fp8_ecomx_sr",)}


@experiment("lm_eco_adam", LMEcoAdamConfig, version="1", units=run_units, combine=combine_runs,
            requires=("torch",), share=shared_run)
def lm_eco_adam(cfg: LMEcoAdamConfig, unit: dict) -> dict:
    """ECO's variants for AdamW on the LM under Table 1's protocol (torch backend)."""
    return _lm_unit(cfg, unit)
