"""Run the language-model protocol of ``make figures`` (every method x every seed) outside the
cache, in parallel processes, on any device, into one results file the lm figures plot.

The settings are the lm experiment's own (:class:`ecosim.experiments.lm.LMTableConfig`: preset,
steps, batch, sequence length, validation, methods and seeds), so a run here is the same
protocol as the cached one, on another device or with the paper's two switches on:

    python benchmarks/lm_protocol.py --device cuda --jobs 12 --out results/lm_protocol.jsonl
    python benchmarks/lm_protocol.py --extra=--bf16-autocast --extra=--act-fp8 --out flags.jsonl
    ecosim figures --only lm_table lm_pareto --set lm.results_file=results/lm_protocol.jsonl

Each run is ``python -m ecosim.torch.lm ... --results PART`` with a part file of its own (so
parallel runs never write one file); each finished run is appended to the results file at
once (so a run cut short by a time limit keeps what finished), which is rewritten in (method,
seed) order at the end. On CUDA
every record holds ``peak_memory_bytes`` (``torch.cuda.max_memory_allocated``); the summary
prints it per method.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def steps_for(preset: str, tokens_per_param: float, batch: int, seq: int) -> int:
    """Steps that give ``preset`` at least ``tokens_per_param`` training tokens per
    non-embedding parameter with ``batch`` sequences of ``seq`` tokens a step."""
    from ecosim.torch.model import PRESETS, param_counts

    n = param_counts(PRESETS[preset].model)["non_embedding"]
    return math.ceil(tokens_per_param * n / (batch * seq))


def protocol(preset=None, steps=None, methods=None, seeds=None, tokens_per_param=None,
             lr=None):
    """The runs of the lm experiment's default config (or the given overrides): a list of
    ``(method, seed, argv)`` with the runner's command-line arguments.

    ``tokens_per_param`` sets the steps from the budget (:func:`steps_for`); validation then
    runs every tenth of the run, as the protocol's does. ``lr``: the peak learning rate
    (default: the preset's)."""
    from ecosim.experiments.lm import LMTableConfig

    cfg = LMTableConfig()
    preset = preset or cfg.presets[0]
    if steps is not None and tokens_per_param is not None:
        raise SystemExit("give --steps or --tokens-per-param, not both")
    if tokens_per_param is not None:
        if not tokens_per_param > 0:
            raise SystemExit(f"--tokens-per-param must be positive, got {tokens_per_param}")
        steps = steps_for(preset, tokens_per_param, cfg.batch, cfg.seq)
    if steps is None and preset in cfg.presets:
        steps = cfg.steps[cfg.presets.index(preset)]
    if steps is None:
        raise SystemExit(f"--steps is needed for preset {preset!r} (not in the protocol)")
    # validation every tenth of the run (the protocol's 65 of 650)
    eval_every = max(1, steps * cfg.eval_every // cfg.steps[0])
    runs = []
    for method in methods or cfg.methods:
        for seed in range(seeds or cfg.seeds[0]):
            runs.append((method, seed, [
                "--preset", preset, "--method", method, "--seed", str(seed),
                "--steps", str(steps), "--batch", str(cfg.batch), "--seq", str(cfg.seq),
                "--eval-every", str(min(eval_every, steps)),
                "--eval-batches", str(cfg.eval_batches), "--quiet"]
                + ([] if lr is None else ["--lr", repr(float(lr))])))
    return runs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument("--jobs", type=int, default=1, help="runs at a time")
    ap.add_argument("--out", required=True, help="results file (JSON lines; replaced)")
    ap.add_argument("--preset", help="default: the protocol's")
    ap.add_argument("--steps", type=int, help="default: the protocol's for its preset")
    ap.add_argument("--tokens-per-param", type=float,
                    help="set the steps from a budget of training tokens per non-embedding "
                         "parameter (instead of --steps)")
    ap.add_argument("--lr", type=float, help="peak learning rate (default: the preset's)")
    ap.add_argument("--methods", nargs="+", help="default: the protocol's (all)")
    ap.add_argument("--seeds", type=int, help="number of seeds (default: the protocol's)")
    ap.add_argument("--extra", action="append", default=[],
                    help="an argument passed on to every run (repeat it)")
    args = ap.parse_args(argv)
    if args.jobs < 1:
        ap.error(f"--jobs must be a positive integer, got {args.jobs}")
    runs = protocol(args.preset, args.steps, args.methods, args.seeds, args.tokens_per_param,
                    args.lr)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    out.write_text("")
    lock = threading.Lock()
    with tempfile.TemporaryDirectory() as tmp:
        def one(i_run):
            i, (method, seed, run_argv) = i_run
            part = Path(tmp, f"{i:03d}.jsonl")
            t0 = time.perf_counter()
            proc = subprocess.run(
                [sys.executable, "-m", "ecosim.torch.lm", *run_argv, "--device", args.device,
                 "--results", str(part), *args.extra],
                env=env, capture_output=True, text=True)
            dt = time.perf_counter() - t0
            status = "ok" if proc.returncode == 0 else f"FAILED rc={proc.returncode}"
            print(f"{method:16s} seed {seed}: {status} ({dt:.0f} s)", flush=True)
            if proc.returncode != 0:
                print(proc.stderr[-2000:], file=sys.stderr)
                return None
            text = part.read_text()
            with lock, open(out, "a") as f:
                f.write(text)
            return text

        t0 = time.perf_counter()
        with ThreadPoolExecutor(args.jobs) as pool:
            parts = list(pool.map(one, enumerate(runs)))
        out.write_text("".join(p for p in parts if p is not None))
    failed = sum(p is None for p in parts)
    print(f"{len(runs) - failed} of {len(runs)} runs in {time.perf_counter() - t0:.0f} s -> {out}")
    by_method = {}
    for line in out.read_text().splitlines():
        r = json.loads(line)
        by_method.setdefault(r["method"], []).append(r)
    print("| method | seeds | val loss (each seed) | peak MiB | kind |")
    print("|---|---|---|---|---|")
    for method, rs in by_method.items():
        vals = ", ".join("diverged" if r.get("diverged") else f"{r.get('val_loss'):.4f}"
                         for r in rs)
        peak = max(r.get("peak_memory_bytes", 0) for r in rs) / 2**20
        print(f"| {method} | {len(rs)} | {vals} | {peak:.1f} | {rs[0].get('peak_memory_kind')} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
