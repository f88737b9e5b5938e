"""Torch mirror of :mod:`ecosim.core.rng`: the same counter-based bits, on any device.

Element ``i`` of a stream is ``h(key, counter + i)``, computed by the very function NumPy's
:func:`ecosim.core.rng.fill_bits` calls (:func:`ecosim.core.bitops.hash_block`: two rounds of the
32-bit lowbias32 mixer keyed by the SplitMix64 words of the key, 64-bit counter split into low and
high 32-bit words), so NumPy and torch give the same uint32 values for the same
``(key, counter)``.

Representation: the mixer runs through torch's word shim (:mod:`ecosim.torch.bitops`) on
**int32 words holding the two's complement of the uint32 values** (torch has no usable
unsigned 32-bit arithmetic; the bit identity with NumPy, tested on every run, checks the
wrap-around this relies on). Counters are added to ``0..m-1`` in
blocks that never cross ``2**31``, so that addition does not wrap. Public results
(:func:`random_bits`, :func:`fill_bits`) are **int64 tensors holding values in [0, 2**32)**;
:func:`fill_bits32` gives the int32 words themselves, which is what SR rounding consumes.

On the CPU the work is done in chunks of ``2**18`` elements with in-place ops: per-op
overhead (microseconds per torch call) dominates smaller chunks, and full-size temporaries
leave the cache. At this size each op runs on one thread when torch has one (the benchmarks
run one thread: on small, busy machines OpenMP's hand-offs cost more than a second core
gave). Other devices take one chunk.

Key derivation (:func:`fold_in`, :func:`split_key`, :func:`as_key`) is host-side Python-int
work and is re-exported from :mod:`ecosim.core.rng` unchanged.
"""

from __future__ import annotations

import numbers

import torch

from ..core.bitops import hash_block
from ..core.rng import (GOLDEN32, as_counter, as_key, counter_blocks, fold_in, mix32_int, seed_of,
                        split_key)
from .bitops import TORCH_WORDS

__all__ = ["random_bits", "fold_in", "split_key", "as_key"]

_MASK32 = 0xFFFFFFFF
_CPU_CHUNK = 1 << 15  # elements per chunk of int64 work elsewhere (ecosim.torch.quantizer)
_CPU_BITS_CHUNK = 1 << 18  # elements per chunk of int32 work (the mixer, the rounding kernel)


def chunk_size(device: torch.device, n: int) -> int:
    """Elements per chunk of int64 work: cache-sized on the CPU, everything at once elsewhere."""
    return _CPU_CHUNK if device.type == "cpu" else max(n, 1)


def bits_chunk_size(device: torch.device, n: int) -> int:
    """Elements per chunk of int32 work (random bits, rounding): ``2**18`` on the CPU,
    everything at once elsewhere."""
    return _CPU_BITS_CHUNK if device.type == "cpu" else max(n, 1)


def _blocks(counter: int, n: int, step: int):
    """:func:`ecosim.core.rng.counter_blocks`, also cut where the low word reaches ``2**31``."""
    for pos, m, lo, hi in counter_blocks(counter, n, step):
        if lo < 1 << 31 < lo + m:
            k = (1 << 31) - lo
            yield pos, k, lo, hi
            yield pos + k, m - k, 1 << 31, hi
        else:
            yield pos, m, lo, hi


def fill_bits32(seed: int, counter: int, out: torch.Tensor, work=None) -> torch.Tensor:
    """Write the words of counters ``counter .. counter+out.numel()-1`` (mod 2**64) into the
    contiguous int32 ``out``, as the int32 values with the same 32 bits.

    ``seed`` is :func:`~ecosim.core.rng.seed_of` of the key. As in NumPy, blocks are cut where the
    high counter word changes, so each uses one constant high-word key. ``work`` (from
    :func:`make_work`) saves re-allocating work space when called once per chunk.
    """
    out = out.view(-1)
    n = out.numel()
    k0, k1 = seed & _MASK32, seed >> 32
    step = bits_chunk_size(out.device, n)
    base, t = work if work is not None else make_work(out.device, min(n, step))
    for pos, m, lo, hi in _blocks(counter, n, step):
        # the block does not cross 2**31: the int32 addition does not wrap
        hash_block(out[pos:pos + m], base, lo, k0, k1 ^ mix32_int(hi + GOLDEN32), t[:m],
                   TORCH_WORDS)
    return out


def fill_bits(seed: int, counter: int, out: torch.Tensor, work=None) -> torch.Tensor:
    """:func:`fill_bits32` into the contiguous int64 ``out`` (values in [0, 2**32))."""
    out = out.view(-1)
    n = out.numel()
    step = bits_chunk_size(out.device, n)
    work = work if work is not None else make_work(out.device, min(n, step))
    x = torch.empty(min(n, step), dtype=torch.int32, device=out.device)
    for lo in range(0, n, step):
        hi = min(lo + step, n)
        fill_bits32(seed, counter + lo, x[:hi - lo], work)
        out[lo:hi].copy_(x[:hi - lo])
        out[lo:hi] &= _MASK32
    return out


def make_work(device, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Work space of :func:`fill_bits32` for chunks of up to ``n`` values: (0..n-1, buffer),
    int32."""
    return (torch.arange(n, dtype=torch.int32, device=device),
            torch.empty(n, dtype=torch.int32, device=device))


def random_bits(key, counter: int = 0, size: int | tuple = 1, *, device=None) -> torch.Tensor:
    """Uniform random 32-bit words for counters ``counter, counter+1, ...`` under ``key``.

    The values equal :func:`ecosim.core.rng.random_bits` ``(key, counter, size)`` element for
    element.

    Args:
        key: an int in ``[0, 2**64)``.
        counter: index of the first element in the key's stream (reduced mod 2**64).
        size: number of values, or a shape (filled in C order).
        device: torch device of the result (default: the current default device).

    Returns:
        int64 tensor of values in [0, 2**32) (torch has no usable uint32 arithmetic; see the
        module docstring).

    Example:
        >>> import ecosim
        >>> a = random_bits(7, 0, 10)
        >>> a.tolist() == ecosim.core.rng.random_bits(7, 0, 10).tolist()
        True
        >>> bool((random_bits(7, 4, 6) == a[4:]).all())
        True
    """
    shape = (size,) if isinstance(size, numbers.Integral) else tuple(size)
    n = 1
    for d in shape:
        n *= int(d)
    out = torch.empty(n, dtype=torch.int64, device=device)
    return fill_bits(seed_of(key), as_counter(counter), out).reshape(shape)
