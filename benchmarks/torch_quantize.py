"""Throughput of the torch mirror of quantize (float8_e4m3fn), against NumPy and torch's cast.

Prints Melem/s (best of a few repeats) for 2**24 float32 standard normals: ecosim.torch RTN and
SR (keyed), its random bits alone, NumPy's ecosim.quantize RTN and SR, and torch's own
``x.to(torch.float8_e4m3fn).float()`` round trip (RTN-even but saturating: not the same
overflow rule, and never used by ecosim for rounding), on the CPU and on CUDA when available.
It also checks that the torch results equal NumPy's bit for bit.

Run: ``make torch`` then
``python benchmarks/torch_quantize.py [--log2n 24] [--repeats 3] [--threads N]``.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch

import ecosim
import ecosim.torch as et


def best_rate(fn, n, repeats, sync=lambda: None):
    fn()
    sync()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - t0)
    return n / best / 1e6


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log2n", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0,
                    help="torch CPU threads (default: torch's choice); on a small, busy machine "
                         "1 can beat OpenMP's hand-offs")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    n = 1 << args.log2n
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    xt = torch.from_numpy(x)

    ref_rtn = ecosim.quantize(x, "e4m3")
    ref_sr = ecosim.quantize(x, "e4m3", "sr", key=1)
    rates = {
        "numpy ecosim RTN": best_rate(lambda: ecosim.quantize(x, "e4m3"), n, args.repeats),
        "numpy ecosim SR (key)": best_rate(lambda: ecosim.quantize(x, "e4m3", "sr", key=1), n,
                                           args.repeats),
    }
    identical = {}
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for dev in devices:
        xd = xt.to(dev)
        sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
        rtn = et.quantize(xd, "e4m3")
        sr = et.quantize(xd, "e4m3", "sr", key=1)
        identical[dev] = bool(
            (rtn.cpu().view(torch.int32).numpy() == ref_rtn.view(np.int32)).all()
            and (sr.cpu().view(torch.int32).numpy() == ref_sr.view(np.int32)).all())
        rates[f"ecosim.torch RTN [{dev}]"] = best_rate(lambda: et.quantize(xd, "e4m3"), n,
                                                       args.repeats, sync)
        rates[f"ecosim.torch SR (key) [{dev}]"] = best_rate(
            lambda: et.quantize(xd, "e4m3", "sr", key=1), n, args.repeats, sync)
        rates[f"ecosim.torch random bits [{dev}]"] = best_rate(
            lambda: et.random_bits(1, 0, n, device=dev), n, args.repeats, sync)
        rates[f"torch cast round trip [{dev}]"] = best_rate(
            lambda: xd.to(torch.float8_e4m3fn).float(), n, args.repeats, sync)

    print(f"quantize 2**{args.log2n} float32 normals to float8_e4m3fn; {os.cpu_count()} cores, "
          f"torch {torch.__version__} with {torch.get_num_threads()} threads"
          + (f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""))
    for dev, same in identical.items():
        print(f"ecosim.torch [{dev}] RTN and SR == NumPy ecosim, bit for bit: {same}")
    print(f"| {'method':36s} | {'Melem/s':>8s} |")
    print(f"|{'-' * 38}|{'-' * 10}|")
    for k, v in rates.items():
        print(f"| {k:36s} | {v:8.1f} |")


if __name__ == "__main__":
    main()
