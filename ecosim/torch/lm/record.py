"""The results record of a finished run: outcome, memory cost (bytes per parameter, formula
and measured) and provenance.

Part of :mod:`ecosim.torch.lm` (whose docstring lists the record's fields).
"""

from __future__ import annotations

import dataclasses
import math
import platform

import torch

from ... import memory as _memory
from ... import optim as _np_optim
from .. import data as _data
from ..dtensor import local_tensor
from ..model import param_counts, quantized_names
from ..memory import measured_memory
from .checkpoint import jsonable

__all__ = ["build", "bytes_per_param", "mean"]


def mean(xs) -> float:
    """The mean of ``xs`` (exactly rounded sum), NaN when empty."""
    return math.fsum(xs) / len(xs) if xs else math.nan


def _device_name(dev: torch.device) -> str:
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    return platform.processor() or platform.machine()


def bytes_per_param(model, opts, cfg, method) -> dict:
    """Static bytes per parameter of the quantized linears: formula and measured."""
    named = dict(model.named_parameters())
    qn = quantized_names(model)
    shapes = {n: tuple(named[n].shape) for n in qn}
    n = sum(named[k].numel() for k in qn)
    n_here = sum(local_tensor(named[k]).numel() for k in qn)  # FSDP: this process's rows
    scheme = method.scheme or "fp"
    np_opt = _np_optim.adamw(cfg.lr, *cfg.betas, cfg.eps, cfg.weight_decay, scheme=scheme,
                             weights=method.numpy_quantizer())
    formula = _memory.static_bytes(np_opt, shapes)
    qparams = [named[k] for k in qn]
    held = measured_memory(qparams, opts[0]).per_param()
    measured = dict.fromkeys(("weights", "master", "m", "v", "e_prev"), 0)
    for name in qn:
        p = named[name]
        st = opts[0].state[p]
        if method.scheme is None:
            measured["weights"] += local_tensor(p).nbytes
            measured["m"] += local_tensor(st["exp_avg"]).nbytes
            measured["v"] += local_tensor(st["exp_avg_sq"]).nbytes
            continue
        opt = opts[0]
        if method.scheme != "master":  # the paper's convention: a master's FP8 copy is transient
            measured["weights"] += opt.encoded(p).nbytes
        for b in ("master", "m", "v", "e_prev"):  # e_prev: eco_momentum_exact's error
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
                 f"process holds for these layers (ecosim.torch.memory.measured_memory; "
                 f"storage={cfg.storage!r}: 'codes' holds codes + scales, 'param' FP32 values, "
                 "plus the optimizer's states; with fsdp, measured and held count this "
                 "process's rows)"),
    }



def build(run, diverged: bool) -> dict:
    """The record of ``run`` (a finished or diverged :class:`ecosim.torch.lm.loop` run),
    JSON-ready (non-finite numbers as None)."""
    cfg, env, hist, model, opts = run.cfg, run.env, run.hist, run.model, run.opts
    method, preset, dev = run.method, run.preset, env.device
    B, T, A, W = cfg.batch, cfg.seq, cfg.grad_accum, env.world
    counts = param_counts(preset.model)
    peak_kind = ("cuda.max_memory_allocated" if dev.type == "cuda"
                 else "nbytes(params+states), ecosim.torch.memory.measured_memory")
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
                                           "granularity": q.granularity,
                                           "scale": (f"previous step's {method.dqt_scale}"
                                                     if method.kind == "dqt" else q.scale)},
        "model": {**dataclasses.asdict(preset.model), "head_dim": preset.model.head_dim},
        "n_params": counts,
        "steps": cfg.steps, "steps_done": hist["step"], "batch": B, "seq": T, "grad_accum": A,
        "world_size": W, "global_batch": B * A * W, "lr": cfg.lr, "seed": cfg.seed,
        "schedule": {"warmup": cfg.warmup, "final_lr": cfg.final_lr},
        "betas": list(cfg.betas), "eps": cfg.eps, "weight_decay": cfg.weight_decay,
        "clip": cfg.clip, "tokens": hist["tokens"],
        "final_train_loss": (mean(hist["recent"]) if not diverged else last[1]),
        "val_loss": None if diverged else last[2],
        "diverged": diverged, "diverged_at_step": hist["diverged_at"],
        "curve": hist["curve"],
        "bytes_per_param": bytes_per_param(model, opts, cfg, method),
        "peak_memory_bytes": int(peak), "peak_memory_kind": peak_kind,
        "tokens_per_s": hist["tokens"] / hist["train_s"] if hist["train_s"] else None,
        "wall_s": hist["wall_s"],  # cumulative over resumed segments
        "train_s": hist["train_s"], "eval_s": hist["eval_s"],
        "segments": hist["segments"], "storage": cfg.storage, "fsdp": cfg.fsdp,
        "autocast": cfg.autocast, "act_fp8": cfg.act_fp8,
        "device": str(dev), "device_name": _device_name(dev), "torch": str(torch.__version__),
        "python": platform.python_version(), "threads": torch.get_num_threads(),
        "corpus": run.corpus.fingerprint(),
        "split": {"block": _data.SPLIT_BLOCK, "val_every": _data.VAL_EVERY,
                  "train_bytes": int(run.train_tok.numel()),
                  "val_bytes": int(run.val_tok.numel())},
        "eval_every": cfg.eval_every, "eval_batches": cfg.eval_batches,
        "diverge_loss": cfg.diverge_loss,
        "diagnostics": hist.get("diagnostics") if cfg.diagnostics else None,
    }
    if hist.get("init") is not None:  # --init-from: the checkpoint, and the loss it starts at
        record["init"] = hist["init"]
    return jsonable(record)
