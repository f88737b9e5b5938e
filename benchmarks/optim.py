"""Time one optimizer step of every scheme, SGDM and AdamW, on 2**22 float32 parameters.

Parameters are two float32 matrices (1024 x 2048 and 2048 x 1024) with FP8 E4M3 row-wise
absmax weights, RTN and SR. For each optimizer and rounding mode the table gives the median
wall time of one ``step`` (over ``--reps`` repetitions after a warm-up) and its ratio to the
``master`` step. ECO's injection is element-wise, so ``eco`` should cost at most ~1.3x a master
step.

``--small`` times instead the regime of the MLP experiments (``mlp_methods``, ``mlp_states``):
the six parameters of the 8-32-32-2 MLP (matrices in FP8 E4M3 row-wise SR, biases in full
precision), the recipe's warmup-cosine schedule, and the microseconds of one step (median over
``--reps`` runs of ``--steps`` steps, CPU time). There every array is small and the cost is
per call, not per element: the schedule, the checks, one quantizer call per buffer and
parameter.

Usage: ``python benchmarks/optim.py [--log2-params 22] [--reps 5] [--small [--steps 300]]``
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

import numpy as np

from ecosim import Quantizer
from ecosim.optim import SCHEMES, adamw, sgdm
from ecosim.recipes import schedule

#: the MLP experiments' parameters at width 32 (ecosim.experiments.mlp_methods.make_problem)
MLP_SHAPES = {"W0": (8, 32), "b0": (32,), "W1": (32, 32), "b1": (32,), "W2": (32, 2),
              "b2": (2,)}


def make_params(log2_params: int, key: int = 0) -> dict[str, np.ndarray]:
    n = 2 ** (log2_params - 1)  # two matrices of n entries each
    rows = 2 ** ((log2_params - 1) // 2)
    cols = n // rows
    rng = np.random.default_rng(key)
    return {
        "W0": (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32),
        "W1": (rng.standard_normal((cols, rows)) / np.sqrt(rows)).astype(np.float32),
    }


def time_step(opt, params, grads, reps: int) -> float:
    w, st = opt.init(params, key=0)
    w, st = opt.step(w, grads, st)  # warm-up (and a non-trivial state)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        opt.step(w, grads, st)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def small_rows(steps: int, reps: int) -> None:
    """Print the CPU microseconds of one step on the MLP's shapes (see the module docstring)."""
    rng = np.random.default_rng(0)
    params = {k: rng.standard_normal(s).astype(np.float32) for k, s in MLP_SHAPES.items()}
    grads = [{k: (0.1 * rng.standard_normal(s)).astype(np.float32)
              for k, s in MLP_SHAPES.items()} for _ in range(16)]
    q = Quantizer("e4m3", "sr", granularity="row")
    policy = {k: q for k in MLP_SHAPES if k.startswith("W")}
    bf16 = Quantizer("bfloat16", "rtn", scale=1.0)
    e4m3 = Quantizer("e4m3", "rtn", granularity="row")
    cases = {
        "adamw fp": adamw(schedule(3e-3, 1500), 0.9, 0.98, 1e-9, scheme="fp"),
        "adamw eco": adamw(schedule(3e-3, 1500), 0.9, 0.98, 1e-9, scheme="eco",
                           weights=policy),
        "adamw eco, m,v bf16": adamw(schedule(3e-3, 1500), 0.9, 0.98, 1e-9, scheme="eco",
                                     weights=policy, states={"m": bf16, "v": bf16}),
        "sgdm eco, m e4m3": sgdm(schedule(0.1, 1500), 0.9, scheme="eco", weights=policy,
                                 states={"m": e4m3}),
    }
    print(f"# one step on the MLP's shapes {tuple(MLP_SHAPES.values())}, warmup-cosine, "
          f"weights FP8 E4M3 row SR; CPU us, median of {reps} runs of {steps} steps")
    print(f"{'case':22s} {'us/step':>8s}")
    for name, opt in cases.items():
        times = []
        for _ in range(reps):
            w, st = opt.init(params, key=0)
            t0 = time.process_time()
            for t in range(steps):
                w, st = opt.step(w, grads[t % len(grads)], st)
            times.append((time.process_time() - t0) / steps)
        print(f"{name:22s} {1e6 * statistics.median(times):8.0f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log2-params", type=int, default=22)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--small", action="store_true",
                    help="time steps on the MLP experiments' shapes instead")
    ap.add_argument("--steps", type=int, default=300, help="steps per run with --small")
    args = ap.parse_args(argv)
    if args.small:
        small_rows(args.steps, args.reps)
        return 0
    params = make_params(args.log2_params)
    rng = np.random.default_rng(1)
    grads = {k: (1e-3 * rng.standard_normal(v.shape)).astype(np.float32)
             for k, v in params.items()}
    n = sum(v.size for v in params.values())
    shapes = ", ".join(str(v.shape) for v in params.values())
    print(f"# one optimizer step, {n} float32 parameters ({shapes}), FP8 E4M3 row-wise "
          f"weights; median of {args.reps}")
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"numpy {np.__version__}, python {sys.version.split()[0]}")
    print(f"{'optimizer':9s} {'mode':4s} {'scheme':10s} {'ms':>8s} {'x master':>9s}")
    factories = {"sgdm": lambda **kw: sgdm(1e-2, 0.9, **kw),
                 "adamw": lambda **kw: adamw(1e-3, weight_decay=0.1, **kw)}
    worst_eco = 0.0
    for name, make in factories.items():
        for mode in ("rtn", "sr"):
            q = Quantizer("e4m3", mode, granularity="row")
            rows = {}
            for scheme in SCHEMES:
                opt = make(scheme=scheme, weights=None if scheme == "fp" else q)
                rows[scheme] = time_step(opt, params, grads, args.reps)
            for scheme, t in rows.items():
                ratio = t / rows["master"]
                if scheme == "eco":
                    worst_eco = max(worst_eco, ratio)
                print(f"{name:9s} {mode:4s} {scheme:10s} {1e3 * t:8.1f} {ratio:9.2f}")
    print(f"# worst eco / master ratio: {worst_eco:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
