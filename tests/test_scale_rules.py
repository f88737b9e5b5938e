"""The block scale rules of ecosim.core.scale_rules: exact values of each rule at its edges (the
zero block, the smallest-normal floor, E8M0's range, ties of the power-of-two rules), and the same
bits through NumPy's and torch's shims."""

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from ecosim import Quantizer
from ecosim.core.checks import NonFiniteError
from ecosim.core.scale_rules import (NUMPY_SCALES, absmean_scales, block_scales, pow2_scales,
                                refuse_nonfinite)

# Block maxima of an E4M3 quantizer (rho = 448, emax = 8): a zero block, exact multiples and
# powers of two of rho, a tie of the "even" rule, and values below rho * tiny (float32).
AMAX = [0.0, 448.0, 896.0, 449.0, 224.0, 256.0, 255.0, 336.0, 672.0, 1344.0, 1e-40, 2.0**-149]
WANT = {  # scale per block, by rule (float32); 2**-126 is float32's smallest normal
    "absmax": [1.0, 1.0, 2.0, 449 / 448, 0.5, 256 / 448, 255 / 448, 0.75, 1.5, 3.0, 2.0**-126,
               2.0**-126],
    "floor": [1.0, 1.0, 2.0, 1.0, 0.5, 1.0, 0.5, 1.0, 2.0, 4.0, 2.0**-127, 2.0**-127],
    # 2**-149 / 448 underflows to 0 in float32, whose frexp exponent 0 gives the scale 1
    "ceil": [1.0, 1.0, 2.0, 2.0, 0.5, 1.0, 1.0, 1.0, 2.0, 4.0, 2.0**-127, 1.0],
    # nearest power of two; ties (0.75, 1.5, 3.0 times rho) go to the even E8M0 code, whose
    # exponent (code - 127) is odd: 2**-1, 2**1, 2**1
    "even": [1.0, 1.0, 2.0, 1.0, 0.5, 0.5, 0.5, 0.5, 2.0, 2.0, 2.0**-127, 2.0**-127],
}


def _scales(rule: str, amax: np.ndarray, ops, const):
    scale, pow2 = ("absmax", "floor") if rule == "absmax" else ("absmax_pow2", rule)
    q = Quantizer("e4m3", granularity="row", scale=scale, pow2=pow2)
    tiny = const(float(np.finfo(np.float32).tiny), amax)
    return block_scales(q, amax, const(q.rho, amax), tiny, ops)


@pytest.mark.parametrize("rule", list(WANT))
def test_rules_give_the_documented_scales(rule):
    amax = np.array(AMAX, np.float32).reshape(-1, 1)
    got = _scales(rule, amax, NUMPY_SCALES, NUMPY_SCALES.const)
    assert got.dtype == np.float32 and got.shape == amax.shape
    assert_array_equal(got.ravel(), np.array(WANT[rule], np.float32))


@pytest.mark.parametrize("rule", ["floor", "ceil", "even"])
def test_pow2_exponents_are_clamped_to_e8m0(rule):
    """float64 maxima far outside E8M0's range get 2**127 and 2**-127."""
    q = Quantizer("e4m3", scale="absmax_pow2", pow2=rule)
    got = pow2_scales(np.array([1e300, 1e-300, 0.0]), q, NUMPY_SCALES)
    assert got.tolist() == [2.0**127, 2.0**-127, 1.0]


def test_absmean_floor_zero_block_and_overflow():
    amax = np.array([1.0, 1e-30, 0.0], np.float32)
    tiny = np.finfo(np.float32).tiny
    got = absmean_scales(np.array([0.5, 1e-300, 0.0]), amax, tiny, NUMPY_SCALES)
    assert got.dtype == np.float32 and got.tolist() == [0.5, 2.0**-126, 1.0]
    with pytest.raises(NonFiniteError, match="overflowed float64"):  # a float64 sum's inf
        absmean_scales(np.array([np.inf]), np.ones(1), np.finfo(np.float64).tiny, NUMPY_SCALES)


def test_refuse_nonfinite_counts_the_input():
    xb = np.array([[1.0, np.nan], [np.inf, -np.inf]], np.float32)
    amax = np.abs(xb).max(axis=1, keepdims=True)
    with pytest.raises(NonFiniteError, match="has 3 non-finite"):
        refuse_nonfinite(amax, xb, NUMPY_SCALES)
    refuse_nonfinite(np.zeros((0, 1), np.float32), xb[:0], NUMPY_SCALES)  # empty: nothing


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("rule", list(WANT))
def test_torch_shim_gives_numpy_bits(rule, dtype):
    """One rule, two shims: the same scales bit for bit (float64 maxima as well)."""
    torch = pytest.importorskip("torch")
    from ecosim.torch.scales import TORCH_SCALES

    amax = np.array(AMAX + [1e300, 1e-300][:2 if dtype == "float64" else 0], dtype)
    amax = amax.reshape(-1, 1)
    want = _scales(rule, amax, NUMPY_SCALES, NUMPY_SCALES.const)
    got = _scales(rule, torch.from_numpy(amax), TORCH_SCALES, TORCH_SCALES.const)
    assert got.dtype == getattr(torch, dtype)
    assert got.numpy().tobytes() == want.tobytes()
