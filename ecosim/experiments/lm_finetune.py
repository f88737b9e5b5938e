"""The ECO paper's Table 2 in miniature: INT4 weight-only fine-tuning of a BF16-pretrained LM
(figure ``lm_finetune``).

The paper fine-tunes DeepSeek-MoE-16B-Base with INT4 weights (one absmax scale per tensor,
weight-only) under each of Table 1's schemes, master / naive / ECO with RTN or SR, with weight
decay 0 and the learning rate annealed to zero, and reports zero-shot accuracies
(:data:`ecosim.recipes.TABLE2`; its naive runs diverged). Here, per seed ``s`` (one unit):

1. pretrain: the ``lm`` experiment's BF16-with-master run of the preset (same config, same
   seed: the unit of :mod:`ecosim.experiments.lm`, checkpointed into a temporary folder), on
   the default corpus, the standard library's ``.py`` sources; the unit provides its result
   columns as that shared unit (:func:`pretraining`), so that a build of ``lm`` and
   ``lm_finetune`` trains it once (3 runs, one per seed);
2. fine-tune: from that checkpoint (``LMConfig.init_from``: its bfloat16 weights; every
   INT4 method's initial write quantizes them, a master scheme keeps them as its FP32 master
   copy) each method of :attr:`LMFinetuneConfig.methods` trains on a different slice of the
   standard library, its ``.txt`` files (``data="stdlib:.txt"``: test data, change logs,
   licences; a distribution shift from the sources), with the fine-tuning recipe: AdamW as
   Table 1's, weight decay 0, 10% warmup, cosine to zero (the last step has lr 0 and writes
   nothing). Seed ``s`` fixes the data order and the SR keys of every method alike (paired).

Results (one row per fine-tuning run): the ``lm`` experiment's columns
(:func:`ecosim.experiments.lm.records_to_results`; ``val_loss`` is the fine-tuning corpus's
validation loss at the end) plus ``base_val_loss`` (the pretrained model on the fine-tuning
corpus before any write: Table 2's "Base"), ``start_val_loss`` (after the INT4 initial write,
before the first step), ``pretrain_val_loss`` (the pretraining run's own validation loss) and
``pretrain_tokens``.

Cost (one thread per run): the pretraining run dominates each unit; a fine-tuning step of
``micro`` costs about as much as a pretraining step (the time table of ``ecosim figures`` gives
each experiment's CPU time).
"""
from __future__ import annotations

import dataclasses
import tempfile
from typing import ClassVar

import numpy as np

from .. import recipes
from .base import Config, ConfigError, at_least, distinct, experiment
from .lm import combine_runs, method_parts, records_to_results, train_record, train_run
from .shared import SharedUnit, provided_columns

__all__ = ["LMFinetuneConfig", "FINETUNE_METHODS", "BASE", "pretraining"]

#: Table 1's quantized rows with INT4 weights (``int4_master_rtn`` ... ``int4_eco_sr``)
FINETUNE_METHODS = recipes.lm_methods("int4")
#: the paired gaps are to INT4 with master weights and RTN (Table 2's first fine-tuned row)
BASE = "int4_master_rtn"
_PRETRAIN = recipes.TABLE1[0].name  # bf16_master


