"""The oracles' known defects, in one place: which release has which, a probe that detects each
from behaviour, and a model of what a defective oracle returns.

Oracle tests use it so that they assert a defect exactly where a release has it and equality
everywhere else, and keep passing when a release fixes it. ecosim's exact reference
(:func:`ecosim.core._reference.round_reference`) decides the truth in every case.

A defect's status on the installed release is read from the table and checked against the
probe: a release inside the measured range must show the defect, one at or after ``fixed_in``
must not (a disagreement fails with a message asking to remeasure), and any other release is
classified by the probe alone.

To check another release against the table without touching the environment::

    pip install --no-deps --target /tmp/ml ml_dtypes==0.6.0
    PYTHONPATH=/tmp/ml pytest tests/test_rounding.py tests/test_oracles.py -k "ml_dtypes or table"
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from importlib import metadata

import numpy as np
from numpy.testing import assert_array_equal

from ecosim import formats
from ecosim.core._reference import round_reference
from ecosim.core.rounding import quantize

E8M0_LOW = 2.0**-127  # E8M0's smallest value


def version_tuple(text: str) -> tuple[int, ...]:
    """The leading release numbers of a version string: ``"0.7.0rc1"`` -> ``(0, 7, 0)``."""
    m = re.match(r"\d+(\.\d+)*", text)
    if m is None:
        raise ValueError(f"expected a version string such as '0.7.0', got {text!r}")
    return tuple(int(p) for p in m.group(0).split("."))


def installed(package: str) -> tuple[int, ...]:
    """The installed release of ``package`` as a tuple of ints."""
    return version_tuple(metadata.version(package))


def ml_cast(x: np.ndarray, dtype) -> np.ndarray:
    """The ml_dtypes oracle: cast ``x`` to ``dtype`` and back to ``x.dtype`` (warnings off)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return x.astype(dtype).astype(x.dtype)


def _midpoint_neighbours(fmt) -> np.ndarray:
    """float64 inputs 2**-30 (relative) either side of the midpoint above 1.0: float32 rounds
    both onto the midpoint, so a cast through float32 gets one of them wrong."""
    v = fmt.values()
    hi = v[v > 1.0][0]
    mid = (1.0 + hi) / 2
    return np.array([mid * (1 + 2.0**-30), mid * (1 - 2.0**-30)])


@dataclass(frozen=True)
class Defect:
    """One known oracle defect.

    ``measured``: releases on which it was measured present; ``fixed_in``: the first release
    measured without it (``None``: not fixed in any release measured). ``formats`` lists the
    formats it affects and ``input_dtype`` the input precision where it shows.
    """

    name: str
    package: str
    kind: str  # "double_rounding", "e8m0_window" or "saturating_cast"
    summary: str
    measured: tuple[str, ...]
    fixed_in: str | None
    formats: tuple[str, ...]
    input_dtype: type

    def expected(self, version: tuple[int, ...]) -> bool | None:
        """What the table says about ``version``: present, absent, or ``None`` (unmeasured)."""
        if self.fixed_in is not None and version >= version_tuple(self.fixed_in):
            return False
        seen = [version_tuple(v) for v in self.measured]
        if min(seen) <= version <= max(seen):
            return True
        return None

    def probe(self, cast) -> bool:
        """Whether ``cast(x, dtype)`` shows this defect (a handful of inputs per format)."""
        return any(self._probe_one(cast, formats.get(n)) for n in self.formats)

    def _probe_one(self, cast, fmt) -> bool:
        if self.kind == "double_rounding":
            x = _midpoint_neighbours(fmt)
            return bool((cast(x, fmt.dtype) != round_reference(x, fmt, saturate=False)).any())
        if self.kind == "e8m0_window":
            x = np.array([1.25 * E8M0_LOW], np.float32)
            return bool(cast(x, fmt.dtype)[0] == 2 * E8M0_LOW)
        if self.kind == "saturating_cast":
            x = np.array([fmt.max * 4], np.float32)
            return bool(cast(x, fmt.dtype)[0] == fmt.max)
        raise ValueError(f"no probe for defect kind {self.kind!r}")


ML_DTYPES_FLOATS = tuple(n for n in formats.names()
                         if formats.get(n).is_float and n != "float16")
# Formats with a torch dtype whose cast rounds to nearest (torch's E8M0 cast follows other rules:
# zero goes to 2**-127 and overflow saturates).
TORCH_FLOATS = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "bfloat16")

# Measured with the same numpy (2.4.6) on ml_dtypes 0.5.4, 0.6.0 and 0.7.0 and on torch 2.13.0
# (CPU): every code, every midpoint and one float32 ulp either side, overflow and the float32
# subnormal range.
DEFECTS = (
    Defect("float64_double_rounding", "ml_dtypes", "double_rounding",
           "float64 inputs are cast to float32 first, then rounded again (double rounding)",
           measured=("0.5.4", "0.6.0"), fixed_in="0.7.0",
           formats=ML_DTYPES_FLOATS, input_dtype=np.float64),
    Defect("e8m0_subnormal_window", "ml_dtypes", "e8m0_window",
           "float8_e8m0fnu sends float32 inputs in (2**-127, 1.5 * 2**-127) to 2**-126",
           measured=("0.5.4", "0.6.0"), fixed_in="0.7.0",
           formats=("float8_e8m0fnu",), input_dtype=np.float32),
    Defect("torch_float64_double_rounding", "torch", "double_rounding",
           "Tensor.to(fp8 or bfloat16) casts float64 to float32 first (double rounding)",
           measured=("2.13.0",), fixed_in=None, formats=TORCH_FLOATS, input_dtype=np.float64),
    Defect("torch_e4m3fn_saturates", "torch", "saturating_cast",
           "Tensor.to(float8_e4m3fn) saturates overflow and inf to +-448 (ecosim: NaN, as the "
           "format's own rule)", measured=("2.13.0",), fixed_in=None,
           formats=("float8_e4m3fn",), input_dtype=np.float32),
)


