"""The torch mirrors of the core (ecosim.torch) equal NumPy bit for bit: random bits, quantize
(RTN and SR, every format, float32/float64/half inputs, specials), Quantizer (every granularity
and scale rule, encode storage, decode). NumPy is the reference; it is tested on its own in
test_rng.py, test_rounding.py and test_quantizer.py."""

import re

import ml_dtypes
import numpy as np
import pytest
from numpy.testing import assert_array_equal

torch = pytest.importorskip("torch")

import ecosim  # noqa: E402
import ecosim.torch as et  # noqa: E402
from ecosim import formats  # noqa: E402
from ecosim.core.checks import NonFiniteError  # noqa: E402
from rounding_probes import F32_SPECIALS, F64_SPECIALS, probe_points  # noqa: E402
import oracles  # noqa: E402  (which oracle release has which defect)

pytestmark = pytest.mark.torch

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
# Half-precision NaN payloads, infinities, signed zeros, subnormals, max.
F16_SPECIALS = np.array([0x7E00, 0xFE00, 0x7C01, 0xFC01, 0x7FFF, 0x7D00, 0x7C00, 0xFC00, 0,
                         0x8000, 1, 0x8001, 0x3C00, 0x7BFF], np.uint16).view(np.float16)
BF16_SPECIALS = np.array([0x7FC0, 0xFFC0, 0x7F81, 0xFF81, 0x7FFF, 0x7FA0, 0x7F80, 0xFF80, 0,
                          0x8000, 1, 0x8001, 0x3F80, 0x7F7F],
                         np.uint16).view(ml_dtypes.bfloat16)


def to_torch(a: np.ndarray, device="cpu") -> torch.Tensor:
    a = np.ascontiguousarray(a)
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16).to(device)
    return torch.from_numpy(a.copy()).to(device)


def raw_bits(a) -> np.ndarray:
    """Unsigned bit patterns of a NumPy array or a torch tensor (any 1/2/4/8-byte dtype)."""
    if isinstance(a, torch.Tensor):
        a = a.cpu()
        a = a.view({1: torch.uint8, 2: torch.int16, 4: torch.int32,
                    8: torch.int64}[a.element_size()]).numpy()
    a = np.ascontiguousarray(a)
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def assert_same_bits(ours, ref) -> int:
    """Bit-for-bit equality (shape included); returns the number of elements compared."""
    b, r = raw_bits(ours), raw_bits(ref)
    assert b.shape == r.shape
    assert_array_equal(b, r)
    return r.size


# -- random bits -------------------------------------------------------------------------------

@pytest.mark.parametrize("key, counter, size", [
    (0, 0, 5), (12345, 2**32 - 2, 70_000), (2**64 - 1, 2**50, 100),
    (99, 2**32 - 100, 300),  # crosses the high counter word
    (5, 2**64 - 3, 10),  # wraps the 64-bit counter
    (2**63 + 12345, 2**40, (3, 100_000)),  # large key, a shape, more than one CPU chunk
    (7, 2**31 - 50, 300),  # the low counter word crosses 2**31 (int32 words on the CPU)
])
@pytest.mark.parametrize("device", DEVICES)
def test_random_bits_equal_numpy(key, counter, size, device):
    got = et.random_bits(key, counter, size, device=device)
    ref = ecosim.core.rng.random_bits(key, counter, size)
    assert got.dtype == torch.int64 and tuple(got.shape) == ref.shape
    assert int(got.min()) >= 0 and int(got.max()) < 2**32
    assert_array_equal(got.cpu().numpy(), ref.astype(np.int64))


def test_random_bits_pinned_and_sliceable():
    a = et.random_bits(0, 0, 10)
    assert a[:2].tolist() == [3202715171, 2082974666]  # the pinned stream of test_rng.py
    assert_array_equal(et.random_bits(0, 4, 6), a[4:])
    assert et.fold_in is ecosim.core.rng.fold_in and et.split_key is ecosim.core.rng.split_key


# -- quantize: parity on the probe sets of test_rounding.py ---------------------------------------

def _probe(fmt, dtype):
    x = probe_points(fmt, dtype)
    return np.concatenate([x, F32_SPECIALS if dtype == np.float32 else F64_SPECIALS])


