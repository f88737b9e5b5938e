"""The MLP recipe's config fields, declared once for every experiment on the teacher-student MLP.

The experiments ``mlp_methods``, ``mlp_states``, ``dqt``, ``eco_adam_breakdown`` and ``sr_bits``
train the MLP of :func:`ecosim.experiments.mlp_methods.make_problem` with the same data,
optimizer constants and stopping rule: :class:`MLPRecipe` holds those fields, their defaults,
their range checks and the smoke sizes they share; each experiment's config inherits it and
adds its own fields (a width, a peak learning rate, its grid of runs). A subclass that needs
another default redeclares the field (``seeds: int = 8``); one that shrinks differently for
``--smoke`` builds its ``SMOKE`` from :data:`MLPRecipe.SMOKE`.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

from .. import recipes
from .config import Config, ConfigError, at_least, interval, non_negative, positive, rng_key

__all__ = ["MLPRecipe"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class MLPRecipe(Config):
    """Seeds, steps, AdamW constants, data and stopping rule of the MLP recipe.

    ``seeds`` runs paired by seed (initial weights, batch order, SR draws from ``key``);
    ``steps`` updates of mini-batches of ``batch_size``; AdamW's ``b1``, ``b2`` and ``eps``
    (the paper's, :mod:`ecosim.recipes`); ``n_train`` and ``n_val`` examples with label noise
    ``noise``, built once from ``data_key``; a run stops when its validation loss exceeds
    ``stop_factor`` times its initial value.
    """

    seeds: int = 4
    steps: int = 1500
    b1: float = recipes.BETAS[0]
    b2: float = recipes.BETAS[1]
    eps: float = recipes.EPS
    batch_size: int = 8
    n_train: int = 2048
    n_val: int = 512
    noise: float = 0.3
    data_key: int = 0
    stop_factor: float = 10.0                      # stop a run whose val loss exceeds this x init
    key: int = 0
    SMOKE: ClassVar[dict] = {"seeds": 2, "steps": 40, "n_train": 256, "n_val": 128}
    CHECKS: ClassVar[dict] = {
        "seeds": at_least(1), "steps": at_least(1), "b1": interval("(0, 1)"),
        "b2": interval("[0, 1)"), "eps": positive,
        "batch_size": at_least(1), "n_train": at_least(1), "n_val": at_least(1),
        "noise": non_negative, "data_key": non_negative, "stop_factor": interval("(1, inf)"),
        "key": rng_key}

    def __post_init__(self):
        super().__post_init__()
        if self.batch_size > self.n_train:
            raise ConfigError(f"{type(self).__name__}.batch_size: expected at most n_train "
                              f"({self.n_train}), got {self.batch_size}")
