"""Throughput of RTN and SR rounding to float8_e4m3fn: ecosim against its peers, in one run.

Prints Melem/s for 2**24 float32 standard normals (best of a few repeats) for:
ecosim RTN and SR (one thread; see ecosim.core.rounding on threads), the ml_dtypes cast (one way,
and the round trip ``x.astype(float8_e4m3fn).astype(float32)``, which returns what ecosim returns: float32 values
on the grid), gfloat's ``round_ndarray`` (RTN and SR) and pychop's ``Chop(4, 3)`` (RTN and SR),
and the ratios the project targets. It also checks that ecosim's RTN output equals the
ml_dtypes round trip bit for bit, and prints the microseconds per call of a row-scaled E4M3
``Quantizer`` on small weights (32 x 32, 32 x 8), the fixed cost the MLP experiments pay.

The scaled quantizers, the torch mirror and the ratios the project targets for them are in
``benchmarks/bench_all.py``, which shares :func:`interleaved_rates` with this script.

Run: ``make bench`` (installs the ``bench`` extra: gfloat, pychop) or
``python benchmarks/quantize.py [--log2n 24] [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import os
import time

import ml_dtypes
import numpy as np

import ecosim


def best_rate(fn, n, repeats):
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return n / best / 1e6


def interleaved_rates(fns: dict, n: int, rounds: int) -> dict:
    """Melem/s of each function: every function once per round, the best round's CPU time
    (``time.thread_time``) kept."""
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.thread_time()
            fn()
            best[name] = min(best[name], time.thread_time() - t0)
    return {name: n / max(t, 1e-9) / 1e6 for name, t in best.items()}


def small_call_us(calls: int = 200, rounds: int = 20) -> dict:
    """Microseconds per call of ``Quantizer("e4m3", mode, granularity="row")`` on the small
    float32 weights of the MLP experiments (32 x 32 and 32 x 8), RTN and SR (key): what a
    training step pays per quantization, where the fixed cost of a call dominates. Each case
    runs ``calls`` times per round, interleaved; the best round's CPU time is kept."""
    rng = np.random.default_rng(0)
    fns = {}
    for shape in ((32, 32), (32, 8)):
        w = rng.standard_normal(shape).astype(np.float32)
        for mode in ("rtn", "sr"):
            q = ecosim.Quantizer("e4m3", mode, granularity="row")
            kw = {"key": (1, 0)} if mode == "sr" else {}
            fns[f"Quantizer(e4m3, row, {mode}) {shape[0]}x{shape[1]}"] = (
                lambda q=q, w=w, kw=kw: [q(w, **kw) for _ in range(calls)])
    rates = interleaved_rates(fns, calls, rounds)  # millions of calls per second: per us
    return {name: 1.0 / r for name, r in rates.items()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log2n", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--peers-log2n", type=int, default=22,
                    help="size for the slow pure-Python peers (rates are per element)")
    args = ap.parse_args(argv)
    n = 1 << args.log2n
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    rb = ecosim.core.rng.random_bits(1, 0, n)
    f8 = ml_dtypes.float8_e4m3fn

    ours = ecosim.quantize(x, "e4m3", saturate=False)
    with np.errstate(all="ignore"):
        ref = x.astype(f8).astype(np.float32)
    identical = bool((ours.view(np.uint32) == ref.view(np.uint32)).all())

    rates = {}
    rates["ml_dtypes cast (one way)"] = best_rate(lambda: x.astype(f8), n, args.repeats)
    rates["ml_dtypes cast (round trip)"] = best_rate(lambda: x.astype(f8).astype(np.float32),
                                                     n, args.repeats)
    rates["ecosim RTN"] = best_rate(lambda: ecosim.quantize(x, "e4m3"), n, args.repeats)
    rates["ecosim SR (key)"] = best_rate(lambda: ecosim.quantize(x, "e4m3", "sr", key=1), n,
                                         args.repeats)
    rates["ecosim SR (given rbits)"] = best_rate(
        lambda: ecosim.quantize(x, "e4m3", "sr", rbits=rb), n, args.repeats)
    rates["ecosim random bits alone"] = best_rate(lambda: ecosim.core.rng.random_bits(1, 0, n), n,
                                                 args.repeats)

    m = 1 << args.peers_log2n
    xs = x[:m]
    try:
        import gfloat
        from gfloat.formats import format_info_ocp_e4m3 as fi

        rb64 = rb[:m].astype(np.int64)
        rates["gfloat RTN"] = best_rate(lambda: gfloat.round_ndarray(fi, xs, sat=True), m, 1)
        rates["gfloat SR"] = best_rate(lambda: gfloat.round_ndarray(
            fi, xs, gfloat.RoundMode.Stochastic, sat=True, srbits=rb64, srnumbits=32), m, 1)
    except ImportError:
        print("gfloat not installed (pip install -e '.[bench]')")
    try:
        from pychop import Chop

        rtn, sr = Chop(4, 3, rmode=1), Chop(4, 3, rmode=5)
        rates["pychop RTN"] = best_rate(lambda: rtn(xs), m, 1)
        rates["pychop SR"] = best_rate(lambda: sr(xs), m, 1)
    except ImportError:
        print("pychop not installed (pip install -e '.[bench]')")

    print(f"quantize 2**{args.log2n} float32 normals to float8_e4m3fn "
          f"(peers on 2**{args.peers_log2n}); {os.cpu_count()} cores, ecosim on one thread")
    print(f"ecosim RTN == ml_dtypes round trip, bit for bit: {identical}")
    print(f"| {'method':34s} | {'Melem/s':>8s} |")
    print(f"|{'-' * 36}|{'-' * 10}|")
    for k, v in rates.items():
        print(f"| {k:34s} | {v:8.1f} |")
    cast_rt = rates["ml_dtypes cast (round trip)"]
    cast_1 = rates["ml_dtypes cast (one way)"]
    print()
    print("| ratio | value | target |")
    print("|---|---|---|")
    print(f"| ecosim RTN / ml_dtypes round trip | {rates['ecosim RTN'] / cast_rt:.2f} | >= 2 |")
    print(f"| ecosim RTN / ml_dtypes one way | {rates['ecosim RTN'] / cast_1:.2f} | |")
    print(f"| ecosim SR / ml_dtypes round trip | {rates['ecosim SR (key)'] / cast_rt:.2f} | >= 1 |")
    print(f"| ecosim SR / ml_dtypes one way | {rates['ecosim SR (key)'] / cast_1:.2f} | |")
    if "gfloat SR" in rates:
        print(f"| ecosim SR / gfloat SR | {rates['ecosim SR (key)'] / rates['gfloat SR']:.1f} "
              f"| >= 10 |")
    if "pychop SR" in rates:
        print(f"| ecosim SR / pychop SR | {rates['ecosim SR (key)'] / rates['pychop SR']:.1f} | |")
    print()
    print(f"| {'small call (float32 weights)':38s} | {'us/call':>8s} |")
    print(f"|{'-' * 40}|{'-' * 10}|")
    for k, v in small_call_us().items():
        print(f"| {k:38s} | {v:8.1f} |")


if __name__ == "__main__":
    main()
