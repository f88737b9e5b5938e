"""ECO against master weights on the language-model presets: step time, memory, tokens/s.

For each preset (``ecosim.torch.model.PRESETS``) and each method, on one device:

* ``step ms``: median wall time of one ``ECOAdamW.step`` over the block-internal linears
  (FP8 E4M3 row-wise; random gradients of a realistic size; synchronised on CUDA), the four
  rows' steps interleaved, and its ratio to the master step with the same rounding and
  storage (target: ECO <= 1.1x master);
* ``static B/p``: bytes per parameter of those linears actually held between steps (codes +
  scales or FP32 values, plus the optimizer states; :func:`ecosim.torch.memory.measured_memory`),
  and on CUDA ``torch.cuda.memory_allocated`` after a step with the gradients freed, per
  parameter of the whole model (embedding and head in FP32 with plain AdamW included);
* ``peak B/p`` (CUDA only): ``torch.cuda.max_memory_allocated`` over full training steps
  (forward, backward, clipping, both optimizers) per parameter of the whole model: gradients
  and activations included;
* ``peak - act B/p`` (CUDA only): that peak minus the activation baseline of the preset (the
  peak of one forward/backward of the plain FP32 model without optimizer, above the bytes
  allocated before it), per parameter: weights, optimizer states and the step's transients,
  without the activations that otherwise hide the difference between the rows;
* ``tok/s``: tokens per second of those full training steps, the first (warm-up) step not
  counted.

The step times come first: the four rows' models and optimizers are built together (for
200m on CUDA about 13 GB at once) and their steps interleaved. Then memory and tokens/s row by
row: between rows the previous model and optimizers are deleted and collected
(``gc.collect()``: a ``QuantizedLinear`` and its gradient slot form a reference cycle, so
without it earlier rows would stay allocated and inflate the CUDA figures).

Methods: ``master`` (FP32 parameters + FP32 master copy: what a user has today), ``master``
with FP8 code storage, ``eco`` with FP32 parameters, ``eco`` with FP8 code storage (the ECO
paper's 9 bytes per parameter). The master schemes' stored FP8 copy is real in the code
storage rows (1 byte), so they show 13 bytes, not the paper's 12.

Usage::

    python benchmarks/torch_lm.py                                  # CPU: tiny and small
    python benchmarks/torch_lm.py --device cuda --presets 30m 200m # what benchmarks/gpu.sh runs
"""

from __future__ import annotations

import argparse
import gc
import math
import platform
import statistics
import sys
import time

import torch

from ecosim.torch.lm import LMConfig, build_optimizers
from ecosim.torch.model import PRESETS, Transformer, param_counts, quantized_names
from ecosim.torch.memory import measured_memory

ROWS = (("master", "param"), ("master", "codes"), ("eco", "param"), ("eco", "codes"))


def _sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def build(preset: str, scheme: str, storage: str, mode: str, dev):
    """The model and its optimizers exactly as ``python -m ecosim.torch.lm`` builds them for
    method ``fp8_{scheme}_{mode}`` (:func:`ecosim.torch.lm.build_optimizers`), and the
    parameters of the quantized linears."""
    cfg = LMConfig(preset=preset, method=f"fp8_{scheme}_{mode}", storage=storage).resolved()
    model = Transformer(PRESETS[preset].model, torch.Generator().manual_seed(0)).to(dev)
    qn = set(quantized_names(model))
    opts = build_optimizers(model, cfg)
    return model, opts, [p for n, p in model.named_parameters() if n in qn]


def _set_grads(qparams, dev) -> None:
    g = torch.Generator(device="cpu").manual_seed(1)
    for p in qparams:
        p.grad = (torch.randn(p.shape, generator=g) * 1e-3).to(dev)


def time_opt_steps(preset: str, mode: str, reps: int, dev) -> dict:
    """Median wall time of one ``ECOAdamW.step`` of each row of :data:`ROWS`, the rows' steps
    interleaved (round ``r`` steps every row once, starting from row ``r mod 4``): where other
    work shares the machine, the load, the allocator and the memory bandwidth drift over
    seconds, and rows timed one after the other measure that drift (enough to double the
    ECO/master ratio), which interleaving cancels."""
    built = {}
    for scheme, storage in ROWS:
        model, opts, qparams = build(preset, scheme, storage, mode, dev)
        _set_grads(qparams, dev)
        opts[0].step()  # warm-up (states allocated)
        built[scheme, storage] = (model, opts[0])
    times = {row: [] for row in ROWS}
    for r in range(reps):
        for row in ROWS[r % len(ROWS):] + ROWS[:r % len(ROWS)]:
            _sync(dev)
            t0 = time.perf_counter()
            built[row][1].step()
            _sync(dev)
            times[row].append(time.perf_counter() - t0)
    del built, model, opts, qparams
    _release(dev)
    return {row: statistics.median(ts) for row, ts in times.items()}


