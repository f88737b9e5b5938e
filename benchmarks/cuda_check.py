"""Bit-identity of ecosim.torch on a device against the NumPy reference, quick enough to run first.

The first check of a GPU window (``benchmarks/gpu.sh`` runs it before anything else): if the
device path rounds differently from NumPy, the later timings are timings of something else.
Each check prints ``OK`` or ``MISMATCH`` with the number of differing elements and the first
few of them (index, device bits, reference bits, input); the exit status is 1 if any check
mismatched, 0 otherwise.

Checks (all float32):

1. ``quantize`` to E4M3, RTN and SR (the same key on both sides), 2**20 values spread over
   E4M3's range and beyond (not only normals near 1);
2. the row-wise E4M3 :class:`ecosim.torch.Quantizer` (absmax scales ``amax / 448``: a division
   by a constant that CUDA would compute as a multiplication by its reciprocal if the divisor
   were a Python scalar), RTN and SR: scales, codes and dequantized values; and absmean
   ternary row scales (a float64 mean in NumPy's summation order);
3. three ``ECOAdamW`` steps (scheme ``"eco"``, SR row-wise E4M3 weights, ``m`` stored in E4M3
   and ``v`` in bf16, weight decay) on two weight matrices: stored weights, ``m`` and ``v``
   against :func:`ecosim.optim.adamw` in NumPy;
4. diagnostics, printed but never failing: how often CUDA's ``x / 448.0`` (a Python scalar)
   differs from the true division, and how often float32 ``sqrt`` on the device differs from
   the correctly rounded root (``ECOAdamW`` relies on it being IEEE off the CPU).

Run: ``python benchmarks/cuda_check.py [--device cuda] [--rows 512]`` (``--device cpu`` checks
the CPU path the same way; the test suite already covers it).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import torch

import ecosim
import ecosim.torch as et
from ecosim.optim import adamw

KEY = 11


def _bits(a) -> np.ndarray:
    """The raw bits of a NumPy array or a (any device) tensor, as unsigned integers."""
    if isinstance(a, torch.Tensor):
        t = a.detach().cpu()
        size = t.element_size()
        a = t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[size]).numpy()
    a = np.ascontiguousarray(a)
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


class Report:
    """Collects the checks' outcomes; ``failed`` counts the mismatching ones."""

    def __init__(self):
        self.failed = 0
        self.checked = 0

    def same(self, name: str, got, want, inputs=None, show: int = 5) -> bool:
        g, w = _bits(got).reshape(-1), _bits(want).reshape(-1)
        self.checked += 1
        if g.shape != w.shape:
            self.failed += 1
            print(f"MISMATCH {name}: shape {g.shape} != {w.shape}")
            return False
        bad = np.flatnonzero(g != w)
        if bad.size == 0:
            print(f"OK       {name} ({g.size} values)")
            return True
        self.failed += 1
        print(f"MISMATCH {name}: {bad.size} of {g.size} differ "
              f"({100 * bad.size / g.size:.3g}%); first ones:")
        x = None if inputs is None else np.asarray(inputs).reshape(-1)
        for i in bad[:show]:
            extra = f" input {x[i]!r}" if x is not None and x.size == g.size else ""
            print(f"         [{i}] device 0x{int(g[i]):x} reference 0x{int(w[i]):x}{extra}")
        return False


def check_quantize(rep: Report, dev, n: int):
    r = np.random.default_rng(0)
    x = (r.standard_normal(n) * np.exp2(r.uniform(-12, 10, n))).astype(np.float32)
    xd = torch.from_numpy(x).to(dev)
    rep.same("quantize e4m3 rtn", et.quantize(xd, "e4m3"), ecosim.quantize(x, "e4m3"), x)
    rep.same("quantize e4m3 sr (key)", et.quantize(xd, "e4m3", "sr", key=KEY),
             ecosim.quantize(x, "e4m3", "sr", key=KEY), x)


def check_quantizer(rep: Report, dev, rows: int, cols: int):
    r = np.random.default_rng(1)
    w = (r.standard_normal((rows, cols))
         * np.exp2(r.uniform(-8, 8, (rows, 1)))).astype(np.float32)  # row scales vary
    wd = torch.from_numpy(w).to(dev)
    for mode in ("rtn", "sr"):
        kw = {"key": KEY} if mode == "sr" else {}
        qn = ecosim.Quantizer("e4m3", mode, granularity="row")
        qt = et.Quantizer("e4m3", mode, granularity="row")
        rep.same(f"Quantizer e4m3 row {mode}: scales", qt.scales(wd), qn.scales(w))
        en, ed = qn.encode(w, **kw), qt.encode(wd, **kw)
        rep.same(f"Quantizer e4m3 row {mode}: codes", ed.codes, en.codes)
        rep.same(f"Quantizer e4m3 row {mode}: stored scales", ed.scales, en.scales)
        rep.same(f"Quantizer e4m3 row {mode}: values", qt(wd, **kw), qn(w, **kw), w)
    qn = ecosim.Quantizer("ternary", scale="absmean", granularity="row")
    qt = et.Quantizer("ternary", scale="absmean", granularity="row")
    rep.same("Quantizer ternary absmean row: scales", qt.scales(wd), qn.scales(w))


