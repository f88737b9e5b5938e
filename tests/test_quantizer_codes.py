"""Quantizer.encode/decode from the kernel's bits and decode tables, and the fused chunked pass,
against a direct composition of the public pieces (scales, ``quantize``, ``formats.encode``/
``encode_bits``/``pack``, ``decode_bits``) on every format, every code and the edge values."""

import ml_dtypes
import numpy as np
import pytest

from ecosim import Quantizer, formats, quantize
from ecosim.core import rounding, rounding_codes
from ecosim.core.formats import decode_bits, encode_bits, pack, unpack
from ecosim.core.quantizer import _dequantize

# Every catalogued format, and custom ones that take the other branches of the code kernel:
# flush to zero, a layout equal to float32's, the fn and fnuz conventions, a bias whose
# subnormals lie below float32's normals (the encode_bits fallback), a code of 16+ bits.
CUSTOM = [formats.custom(4, 3, subnormals=False), formats.custom(8, 3),
          formats.custom(3, 2, nan="fn"), formats.custom(5, 2, nan="fnuz"),
          formats.custom(4, 3, bias=130), formats.custom(8, 12)]
FORMATS = [formats.get(n) for n in formats.names()] + CUSTOM


def ref_call(q, x, key=None, rbits=None, scales=None):
    """``(blocked c, s)``: what Quantizer computed by whole-array passes before the fused one."""
    x = np.asarray(x)
    xb, axes = q._blocked(x)
    s = q._scales(xb, axes) if scales is None else np.asarray(scales).astype(q._scales_dtype(xb))
    y = xb.astype(s.dtype, copy=False) / s
    rb = None if rbits is None else np.asarray(rbits).reshape(xb.shape)
    if q.mode == "sr":
        c = quantize(y, q.fmt, "sr", rbits=rb, key=key, nbits=q.nbits, saturate=q.saturate)
    else:
        c = quantize(y, q.fmt, "rtn", saturate=q.saturate)
    return c, s


def ref_values(q, x, **kw):
    c, s = ref_call(q, x, **kw)
    return _dequantize(c, s, np.asarray(x).dtype).reshape(np.shape(x))


def ref_encode(q, x, **kw):
    """``(codes, scales, packed_bits)`` by formats.encode / encode_bits + pack."""
    c, s = ref_call(q, x, **kw)
    fmt = q.fmt
    if fmt.bits <= 4:
        packed = 4 if fmt.bits > 2 else 2
        codes = pack(encode_bits(c, fmt), packed)
    else:
        packed = 0
        codes = formats.encode(c, fmt)
    if q.scale == "absmax_pow2":
        s = s.astype(ml_dtypes.float8_e8m0fnu)
    return codes, s, packed


def ref_decode(q, enc):
    """decode_bits of the codes (NaN codes: the positive quiet NaN) times the scales."""
    fmt = q.fmt
    n = int(np.prod(enc.shape, dtype=np.int64))
    if enc.packed_bits:
        raw = unpack(enc.codes, enc.packed_bits, n)
    else:
        raw = np.asarray(enc.codes)
        raw = raw.view(fmt.code_dtype) if raw.dtype == fmt.dtype else raw
    vals = decode_bits(raw, fmt)
    dtype = np.dtype(enc.dtype)
    work = dtype if dtype in (np.float32, np.float64) else np.dtype(np.float32)
    s = np.asarray(enc.scales).astype(work)
    c = vals.reshape(q._blocked(np.empty(enc.shape, np.bool_))[0].shape).astype(work)
    return _dequantize(c, s, dtype).reshape(enc.shape)


def bits(a):
    a = np.asarray(a)
    if a.dtype.kind in "ui":
        return a
    return a.view(np.dtype(f"u{a.dtype.itemsize}"))


def assert_same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
    np.testing.assert_array_equal(bits(a), bits(b))


def assert_encoded(q, x, **kw):
    enc = q.encode(x, **kw)
    codes, s, packed = ref_encode(q, x, **kw)
    assert_same(enc.codes, codes)
    assert_same(enc.scales, s)
    assert enc.packed_bits == packed and enc.shape == np.shape(x)
    assert enc.dtype == np.asarray(x).dtype
    out = q.decode(enc)
    assert_same(out, ref_decode(q, enc))
    # decode(encode(x)) == q(x) bit for bit; a NaN (only from a fixed or given scale) decodes
    # as the positive quiet NaN whatever its sign.
    val = q(x, **kw)
    nan = np.isnan(val)
    assert_same(out[~nan], val[~nan])
    assert_same(bits(out[nan]), np.full(int(nan.sum()), bits(np.array(np.nan, out.dtype))))
    return enc


