"""Counter-based random bits: a pure function of (key, counter).

Element ``i`` of a stream gets the 32 bits ``h(key, counter + i)``, where ``h`` hashes the
64-bit counter with two rounds of a 32-bit integer mixer (C. Wellons' "lowbias32"
xorshift-multiply, from his hash-prospector search) keyed by two 32-bit words derived from the
key with the SplitMix64 finaliser (Steele, Lea, Flood, OOPSLA 2014):

    x = mix32(lo32(c) ^ k0);  x = mix32(x ^ k1 ^ mix32(hi32(c) + GOLDEN32)).

The hash itself is :func:`ecosim.core.bitops.hash_block`, written once for NumPy and torch.
Nothing is sequential: any slice of a stream can be produced on its own (chunks, the torch
mirror), and the same (key, counter) always gives the same
bits. Everything is 32-bit integer arithmetic, which is what makes it fast in NumPy (SR's cost
is dominated by its random bits). For a fixed key and high counter word the map from the low
word is a bijection (each step is invertible).

Keys are Python ints in ``[0, 2**64)``. :func:`fold_in` derives independent keys
from a key and data (a step number, a parameter name), as JAX's ``fold_in`` does.
"""

from __future__ import annotations

import functools
import hashlib
import numbers

import numpy as np

from .bitops import M32A, M32B, NUMPY_WORDS, hash_block

__all__ = ["random_bits", "fold_in", "split_key", "as_key", "as_counter", "mix32_int",
           "counter_blocks", "seed_and_counter"]

_MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB
_KEY_SALT = 0x5851F42D4C957F2D  # keeps seed(0) away from the all-zero state


def _mix64_int(z: int) -> int:
    """SplitMix64 finaliser on one Python int."""
    z &= _MASK64
    z = ((z ^ (z >> 30)) * _M1) & _MASK64
    z = ((z ^ (z >> 27)) * _M2) & _MASK64
    return z ^ (z >> 31)


def as_key(key) -> int:
    """Validate a key: an integer in ``[0, 2**64)`` (numpy integers accepted).

    A larger key is refused rather than reduced: reduced, ``2**64`` would silently give the
    streams of ``0``.
    """
    if type(key) is not int:  # the common case skips the (slow) abstract-class check
        if isinstance(key, bool) or not isinstance(key, numbers.Integral):
            raise TypeError(f"a key must be an int, got {type(key).__name__}")
        key = int(key)
    if key < 0:
        raise ValueError(f"a key must be non-negative, got {key}")
    if key > _MASK64:
        raise ValueError(f"a key must be below 2**64 (keys are 64-bit words), got {key}")
    return key


def as_counter(counter) -> int:
    """Validate a stream counter: a non-negative integer, reduced mod 2**64 (a stream's
    counters wrap, as a 64-bit word does)."""
    if type(counter) is not int:
        if isinstance(counter, bool) or not isinstance(counter, numbers.Integral):
            raise TypeError(f"a counter must be an int, got {type(counter).__name__}")
        counter = int(counter)
    if counter < 0:
        raise ValueError(f"a counter must be non-negative, got {counter}")
    return counter & _MASK64


def seed_of(key: int) -> int:
    """The 64-bit word a key's stream is keyed by (two 32-bit halves k0, k1)."""
    return _mix64_int(as_key(key) ^ _KEY_SALT)


def random_bits(key, counter: int = 0, size: int | tuple = 1) -> np.ndarray:
    """Uniform random uint32 bits for counters ``counter, counter+1, ...`` under ``key``.

    Args:
        key: non-negative int.
        counter: index of the first element in the key's stream.
        size: number of values, or a shape (filled in C order).

    Returns:
        uint32 array; element ``i`` (flattened) depends only on ``(key, counter + i)``.

    Example:
        >>> a = random_bits(7, 0, 10)
        >>> bool((random_bits(7, 4, 6) == a[4:]).all())
        True
    """
    shape = (size,) if isinstance(size, numbers.Integral) else tuple(size)
    n = int(np.prod(shape, dtype=np.int64))
    out = np.empty(n, np.uint32)
    fill_bits(seed_of(key), as_counter(counter), out)
    return out.reshape(shape)


GOLDEN32 = 0x9E3779B9
_MASK32 = 0xFFFFFFFF


def mix32_int(x: int) -> int:
    """lowbias32 of a Python int (its low 32 bits), as a Python int: the key mixing that the
    NumPy and torch random bits share."""
    x &= _MASK32
    x ^= x >> 16
    x = (x * M32A) & _MASK32
    x ^= x >> 15
    x = (x * M32B) & _MASK32
    return x ^ (x >> 16)


