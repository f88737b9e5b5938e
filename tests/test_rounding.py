"""Rounding is exact: RTN against ml_dtypes (float32), an exact reference and gfloat (float64);
SR against its defining count rule by enumerating every value of the random bits."""

import ml_dtypes
import numpy as np
import pytest
from numpy.testing import assert_array_equal

import ecosim
from ecosim import formats
from ecosim.core._reference import round_reference
from ecosim.core.rounding import quantize
import oracles  # which oracle release has which defect (tests/oracles.py)
from rounding_probes import F32_SPECIALS, bits_of, probe_points  # shared with test_torch_core.py

ML_FLOATS = [n for n in formats.names() if formats.get(n).is_float]
SMALL_FORMATS = [n for n in formats.names() if formats.get(n).bits <= 16]


def ml_cast(x, fmt):
    """The ml_dtypes oracle: cast to the format and back."""
    return oracles.ml_cast(x, fmt.dtype)


# -- RTN: ml_dtypes is the oracle where its release is right (tests/oracles.py) ----------------

@pytest.mark.parametrize("name", oracles.ML_DTYPES_FLOATS)
def test_rtn_float32_equals_ml_dtypes_bit_for_bit(name):
    """Bit for bit, except that releases with the E8M0 window defect (ml_dtypes < 0.7) send
    float32 inputs in (2**-127, 1.5 * 2**-127) to 2**-126; ecosim rounds the exact value."""
    fmt = formats.get(name)
    x = np.concatenate([probe_points(fmt, np.float32), F32_SPECIALS])
    defects = oracles.active("ml_dtypes")
    bit = oracles.compare_with_ml_dtypes(x, fmt, defects)
    if name == "float8_e8m0fnu" and "e8m0_subnormal_window" in defects:
        assert bit > 100  # the probe points reach into the window
    else:
        assert bit == 0


@pytest.mark.parametrize("name", oracles.ML_DTYPES_FLOATS)
def test_rtn_float64_equals_ml_dtypes_where_the_release_is_right(name):
    """float64 inputs, with those float32 rounds onto a midpoint: bit for bit on a release
    without the double-rounding defect; on one with it, the cast equals the exact rounding of
    float32(x) (the model) and ecosim the exact rounding of x."""
    fmt = formats.get(name)
    x = probe_points(fmt, np.float64)
    mids = probe_points(fmt, np.float32).astype(np.float64)
    ulp32 = np.spacing(mids.astype(np.float32)).astype(np.float64)
    x = np.concatenate([x, mids + ulp32 / 4, mids - ulp32 / 4])
    defects = oracles.active("ml_dtypes")
    bit = oracles.compare_with_ml_dtypes(x, fmt, defects)
    assert (bit > 0) == ("float64_double_rounding" in defects)


def test_rtn_float32_equals_numpy_float16():
    fmt = formats.get("float16")
    x = probe_points(fmt, np.float32)
    x = x[np.abs(x) < 65520]  # numpy warns on overflow; ecosim's overflow is checked elsewhere
    assert_array_equal(bits_of(quantize(x, fmt, saturate=False)),
                       bits_of(x.astype(np.float16).astype(np.float32)))
    # NaN payloads: numpy keeps them, ecosim returns the canonical quiet NaN of the same sign.
    nan = quantize(F32_SPECIALS[:5], fmt, saturate=False)
    assert np.isnan(nan).all()
    assert_array_equal(np.signbit(nan), np.signbit(F32_SPECIALS[:5]))


def test_every_float32_in_a_binade_equals_ml_dtypes():
    """All 2**23 float32 values of [1, 2) and of one subnormal-range binade of E4M3."""
    fmt = formats.get("e4m3")
    for lo in (1.0, 2.0**-8):
        base = np.array(lo, np.float32).view(np.uint32)
        x = (base + np.arange(1 << 23, dtype=np.uint32)).view(np.float32)
        assert_array_equal(bits_of(quantize(x, fmt, saturate=False)), bits_of(ml_cast(x, fmt)))


# -- RTN, float64: correctly rounded; ml_dtypes double-rounds -----------------------------------

@pytest.mark.parametrize("name", SMALL_FORMATS)
def test_rtn_float64_equals_exact_reference(name):
    fmt = formats.get(name)
    x = probe_points(fmt, np.float64)
    # One float32 ulp either side of each midpoint: where casting through float32 goes wrong.
    mids = probe_points(fmt, np.float32).astype(np.float64)
    x = np.concatenate([x, mids + np.spacing(mids.astype(np.float32)).astype(np.float64) / 4,
                        mids - np.spacing(mids.astype(np.float32)).astype(np.float64) / 4])
    if not fmt.signed:
        x = np.abs(x[x != 0])
    for sat in (True, False) if fmt.is_float else (True,):
        ours = quantize(x, fmt, "rtn", saturate=sat)
        ref = round_reference(x, fmt, "rtn", saturate=sat)
        assert_array_equal(ours, ref)
        num = ~np.isnan(ref)  # NaN's sign is the format's business (checked against ml_dtypes)
        assert_array_equal(np.signbit(ours[num]), np.signbit(ref[num]))


