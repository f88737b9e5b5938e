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
=================  ==========  ====================================  ==========================

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
  point, validation loss or null]``);
* cost: ``bytes_per_param`` (static bytes per parameter of the quantized linears: ``formula``,
  ``measured``, ``held``, per-buffer splits, ``n``, ``note``), ``peak_memory_bytes`` and
  ``peak_memory_kind`` (``torch.cuda.max_memory_allocated`` on CUDA; on the CPU the nbytes of
  the parameters and optimizer states), ``tokens_per_s`` (training time only), ``wall_s``,
  ``train_s``, ``eval_s`` (cumulative over resumed ``segments``);
* provenance: ``device``, ``device_name``, ``torch``, ``python``, ``threads``, ``corpus``
  (source, files, bytes, sha256), ``split`` (block, val_every, train/val bytes).

Command line (``python -m ecosim.torch.lm --help``)::

    python -m ecosim.torch.lm --preset tiny --method fp8_eco_sr --steps 300 --results r.jsonl
    python -m ecosim.torch.lm --preset small --method fp8_naive_sr --steps 2000 --out ck/ \\
        --stop-after 1000            # then the same line with --resume finishes it
    torchrun --standalone --nproc_per_node 2 -m ecosim.torch.lm --preset tiny --steps 100
    python -m ecosim.torch.lm --list  # presets (shapes, parameter counts) and methods

Python: ``train(LMConfig(preset="tiny", method="fp8_eco_sr", steps=50))`` returns the record.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import json
import math
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from .. import memory as _memory
from .. import optim as _np_optim
from .. import quantizer as _np_quantizer
from .. import rng
from . import data as _data
from .model import PRESETS, Transformer, _preset, param_counts, quantized_names
from .nn import data_parallel, measured_memory, store_weights
from .optim import ECOAdamW
from .quantizer import Quantizer

__all__ = ["METHODS", "TABLE1_METHODS", "Method", "LMConfig", "build_optimizers", "lr_factor",
           "main", "train"]

CHECKPOINT = "checkpoint.pt"
_FORMAT = "ecosim.lm/1"
_VAL_KEY = rng.fold_in(0, "val")  # validation batches: the same for every seed and method
STORAGES = ("codes", "param")


@dataclass(frozen=True)
class Method:
    """A row of Table 1: the weight-update scheme and the weight quantizer.

    Attributes:
        scheme: ``"master"``, ``"naive"`` or ``"eco"`` (None: no quantization, plain AdamW).
        fmt: weight format (``"float8_e4m3fn"``, ``"bfloat16"``) or None.
        mode: ``"rtn"`` or ``"sr"`` (None when unquantized).
    """

    scheme: str | None
    fmt: str | None = None
    mode: str | None = None

    def quantizer(self) -> Quantizer | None:
        """The weight quantizer: E4M3 (and other 8-bit and narrower formats) with row-wise
        absmax scales; 16-bit formats unscaled (their range needs no scale)."""
        if self.fmt is None:
            return None
        if self.fmt in ("bfloat16", "float16"):
            return Quantizer(self.fmt, self.mode, scale=1.0)
        return Quantizer(self.fmt, self.mode, granularity="row")

    def numpy_quantizer(self):
        """The same quantizer for :mod:`ecosim.memory`'s formulas."""
        q = self.quantizer()
        if q is None:
            return None
        return _np_quantizer.Quantizer(q.fmt, q.mode, q.granularity, q.scale)


METHODS: dict[str, Method] = {
    "fp32": Method(None),
    "bf16_master": Method("master", "bfloat16", "rtn"),
    "fp8_master_rtn": Method("master", "float8_e4m3fn", "rtn"),
    "fp8_master_sr": Method("master", "float8_e4m3fn", "sr"),
    "fp8_naive_rtn": Method("naive", "float8_e4m3fn", "rtn"),
    "fp8_naive_sr": Method("naive", "float8_e4m3fn", "sr"),
    "fp8_eco_rtn": Method("eco", "float8_e4m3fn", "rtn"),
    "fp8_eco_sr": Method("eco", "float8_e4m3fn", "sr"),
}
TABLE1_METHODS = tuple(m for m in METHODS if m != "fp32")


def _positive_int(name, v, allow_none=False):
    if v is None and allow_none:
        return
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{name} must be a positive integer, got {v!r}")


