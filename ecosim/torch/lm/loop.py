"""The training loop: the optimizers of a run, one optimizer step, evaluation, logging and
checkpoints, and :func:`train`, which runs (or resumes) a whole run.

Part of :mod:`ecosim.torch.lm` (whose docstring gives the recipe, the determinism promises
and the results record).
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import time
from pathlib import Path

import torch

from ...core import rng
from ...optim.schedules import WarmupCosine
from .. import data as _data
from ..bitnet import bitnet_linears
from ..dqt import DQTAdamW
from ..model import Transformer, get_preset, quantized_names
from ..layers import store_weights
from ..nn import data_parallel
from ..optim import ECOAdamW
from . import checkpoint, record
from .activations import quantize_activations
from .config import LMConfig, method_of
from .distributed import Env, clip_grad_norm, fully_shard_model, gather_tensor, setup

__all__ = ["build_optimizers", "train"]

DIAG_KEYS = ("changed_frac", "never_changed_frac", "m_over_g", "inject_kept", "inject_lost")
_VAL_KEY = rng.fold_in(0, "val")  # validation batches: the same for every seed and method


def build_optimizers(model: Transformer, cfg: LMConfig,
                     schedule: WarmupCosine | None = None) -> list:
    """The optimizers of a run: ``[ECOAdamW (DQT: DQTAdamW) over the block-internal linears
    (if the method quantizes), torch AdamW over the rest]``. With ``cfg.storage == "codes"``
    the linears of ``model`` are first replaced by :class:`ecosim.torch.nn.QuantizedLinear`
    (in place); BitNet b1.58 replaces them by :class:`ecosim.torch.bitnet.BitLinear` (same
    parameters, all under torch's AdamW).
    ``cfg`` must be resolved (:meth:`LMConfig.resolved`: its ``lr`` is used). ``schedule``:
    the run's learning-rate factor (default :attr:`LMConfig.schedule`), the object the run's
    LambdaLR reads, which ECO's schedule guard reads too."""
    method = method_of(cfg.method)
    schedule = cfg.schedule if schedule is None else schedule
    if method.kind == "bitnet":  # FP32 master weights in torch's AdamW; BitLinear forwards
        bitnet_linears(model, {n.rsplit(".", 1)[0] for n in quantized_names(model)})
    qnames = set(quantized_names(model)) if method.scheme is not None else set()
    named = list(model.named_parameters())
    hp = dict(betas=cfg.betas, eps=cfg.eps)
    rest = [{"params": [p for n, p in named if n not in qnames and p.ndim >= 2],
             "weight_decay": cfg.weight_decay},
            {"params": [p for n, p in named if n not in qnames and p.ndim < 2],
             "weight_decay": 0.0}]
    # foreach: one call per operation for all tensors (on the CPU the same per-tensor kernels,
    # so the same bits as the default loop, with less Python per step; CUDA's default anyway)
    opts = [torch.optim.AdamW(rest, lr=cfg.lr, foreach=True, **hp)]
    if qnames:
        key = rng.fold_in(cfg.seed, "optimizer")
        weights = method.quantizer()
        if cfg.storage == "codes":  # the linears become codes + scales (same names, same key)
            layers = {n.rsplit(".", 1)[0] for n in qnames}
            store_weights(model, weights, key=key, predicate=lambda name, mod: name in layers)
            named = list(model.named_parameters())
            weights = None  # stored layers carry their quantizer
        pairs = [(n, p) for n, p in named if n in qnames]
        if method.kind == "dqt":  # per-tensor grids, the previous step's scale, q_init at start
            opts.insert(0, DQTAdamW(pairs, cfg.lr, method.fmt, weight_decay=cfg.weight_decay,
                                    scheme=method.scheme, mode=method.mode,
                                    scale=method.dqt_scale, key=key,
                                    diagnostics=cfg.diagnostics, **hp))
        else:  # the guard reads the rates the run's LambdaLR will set (_Run): cfg.lr * factor
            sched = (lambda s: cfg.lr * schedule(s)) if method.schedule_guard else None
            opts.insert(0, ECOAdamW(pairs, cfg.lr, weight_decay=cfg.weight_decay,
                                    scheme=method.scheme, weights=weights, key=key,
                                    diagnostics=cfg.diagnostics,
                                    wd_corrected_injection=method.wd_corrected,
                                    schedule_guard=method.schedule_guard, lr_schedule=sched,
                                    **hp))
    return opts




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
    env = setup(config.device, config.fsdp)
    try:
        return _train(config.resolved(env.world), env)
    finally:
        env.close()



def _train(cfg: LMConfig, env: Env) -> dict:
    run = _Run(cfg, env)
    if cfg.resume:
        init_sha = run.hist.get("init", {}).get("weights_sha256")  # of init_from now
        hist = checkpoint.restore(cfg, env.device, run.corpus.sha256, run.model, run.opts,
                                  run.scheds, init_sha)
        if hist["record"] is not None:  # finished already: nothing to train
            if env.rank == 0 and cfg.results:
                _append_record(cfg.results, hist["record"], only_new=True)
            return hist["record"]
        run.hist = hist
    return run.segment()


def _append_record(path, rec: dict, only_new: bool = False) -> None:
    """Append ``rec`` as one JSON line to ``path``; ``only_new``: unless the file holds it
    already (a finished run resumed with the results file it wrote to)."""
    line = json.dumps(rec, allow_nan=False)
    path = Path(path)
    if only_new and path.exists():
        with open(path, encoding="utf-8") as f:
            if any(old.rstrip("\n") == line for old in f):
                return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")


def _progress(initial: int, total: int, show: bool):
    if not show or not sys.stderr.isatty():
        return None
    from tqdm import tqdm
    return tqdm(total=total, initial=initial, desc="train", dynamic_ncols=True)


class _Run:
    """One run in this process: its data, model, optimizers, schedulers and history
    (``hist``, what a checkpoint holds besides the states), and the steps of a segment (from
    a fresh start or a resume to the end, a stop or a divergence)."""

    def __init__(self, cfg: LMConfig, env: Env):
        self.t_start = time.perf_counter()
        self.cfg, self.env = cfg, env
        dev, T = env.device, cfg.seq
        self.ck_path = checkpoint.path_of(cfg) if cfg.out else None
        if cfg.out and not (cfg.resume or cfg.overwrite) and self.ck_path.exists():
            raise FileExistsError(f"{str(self.ck_path)!r} exists; pass --resume to continue "
                                  "that run, --overwrite to start it again, or choose another "
                                  "--out")
        self.method = method_of(cfg.method)
        self.preset = get_preset(cfg.preset)
        corpus = self.corpus = _data.load_corpus(cfg.data)
        self.train_tok, self.val_tok = _data.split(corpus.tokens)
        for name, part in (("training", self.train_tok), ("validation", self.val_tok)):
            if part.numel() <= T + 1:
                raise _data.CorpusError(
                    f"the {name} split of the corpus {corpus.source!r} ({corpus.nbytes} bytes) "
                    f"has {part.numel()} bytes, too few for sequences of {T} bytes; use more "
                    f"data (one block of {_data.SPLIT_BLOCK} bytes in {_data.VAL_EVERY} is "
                    f"validation: {_data.SPLIT_BLOCK * _data.VAL_EVERY} bytes at least) or a "
                    "shorter --seq")
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(dev)

        gen = torch.Generator().manual_seed(rng.seed_of(rng.fold_in(cfg.seed, "init")))
        self.model = Transformer(self.preset.model, gen).to(dev)
        init = None
        if cfg.init_from:  # the checkpoint's weights, measured before the initial write
            sd, init = checkpoint.init_weights(cfg)
            self.model.load_state_dict(sd)
            if not cfg.resume:
                init["base_val_loss"] = self.evaluate()
        if cfg.fsdp:
            fully_shard_model(self.model, env)
        schedule = cfg.schedule  # one object: the optimizers' guard and every LambdaLR
        self.opts = build_optimizers(self.model, cfg, schedule)
        fmt = self.method.fmt
        if cfg.act_fp8 and fmt is not None and fmt.startswith("float8"):
            quantize_activations(self.model)  # after the layers are stored
        if init is not None and not cfg.resume:  # and after it (a resume restores both)
            init["start_val_loss"] = self.evaluate()
        lam = lambda s: schedule(s)  # noqa: E731  (a function: LambdaLR saves no state)
        self.scheds = [torch.optim.lr_scheduler.LambdaLR(o, lam) for o in self.opts]
        self.hist = {"step": 0, "curve": [], "window": [], "recent": [], "tokens": 0,
                     "train_s": 0.0, "eval_s": 0.0, "wall_s": 0.0, "segments": 0,
                     "diverged_at": None, "record": None}
        if init is not None:
            self.hist["init"] = init

    def segment(self) -> dict:
        """Train from ``hist["step"]`` to the end (or ``stop_after``, or a divergence) and
        return the record (or, stopped early, where the checkpoint is)."""
        cfg, env, hist = self.cfg, self.env, self.hist
        hist["segments"] += 1
        self.ddp = None
        if env.world > 1 and not cfg.fsdp:
            # data_parallel: DDP plus an initial broadcast that stored (code) layers can take;
            # every rank applies the same update with the same keys, so no buffer sync is needed
            dev = env.device
            self.ddp = data_parallel(self.model,
                                     device_ids=[dev.index] if dev.type == "cuda" else None,
                                     broadcast_buffers=False)
        self.fwd = self.ddp if self.ddp is not None else self.model
        self.params = list(self.model.parameters())
        self.data_key = rng.fold_in(cfg.seed, "data")
        stop = cfg.stop_after or cfg.steps
        self.show = env.rank == 0 and not cfg.quiet
        self.bar = _progress(hist["step"], cfg.steps, self.show)
        self.log = self.bar.write if self.bar is not None else print
        self.wall0 = hist["wall_s"]  # wall time of earlier segments

        diverged = hist["diverged_at"] is not None
        while hist["step"] < stop and not diverged:
            step = hist["step"]
            t0 = time.perf_counter()
            loss_v, why = self.step(step)
            if why is not None:
                diverged = True
                self.diverge(step, loss_v, why)
                break
            self.advance(loss_v, t0)
            step = hist["step"]
            if cfg.ckpt_every and step % cfg.ckpt_every == 0 and step < stop:
                self.clock()
                self.checkpoint()
        if self.bar is not None:
            self.bar.close()
        self.clock()

        if not diverged and hist["step"] < cfg.steps:  # stopped early, to be resumed
            self.checkpoint()
            return {"finished": False, "step": hist["step"], "checkpoint": str(self.ck_path)}
        rec = record.build(self, diverged)
        hist["record"] = rec
        self.checkpoint()
        if env.rank == 0 and cfg.results:
            _append_record(cfg.results, rec)
        return rec

    def step(self, step: int) -> tuple[float, str | None]:
        """Optimizer step ``step`` (0-based): the micro-batches' forwards and backwards, the
        gradient clip and the optimizers' updates. Returns the step's mean loss and why the
        run diverged (None: it did not, and the update was applied)."""
        cfg, env, opts, ddp = self.cfg, self.env, self.opts, self.ddp
        dev, W, A, B, T = env.device, env.world, cfg.grad_accum, cfg.batch, cfg.seq
        fwd, data_key = self.fwd, self.data_key
        for o in opts:
            o.zero_grad(set_to_none=True)
        micro = []
        for a in range(A):
            x, y = _data.get_batch(self.train_tok, B, T,
                                   rng.fold_in(data_key, step, a * W + env.rank), dev)
            sync = ddp is None or a == A - 1
            if cfg.fsdp:  # as DDP's no_sync: reduce once per step, after the last micro-batch
                self.model.set_requires_gradient_sync(a == A - 1)
            with contextlib.nullcontext() if sync else ddp.no_sync(), self.matmuls():
                loss = fwd(x, y)
                (loss * (1.0 / A)).backward()
            micro.append(loss.detach().to(torch.float64))
        # Micro-batch losses in global order j = a * W + r, summed in that order.
        allm = gather_tensor(torch.stack(micro), env).cpu()  # (W, A)
        loss_v = math.fsum(allm.T.reshape(-1).tolist()) / (A * W)
        gnorm = clip_grad_norm(self.params, cfg.clip or math.inf, env)
        if not math.isfinite(loss_v) or not math.isfinite(gnorm):
            return loss_v, "non-finite loss or gradient"
        if loss_v > cfg.diverge_loss:
            return loss_v, f"loss {loss_v:.3f} > {cfg.diverge_loss:.3f}"
        try:
            for o in opts:
                o.step()
        except ValueError as err:  # a non-finite update or scale inside the quantizer
            if "non-finite" not in str(err):
                raise
            return loss_v, f"optimizer: {err}"
        return loss_v, None

    def diverge(self, step: int, loss_v: float, why: str) -> None:
        """Mark the failed update ``step + 1`` in the history (and say so)."""
        hist = self.hist
        hist["diverged_at"] = step + 1
        hist["window"].append(loss_v)
        hist["curve"].append([step + 1, record.mean(hist["window"]), None])  # the failed update
        if self.show:
            self.log(f"diverged at step {step + 1}: {why}")

    def advance(self, loss_v: float, t0: float) -> None:
        """After a step's update: the schedulers, the history, the progress bar, a curve
        point and an evaluation when due, and the log line."""
        cfg, hist = self.cfg, self.hist
        for s in self.scheds:
            s.step()
        hist["step"] = step = hist["step"] + 1
        hist["tokens"] += cfg.batch * cfg.seq * cfg.grad_accum * self.env.world
        hist["train_s"] += time.perf_counter() - t0
        hist["window"].append(loss_v)
        hist["recent"] = (hist["recent"] + [loss_v])[-10:]
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(loss=f"{loss_v:.4f}", refresh=False)
        evaluating = step % cfg.eval_every == 0 or step == cfg.steps
        if step % cfg.log_every == 0 or evaluating:
            hist["curve"].append([step, record.mean(hist["window"]), None])
            hist["window"] = []
            self.diagnose(step)
        if evaluating:
            te = time.perf_counter()
            hist["curve"][-1][2] = self.evaluate()
            hist["eval_s"] += time.perf_counter() - te
            if self.show:
                self.log(f"step {step}/{cfg.steps}  train {hist['curve'][-1][1]:.4f}  "
                         f"val {hist['curve'][-1][2]:.4f}  "
                         f"lr {self.opts[0].param_groups[0]['lr']:.3g}  "
                         f"tok/s {hist['tokens'] / max(hist['train_s'], 1e-9):.0f}")

    def diagnose(self, step: int) -> None:
        """With ``cfg.diagnostics``: keep the quantized optimizer's diagnostics of the last
        step (``hist["diagnostics"]``, a record field) and log them."""
        opt = self.opts[0]
        if not self.cfg.diagnostics or not isinstance(opt, ECOAdamW):
            return
        d = opt.diagnostics()
        if d is None:  # pragma: no cover - a step ran before this call
            return
        row = {"step": step, **{k: d[k] for k in DIAG_KEYS}}
        self.hist.setdefault("diagnostics", []).append(row)
        if self.show:
            self.log(f"step {step}/{self.cfg.steps}  changed {d['changed_frac']:.4f}  "
                     f"never changed {d['never_changed_frac']:.4f}  "
                     f"|m|/|g| {d['m_over_g']:.3g}  inject kept {d['inject_kept']:.4g}")

    def matmuls(self):
        """The forward's matmul precision: bfloat16 autocast with ``cfg.autocast``, else a
        no-op context."""
        return torch.autocast(self.env.device.type, dtype=torch.bfloat16,
                              enabled=self.cfg.autocast)

    def evaluate(self) -> float:
        """The mean validation loss over ``cfg.eval_batches`` fixed batches, split over the
        processes (FSDP: every process runs as many forwards, its forward is collective)."""
        cfg, env, model, dev = self.cfg, self.env, self.model, self.env.device
        W, B, T = env.world, cfg.batch, cfg.seq
        mine = [i for i in range(cfg.eval_batches) if i % W == env.rank]
        per = len(range(0, cfg.eval_batches, W))
        vals = torch.full((per,), math.nan, dtype=torch.float64)
        with torch.no_grad():
            for k, i in enumerate(mine):
                x, y = _data.get_batch(self.val_tok, B, T, rng.fold_in(_VAL_KEY, i), dev)
                with self.matmuls():
                    vals[k] = model(x, y).item()
            if cfg.fsdp:  # FSDP's forward is collective: every process runs `per` of them
                for _ in range(per - len(mine)):
                    model(*_data.get_batch(self.val_tok, B, T, rng.fold_in(_VAL_KEY, 0), dev))
        allv = gather_tensor(vals.to(dev), env).cpu()  # (W, per-rank); batch i at [i%W, i//W]
        losses = [allv[i % W, i // W].item() for i in range(cfg.eval_batches)]
        return math.fsum(losses) / len(losses)

    def checkpoint(self) -> None:
        """Write the checkpoint (if the run has an ``out`` folder): every process calls it."""
        checkpoint.write(self.ck_path, self.cfg, self.env, self.model, self.opts, self.scheds,
                         self.hist, self.corpus.sha256)

    def clock(self) -> None:
        """Bring the history's wall time (over all segments) up to now."""
        self.hist["wall_s"] = self.wall0 + time.perf_counter() - self.t_start