def get(name: str) -> Defect:
    """The defect called ``name``."""
    for d in DEFECTS:
        if d.name == name:
            return d
    raise ValueError(f"expected one of {[d.name for d in DEFECTS]}, got {name!r}")


def classify(defect: Defect, version: tuple[int, ...], cast) -> bool:
    """Whether ``defect`` is present, from the probe, checked against the table for
    ``version`` (``AssertionError`` when they disagree)."""
    seen = defect.probe(cast)
    want = defect.expected(version)
    if want is not None and seen != want:
        v = ".".join(map(str, version))
        raise AssertionError(
            f"{defect.package} {v}: defect {defect.name!r} is {'present' if seen else 'absent'}"
            f" but tests/oracles.py says {'present' if want else 'absent'}; remeasure it")
    return seen


def torch_cast(x: np.ndarray, dtype) -> np.ndarray:
    """The torch oracle: ``Tensor.to`` the torch dtype named like ``dtype`` and back."""
    import torch

    t = torch.from_numpy(np.ascontiguousarray(x)).to(getattr(torch, np.dtype(dtype).name))
    return t.to(torch.float64).numpy().astype(x.dtype)


def active(package: str = "ml_dtypes") -> frozenset[str]:
    """Names of the defects of the installed ``package`` ("ml_dtypes" or "torch"); uses the
    module's ``ml_cast`` or ``torch_cast``, so a test may replace them to emulate a release."""
    casts = {"ml_dtypes": "ml_cast", "torch": "torch_cast"}
    if package not in casts:
        raise ValueError(f"expected one of {sorted(casts)}, got {package!r}")
    cast = globals()[casts[package]]
    version = installed(package)
    return frozenset(d.name for d in DEFECTS
                     if d.package == package and classify(d, version, cast))


def deviation(x: np.ndarray, fmt, defects) -> tuple[np.ndarray, np.ndarray]:
    """Where the ``defects`` (names) make an oracle's cast of ``x`` differ from the exact
    rounding without saturation, and what the cast returns there: ``(mask, values)`` (values
    valid under mask).

    ``x`` is float32 or float64; inputs that are not finite, or not finite in float32, are
    never in the mask."""
    fmt = formats.get(fmt)
    kinds = {get(n).kind for n in defects if fmt.name in get(n).formats}
    x = np.asarray(x)
    with np.errstate(over="ignore"):
        x32 = x.astype(np.float32)
    ok = np.isfinite(x) & np.isfinite(x32)
    if not fmt.signed:
        ok &= x > 0
    xs = np.where(ok, x, 1.0).astype(np.float64)
    exact = round_reference(xs, fmt, saturate=False)
    seen_in = xs  # the value the oracle rounds
    if x.dtype == np.float64 and "double_rounding" in kinds:
        seen_in = np.where(ok, x32, 1.0).astype(np.float64)
    values = round_reference(seen_in, fmt, saturate="saturating_cast" in kinds)
    if "e8m0_window" in kinds:
        window = (seen_in > E8M0_LOW) & (seen_in < 1.5 * E8M0_LOW)
        values = np.where(window, 2 * E8M0_LOW, values)
    mask = ok & ~((values == exact) | (np.isnan(values) & np.isnan(exact)))
    return mask, values.astype(x.dtype)


def bits_of(a: np.ndarray) -> np.ndarray:
    """The bit patterns of a float array, as unsigned integers of the same width."""
    a = np.asarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def _compare_where_defects_bite(x: np.ndarray, fmt, defects, cast) -> tuple:
    """The checks both comparisons share: where the ``defects`` bite, ``cast(x, dtype)``
    returns the defect's model and ecosim the exact rounding. Returns ``(ours, theirs,
    bites)`` for the caller to compare the rest."""
    fmt = formats.get(fmt)
    ours = quantize(x, fmt, "rtn", saturate=False)
    theirs = cast(x, fmt.dtype)
    bites, model = deviation(x, fmt, defects)
    assert_array_equal(theirs[bites], model[bites])
    exact = round_reference(x[bites].astype(np.float64), fmt, saturate=False)
    assert_array_equal(ours[bites], exact.astype(x.dtype))
    return ours, theirs, bites


def compare_with_ml_dtypes(x: np.ndarray, fmt, defects) -> int:
    """Assert that ecosim's RTN (no saturation) equals the ml_dtypes cast of ``x`` bit for bit,
    except where the ``defects`` bite: there the cast returns what the defect's model says and
    ecosim returns the exact rounding. Returns how many inputs the defects bit."""
    ours, theirs, bites = _compare_where_defects_bite(x, fmt, defects, ml_cast)
    assert_array_equal(bits_of(ours[~bites]), bits_of(theirs[~bites]))
    return int(bites.sum())


def compare_with_torch(x: np.ndarray, fmt, defects) -> int:
    """As :func:`compare_with_ml_dtypes` for torch's ``Tensor.to`` cast, comparing values (NaN
    equal to NaN) and the signs of non-NaN values rather than bits. Returns how many inputs
    the defects bit."""
    ours, theirs, bites = _compare_where_defects_bite(x, fmt, defects, torch_cast)
    assert_array_equal(ours[~bites], theirs[~bites])
    num = ~bites & ~np.isnan(ours)
    assert_array_equal(np.signbit(ours[num]), np.signbit(theirs[num]))
    return int(bites.sum())
