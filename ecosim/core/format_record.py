"""The :class:`Format` record: its fields, the finfo-style properties derived from them, the
enumerated values, and the bit-level codec (:func:`decode_bits`, :func:`encode_bits`) they rest
on.

The bottom of the formats layer, importing nothing of ecosim but argument checks:
:mod:`ecosim.core.catalog` builds the named formats from it, and :mod:`ecosim.core.formats`
(the public module: lookups by name, custom formats, storage) re-exports it. The special-value
conventions (``nan`` field) are described in :mod:`ecosim.core.formats`.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .checks import check_bool

__all__ = ["Format", "decode_bits", "encode_bits"]

_NAN_KINDS = ("ieee", "fn", "fnuz", "none")
_ROUNDING_TIES = ("even", "away")


@dataclass(frozen=True, kw_only=True)
class Format:
    """A low-precision number format.

    Float formats (``kind="float"``) are defined by ``exponent_bits``, ``mantissa_bits`` and
    ``bias``; value of a normal code ``(-1)**s * 2**(E - bias) * (1 + m / 2**mantissa_bits)``;
    the exponent field 0 holds subnormals ``2**(1 - bias) * m / 2**mantissa_bits`` when
    ``subnormals`` is true, only zero otherwise (flush to zero), or ordinary normal values when
    ``has_zero`` is false (E8M0FNU, which has neither zero nor subnormals).

    Integer formats (``kind="int"``) are the integers ``int_min..int_max`` (two's complement
    ranges for int8/int4/int2, ``-1..1`` for ternary).

    Attributes:
        name: canonical name (``ml_dtypes`` spelling where it exists).
        kind: ``"float"`` or ``"int"``.
        exponent_bits, mantissa_bits, bias: float layout.
        signed: whether a sign bit exists (False only for E8M0FNU-like scale formats).
        nan: special-value convention, one of ``"ieee"``, ``"fn"``, ``"fnuz"``, ``"none"``.
        subnormals: whether the exponent field 0 encodes subnormals.
        has_zero: whether the format has a zero (False for E8M0FNU).
        ties: tie-breaking of round-to-nearest: ``"even"`` (IEEE) or ``"away"`` (E8M0 in
            ``ml_dtypes``, a format with no mantissa bit to make even).
        int_min, int_max: integer range.
        storage_bits: bits per stored code (for ternary: 2).
        dtype_name: the ``ml_dtypes``/NumPy dtype holding one code, if one exists.
        aliases: other names accepted by :func:`get`.
    """

    name: str
    kind: str = "float"
    exponent_bits: int = 0
    mantissa_bits: int = 0
    bias: int = 0
    signed: bool = True
    nan: str = "ieee"
    subnormals: bool = True
    has_zero: bool = True
    ties: str = "even"
    int_min: int = 0
    int_max: int = 0
    storage_bits: int = 0
    dtype_name: str | None = None
    aliases: tuple[str, ...] = ()

    def __post_init__(self):
        for flag in ("signed", "subnormals", "has_zero"):
            object.__setattr__(self, flag, check_bool(getattr(self, flag), flag))
        if self.kind not in ("float", "int"):
            raise ValueError(f"kind must be 'float' or 'int', got {self.kind!r}")
        if self.ties not in _ROUNDING_TIES:
            raise ValueError(f"ties must be one of {_ROUNDING_TIES}, got {self.ties!r}")
        for f in ("exponent_bits", "mantissa_bits", "bias", "int_min", "int_max",
                  "storage_bits"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                raise TypeError(f"{f} must be an int, got {v!r}")
            object.__setattr__(self, f, int(v))
        if self.kind == "float":
            if not 1 <= self.exponent_bits <= 11:
                raise ValueError(f"exponent_bits must be in 1..11, got {self.exponent_bits}")
            if not 0 <= self.mantissa_bits <= 52:
                raise ValueError(f"mantissa_bits must be in 0..52, got {self.mantissa_bits}")
            if self.nan not in _NAN_KINDS:
                raise ValueError(f"nan must be one of {_NAN_KINDS}, got {self.nan!r}")
            if self.nan == "fnuz" and not self.signed:
                raise ValueError("'fnuz' NaN lives in the sign bit: it needs a signed format")
            if self.nan == "ieee" and self.mantissa_bits == 0:
                raise ValueError("'ieee' needs a mantissa bit to tell NaN from inf")
            if not self.has_zero and self.subnormals:
                raise ValueError("a format without zero cannot have subnormals")
            if self.emax < self.emin:
                raise ValueError(f"format {self.name!r} has no finite normal values")
        else:
            if not self.int_min < 0 < self.int_max:
                raise ValueError(f"integer range must contain 0, got {self.int_min}..{self.int_max}")
        if self.storage_bits == 0:
            object.__setattr__(self, "storage_bits", self._natural_bits())

    def _natural_bits(self) -> int:
        if self.kind == "float":
            return int(self.signed) + self.exponent_bits + self.mantissa_bits
        return max(int(self.int_max).bit_length(), int(-self.int_min - 1).bit_length()) + 1

    # -- finfo-style derived properties -------------------------------------------------------
    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def bits(self) -> int:
        """Bits of one code (the storage width)."""
        return self.storage_bits

    @property
    def nmant(self) -> int:
        return self.mantissa_bits

    @property
    def nexp(self) -> int:
        return self.exponent_bits

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal value (ints: 0)."""
        if not self.is_float:
            return 0
        return 1 - self.bias if self.has_zero else -self.bias

    @property
    def emax(self) -> int:
        """Exponent of the largest finite value (ints: exponent of ``int_max``)."""
        if not self.is_float:
            return int(self.int_max).bit_length() - 1
        top = 2**self.exponent_bits - 1
        # The all-ones exponent is reserved (ieee), or holds only NaN when there is no mantissa.
        if self.nan == "ieee" or (self.nan == "fn" and self.mantissa_bits == 0):
            top -= 1
        return top - self.bias

    @property
    def max(self) -> float:
        """Largest finite value."""
        if not self.is_float:
            return float(self.int_max)
        frac = 2.0 - 2.0 ** -self.mantissa_bits
        if self.nan == "fn" and self.mantissa_bits > 0:
            frac -= 2.0 ** -self.mantissa_bits  # S.1111.111 is NaN
        return math.ldexp(frac, self.emax)

    @property
    def min(self) -> float:
        """Most negative finite value (smallest positive value for unsigned formats)."""
        if not self.is_float:
            return float(self.int_min)
        return -self.max if self.signed else self.smallest_subnormal

    @property
    def smallest_normal(self) -> float:
        return math.ldexp(1.0, self.emin) if self.is_float else 1.0

    tiny = smallest_normal

    @property
    def smallest_subnormal(self) -> float:
        if not self.is_float:
            return 1.0
        if self.subnormals:
            return math.ldexp(1.0, self.emin - self.mantissa_bits)
        return self.smallest_normal

    @property
    def eps(self) -> float:
        """Distance from 1.0 to the next larger value (2**-mantissa_bits; ints: 1)."""
        return math.ldexp(1.0, -self.mantissa_bits) if self.is_float else 1.0

    @property
    def epsneg(self) -> float:
        """Distance from 1.0 to the next smaller value (a subnormal step when 1.0 is normal-min)."""
        if not self.is_float:
            return 1.0
        return math.ldexp(1.0, max(-1, self.emin) - self.mantissa_bits)

    @property
    def maxexp(self) -> int:
        """Smallest power of two that overflows (numpy.finfo convention)."""
        return self.emax + 1

    @property
    def minexp(self) -> int:
        return self.emin

    @property
    def has_inf(self) -> bool:
        return self.is_float and self.nan == "ieee"

    @property
    def has_nan(self) -> bool:
        return self.is_float and self.nan != "none"

    @property
    def dtype(self) -> np.dtype | None:
        """The NumPy/``ml_dtypes`` dtype that stores one code, or None."""
        if self.dtype_name is None:
            return None
        if self.dtype_name in ("float16", "int8"):
            return np.dtype(self.dtype_name)
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, self.dtype_name))

    @property
    def code_dtype(self) -> np.dtype:
        """Unsigned integer dtype wide enough for one raw code."""
        for dt in (np.uint8, np.uint16, np.uint32, np.uint64):
            if self.storage_bits <= 8 * np.dtype(dt).itemsize:
                return np.dtype(dt)
        raise AssertionError("unreachable: formats have at most 64 bits")

    # -- enumeration --------------------------------------------------------------------------
    def values(self) -> np.ndarray:
        """Sorted float64 array of all distinct finite values (formats of 16 bits or fewer).

        Signed zero appears once (as +0.0).
        """
        if self.storage_bits > 16:
            raise ValueError(f"{self.name} has {self.storage_bits} bits; values() enumerates "
                             "formats of 16 bits or fewer")
        return self._values

    @cached_property
    def _values(self) -> np.ndarray:
        if not self.is_float:
            v = np.arange(self.int_min, self.int_max + 1, dtype=np.float64)
        else:
            v = decode_bits(np.arange(2**self.storage_bits, dtype=np.uint64), self)
            v = v[np.isfinite(v)]
        v = np.unique(v + 0.0)  # + 0.0 folds -0.0 into +0.0
        v.setflags(write=False)
        return v

    def __repr__(self) -> str:
        if self.is_float:
            return (f"Format({self.name!r}, e{self.exponent_bits}m{self.mantissa_bits}, "
                    f"bias={self.bias}, nan={self.nan!r}, max={self.max:g})")
        return f"Format({self.name!r}, int {self.int_min}..{self.int_max})"

    def replace(self, **changes) -> Format:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)


