"""Probe sets shared by the NumPy and torch rounding tests (tests/test_rounding.py,
tests/test_torch_core.py, tests/test_bad_input.py, tests/test_torch_bad_input.py). NumPy
only: importing this module needs neither gfloat nor torch, so the torch tests collect on a
machine (a GPU box) without the test extras."""

import numpy as np


def probe_points(fmt, dtype):
    """Every value, every midpoint, one ulp either side of both, past max, subnormals."""
    v = fmt.values()
    mids = (v[1:] + v[:-1]) / 2  # exact: midpoints need one more bit than the format has
    top_step = v[-1] - v[-2]
    past = [fmt.max + top_step / 2, fmt.max + top_step, fmt.max * 1.5, fmt.max * 4]
    pts = np.concatenate([v, mids, past]).astype(np.float64)
    pts = pts[np.abs(pts) <= np.finfo(dtype).max].astype(dtype)
    pts = np.concatenate([pts, -pts])
    ulp_up = np.nextafter(pts, dtype(np.inf))
    ulp_dn = np.nextafter(pts, dtype(-np.inf))
    rng = np.random.default_rng(0)
    tiny = (rng.standard_normal(20_000) * fmt.smallest_normal).astype(dtype)
    wide = np.clip(rng.standard_normal(20_000) * fmt.max / 3, -1e38, 1e38).astype(dtype)
    return np.concatenate([pts, ulp_up, ulp_dn, tiny, wide])



def tiny_blocks(dtype, *extra_rows):
    """Rows of 3 whose absmax is subnormal, below float32's range or 0 (a scale that must not
    become 0, inf or NaN), then ``extra_rows``, in ``dtype``."""
    t = np.finfo(dtype).smallest_subnormal
    return np.array([[t, 0.0, -t], [3 * t, t, 0.0], [1e-40, -3e-41, 7e-42],
                     [1e-310, 2e-320, 0.0], [0.0, 0.0, 0.0], *extra_rows]).astype(dtype)

F32_SPECIALS = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF,
                         0x7F800000, 0xFF800000, 0, 0x80000000, 1, 0x80000001, 0x00400000,
                         0x007FFFFF, 0x7F7FFFFF, 0xFF7FFFFF], np.uint32).view(np.float32)
F64_SPECIALS = np.array([0x7FF8000000000000, 0xFFF8000000000000, 0x7FF0000000000001,
                         0xFFF0000000000001, 0x7FFFFFFFFFFFFFFF, 0x7FF0000000000000,
                         0xFFF0000000000000, 0, 0x8000000000000000, 1, 0x8000000000000001,
                         0x000FFFFFFFFFFFFF, 0x7FEFFFFFFFFFFFFF], np.uint64).view(np.float64)


def bits_of(a):
    """The bit patterns of a float array, as unsigned integers of its width."""
    a = np.asarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])
