"""Counter-based random bits: a pure function of (key, counter).

The generator is SplitMix64 (Steele, Lea, Flood, "Fast splittable pseudorandom number
generators", OOPSLA 2014) used as a hash: the 64-bit state of element ``i`` is
``seed(key) + (counter + i) * 0x9E3779B97F4A7C15`` (mod 2**64), and its output is the SplitMix64
finaliser of that state; the 32 random bits are the high half. Nothing is sequential, so any
slice of the stream can be produced independently (chunks, threads, a torch mirror with int64
arithmetic), and the same (key, counter) always gives the same bits.

Keys are non-negative Python ints (reduced mod 2**64). :func:`fold_in` derives independent keys
from a key and data (a step number, a parameter name), as JAX's ``fold_in`` does.
"""

from __future__ import annotations

import hashlib
import numbers

import numpy as np

__all__ = ["random_bits", "fold_in", "split_key", "as_key"]

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


def _mix64(z: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser, in place on a uint64 array (wrapping arithmetic)."""
    t = z >> np.uint64(30)
    z ^= t
    z *= np.uint64(_M1)
    np.right_shift(z, np.uint64(27), out=t)
    z ^= t
    z *= np.uint64(_M2)
    np.right_shift(z, np.uint64(31), out=t)
    z ^= t
    return z


def as_key(key) -> int:
    """Validate a key: a non-negative integer (numpy integers accepted), reduced mod 2**64."""
    if isinstance(key, bool) or not isinstance(key, numbers.Integral):
        raise TypeError(f"a key must be an int, got {type(key).__name__}")
    key = int(key)
    if key < 0:
        raise ValueError(f"a key must be non-negative, got {key}")
    return key & _MASK64


def seed_of(key: int) -> int:
    """The 64-bit stream offset of a key."""
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
    fill_bits(seed_of(key), as_key(counter), out)
    return out.reshape(shape)


def fill_bits(seed: int, counter: int, out: np.ndarray) -> np.ndarray:
    """Write the bits of counters ``counter .. counter+len(out)-1`` into the uint32 ``out``."""
    n = out.size
    z = np.arange(n, dtype=np.uint64)
    z *= np.uint64(GOLDEN)
    z += np.uint64((seed + counter * GOLDEN) & _MASK64)
    _mix64(z)
    z >>= np.uint64(32)
    out[...] = z
    return out


def _data_word(data) -> int:
    if isinstance(data, str):
        return int.from_bytes(hashlib.blake2b(data.encode(), digest_size=8).digest(), "little")
    if isinstance(data, bool) or not isinstance(data, numbers.Integral):
        raise TypeError(f"fold_in takes an int or a str, got {type(data).__name__}")
    return int(data) & _MASK64


def fold_in(key, *data) -> int:
    """A new key derived from ``key`` and each item of ``data`` (ints or strings), in order.

    ``fold_in(k, step, "W0")`` is the key of the SR draws of parameter "W0" at ``step``.
    String hashing is BLAKE2b (stable across processes, unlike ``hash``).
    """
    k = as_key(key)
    for d in data:
        k = _mix64_int(seed_of(k) ^ _mix64_int(_data_word(d) + GOLDEN))
    return k


def split_key(key, n: int) -> list[int]:
    """``n`` independent keys derived from ``key``."""
    return [fold_in(key, i) for i in range(n)]
