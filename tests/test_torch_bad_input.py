"""Bad inputs on the torch mirror: byte-swapped NumPy input, underflowing scales, bool options.

Each case gives exactly the NumPy core's result (bit for bit) or the NumPy core's error.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ecosim  # noqa: E402
import ecosim.torch as et  # noqa: E402
from rounding_probes import tiny_blocks  # noqa: E402

pytestmark = pytest.mark.torch


def _swapped(x: np.ndarray) -> np.ndarray:
    y = x.astype(x.dtype.newbyteorder("S"))
    assert not y.dtype.isnative and np.array_equal(y, x)
    return y


def _equal(t: torch.Tensor, a: np.ndarray) -> bool:
    return torch.equal(t, torch.from_numpy(np.ascontiguousarray(a)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_torch_quantize_swapped_numpy(dtype):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(300) * 4).astype(dtype)
    rb = rng.integers(0, 2**32, x.shape, dtype=np.uint32)
    xs = _swapped(x)
    assert _equal(et.quantize(xs, "e4m3"), ecosim.quantize(x, "e4m3"))
    assert _equal(et.quantize(xs, "e4m3", "sr", key=2), ecosim.quantize(x, "e4m3", "sr", key=2))
    assert _equal(et.quantize(x, "e5m2", "sr", rbits=_swapped(rb)),
                  ecosim.quantize(x, "e5m2", "sr", rbits=rb))
    assert xs.dtype.byteorder != "=" and np.array_equal(xs, x)  # input untouched


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_torch_quantizer_swapped_numpy(dtype):
    x = np.random.default_rng(1).standard_normal((8, 16)).astype(dtype)
    rb = np.random.default_rng(2).integers(0, 2**32, x.shape, dtype=np.uint32)
    kw = dict(fmt="e4m3", granularity="row", mode="sr")
    q, qt = ecosim.Quantizer(**kw), et.Quantizer(**kw)
    want = q(x, rbits=rb)
    assert _equal(qt(_swapped(x), rbits=_swapped(rb)), want)
    assert _equal(qt.decode(qt.encode(_swapped(x), rbits=rb)), want)
    assert _equal(qt(torch.from_numpy(x), key=4, scales=_swapped(q.scales(x))),
                  q(x, key=4, scales=q.scales(x)))


# integer grids always saturate: saturate=False applies to the float formats only
_TINY_CASES = [(f, sat) for f in ("e4m3", "e5m2", "e2m1", "int4", "ternary", "bf16")
               for sat in (True, False) if sat or f not in ("int4", "ternary")]


@pytest.mark.parametrize("fmt,saturate", _TINY_CASES)
@pytest.mark.parametrize("scale", ["absmax", "absmean", "absmax_pow2"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_torch_tiny_blocks_match_numpy(fmt, saturate, scale, dtype):
    x = tiny_blocks(dtype, [1.0, -0.25, 3.0])
    kw = dict(fmt=fmt, granularity="row", scale=scale, saturate=saturate)
    want = ecosim.Quantizer(**kw)(x)
    assert np.isfinite(want).all()
    got = et.Quantizer(**kw)(torch.from_numpy(x))
    assert _equal(got, want)
    assert _equal(et.Quantizer(**kw).scales(torch.from_numpy(x)),
                  ecosim.Quantizer(**kw).scales(x))


@pytest.mark.parametrize("bad", ["no", 0, 1, None])
def test_torch_bool_options(bad):
    p = [torch.nn.Parameter(torch.ones(2, 2))]
    calls = {
        "saturate": [lambda: et.quantize(torch.ones(2), "e4m3", saturate=bad),
                     lambda: et.Quantizer("e4m3", saturate=bad)],
        "nesterov": [lambda: et.ECOSGD(p, 0.1, scheme="fp", nesterov=bad)],
        "heavy_ball": [lambda: et.ECOSGD(p, 0.1, scheme="fp", heavy_ball=bad)],
        "wd_corrected_injection": [lambda: et.ECOAdamW(p, 0.1, scheme="fp",
                                                       wd_corrected_injection=bad)],
        "compile": [lambda: et.ECOAdamW(p, 0.1, scheme="fp", compile=bad)],
    }
    for option, fns in calls.items():
        for fn in fns:
            with pytest.raises(TypeError, match=f"^{option} must be a bool \\(True or False\\)"):
                fn()
    q = et.Quantizer("e4m3", saturate=np.False_)
    assert q.saturate is False


def test_torch_list_of_arrays_refused():
    W = [np.ones((2, 3), np.float32)] * 2
    with pytest.raises(TypeError, match="^expected one floating-point tensor, got a list"):
        et.Quantizer("e4m3")(W)
    with pytest.raises(TypeError, match="^expected one floating-point tensor, got a tuple"):
        et.quantize(tuple(W), "e4m3")


@pytest.mark.parametrize("make, err", [
    (lambda p, q: et.ECOAdamW(p, 0.1, weight_decay=float("nan"), weights=q),
     "weight_decay must be finite"),
    (lambda p, q: et.ECOSGD(p, 0.1, weight_decay=float("nan"), weights=q),
     "weight_decay must be finite"),
    (lambda p, q: et.ECOSGD(p, 0.1, momentum="0.9", weights=q), "momentum must be a real number"),
    (lambda p, q: et.ECOAdamW(p, 0.1, eps=float("inf"), weights=q), "eps must be finite"),
    (lambda p, q: et.ECOAdamW(p, 0.1, betas=(0.9,), weights=q), r"betas must be a pair"),
    (lambda p, q: et.ECOAdamW(p, 0.1, betas=(0.0, 0.9), weights=q),
     r"needs betas\[0\] in \(0, 1\)"),
])
def test_torch_optimizers_check_hyperparameters_as_numpy_does(make, err):
    """The NumPy optimizers' checks: NaN and inf are refused, not stored in the groups."""
    p = [torch.nn.Parameter(torch.zeros(3, 3))]
    with pytest.raises((ValueError, TypeError), match=err):
        make(p, et.Quantizer("e4m3"))
    opt = et.ECOAdamW(p, 0.1, betas=(torch.tensor(0.5), 0.99), weights=et.Quantizer("e4m3"))
    assert opt.param_groups[0]["betas"] == (0.5, 0.99)