@pytest.mark.parametrize("name", formats.names())
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_quantize_equals_numpy_on_every_format(name, dtype):
    """Every value, midpoint, +-1 ulp, past max, subnormal-range and wide normals, NaN/inf/-0
    bit patterns; RTN and SR (key with a counter crossing 2**32); saturating or not."""
    fmt = formats.get(name)
    x = _probe(fmt, dtype)
    xt = to_torch(x)
    n = 0
    for sat in (True, False) if fmt.is_float else (True,):
        n += assert_same_bits(et.quantize(xt, fmt, "rtn", saturate=sat),
                              ecosim.quantize(x, fmt, "rtn", saturate=sat))
        key = (3, 2**32 - x.size // 2)
        n += assert_same_bits(et.quantize(xt, fmt, "sr", key=key, saturate=sat),
                              ecosim.quantize(x, fmt, "sr", key=key, saturate=sat))
    assert n >= 4 * x.size if fmt.is_float else n == 2 * x.size


@pytest.mark.parametrize("dtype, specials", [(np.float16, F16_SPECIALS),
                                             (ml_dtypes.bfloat16, BF16_SPECIALS)])
@pytest.mark.parametrize("name", ["e4m3", "e5m2", "float8_e4m3fnuz", "fp4", "e2m3", "e8m0",
                                  "float16", "int4", "ternary"])
def test_half_inputs_and_outputs_equal_numpy(dtype, specials, name):
    """Half inputs widen and narrow as NumPy/ml_dtypes do, NaN payloads and signs included."""
    fmt = formats.get(name)
    with np.errstate(over="ignore"):
        x = np.concatenate([probe_points(fmt, np.float32).astype(dtype), specials])
    for mode, kw in (("rtn", {}), ("sr", {"key": 7})):
        for sat in (True, False) if fmt.is_float else (True,):
            try:
                ref = ecosim.quantize(x, fmt, mode, saturate=sat, **kw)
            except ValueError:  # bf16 grid in float16
                with pytest.raises(ValueError):
                    et.quantize(to_torch(x), fmt, mode, saturate=sat, **kw)
                continue
            got = et.quantize(to_torch(x), fmt, mode, saturate=sat, **kw)
            assert got.dtype == to_torch(x).dtype
            assert_same_bits(got, ref)


CUSTOM = [formats.custom(8, m) for m in (1, 2, 7, 10, 23)] + [
    formats.custom(4, 3, subnormals=False), formats.custom(5, 2, nan="fn"),
    formats.custom(3, 4, nan="fnuz", bias=5), formats.custom(8, 0, nan="fn"),
    formats.custom(2, 3, bias=128, nan="none"),  # lives in float32's subnormals
    formats.get("e8m0").replace(ties="even", name="e8m0_even"),
    formats.custom(10, 5), formats.custom(11, 52), formats.custom(11, 20, subnormals=False),
]


@pytest.mark.parametrize("fmt", CUSTOM, ids=lambda f: f.name)
def test_custom_formats_equal_numpy(fmt):
    """Mantissa sweeps, flush-to-zero, odd biases, float64-only formats; several nbits."""
    r = np.random.default_rng(5)
    for dtype in (np.float32, np.float64):
        with np.errstate(over="ignore"):
            x = (r.standard_normal(20_000) * np.exp(r.uniform(-90, 90, 20_000))).astype(dtype)
        x = np.concatenate([x, F32_SPECIALS.astype(dtype) if dtype == np.float32
                            else F64_SPECIALS])
        for mode, nbits in (("rtn", 32), ("sr", 1), ("sr", 9), ("sr", 32)):
            kw = {"key": (11, 2**64 - 5000), "nbits": nbits} if mode == "sr" else {}
            for sat in (True, False):
                try:
                    ref = ecosim.quantize(x, fmt, mode, saturate=sat, **kw)
                except ValueError:  # a format wider than float32
                    with pytest.raises(ValueError, match="representable"):
                        et.quantize(to_torch(x), fmt, mode, saturate=sat, **kw)
                    continue
                assert_same_bits(et.quantize(to_torch(x), fmt, mode, saturate=sat, **kw), ref)


@pytest.mark.parametrize("np_dtype, torch_dtype", [
    (np.uint8, torch.uint8), (np.uint32, torch.uint32), (np.uint64, torch.uint64),
    (np.int64, torch.int64), (np.int32, torch.int32)])
@pytest.mark.parametrize("nbits", [1, 3, 8, 23, 32])
def test_sr_with_given_bits_equals_numpy(np_dtype, torch_dtype, nbits):
    r = np.random.default_rng(nbits)
    x = (r.standard_normal((60, 70)) * 3).astype(np.float32)
    rb = r.integers(0, np.iinfo(np_dtype).max, x.shape, dtype=np_dtype, endpoint=True)
    for name in ("e4m3", "int4", "bf16"):
        ref = ecosim.quantize(x, name, "sr", rbits=rb, nbits=nbits)
        assert_same_bits(et.quantize(to_torch(x), name, "sr", nbits=nbits,
                                     rbits=torch.from_numpy(rb).to(torch_dtype)), ref)
        assert_same_bits(et.quantize(to_torch(x), name, "sr", rbits=rb, nbits=nbits), ref)


@pytest.mark.parametrize("device", DEVICES)
def test_key_is_the_same_as_its_bits_and_chunks_are_invisible(device):
    # More than one CPU chunk (2**18); the second holds NaN, inf and overflow (the general
    # path) while the first has none (the fast one).
    x = np.random.default_rng(0).standard_normal(300_003).astype(np.float32)
    x[[280_000, 280_001, 290_000]] = np.nan, -np.inf, -1e6
    x = torch.from_numpy(x).to(device)
    a = et.quantize(x, "e4m3", "sr", key=(5, 2**32 - 40_000))
    rb = et.random_bits(5, 2**32 - 40_000, x.numel(), device=device)
    assert_same_bits(a, et.quantize(x, "e4m3", "sr", rbits=rb))
    assert_same_bits(a[70_001:], et.quantize(x[70_001:], "e4m3", "sr",
                                             key=(5, 2**32 - 40_000 + 70_001)))
    assert_same_bits(a, ecosim.quantize(x.cpu().numpy(), "e4m3", "sr",
                                        key=(5, 2**32 - 40_000)))
    for mode, key in (("rtn", None), ("sr", (6, 2**31 - 100_000))):  # crosses 2**31
        assert_same_bits(et.quantize(x, "e4m3", mode, key=key),
                         ecosim.quantize(x.cpu().numpy(), "e4m3", mode, key=key))


def test_layouts_shapes_and_python_floats():
    x = np.random.default_rng(1).standard_normal((40, 30)).astype(np.float32)
    xt = to_torch(x).T  # not contiguous: C order of the transposed view, as NumPy's x.T
    assert_same_bits(et.quantize(xt, "int4", "sr", key=3), ecosim.quantize(x.T, "int4", "sr",
                                                                            key=3))
    assert_same_bits(et.quantize(torch.tensor(1.3), "e4m3", "sr", key=3),
                     ecosim.quantize(np.float32(1.3), "e4m3", "sr", key=3))
    assert et.quantize(torch.zeros(0, 3), "e4m3").shape == (0, 3)
    out = et.quantize(1.0625, "e4m3")  # Python floats are float64, as in NumPy
    assert out.dtype == torch.float64 and float(out) == 1.0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_equals_cpu():
    x = torch.from_numpy(_probe(formats.get("e4m3"), np.float32))
    for name in ("e4m3", "e5m2", "fp4", "e8m0", "bf16", "int4"):
        for kw in ({}, {"mode": "sr", "key": 9}):
            assert torch.equal(raw_bits_t(et.quantize(x.cuda(), name, **kw).cpu()),
                               raw_bits_t(et.quantize(x, name, **kw)))


def raw_bits_t(t):
    return t.view(torch.int32)


@pytest.mark.parametrize("bad, err", [
    (dict(x=torch.arange(4)), TypeError),
    (dict(x=np.array(["a"], dtype=object)), TypeError),
    (dict(mode="nearest"), ValueError),
    (dict(mode="sr"), ValueError),  # no randomness given
    (dict(mode="sr", key=1, rbits=torch.zeros(4, dtype=torch.int64)), ValueError),
    (dict(mode="sr", rbits=torch.zeros(3, dtype=torch.int64)), ValueError),
    (dict(mode="sr", rbits=torch.zeros(4)), TypeError),
    (dict(mode="sr", rbits=np.zeros(4, np.float32)), TypeError),
    (dict(mode="sr", rbits=-torch.ones(4, dtype=torch.int64)), ValueError),
    (dict(mode="sr", key=1, nbits=0), ValueError),
    (dict(mode="sr", key=1, nbits=33), ValueError),
    (dict(mode="sr", key=-1), ValueError),
    (dict(mode="sr", key=1.5), TypeError),
    (dict(mode="sr", key=(1, 2, 3)), ValueError),
    (dict(key=1), ValueError),  # key with rtn
    (dict(fmt="e9m9"), ValueError),
    (dict(fmt="int8", saturate=False), ValueError),
    (dict(x=torch.ones(4, dtype=torch.float16), fmt="bf16"), ValueError),
    (dict(fmt=formats.custom(10, 5)), ValueError),  # needs float64
])
def test_bad_input_is_a_clear_error(bad, err):
    args = dict(x=torch.ones(4), fmt="e4m3", mode="rtn")
    args.update(bad)
    x, fmt, mode = args.pop("x"), args.pop("fmt"), args.pop("mode")
    with pytest.raises(err):
        et.quantize(x, fmt, mode, **args)


def test_input_and_bits_are_not_modified():
    x = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    rb = et.random_bits(1, 0, 1000)
    x0, rb0 = x.clone(), rb.clone()
    et.quantize(x, "e4m3", "sr", rbits=rb)
    et.quantize(x, "int4", "rtn")
    et.quantize(x, "e4m3", "sr", key=2)
    assert torch.equal(x, x0) and torch.equal(rb, rb0)


def test_torch_float8_casts_are_not_the_rounding_but_exact_on_the_grid():
    """torch's own casts are not ecosim's rounding (tests/oracles.py: torch 2.13's E4M3 cast
    saturates overflow where ml_dtypes and ecosim give NaN, and its float64 casts go through
    float32), so ecosim never rounds with them; casting values already on the grid is exact."""
    x = torch.tensor([480.0, 1e9, float("inf")])  # 480 rounds up to the NaN code
    cast = x.to(torch.float8_e4m3fn).float()
    if "torch_e4m3fn_saturates" in oracles.active("torch"):
        assert torch.equal(cast, torch.full((3,), 448.0))
    else:
        assert torch.isnan(cast).all()
    assert torch.isnan(et.quantize(x, "e4m3", saturate=False)).all()
    v = to_torch(formats.get("e4m3").values().astype(np.float32))
    q = et.quantize(torch.cat([v, -v]), "e4m3")
    enc = et.Quantizer("e4m3", scale=1.0).encode(q)
    assert torch.equal(q.to(torch.float8_e4m3fn).view(torch.uint8),
                       enc.codes.view(torch.uint8))


# -- Quantizer ---------------------------------------------------------------------------------

RNG = np.random.default_rng(0)
W = RNG.standard_normal((64, 96)).astype(np.float32)
W64 = (RNG.standard_normal((6, 7, 96)) * np.exp(RNG.uniform(-8, 8, (6, 7, 96))))
INPUTS = {"f32": W, "f64": W64, "f16": W.astype(np.float16),
          "bf16": W[:32].astype(ml_dtypes.bfloat16)}
SCALES = [("absmax", "floor"), ("absmax_pow2", "floor"), ("absmax_pow2", "ceil"),
          ("absmax_pow2", "even"), ("absmean", "floor"), (2.0**-3, "floor")]


def _check_quantizer(fmt, gran, scale, pow2, mode, sat, x) -> int:
    kw = {"key": (5, 2**32 - 777)} if mode == "sr" else {}
    args = dict(mode=mode, granularity=gran, scale=scale, pow2=pow2, saturate=sat)
    qn, qt = ecosim.Quantizer(fmt, **args), et.Quantizer(fmt, **args)
    xt = to_torch(x)
    with np.errstate(over="ignore"):  # bf16 with E8M0 scales overflows x / s to inf
        ref = qn(x, **kw)
    n = assert_same_bits(qt(xt, **kw), ref)
    n += assert_same_bits(qt.scales(xt), qn.scales(x))
    try:
        with np.errstate(over="ignore"):
            en = qn.encode(x, **kw)
    except ValueError:  # NaN codes in a format without NaN (fixed scale, saturate=False)
        with pytest.raises(ValueError):
            qt.encode(xt, **kw)
        return n
    enc = qt.encode(xt, **kw)
    n += assert_same_bits(enc.codes, en.codes)
    n += assert_same_bits(enc.scales, en.scales)
    assert enc.nbytes == en.nbytes and enc.packed_bits == en.packed_bits
    assert enc.shape == en.shape and enc.dtype == xt.dtype
    return n + assert_same_bits(qt.decode(enc), qn.decode(en))


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2", "float8_e4m3fnuz", "float8_e4m3", "fp4",
                                 "e2m3", "int8", "int4", "int2", "ternary", "bf16", "e8m0"])