GFLOAT = {  # gfloat.formats attribute of each format (gfloat is a test extra: imported lazily)
    "float8_e4m3fn": "format_info_ocp_e4m3",
    "float8_e5m2": "format_info_ocp_e5m2",
    "float6_e2m3fn": "format_info_ocp_e2m3",
    "float6_e3m2fn": "format_info_ocp_e3m2",
    "float4_e2m1fn": "format_info_ocp_e2m1",
    "bfloat16": "format_info_bfloat16",
    "float16": "format_info_binary16",
}


@pytest.mark.parametrize("name", list(GFLOAT))
def test_rtn_float64_equals_gfloat(name):
    gfloat = pytest.importorskip("gfloat", reason="gfloat (the test extra) is not installed")
    import gfloat.formats as gff
    fmt = formats.get(name)
    x = probe_points(fmt, np.float64)
    x = x[np.abs(x) <= fmt.max]  # gfloat raises on some overflows without saturation
    ours = quantize(x, fmt, "rtn")
    theirs = gfloat.round_ndarray(getattr(gff, GFLOAT[name]), x, sat=True)
    assert_array_equal(ours, theirs)


def test_casting_through_float32_double_rounds_but_ecosim_does_not():
    fmt = formats.get("e4m3")
    x = np.array([1.0625 + 2.0**-30])  # just above the midpoint of 1.0 and 1.125
    assert quantize(x, fmt)[0] == round_reference(x, fmt)[0] == 1.125  # the nearest value
    assert ml_cast(x.astype(np.float32), fmt)[0] == 1.0  # float64 -> float32 -> e4m3: wrong
    # ml_dtypes < 0.7 casts float64 that way; later releases round correctly.
    double = "float64_double_rounding" in oracles.active("ml_dtypes")
    assert ml_cast(x, fmt)[0] == (1.0 if double else 1.125)
    # How often: float64 values that float32 rounds onto an E4M3 midpoint (within half a float32
    # ulp). Those above a midpoint whose lower neighbour is even (half of them) go wrong.
    v = fmt.values()
    mids = ((v[1:] + v[:-1]) / 2)
    mids = mids[(mids > 0) & (mids < fmt.max)]
    rng = np.random.default_rng(1)
    off = rng.uniform(-0.5, 0.5, (mids.size, 64)) * np.spacing(mids.astype(np.float32))[:, None]
    x = (mids[:, None] + off).ravel()
    x = x[x != np.repeat(mids, 64)]
    via32 = ml_cast(x.astype(np.float32), fmt).astype(np.float64)
    wrong = via32 != round_reference(x, fmt, saturate=False)
    assert_array_equal(quantize(x, fmt, saturate=False), round_reference(x, fmt, saturate=False))
    # Expected 1/2 (the side of the midpoint is a fair coin); n ~ 8000 gives a standard error
    # of 0.5/sqrt(n) ~ 0.0056, so +-0.03 is over 5 standard errors.
    assert abs(wrong.mean() - 0.5) < 0.03, wrong.mean()


# -- SR: the count rule, exactly ---------------------------------------------------------------

@pytest.mark.parametrize("name", ["e4m3", "e5m2", "fp4", "e2m3", "bf16", "int4", "ternary",
                                  "e8m0"])
@pytest.mark.parametrize("nbits", [1, 3, 8])
def test_sr_rounds_up_for_exactly_floor_p_2n_of_all_random_words(name, nbits):
    fmt = formats.get(name)
    v = fmt.values()
    v = v[(v >= 0) & (v < fmt.max)] if fmt.signed else v[v < fmt.max]
    rng = np.random.default_rng(nbits)
    lo = rng.choice(v, 300)
    hi = fmt.values()[np.searchsorted(fmt.values(), lo) + 1]
    p = np.concatenate([rng.uniform(0, 1, 298), [0.0, 0.5]])
    x = lo + p * (hi - lo)  # float64: exact enough, the reference recomputes p exactly
    x = np.concatenate([x, -x]) if fmt.signed else x
    n = 1 << nbits
    words = np.arange(n, dtype=np.uint32)
    xs = np.repeat(x, n)
    rb = np.tile(words, x.size)
    out = quantize(xs, fmt, "sr", rbits=rb, nbits=nbits).reshape(x.size, n)
    a = np.abs(x)
    lo2, hi2 = np.concatenate([lo, lo])[: x.size], np.concatenate([hi, hi])[: x.size]
    ups = (np.abs(out) == hi2[:, None]).sum(axis=1)
    assert ((np.abs(out) == hi2[:, None]) | (np.abs(out) == lo2[:, None])).all()
    expected = np.floor(np.ldexp((a - lo2) / (hi2 - lo2), nbits))
    assert_array_equal(ups, expected)
    # and element for element the same as the reference
    assert_array_equal(out.ravel(), round_reference(xs, fmt, "sr", rbits=rb, nbits=nbits))