def check_adamw(rep: Report, dev, rows: int, cols: int, steps: int = 3):
    r = np.random.default_rng(2)
    P = {"a": (r.standard_normal((rows, cols)) * 0.05).astype(np.float32),
         "b": (r.standard_normal((cols // 2, rows)) * 0.02).astype(np.float32)}
    G = [{k: (r.standard_normal(v.shape) * 1e-2).astype(np.float32) for k, v in P.items()}
         for _ in range(steps)]
    states = {"m": "e4m3", "v": "bf16"}
    cfg = dict(fmt="e4m3", mode="sr", granularity="row")
    no = adamw(1e-3, 0.9, 0.95, 1e-8, 0.1, scheme="eco", weights=ecosim.Quantizer(**cfg),
               states=states)
    w, s = no.init(P, key=KEY)
    tp = [(k, torch.nn.Parameter(torch.from_numpy(v.copy()).to(dev))) for k, v in P.items()]
    to = et.ECOAdamW(tp, 1e-3, (0.9, 0.95), 1e-8, 0.1, scheme="eco",
                     weights=et.Quantizer(**cfg), key=KEY, states=states)
    for t in range(steps):
        w, s = no.step(w, G[t], s)
        for k, p in tp:
            p.grad = torch.from_numpy(G[t][k]).to(dev)
        to.step()
    for k, p in tp:
        rep.same(f"ECOAdamW eco/sr {steps} steps: weights {k}", p, w[k])
        for b in ("m", "v"):
            rep.same(f"ECOAdamW eco/sr {steps} steps: {b} {k}", to.state_values(p, b),
                     getattr(s, b)[k])


def diagnostics(dev, n: int):
    """Known device behaviours, measured: not failures of ecosim (printed as INFO)."""
    x = np.random.default_rng(3).standard_normal(n).astype(np.float32)
    xd = torch.from_numpy(x).to(dev)
    true = x / np.float32(448.0)
    scalar = (xd / 448.0).cpu().numpy()
    print(f"INFO     x / 448.0 (Python scalar divisor) on {dev}: "
          f"{np.mean(_bits(scalar) != _bits(true)):.1%} differ from the IEEE division "
          "(ecosim divides by a tensor on the same device instead)")
    v = np.abs(x) * np.float32(1e-3)
    root = np.sqrt(v.astype(np.float64)).astype(np.float32)  # correctly rounded
    got = torch.from_numpy(v).to(dev).sqrt().cpu().numpy()
    print(f"INFO     float32 sqrt on {dev}: {np.mean(_bits(got) != _bits(root)):.3%} not "
          "correctly rounded (ecosim uses it off the CPU)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--rows", type=int, default=512, help="rows of the test matrices")
    ap.add_argument("--cols", type=int, default=1024, help="columns of the test matrices")
    ap.add_argument("--log2n", type=int, default=20, help="values in the quantize check")
    args = ap.parse_args(argv)
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device (torch.cuda.is_available() is False)")
        return 2
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    print(f"# ecosim.torch on {dev} ({name}), torch {torch.__version__}, numpy {np.__version__}")
    t0 = time.perf_counter()
    rep = Report()
    for check, a in ((check_quantize, (rep, dev, 1 << args.log2n)),
                     (check_quantizer, (rep, dev, args.rows, args.cols)),
                     (check_adamw, (rep, dev, args.rows, args.cols)),
                     (diagnostics, (dev, 1 << args.log2n))):
        try:  # one check's crash must not hide the others
            check(*a)
        except Exception as err:  # noqa: BLE001
            rep.checked += 1
            rep.failed += 1
            print(f"ERROR    {check.__name__}: {type(err).__name__}: {err}")
    print(f"# {rep.checked - rep.failed} of {rep.checked} checks bit-identical with NumPy "
          f"({time.perf_counter() - t0:.1f} s)")
    return 1 if rep.failed else 0


if __name__ == "__main__":
    sys.exit(main())
