"""The run's settings: the methods (Table 1's, DQT, BitNet b1.58), :class:`LMConfig` and the
learning-rate schedule.

Part of :mod:`ecosim.torch.lm` (whose docstring gives the recipe and the results record).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from ...core import quantizer as _np_quantizer
from ... import recipes
from ...optim.schedules import WarmupCosine
from .. import data as _data
from ..dqt import dqt_quantizers
from ..model import get_preset
from ..quantizer import Quantizer

__all__ = ["INT4_METHODS", "METHODS", "STORAGES", "TABLE1_METHODS", "LMConfig", "Method",
           "fsdp_check", "method_of"]

STORAGES = ("codes", "param")


@dataclass(frozen=True)
class Method:
    """A training method: a row of Table 1 (the weight-update scheme and the weight
    quantizer), DQT or BitNet b1.58.

    Attributes:
        scheme: ``"master"``, ``"naive"`` or ``"eco"`` (None: the block linears are plain
            FP32 parameters under torch's AdamW).
        fmt: weight format (``"float8_e4m3fn"``, ``"bfloat16"``, ``"int8"``, ``"ternary"``)
            or None.
        mode: ``"rtn"`` or ``"sr"`` (None when unquantized).
        granularity: the scales of a scaled format (``"row"``: FP8; ``"tensor"``: INT4).
        kind: ``"table1"`` (:class:`~ecosim.torch.ECOAdamW`, row-wise scales), ``"dqt"``
            (:class:`~ecosim.torch.dqt.DQTAdamW`: one scale per tensor, the previous step's)
            or ``"bitnet"`` (FP32 master weights under AdamW, the forward through
            :class:`~ecosim.torch.bitnet.BitLinear`).
        dqt_scale: DQT's rule for the scale of the previous weights (``"max"``: the DQT
            reference code's signed maximum, with which an integer grid never grows, as in
            the ``dqt`` experiment; ``"absmax"``); see :class:`~ecosim.torch.dqt.DQTAdamW`.
        wd_corrected, schedule_guard: :class:`~ecosim.torch.ECOAdamW`'s
            ``wd_corrected_injection`` and ``schedule_guard`` (ECO's variants, kind
            ``"eco_adam"``; the guard follows the run's own schedule, :attr:`LMConfig.schedule`).
    """

    scheme: str | None
    fmt: str | None = None
    mode: str | None = None
    granularity: str = "row"
    kind: str = "table1"
    dqt_scale: str = "max"
    wd_corrected: bool = False
    schedule_guard: bool = False

    def quantizer(self) -> Quantizer | None:
        """The weight quantizer: E4M3 (and other 8-bit and narrower formats) with absmax
        scales per :attr:`granularity`; 16-bit formats unscaled (their range needs no scale);
        DQT's step quantizer (per tensor) for DQT; None for FP32 and BitNet (FP32 master
        weights)."""
        if self.fmt is None or self.kind == "bitnet":
            return None
        if self.kind == "dqt":
            return dqt_quantizers(self.fmt, mode=self.mode)[0]
        if self.fmt in ("bfloat16", "float16"):
            return Quantizer(self.fmt, self.mode, scale=1.0)
        return Quantizer(self.fmt, self.mode, granularity=self.granularity)

    def numpy_quantizer(self):
        """The same quantizer for :mod:`ecosim.memory`'s formulas."""
        q = self.quantizer()
        if q is None:
            return None
        return _np_quantizer.Quantizer(q.fmt, q.mode, q.granularity, q.scale)


def _method(m: recipes.LMMethod) -> Method:
    """The runner's :class:`Method` of an entry of :data:`ecosim.recipes.LM_METHODS`."""
    return Method(m.scheme, m.fmt, m.mode, granularity=m.granularity, kind=m.kind,
                  wd_corrected=m.wd_corrected, schedule_guard=m.schedule_guard)


#: plain AdamW, Table 1's rows (:data:`ecosim.recipes.TABLE1`) with FP8 E4M3 weights, then
#: DQT (INT8 and ternary, SR, no master copy) and BitNet b1.58 (FP32 master, ternary forward):
#: every method of :data:`ecosim.recipes.LM_METHODS` but the INT4 ones
METHODS: dict[str, Method] = {n: _method(m) for n, m in recipes.LM_METHODS.items()
                              if m.weights != "int4"}
TABLE1_METHODS = tuple(m for m, v in METHODS.items() if v.kind == "table1" and m != "fp32")

#: Table 1's quantized rows with INT4 weights, one absmax scale per tensor (the format of the
#: paper's Table 2 fine-tuning): ``int4_master_rtn`` ... ``int4_eco_sr``
INT4_METHODS: dict[str, Method] = {n: _method(recipes.LM_METHODS[n])
                                   for n in recipes.lm_methods("int4")}


def method_of(name: str) -> Method:
    """The method of a name of :data:`METHODS` or :data:`INT4_METHODS` (ValueError else)."""
    m = METHODS.get(name) or INT4_METHODS.get(name)
    if m is None:
        raise ValueError(f"unknown method {name!r}; choose one of "
                         f"{list(METHODS) + list(INT4_METHODS)}")
    return m


def fsdp_check(name: str) -> None:
    """Refuse (ValueError) a method FSDP cannot shard: only Table 1's methods whose stored
    weights have one scale per output row (or none: FP32, BF16) keep their scales within a
    process's rows; a per-tensor scale (INT4, DQT) or BitNet's absmean needs the whole
    tensor (see :mod:`ecosim.torch.optim` on sharded parameters)."""
    m = method_of(name)
    if m.kind not in ("table1", "eco_adam") or (m.fmt is not None and m.granularity != "row"):
        raise ValueError(f"fsdp is for Table 1's methods with row-wise scales (fp32, bf16_master, "
                         f"fp8_*); {name!r} has a per-tensor scale or BitNet's absmean, which "
                         "a shard of rows cannot compute")


def _check_out_dir(out) -> None:
    """``out`` must be a folder or creatable as one (no file on its path)."""
    p = Path(out)
    if str(out) == "":
        raise ValueError("out must be a folder path, got ''")
    for q in (p, *p.parents):
        if q.exists():
            if not q.is_dir():
                raise ValueError(f"out {str(out)!r}: {str(q)!r} is a file, not a folder")
            break


def _check_results_file(results) -> None:
    """``results`` must be a file (or creatable as one), checked before any training so a
    run's record is never lost at its end."""
    p = Path(results)
    if str(results) == "" or p.is_dir():
        raise ValueError(f"results {str(results)!r} is a folder; pass a JSON-lines file path")
    for q in p.parents:
        if q.exists():
            if not q.is_dir():
                raise ValueError(f"results {str(results)!r}: {str(q)!r} is a file, not a "
                                 "folder")
            break


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
        method: a key of :data:`METHODS` or :data:`INT4_METHODS`.
        steps: optimizer steps of the whole run (the schedule's length).
        batch: sequences per micro-batch, per process (default: the preset's, or
            ``global_batch / (grad_accum * world_size)``).
        global_batch: sequences per optimizer step; must equal
            ``batch * grad_accum * world_size``.
        seq: sequence length in bytes (default: the preset's).
        grad_accum: micro-batches accumulated per process and step.
        lr: peak learning rate (default: the preset's).
        seed: root of every random draw (init, data, SR).
        data: a text file or folder; None is the standard library's ``.py`` sources;
            ``"stdlib:.txt"`` its files with other suffixes (:func:`ecosim.torch.data.load_corpus`).
        init_from: start from the model weights of this finished checkpoint (a
            ``checkpoint.pt`` or the ``out`` folder holding one) of a run of the same preset,
            not from a random init: every parameter takes the checkpoint's values (stored
            layers decoded: a BF16 run's linears are its bfloat16 weights, not its FP32 master
            copy), then the method's initial write quantizes the linears as it quantizes a
            random init (a master scheme keeps those FP32 values as its master copy). Its
            optimizer states, step and schedule are not taken: the run has its own. The
            record gains ``init`` (the checkpoint, its run, and the validation loss on this
            run's corpus before and after the initial write). A resume checks the weights
            (their SHA-256), not the path: a moved checkpoint resumes, a changed one is
            refused.
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
        final_lr: the cosine's end, as a fraction of the peak (0: annealed to zero, the
            paper's fine-tuning recipe; a step at lr 0 updates the moments and writes nothing,
            see :class:`ecosim.torch.ECOAdamW`).
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
        diagnostics: collect the quantized optimizer's per-step diagnostics
            (:meth:`ecosim.torch.ECOAdamW.diagnostics`: fraction of codes changed, never
            changed, ``|m|/|g|``, ECO's injected energy kept) and log and record them at every
            curve point (record field ``diagnostics``; with ``fsdp``, rank 0's rows). Off by
            default: they cost time (a few more passes over the weights at every step).
        autocast: compute the forward's matmuls (training and validation) in bfloat16
            under ``torch.autocast``, as the paper's BF16 runs do: activations and the weights
            as read (a master scheme's working copy, an ECO or naive run's stored values) are
            cast to bfloat16 at each matmul; the optimizer and the stored weights are
            unchanged. Off by default (FP32 matmuls).
        act_fp8: FP8 methods also round the input of each quantized linear layer to E4M3
            (RTN, one absmax scale per token; straight-through gradient;
            :mod:`ecosim.torch.lm.activations`). BF16 and FP32 runs ignore it, so a setting's
            BF16-with-master baseline carries the flag too. Off by default.
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
    diagnostics: bool = False
    autocast: bool = False
    act_fp8: bool = False
    init_from: str | None = None

    def __post_init__(self):
        get_preset(self.preset)
        method_of(self.method)
        for f in ("autocast", "act_fp8"):
            if not isinstance(getattr(self, f), bool):
                raise ValueError(f"{f} must be a bool, got {getattr(self, f)!r}")
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
        if not 0.0 <= self.final_lr <= 1.0:
            raise ValueError(f"final_lr must be in [0, 1], got {self.final_lr!r}")
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
        if self.data is not None and not (str(self.data).startswith(_data.STDLIB)
                                          or Path(self.data).exists()):
            raise FileNotFoundError(f"data path {self.data!r} does not exist")
        if self.diverge_loss is not None and not (math.isfinite(self.diverge_loss)
                                                  and self.diverge_loss > 0):
            raise ValueError(f"diverge_loss must be a finite loss > 0 (default 1.5 ln vocab), "
                             f"got {self.diverge_loss!r}")
        if self.out is not None:
            _check_out_dir(self.out)
        if self.results is not None:
            _check_results_file(self.results)
        if self.init_from is not None and not Path(self.init_from).exists():
            raise FileNotFoundError(f"init_from: no checkpoint at {self.init_from!r}")
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
        if self.fsdp:
            fsdp_check(self.method)
        if self.fsdp and self.storage != "param":
            raise ValueError(
                f"fsdp needs storage='param' (--storage param), got storage={self.storage!r}: "
                "a QuantizedLinear holds its codes in buffers and takes its gradient through a "
                "one-element GradSlot parameter broadcast to the weight's shape, which FSDP2 "
                "cannot shard (it shards parameters, not buffers, and a slot has no rows)")

    @property
    def schedule(self) -> WarmupCosine:
        """The run's learning-rate factor, ``t -> lr(t) / lr``: a linear warmup over the first
        ``W = round(warmup * steps)`` steps (``1/W, 2/W, ..., 1``), then a cosine from 1 at step
        ``W`` down to ``final_lr`` at the last step, ``steps - 1`` (and after it).
        :class:`~ecosim.optim.WarmupCosine` with ``peak=1``, ``init_frac=0`` and
        ``warmup_offset=1``; the run's LambdaLR and ECO's schedule guard read one such object.

        Example:
            >>> s = LMConfig(steps=100).schedule
            >>> [round(s(t), 3) for t in (0, 9, 10, 54, 55, 99)]
            [0.1, 1.0, 1.0, 0.558, 0.542, 0.1]
        """
        return WarmupCosine(1.0, self.steps, warmup_frac=self.warmup, init_frac=0.0,
                            final_frac=self.final_lr, warmup_offset=1)

    def resolved(self, world_size: int = 1) -> "LMConfig":
        """This config with every None default filled in for ``world_size`` processes.

        Raises:
            ValueError: ``global_batch`` is not ``batch * grad_accum * world_size``.
        """
        p = get_preset(self.preset)
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
