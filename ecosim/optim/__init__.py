"""Optimizers without master weights (ECO and baselines) and learning-rate schedules."""
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

__all__ = [
    "Constant",
    "InverseTime",
    "Schedule",
    "StepDecay",
    "WarmupCosine",
    "as_schedule",
    "constant",
    "inverse_time",
    "step_decay",
    "warmup_cosine",
]