def edge_inputs(fmt, dtype):
    """Every value of ``fmt``, midpoints and their neighbours, zeros, inf, NaN, overflow,
    the working dtype's subnormals and random magnitudes across the format's range."""
    with np.errstate(over="ignore"):
        v = fmt.values().astype(dtype) if fmt.bits <= 16 else np.array([1.0, 1.5], dtype)
        mids = (v[:-1] / 2 + v[1:] / 2).astype(dtype)
        info = np.finfo(dtype)
        rng = np.random.default_rng(fmt.bits)
        span = np.exp2(rng.uniform(np.log2(fmt.smallest_subnormal if fmt.has_zero
                                           and fmt.is_float else 0.25) - 2,
                                   np.log2(fmt.max) + 1, 2000)).astype(dtype)
        parts = [v, mids, np.nextafter(mids, dtype(np.inf)), np.nextafter(mids, dtype(-np.inf)),
                 span, np.array([0.0, np.inf, np.nan, info.tiny, info.tiny / 4, info.max,
                                 fmt.max * 1.1, fmt.max * 2], dtype)]
    x = np.concatenate(parts)
    x = np.concatenate([x, -x])
    x[::7] = np.copysign(np.nan, x[::7])  # NaN of both signs
    return x


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("saturate", [True, False])
def test_codes_of_edge_values_equal_formats_encode(fmt, dtype, saturate):
    if not fmt.is_float and not saturate:
        return
    x = edge_inputs(fmt, dtype)
    finite = x[np.isfinite(x)]
    plan = rounding.prepare(fmt, np.dtype(dtype), rounding.Rounding(saturate=saturate))
    codes = np.empty(finite.size, fmt.code_dtype)
    rounding_codes.code_kernel(plan, finite, codes, None)
    np.testing.assert_array_equal(codes, encode_bits(quantize(finite, fmt, saturate=saturate),
                                                     fmt))
    q = Quantizer(fmt, scale=1.0, saturate=saturate)  # a fixed scale of 1: y = x
    nan_ok = fmt.is_float and (fmt.nan != "none" or not saturate)
    if nan_ok:
        assert_encoded(q, x)
    else:
        with pytest.raises(ValueError, match="grid|NaN"):
            q.encode(x)
        assert_encoded(q, finite)


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f.bits <= 16], ids=lambda f: f.name)
def test_every_code_decodes_and_encodes_back(fmt):
    """All 2**bits codes (all 256 for FP8): the table gives decode_bits' value, and every
    value encodes back to its code (its first code where several decode to it: flushed
    subnormals; NaN codes are checked by the edge-value test)."""
    codes = np.arange(1 << fmt.bits, dtype=np.uint64).astype(fmt.code_dtype)
    vals = decode_bits(codes, fmt)
    q = Quantizer(fmt, scale=1.0)
    for dt in (np.float32, np.float64):
        if fmt.bits <= 4:
            enc_codes = pack(codes, 4 if fmt.bits > 2 else 2)
            packed = 4 if fmt.bits > 2 else 2
        else:
            enc_codes = formats.encode(vals, fmt) if fmt.dtype is not None else codes
            packed = 0
        keep_inf = Quantizer(fmt, scale=1.0, saturate=False) if fmt.is_float else None
        enc = keep_inf.encode(vals.astype(dt)) if fmt.is_float else None
        from ecosim.core.quantizer import Encoded

        stored = Encoded(codes=enc_codes, scales=np.ones(vals.ndim * (1,), dt), shape=vals.shape,
                         dtype=np.dtype(dt), packed_bits=packed)
        assert_same(q.decode(stored), ref_decode(q, stored))
        out = q.decode(stored)
        same = (out == vals) | (np.isnan(out) & np.isnan(vals))
        assert same.all()
        if enc is not None and fmt.bits <= 16:
            ok = ~np.isnan(vals)
            first = np.unique(vals.view(np.uint64), return_index=True)[1]
            ok &= np.isin(np.arange(vals.size), first)  # a value's first code (ftz zeros)
            raw = unpack(enc.codes, packed, vals.size) if packed else bits(enc.codes)
            np.testing.assert_array_equal(raw[ok], codes[ok])


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2", "e4m3fnuz", "e3m4", "fp6", "e3m2", "fp4",
                                 "int8", "int4", "int2", "ternary", "bf16", "fp16", "e8m0"])
