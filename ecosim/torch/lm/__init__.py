"""Language-model pretraining with quantized weights: the ECO paper's Table 1, at any size.

Trains the Llama-style decoder of :mod:`ecosim.torch.model` on a byte-level corpus
(:mod:`ecosim.torch.data`) with one of the paper's weight-update methods and appends one JSON
record per finished run to a results file. One process, or several under ``torchrun``
(DistributedDataParallel; gloo on the CPU, nccl on CUDA).

Methods (:data:`METHODS`; FP8 is E4M3 with row-wise absmax scales; only the block-internal
linears are quantized, by :class:`ecosim.torch.ECOAdamW`; embedding, head and norm gains are
FP32 under ``torch.optim.AdamW`` with the same hyperparameters):

=================  ==========  ====================================  ==========================
name               scheme      weights                               paper row
=================  ==========  ====================================  ==========================
``fp32``           (none)      FP32, plain AdamW everywhere          (reference, not in Table 1)
``bf16_master``    master      bfloat16, RTN (unscaled)              BF16 w/ master
``fp8_master_rtn`` master      E4M3 row-wise, RTN                    FP8 w/ master + RTN
``fp8_master_sr``  master      E4M3 row-wise, SR                     FP8 w/ master + SR
``fp8_naive_rtn``  naive       E4M3 row-wise, RTN                    FP8 naive + RTN
``fp8_naive_sr``   naive       E4M3 row-wise, SR                     FP8 naive + SR
``fp8_eco_rtn``    eco         E4M3 row-wise, RTN                    FP8 ECO + RTN
``fp8_eco_sr``     eco         E4M3 row-wise, SR                     FP8 ECO + SR
``dqt8_sr``        DQT         INT8 per tensor, SR                   (DQT, arXiv 2412.04787)
``dqt_ternary_sr`` DQT         ternary per tensor, SR                (DQT)
``bitnet_b158``    (none)      FP32 master; ternary forward, STE     (BitNet b1.58 baseline)
=================  ==========  ====================================  ==========================

DQT (:class:`ecosim.torch.dqt.DQTAdamW`, ``naive`` updates, no master copy): the linears are
stored as INT8 codes (1 byte per weight) or ternary codes (four per byte) with one scale per
tensor; the initial write rounds to nearest with an absmax (INT8) or absmean (ternary) scale,
and every step writes its update with stochastic rounding onto the grid whose scale is the
previous step's weights' (the DQT reference code's signed-max rule,
:attr:`Method.dqt_scale`). BitNet b1.58 keeps FP32 master weights under AdamW and runs each
linear's forward through :class:`ecosim.torch.bitnet.BitLinear`: absmean-ternary weights and
INT8 per-token absmax activations, gradients straight through.

:data:`INT4_METHODS` are the six quantized rows with INT4 weights and one absmax scale per
tensor (``int4_master_rtn`` ... ``int4_eco_sr``), the format of the paper's Table 2, which
fine-tunes a pretrained model: ``--init-from CHECKPOINT`` starts a run from the weights of a
finished run of the same preset (see :class:`LMConfig`), and the paper's fine-tuning recipe
is ``--weight-decay 0 --final-lr 0`` (the cosine annealed to zero; a step at lr 0 updates
AdamW's moments and writes nothing, so the stored weights, the master copy and ECO's momentum
injection are untouched by it).

Recipe (docs/theory.md §7): AdamW ``betas=(0.9, 0.98)``, ``eps=1e-9``, weight decay 0.1 on
every matrix (embedding, head, linears; not on norm gains), gradient clipping at global norm
1.0 over all parameters (the norm computed so that sharding cannot change it; see FSDP2
below), learning rate warmed up linearly over the first 10% of the steps and
then cosine-decayed to 0.1x the peak; the peak comes from the preset. Activations and
gradients stay in FP32 (the paper also rounds activations to FP8 with RTN; not done here).

Determinism: the initial weights come from ``fold_in(seed, "init")``, the optimizer's SR bits
from ``fold_in(seed, "optimizer")``, and micro-batch ``j`` of step ``s`` from
``fold_in(seed, "data", s, j)``. Each optimizer step takes ``grad_accum * world_size``
micro-batches of ``batch`` sequences; process ``r`` takes ``j = a * world_size + r`` at
accumulation step ``a``, and every micro-batch loss is scaled by ``1/grad_accum`` (DDP then
divides the summed gradient by ``world_size``). Since dividing by a power of two is exact, one
process with ``grad_accum=2`` and two processes with ``grad_accum=1`` give bit-identical
gradients, weights and losses (tests/test_torch_ddp.py), and a checkpoint written with one
layout resumes under the other. A resumed run continues bit-exactly: the checkpoint holds the
model, both optimizers (the ECO optimizer's step counter keys its SR bits), the schedulers,
the loss history and the step (the data position is a function of the step). On CUDA,
:func:`run` turns on ``torch.use_deterministic_algorithms`` (warning, not failing, where an
operation has no deterministic kernel) and sets ``CUBLAS_WORKSPACE_CONFIG=:4096:8``; these
promises are tested on the CPU and have not yet been checked on a GPU.

FSDP2 (``--fsdp``, with ``--storage param``): every block and the root are ``fully_shard``-ed
on a 1-D mesh of all processes, so each process holds the rows ``r * ceil(n0 / W) ...`` of
every parameter and of its optimizer states; ECOAdamW updates those rows (row-wise scales
need no communication; SR bits of element ``i`` of the whole tensor come from counter ``i``
in whichever process holds it) and the gradients are reduce-scattered (a sum of ``W`` values
divided by ``W``, exact for ``W = 2``). Gradient clipping uses a norm that does not depend on
how the rows are split: per-row sums of squares in float64 (whole rows, the same kernel on one
process or several), gathered into the global row order, summed per parameter, the parameters
summed with ``math.fsum``; ``torch.nn.utils.clip_grad_norm_`` would sum local shards and then
processes, whose different rounding changed the clipping coefficient in the last bit and, from
there, the trajectory. Evaluation runs the same number of forwards on every process (FSDP's
forward is collective). Checkpoints hold the full (gathered) model and optimizer states, the
same file an unsharded run writes, so runs resume across layouts (sharded or not, any world
size). With two processes and ``grad_accum=1`` an FSDP run equals one process with
``grad_accum=2`` bit for bit (tests/test_torch_fsdp.py); with ``grad_accum > 1`` FSDP (as
DDP) reduces once per step, after summing the micro-batches locally, in a different order.

Divergence: a non-finite loss or gradient norm, or a training loss above ``diverge_loss``
(default ``1.5 ln 256 ~ 8.3`` nats, far worse than a uniform guess), stops the run and marks
the record ``"diverged": true`` instead of raising.

Results record (one JSON line per finished run; non-finite numbers are written as null):

* run: ``preset``, ``method``, ``scheme``, ``weights`` (format, mode, granularity, scale; null
  for fp32), ``model`` (shape), ``n_params`` (``total``, ``embedding`` = embedding + head,
  ``non_embedding``, ``quantized``), ``steps``, ``steps_done``, ``batch``, ``seq``,
  ``grad_accum``, ``world_size``, ``global_batch``, ``lr`` (peak), ``seed``, ``schedule``,
  ``betas``, ``eps``, ``weight_decay``, ``clip``, ``eval_batches``, ``storage``, ``fsdp``;
* outcome: ``tokens`` (trained), ``final_train_loss`` (mean of the last 10 steps),
  ``val_loss`` (final validation, null if diverged), ``diverged``, ``diverged_at_step`` (the
  update that failed, 1-based), ``curve`` (``[step, mean training loss since the previous
  point, validation loss or null]``); for an MoE preset with ``model.aux_coef`` > 0
  (``micro_moe``: 0.01) the training losses (``curve``'s and ``final_train_loss``, and the
  divergence test) include ``aux_coef`` x the router's load-balancing loss
  (:mod:`ecosim.torch.moe`), the validation losses are the cross-entropy alone;
* cost: ``bytes_per_param`` (static bytes per parameter of the quantized linears: ``formula``,
  ``measured``, ``held``, per-buffer splits, ``n``, ``note``), ``peak_memory_bytes`` and
  ``peak_memory_kind`` (``torch.cuda.max_memory_allocated`` on CUDA; on the CPU the nbytes of
  the parameters and optimizer states), ``tokens_per_s`` (training time only), ``wall_s``,
  ``train_s``, ``eval_s`` (cumulative over resumed ``segments``);
* diagnostics (``--diagnostics``, else null): one entry per curve point, the quantized
  optimizer's last step there (:meth:`ecosim.torch.ECOAdamW.diagnostics`): ``step``,
  ``changed_frac`` (codes changed by that step), ``never_changed_frac`` (never changed since
  the start of this segment: a resume starts the mask afresh), ``m_over_g``,
  ``inject_kept``, ``inject_lost`` (ECO only);
* provenance: ``device``, ``device_name``, ``torch``, ``python``, ``threads``, ``corpus``
  (source, files, bytes, sha256), ``split`` (block, val_every, train/val bytes).

Command line (``python -m ecosim.torch.lm --help``)::

    python -m ecosim.torch.lm --preset tiny --method fp8_eco_sr --steps 300 --results r.jsonl
    python -m ecosim.torch.lm --preset small --method fp8_naive_sr --steps 2000 --out ck/ \\
        --stop-after 1000            # then the same line with --resume finishes it
    torchrun --standalone --nproc_per_node 2 -m ecosim.torch.lm --preset tiny --steps 100
    python -m ecosim.torch.lm --list  # presets (shapes, parameter counts) and methods

Python: ``train(LMConfig(preset="tiny", method="fp8_eco_sr", steps=50))`` returns the record.

Layout of the package: :mod:`~ecosim.torch.lm.config` (methods, :class:`LMConfig`, the
learning-rate schedule), :mod:`~ecosim.torch.lm.loop` (the optimizers, one step, evaluation,
logging, :func:`train`), :mod:`~ecosim.torch.lm.checkpoint`,
:mod:`~ecosim.torch.lm.distributed` (process group, FSDP2, the layout-independent gradient
clip), :mod:`~ecosim.torch.lm.record` (the results record) and :mod:`~ecosim.torch.lm.cli`.
"""

from __future__ import annotations

from .checkpoint import CHECKPOINT, CheckpointError
from .checkpoint import save as _save  # noqa: F401  (the atomic write, tested directly)
from .cli import main
from .config import (INT4_METHODS, METHODS, STORAGES, TABLE1_METHODS, LMConfig, Method,
                     fsdp_check, method_of)
from .loop import build_optimizers, train

__all__ = ["CHECKPOINT", "INT4_METHODS", "METHODS", "STORAGES", "TABLE1_METHODS",
           "CheckpointError", "LMConfig", "Method", "build_optimizers", "fsdp_check",
           "main",
           "method_of", "train"]
