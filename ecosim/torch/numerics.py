"""Float arithmetic that must round as NumPy's does, on every device: a true division by a
Python number (:func:`div`), a correctly rounded float32 square root (:func:`sqrt_rounded`), and the
float64 mean of absmean scales summed in NumPy's order (:func:`numpy_mean`: pairwise summation
with 8-way unrolled leaves of at most 128 values, buffered when float32 is widened).

Used by :mod:`ecosim.torch.quantizer` (scales) and :mod:`ecosim.torch.optim` (AdamW's ``d``):
a float64 mean or a quotient rounded differently would change the last bit of a scale or a step.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import torch


def div(x: torch.Tensor, y) -> torch.Tensor:
    """``x / y`` for a Python number ``y``, rounded once (IEEE division) on every device.

    ``y`` is first rounded to ``x``'s dtype (as NumPy rounds a scalar divisor to the array's
    float32), then held in a 0-dim tensor on ``x``'s device: CUDA computes a division by a
    Python scalar or by a CPU 0-dim tensor as ``x * fl(1/y)`` (two roundings, different from
    ``x / y`` for about half the float32 inputs when ``y`` is not a power of two), but divides
    element by element when the divisor lives on the same device.
    """
    return x / scalar(y, x.dtype, x.device)


def scalar(v, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A 0-dim tensor holding ``v`` rounded to ``dtype`` on ``device``: the constants of
    small-tensor arithmetic (scales' floors, divisors), made once per value in eager mode,
    where building one with ``torch.full`` on every call costs as much as the operation.
    Shared: never write into it. While ``torch.compile`` traces, a fresh one (a cached
    tensor must never be a traced fake)."""
    if type(v) not in (int, float) or torch.compiler.is_compiling():
        return torch.full((), v, dtype=dtype, device=device)
    # the sign in the key: -0.0 == 0.0 (and hashes alike), but their tensors differ
    return _scalar(v, math.copysign(1.0, v), dtype, device)


