"""Bad inputs on the numeric paths (NumPy core): each gives the correct result or a clear error.

Byte-swapped arrays are read as their values (results native), a block whose scale would
underflow gets the smallest normal scale (finite, exact where the grid allows), bool options
refuse non-bools, and a list of parameters is refused with a TypeError saying what is accepted.
"""

import numpy as np
import pytest

from ecosim import Quantizer, formats, memory, optim, quantize
from ecosim.metrics import error_similarity
from rounding_probes import tiny_blocks

BIG = {np.dtype(np.float32): ">f4", np.dtype(np.float64): ">f8", np.dtype(np.float16): ">f2"}


def _swapped(x: np.ndarray) -> np.ndarray:
    """``x`` with the non-native byte order (same values)."""
    y = x.astype(x.dtype.newbyteorder("S"))
    assert not y.dtype.isnative and np.array_equal(y, x, equal_nan=True)
    return y


def _same_bits(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype and a.dtype.isnative and a.shape == b.shape
    assert np.array_equal(a.view(f"u{a.dtype.itemsize}"), b.view(f"u{b.dtype.itemsize}"))


def _sample(dtype, n=4096, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n) * np.exp2(rng.integers(-12, 10, n))
    x[:4] = [0.0, -0.0, 1e4, -3.25]
    return x.astype(dtype)


# -- byte order --------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2", "e2m1", "int4", "bf16", "fp16"])
def test_quantize_any_byte_order(dtype, fmt):
    x = _sample(dtype)
    if fmt == "bf16" and dtype == np.float16:
        pytest.skip("bfloat16 values are not all float16 values")
    xs = _swapped(x)
    before = xs.copy()
    _same_bits(quantize(xs, fmt), quantize(x, fmt))
    _same_bits(quantize(xs, fmt, "sr", key=3), quantize(x, fmt, "sr", key=3))
    assert np.array_equal(xs, before) and xs.dtype == before.dtype  # input untouched


def test_quantize_swapped_rbits():
    x = _sample(np.float32, 512)
    rb = np.random.default_rng(1).integers(0, 2**32, x.shape, dtype=np.uint32)
    want = quantize(x, "e4m3", "sr", rbits=rb)
    _same_bits(quantize(x, "e4m3", "sr", rbits=_swapped(rb)), want)
    _same_bits(quantize(x, "e4m3", "sr", rbits=_swapped(rb.astype(np.int64))), want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("kw", [dict(fmt="e4m3", granularity="row"),
                                dict(fmt="int4", granularity=8, scale="absmax_pow2"),
                                dict(fmt="ternary", scale="absmean", granularity="column"),
                                dict(fmt="e5m2", scale=0.5),
                                dict(fmt="e4m3", mode="sr", granularity="row")])
def test_quantizer_any_byte_order(dtype, kw):
    x = _sample(dtype, 256).reshape(16, 16)
    xs = _swapped(x)
    q = Quantizer(**kw)
    key = 5 if q.mode == "sr" else None
    want = q(x, key=key)
    _same_bits(q(xs, key=key), want)  # the half branch is taken for float16 only
    _same_bits(q.scales(xs), q.scales(x))
    enc = q.encode(xs, key=key)
    assert enc.dtype == x.dtype
    _same_bits(q.decode(enc), want)
    _same_bits(q(x, key=key, scales=_swapped(q.scales(x))), want)


def test_decode_swapped_record_dtype():
    x = _sample(np.float64, 64).reshape(8, 8)
    q = Quantizer("e4m3", granularity="row")
    enc = q.encode(x)
    swapped = type(enc)(enc.codes, _swapped(enc.scales), enc.shape, np.dtype(">f8"),
                        enc.packed_bits)
    _same_bits(q.decode(swapped), q(x))


def _opts():
    wq = Quantizer("e4m3", granularity="row")
    return [optim.sgdm(0.05, 0.9, scheme="eco", weights=wq, nesterov=True),
            optim.adamw(0.01, scheme="eco", weights=wq, states={"m": "bf16", "v": "e4m3"}),
            optim.muon(0.02, scheme="eco_exact", weights=wq)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("which", [0, 1, 2])
def test_optimizer_any_byte_order(dtype, which):
    opt = _opts()[which]
    rng = np.random.default_rng(2)
    P = {"w": rng.standard_normal((6, 5)).astype(dtype),
         "u": rng.standard_normal((4, 3)).astype(dtype)}
    G = [{k: rng.standard_normal(v.shape).astype(dtype) for k, v in P.items()}
         for _ in range(3)]
    w1, s1 = opt.init(P, key=1)
    w2, s2 = opt.init({k: _swapped(v) for k, v in P.items()}, key=1)
    for g in G:
        for k in P:
            _same_bits(w2[k], w1[k])
        w1, s1 = opt.step(w1, g, s1)
        w2, s2 = opt.step({k: _swapped(v) for k, v in w2.items()},
                          {k: _swapped(v) for k, v in g.items()}, s2)
    for k in P:
        _same_bits(w2[k], w1[k])
        for b in ("m", "v"):
            if getattr(s1, b, None) is not None:
                _same_bits(getattr(s2, b)[k], getattr(s1, b)[k])


def test_memory_and_metrics_any_byte_order():
    a = memory.bytes_per_param("adamw", "eco", dtype=">f8", block=64)
    b = memory.bytes_per_param("adamw", "eco", dtype=np.float64, block=64)
    assert a == b and a.total != memory.bytes_per_param("adamw", "eco", block=64).total
    e0, e1 = _sample(np.float32, 64), _sample(np.float32, 64, seed=1)
    assert error_similarity(_swapped(e0), _swapped(e1)) == error_similarity(e0, e1)


# -- scales that underflow ------------------------------------------------------------------------

def test_underflowing_absmax_scale_is_the_smallest_normal():
    q = Quantizer("e4m3", granularity="row")
    x = np.array([[1e-45, 0.0], [0.0, 0.0], [2.0**-130, -2.0**-133], [1.0, -0.5]], np.float32)
    s = q.scales(x)
    tiny = np.finfo(np.float32).tiny
    assert s.dtype == np.float32 and s[:, 0].tolist() == [tiny, 1.0, tiny, np.float32(1 / 448)]
    y = q(x)
    assert np.isfinite(y).all()
    # 1e-45 * 2**126 = 2**-23 is below E4M3's smallest subnormal: 0; the next row is exact.
    assert y[:3].tolist() == [[0.0, 0.0], [0.0, 0.0], [2.0**-130, -2.0**-133]]
    assert y[3].tolist() == q(x[3:])[0].tolist()  # other rows unaffected


# integer grids always saturate: saturate=False applies to the float formats only
_TINY_CASES = [(f, sat) for f in ("e4m3", "e5m2", "e2m1", "e3m2", "int8", "int4", "ternary",
                                  "bf16", "fp16")
               for sat in (True, False) if sat or formats.get(f).is_float]


@pytest.mark.parametrize("fmt,saturate", _TINY_CASES)
@pytest.mark.parametrize("scale", ["absmax", "absmean", "absmax_pow2"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tiny_blocks_are_finite(fmt, saturate, scale, dtype):
    x = tiny_blocks(dtype)
    q = Quantizer(fmt, granularity="row", scale=scale, saturate=saturate)
    y = q(x)
    assert np.isfinite(y).all(), y
    assert (np.abs(y) <= np.abs(x).max(axis=1, keepdims=True) * 2).all()
    assert (q.scales(x) >= np.finfo(dtype).tiny).all() or scale == "absmax_pow2"
    assert np.array_equal(q.decode(q.encode(x)), y)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tiny_block_is_rounded_with_scale_tiny(dtype):
    # s = tiny is a power of two: x / s is exact, and q(x) = fl(Q(x / s) * s).
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(64) * np.finfo(dtype).tiny * 2.0**-8).astype(dtype)
    for fmt in ("bf16", "fp16", "e4m3"):
        q = Quantizer(fmt, scale="absmax")
        tiny = np.finfo(dtype).tiny
        want = quantize(x / tiny, fmt) * tiny
        assert np.array_equal(q(x), want), fmt
        assert np.array_equal(q(x * 2.0**-20), quantize(x * 2.0**-20 / tiny, fmt) * tiny), fmt


def test_optimizer_init_tiny_weights_no_nan():
    opt = optim.adamw(0.01, scheme="eco", weights=Quantizer("e4m3", granularity="row"))
    w, st = opt.init(np.array([[1e-45, 0.0], [1.0, 2.0]], np.float32))
    assert np.isfinite(w).all() and w[0].tolist() == [0.0, 0.0]
    w, st = opt.step(w, np.full((2, 2), 1e-3, np.float32), st)
    assert np.isfinite(w).all()


# -- bool options -------------------------------------------------------------------------------

BOOL_CALLS = {
    "quantize saturate": lambda v: quantize(np.ones(2, np.float32), "e4m3", saturate=v),
    "Quantizer saturate": lambda v: Quantizer("e4m3", saturate=v),
    "sgdm nesterov": lambda v: optim.sgdm(0.1, scheme="fp", nesterov=v),
    "sgdm heavy_ball": lambda v: optim.sgdm(0.1, scheme="fp", heavy_ball=v),
    "SGDM prev_scale": lambda v: optim.SGDM(lr=0.1, scheme="fp", prev_scale=v),
    "adamw wd_corrected_injection": lambda v: optim.adamw(0.1, scheme="fp",
                                                          wd_corrected_injection=v),
    "AdamW prev_scale": lambda v: optim.AdamW(lr=0.1, scheme="fp", prev_scale=v),
    "muon nesterov": lambda v: optim.muon(0.1, scheme="fp", nesterov=v),
    "Muon prev_scale": lambda v: optim.Muon(lr=0.1, scheme="fp", prev_scale=v),
    "step diagnostics": lambda v: _step_with(v),
    "custom subnormals": lambda v: formats.custom(4, 3, subnormals=v),
    "error_similarity per_tensor": lambda v: error_similarity({"a": np.ones(2)},
                                                              {"a": np.ones(2)}, per_tensor=v),
    "bytes_per_param count_working_copy": lambda v: memory.bytes_per_param(
        "adamw", "master", count_working_copy=v),
    "llama tied": lambda v: memory.ModelSpec.llama(64, 2, tied=v),
}


def _step_with(diagnostics):
    opt = optim.sgdm(0.1, scheme="fp")
    w, st = opt.init(np.ones(2, np.float32))
    return opt.step(w, np.ones(2, np.float32), st, diagnostics=diagnostics)


@pytest.mark.parametrize("name", sorted(BOOL_CALLS))
@pytest.mark.parametrize("bad", ["no", "False", 0, 1, None, 1.0])
def test_bool_options_refuse_non_bools(name, bad):
    option = name.split()[-1]
    with pytest.raises(TypeError, match=f"^{option} must be a bool \\(True or False\\), got"):
        BOOL_CALLS[name](bad)


@pytest.mark.parametrize("name", sorted(BOOL_CALLS))
def test_bool_options_take_numpy_bools(name):
    BOOL_CALLS[name](np.False_)
    BOOL_CALLS[name](np.True_)


def test_numpy_bool_means_the_same():
    x = np.array([1.0, 500.0, -1e9], np.float32)
    q = Quantizer("e4m3", saturate=np.False_)
    assert q.saturate is False and q == Quantizer("e4m3", saturate=False)
    assert np.array_equal(q(x, scales=np.ones(1, np.float32)),
                          Quantizer("e4m3", saturate=False)(x, scales=np.ones(1, np.float32)),
                          equal_nan=True)
    assert formats.custom(4, 3, subnormals=np.False_) == formats.custom(4, 3, subnormals=False)


# -- lists of parameters --------------------------------------------------------------------------

@pytest.mark.parametrize("seq", [list, tuple])
def test_optimizer_refuses_a_list_of_params(seq):
    W = [np.ones((2, 3), np.float32), np.ones((2, 3), np.float32)]  # NumPy would stack these
    for opt in _opts():
        with pytest.raises(TypeError, match="params must be one float array or a dict of named "
                                            f"arrays .*got a {seq.__name__}$"):
            opt.init(seq(W))
        w, st = opt.init(W[0])
        with pytest.raises(TypeError, match=f"^params must be .*got a {seq.__name__}$"):
            opt.step(seq([w]), [W[0]], st)
        with pytest.raises(TypeError, match=f"^grads must be .*got a {seq.__name__}$"):
            opt.step(w, seq([W[0]]), st)


def test_optimizer_state_structure_mismatch_is_a_value_error():
    opt = _opts()[0]
    W = np.ones((2, 3), np.float32)
    w, st = opt.init(W)
    with pytest.raises(ValueError, match="^state was built for one bare array but params here "
                                         "are a dict"):
        opt.step({"": w}, {"": W}, st)
    w, st = opt.init({"a": W})
    with pytest.raises(ValueError, match="^state was built for a dict of params but params "
                                         "here are one bare array"):
        opt.step(w["a"], W, st)


def test_quantizer_list_input():
    q = Quantizer("e4m3")
    W = [np.ones((2, 3), np.float32), np.ones((2, 3), np.float32)]
    for bad in (W, tuple(W)):
        with pytest.raises(TypeError, match="^expected one floating-point array, got a "):
            q(bad)
        with pytest.raises(TypeError, match="^expected one floating-point array"):
            q.encode(bad)
    # A list of numbers is one array.
    assert np.array_equal(q([1.0, 2.5]), q(np.array([1.0, 2.5])))