# -- bit-level encoding ------------------------------------------------------------------------

def decode_bits(codes: np.ndarray, fmt: Format) -> np.ndarray:
    """Float64 values of raw integer codes (the format's bit layout; ints: two's complement)."""
    c = np.asarray(codes).astype(np.int64)
    if not fmt.is_float:
        nb = fmt.storage_bits
        v = np.where(c >= 2 ** (nb - 1), c - 2**nb, c).astype(np.float64)
        bad = (v < fmt.int_min) | (v > fmt.int_max)
        return np.where(bad, np.nan, v)
    E, M = fmt.exponent_bits, fmt.mantissa_bits
    mant = c & (2**M - 1)
    expf = (c >> M) & (2**E - 1)
    sign = (c >> (E + M)) & 1 if fmt.signed else np.zeros_like(c)
    if fmt.has_zero:
        normal = expf > 0
        sub_scale = fmt.subnormals  # exponent field 0: subnormals or flushed to zero
        frac = np.where(normal, 1.0 + np.ldexp(mant.astype(np.float64), -M),
                        np.ldexp(mant.astype(np.float64), -M) if sub_scale else 0.0)
        e = np.where(normal, expf - fmt.bias, fmt.emin)
    else:
        frac = 1.0 + np.ldexp(mant.astype(np.float64), -M)
        e = expf - fmt.bias
    v = np.ldexp(frac, e.astype(np.int64))
    v = np.where(sign == 1, -v, v)
    allones = expf == 2**E - 1
    if fmt.nan == "ieee":
        v = np.where(allones & (mant == 0), np.where(sign == 1, -np.inf, np.inf), v)
        v = np.where(allones & (mant != 0), np.nan, v)
    elif fmt.nan == "fn":
        v = np.where(allones & (mant == 2**M - 1), np.nan, v)
    elif fmt.nan == "fnuz":
        v = np.where((sign == 1) & (expf == 0) & (mant == 0), np.nan, v)
    return v