@lru_cache(maxsize=256)
def _scalar(v, sign: float, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    # a normal tensor even when first asked for inside inference_mode: autograd may save it
    with torch.inference_mode(False):
        return torch.full((), v, dtype=dtype, device=device)


def sqrt_rounded(x: torch.Tensor) -> torch.Tensor:
    """Correctly rounded square root (NumPy's). torch's vectorized float32 ``sqrt`` on CPUs
    (torch's AVX512 kernels among them) is off by one ulp on ~0.7% of inputs; the
    float64 root of a float32 value rounded back to float32 is correctly rounded (53 >= 2*24+2
    bits, so the double rounding is innocuous). float64 inputs and other devices use torch's
    own root."""
    if x.dtype == torch.float32 and x.device.type == "cpu":
        return x.to(torch.float64).sqrt_().to(torch.float32)
    return x.sqrt()



# -- NumPy-order float64 mean (absmean) ------------------------------------------------------

_PW_BLOCK = 128  # numpy's PW_BLOCKSIZE


def numpy_mean(a: torch.Tensor, axes: tuple) -> torch.Tensor:
    """``np.mean(a, axis=axes, keepdims=True, dtype=np.float64)`` with NumPy's rounding.

    ``a`` is a float32 or float64 tensor (C order), ``axes`` either every axis, the last one,
    the leading ones, or none; the result is float64.
    """
    nd = a.ndim
    if not axes:
        return a.to(torch.float64)
    a = a.contiguous()
    count = math.prod(a.shape[i] for i in axes)
    keep = tuple(1 if i in axes else d for i, d in enumerate(a.shape))
    if axes == tuple(range(nd)) or axes == (nd - 1,) or count == a.numel():
        # Reduce contiguous blocks (NumPy drops the kept axes of size 1): pairwise, buffered
        # when float32 is widened.
        t = a.reshape(-1, count).to(torch.float64)
        buf = count if a.dtype == torch.float64 else np.getbufsize()
        s = _buffered_pairwise(t, buf)
    elif axes == tuple(range(nd - 1)):
        # Reduce over the leading axes: NumPy adds row after row (the inner loop runs along
        # the kept, contiguous last axis).
        t = a.reshape(count, -1)
        s = torch.zeros(t.shape[1], dtype=torch.float64, device=a.device)
        for row in t:
            s = s + row.to(torch.float64)
    else:  # pragma: no cover - Quantizer never asks for this
        raise NotImplementedError(f"NumPy-order mean over axes {axes}")
    return div(s, count).reshape(keep)


def _buffered_pairwise(t: torch.Tensor, buf: int) -> torch.Tensor:
    """Row sums of the float64 (B, n) ``t``: pairwise sums of ``buf``-sized pieces, added in
    order (NumPy's buffered reduction; ``buf >= n`` is plain pairwise summation)."""
    B, n = t.shape
    if n == 0:
        return t.new_zeros(B)
    buf = max(1, min(buf, n))
    nfull = n // buf
    pieces = []
    if nfull:
        full = _pairwise(t[:, :nfull * buf].reshape(B * nfull, buf)).reshape(B, nfull)
        pieces += [full[:, j] for j in range(nfull)]
    if n % buf:
        pieces.append(_pairwise(t[:, nfull * buf:]))
    s = pieces[0]
    for p in pieces[1:]:
        s = s + p
    return s


def _pairwise(t: torch.Tensor) -> torch.Tensor:
    """NumPy's ``pairwise_sum`` of each row of the float64 (B, n) ``t``, vectorized.

    NumPy sums ``n < 8`` values one by one; ``n <= 128`` with eight interleaved accumulators
    combined as ``((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7))`` plus the remainder one by one; larger
    ``n`` as the sum of both halves (the first a multiple of 8). The tree depends only on
    ``n``: its leaves are evaluated together, grouped by length, then its nodes level by level.
    """
    B, n = t.shape
    if n < 8:
        s = t.new_zeros(B)
        for i in range(n):
            s = s + t[:, i]
        return s
    leaves, adds = _pairwise_tree(n)
    vals = t.new_empty(B, len(leaves) + sum(len(level) for level in adds))
    by_len: dict[int, list] = {}
    for node, (start, length) in leaves:
        by_len.setdefault(length, []).append((node, start))
    for length, items in by_len.items():
        ids = torch.tensor([i for i, _ in items], device=t.device)
        starts = torch.tensor([s for _, s in items], device=t.device)
        # Leaf values laid out (length, B, leaves): each accumulator step is one contiguous op.
        cols = (torch.arange(length, device=t.device)[:, None] + starts).reshape(-1)
        seg = t.index_select(1, cols).reshape(B, length, len(items)).transpose(0, 1).contiguous()
        vals.index_copy_(1, ids, _leaf_sum(seg))
    # (index_select/index_copy_: advanced indexing is far slower on multi-threaded CPUs.)
    for level in adds:
        ids, left, right = (torch.tensor(v, device=t.device) for v in zip(*level))
        vals.index_copy_(1, ids, vals.index_select(1, left) + vals.index_select(1, right))
    return vals[:, -1] if adds else vals[:, 0]


def _leaf_sum(seg: torch.Tensor) -> torch.Tensor:
    """NumPy's unrolled pairwise leaf (8 <= length <= 128) over the first axis of ``seg``."""
    n = seg.shape[0]
    r = seg[:8].clone()
    i = 8
    while i < n - n % 8:
        r += seg[i:i + 8]
        i += 8
    res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
    while i < n:
        res = res + seg[i]
        i += 1
    return res


@lru_cache(maxsize=64)
def _pairwise_tree(n: int):
    """Leaves ``(node, (start, length))`` and, level by level, nodes ``(node, left, right)``."""
    leaves, nodes = [], []  # nodes: (id, left, right, height)
    counter = [0]

    def build(start, length):
        if length <= _PW_BLOCK:
            node = counter[0]
            counter[0] += 1
            leaves.append((node, (start, length)))
            return node, 0
        half = length // 2
        half -= half % 8
        left, hl = build(start, half)
        right, hr = build(start + half, length - half)
        node = counter[0]
        counter[0] += 1
        nodes.append((node, left, right, 1 + max(hl, hr)))
        return node, 1 + max(hl, hr)

    build(0, n)
    height = max((h for *_, h in nodes), default=0)
    adds = [[(i, l, r) for i, l, r, h in nodes if h == lev] for lev in range(1, height + 1)]
    return leaves, adds
