"""Optimizers without master weights (ECO and baselines) and learning-rate schedules.

Public names:
    sgdm, adamw: the factories of :class:`SGDM` and :class:`AdamW`, each with a weight-update
        scheme among ``SCHEMES`` ("fp", "master", "naive", "eco", "eco_exact", "kahan"; AdamW's
        ``ADAMW_SCHEMES`` add "eco_momentum_exact").
    muon: the factory of :class:`Muon` (Newton-Schulz orthogonalised momentum for matrices,
        AdamW for the rest; its ``"eco"`` is experimental), and :func:`newton_schulz`.
    catalog: one row per optimizer (:mod:`ecosim.optim.catalog`); each row's factory is a
        name of this package too (the ones above, and every other row's).
    dqt: DQT (SR onto the previous step's integer/ternary grid) as a named configuration.
    SGDMState, AdamWState, MuonState: the immutable state records.
    on_grid, state_quantizer, compensation_quantizer: helpers shared by the optimizers.
    schedule_guard_lr, guard_horizon: the rate AdamW's schedule guard sizes ECO's injection
        with (shared with the torch mirror).
    Schedules: Constant, WarmupCosine, StepDecay, InverseTime (and lowercase spellings),
        as_schedule.
"""
from . import catalog
from .adamw import AdamW, AdamWState, adamw, guard_horizon, schedule_guard_lr
from .base import (ADAMW_SCHEMES, SCHEMES, NonFiniteGradient, QuantizedOptimizer,
                   compensation_quantizer, on_grid, state_quantizer)
from .dqt import dqt, dqt_quantizers
from .muon import NS_COEFFICIENTS, Muon, MuonState, muon, newton_schulz
from .schedules import (
    Constant,
    InverseTime,
    Schedule,
    StepDecay,
    WarmupCosine,
    as_schedule,
    constant,
    inverse_time,
    step_decay,
    warmup_cosine,
)
from .sgdm import SGDM, SGDMState, sgdm

__all__ = [
    "ADAMW_SCHEMES",
    "AdamW",
    "AdamWState",
    "Constant",
    "InverseTime",
    "Muon",
    "MuonState",
    "NS_COEFFICIENTS",
    "NonFiniteGradient",
    "QuantizedOptimizer",
    "SCHEMES",
    "SGDM",
    "SGDMState",
    "Schedule",
    "StepDecay",
    "WarmupCosine",
    "adamw",
    "as_schedule",
    "compensation_quantizer",
    "constant",
    "dqt",
    "dqt_quantizers",
    "guard_horizon",
    "inverse_time",
    "muon",
    "newton_schulz",
    "on_grid",
    "schedule_guard_lr",
    "sgdm",
    "state_quantizer",
    "step_decay",
    "warmup_cosine",
]

# Every optimizer of the catalog is a name of this package, its factory (``ecosim.optim.sgdm``):
# a new optimizer is its module and its row of the catalog.
for _spec in catalog.optimizers():
    globals()[_spec.name] = _spec.factory_function()
    if _spec.name not in __all__:
        __all__.append(_spec.name)
del _spec