@pytest.mark.parametrize("gran", ["tensor", "row", "column", 32])
def test_quantizer_equals_numpy(fmt, gran):
    """__call__, scales, codes, stored scales, nbytes and decode, for every scale rule, RTN and
    SR, saturating or not, on float32 input; float64 and half inputs on a subset."""
    n = 0
    for scale, pow2 in SCALES:
        for mode in ("rtn", "sr"):
            for sat in (True, False) if formats.get(fmt).is_float else (True,):
                n += _check_quantizer(fmt, gran, scale, pow2, mode, sat, W)
    for name in ("f64", "f16", "bf16"):
        for scale, pow2 in SCALES[::2]:
            n += _check_quantizer(fmt, gran, scale, pow2, "sr", True, INPUTS[name])
    assert n > 100_000


@pytest.mark.parametrize("shape", [(0,), (0, 5), (5, 0), (2, 3, 0)])
@pytest.mark.parametrize("scale", ["absmax", "absmax_pow2", "absmean", 0.5])
def test_quantizer_of_empty_tensors_equals_numpy(shape, scale):
    """Empty tensors: the scales (absmean's used to fail on a mean of nothing), stored scales
    and values of every granularity equal NumPy's."""
    x = np.zeros(shape, np.float32)
    for gran in ("tensor", "row", "column", 1):
        qt, qn = (m.Quantizer("int4", granularity=gran, scale=scale) for m in (et, ecosim))
        xt = torch.from_numpy(x)
        if gran == "column" and len(shape) == 1 and scale != 0.5:  # both refuse 1-D
            for f in (lambda: qt.scales(xt), lambda: qn.scales(x)):
                with pytest.raises(ValueError, match="granularity='column' needs an array"):
                    f()
            continue
        assert_same_bits(qt.scales(xt), qn.scales(x))
        assert tuple(qt.encode(xt).scales.shape) == np.asarray(qn.encode(x).scales).shape
        got = qt(xt)
        assert tuple(got.shape) == shape and got.dtype == torch.float32


