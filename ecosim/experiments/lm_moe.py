"""The ECO paper's Figure 3 (sparse MoE) in miniature: experiment ``lm_moe`` (figure ``lm_moe``).

The paper pretrains a 2.1B sparse mixture-of-experts model on LM1B with FP8 weights in the
expert linear layers only and compares the final validation loss of FP8 with master weights
+ SR, ECO + SR and naive master-weight removal. Here: the ``micro_moe`` preset of
:mod:`ecosim.torch.model` (micro's attention, d_model 32, 2 blocks, each with 4 SwiGLU experts
of width 64 behind a top-2 router, load-balancing loss 0.01; :mod:`ecosim.torch.moe`), only
the 24 expert linears quantized (FP8 E4M3, row-wise absmax scales); router, attention,
embedding and head FP32 under plain AdamW. The same training recipe, unit and record as the
``lm`` experiment (:mod:`ecosim.experiments.lm`, whose compute function this one calls).

Default protocol: 170 steps of 64 sequences of 64 bytes (696,320 training tokens: 21.0 per
active non-embedding parameter, 33,184 of them, of 57,760 in all; :func:`ecosim.torch.model.
param_counts`), methods BF16 with master, FP8 master + SR (the reference of the paired gaps,
as in the paper's figure), ECO + SR, naive + SR and naive + RTN, 3 seeds paired by seed (init,
data order and SR keys), validation on 4 batches of 64 every 17 steps. FP32 is left out to
stay inside the CPU budget (add it with ``--set lm_moe.methods=...``): 15 runs on one
thread each (the time table of ``ecosim figures`` gives their CPU time).
Batches of 64 sequences (not micro's 16) cost 2.5x less per token here, where the per-step
overhead (four experts per block, 24 quantized tensors) dominates.

The training loss (``final_train_loss``, ``curve_train``) is the cross-entropy plus 0.01 x
the router's load-balancing loss (the preset's ``aux_coef``; the record's ``model``
field holds it), as the model trains on it; ``val_loss`` and ``curve_val`` are the
cross-entropy alone, comparable with the dense ``lm`` runs.

Results: the columns of :func:`ecosim.experiments.lm.records_to_results` and ``n_active``
(active non-embedding parameters of each run's preset); a results file
written by ``python -m ecosim.torch.lm --preset micro_moe ...`` can be plotted instead with
``--set lm_moe.results_file=FILE``.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from . import lm as _lm
from .base import experiment

__all__ = ["LMMoEConfig", "METHODS"]

#: Figure 3's methods (and BF16 with master, the lm table's reference), in the figure's order.
METHODS = ("bf16_master", "fp8_master_sr", "fp8_eco_sr", "fp8_naive_sr", "fp8_naive_rtn")


@dataclasses.dataclass(frozen=True, kw_only=True)
class LMMoEConfig(_lm.LMTableConfig):
    """Which MoE runs to make: :class:`ecosim.experiments.lm.LMTableConfig` (same fields and
    checks) with the ``micro_moe`` protocol as defaults (see the module docstring)."""

    presets: tuple[str, ...] = ("micro_moe",)
    methods: tuple[str, ...] = METHODS
    seeds: tuple[int, ...] = (3,)
    steps: tuple[int, ...] = (170,)
    batch: int = 64
    seq: int = 64
    eval_every: int = 17
    eval_batches: int = 4

    SMOKE: ClassVar[dict] = {"methods": ("fp8_master_sr", "fp8_eco_sr"), "steps": (4,),
                             "seeds": (1,), "batch": 2, "seq": 16, "eval_every": 2,
                             "eval_batches": 1}


@experiment("lm_moe", LMMoEConfig, version="1", units=_lm.run_units, combine=_lm.combine_runs,
            requires=("torch",))
def lm_moe(cfg: LMMoEConfig, unit: dict) -> dict:
    """Figure 3 in miniature: a sparse MoE LM with FP8 expert weights (torch backend)."""
    res = dict(_lm.lm(cfg, unit))
    from ..torch.model import param_counts  # torch is there: lm has just trained or read

    counts = {p: param_counts(str(p)) for p in set(res["preset"].tolist())}
    res["n_active"] = np.array([counts[p].get("active_non_embedding", counts[p]["non_embedding"])
                                for p in res["preset"].tolist()], dtype=np.int64)
    return res