@dataclass(frozen=True)
class LMConfig:
    """One training run (see the module docstring for the recipe). None fields take the
    preset's (or a derived) default in :meth:`resolved`.

    Attributes:
        preset: a key of :data:`ecosim.torch.model.PRESETS`.
        method: a key of :data:`METHODS`.
        steps: optimizer steps of the whole run (the schedule's length).
        batch: sequences per micro-batch, per process (default: the preset's, or
            ``global_batch / (grad_accum * world_size)``).
        global_batch: sequences per optimizer step; must equal
            ``batch * grad_accum * world_size``.
        seq: sequence length in bytes (default: the preset's).
        grad_accum: micro-batches accumulated per process and step.
        lr: peak learning rate (default: the preset's).
        seed: root of every random draw (init, data, SR).
        data: a text file or folder; None is the standard library's ``.py`` sources.
        device: ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
        eval_every: validation every this many steps and at the end (default ``steps // 10``).
        eval_batches: validation batches (of ``batch`` x ``seq``) per evaluation.
        log_every: a curve point (mean training loss since the last) every this many steps
            (default ``steps // 100``).
        out: checkpoint folder (None: no checkpoint).
        results: JSON-lines file the record is appended to (None: not written).
        resume: continue the run checkpointed in ``out``.
        overwrite: start afresh even though ``out`` holds a checkpoint (which the new run
            replaces); without it (or ``resume``) an existing checkpoint is an error.
        stop_after: stop (checkpointing) after this step, to be resumed later.
        ckpt_every: also checkpoint every this many steps (always at the end and at a stop).
        quiet: no progress bar and no log lines.
        warmup: fraction of the steps with a linear warmup.
        final_lr: the cosine's end, as a fraction of the peak.
        betas, eps, weight_decay: AdamW's.
        clip: global gradient-norm clipping threshold (0 disables clipping).
        diverge_loss: a training loss above this counts as diverged (default 1.5 ln vocab).
        storage: where the quantized weights live: ``"codes"`` (default: real low-precision
            codes plus row scales in :class:`ecosim.torch.nn.QuantizedLinear` layers, no FP32
            copy between steps) or ``"param"`` (dequantized FP32 values in ordinary
            parameters, the codes recoverable with ``ECOAdamW.encoded``; needed by
            ``fsdp``). Both give the same
            trajectory for naive and ECO, bit for bit; the master schemes start their master
            copy from ``q(W_0)`` with ``"codes"`` and from ``W_0`` with ``"param"``.
        fsdp: shard every parameter on dim 0 with FSDP2 (``fully_shard`` on each block and
            on the root; needs ``storage="param"``). The optimizers work on each process's
            rows (:class:`~ecosim.torch.ECOAdamW` takes the DTensor parameters: row-wise
            scales stay within a process and SR draws use the global element counters), so
            the trajectory equals the unsharded one bit for bit (tests/test_torch_fsdp.py).
    """

    preset: str = "tiny"
    method: str = "fp8_eco_sr"
    steps: int = 200
    batch: int | None = None
    global_batch: int | None = None
    seq: int | None = None
    grad_accum: int = 1
    lr: float | None = None
    seed: int = 0
    data: str | None = None
    device: str = "cpu"
    eval_every: int | None = None
    eval_batches: int = 8
    log_every: int | None = None
    out: str | None = None
    results: str | None = None
    resume: bool = False
    overwrite: bool = False
    stop_after: int | None = None
    ckpt_every: int | None = None
    quiet: bool = False
    warmup: float = 0.1
    final_lr: float = 0.1
    betas: tuple = (0.9, 0.98)
    eps: float = 1e-9
    weight_decay: float = 0.1
    clip: float = 1.0
    diverge_loss: float | None = None
    storage: str = "codes"
    fsdp: bool = False

    def __post_init__(self):
        _preset(self.preset)
        if self.method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}; choose one of {list(METHODS)}")
        _positive_int("steps", self.steps)
        _positive_int("grad_accum", self.grad_accum)
        _positive_int("eval_batches", self.eval_batches)
        for f in ("batch", "global_batch", "seq", "eval_every", "log_every", "stop_after",
                  "ckpt_every"):
            _positive_int(f, getattr(self, f), allow_none=True)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {self.seed!r}")
        if self.lr is not None and not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr must be a finite number > 0, got {self.lr!r}")
        if not 0.0 <= self.warmup < 1.0:
            raise ValueError(f"warmup must be a fraction in [0, 1), got {self.warmup!r}")
        if not 0.0 < self.final_lr <= 1.0:
            raise ValueError(f"final_lr must be in (0, 1] (ECO divides by the lr), "
                             f"got {self.final_lr!r}")
        if len(tuple(self.betas)) != 2:
            raise ValueError(f"betas must be a pair, got {self.betas!r}")
        object.__setattr__(self, "betas", tuple(float(b) for b in self.betas))
        if not all(0.0 <= b < 1.0 for b in self.betas):
            raise ValueError(f"betas must lie in [0, 1), got {self.betas!r}")
        if not (math.isfinite(self.eps) and self.eps > 0):
            raise ValueError(f"eps must be a finite number > 0, got {self.eps!r}")
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise ValueError(f"weight_decay must be a finite number >= 0, "
                             f"got {self.weight_decay!r}")
        if self.clip < 0:
            raise ValueError(f"clip must be >= 0 (0: off), got {self.clip!r}")
        if self.storage not in STORAGES:
            raise ValueError(f"storage must be one of {STORAGES}, got {self.storage!r}")
        if self.data is not None and not Path(self.data).exists():
            raise FileNotFoundError(f"data path {self.data!r} does not exist")
        if (self.resume or self.stop_after is not None) and self.out is None:
            raise ValueError("resume and stop_after need an out folder for the checkpoint")
        if self.resume and self.overwrite:
            raise ValueError("resume continues the checkpointed run and overwrite replaces it: "
                             "pass one of them, not both")
        if self.stop_after is not None and self.stop_after >= self.steps:
            raise ValueError(f"stop_after={self.stop_after} must be below steps={self.steps}")
        if not (self.device == "cpu" or self.device.startswith("cuda")):
            raise ValueError(f"device must be 'cpu' or 'cuda[:N]', got {self.device!r}")
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError("device 'cuda' requested but torch.cuda.is_available() is False")
        if self.fsdp and self.storage != "param":
            raise ValueError(
                f"fsdp needs storage='param' (--storage param), got storage={self.storage!r}: "
                "a QuantizedLinear holds its codes in buffers and takes its gradient through a "
                "one-element GradSlot parameter broadcast to the weight's shape, which FSDP2 "
                "cannot shard (it shards parameters, not buffers, and a slot has no rows)")

    def resolved(self, world_size: int = 1) -> "LMConfig":
        """This config with every None default filled in for ``world_size`` processes.

        Raises:
            ValueError: ``global_batch`` is not ``batch * grad_accum * world_size``.
        """
        p = _preset(self.preset)
        per_step = self.grad_accum * world_size
        batch = self.batch
        if self.global_batch is not None:
            if self.global_batch % per_step:
                raise ValueError(f"global_batch={self.global_batch} is not divisible by "
                                 f"grad_accum * world_size = {self.grad_accum} * {world_size}")
            if batch is not None and batch * per_step != self.global_batch:
                raise ValueError(f"batch * grad_accum * world_size = {batch * per_step} != "
                                 f"global_batch={self.global_batch}")
            batch = self.global_batch // per_step
        batch = batch or p.batch
        return dataclasses.replace(
            self, batch=batch, global_batch=batch * per_step, seq=self.seq or p.seq,
            lr=self.lr or p.lr, eval_every=self.eval_every or max(1, self.steps // 10),
            log_every=self.log_every or max(1, self.steps // 100),
            diverge_loss=(self.diverge_loss if self.diverge_loss is not None
                          else 1.5 * math.log(p.model.vocab)))


def lr_factor(step: int, steps: int, warmup: float = 0.1, final: float = 0.1) -> float:
    """Learning-rate multiplier of ``step`` (0-based): linear warmup over the first
    ``n = round(warmup * steps)`` steps (``1/n, 2/n, ..., 1``), then a cosine from 1 at step
    ``n`` down to ``final`` at the last step, ``steps - 1`` (and ``final`` after it).

    Example:
        >>> [round(lr_factor(s, 100), 3) for s in (0, 9, 10, 54, 55, 99)]
        [0.1, 1.0, 1.0, 0.558, 0.542, 0.1]
    """
    n = round(warmup * steps)
    if step < n:
        return (step + 1) / n
    progress = min(1.0, (step - n) / max(1, steps - n - 1))
    return final + (1.0 - final) * 0.5 * (1.0 + math.cos(math.pi * progress))


# -- processes ---------------------------------------------------------------------------------

@dataclass
class _Env:
    rank: int
    world: int
    device: torch.device
    owns_group: bool

    def close(self):
        if self.owns_group and dist.is_initialized():
            dist.destroy_process_group()


def _deterministic_cuda() -> None:
    """What the exactness promises (resume, DDP/FSDP layouts) need on CUDA: cuBLAS with a
    fixed workspace (``CUBLAS_WORKSPACE_CONFIG=:4096:8`` unless already set; read when cuBLAS
    starts, so before the first matrix product) and ``torch.use_deterministic_algorithms``.
    ``warn_only=True``: an operation without a deterministic CUDA kernel warns (that run's
    bit-exactness is then not promised) instead of ending the run. Not checked on a GPU yet."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)


def _setup(device: str, fsdp: bool = False) -> _Env:
    """Join the process group ``torchrun`` describes (if any) and pick this rank's device.

    FSDP needs a process group even for one process: a private single-process one then."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    owns = False
    cuda = device.startswith("cuda")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    dev = torch.device(device)
    if cuda and dev.index is None:
        dev = torch.device("cuda", local)
    if cuda:
        _deterministic_cuda()
        torch.cuda.set_device(dev)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo")
        owns = True
    elif fsdp and not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo", store=dist.HashStore(), rank=0,
                                world_size=1)
        owns = True
    if dist.is_initialized():
        return _Env(dist.get_rank(), dist.get_world_size(), dev, owns)
    return _Env(0, 1, dev, owns)


def _gather_tensor(t: torch.Tensor, env: _Env) -> torch.Tensor:
    """``t`` of every rank stacked along a new first axis (rank order)."""
    if env.world == 1:
        return t[None]
    out = [torch.empty_like(t) for _ in range(env.world)]
    dist.all_gather(out, t.contiguous())
    return torch.stack(out)


def _barrier(env: _Env):
    if env.world > 1:
        dist.barrier()


# -- FSDP2 ---------------------------------------------------------------------------------------

def _is_dtensor(t) -> bool:
    if not dist.is_available():
        return False
    from torch.distributed.tensor import DTensor
    return isinstance(t, DTensor)


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if _is_dtensor(t) else t


def _fully_shard(model: Transformer, env: _Env) -> None:
    """FSDP2: every block, then the root (embedding, final norm, head), on a 1-D mesh of all
    processes. Every process built the same initial weights, so each keeps its own rows."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh(env.device.type, (env.world,))
    for blk in model.blocks:
        fully_shard(blk, mesh=mesh)
    fully_shard(model, mesh=mesh)


def _rows(t, full: torch.Tensor) -> torch.Tensor:
    """The rows of the whole tensor ``full`` that the DTensor ``t`` holds here (torch.chunk's
    split on dim 0, as ``Shard(0)``)."""
    mesh = t.device_mesh
    chunk = -(-full.shape[0] // mesh.size())
    start = min(mesh.get_local_rank() * chunk, full.shape[0])
    return full[start:start + t.to_local().shape[0]]


def _full(x):
    """``x`` (a state dict, nested) with every DTensor gathered into a whole tensor. A
    collective: every process calls it, in the same order."""
    if _is_dtensor(x):
        return x.full_tensor()
    if isinstance(x, dict):
        return {k: _full(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_full(v) for v in x]
    return x


@torch.no_grad()
def _load_full_model(model: torch.nn.Module, sd: dict) -> None:
    """Load whole tensors into a (possibly FSDP-sharded) model: each process its rows."""
    own = dict(model.named_parameters())
    own.update(model.named_buffers())
    if set(own) != set(sd):
        raise ValueError(f"checkpoint model keys differ: missing {sorted(set(own) - set(sd))}, "
                         f"unexpected {sorted(set(sd) - set(own))}")
    for k, t in own.items():
        src = sd[k].to(device=t.device, dtype=t.dtype)
        if _is_dtensor(t):
            t.to_local().copy_(_rows(t, src))
        else:
            t.copy_(src)


def _shard_adamw_state(sd: dict, opt: torch.optim.Optimizer) -> dict:
    """A torch optimizer's state dict of whole tensors, with the states of DTensor parameters
    made DTensors holding this process's rows (``Optimizer.load_state_dict`` would keep them
    whole, and the step would mix DTensors and tensors)."""
    from torch.distributed.tensor import DTensor
    params = [p for g in opt.param_groups for p in g["params"]]
    state = {}
    for i, st in sd["state"].items():
        p = params[i]
        state[i] = {k: DTensor.from_local(_rows(p, v.to(p.device)).clone(), p.device_mesh,
                                          p.placements, run_check=False, shape=p.shape,
                                          stride=p.stride())
                    if (_is_dtensor(p) and torch.is_tensor(v) and not _is_dtensor(v)
                        and tuple(v.shape) == tuple(p.shape)) else v
                    for k, v in st.items()}
    return dict(sd, state=state)


def _clip_grad_norm(params, max_norm: float, env: _Env) -> float:
    """Clip the gradients to global norm ``max_norm`` (``inf``: only measure it); return the
    norm. The norm does not depend on how parameters are sharded on dim 0: per-row sums of
    squares in float64 (whole rows, so the same reduction wherever a row lives), gathered into
    the global row order, summed per parameter (vectors of the same length), and the
    parameters' sums added with ``math.fsum``; the coefficient ``max_norm / (norm + 1e-6)``
    (as ``clip_grad_norm_``), when below 1, multiplies every gradient in its own dtype."""
    grads = [p.grad for p in params if p.grad is not None]
    sums, sharded = [], []
    for g in grads:
        loc = _local(g).detach()
        s = loc.reshape(loc.shape[0] if loc.ndim else 1, -1).to(torch.float64).square().sum(1)
        if _is_dtensor(g):
            n0 = g.shape[0]
            chunk = -(-n0 // g.device_mesh.size())
            sharded.append((len(sums), n0, chunk))
            s = torch.cat([s, s.new_zeros(chunk - s.numel())])  # padded to equal sizes
        sums.append(s)
    if sharded:
        idx = [i for i, *_ in sharded]
        flat = torch.cat([sums[i] for i in idx])
        allr = _gather_tensor(flat, env)  # (world, sum of chunks), rank order = row order
        pos = 0
        for i, n0, chunk in sharded:
            sums[i] = allr[:, pos:pos + chunk].reshape(-1)[:n0]
            pos += chunk
    # One host sync for all parameters (the same float64 sums as one .item() each).
    total = math.fsum(torch.stack([s.sum() for s in sums]).tolist()) if sums else 0.0
    norm = math.sqrt(total)
    coef = max_norm / (norm + 1e-6)
    if coef < 1.0:
        for g in grads:
            loc = _local(g)
            loc.mul_(torch.full((), coef, dtype=loc.dtype, device=loc.device))
    return norm


# -- model and optimizers ----------------------------------------------------------------------

def build_optimizers(model: Transformer, cfg: LMConfig) -> list:
    """The optimizers of a run: ``[ECOAdamW over the block-internal linears (if the method
    quantizes), torch AdamW over the rest]``. With ``cfg.storage == "codes"`` the linears of
    ``model`` are first replaced by :class:`ecosim.torch.nn.QuantizedLinear` (in place).
    ``cfg`` must be resolved (:meth:`LMConfig.resolved`: its ``lr`` is used)."""
    method = METHODS[cfg.method]
    qnames = set(quantized_names(model)) if method.scheme is not None else set()
    named = list(model.named_parameters())
    hp = dict(betas=cfg.betas, eps=cfg.eps)
    rest = [{"params": [p for n, p in named if n not in qnames and p.ndim >= 2],
             "weight_decay": cfg.weight_decay},
            {"params": [p for n, p in named if n not in qnames and p.ndim < 2],
             "weight_decay": 0.0}]
    opts = [torch.optim.AdamW(rest, lr=cfg.lr, **hp)]
    if qnames:
        key = rng.fold_in(cfg.seed, "optimizer")
        weights = method.quantizer()
        if cfg.storage == "codes":  # the linears become codes + scales (same names, same key)
            layers = {n.rsplit(".", 1)[0] for n in qnames}
            store_weights(model, weights, key=key, predicate=lambda name, mod: name in layers)
            named = list(model.named_parameters())
            weights = None  # stored layers carry their quantizer
        opts.insert(0, ECOAdamW([(n, p) for n, p in named if n in qnames], cfg.lr,
                                weight_decay=cfg.weight_decay, scheme=method.scheme,
                                weights=weights, key=key, **hp))
    return opts


def _bytes_per_param(model, opts, cfg, method) -> dict:
    """Static bytes per parameter of the quantized linears: formula and measured."""
    named = dict(model.named_parameters())
    qn = quantized_names(model)
    shapes = {n: tuple(named[n].shape) for n in qn}
    n = sum(named[k].numel() for k in qn)
    n_here = sum(_local(named[k]).numel() for k in qn)  # FSDP: this process's rows
    scheme = method.scheme or "fp"
    np_opt = _np_optim.adamw(cfg.lr, *cfg.betas, cfg.eps, cfg.weight_decay, scheme=scheme,
                             weights=method.numpy_quantizer())
    formula = _memory.static_bytes(np_opt, shapes)
    qparams = [named[k] for k in qn]
    held = measured_memory(qparams, opts[0]).per_param()
    measured = dict.fromkeys(("weights", "master", "m", "v"), 0)
    for name in qn:
        p = named[name]
        st = opts[0].state[p]
        if method.scheme is None:
            measured["weights"] += _local(p).nbytes
            measured["m"] += _local(st["exp_avg"]).nbytes
            measured["v"] += _local(st["exp_avg_sq"]).nbytes
            continue
        opt = opts[0]
        if method.scheme != "master":  # the paper's convention: a master's FP8 copy is transient
            measured["weights"] += opt.encoded(p).nbytes
        for b in ("master", "m", "v"):
            if b in st:
                measured[b] += st[b].nbytes
    return {
        "n": n,
        "formula": formula.total / n,
        "formula_buffers": {k: v / n for k, v in formula._asdict().items() if v},
        "measured": sum(measured.values()) / n_here,
        "measured_buffers": {k: v / n_here for k, v in measured.items() if v},
        "held": held["total"],
        "held_buffers": {k: v for k, v in held.items() if v and k != "total"},
        "note": ("formula: ecosim.memory.static_bytes (weights as codes + FP32 row scales, "
                 "FP32 m and v, FP32 master for master schemes, whose low-precision working "
                 "copy is not counted); measured: nbytes of the live state tensors, with the "
                 "stored weights as real FP8/BF16 codes + scales (ECOAdamW.encoded), the "
                 "master schemes' copy left out as in the formula; held: everything this "
                 f"process holds for these layers (ecosim.torch.nn.measured_memory; "
                 f"storage={cfg.storage!r}: 'codes' holds codes + scales, 'param' FP32 values, "
                 "plus the optimizer's states; with fsdp, measured and held count this "
                 "process's rows)"),
    }


# -- checkpoints -------------------------------------------------------------------------------

# Fields that define the trajectory: a resume must match them (eval/log/io fields may change).
_TRAJECTORY = ("preset", "method", "steps", "batch", "global_batch", "seq", "lr", "seed",
               "warmup", "final_lr", "betas", "eps", "weight_decay", "clip", "diverge_loss",
               "storage")  # not world_size, grad_accum, fsdp: layouts of the same run


def _ckpt_path(cfg: LMConfig) -> Path:
    return Path(cfg.out) / CHECKPOINT


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed: unreadable, not ours, or from another run."""


