"""The counter-based generator: pure function of (key, counter), uniform, uncorrelated."""

import hashlib

import numpy as np
import pytest
from numpy.testing import assert_array_equal
from scipy import stats

from ecosim import quantize, rng

N = 1 << 20
# With N samples, a mean/correlation estimate has standard error ~ sd/sqrt(N); we allow
# 6 standard errors (two-sided p ~ 2e-9 per check), so a correct generator never fails, while
# a defect of 1% in a bit's frequency (10 standard errors) would.
SIGMAS = 6


def mix64(z):
    """The SplitMix64 finaliser in Python ints (independent of ecosim.core.rng)."""
    m64 = 2**64 - 1
    z &= m64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m64
    return z ^ (z >> 31)


def scalar_bits(key, c):
    """The generator's definition, one value at a time in Python ints (independent of NumPy)."""
    m32 = 2**32 - 1

    def mix32(x):
        x &= m32
        x ^= x >> 16
        x = (x * 0x7FEB352D) & m32
        x ^= x >> 15
        x = (x * 0x846CA68B) & m32
        return x ^ (x >> 16)

    seed = mix64(key ^ 0x5851F42D4C957F2D)
    x = mix32((c & m32) ^ (seed & m32))
    return mix32(x ^ (seed >> 32) ^ mix32((c >> 32) + 0x9E3779B9))


@pytest.mark.parametrize("key, counter", [(0, 0), (12345, 2**32 - 2), (2**64 - 1, 2**50)])
def test_vectorised_stream_equals_its_scalar_definition(key, counter):
    got = rng.random_bits(key, counter, 5).tolist()
    assert got == [scalar_bits(key, counter + i) for i in range(5)]
    # Pinned: the stream is part of the API (a torch mirror must reproduce it).
    if (key, counter) == (0, 0):
        assert got[:2] == [3202715171, 2082974666]


def test_counter_slices_and_high_word_crossing():
    a = rng.random_bits(99, 2**32 - 100, 300)  # crosses the 2**32 counter boundary
    assert_array_equal(a[150:], rng.random_bits(99, 2**32 + 50, 150))
    assert len(np.unique(a)) == 300


@pytest.mark.parametrize("key, counter", [(0, 0), (1, 0), (2**63, 5), (7, 2**40)])
def test_uniform_bytes_and_balanced_bits(key, counter):
    x = rng.random_bits(key, counter, N)
    top = (x >> 24).astype(np.int64)
    chi2 = ((np.bincount(top, minlength=256) - N / 256) ** 2 / (N / 256)).sum()
    assert stats.chi2.sf(chi2, 255) > 1e-6, chi2
    bits = (x[:, None] >> np.arange(32, dtype=np.uint32)) & 1
    assert (np.abs(bits.mean(axis=0) - 0.5) < SIGMAS * 0.5 / np.sqrt(N)).all()


def test_no_correlation_between_neighbours_keys_or_bits():
    u = rng.random_bits(3, 0, N + 1).astype(np.float64)
    v = rng.random_bits(4, 0, N).astype(np.float64)  # adjacent key
    lim = SIGMAS / np.sqrt(N)
    assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < lim
    assert abs(np.corrcoef(u[:-1], v)[0, 1]) < lim
    # Bit i of element j against bit i of element j+1 (the low bits are what small nbits use).
    b = rng.random_bits(5, 0, N + 1) & 1
    assert abs(np.mean(b[:-1] == b[1:]) - 0.5) < SIGMAS * 0.5 / np.sqrt(N)


def test_fold_in_and_split():
    k = rng.fold_in(0, 3, "W0")
    assert k == rng.fold_in(0, 3, "W0")
    assert len({k, rng.fold_in(0, 3, "W1"), rng.fold_in(0, 4, "W0"), rng.fold_in(1, 3, "W0"),
                rng.fold_in(0, 3), rng.fold_in(0, "3")}) == 6
    assert len(set(rng.split_key(9, 100))) == 100
    with pytest.raises(TypeError):
        rng.fold_in(0, 1.5)
    with pytest.raises(ValueError):
        rng.random_bits(-1, 0, 3)


def test_fold_in_equals_its_definition():
    """fold_in item by item, written out in Python ints: the key's SplitMix64 seed xor the
    finalised data word (an int mod 2**64, or a string's little-endian BLAKE2b-64 word) plus
    the golden constant, finalised again. Ints of any integer type, str subclasses (hashed by
    their characters, as ``str.encode`` gives them) and repeated strings (cached) agree."""
    def word(d):
        if isinstance(d, str):
            return int.from_bytes(hashlib.blake2b(d.encode(), digest_size=8).digest(), "little")
        return int(d) & (2**64 - 1)

    def fold(k, *data):
        for d in data:
            k = mix64(mix64(k ^ 0x5851F42D4C957F2D) ^ mix64(word(d) + 0x9E3779B97F4A7C15))
        return k

    class Name(str):
        def __str__(self):
            return "not used"

    for key, data in [(0, (3, "W0")), (2**64 - 1, (2**70, "m", "c")), (7, (np.int64(5),)),
                      (7, (Name("W0"),)), (123, ("W0", "W0")), (5, ())]:
        assert rng.fold_in(key, *data) == fold(key, *data), (key, data)


def test_sr_with_keyed_bits_is_unbiased():
    # x = 1 + 0.3 ulp of E4M3 (ulp 0.125): each element rounds up with probability 0.3
    # (to 2**-32). Mean over N draws has standard error sqrt(p(1-p)/N) * ulp.
    x = np.full(N, 1.0 + 0.3 * 0.125)
    up = (quantize(x, "e4m3", "sr", key=11) == 1.125).mean()
    assert abs(up - 0.3) < SIGMAS * np.sqrt(0.3 * 0.7 / N)