@pytest.mark.parametrize("scale", ["absmax", "absmax_pow2", "absmean", 0.5])
def test_quantizer_refuses_a_format_wider_than_its_input_as_numpy(scale):
    """A format whose values float32 cannot hold, on float32 input: the ValueError NumPy
    raises (absmax scales used to fail first, converting the format's max to float32)."""
    fmt, x = formats.custom(11, 40), np.ones((3, 4), np.float32)
    with pytest.raises(ValueError, match="e11m40 values are not all representable in float32"):
        ecosim.Quantizer(fmt, scale=scale, granularity="row")(x)
    with pytest.raises(ValueError, match="e11m40 values are not all representable in torch"):
        et.Quantizer(fmt, scale=scale, granularity="row")(torch.from_numpy(x))


@pytest.mark.parametrize("gran", ["tensor", "row", 4])
def test_absmean_scale_overflow_is_refused_alike(gran):
    """Finite float64 values whose block mean overflows (the sum passes float64's max): both
    backends refuse with the same NonFiniteError naming the overflow (NumPy used to return
    NaN values silently, torch to say "0 non-finite values"); a block below the overflow and a
    NaN input keep their behaviour."""
    x = np.full((2, 8), 1.5e308)
    nan = np.where(np.arange(16).reshape(2, 8) == 3, np.nan, 1.0)
    msg = "the absmean scale overflowed float64: a block's mean |x| exceeds its range"
    for q, as_input in ((ecosim.Quantizer("e4m3", scale="absmean", granularity=gran), np.asarray),
                        (et.Quantizer("e4m3", scale="absmean", granularity=gran),
                         torch.from_numpy)):
        with pytest.raises(NonFiniteError, match=re.escape(msg)):
            q(as_input(x))
        with pytest.raises(NonFiniteError, match="input has 1 non-finite values"):
            q(as_input(nan))
    ok = np.full((2, 8), 1e300)
    assert_array_equal(ecosim.Quantizer("e4m3", scale="absmean", granularity=gran)(ok), ok)
    assert torch.equal(et.Quantizer("e4m3", scale="absmean", granularity=gran)(
        torch.from_numpy(ok)), torch.from_numpy(ok))