def _unusable(path: Path, why: str) -> CheckpointError:
    return CheckpointError(f"checkpoint {str(path)!r} {why}: delete it or pass --overwrite "
                           "to start the run again")


def _save(path: Path, payload: dict):
    """Write a checkpoint atomically: a temporary file in the same folder, flushed to disk,
    then renamed over ``path``, so a killed run leaves the old checkpoint or the new one,
    never a truncated file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _load(cfg: LMConfig, device, corpus_sha: str) -> dict:
    path = _ckpt_path(cfg)
    if not path.exists():
        raise FileNotFoundError(f"--resume: no checkpoint at {str(path)!r}")
    try:
        ck = torch.load(path, map_location=device, weights_only=True)
    except Exception as exc:  # truncated, garbage, or pickled objects weights_only refuses
        raise _unusable(path, f"is unreadable (truncated or not a checkpoint: "
                              f"{type(exc).__name__})") from None
    if not isinstance(ck, dict) or ck.get("format") != _FORMAT or not isinstance(
            ck.get("config"), dict) or not all(k in ck for k in _CKPT_KEYS):
        raise _unusable(path, f"is not an {_FORMAT} checkpoint")
    want = {k: _jsonable(getattr(cfg, k)) for k in _TRAJECTORY}
    bad = {k: (ck["config"].get(k), v) for k, v in want.items() if ck["config"].get(k) != v}
    if ck["corpus_sha256"] != corpus_sha:
        bad["corpus"] = (ck["corpus_sha256"], corpus_sha)
    if bad:
        raise CheckpointError(f"the checkpoint {str(path)!r} was written by a different run; "
                              f"mismatched (checkpoint, now): {bad}; pass the same options, "
                              "--overwrite to replace it, or another --out")
    return ck


_CKPT_KEYS = ("corpus_sha256", "model", "optimizers", "schedulers", "hist")


def _jsonable(x):
    """Floats that JSON can hold (non-finite -> None), tuples as lists."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    return x