def _release(dev):
    """Free what the previous row held (reference cycles included) before measuring."""
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(dev)


def activation_baseline(preset: str, batch: int, seq: int, dev) -> int:
    """Bytes one forward/backward of the plain FP32 model (no optimizer) allocates above what
    is allocated before it, at its peak: activations, gradients and their transients (CUDA;
    0 on CPU)."""
    if dev.type != "cuda":
        return 0
    _release(dev)
    model = Transformer(PRESETS[preset].model, torch.Generator().manual_seed(0)).to(dev)
    x = torch.randint(0, 256, (batch, seq + 1), generator=torch.Generator().manual_seed(2))
    x = x.to(dev)
    _sync(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    before = torch.cuda.memory_allocated(dev)
    model(x[:, :-1], x[:, 1:]).backward()
    _sync(dev)
    peak = torch.cuda.max_memory_allocated(dev) - before
    del model, x
    _release(dev)
    return peak


def train_steps(model, opts, steps: int, batch: int, seq: int, dev) -> tuple[float, int]:
    """tokens/s of full training steps, and the peak allocated bytes (CUDA; 0 on CPU)."""
    gen = torch.Generator().manual_seed(2)
    params = list(model.parameters())
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    t0 = None
    for i in range(steps + 1):  # the first step warms up
        if i == 1:
            _sync(dev)
            t0 = time.perf_counter()
        x = torch.randint(0, 256, (batch, seq + 1), generator=gen).to(dev)
        for o in opts:
            o.zero_grad(set_to_none=True)
        loss = model(x[:, :-1], x[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        for o in opts:
            o.step()
    _sync(dev)
    dt = time.perf_counter() - t0
    peak = torch.cuda.max_memory_allocated(dev) if dev.type == "cuda" else 0
    return steps * batch * seq / dt, peak


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--presets", nargs="+", default=["tiny", "small"])
    ap.add_argument("--modes", nargs="+", default=["rtn", "sr"], choices=["rtn", "sr"])
    ap.add_argument("--reps", type=int, default=5,
                    help="timed optimizer steps per row, interleaved (median)")
    ap.add_argument("--train-steps", type=int, default=3,
                    help="timed full training steps (0: skip tokens/s and peak memory)")
    ap.add_argument("--batch", type=int, default=None, help="default: the preset's")
    ap.add_argument("--seq", type=int, default=None, help="default: the preset's")
    args = ap.parse_args(argv)
    dev = torch.device(args.device)
    print(f"# torch {torch.__version__}, {platform.machine()}, device {dev}"
          + (f" ({torch.cuda.get_device_name(dev)})" if dev.type == "cuda" else "")
          + f", threads {torch.get_num_threads()}")
    print("| preset | quantized params | rounding | scheme | storage | step ms | x master | "
          "static B/p (linears) | allocated B/p (model) | peak B/p (model) | "
          "peak - act B/p (model) | tok/s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for preset in args.presets:
        pc = param_counts(preset)
        pr = PRESETS[preset]
        batch, seq = args.batch or pr.batch, args.seq or pr.seq
        act = activation_baseline(preset, batch, seq, dev) if args.train_steps else 0
        for mode in args.modes:
            steps = time_opt_steps(preset, mode, args.reps, dev)
            for scheme, storage in ROWS:
                _release(dev)
                model, opts, qparams = build(preset, scheme, storage, mode, dev)
                _set_grads(qparams, dev)
                opts[0].step()  # the states exist; memory is measured with the grads freed
                for p in qparams:
                    p.grad = None
                step, base = steps[scheme, storage], steps["master", storage]
                static = measured_memory(qparams, opts[0]).per_param()["total"]
                alloc = (torch.cuda.memory_allocated(dev) / pc["total"] if dev.type == "cuda"
                         else math.nan)
                tps, peak = (train_steps(model, opts, args.train_steps, batch, seq, dev)
                             if args.train_steps else (math.nan, 0))
                for o in opts:
                    o.zero_grad(set_to_none=True)
                print(f"| {preset} | {pc['quantized'] / 1e6:.2f}M | {mode} | {scheme} | "
                      f"{storage} | {step * 1e3:.1f} | {step / base:.2f} | "
                      f"{static:.2f} | {alloc:.2f} | "
                      f"{peak / pc['total'] if peak else math.nan:.2f} | "
                      f"{(peak - act) / pc['total'] if peak and act else math.nan:.2f} | "
                      f"{tps:,.0f} |", flush=True)
                del model, opts, qparams
    return 0


if __name__ == "__main__":
    sys.exit(main())