@pytest.mark.parametrize("name", SMALL_FORMATS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sr_with_32_bits_equals_reference(name, dtype):
    fmt = formats.get(name)
    x = probe_points(fmt, dtype)
    if not fmt.signed:
        x = np.abs(x[x != 0])
    rb = ecosim.core.rng.random_bits(3, 0, x.size)
    ours = quantize(x, fmt, "sr", rbits=rb)
    assert_array_equal(ours, round_reference(x.astype(np.float64), fmt, "sr", rbits=rb))


def test_sr_is_unbiased_exactly_on_a_dyadic_grid():
    # p = 3/8 with nbits = 3: exactly 3 of the 8 words round up, so the mean is exact.
    x = np.full(8, 1.0 + 3 / 8 * 0.125)
    out = quantize(x, "e4m3", "sr", rbits=np.arange(8, dtype=np.uint8), nbits=3)
    assert out.mean() == x[0]


def test_sr_key_and_counter():
    x = np.random.default_rng(0).standard_normal(200_000).astype(np.float32)
    a = quantize(x, "e4m3", "sr", key=5)
    assert_array_equal(a, quantize(x, "e4m3", "sr", key=5))
    assert_array_equal(a, quantize(x, "e4m3", "sr", key=(5, 0)))
    assert (a != quantize(x, "e4m3", "sr", key=6)).any()
    # A slice with the matching counter reproduces the same draws (chunking/threads invisible).
    assert_array_equal(a[70_001:], quantize(x[70_001:], "e4m3", "sr", key=(5, 70_001)))
    rb = ecosim.core.rng.random_bits(5, 0, x.size)
    assert_array_equal(a, quantize(x, "e4m3", "sr", rbits=rb))
    assert_array_equal(a.reshape(400, 500),
                       quantize(x.reshape(400, 500), "e4m3", "sr", key=5))


# -- saturation, special values, other input dtypes ---------------------------------------------

def test_saturation_default():
    x = np.array([1e6, -1e6, np.inf, -np.inf, np.nan, 460.0, -0.0], np.float32)
    out = quantize(x, "e4m3")
    assert_array_equal(out[:4], [448, -448, 448, -448])
    assert np.isnan(out[4])
    assert out[5] == 448 and np.signbit(out[6])
    assert_array_equal(quantize(x[:4], "int4"), [7, -8, 7, -8])
    assert_array_equal(quantize(x[:4], "fp4", saturate=False), [6, -6, 6, -6])
    assert_array_equal(quantize(x[:2], "e5m2", saturate=False), [np.inf, -np.inf])


def test_fnuz_has_no_negative_zero_and_e8m0_no_zero():
    out = quantize(np.array([-1e-30, -0.0], np.float32), "float8_e4m3fnuz")
    assert not np.signbit(out).any()
    e8 = quantize(np.array([0.0, -1.0, 1e-40, 3.0], np.float64), "e8m0", saturate=False)
    assert np.isnan(e8[:2]).all() and e8[2] == 2.0**-127 and e8[3] == 4.0  # 3 is a tie: away


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_half_inputs_are_rounded_exactly_and_keep_their_dtype(dtype):
    x = probe_points(formats.get("e4m3"), np.float32).astype(dtype)
    out = quantize(x, "e4m3")
    assert out.dtype == dtype
    assert_array_equal(out.astype(np.float64), quantize(x.astype(np.float64), "e4m3"))


def test_format_wider_than_the_input_dtype_is_refused():
    with pytest.raises(ValueError, match="not all representable"):
        quantize(np.ones(3, np.float16), "bf16")
    with pytest.raises(ValueError, match="float64"):
        quantize(np.ones(3, np.float32), formats.custom(10, 5))


# -- integer grids -----------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["int8", "int4", "int2", "ternary"])
def test_integer_rtn_is_rint_and_clip(name):
    fmt = formats.get(name)
    x = np.concatenate([np.arange(-300, 300) / 2, np.arange(-300, 300) / 2 + 1e-9,
                        np.arange(-300, 300) / 2 - 1e-9])
    expected = np.clip(np.rint(x), fmt.int_min, fmt.int_max) + 0.0
    assert_array_equal(quantize(x, fmt), expected)
    assert_array_equal(quantize(x.astype(np.float32), fmt),
                       np.clip(np.rint(x.astype(np.float32)), fmt.int_min, fmt.int_max) + 0)
    assert not np.signbit(quantize(np.array([-0.2, -0.0]), fmt)).any()


def test_integer_formats_need_saturation():
    with pytest.raises(ValueError, match="saturate=True"):
        quantize(np.ones(2), "int8", saturate=False)


# -- custom formats ----------------------------------------------------------------------------

def test_custom_e8m23_from_float64_is_the_float32_cast():
    x = np.random.default_rng(2).standard_normal(100_000) * np.exp(
        np.random.default_rng(3).uniform(-80, 80, 100_000))
    assert_array_equal(quantize(x, formats.custom(8, 23), saturate=False),
                       x.astype(np.float32).astype(np.float64))


def test_custom_e8m7_is_bfloat16():
    x = probe_points(formats.get("bf16"), np.float32)
    assert_array_equal(bits_of(quantize(x, formats.custom(8, 7), saturate=False)),
                       bits_of(quantize(x, "bf16", saturate=False)))


@pytest.mark.parametrize("m", range(1, 24))
def test_mantissa_sweep_matches_reference_or_grid(m):
    fmt = formats.custom(8, m)
    x = np.random.default_rng(m).standard_normal(50_000) * 10.0 ** np.random.default_rng(
        m + 100).uniform(-30, 30, 50_000)
    out = quantize(x, fmt, "rtn")
    # On the grid: at most m significant bits after the leading one.
    mant, _ = np.frexp(out)
    assert_array_equal(np.ldexp(mant, m + 1), np.rint(np.ldexp(mant, m + 1)))
    # Error at most half a step: |q - x| <= 2**(e - m - 1) for x in binade e.
    e = np.floor(np.log2(np.abs(x)))
    assert (np.abs(out - x) <= np.ldexp(1.0, (e - m - 1).astype(int)) * (1 + 1e-12)).all()
    if fmt.bits <= 16:
        assert_array_equal(out, round_reference(x, fmt))


def test_flush_to_zero_custom_format():
    fmt = formats.custom(4, 3, subnormals=False)
    x = np.array([0.4, 0.6, 0.5, -0.6]) * fmt.smallest_normal
    assert_array_equal(quantize(x, fmt), np.array([0.0, 1.0, 0.0, -1.0]) * fmt.smallest_normal)
    assert_array_equal(quantize(x, fmt), round_reference(x, fmt))


# -- bad input ---------------------------------------------------------------------------------

@pytest.mark.parametrize("bad, err", [
    (dict(x=np.arange(4)), TypeError),
    (dict(x=np.array(["a"], dtype=object)), TypeError),
    (dict(mode="nearest"), ValueError),
    (dict(mode="sr"), ValueError),  # no randomness given
    (dict(mode="sr", key=1, rbits=np.zeros(4, np.uint32)), ValueError),
    (dict(mode="sr", rbits=np.zeros(3, np.uint32)), ValueError),
    (dict(mode="sr", rbits=np.zeros(4, np.float32)), TypeError),
    (dict(mode="sr", rbits=-np.ones(4, np.int64)), ValueError),
    (dict(mode="sr", key=1, nbits=0), ValueError),
    (dict(mode="sr", key=1, nbits=33), ValueError),
    (dict(mode="sr", key=-1), ValueError),
    (dict(mode="sr", key=1.5), TypeError),
    (dict(key=1), ValueError),  # key with rtn
    (dict(fmt="e9m9"), ValueError),
])
def test_bad_input_is_a_clear_error(bad, err):
    args = dict(x=np.ones(4, np.float32), fmt="e4m3", mode="rtn")
    args.update(bad)
    x, fmt, mode = args.pop("x"), args.pop("fmt"), args.pop("mode")
    with pytest.raises(err):
        quantize(x, fmt, mode, **args)


def test_input_is_not_modified():
    x = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    rb = ecosim.core.rng.random_bits(1, 0, 1000)
    x0, rb0 = x.copy(), rb.copy()
    quantize(x, "e4m3", "sr", rbits=rb)
    quantize(x, "int4", "rtn")
    assert_array_equal(x, x0)
    assert_array_equal(rb, rb0)