@dataclasses.dataclass(frozen=True, kw_only=True)
class LMFinetuneConfig(Config):
    """Pretraining and fine-tuning runs of Table 2 in miniature.

    Attributes:
        preset: model preset (``micro``: the ``lm`` experiment's Table 1 protocol).
        seeds: number of seeds (``0 .. n-1``), one pretraining run and one fine-tuning run
            per method each.
        pretrain_steps, pretrain_eval_every: the pretraining run (the ``lm`` experiment's).
        methods: fine-tuning methods (INT4 names of :mod:`ecosim.torch.lm`); must hold
            :data:`BASE`.
        steps: fine-tuning steps per run.
        lr: fine-tuning peak learning rate.
        warmup: fine-tuning warmup fraction.
        data: the fine-tuning corpus (``LMConfig.data``).
        batch, seq: sequences per step and bytes per sequence (both phases).
        eval_every, eval_batches: fine-tuning validation cadence; validation batches of both.
    """

    preset: str = "micro"
    seeds: int = 3
    pretrain_steps: int = 650
    pretrain_eval_every: int = 65
    methods: tuple[str, ...] = FINETUNE_METHODS
    steps: int = 100
    lr: float = 3e-3
    warmup: float = 0.1
    data: str = "stdlib:.txt"
    batch: int = 16
    seq: int = 64
    eval_every: int = 10
    eval_batches: int = 16

    SMOKE: ClassVar[dict] = {"seeds": 1, "pretrain_steps": 6,
                             "pretrain_eval_every": 3, "methods": (BASE, "int4_eco_sr"),
                             "steps": 6, "batch": 4, "seq": 32, "eval_every": 3,
                             "eval_batches": 2}
    CHECKS: ClassVar[dict] = {
        "seeds": at_least(1), "pretrain_steps": at_least(1), "pretrain_eval_every": at_least(1),
        "methods": distinct, "steps": at_least(1), "batch": at_least(1), "seq": at_least(1),
        "eval_every": at_least(1), "eval_batches": at_least(1)}

    def __post_init__(self):
        super().__post_init__()
        for m, (w, _, _) in zip(self.methods, self.parse_entries("methods", method_parts)):
            if w != "int4":
                raise ConfigError(f"LMFinetuneConfig.methods: {m!r} is not an INT4 method; "
                                  f"choose from {FINETUNE_METHODS}")
        if BASE not in self.methods:
            raise ConfigError(f"LMFinetuneConfig.methods must include {BASE!r} (the paired "
                              f"gaps are to it), got {self.methods}")
        if not 0.0 < self.lr < 1.0:
            raise ConfigError(f"lr must lie in (0, 1), got {self.lr!r}")
        if not 0.0 <= self.warmup < 1.0:
            raise ConfigError(f"warmup must lie in [0, 1), got {self.warmup!r}")


def _units(cfg: LMFinetuneConfig) -> list[dict]:
    return [{"seed": s} for s in range(cfg.seeds)]


def pretraining(cfg: LMFinetuneConfig, unit: dict) -> list[SharedUnit]:
    """The pretraining run of a unit (its seed), as the shared unit
    :func:`~ecosim.experiments.lm.train_run` of its run config: the ``lm`` experiment's BF16
    run of that seed at the default configs. The unit trains it (it needs its weights) and
    provides its result columns, so a build of both trains it once."""
    return [SharedUnit(train_run, {
        "preset": cfg.preset, "method": _PRETRAIN, "seed": unit["seed"],
        "steps": cfg.pretrain_steps, "batch": cfg.batch, "seq": cfg.seq,
        "eval_every": cfg.pretrain_eval_every, "eval_batches": cfg.eval_batches})]


@experiment("lm_finetune", LMFinetuneConfig, version="1", units=_units, combine=combine_runs,
            requires=("torch",), provides=pretraining)
def lm_finetune(cfg: LMFinetuneConfig, unit: dict) -> dict:
    """Table 2 in miniature: pretrain with BF16 + master, fine-tune with INT4 weights."""
    seed = unit["seed"]
    shape = dict(preset=cfg.preset, seed=seed, batch=cfg.batch, seq=cfg.seq,
                 eval_batches=cfg.eval_batches)
    (run,) = pretraining(cfg, unit)
    with tempfile.TemporaryDirectory(prefix="ecosim-lm-finetune-") as tmp:
        pre = train_record("lm_finetune", out=tmp, **run.args)  # train_run's, checkpointed
        if pre["diverged"]:
            raise RuntimeError(f"lm_finetune: the pretraining run of seed {seed} diverged at "
                               f"step {pre['diverged_at_step']}; nothing to fine-tune")
        records = [train_record("lm_finetune", method=m, steps=cfg.steps, lr=cfg.lr,
                                warmup=cfg.warmup, data=cfg.data, eval_every=cfg.eval_every,
                                weight_decay=recipes.FINETUNE_WEIGHT_DECAY,
                                final_lr=recipes.FINETUNE_FINAL_FRAC, init_from=tmp, **shape)
                   for m in cfg.methods]
    out = records_to_results(records)
    n = len(records)
    out["base_val_loss"] = np.array([r["init"]["base_val_loss"] for r in records])
    out["start_val_loss"] = np.array([r["init"]["start_val_loss"] for r in records])
    out["pretrain_val_loss"] = np.full(n, float(pre["val_loss"]))
    out["pretrain_tokens"] = np.full(n, int(pre["tokens"]), dtype=np.int64)
    return out | provided_columns([records_to_results([pre])])
