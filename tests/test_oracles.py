"""The version-aware oracle logic of tests/oracles.py, run against emulated ml_dtypes releases:
a fixed one (the exact rounding) and defective ones (float64 cast through float32 first; the
E8M0 window). Each is classified as the table says, and ecosim equals the exact reference under
all of them. Then torch's casts, compared with ecosim through the same table."""

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import oracles
from ecosim import formats, quantize
from ecosim.core._reference import round_reference


def exact_cast(x, dtype):
    """A fixed release: the exact rounding (no saturation) of ``x``, in ``x``'s dtype."""
    fmt = formats.get(np.dtype(dtype).name)
    return round_reference(x.astype(np.float64), fmt, saturate=False).astype(x.dtype)


def via_float32_cast(x, dtype):
    """The double-rounding defect: float64 inputs are cast to float32 first."""
    return exact_cast(x.astype(np.float32), dtype).astype(x.dtype)


def old_release_cast(x, dtype):
    """Both defects of ml_dtypes 0.5/0.6: float32 first, then the E8M0 window."""
    y = via_float32_cast(x, dtype)
    if np.dtype(dtype).name != "float8_e8m0fnu":
        return y
    x32 = x.astype(np.float32)
    window = (x32 > oracles.E8M0_LOW) & (x32 < 1.5 * oracles.E8M0_LOW)
    return np.where(window, 2 * oracles.E8M0_LOW, y).astype(x.dtype)


def near_midpoints(fmt):
    """float64 inputs a quarter of a float32 ulp either side of every in-range midpoint."""
    v = fmt.values()
    mids = (v[1:] + v[:-1]) / 2
    mids = mids[np.abs(mids) < fmt.max]
    q = np.spacing(mids.astype(np.float32)).astype(np.float64) / 4
    return np.concatenate([mids + q, mids - q])


def emulate(monkeypatch, version, cast):
    monkeypatch.setattr(oracles, "installed", lambda package: oracles.version_tuple(version))
    monkeypatch.setattr(oracles, "ml_cast", cast)


BOTH = {"float64_double_rounding", "e8m0_subnormal_window"}


@pytest.mark.parametrize("version, cast, want", [
    ("0.5.4", old_release_cast, BOTH),
    ("0.6.0", old_release_cast, BOTH),
    ("0.7.0", exact_cast, set()),
    ("0.9.1", exact_cast, set()),  # unmeasured, after the fix: the probe decides
    ("0.4.0", via_float32_cast, {"float64_double_rounding"}),  # unmeasured: the probe decides
])
def test_each_emulated_release_is_classified_and_ecosim_is_exact(monkeypatch, version, cast,
                                                                  want):
    emulate(monkeypatch, version, cast)
    defects = oracles.active("ml_dtypes")
    assert defects == want
    for name in ["e4m3", "e5m2", "fp4", "bf16", "e8m0"]:
        fmt = formats.get(name)
        x = near_midpoints(fmt)
        bit = oracles.compare_with_ml_dtypes(x, fmt, defects)
        # Of inputs that float32 rounds onto a midpoint, the cast through float32 gets those on
        # one side of some midpoints wrong: never none.
        assert (bit > 0) == ("float64_double_rounding" in defects), name
        assert_array_equal(quantize(x, fmt, saturate=False),
                           round_reference(x, fmt, saturate=False))
    window = np.linspace(1.01, 1.49, 50, dtype=np.float32) * np.float32(oracles.E8M0_LOW)
    bit = oracles.compare_with_ml_dtypes(window, formats.get("e8m0"), defects)
    assert bit == (50 if "e8m0_subnormal_window" in defects else 0)
    assert_array_equal(quantize(window, "e8m0"), np.float32(oracles.E8M0_LOW))


@pytest.mark.parametrize("version, cast", [("0.6.0", exact_cast), ("0.7.0", via_float32_cast),
                                           ("0.7.0", old_release_cast)])
def test_a_release_that_contradicts_the_table_fails(monkeypatch, version, cast):
    emulate(monkeypatch, version, cast)
    with pytest.raises(AssertionError, match="remeasure"):
        oracles.active("ml_dtypes")


def test_an_unmodelled_deviation_fails_the_comparison(monkeypatch):
    """A defective cast compared as if it were right (no defects named) is caught."""
    monkeypatch.setattr(oracles, "ml_cast", via_float32_cast)
    fmt = formats.get("e4m3")
    with pytest.raises(AssertionError):
        oracles.compare_with_ml_dtypes(near_midpoints(fmt), fmt, frozenset())


def test_the_installed_releases_agree_with_the_table():
    """The probes of the real oracle agree with the table for the installed ml_dtypes."""
    version = oracles.installed("ml_dtypes")
    for d in oracles.DEFECTS:
        seen = oracles.classify(d, version, oracles.ml_cast)
        if version >= (0, 7):
            assert not seen, d.name


def test_version_strings_and_names():
    assert oracles.version_tuple("0.7.0rc1") == (0, 7, 0)
    assert oracles.version_tuple("2.13.0+cpu") == (2, 13, 0)
    with pytest.raises(ValueError, match="expected a version string"):
        oracles.version_tuple("dev")
    with pytest.raises(ValueError, match="expected one of"):
        oracles.get("nonexistent")
    assert oracles.get("e8m0_subnormal_window").fixed_in == "0.7.0"


def torch_inputs(fmt, dtype):
    """Every value and midpoint, one ulp either side of each midpoint, past the top; for
    float64 also the inputs that float32 rounds onto a midpoint."""
    v = fmt.values()
    mids = (v[1:] + v[:-1]) / 2
    step = v[-1] - v[-2]
    pts = np.concatenate([v, mids, [fmt.max + step / 2, fmt.max + step, fmt.max * 4]])
    pts = np.concatenate([pts, -pts])
    pts = pts[np.abs(pts) <= np.finfo(dtype).max].astype(dtype)
    x = [pts, np.nextafter(pts, dtype(np.inf)), np.nextafter(pts, dtype(-np.inf))]
    if dtype == np.float64:
        x.append(near_midpoints(fmt))
    return np.concatenate(x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", oracles.TORCH_FLOATS)
def test_torch_casts_equal_ecosim_where_torch_is_right(name, dtype):
    """torch's Tensor.to equals ecosim's RTN, except where the installed release's known
    defects bite (float64 cast through float32; E4M3FN's cast saturates)."""
    pytest.importorskip("torch")
    defects = oracles.active("torch")
    fmt = formats.get(name)
    bit = oracles.compare_with_torch(torch_inputs(fmt, dtype), fmt, defects)
    bites = ((dtype == np.float64 and "torch_float64_double_rounding" in defects)
             or (name == "float8_e4m3fn" and "torch_e4m3fn_saturates" in defects))
    assert (bit > 0) == bites
