"""The command line of the LM runner: ``python -m ecosim.torch.lm`` (``--help``, ``--list``).

Part of :mod:`ecosim.torch.lm`. Bad options, corpora and checkpoints end in one line on
stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from .. import data as _data
from ..model import PRESETS, param_counts
from .checkpoint import CheckpointError
from .config import INT4_METHODS, METHODS, STORAGES, LMConfig
from .loop import train

__all__ = ["main"]


def _listing() -> str:
    lines = ["presets (non-embedding / quantized parameters, vocab 256):"]
    for name, p in PRESETS.items():
        m, c = p.model, param_counts(p.model)
        lines.append(f"  {name:6s} d={m.d_model:<5d} L={m.n_layers:<3d} h={m.n_heads:<3d} "
                     f"hd={m.head_dim:<4d} ff={m.d_ff:<5d} non-emb={c['non_embedding']:>11,d} "
                     f"quantized={c['quantized']:>11,d} lr={p.lr:g} seq={p.seq} "
                     f"batch={p.batch}")
    lines.append("methods: " + ", ".join([*METHODS, *INT4_METHODS]))
    return "\n".join(lines)


class _Help(argparse.HelpFormatter):
    """Every option's default in its help line (options whose default depends on the preset
    or the run say so in their own words)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.default not in (None, False, argparse.SUPPRESS) and "%(default)" not in text:
            text += " (default: %(default)s)"
        return text


def _parser() -> argparse.ArgumentParser:
    d = LMConfig()
    ap = argparse.ArgumentParser(
        prog="python -m ecosim.torch.lm", formatter_class=_Help,
        description="Pretrain a byte-level Llama-style LM with quantized weights (ECO, "
                    "naive, master) and append a JSON results record. With no options it "
                    "prints this help; try --preset tiny --steps 200.")
    ap.add_argument("--list", action="store_true", help="list presets and methods, then exit")
    ap.add_argument("--preset", default=d.preset, choices=list(PRESETS), metavar="PRESET",
                    help="model preset (see --list)")
    ap.add_argument("--method", default=d.method, choices=[*METHODS, *INT4_METHODS],
                    metavar="METHOD", help="Table 1 method, see --list (fp32: unquantized "
                         "reference; int4_*: INT4 weights, one scale per tensor)")
    ap.add_argument("--steps", type=int, default=d.steps,
                    help="optimizer steps of the run (the schedule's length)")
    ap.add_argument("--batch", type=int,
                    help="sequences per micro-batch and process (default: the preset's)")
    ap.add_argument("--global-batch", type=int,
                    help="sequences per step (= batch * grad_accum * world size; default: "
                         "from --batch)")
    ap.add_argument("--seq", type=int, help="sequence length in bytes (default: the preset's)")
    ap.add_argument("--grad-accum", type=int, default=d.grad_accum,
                    help="micro-batches accumulated per process and step")
    ap.add_argument("--lr", type=float, help="peak learning rate (default: the preset's)")
    ap.add_argument("--seed", type=int, default=d.seed,
                    help="root of every random draw (init, data order, SR)")
    ap.add_argument("--data", help="text file or folder (default: the stdlib's .py files; "
                                   "stdlib:.txt: its .txt files)")
    ap.add_argument("--init-from", metavar="CHECKPOINT",
                    help="start from the model weights of this finished checkpoint (file or "
                         "--out folder) of the same preset; own optimizer and schedule")
    ap.add_argument("--device", default=d.device, help="cpu, cuda or cuda:N")
    ap.add_argument("--eval-every", type=int,
                    help="validation every this many steps and at the end (default: steps "
                         "// 10)")
    ap.add_argument("--eval-batches", type=int, default=d.eval_batches,
                    help="validation batches per evaluation")
    ap.add_argument("--log-every", type=int,
                    help="a curve point every this many steps (default: steps // 100)")
    ap.add_argument("--out", help="checkpoint folder (default: no checkpoint)")
    ap.add_argument("--results",
                    help="JSON-lines file to append the record to (default: not written)")
    ap.add_argument("--resume", action="store_true", help="continue the run in --out")
    ap.add_argument("--overwrite", action="store_true",
                    help="start afresh even if --out holds a checkpoint (it is replaced)")
    ap.add_argument("--stop-after", type=int, help="checkpoint and stop after this step")
    ap.add_argument("--ckpt-every", type=int,
                    help="also checkpoint every this many steps (always at the end)")
    ap.add_argument("--quiet", action="store_true", help="no progress bar and no log lines")
    ap.add_argument("--warmup", type=float, default=d.warmup,
                    help="fraction of the steps with a linear warmup")
    ap.add_argument("--final-lr", type=float, default=d.final_lr,
                    help="the cosine's end as a fraction of the peak (0: anneal to zero)")
    ap.add_argument("--betas", type=float, nargs=2, default=list(d.betas), help="AdamW's")
    ap.add_argument("--eps", type=float, default=d.eps, help="AdamW's")
    ap.add_argument("--weight-decay", type=float, default=d.weight_decay, help="AdamW's")
    ap.add_argument("--clip", type=float, default=d.clip,
                    help="global gradient-norm clip (0: off)")
    ap.add_argument("--diverge-loss", type=float,
                    help="a training loss above this counts as diverged (default: 1.5 ln 256)")
    ap.add_argument("--storage", default=d.storage, choices=STORAGES,
                    help="where the quantized weights live")
    ap.add_argument("--diagnostics", action="store_true",
                    help="log and record the quantized optimizer's per-step diagnostics "
                         "(codes changed, never changed, |m|/|g|, ECO injection kept) at "
                         "every curve point (costs time)")
    ap.add_argument("--bf16-autocast", dest="autocast", action="store_true",
                    help="compute the forward's matmuls in bfloat16 autocast (the paper's "
                         "BF16 runs); weights and optimizer unchanged")
    ap.add_argument("--act-fp8", action="store_true",
                    help="FP8 methods also round each quantized linear's input to E4M3 (RTN, "
                         "one scale per token)")
    ap.add_argument("--fsdp", action="store_true",
                    help="shard parameters and optimizer states with FSDP2 (needs --storage "
                         "param; run under torchrun)")
    return ap


def main(argv=None) -> int:
    """Command-line entry point (``python -m ecosim.torch.lm``)."""
    ap = _parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv:  # nothing asked: the help, not a silent run that writes nothing
        ap.print_help()
        return 0
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