# -- training ----------------------------------------------------------------------------------

def train(config: LMConfig) -> dict:
    """Run (or resume) one training run and return its results record.

    Under ``torchrun`` every process calls this; all return the same record, only rank 0
    writes the checkpoint and appends to ``config.results``.

    Returns:
        The results record (fields in the module docstring); a run
        stopped by ``stop_after`` returns ``{"finished": False, "step": ..., "checkpoint": ...}``.
    """
    if not isinstance(config, LMConfig):
        raise TypeError(f"train takes an LMConfig, got {type(config).__name__}")
    env = _setup(config.device, config.fsdp)
    try:
        return _train(config.resolved(env.world), env)
    finally:
        env.close()


def _train(cfg: LMConfig, env: _Env) -> dict:
    t_start = time.perf_counter()
    dev, W, A, B, T = env.device, env.world, cfg.grad_accum, cfg.batch, cfg.seq
    ck_path = _ckpt_path(cfg) if cfg.out else None
    if cfg.out and not (cfg.resume or cfg.overwrite) and ck_path.exists():
        raise FileExistsError(f"{str(ck_path)!r} exists; pass --resume to continue that run, "
                              "--overwrite to start it again, or choose another --out")
    method = METHODS[cfg.method]
    preset = _preset(cfg.preset)
    corpus = _data.load_corpus(cfg.data)
    train_tok, val_tok = _data.split(corpus.tokens)
    for name, part in (("training", train_tok), ("validation", val_tok)):
        if part.numel() <= T + 1:
            raise _data.CorpusError(
                f"the {name} split of the corpus {corpus.source!r} ({corpus.nbytes} bytes) has "
                f"{part.numel()} bytes, too few for sequences of {T} bytes; use more data "
                f"(one block of {_data.SPLIT_BLOCK} bytes in {_data.VAL_EVERY} is validation: "
                f"{_data.SPLIT_BLOCK * _data.VAL_EVERY} bytes at least) or a shorter --seq")
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)

    gen = torch.Generator().manual_seed(rng.seed_of(rng.fold_in(cfg.seed, "init")))
    model = Transformer(preset.model, gen).to(dev)
    if cfg.fsdp:
        _fully_shard(model, env)
    opts = build_optimizers(model, cfg)
    lam = lambda s: lr_factor(s, cfg.steps, cfg.warmup, cfg.final_lr)  # noqa: E731
    scheds = [torch.optim.lr_scheduler.LambdaLR(o, lam) for o in opts]

    hist = {"step": 0, "curve": [], "window": [], "recent": [], "tokens": 0, "train_s": 0.0,
            "eval_s": 0.0, "wall_s": 0.0, "segments": 0, "diverged_at": None, "record": None}
    if cfg.resume:
        ck = _load(cfg, dev, corpus.sha256)
        try:
            if ck["hist"]["record"] is not None:  # finished already: nothing to train
                return ck["hist"]["record"]
            if cfg.fsdp:
                _load_full_model(model, ck["model"])
            else:
                model.load_state_dict(ck["model"])
            for o, s in zip(opts, ck["optimizers"]):
                # ECOAdamW takes whole states for its DTensor parameters itself
                o.load_state_dict(s if not cfg.fsdp or isinstance(o, ECOAdamW)
                                  else _shard_adamw_state(s, o))
            for sch, s in zip(scheds, ck["schedulers"]):
                sch.load_state_dict(s)
            hist = ck["hist"]
        except torch.OutOfMemoryError:
            raise
        except (KeyError, TypeError, IndexError, ValueError, RuntimeError) as exc:
            why = (str(exc).strip().splitlines() or [""])[0][:200]
            raise _unusable(ck_path, f"does not fit this run ({type(exc).__name__}: "
                                     f"{why})") from None
    hist["segments"] += 1

    ddp = None
    if W > 1 and not cfg.fsdp:
        # data_parallel: DDP plus an initial broadcast that stored (code) layers can take;
        # every rank applies the same update with the same keys, so no buffer sync is needed
        ddp = data_parallel(model, device_ids=[dev.index] if dev.type == "cuda" else None,
                            broadcast_buffers=False)
    fwd = ddp if ddp is not None else model
    params = list(model.parameters())
    data_key = rng.fold_in(cfg.seed, "data")
    stop = cfg.stop_after or cfg.steps
    show = env.rank == 0 and not cfg.quiet
    bar = _progress(hist["step"], cfg.steps, show)
    log = bar.write if bar is not None else print

    def evaluate() -> float:
        mine = [i for i in range(cfg.eval_batches) if i % W == env.rank]
        per = len(range(0, cfg.eval_batches, W))
        vals = torch.full((per,), math.nan, dtype=torch.float64)
        with torch.no_grad():
            for k, i in enumerate(mine):
                x, y = _data.get_batch(val_tok, B, T, rng.fold_in(_VAL_KEY, i), dev)
                vals[k] = model(x, y).item()
            if cfg.fsdp:  # FSDP's forward is collective: every process runs `per` of them
                for _ in range(per - len(mine)):
                    model(*_data.get_batch(val_tok, B, T, rng.fold_in(_VAL_KEY, 0), dev))
        allv = _gather_tensor(vals.to(dev), env).cpu()  # (W, per-rank); batch i at [i%W, i//W]
        losses = [allv[i % W, i // W].item() for i in range(cfg.eval_batches)]
        return math.fsum(losses) / len(losses)

    def checkpoint():
        if ck_path is not None:
            # FSDP: gathered into whole tensors (a collective), the file an unsharded run writes
            msd = _full(model.state_dict()) if cfg.fsdp else model.state_dict()
            osd = [o.state_dict() if not cfg.fsdp else o.full_state_dict()
                   if isinstance(o, ECOAdamW) else _full(o.state_dict()) for o in opts]
            if env.rank == 0:
                _save(ck_path, {
                    "format": _FORMAT,
                    "config": {k: _jsonable(getattr(cfg, k)) for k in _TRAJECTORY},
                    "corpus_sha256": corpus.sha256, "world_size": W, "grad_accum": A,
                    "fsdp": cfg.fsdp, "model": msd, "optimizers": osd,
                    "schedulers": [s.state_dict() for s in scheds], "hist": hist})
        _barrier(env)

    wall0 = hist["wall_s"]  # wall time of earlier segments

    def clock():
        hist["wall_s"] = wall0 + time.perf_counter() - t_start

    diverged = hist["diverged_at"] is not None
    while hist["step"] < stop and not diverged:
        step = hist["step"]
        t0 = time.perf_counter()
        for o in opts:
            o.zero_grad(set_to_none=True)
        micro = []
        for a in range(A):
            x, y = _data.get_batch(train_tok, B, T, rng.fold_in(data_key, step, a * W + env.rank),
                                   dev)
            sync = ddp is None or a == A - 1
            if cfg.fsdp:  # as DDP's no_sync: reduce once per step, after the last micro-batch
                model.set_requires_gradient_sync(a == A - 1)
            with contextlib.nullcontext() if sync else ddp.no_sync():
                loss = fwd(x, y)
                (loss * (1.0 / A)).backward()
            micro.append(loss.detach().to(torch.float64))
        # Micro-batch losses in global order j = a * W + r, summed in that order.
        allm = _gather_tensor(torch.stack(micro), env).cpu()  # (W, A)
        loss_v = math.fsum(allm.T.reshape(-1).tolist()) / (A * W)
        gnorm = _clip_grad_norm(params, cfg.clip or math.inf, env)
        why = None
        if not math.isfinite(loss_v) or not math.isfinite(gnorm):
            why = "non-finite loss or gradient"
        elif loss_v > cfg.diverge_loss:
            why = f"loss {loss_v:.3f} > {cfg.diverge_loss:.3f}"
        else:
            try:
                for o in opts:
                    o.step()
            except ValueError as err:  # a non-finite update or scale inside the quantizer
                if "non-finite" not in str(err):
                    raise
                why = f"optimizer: {err}"
        if why is not None:
            diverged = True
            hist["diverged_at"] = step + 1
            hist["window"].append(loss_v)
            hist["curve"].append([step + 1, _mean(hist["window"]), None])  # the failed update
            if show:
                log(f"diverged at step {step + 1}: {why}")
            break
        for s in scheds:
            s.step()
        hist["step"] = step = step + 1
        hist["tokens"] += B * T * A * W
        hist["train_s"] += time.perf_counter() - t0
        hist["window"].append(loss_v)
        hist["recent"] = (hist["recent"] + [loss_v])[-10:]
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{loss_v:.4f}", refresh=False)
        evaluating = step % cfg.eval_every == 0 or step == cfg.steps
        if step % cfg.log_every == 0 or evaluating:
            hist["curve"].append([step, _mean(hist["window"]), None])
            hist["window"] = []
        if evaluating:
            te = time.perf_counter()
            hist["curve"][-1][2] = evaluate()
            hist["eval_s"] += time.perf_counter() - te
            if show:
                log(f"step {step}/{cfg.steps}  train {hist['curve'][-1][1]:.4f}  "
                    f"val {hist['curve'][-1][2]:.4f}  "
                    f"lr {opts[0].param_groups[0]['lr']:.3g}  "
                    f"tok/s {hist['tokens'] / max(hist['train_s'], 1e-9):.0f}")
        if cfg.ckpt_every and step % cfg.ckpt_every == 0 and step < stop:
            clock()
            checkpoint()
    if bar is not None:
        bar.close()
    clock()

    if not diverged and hist["step"] < cfg.steps:  # stopped early, to be resumed
        checkpoint()
        return {"finished": False, "step": hist["step"], "checkpoint": str(ck_path)}

    counts = param_counts(preset.model)
    peak_kind = ("cuda.max_memory_allocated" if dev.type == "cuda"
                 else "nbytes(params+states), ecosim.torch.nn.measured_memory")
    if dev.type == "cuda":
        peak = torch.cuda.max_memory_allocated(dev)
    else:  # static: parameters (codes + scales for stored layers) and optimizer states
        mems = [measured_memory(model, o) for o in opts]
        peak = mems[0].weights + sum(mm.total - mm.weights for mm in mems)
    last = hist["curve"][-1] if hist["curve"] else [0, None, None]
    q = method.quantizer()
    record = {
        "preset": cfg.preset, "method": cfg.method, "scheme": method.scheme,
        "weights": None if q is None else {"format": q.fmt.name, "mode": q.mode,
                                           "granularity": q.granularity, "scale": q.scale},
        "model": {**dataclasses.asdict(preset.model), "head_dim": preset.model.head_dim},
        "n_params": counts,
        "steps": cfg.steps, "steps_done": hist["step"], "batch": B, "seq": T, "grad_accum": A,
        "world_size": W, "global_batch": B * A * W, "lr": cfg.lr, "seed": cfg.seed,
        "schedule": {"warmup": cfg.warmup, "final_lr": cfg.final_lr},
        "betas": list(cfg.betas), "eps": cfg.eps, "weight_decay": cfg.weight_decay,
        "clip": cfg.clip, "tokens": hist["tokens"],
        "final_train_loss": (_mean(hist["recent"]) if not diverged else last[1]),
        "val_loss": None if diverged else last[2],
        "diverged": diverged, "diverged_at_step": hist["diverged_at"],
        "curve": hist["curve"],
        "bytes_per_param": _bytes_per_param(model, opts, cfg, method),
        "peak_memory_bytes": int(peak), "peak_memory_kind": peak_kind,
        "tokens_per_s": hist["tokens"] / hist["train_s"] if hist["train_s"] else None,
        "wall_s": hist["wall_s"],  # cumulative over resumed segments
        "train_s": hist["train_s"], "eval_s": hist["eval_s"],
        "segments": hist["segments"], "storage": cfg.storage, "fsdp": cfg.fsdp,
        "device": str(dev), "device_name": _device_name(dev), "torch": str(torch.__version__),
        "python": platform.python_version(), "threads": torch.get_num_threads(),
        "corpus": corpus.fingerprint(),
        "split": {"block": _data.SPLIT_BLOCK, "val_every": _data.VAL_EVERY,
                  "train_bytes": int(train_tok.numel()), "val_bytes": int(val_tok.numel())},
        "eval_batches": cfg.eval_batches,
    }
    record = _jsonable(record)
    hist["record"] = record
    checkpoint()
    if env.rank == 0 and cfg.results:
        Path(cfg.results).parent.mkdir(parents=True, exist_ok=True)
        with open(cfg.results, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, allow_nan=False) + "\n")
    return record


def _mean(xs) -> float:
    return math.fsum(xs) / len(xs) if xs else math.nan


def _device_name(dev: torch.device) -> str:
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    return platform.processor() or platform.machine()


def _progress(initial: int, total: int, show: bool):
    if not show or not sys.stderr.isatty():
        return None
    from tqdm import tqdm
    return tqdm(total=total, initial=initial, desc="train", dynamic_ncols=True)


# -- command line ------------------------------------------------------------------------------

def _listing() -> str:
    lines = ["presets (non-embedding / quantized parameters, vocab 256):"]
    for name, p in PRESETS.items():
        m, c = p.model, param_counts(p.model)
        lines.append(f"  {name:6s} d={m.d_model:<5d} L={m.n_layers:<3d} h={m.n_heads:<3d} "
                     f"hd={m.head_dim:<4d} ff={m.d_ff:<5d} non-emb={c['non_embedding']:>11,d} "
                     f"quantized={c['quantized']:>11,d} lr={p.lr:g} seq={p.seq} "
                     f"batch={p.batch}")
    lines.append("methods: " + ", ".join(METHODS))
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    d = LMConfig()
    ap = argparse.ArgumentParser(
        prog="python -m ecosim.torch.lm",
        description="Pretrain a byte-level Llama-style LM with quantized weights (ECO, "
                    "naive, master) and append a JSON results record.")
    ap.add_argument("--list", action="store_true", help="list presets and methods, then exit")
    ap.add_argument("--preset", default=d.preset, choices=list(PRESETS),
                    help="model preset (see --list)")
    ap.add_argument("--method", default=d.method, choices=list(METHODS),
                    help="Table 1 method (fp32: unquantized reference)")
    ap.add_argument("--steps", type=int, default=d.steps)
    ap.add_argument("--batch", type=int, help="sequences per micro-batch and process")
    ap.add_argument("--global-batch", type=int,
                    help="sequences per step (= batch * grad_accum * world size)")
    ap.add_argument("--seq", type=int, help="sequence length in bytes")
    ap.add_argument("--grad-accum", type=int, default=d.grad_accum)
    ap.add_argument("--lr", type=float, help="peak learning rate (default: the preset's)")
    ap.add_argument("--seed", type=int, default=d.seed)
    ap.add_argument("--data", help="text file or folder (default: the stdlib's .py files)")
    ap.add_argument("--device", default=d.device, help="cpu, cuda or cuda:N")
    ap.add_argument("--eval-every", type=int)
    ap.add_argument("--eval-batches", type=int, default=d.eval_batches)
    ap.add_argument("--log-every", type=int)
    ap.add_argument("--out", help="checkpoint folder")
    ap.add_argument("--results", help="JSON-lines file to append the record to")
    ap.add_argument("--resume", action="store_true", help="continue the run in --out")
    ap.add_argument("--overwrite", action="store_true",
                    help="start afresh even if --out holds a checkpoint (it is replaced)")
    ap.add_argument("--stop-after", type=int, help="checkpoint and stop after this step")
    ap.add_argument("--ckpt-every", type=int)
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--warmup", type=float, default=d.warmup)
    ap.add_argument("--final-lr", type=float, default=d.final_lr)
    ap.add_argument("--betas", type=float, nargs=2, default=list(d.betas))
    ap.add_argument("--eps", type=float, default=d.eps)
    ap.add_argument("--weight-decay", type=float, default=d.weight_decay)
    ap.add_argument("--clip", type=float, default=d.clip)
    ap.add_argument("--diverge-loss", type=float)
    ap.add_argument("--storage", default=d.storage, choices=STORAGES,
                    help="where the quantized weights live")
    ap.add_argument("--fsdp", action="store_true",
                    help="shard parameters and optimizer states with FSDP2 (needs --storage "
                         "param; run under torchrun)")
    return ap


def main(argv=None) -> int:
    """Command-line entry point (``python -m ecosim.torch.lm``)."""
    ap = _parser()
    args = vars(ap.parse_args(argv))
    if args.pop("list"):
        print(_listing())
        return 0
    args["betas"] = tuple(args["betas"])

    def fail(err: Exception) -> int:  # one line on stderr, exit status 2
        print(f"{ap.prog}: error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    try:
        cfg = LMConfig(**args)
        cfg.resolved(int(os.environ.get("WORLD_SIZE", "1")))  # batch arithmetic, early
    except (ValueError, FileNotFoundError, NotImplementedError) as err:
        return fail(err)
    try:
        rec = train(cfg)
    except (FileExistsError, FileNotFoundError, CheckpointError, _data.CorpusError) as err:
        return fail(err)  # the checkpoint folder, the checkpoint or the corpus
    if int(os.environ.get("RANK", "0")) == 0 and not cfg.quiet:
        if rec.get("finished") is False:
            print(f"stopped at step {rec['step']}; resume with --resume (checkpoint "
                  f"{rec['checkpoint']})")
        else:
            print(json.dumps({k: rec[k] for k in ("preset", "method", "steps_done",
                                                  "final_train_loss", "val_loss", "diverged",
                                                  "tokens_per_s", "wall_s")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
