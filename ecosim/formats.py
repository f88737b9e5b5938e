"""Number formats as frozen data.

A :class:`Format` describes a grid of representable numbers: a sign/exponent/mantissa floating
point format (FP8, FP6, FP4, bfloat16, float16, E8M0 and custom widths) or a symmetric integer
grid (int8, int4, int2, ternary). Everything else is derived from the fields: the finfo-style
properties (``max``, ``smallest_normal``, ``eps`` ...), the enumerated values, and the
bit-level encoding used for real low-precision storage.

The named formats live in :mod:`ecosim.catalog`; :func:`get` and :func:`names` look them up.
Rounding onto a grid is :func:`ecosim.quantize`.

Conventions for the special values of a float format (``nan`` field), as in the OCP FP8 spec
and ``ml_dtypes``:

``"ieee"``
    An all-ones exponent field is reserved: mantissa 0 encodes +-inf, anything else NaN.
``"fn"``
    Finite only (no inf); the single all-ones code ``S.1111.111`` (both signs) is NaN. The
    all-ones exponent with other mantissas holds ordinary finite values (E4M3FN, E8M0FNU).
``"fnuz"``
    Finite, no negative zero: the code ``0x80`` (sign bit alone) is the only NaN.
``"none"``
    Every code is a finite number (FP6, FP4).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ._checks import check_bool

__all__ = ["Format", "custom", "get", "names", "encode", "decode", "pack", "unpack"]

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


def custom(exponent_bits: int, mantissa_bits: int, *, bias: int | None = None, nan: str = "ieee",
           subnormals: bool = True, name: str | None = None) -> Format:
    """Build a custom signed float format.

    Args:
        exponent_bits: width of the exponent field (1..11).
        mantissa_bits: width of the mantissa field (0..52); a sweep ``M = 1..23`` with
            ``exponent_bits=8`` reproduces float32's range at every precision.
        bias: exponent bias; default ``2**(exponent_bits - 1) - 1`` (IEEE).
        nan: special-value convention (``"ieee"``, ``"fn"``, ``"fnuz"``, ``"none"``).
        subnormals: keep subnormals (True) or flush them to zero.
        name: defaults to ``"e{E}m{M}"`` plus markers for non-default choices.

    Example:
        >>> custom(8, 7).max == get("bfloat16").max
        True
    """
    if bias is None:
        bias = 2 ** (exponent_bits - 1) - 1
    if name is None:
        name = f"e{exponent_bits}m{mantissa_bits}"
        if bias != 2 ** (exponent_bits - 1) - 1:
            name += f"b{bias}"
        if nan != "ieee":
            name += nan
        if not subnormals:
            name += "_ftz"
    return Format(name=name, exponent_bits=exponent_bits, mantissa_bits=mantissa_bits, bias=bias,
                  nan=nan, subnormals=subnormals)


def get(name: str | Format) -> Format:
    """Look a format up by canonical name or alias (a Format passes through).

    Raises:
        ValueError: unknown name; the message lists the valid ones.
    """
    if isinstance(name, Format):
        return name
    from .catalog import FORMATS, lookup

    if not isinstance(name, str):
        raise TypeError(f"format must be a name or a Format, got {type(name).__name__}")
    fmt = lookup(name)
    if fmt is None:
        raise ValueError(f"unknown format {name!r}; valid names: {', '.join(names(aliases=True))}"
                         f" (or build one with ecosim.formats.custom)")
    assert fmt.name in FORMATS
    return fmt


def names(*, aliases: bool = False) -> list[str]:
    """Canonical names of the catalogued formats (and their aliases if asked)."""
    from .catalog import FORMATS

    out = list(FORMATS)
    if aliases:
        out += [a for f in FORMATS.values() for a in f.aliases]
    return out


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
    nan_code = _nan_code(fmt, sign)
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


def _nan_code(fmt: Format, sign: np.ndarray) -> np.ndarray:
    E, M = fmt.exponent_bits, fmt.mantissa_bits
    if fmt.nan == "ieee":
        return (sign << (E + M)) | ((2**E - 1) << M) | (1 << (M - 1))
    if fmt.nan == "fn":
        return (sign << (E + M)) | (2 ** (E + M) - 1)
    if fmt.nan == "fnuz":
        return np.full_like(sign, 1 << (E + M))
    return np.full_like(sign, -1)  # "none": flagged, caught by the round-trip check


def encode(values: np.ndarray, fmt: Format | str) -> np.ndarray:
    """Store on-grid values in real low-precision storage.

    Returns an ``ml_dtypes`` (or int8/float16) array where the format has a dtype, so an FP8
    tensor really takes one byte per element; otherwise the raw codes in the smallest unsigned
    integer dtype. Values off the grid raise ValueError.
    """
    fmt = get(fmt)
    codes = encode_bits(values, fmt)
    dt = fmt.dtype
    if dt is None:
        return codes
    if fmt.kind == "int":
        return np.asarray(values, dtype=np.float64).astype(np.int64).astype(dt)
    return codes.view(dt) if codes.dtype.itemsize == dt.itemsize else codes.astype(dt)


def decode(stored: np.ndarray, fmt: Format | str, dtype=np.float32) -> np.ndarray:
    """Values of stored codes (the output of :func:`encode`) as ``dtype``."""
    fmt = get(fmt)
    stored = np.asarray(stored)
    dt = fmt.dtype
    if dt is not None and stored.dtype == dt:
        if fmt.kind == "int":
            return stored.astype(np.int64).astype(dtype)
        stored = stored.view(fmt.code_dtype)  # same width: FP4/FP6 types take one byte each
    if stored.dtype.kind != "u":
        raise TypeError(f"expected {fmt.name} storage ({dt}) or unsigned raw codes, "
                        f"got {stored.dtype}")
    return decode_bits(stored, fmt).astype(dtype)


# -- sub-byte packing --------------------------------------------------------------------------

def pack(codes: np.ndarray, bits: int) -> np.ndarray:
    """Pack unsigned codes of 1, 2 or 4 bits into bytes, little end first (flattened)."""
    if bits not in (1, 2, 4):
        raise ValueError(f"pack handles 1, 2 or 4 bits per code, got {bits}")
    c = np.asarray(codes).astype(np.uint8).ravel()
    per = 8 // bits
    c = np.concatenate([c, np.zeros((-c.size) % per, np.uint8)]).reshape(-1, per)
    shifts = (np.arange(per, dtype=np.uint8) * bits)
    return np.bitwise_or.reduce(c << shifts, axis=1).astype(np.uint8)


def unpack(packed: np.ndarray, bits: int, size: int) -> np.ndarray:
    """Inverse of :func:`pack`: the first ``size`` codes as uint8."""
    if bits not in (1, 2, 4):
        raise ValueError(f"unpack handles 1, 2 or 4 bits per code, got {bits}")
    per = 8 // bits
    shifts = (np.arange(per, dtype=np.uint8) * bits)
    c = (np.asarray(packed, np.uint8)[:, None] >> shifts) & np.uint8(2**bits - 1)
    return c.ravel()[:size]