@pytest.mark.parametrize("fmt, dtype", [
    (formats.custom(11, 52), np.float64), (formats.custom(8, 23), np.float32),
    (formats.custom(5, 10, nan="fnuz"), np.float32), (formats.custom(6, 9), np.float64)],
    ids=lambda v: getattr(v, "name", getattr(v, "__name__", str(v))))
def test_quantizer_wide_custom_formats_store_raw_codes(fmt, dtype):
    """Formats without a torch dtype store their raw codes in a signed integer of the same
    width (NumPy: the unsigned one); the bits are the same."""
    x = np.random.default_rng(4).standard_normal((16, 64)).astype(dtype)
    for gran, mode in (("row", "rtn"), (16, "sr")):
        _check_quantizer(fmt, gran, "absmax", "floor", mode, True, x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(5,), (3, 20_000), (100_000,), (40, 300), (2, 3, 4, 5),
                                   (300, 1), (17, 129)])
def test_absmean_scales_sum_in_numpys_order(dtype, shape):
    """A float64 mean rounded differently would change scales' last bits: the torch mean
    follows NumPy's pairwise and buffered summation (wide dynamic range so that the order
    matters)."""
    r = np.random.default_rng(len(shape))
    x = (r.standard_normal(shape) * np.exp(r.uniform(-25, 25, shape))).astype(dtype)
    for gran in ("tensor", "row") + (("column",) if len(shape) > 1 else ()) + (
            (5,) if shape[-1] % 5 == 0 else ()):
        q, qt = (cls("ternary", scale="absmean", granularity=gran)
                 for cls in (ecosim.Quantizer, et.Quantizer))
        assert_same_bits(qt.scales(to_torch(x)), q.scales(x))