def fill_bits(seed: int, counter: int, out: np.ndarray) -> np.ndarray:
    """Write the bits of counters ``counter .. counter+out.size-1`` into the uint32 ``out``.

    ``seed`` is :func:`seed_of` of the key. Works in cache-sized blocks, split where the high
    counter word changes (once per 2**32 values).
    """
    out = out.reshape(-1)
    n = out.size
    k0, k1 = seed & _MASK32, seed >> 32
    lo = counter & _MASK32
    if 0 < n <= _BLOCK and lo + n <= 1 << 32:
        # one block (what counter_blocks yields when n fits in a block and the low word does
        # not wrap), without the generator and its slices: most draws are of a few thousand
        # values, and the high counter word is almost always 0 (its key word is then _HI0)
        hi = (counter & _MASK64) >> 32
        hash_block(out, _BASE, lo, k0, k1 ^ (_HI0 if hi == 0 else mix32_int(hi + GOLDEN32)),
                   np.empty(n, np.uint32), NUMPY_WORDS)
        return out
    t = np.empty(min(n, _BLOCK), np.uint32)
    for pos, m, lo, hi in counter_blocks(counter, n, _BLOCK):
        # no wrap: lo + m <= 2**32
        hash_block(out[pos:pos + m], _BASE, lo, k0, k1 ^ mix32_int(hi + GOLDEN32), t[:m],
                   NUMPY_WORDS)
    return out


def counter_blocks(counter: int, n: int, block: int):
    """The blocks in which counters ``counter .. counter+n-1`` are drawn (the NumPy and torch
    :func:`fill_bits` share them).

    Yields ``(pos, m, lo, hi)``: ``m`` counters (at most ``block``) starting at element ``pos``,
    whose first counter has the 32-bit words ``lo`` (low) and ``hi`` (high). A block never
    crosses a change of the high word (every ``2**32`` counters), so it is drawn with one
    high-word key and its low words ``lo .. lo+m-1`` do not wrap.

    Example:
        >>> list(counter_blocks(2**32 - 2, 5, 4))
        [(0, 2, 4294967294, 0), (2, 3, 0, 1)]
    """
    pos = 0
    while pos < n:
        c = (counter + pos) & _MASK64
        lo, hi = c & _MASK32, c >> 32
        m = min(n - pos, (1 << 32) - lo, block)
        yield pos, m, lo, hi
        pos += m


def seed_and_counter(key) -> tuple[int, int]:
    """The seed (:func:`seed_of`) and the first counter of an SR ``key=`` argument: an int
    (counter 0) or a ``(key, counter)`` pair, as :func:`ecosim.quantize` and
    :func:`ecosim.torch.quantize` take it.

    Example:
        >>> seed_and_counter((7, 10)) == (seed_of(7), 10)
        True
    """
    if isinstance(key, tuple):
        if len(key) != 2:
            raise ValueError(f"key must be an int or a (key, counter) pair, got {key!r}")
        k, counter = key
    else:
        k, counter = key, 0
    return seed_of(k), as_counter(counter)


_BLOCK = 1 << 15
_BASE = np.arange(_BLOCK, dtype=np.uint32)
_HI0 = mix32_int(GOLDEN32)  # the key word of the high counter word 0


@functools.lru_cache(maxsize=4096)
def _str_mixed(data: str) -> int:
    """:func:`_data_mixed` of a string (cached: a run folds in the same few names every step)."""
    return _mix64_int(
        int.from_bytes(hashlib.blake2b(data.encode(), digest_size=8).digest(), "little") + GOLDEN)


def _data_mixed(data) -> int:
    """The data word of an item of :func:`fold_in` (an int mod 2**64, or a string's BLAKE2b
    word), plus GOLDEN, through the SplitMix64 finaliser."""
    if type(data) is int:
        return _mix64_int((data & _MASK64) + GOLDEN)
    if type(data) is str:
        return _str_mixed(data)
    if isinstance(data, str):
        return _str_mixed.__wrapped__(data)  # a str subclass: not cached by its value
    if isinstance(data, bool) or not isinstance(data, numbers.Integral):
        raise TypeError(f"fold_in takes an int or a str, got {type(data).__name__}")
    return _mix64_int((int(data) & _MASK64) + GOLDEN)


def fold_in(key, *data) -> int:
    """A new key derived from ``key`` and each item of ``data`` (ints or strings), in order.

    ``fold_in(k, step, "W0")`` is the key of the SR draws of parameter "W0" at ``step``.
    String hashing is BLAKE2b (stable across processes, unlike ``hash``).
    """
    k = as_key(key)
    for d in data:
        # seed_of(k) without validating k again: it is already a key
        k = _mix64_int(_mix64_int(k ^ _KEY_SALT) ^ _data_mixed(d))
    return k


def split_key(key, n: int) -> list[int]:
    """``n`` independent keys derived from ``key``."""
    return [fold_in(key, i) for i in range(n)]
