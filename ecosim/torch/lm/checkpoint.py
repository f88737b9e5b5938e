"""Checkpoints of a run: written atomically, checked against the run that resumes them, and
restored into its model, optimizers and schedulers.

Part of :mod:`ecosim.torch.lm`. A checkpoint holds the whole (gathered) model and optimizer
states whatever the layout, so a run resumes under any world size, sharded or not.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
from pathlib import Path

import torch

from ..model import Transformer, get_preset, quantized_names
from ..models import unstore_weights
from ..layers import store_weights
from ..optim import ECOAdamW
from .config import LMConfig, method_of
from .distributed import Env, barrier, gather_full, load_full_model, shard_adamw_state

__all__ = ["CHECKPOINT", "CURVE", "CheckpointError", "init_weights", "jsonable", "load", "path_of",
           "restore", "save", "write"]

CHECKPOINT = "checkpoint.pt"
FORMAT = "ecosim.lm/1"

# Fields that define the trajectory: a resume must match them (eval/log/io fields may change).
TRAJECTORY = ("preset", "method", "steps", "batch", "global_batch", "seq", "lr", "seed",
              "warmup", "final_lr", "betas", "eps", "weight_decay", "clip", "diverge_loss",
              "storage", "autocast", "act_fp8", "init_from")  # not world_size, grad_accum, fsdp: layouts of the same run
# Fields that define what the curve holds (its points, the validation batches behind each,
# the diagnostics beside them): a resume must match them too, or the curve would mix two
# meanings under the record's one value. Log and I/O fields may change.
CURVE = ("eval_every", "eval_batches", "diagnostics")


def path_of(cfg: LMConfig) -> Path:
    """Where the run ``cfg`` keeps its checkpoint (``cfg.out`` must be set)."""
    return Path(cfg.out) / CHECKPOINT


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed: unreadable, not ours, or from another run."""


def unusable(path: Path, why: str) -> CheckpointError:
    """The error for a checkpoint at ``path`` that cannot be resumed, and ``why``."""
    return CheckpointError(f"checkpoint {str(path)!r} {why}: delete it or pass --overwrite "
                           "to start the run again")


def save(path: Path, payload: dict):
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


def load(cfg: LMConfig, device, corpus_sha: str, init_sha: str | None = None) -> dict:
    """The checkpoint of run ``cfg`` (tensors on ``device``), checked to be ours and from the
    same trajectory (the fields of ``TRAJECTORY`` and the corpus ``corpus_sha``). A run
    started ``init_from`` a checkpoint is compared by the weights it started from, not by
    that checkpoint's path: ``init_sha`` (the ``weights_sha256`` of :func:`init_weights` now;
    None without ``init_from``) must equal the one its history recorded, so a moved file
    resumes and a changed one is refused.

    Raises:
        FileNotFoundError: there is no checkpoint.
        CheckpointError: it is unreadable, not an ecosim.lm checkpoint, or another run's.
    """
    path = path_of(cfg)
    if not path.exists():
        raise FileNotFoundError(f"--resume: no checkpoint at {str(path)!r}")
    try:
        ck = torch.load(path, map_location=device, weights_only=True)
    except Exception as exc:  # truncated, garbage, or pickled objects weights_only refuses
        raise unusable(path, f"is unreadable (truncated or not a checkpoint: "
                              f"{type(exc).__name__})") from None
    if not isinstance(ck, dict) or ck.get("format") != FORMAT or not isinstance(
            ck.get("config"), dict) or not all(k in ck for k in _KEYS):
        raise unusable(path, f"is not an {FORMAT} checkpoint")
    want = {k: jsonable(getattr(cfg, k)) for k in TRAJECTORY + CURVE if k != "init_from"}
    have = {"autocast": False, "act_fp8": False, "init_from": None,
            **{k: want[k] for k in CURVE},  # checkpoints from before CURVE was recorded
            **ck["config"]}  # from before the flags
    bad = {k: (have.get(k), v) for k, v in want.items() if have.get(k) != v}
    was = (None if have["init_from"] is None
           else (ck.get("hist", {}).get("init") or {}).get("weights_sha256", "unrecorded"))
    if was != init_sha:
        bad["init_from weights_sha256"] = (was, init_sha)
    if ck["corpus_sha256"] != corpus_sha:
        bad["corpus"] = (ck["corpus_sha256"], corpus_sha)
    if bad:
        raise CheckpointError(f"the checkpoint {str(path)!r} was written by a different run; "
                              f"mismatched (checkpoint, now): {bad}; pass the same options, "
                              "--overwrite to replace it, or another --out")
    return ck


_KEYS = ("corpus_sha256", "model", "optimizers", "schedulers", "hist")