def encode_bits(values: np.ndarray, fmt: Format) -> np.ndarray:
    """Raw codes of values that lie on the grid (inverse of :func:`decode_bits`).

    NaN maps to the format's NaN code (keeping the sign where the format has two); +-inf to
    the inf codes. Values off the grid raise ValueError (quantize them first).
    """
    v = np.asarray(values, dtype=np.float64)
    cdt = fmt.code_dtype
    if not fmt.is_float:
        if np.isnan(v).any():
            raise ValueError(f"{fmt.name} has no NaN code")
        iv = v.astype(np.int64)
        if not np.array_equal(iv, v) or (iv < fmt.int_min).any() or (iv > fmt.int_max).any():
            raise ValueError(f"values are not on the {fmt.name} grid; quantize them first")
        return (iv & (2**fmt.storage_bits - 1)).astype(cdt)
    E, M = fmt.exponent_bits, fmt.mantissa_bits
    sign = np.signbit(v).astype(np.int64) if fmt.signed else np.zeros(v.shape, np.int64)
    a = np.abs(v)
    with np.errstate(divide="ignore", invalid="ignore"):
        m, e = np.frexp(a)  # a = m * 2**e, m in [0.5, 1)
    e = e.astype(np.int64) - 1
    normal = (e >= fmt.emin) & np.isfinite(a) & (a > 0)
    expf = np.where(normal, e + fmt.bias, 0)
    with np.errstate(invalid="ignore"):
        mant_n = np.ldexp(np.where(normal, 2 * m - 1, 0.0), M)
        mant_s = np.ldexp(np.where(normal | ~np.isfinite(a), 0.0, a), M - fmt.emin)
    mant = np.where(normal, mant_n, mant_s)
    code = (sign << (E + M)) | (expf << M) | np.nan_to_num(mant).astype(np.int64)
    if fmt.nan == "fnuz":
        code = np.where(a == 0, 0, code)  # no negative zero
    nan_code = nan_code_of(fmt, sign)
    inf_code = (sign << (E + M)) | ((2**E - 1) << M)
    code = np.where(np.isnan(v), nan_code, code)
    if fmt.has_inf:
        code = np.where(np.isinf(v), inf_code, code)
    back = decode_bits(code, fmt)
    ok = (back == v) | (np.isnan(back) & np.isnan(v))
    if fmt.nan == "fnuz":
        ok |= (v == 0) & (back == 0)
    if not ok.all():
        bad = v[~ok].ravel()[:3]
        raise ValueError(f"values {bad.tolist()} are not on the {fmt.name} grid; quantize first")
    return code.astype(cdt)


def nan_code_of(fmt: Format, sign: np.ndarray) -> np.ndarray:
    E, M = fmt.exponent_bits, fmt.mantissa_bits
    if fmt.nan == "ieee":
        return (sign << (E + M)) | ((2**E - 1) << M) | (1 << (M - 1))
    if fmt.nan == "fn":
        return (sign << (E + M)) | (2 ** (E + M) - 1)
    if fmt.nan == "fnuz":
        return np.full_like(sign, 1 << (E + M))
    return np.full_like(sign, -1)  # "none": flagged, caught by the round-trip check
