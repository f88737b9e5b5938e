"""The fused RTN pass of row and group scales (ecosim.core.quantizer_rows) against the whole-array
composition of the public pieces, on arrays of several chunks of whole rows (chunks that end
short of the chunk size, a partial last one), more than one group of chunks, zero rows, -0,
subnormal inputs, quotients below the smallest normal, bounds that fail (the top binade of
``pow2="floor"`` clips), NaN and inf; and its kernels against ecosim.core.rounding's, bit for bit,
on every value and midpoint."""

import numpy as np
import pytest

from ecosim import Quantizer, formats

from ecosim.core import quantizer
from ecosim.core import quantizer_rows as qr
from ecosim.core.checks import NonFiniteError
from ecosim.core.rounding import CHUNK, Rounding, round_kernel, prepare
from ecosim.core.rounding_codes import candidate_codes, code_kernel
from test_quantizer_codes import assert_encoded, assert_same, edge_inputs, ref_values

FAST = [formats.get(n) for n in formats.names()
        if qr.fast_rtn_ok(prepare(formats.get(n), np.dtype(np.float32), Rounding()))]


def rows_input(shape, dtype, seed=3):
    """Normals with row magnitudes over 2**-40..2**40 and the edge rows."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-40, 40, shape[:-1] + (1,)))
    x[1] = 0.0  # a zero row (scale 1)
    x[2] = -0.0
    x[4, ::3] = 1e-42 if dtype == np.float32 else 1e-310  # subnormal inputs
    x[5, 0] = 1e6  # quotients below the smallest normal in the rest of the row
    x.reshape(-1)[7::101] = -0.0
    return x.astype(dtype)


def check_fused(q, x):
    with np.errstate(over="ignore"):  # bf16's absmax scale is tiny: x / s overflows, alike
        assert_same(q(x), ref_values(q, x))
        if q.fmt.name != "float8_e8m0fnu":  # negatives are NaN codes there: values only
            assert_encoded(q, x)


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2", "e3m4", "fp6", "fp4", "bf16", "fp16",
                                 "e4m3fnuz", "int8", "int4", "ternary", "e8m0"])
def test_fused_rows_equal_whole_array_passes(fmt, monkeypatch):
    # 2 chunks of 341 rows of 96 (the second partial), of 1024 groups of 32
    x = rows_input((400, 96), np.float32)
    assert x.size > CHUNK and CHUNK % 96
    calls = []  # the fused pass is the one tested: it runs for every call and encode
    monkeypatch.setattr(quantizer, "fused_rows", lambda *a: calls.append(1) or qr.fused_rows(*a))
    n = 0
    for gran in ("row", 32):
        for scale in ("absmax", "absmax_pow2") if fmt != "e8m0" else ("absmax",):
            check_fused(Quantizer(fmt, granularity=gran, scale=scale), x)
            n += 1 if fmt == "e8m0" else 3  # encode, and assert_encoded calls q(x) again
    assert len(calls) == n


@pytest.mark.parametrize("fmt", ["e4m3", "fp4", "int4"])
def test_fused_rows_float64_and_pow2_rules(fmt):
    x = rows_input((400, 96), np.float64)
    for gran in ("row", 16):
        for pow2 in ("floor", "ceil", "even"):
            check_fused(Quantizer(fmt, granularity=gran, scale="absmax_pow2", pow2=pow2), x)
        check_fused(Quantizer(fmt, granularity=gran), x)


def test_more_than_one_group_and_nonfinite_rows():
    """Groups of 8 chunks: 9 chunks of 16 rows; a NaN or inf in the last group is refused
    with its count, after the first group was rounded."""
    x = rows_input((9 * 16, 2048), np.float32, seed=4)
    for gran in ("row", 32):
        for fmt in ("e4m3", "int4"):
            q = Quantizer(fmt, granularity=gran)
            assert_same(q(x), ref_values(q, x))
            assert_encoded(q, x)
            for bad in (np.nan, -np.inf):
                y = x.copy()
                y[-3, 5] = bad
                y[-1, -1] = bad
                with pytest.raises(NonFiniteError, match="input has 2 non-finite values"):
                    q(y)
                with pytest.raises(NonFiniteError, match="input has 2 non-finite values"):
                    q.encode(y)


def within_bound(plan, x):
    """The finite inputs that cannot round past the grid (what fused_rows checks)."""
    x = x[np.isfinite(x)]
    if plan.fmt.is_float:
        hi = np.array(plan.hi, plan.src.udtype).view(plan.src.dtype)[()]
        return x[np.abs(x) <= hi]
    return x[np.abs(x) < min(plan.fmt.int_max, -plan.fmt.int_min) + 0.5]


@pytest.mark.parametrize("fmt", FAST, ids=lambda f: f.name)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fast_kernels_equal_the_kernels(fmt, dtype):
    """Every value of the format, the midpoints and their neighbours, both signs, -0, the
    working dtype's subnormals: the fast kernels' values and codes are the kernels', bit for
    bit (integer grids: values from -int_max - 1/2 to int_max + 1/2, exclusive)."""
    plan = prepare(fmt, np.dtype(dtype), Rounding())
    x = within_bound(plan, edge_inputs(fmt, dtype))
    if not fmt.is_float:
        x = np.concatenate([x, np.linspace(-7.49, 7.49, 999).astype(dtype), [-0.0, 0.4, -0.4]])
        x = x[np.abs(x) < min(fmt.int_max, -fmt.int_min) + 0.5].astype(dtype)
    assert (np.signbit(x) & (x == 0)).any() and (x < 0).any()
    want = np.empty_like(x)
    round_kernel(plan, x, want, None)
    got = np.empty_like(x)
    u = np.empty(x.size, plan.src.udtype)
    if fmt.is_float:
        qr.signed_float_rtn(plan, x, got, u)
    else:
        qr.int_rtn(x, got)
    assert_same(got, want)
    want_codes = np.empty(x.size, fmt.code_dtype)
    code_kernel(plan, x, want_codes, None)
    codes = np.empty(x.size, fmt.code_dtype)
    if fmt.is_float:
        if not qr.fast_codes_ok(plan):
            return
        pending = qr.signed_float_codes(plan, x, codes, u, np.empty_like(u))
        if pending is not None:
            codes[pending[0]] = candidate_codes(plan, pending[1], None)
    else:
        assert qr.int_codes(plan, x, codes, np.empty_like(x)) is None
    assert_same(codes, want_codes)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", [f for f in FAST if f.is_float], ids=lambda f: f.name)
def test_split_rounds_every_float32_input_like_the_kernel(fmt):
    """Veltkamp's split (signed_float_rtn's rounding) against the kernel on every float32
    input from the smallest normal to the bound, both signs (all 2**23 words of each binade)."""
    plan = prepare(fmt, np.dtype(np.float32), Rounding())
    k = qr._split_factor(plan)
    if k is None:
        assert fmt.name == "bfloat16"  # the product would overflow: the bits are rounded
        return
    for e in range((plan.minnorm >> 23), (plan.hi >> 23) + 1):
        b = (np.uint32(e) << np.uint32(23)) + np.arange(1 << 23, dtype=np.uint32)
        y = b[b <= plan.hi].view(np.float32)
        y = np.concatenate([y, -y])
        c = y * k
        want = np.empty_like(y)
        round_kernel(plan, y, want, None, no_over=True)
        np.testing.assert_array_equal((c - (c - y)).view(np.uint32), want.view(np.uint32))
