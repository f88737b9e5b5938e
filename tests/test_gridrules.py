"""ecosim.core.gridrules: the uniform-grid rules (below the smallest normal, integer formats) are
one implementation run on NumPy and on torch, and each backend's faster path equals it bit for bit.

Inputs: for each format, every point of the subnormal grid, the midpoints between them and one
float32 ulp either side, plus 4096 uniformly drawn bit patterns below the smallest normal
(seeded); SR takes every value of 3 random bits, and seeded 32-bit words.
"""

from __future__ import annotations

import numpy as np
import pytest

from ecosim.core import gridrules
from ecosim.core.bitops import NUMPY_WORDS
from ecosim.core.catalog import FORMATS
from ecosim.core.rounding import Rounding, _finite_int_kernel, small_magnitudes, plan

FLOATS = [n for n, f in FORMATS.items() if f.is_float and n not in ("bfloat16", "float16")]
INTS = [n for n, f in FORMATS.items() if not f.is_float]
RULES = [("rtn", 32, "floor"), ("sr", 3, "floor"), ("sr", 3, "nearest"), ("sr", 32, "floor"),
         ("sr", 32, "nearest")]


def _small_inputs(p) -> np.ndarray:
    """float32 magnitude bits below ``p.minnorm``: grid points, midpoints, +-1 ulp, random."""
    step = 2.0 ** p.qexp
    k = np.arange(0, 2 * int(2.0 ** p.fmt.emin / step) + 2)  # half steps up to the normals
    pts = (k * (step / 2)).astype(np.float32).view(np.uint32).astype(np.int64)
    pts = np.concatenate([pts, pts + 1, np.maximum(pts - 1, 0)])
    rand = np.random.default_rng(0).integers(0, p.minnorm, 4096)
    a = np.concatenate([pts, rand, [0, 1, p.minnorm - 1]])
    return a[a < p.minnorm]


def _rbits(n: int, nbits: int) -> np.ndarray:
    if nbits == 3:  # every value of the low 3 bits, at every input (inputs tiled outside)
        return np.arange(n, dtype=np.uint32) % 8
    return np.random.default_rng(1).integers(0, 2**32, n, dtype=np.uint32)


def _cases(name, mode, nbits, rule):
    p = plan(FORMATS[name], np.dtype(np.float32), Rounding(mode, nbits, rule))
    a = _small_inputs(p)
    if mode == "sr" and nbits == 3:
        a = np.repeat(a, 8)
    return p, a, (_rbits(a.size, nbits) if mode == "sr" else None)


@pytest.mark.parametrize("mode,nbits,rule", RULES)
@pytest.mark.parametrize("name", FLOATS)
def test_numpy_small_path_is_the_rule(name, mode, nbits, rule):
    """NumPy's small_magnitudes (its float fast path where one step serves all) == the rule."""
    p, a, rb = _cases(name, mode, nbits, rule)
    got = small_magnitudes(p, a.astype(np.uint32).view(np.float32), rb)
    want = gridrules.small_values(p, a, rb, NUMPY_WORDS)
    assert want.dtype == np.int64
    np.testing.assert_array_equal(got, want.astype(np.uint32))


@pytest.mark.parametrize("mode,nbits,rule", RULES)
@pytest.mark.parametrize("name", FLOATS)
def test_torch_small_rule_matches_numpy(name, mode, nbits, rule):
    """The same rule through torch's shim gives NumPy's bits (and so do torch's CPU SR path)."""
    torch = pytest.importorskip("torch")
    from ecosim.torch import rounding as trounding
    from ecosim.torch.bitops import TORCH_WORDS

    p, a, rb = _cases(name, mode, nbits, rule)
    want = gridrules.small_values(p, a, rb, NUMPY_WORDS)
    trb = None if rb is None else torch.from_numpy(rb.astype(np.int64))
    got = gridrules.small_values(p, torch.from_numpy(a), trb, TORCH_WORDS)
    np.testing.assert_array_equal(got.numpy(), want)
    if trounding._scales_exactly(p, torch.device("cpu")):
        fast = trounding._small_sr_by_scaling(p, torch.from_numpy(a.astype(np.int32)), trb)
        np.testing.assert_array_equal(fast.numpy().astype(np.int64), want)


def _int_inputs(name: str) -> np.ndarray:
    """Finite float32 inputs around and past an integer grid: every quarter step from
    -(2*lim) to 2*lim, +-1 ulp, and 4096 seeded normals scaled to the range."""
    f = FORMATS[name]
    lim = max(f.int_max, -f.int_min)
    q = np.arange(-8 * lim, 8 * lim + 1) / 4.0
    x = q.astype(np.float32)
    ulp = np.concatenate([np.nextafter(x, np.float32(np.inf)), np.nextafter(x, -np.inf)])
    rnd = (np.random.default_rng(2).standard_normal(4096) * lim).astype(np.float32)
    return np.concatenate([x, ulp, rnd, np.float32([-0.0])]).astype(np.float32)


@pytest.mark.parametrize("mode,nbits,rule", RULES)
@pytest.mark.parametrize("name", INTS)
def test_numpy_finite_int_path_is_the_rule(name, mode, nbits, rule):
    """NumPy's _finite_int_kernel == int_grid_bits, which torch's shim runs to the same bits."""
    p = plan(FORMATS[name], np.dtype(np.float32), Rounding(mode, nbits, rule))
    x = _int_inputs(name)
    if mode == "sr" and nbits == 3:
        x = np.repeat(x, 8)
    rb = _rbits(x.size, nbits) if mode == "sr" else None
    got = np.empty_like(x)
    _finite_int_kernel(p, x, np.abs(x), got, rb)
    want = np.empty(x.size, np.uint32)
    gridrules.int_grid_bits(p, x.view(np.uint32), want, rb, NUMPY_WORDS)
    np.testing.assert_array_equal(got.view(np.uint32), want)


@pytest.mark.parametrize("mode", ["rtn", "sr"])
@pytest.mark.parametrize("name", INTS)
def test_int_rule_nonfinite_on_both_backends(name, mode):
    """NaN (payload and sign kept, quieted), +-inf (clamped) and finite inputs: one rule, the
    same bits through NumPy's and torch's shims."""
    torch = pytest.importorskip("torch")
    from ecosim.torch.bitops import TORCH_WORDS

    p = plan(FORMATS[name], np.dtype(np.float32), Rounding(mode))
    specials = np.uint32([0x7F800001, 0xFFC00005, 0x7F800000, 0xFF800000]).view(np.float32)
    x = np.concatenate([specials, _int_inputs(name)])
    rb = _rbits(x.size, 32) if mode == "sr" else None
    want = np.empty(x.size, np.uint32)
    gridrules.int_grid_bits(p, x.view(np.uint32), want, rb, NUMPY_WORDS)
    f = FORMATS[name]
    assert want[:4].tolist() == [0x7FC00001, 0xFFC00005,
                                 np.float32(f.int_max).view(np.uint32),
                                 np.float32(f.int_min).view(np.uint32)]
    b = torch.from_numpy(x.view(np.int32).copy())
    got = torch.empty_like(b)
    trb = None if rb is None else torch.from_numpy(rb.astype(np.int64))
    gridrules.int_grid_bits(p, b, got, trb, TORCH_WORDS)
    np.testing.assert_array_equal(got.numpy().view(np.uint32), want)
