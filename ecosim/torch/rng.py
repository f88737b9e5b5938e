"""Torch mirror of :mod:`ecosim.rng`: the same counter-based bits, on any device.

Element ``i`` of a stream is ``h(key, counter + i)`` with exactly the hash of
:func:`ecosim.rng.fill_bits` (two rounds of the 32-bit lowbias32 mixer keyed by the SplitMix64
words of the key, 64-bit counter split into low and high 32-bit words), so NumPy and torch give
the same uint32 values for the same ``(key, counter)``.

Representation: torch has no general unsigned 32-bit arithmetic (``torch.uint32`` lacks
add and shifts in 2.x), so the words live in **int64 tensors holding values in [0, 2**32)**.
Right shifts of these non-negative values are logical. The mixer's products never overflow
int64 (signed overflow is never relied on, on CPU or CUDA): the first constant is below 2**31,
so ``x * m < 2**63``; the second is used as ``m - 2**32`` (negative), which is the same
number mod 2**32 and keeps ``|x * (m - 2**32)| < 2**63``. Masking with ``0xFFFFFFFF`` then
leaves exactly the low 32 bits of ``x * m`` (two's complement).

On the CPU the work is done in cache-sized chunks of ``2**15`` elements with in-place ops:
full-size int64 temporaries would be memory-bound and about 10x slower, and at this size
(torch's parallel grain size) each op runs on one thread: on small machines OpenMP's start-up
per op cost more than a second core gave. Other devices take one chunk.

Key derivation (:func:`fold_in`, :func:`split_key`, :func:`as_key`) is host-side Python-int
work and is re-exported from :mod:`ecosim.rng` unchanged.
"""

from __future__ import annotations

import numbers

import torch

from ..rng import (GOLDEN32, as_key, counter_blocks, fold_in, mix32_int, seed_of,
                   split_key)

__all__ = ["random_bits", "fold_in", "split_key", "as_key"]

_MASK32 = 0xFFFFFFFF


# lowbias32 constants; the second as its negative representative mod 2**32 (see above).
_M32A = 0x7FEB352D
_M32B_NEG = 0x846CA68B - (1 << 32)
_CPU_CHUNK = 1 << 15


def _mix32(x: torch.Tensor, t: torch.Tensor) -> None:
    """lowbias32 (C. Wellons), the mixer of :func:`ecosim.rng._mix32`, in place on int64 words.

    ``t`` is scratch space of the same size.
    """
    torch.bitwise_right_shift(x, 16, out=t)
    x ^= t
    x *= _M32A  # < 2**63
    x &= _MASK32
    torch.bitwise_right_shift(x, 15, out=t)
    x ^= t
    x *= _M32B_NEG  # > -2**63; the same low 32 bits as x * 0x846CA68B
    x &= _MASK32
    torch.bitwise_right_shift(x, 16, out=t)
    x ^= t


def chunk_size(device: torch.device, n: int) -> int:
    """Elements per chunk: cache-sized on the CPU, everything at once elsewhere."""
    return _CPU_CHUNK if device.type == "cpu" else max(n, 1)


def fill_bits(seed: int, counter: int, out: torch.Tensor, work=None) -> torch.Tensor:
    """Write the bits of counters ``counter .. counter+out.numel()-1`` (mod 2**64) into ``out``.

    ``seed`` is :func:`~ecosim.rng.seed_of` of the key; ``out`` is a contiguous int64 tensor
    (values in [0, 2**32) on return). As in NumPy, chunks are cut where the high counter word
    changes, so each uses one constant high-word key. ``work`` (from :func:`make_work`) saves
    re-allocating work space when called once per chunk.
    """
    out = out.view(-1)
    n = out.numel()
    k0, k1 = seed & _MASK32, seed >> 32
    step = chunk_size(out.device, n)
    base, t = work if work is not None else make_work(out.device, min(n, step))
    for pos, m, lo, hi in counter_blocks(counter, n, step):
        x = out[pos:pos + m]
        torch.add(base[:m], lo, out=x)  # < 2**32: the low word does not wrap in a chunk
        x ^= k0
        _mix32(x, t[:m])
        x ^= k1 ^ mix32_int(hi + GOLDEN32)
        _mix32(x, t[:m])
    return out


def make_work(device, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Work space of :func:`fill_bits` for chunks of up to ``n`` values: (0..n-1, buffer)."""
    return (torch.arange(n, dtype=torch.int64, device=device),
            torch.empty(n, dtype=torch.int64, device=device))


def random_bits(key, counter: int = 0, size: int | tuple = 1, *, device=None) -> torch.Tensor:
    """Uniform random 32-bit words for counters ``counter, counter+1, ...`` under ``key``.

    The values equal :func:`ecosim.rng.random_bits` ``(key, counter, size)`` element for
    element.

    Args:
        key: non-negative int (reduced mod 2**64).
        counter: index of the first element in the key's stream (reduced mod 2**64).
        size: number of values, or a shape (filled in C order).
        device: torch device of the result (default: the current default device).

    Returns:
        int64 tensor of values in [0, 2**32) (torch has no usable uint32 arithmetic; see the
        module docstring).

    Example:
        >>> import ecosim
        >>> a = random_bits(7, 0, 10)
        >>> a.tolist() == ecosim.rng.random_bits(7, 0, 10).tolist()
        True
        >>> bool((random_bits(7, 4, 6) == a[4:]).all())
        True
    """
    shape = (size,) if isinstance(size, numbers.Integral) else tuple(size)
    n = 1
    for d in shape:
        n *= int(d)
    out = torch.empty(n, dtype=torch.int64, device=device)
    return fill_bits(seed_of(key), as_key(counter), out).reshape(shape)
