"""The speed table of the rounding paths: every operation with its peer, timed in one run.

One float32 matrix of ``2**(log2n/2)``-square standard normals (2**22 elements by default),
FP8 E4M3 (``float8_e4m3fn``) unless a row says otherwise. Rows: the ml_dtypes casts (one way
each direction, and the round trip that returns what ``ecosim.quantize`` returns); NumPy
``ecosim.quantize`` RTN and SR (keyed); the scaled ``Quantizer`` (row scales, and int4 with
groups of 32: call, ``encode`` to real 1-byte storage, ``decode``); the torch mirror on the CPU
(``ecosim.torch.quantize`` RTN and SR, its row ``Quantizer``) and torch's own cast round trip
``x.to(torch.float8_e4m3fn).float()`` (RTN-even but not ecosim's overflow rule, never used for
rounding). Each row is printed with its peer, the ratio and the project's target for it.

Timing: every function once per round, in interleaved rounds, the best round kept, in CPU time
of the calling thread (``time.thread_time``) with torch on one thread, as NumPy is: other load
on the machine then shifts a row and its peer alike, and the ratios are the numbers to read.
Before timing, the torch results are checked bit for bit against NumPy's: any difference stops
the run (exit status 1, naming the paths that differ).

Run: ``make bench`` or ``python benchmarks/bench_all.py [--log2n 22] [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import os
import time

import ml_dtypes
import numpy as np

import ecosim
from quantize import interleaved_rates  # benchmarks/quantize.py, next to this script

F8 = ml_dtypes.float8_e4m3fn

# (row, peer, target ratio row/peer or None); rows without a peer print their rate alone.
TABLE = [
    ("ml_dtypes cast f32 -> e4m3 (one way)", None, None),
    ("ml_dtypes cast e4m3 -> f32 (one way)", None, None),
    ("ml_dtypes cast round trip", None, None),
    ("ecosim.quantize RTN", "ml_dtypes cast round trip", 2.0),
    ("ecosim.quantize SR (key)", "ml_dtypes cast round trip", 1.0),
    ("Quantizer(e4m3, row)(W)", "ecosim.quantize RTN", 0.8),
    ("Quantizer(e4m3, row).encode", "ml_dtypes cast f32 -> e4m3 (one way)", 1.0),
    ("Quantizer(e4m3, row).decode", "ml_dtypes cast e4m3 -> f32 (one way)", None),
    ("ecosim.quantize int4 RTN", None, None),
    ("Quantizer(int4, 32)(W)", "ecosim.quantize int4 RTN", 0.8),
    ("Quantizer(int4, 32).encode", None, None),  # no cast to compare with: rate alone
    ("Quantizer(int4, 32).decode", None, None),
    ("torch cast round trip (CPU)", None, None),
    ("ecosim.torch.quantize RTN (CPU)", "ecosim.quantize RTN", 1.0),
    ("ecosim.torch.quantize SR (key, CPU)", "ecosim.quantize SR (key)", 1.0),
    ("ecosim.torch Quantizer(e4m3, row)(W)", "ecosim.torch.quantize RTN (CPU)", 0.8),
]


def numpy_fns(W: np.ndarray) -> dict:
    """The NumPy rows, checked (decode of encode == call) before they are timed."""
    q8 = ecosim.Quantizer("e4m3", granularity="row")
    q4 = ecosim.Quantizer("int4", granularity=32)
    e8, e4, c8 = q8.encode(W), q4.encode(W), W.astype(F8)
    assert (q8.decode(e8) == q8(W)).all() and (q4.decode(e4) == q4(W)).all()
    return {
        "ml_dtypes cast f32 -> e4m3 (one way)": lambda: W.astype(F8),
        "ml_dtypes cast e4m3 -> f32 (one way)": lambda: c8.astype(np.float32),
        "ml_dtypes cast round trip": lambda: W.astype(F8).astype(np.float32),
        "ecosim.quantize RTN": lambda: ecosim.quantize(W, "e4m3"),
        "ecosim.quantize SR (key)": lambda: ecosim.quantize(W, "e4m3", "sr", key=1),
        "Quantizer(e4m3, row)(W)": lambda: q8(W),
        "Quantizer(e4m3, row).encode": lambda: q8.encode(W),
        "Quantizer(e4m3, row).decode": lambda: q8.decode(e8),
        "ecosim.quantize int4 RTN": lambda: ecosim.quantize(W, "int4"),
        "Quantizer(int4, 32)(W)": lambda: q4(W),
        "Quantizer(int4, 32).encode": lambda: q4.encode(W),
        "Quantizer(int4, 32).decode": lambda: q4.decode(e4),
    }


def torch_fns(W: np.ndarray) -> tuple[dict, list[str]]:
    """The torch rows (empty without torch) and the names of those whose results differ from
    NumPy's in any bit (empty: all equal)."""
    try:
        import torch

        import ecosim.torch as et
    except ImportError:
        print("torch not installed (make torch): the torch rows are left out")
        return {}, []
    torch.set_num_threads(1)
    Wt = torch.from_numpy(W)  # the same memory
    qt = et.Quantizer("e4m3", granularity="row")
    pairs = {"RTN": (et.quantize(Wt, "e4m3"), ecosim.quantize(W, "e4m3")),
             "SR (key)": (et.quantize(Wt, "e4m3", "sr", key=1),
                          ecosim.quantize(W, "e4m3", "sr", key=1)),
             "Quantizer(e4m3, row)": (qt(Wt), ecosim.Quantizer("e4m3", granularity="row")(W))}
    differ = [name for name, (got, ref) in pairs.items()
              if not np.array_equal(got.numpy().view(np.int32), ref.view(np.int32))]
    return {
        "torch cast round trip (CPU)": lambda: Wt.to(torch.float8_e4m3fn).float(),
        "ecosim.torch.quantize RTN (CPU)": lambda: et.quantize(Wt, "e4m3"),
        "ecosim.torch.quantize SR (key, CPU)": lambda: et.quantize(Wt, "e4m3", "sr", key=1),
        "ecosim.torch Quantizer(e4m3, row)(W)": lambda: qt(Wt),
    }, differ


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log2n", type=int, default=22, help="even: the matrix is square")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    if args.log2n % 2 or not 2 <= args.log2n <= 28:
        ap.error(f"--log2n must be even, in 2..28, got {args.log2n}")
    side = 1 << (args.log2n // 2)
    W = np.random.default_rng(0).standard_normal((side, side)).astype(np.float32)
    fns = numpy_fns(W)
    tfns, differ = torch_fns(W)
    if differ:
        raise SystemExit("bench_all: ecosim.torch's " + ", ".join(differ) + " differ from "
                         "NumPy's bit for bit on the benchmark matrix; nothing was timed")
    fns.update(tfns)
    t0 = time.perf_counter()
    rates = interleaved_rates(fns, W.size, args.rounds)
    wall = time.perf_counter() - t0

    print(f"{side}x{side} float32 standard normals (2**{args.log2n}) to float8_e4m3fn unless "
          f"named; {os.cpu_count()} cores, one thread; best of {args.rounds} interleaved "
          f"rounds in CPU time ({wall:.0f} s); load average {os.getloadavg()[0]:.1f}")
    if tfns:
        print("ecosim.torch RTN, SR and row Quantizer == NumPy's, bit for bit: checked")
    print("| operation | Melem/s | peer | ratio | target |")
    print("|---|---:|---|---:|---|")
    for row, peer, target in TABLE:
        if row not in rates:
            continue
        ratio = rates[row] / rates[peer] if peer in rates else None
        goal = ""
        if target is not None and ratio is not None:
            goal = f">= {target:g}: {'met' if ratio >= target else 'not met'}"
        print(f"| {row} | {rates[row]:.0f} | {peer or ''} | "
              f"{'' if ratio is None else f'{ratio:.2f}'} | {goal} |")


if __name__ == "__main__":
    main()
