"""Tests for ecosim.metrics.error_similarity."""

import dataclasses
import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from numpy.testing import assert_allclose, assert_array_equal

from ecosim.metrics import ErrorSimilarity, error_similarity


def _readonly(x):
    x = np.array(x)
    x.setflags(write=False)
    return x


def test_identical_errors():
    e = np.array([0.3, -1.7, 2.5e-3, 4.0])
    r = error_similarity(e, e)
    assert isinstance(r, ErrorSimilarity)
    assert r.cosine == pytest.approx(1.0, abs=4e-16) and r.cosine <= 1.0
    assert r.norm_ratio == 1.0
    assert r.rel_diff == 0.0


def test_opposite_errors():
    e = np.array([0.3, -1.7, 2.5e-3, 4.0])
    r = error_similarity(e, -e)
    assert r.cosine == pytest.approx(-1.0, abs=4e-16) and r.cosine >= -1.0
    assert r.norm_ratio == 1.0
    assert r.rel_diff == 2.0  # ||2e|| = 2||e|| exactly: scaling by 2 is exact


def test_constructed_example():
    # ||(3,4)|| = 5, ||(0,10)|| = 10, <.,.> = 40, difference (3,-6) has norm sqrt(45).
    r = error_similarity(np.array([3.0, 4.0]), np.array([0.0, 10.0]))
    assert r.cosine == pytest.approx(0.8, rel=1e-15)
    assert r.norm_ratio == 2.0
    assert r.rel_diff == pytest.approx(math.sqrt(45) / 5, rel=1e-15)


@pytest.mark.parametrize("factor", [0.25, 0.5, 2.0, 8.0])
def test_norm_ratio_exact_for_power_of_two_scaling(factor):
    e = np.random.default_rng(0).normal(size=(7, 5))
    r = error_similarity(e, factor * e)
    assert r.norm_ratio == factor  # exact: power-of-two scaling commutes with the rounding
    # e - factor*e rounds element-wise, so rel_diff is only correct to a few ulp.
    assert r.rel_diff == pytest.approx(abs(1 - factor), rel=1e-15)
    assert r.cosine == pytest.approx(1.0, abs=4e-16)


def test_orthogonal_errors():
    r = error_similarity(np.array([1.0, 0.0]), np.array([0.0, 2.0]))
    assert r == ErrorSimilarity(cosine=0.0, norm_ratio=2.0, rel_diff=math.sqrt(5.0))


def test_record_is_frozen():
    r = error_similarity(np.ones(3), np.ones(3))
    with pytest.raises(AttributeError):
        r.cosine = 0.0
    assert not dataclasses.is_dataclass(r) and r._fields == ("cosine", "norm_ratio", "rel_diff")


def test_zero_norms_give_nan_without_warning():
    # pytest turns warnings into errors, so this also checks that no RuntimeWarning is issued.
    zero, e = np.zeros(4), np.array([1.0, 2.0, 0.0, -1.0])
    r = error_similarity(zero, e)
    assert math.isnan(r.cosine) and math.isnan(r.norm_ratio) and math.isnan(r.rel_diff)
    r = error_similarity(e, zero)
    assert math.isnan(r.cosine)
    assert r.norm_ratio == 0.0 and r.rel_diff == 1.0
    r = error_similarity(zero, zero)
    assert all(math.isnan(v) for v in r)


def test_empty_arrays_and_empty_dict_are_zero_norm():
    assert all(math.isnan(v) for v in error_similarity(np.zeros(0), np.zeros(0)))
    assert all(math.isnan(v) for v in error_similarity({}, {}))
    assert error_similarity({}, {}, per_tensor=True) == {}


def test_dict_global_equals_concatenation():
    rng = np.random.default_rng(1)
    prev = {"w1": rng.normal(size=(3, 4)), "b1": rng.normal(size=4), "w2": rng.normal(size=5)}
    nxt = {name: 0.9 * x + 0.1 * rng.normal(size=x.shape) for name, x in prev.items()}
    # Key order of the second mapping must not matter.
    nxt = dict(reversed(list(nxt.items())))
    got = error_similarity(prev, nxt)
    names = list(prev)
    flat_prev = np.concatenate([prev[n].ravel() for n in names])
    flat_next = np.concatenate([nxt[n].ravel() for n in names])
    expected = error_similarity(flat_prev, flat_next)
    assert_allclose(tuple(got), tuple(expected), rtol=1e-14)


def test_per_tensor():
    rng = np.random.default_rng(2)
    prev = {"a": rng.normal(size=(2, 3)), "b": rng.normal(size=6)}
    nxt = {"a": prev["a"], "b": -0.5 * prev["b"]}
    got = error_similarity(prev, nxt, per_tensor=True)
    assert set(got) == {"a", "b"}
    assert got["a"].norm_ratio == 1.0 and got["a"].rel_diff == 0.0
    assert got["b"].norm_ratio == 0.5
    assert got["b"].rel_diff == pytest.approx(1.5, rel=1e-15)
    assert got["b"].cosine == pytest.approx(-1.0, abs=4e-16)
    for name in prev:
        assert got[name] == error_similarity(prev[name], nxt[name])