def test_encode_storage_is_real_low_precision():
    x = to_torch(W)
    e = et.Quantizer("e4m3", granularity="row").encode(x)
    assert e.codes.dtype == torch.float8_e4m3fn and e.codes.nbytes == W.size
    assert e.nbytes == W.size + 64 * 4
    assert et.Quantizer("e5m2").encode(x).codes.dtype == torch.float8_e5m2
    assert et.Quantizer("float8_e4m3fnuz").encode(x).codes.dtype == torch.float8_e4m3fnuz
    assert et.Quantizer("float8_e4m3").encode(x).codes.dtype == torch.uint8  # no torch dtype
    assert et.Quantizer("int8").encode(x).codes.dtype == torch.int8
    assert et.Quantizer("bf16").encode(x).codes.dtype == torch.bfloat16
    e4 = et.Quantizer("int4").encode(x)
    assert e4.codes.dtype == torch.uint8 and e4.codes.nbytes == W.size // 2
    assert e4.nbytes == W.size // 2 + 4
    assert et.Quantizer("ternary", scale="absmean").encode(x).codes.nbytes == W.size // 4
    p2 = et.Quantizer("e4m3", granularity=32, scale="absmax_pow2").encode(x)
    assert p2.scales.dtype == torch.float8_e8m0fnu and p2.scales.nbytes == 64 * 3
    odd = et.Quantizer("fp4").encode(x[:, :5])  # an odd count pads the last byte
    assert odd.codes.nbytes == (64 * 5 + 1) // 2


def test_fixed_scale_specials_equal_numpy():
    x = np.array([np.inf, -np.inf, np.nan, -np.nan, 1e30, -0.0, 3.3], np.float32)
    with np.errstate(over="ignore"):
        xh = x.astype(np.float16)
    for fmt in ("e4m3", "e5m2", "int4", "bf16"):
        for sat in (True, False) if formats.get(fmt).is_float else (True,):
            qn = ecosim.Quantizer(fmt, scale=0.5, saturate=sat)
            qt = et.Quantizer(fmt, scale=0.5, saturate=sat)
            assert_same_bits(qt(to_torch(x)), qn(x))
            with np.errstate(over="ignore"):  # bf16 values overflow float16
                ref = qn(xh)
            assert_same_bits(qt(to_torch(xh)), ref)
    with pytest.raises(ValueError, match="grid"):  # FP4 has no NaN code
        et.Quantizer("fp4", scale=1.0).encode(torch.tensor([float("nan")]))
    with pytest.raises(ValueError, match="NaN"):
        et.Quantizer("int4", scale=1.0).encode(torch.tensor([float("nan")]))