def jsonable(x):
    """Floats that JSON can hold (non-finite -> None), tuples as lists."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, dict):
        return {k: jsonable(v) for k, v in x.items()}
    return x



def write(path: Path | None, cfg: LMConfig, env: Env, model, opts, scheds, hist: dict,
          corpus_sha: str) -> None:
    """Checkpoint the run (nothing if ``path`` is None): the model, the optimizers and the
    schedulers, with the history ``hist``. Every process calls it (with FSDP the states are
    gathered into whole tensors, a collective: the file an unsharded run writes); rank 0
    writes the file, then all wait for it."""
    if path is not None:
        # FSDP: gathered into whole tensors (a collective), the file an unsharded run writes
        msd = gather_full(model.state_dict()) if cfg.fsdp else model.state_dict()
        osd = [o.state_dict() if not cfg.fsdp else o.full_state_dict()
               if isinstance(o, ECOAdamW) else gather_full(o.state_dict()) for o in opts]
        if env.rank == 0:
            save(path, {
                "format": FORMAT,
                "config": {k: jsonable(getattr(cfg, k)) for k in TRAJECTORY + CURVE},
                "corpus_sha256": corpus_sha, "world_size": env.world,
                "grad_accum": cfg.grad_accum,
                "fsdp": cfg.fsdp, "model": msd, "optimizers": osd,
                "schedulers": [s.state_dict() for s in scheds], "hist": hist})
    barrier(env)


def restore(cfg: LMConfig, device, corpus_sha: str, model, opts, scheds,
            init_sha: str | None = None) -> dict:
    """Load the run's checkpoint (:func:`load`, given ``init_sha``) into ``model``, ``opts``
    and ``scheds`` and return its history; a finished run's history (``hist["record"]`` set)
    is returned before anything is loaded.

    Raises:
        CheckpointError: the checkpoint's states do not fit this model and these optimizers.
    """
    ck = load(cfg, device, corpus_sha, init_sha)
    try:
        hist = ck["hist"]
        if hist["record"] is not None:  # finished already: nothing to train
            return hist
        if cfg.fsdp:
            load_full_model(model, ck["model"])
        else:
            model.load_state_dict(ck["model"])
        for o, s in zip(opts, ck["optimizers"]):
            # ECOAdamW takes whole states for its DTensor parameters itself
            o.load_state_dict(s if not cfg.fsdp or isinstance(o, ECOAdamW)
                              else shard_adamw_state(s, o))
        for sch, s in zip(scheds, ck["schedulers"]):
            sch.load_state_dict(s)
        return hist
    except torch.OutOfMemoryError:
        raise
    except (KeyError, TypeError, IndexError, ValueError, RuntimeError) as exc:
        why = (str(exc).strip().splitlines() or [""])[0][:200]
        raise unusable(path_of(cfg), f"does not fit this run ({type(exc).__name__}: "
                                    f"{why})") from None


def init_weights(cfg: LMConfig) -> tuple[dict, dict]:
    """The model weights of the finished checkpoint ``cfg.init_from`` (a file, or a folder
    holding :data:`CHECKPOINT`), for a run of the same preset.

    Stored (code) layers are decoded: the weights are the values the checkpointed model
    computed with (a BF16 run's bfloat16 linears, not its FP32 master copy, which lives in the
    optimizer state and is not read), every tensor float32 on the CPU.

    Returns:
        ``(state_dict, info)``: a state dict of a plain :class:`ecosim.torch.model.Transformer`
        and what identifies the checkpoint (``checkpoint``, its run's ``preset``, ``method``,
        ``steps``, ``seed``, ``corpus_sha256``, and ``weights_sha256``: the SHA-256 of the
        state dict's bytes in key order).

    Raises:
        FileNotFoundError: no checkpoint there.
        CheckpointError: unreadable, not ours, of another preset, or of an unfinished or
            diverged run.
    """
    path = Path(cfg.init_from)
    if path.is_dir():
        path = path / CHECKPOINT
    if not path.is_file():
        raise FileNotFoundError(f"init_from: no checkpoint at {str(path)!r}")
    try:
        ck = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # truncated, garbage, or pickled objects weights_only refuses
        raise CheckpointError(f"init_from: {str(path)!r} is unreadable (truncated or not a "
                              f"checkpoint: {type(exc).__name__})") from None
    if not isinstance(ck, dict) or ck.get("format") != FORMAT or not isinstance(
            ck.get("config"), dict) or not all(k in ck for k in _KEYS):
        raise CheckpointError(f"init_from: {str(path)!r} is not an {FORMAT} checkpoint")
    conf, rec = ck["config"], ck["hist"].get("record")
    if conf.get("preset") != cfg.preset:
        raise CheckpointError(f"init_from: {str(path)!r} holds a model of preset "
                              f"{conf.get('preset')!r}, this run is preset {cfg.preset!r}: "
                              "pass a checkpoint of the same preset")
    if rec is None or rec.get("diverged"):
        why = "diverged" if rec is not None else f"stopped at step {ck['hist'].get('step')}"
        raise CheckpointError(f"init_from: the run of {str(path)!r} {why}: start from a "
                              "finished run's checkpoint")
    model = Transformer(get_preset(cfg.preset).model, torch.Generator().manual_seed(0))
    method = method_of(conf["method"])
    if method.scheme is not None and conf.get("storage", "codes") == "codes":
        layers = {n.rsplit(".", 1)[0] for n in quantized_names(model)}
        store_weights(model, method.quantizer(), predicate=lambda name, mod: name in layers)
    try:
        model.load_state_dict(ck["model"])
    except (KeyError, RuntimeError, ValueError) as exc:
        why = (str(exc).strip().splitlines() or [""])[0][:200]
        raise CheckpointError(f"init_from: {str(path)!r} does not fit preset {cfg.preset!r} "
                              f"({type(exc).__name__}: {why})") from None
    sd = {k: v.detach().to(torch.float32).clone()
          for k, v in unstore_weights(model).state_dict().items()}
    h = hashlib.sha256()
    for k, v in sd.items():
        h.update(k.encode())
        h.update(v.numpy().tobytes())
    info = {"checkpoint": str(path), "preset": conf["preset"], "method": conf["method"],
            "steps": conf.get("steps"), "seed": conf.get("seed"),
            "corpus_sha256": ck["corpus_sha256"], "weights_sha256": h.hexdigest()}
    return sd, info