@pytest.mark.parametrize("gran", ["tensor", "row", "column", 16])
@pytest.mark.parametrize("mode", ["rtn", "sr"])
def test_fused_pass_equals_whole_array_passes(fmt, gran, mode):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((40, 48)).astype(np.float32) * np.exp2(rng.integers(-20, 20,
                                                                               (40, 1)))
    x[3] = 0.0  # a block of zeros
    x[5, :4] = [-0.0, 1e-42, -1e-40, 3e-39]  # float32 subnormals and -0
    scales = ["absmax", "absmax_pow2", "absmean"] if fmt != "e8m0" else ["absmax"]
    for scale in scales:
        q = Quantizer(fmt, mode=mode, granularity=gran, scale=scale)
        kw = dict(key=(3, 11)) if mode == "sr" else {}
        assert_same(q(x, **kw), ref_values(q, x, **kw))
        if fmt != "e8m0":  # an unsigned grid stores negatives as NaN codes: compare values only
            assert_encoded(q, x, **kw)
        if mode == "sr":
            rb = rng.integers(0, 2**32, x.shape, dtype=np.uint32)
            assert_same(q(x, rbits=rb), ref_values(q, x, rbits=rb))
            assert_encoded(Quantizer(fmt, mode="sr", granularity=gran, scale=scale, nbits=5),
                           x, rbits=rb)


@pytest.mark.parametrize("shape, gran", [((3, 70000), "row"), ((70001,), "tensor"),
                                         ((5, 7, 9), "row"), ((2, 3, 12), 4), ((9, 5000), 5000),
                                         ((0, 4), "row"), ((), "tensor"), ((33000, 3), "column"),
                                         ((1, 7), "column")])
@pytest.mark.parametrize("fmt", ["e4m3", "fp4", "ternary"])
def test_chunking_of_shapes(shape, gran, fmt):
    """Rows longer than a chunk, chunks of many short rows, odd sizes for packing, empty and
    0-d arrays, float64 and float16 input."""
    rng = np.random.default_rng(1)
    for dt in (np.float32, np.float64, np.float16):
        x = rng.standard_normal(shape).astype(dt)
        for mode in ("rtn", "sr"):
            q = Quantizer(fmt, mode=mode, granularity=gran)
            kw = dict(key=5) if mode == "sr" else {}
            assert_same(q(x, **kw), ref_values(q, x, **kw))
            assert_encoded(q, x, **kw)


def test_given_and_fixed_scales_and_errors():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((64, 96)).astype(np.float32)
    q = Quantizer("e4m3", granularity="row")
    s = q.scales(x * 0.5)
    assert_same(q(x, scales=s), ref_values(q, x, scales=s))
    assert_encoded(q, x, scales=s)
    bad = x.copy()
    bad[40, 3] = np.inf
    bad[2, 2] = np.nan
    with pytest.raises(ValueError, match="input has 2 non-finite values"):
        q(bad)
    with pytest.raises(ValueError, match="input has 2 non-finite values"):
        q.encode(bad)
    with pytest.raises(ValueError, match="has no NaN code"):
        Quantizer("int4", scale=1.0).encode(np.array([1.0, np.nan], np.float32))
    with pytest.raises(ValueError, match="not on the float4_e2m1fn grid"):
        Quantizer("fp4", scale=1.0).encode(np.array([1.0, np.nan], np.float32))


def test_the_check_can_fail():
    """assert_same tells a one-ulp difference and a NaN of the other sign apart."""
    a = np.array([1.0, np.nan], np.float32)
    with pytest.raises(AssertionError):
        assert_same(a, np.array([np.nextafter(np.float32(1), np.float32(2)), np.nan], np.float32))
    with pytest.raises(AssertionError):
        assert_same(a, np.array([1.0, -np.nan], np.float32))