def test_given_scales_and_errors():
    q, qn = et.Quantizer("int4", granularity="row"), ecosim.Quantizer("int4", granularity="row")
    prev = W * 0.5
    s = q.scales(to_torch(prev))
    assert_same_bits(q(to_torch(W), scales=s), qn(W, scales=qn.scales(prev)))
    assert torch.equal(q.decode(q.encode(to_torch(W), scales=s)), q(to_torch(W), scales=s))
    with pytest.raises(ValueError, match="shape"):
        q(to_torch(W), scales=s[:3])
    with pytest.raises(ValueError, match="positive"):
        q(to_torch(W), scales=torch.zeros_like(s))
    bad = to_torch(W).clone()
    bad[2, 0] = float("nan")
    with pytest.raises(ValueError, match="non-finite"):
        q(bad)
    # every data-dependent scale refuses NaN and +-inf, whatever the block (the check reads
    # the per-block amax or mean, which propagate them)
    for value in (float("nan"), float("inf"), -float("inf")):
        for scale, gran in (("absmax", "row"), ("absmax", "tensor"), ("absmean", "row"),
                            ("absmax_pow2", 16)):
            bad = to_torch(W).clone()
            bad[-1, -1] = value
            with pytest.raises(ValueError, match="has 1 non-finite values"):
                et.Quantizer("e4m3", scale=scale, granularity=gran)(bad)
    with pytest.raises(ValueError, match="does not divide"):
        et.Quantizer("int4", granularity=40)(to_torch(W))
    with pytest.raises(ValueError, match="mode='sr'"):
        et.Quantizer("e4m3")(to_torch(W), key=1)
    with pytest.raises(TypeError):
        et.Quantizer("e4m3")(torch.arange(4))


@pytest.mark.parametrize("kwargs", [dict(fmt="e4m3", mode="xx"),
                                    dict(fmt="e4m3", granularity="block"),
                                    dict(fmt="e4m3", granularity=0),
                                    dict(fmt="e4m3", scale="absmin"),
                                    dict(fmt="e4m3", scale=-1.0), dict(fmt="e4m3", pow2="up"),
                                    dict(fmt="nope")])
def test_bad_configuration(kwargs):
    with pytest.raises(ValueError):
        et.Quantizer(**kwargs)


def test_no_mutation():
    x = to_torch(W)
    x0 = x.clone()
    q = et.Quantizer("e4m3", mode="sr", granularity=32, scale="absmax_pow2")
    q.decode(q.encode(x, key=0))
    q(x, key=0)
    assert torch.equal(x, x0)


def test_scalar_division_is_a_true_division():
    """Scales divide by ``rho`` (and means by a count) through ``div``: ``x / y`` rounded
    once, with the divisor on ``x``'s device (CUDA turns a division by a Python scalar or a
    CPU 0-dim tensor into ``x * fl(1/y)``). The inputs are ones where that product differs
    from the division, so a reciprocal anywhere in the path would fail here."""
    from ecosim.torch.numerics import div

    x = np.random.default_rng(5).standard_normal(100_000).astype(np.float32)
    want = x / np.float32(448.0)
    recip = x * (np.float32(1.0) / np.float32(448.0))
    assert (want != recip).mean() > 0.3  # the distinction this test sees
    for dev in DEVICES:
        got = div(to_torch(x, dev), 448.0)
        assert got.device.type == dev and got.dtype == torch.float32
        assert_array_equal(raw_bits(got.cpu().numpy()), raw_bits(want))
    x64 = x.astype(np.float64)
    assert_array_equal(div(to_torch(x64), 3).numpy(), x64 / 3)


def test_collects_without_gfloat_or_hypothesis():
    """The torch tests import on a machine without the test extras (a GPU box): gfloat and
    hypothesis hidden (and no plugin autoloading: such a machine has no hypothesis plugin),
    collection of this file and test_rounding.py succeeds, and the gfloat comparison skips."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    code = (
        "import sys\n"
        "class Hide:  # a machine without the test extras\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('gfloat', 'hypothesis'):\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Hide())\n"
        "import pytest\n"
        "sys.exit(pytest.main(['-p', 'no:cacheprovider', '-q', '-k', "
        "'equals_gfloat or scalar_division', 'tests/test_torch_core.py', "
        "'tests/test_rounding.py']))\n")
    env = dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")  # no hypothesis plugin either
    p = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "7 skipped" in p.stdout and "1 passed" in p.stdout, p.stdout[-2000:]
