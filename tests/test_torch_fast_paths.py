"""The CPU fast paths of ecosim.torch's rounding give NumPy's bits: RTN by one float addition
(normals and subnormals of the format alike), SR below the smallest normal by power-of-two
scaling, and the Quantizer's fused divide-round-multiply over chunks of rows; also with
``torch.set_flush_denormal(True)``, where the paths are taken, and not taken where they would
not be exact."""

import numpy as np
import pytest
from numpy.testing import assert_array_equal

torch = pytest.importorskip("torch")

import ecosim  # noqa: E402
import ecosim.torch as et  # noqa: E402
import ecosim.torch.quantizer as tq  # noqa: E402
import ecosim.torch.rounding as tr  # noqa: E402
from ecosim import formats  # noqa: E402
from ecosim.core.rounding import Rounding, plan  # noqa: E402

pytestmark = pytest.mark.torch
F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
CPU = torch.device("cpu")


def bits(a) -> np.ndarray:
    a = a.numpy() if isinstance(a, torch.Tensor) else a
    return a.view({4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def grid_probes(fmt: str, dtype) -> np.ndarray:
    """Every grid point of ``fmt`` up to max, the midpoints between neighbours (ties) and their
    neighbours one unit of the working float away, float32 subnormals, both signs."""
    f = formats.get(fmt)
    grid = np.unique(np.abs(ecosim.quantize(np.linspace(0, f.max, 200_001), fmt)))
    mids = (grid[1:] + grid[:-1]) / 2
    pts = np.concatenate([grid, mids]).astype(dtype)
    pts = np.concatenate([pts, np.nextafter(pts, dtype(0)), np.nextafter(pts, dtype(np.inf)),
                          np.array([1e-45, 1e-40, 2**-126, 2**-127], dtype)])
    pts = pts[np.abs(pts) <= f.max]
    return np.concatenate([pts, -pts])


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2", "fp16", "e2m1", "e3m2", "e2m3"])
def test_rtn_by_addition_equals_numpy_on_every_grid_point_and_tie(fmt, dtype):
    assert tr._adds_exactly(plan(formats.get(fmt), dtype, Rounding("rtn")), CPU)
    x = grid_probes(fmt, dtype.type)
    assert_array_equal(bits(et.quantize(torch.from_numpy(x), fmt)), bits(ecosim.quantize(x, fmt)))


def test_rtn_by_addition_is_not_taken_where_it_is_not_exact():
    """fnuz formats (no -0), a subnormal step below float32's normals (bf16), SR."""
    for name, dtype, sr in (("e4m3fnuz", F32, False), ("bf16", F32, False), ("e4m3", F32, True)):
        r = Rounding("sr" if sr else "rtn")
        assert not tr._adds_exactly(plan(formats.get(name), dtype, r), CPU)
    assert not tr._scales_exactly(plan(formats.get("bf16"), F32, Rounding("sr")), CPU)
    assert not tr._scales_exactly(plan(formats.get("e4m3"), F64, Rounding("sr")), CPU)


@pytest.mark.parametrize("nbits", [1, 8, 23, 32])
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2", "e2m1"])
def test_sr_below_the_smallest_normal_by_scaling_equals_numpy(fmt, nbits):
    assert tr._scales_exactly(plan(formats.get(fmt), F32, Rounding("sr", nbits)), CPU)
    f = formats.get(fmt)
    x = grid_probes(fmt, np.float32)
    x = x[np.abs(x) < 2.0**f.emin]  # only the inputs the scaling path rounds
    x = np.concatenate([x, (np.random.default_rng(0).standard_normal(5000)
                            * 2.0**f.emin).astype(np.float32)])
    for key in (3, (9, 2**32 - 7)):
        got = et.quantize(torch.from_numpy(x), fmt, "sr", key=key, nbits=nbits)
        assert_array_equal(bits(got), bits(ecosim.quantize(x, fmt, "sr", key=key, nbits=nbits)))
    r = np.random.default_rng(1).integers(0, 2**32, x.size, dtype=np.uint64)
    got = et.quantize(torch.from_numpy(x), fmt, "sr", rbits=torch.from_numpy(r.view(np.int64)),
                      nbits=nbits)
    assert_array_equal(bits(got), bits(ecosim.quantize(x, fmt, "sr", rbits=r, nbits=nbits)))


def test_flush_denormal_changes_no_result_of_the_fast_paths():
    """With subnormals read and written as zero (the CPU's FTZ/DAZ), the float paths give the
    bits they give without it (the rule they are restricted to)."""
    x = np.concatenate([grid_probes("e4m3", np.float32),
                        np.float32(1e-40) * np.arange(-50, 50, dtype=np.float32)])
    xt = torch.from_numpy(x)
    calls = [(fmt, mode) for fmt in ("e4m3", "e5m2") for mode in ("rtn", "sr")]
    want = [et.quantize(xt, fmt, mode, **({"key": 5} if mode == "sr" else {}))
            for fmt, mode in calls]
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU has no flush-to-zero mode")
    try:
        got = [et.quantize(xt, fmt, mode, **({"key": 5} if mode == "sr" else {}))
               for fmt, mode in calls]
    finally:
        torch.set_flush_denormal(False)
    for g, w in zip(got, want):
        assert torch.equal(g.view(torch.int32), w.view(torch.int32))


@pytest.mark.parametrize("gran, dtype", [("tensor", F32), ("row", F32), ("column", F32),
                                         (32, F32), ("row", F64)])
def test_fused_quantizer_equals_numpy_over_several_chunks(gran, dtype, monkeypatch):
    """More than one chunk of 2**18 elements, so the fused path runs (and is seen to run) with
    rows split between chunks for every granularity, scale rule, RTN and SR."""
    calls = []
    fused = tq.quantize_scaled
    monkeypatch.setattr(tq, "quantize_scaled", lambda *a, **k: calls.append(1) or fused(*a, **k))
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((520, 512)) * rng.choice([1e-3, 1.0, 1e3], (520, 1))).astype(dtype)
    x[3, :7] = 0
    x[5] = 0  # a block of zeros
    x[7, 9] = 1e-42 if dtype == F32 else 1e-310
    n = 0
    for fmt in ("e4m3", "int4"):
        for scale in ("absmax", "absmax_pow2", "absmean"):
            for mode, kw in (("rtn", {}), ("sr", {"key": (4, 2**32 - 1000)})):
                q = ecosim.Quantizer(fmt, granularity=gran, scale=scale, mode=mode)
                qt = et.Quantizer(fmt, granularity=gran, scale=scale, mode=mode)
                assert_array_equal(bits(qt(torch.from_numpy(x), **kw)), bits(q(x, **kw)))
                n += 1
    assert len(calls) == n == 12


@pytest.mark.parametrize("shape", [(64, 32), (600, 512)])  # one chunk, and several
def test_scales_of_zero_and_signed_zero_blocks_equal_numpy(shape):
    """Blocks of one chunk take |x| for their absmax, larger tensors max(-min, max): both give
    NumPy's scales, also for blocks of +0, of -0, and of both (amax 0 or -0: scale 1)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape).astype(np.float32)
    x[0], x[1], x[2, ::2], x[2, 1::2] = 0.0, -0.0, -0.0, 0.0
    x[3, 5] = -np.float32(1e-40)  # a block whose absmax is a float32 subnormal
    for scale in ("absmax", "absmax_pow2"):
        for gran in ("row", 32):
            q = ecosim.Quantizer("e4m3", granularity=gran, scale=scale)
            qt = et.Quantizer("e4m3", granularity=gran, scale=scale)
            assert_array_equal(bits(qt.scales(torch.from_numpy(x))), bits(q.scales(x)))
            assert_array_equal(bits(qt(torch.from_numpy(x))), bits(q(x)))


def test_cached_scalars_keep_the_sign_of_zero_and_work_under_autograd():
    """The constants of small-tensor arithmetic are cached per value: -0.0 and 0.0 are different
    ones (1 / -0 is -inf), and one made first inside inference_mode is an ordinary tensor that
    autograd can save (a division by it in a graph)."""
    from ecosim.torch.numerics import div, scalar

    assert bits(scalar(-0.0, torch.float32, CPU)) == 0x80000000
    assert bits(scalar(0.0, torch.float32, CPU)) == 0
    assert div(torch.ones(1), -0.0).item() == -np.inf
    assert div(torch.ones(1), 0.0).item() == np.inf
    with torch.inference_mode():
        t = scalar(7.0, torch.float32, CPU)
    assert not t.is_inference()
    x = torch.ones(3, requires_grad=True)
    div(x, 7.0).sum().backward()
    assert_array_equal(bits(x.grad), bits(np.full(3, 1 / 7, np.float32)))