def test_computes_in_float64_and_never_mutates():
    rng = np.random.default_rng(3)
    prev32 = rng.normal(size=1000).astype(np.float32)
    next32 = (prev32 + np.float32(1e-3) * rng.normal(size=1000)).astype(np.float32)
    prev_fp8 = prev32.astype(ml_dtypes.float8_e4m3fn)
    inputs = {"f32": (_readonly(prev32), _readonly(next32)),
              "fp8": (_readonly(prev_fp8), _readonly(prev_fp8[::-1]))}
    snapshots = {k: (a.copy(), b.copy()) for k, (a, b) in inputs.items()}
    for a, b in inputs.values():
        got = error_similarity(a, b)
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        expected_ratio = np.sqrt(np.sum(b64**2)) / np.sqrt(np.sum(a64**2))
        assert got.norm_ratio == pytest.approx(expected_ratio, rel=1e-14)
        assert got.rel_diff == pytest.approx(
            np.sqrt(np.sum((a64 - b64) ** 2)) / np.sqrt(np.sum(a64**2)), rel=1e-14)
    error_similarity({k: v[0] for k, v in inputs.items()},
                     {k: v[1] for k, v in inputs.items()}, per_tensor=True)
    for k, (a, b) in inputs.items():
        assert_array_equal(a, snapshots[k][0])
        assert_array_equal(b, snapshots[k][1])
        assert a.dtype == snapshots[k][0].dtype


def test_accepts_lists():
    r = error_similarity([3.0, 4.0], [0.0, 10.0])
    assert r.norm_ratio == 2.0


@pytest.mark.parametrize("prev, nxt, kwargs, error", [
    (np.ones(3), {"a": np.ones(3)}, {}, TypeError),
    ({"a": np.ones(3)}, np.ones(3), {}, TypeError),
    (np.ones(3), np.ones(3), {"per_tensor": True}, TypeError),
    (np.ones(3), np.ones(4), {}, ValueError),
    (np.ones((2, 3)), np.ones((3, 2)), {}, ValueError),
    ({"a": np.ones(3)}, {"b": np.ones(3)}, {}, ValueError),
    ({"a": np.ones(3)}, {"a": np.ones(2)}, {}, ValueError),
    (np.array([1.0, np.nan]), np.ones(2), {}, ValueError),
    (np.ones(2), np.array([1.0, np.inf]), {}, ValueError),
])
def test_bad_inputs_raise(prev, nxt, kwargs, error):
    with pytest.raises(error):
        error_similarity(prev, nxt, **kwargs)


# Magnitudes 0 or in [1e-100, 1e6]: squares neither underflow nor overflow, so scaling by a
# power of two is exact all the way through the norms and dot products.
_elements = st.one_of(st.just(0.0), st.floats(1e-100, 1e6), st.floats(-1e6, -1e-100))


@given(data=st.data(), a=hnp.arrays(np.float64, st.integers(1, 40), elements=_elements))
def test_properties(data, a):
    b = data.draw(hnp.arrays(np.float64, a.shape, elements=_elements))
    assume(np.any(a != 0) and np.any(b != 0))
    r = error_similarity(a, b)
    assert -1.0 <= r.cosine <= 1.0
    assert r.norm_ratio >= 0.0 and r.rel_diff >= 0.0
    # Triangle inequality: | ||b|| - ||a|| | <= ||a - b|| <= ||a|| + ||b||, divided by ||a||.
    slack = 1e-12 * (1.0 + r.norm_ratio)
    assert abs(r.norm_ratio - 1.0) <= r.rel_diff + slack
    assert r.rel_diff <= 1.0 + r.norm_ratio + slack
    # Law of cosines: ||a-b||^2 = ||a||^2 + ||b||^2 - 2 ||a|| ||b|| cos.
    lhs = r.rel_diff**2
    rhs = 1.0 + r.norm_ratio**2 - 2.0 * r.norm_ratio * r.cosine
    assert abs(lhs - rhs) <= 1e-9 * (1.0 + r.norm_ratio) ** 2
    # Scaling both errors by a power of two is exact and changes nothing.
    assert error_similarity(4.0 * a, 4.0 * b) == r
    # Swapping the errors keeps the cosine and inverts the norm ratio.
    swapped = error_similarity(b, a)
    assert swapped.cosine == pytest.approx(r.cosine, abs=1e-15)
    assert swapped.norm_ratio == pytest.approx(1.0 / r.norm_ratio, rel=1e-15)
