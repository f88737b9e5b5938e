"""Hypothesis properties of quantize: on-grid, idempotent, monotone, symmetric, bounded error,
SR picks a neighbour, same key same bits. Formats of 16 bits or fewer, float32 and float64."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ecosim import formats, quantize, rng

SIGNED = [n for n in formats.names() if formats.get(n).signed]
fmt_names = st.sampled_from(SIGNED)
dtypes = st.sampled_from([np.float32, np.float64])


@st.composite
def inputs(draw, finite=True):
    name = draw(fmt_names)
    dt = draw(dtypes)
    fmt = formats.get(name)
    # Magnitudes around the format's range (scaled so that both ends are exercised).
    span = min(fmt.max * 4, float(np.finfo(dt).max) / 2)
    elems = st.floats(-span, span, allow_nan=False, allow_infinity=False,
                      width=32 if dt == np.float32 else 64)
    x = draw(hnp.arrays(dt, st.integers(1, 64), elements=elems))
    return fmt, x


def neighbours(fmt, a):
    """The two grid magnitudes bracketing |a| (lo <= |a| <= hi), clamped to the range."""
    v = fmt.values()
    v = v[v >= 0]
    i = np.clip(np.searchsorted(v, np.abs(a), side="right") - 1, 0, v.size - 1)
    j = np.minimum(i + 1, v.size - 1)
    return v[i], v[j]


def on_grid(fmt, y):
    return np.isin(y.astype(np.float64), fmt.values())


@given(inputs(), st.sampled_from(["rtn", "sr"]), st.integers(0, 2**32))
def test_on_grid_and_idempotent(case, mode, key):
    fmt, x = case
    kw = dict(key=key) if mode == "sr" else {}
    y = quantize(x, fmt, mode, **kw)
    assert y.dtype == x.dtype and y.shape == x.shape
    assert on_grid(fmt, y).all()
    # Values already on the grid stay put, in both modes (p = 0 never rounds up).
    np.testing.assert_array_equal(quantize(y, fmt, mode, **kw), y)


@given(inputs())
def test_rtn_monotone_and_symmetric(case):
    fmt, x = case
    xs = np.sort(x)
    y = quantize(xs, fmt)
    assert (np.diff(y.astype(np.float64)) >= 0).all()
    if fmt.is_float:  # integer grids are asymmetric at the negative end
        np.testing.assert_array_equal(quantize(-x, fmt), -quantize(x, fmt))


@given(inputs())
def test_rtn_error_at_most_half_a_step_in_range(case):
    fmt, x = case
    a = x.astype(np.float64)
    inside = np.abs(a) <= fmt.max
    lo, hi = neighbours(fmt, a)
    err = np.abs(quantize(x, fmt).astype(np.float64) - a)
    assert (err[inside] <= (hi - lo)[inside] / 2).all()


@given(inputs(), st.integers(0, 2**32), st.integers(1, 32))
def test_sr_picks_one_of_the_two_neighbours(case, key, nbits):
    fmt, x = case
    a = x.astype(np.float64)
    inside = np.abs(a) <= fmt.max
    lo, hi = neighbours(fmt, a)
    y = np.abs(quantize(x, fmt, "sr", key=key, nbits=nbits).astype(np.float64))
    assert ((y == lo) | (y == hi))[inside].all()
    if fmt.is_float:
        np.testing.assert_array_equal(quantize(-x, fmt, "sr", key=key, nbits=nbits),
                                      -quantize(x, fmt, "sr", key=key, nbits=nbits))


@given(st.integers(0, 2**64 - 1), st.integers(0, 2**40), st.integers(1, 3000))
def test_same_key_same_bits_and_slices_agree(key, counter, n):
    a = rng.random_bits(key, counter, n)
    np.testing.assert_array_equal(a, rng.random_bits(key, counter, n))
    k = n // 3
    np.testing.assert_array_equal(a[k:], rng.random_bits(key, counter + k, n - k))
