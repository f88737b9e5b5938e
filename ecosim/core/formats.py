"""Number formats as frozen data.

A :class:`Format` describes a grid of representable numbers: a sign/exponent/mantissa floating
point format (FP8, FP6, FP4, bfloat16, float16, E8M0 and custom widths) or a symmetric integer
grid (int8, int4, int2, ternary). Everything else is derived from the fields: the finfo-style
properties (``max``, ``smallest_normal``, ``eps`` ...), the enumerated values, and the
bit-level encoding used for real low-precision storage.

The record itself and its bit-level codec live in :mod:`ecosim.core.format_record`, the named
formats in :mod:`ecosim.core.catalog` (built from the record); this module looks them up
(:func:`get`, :func:`names`) and re-exports :class:`Format`, so imports flow one way:
``format_record -> catalog -> formats``. Rounding onto a grid is :func:`ecosim.quantize`.

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

import numpy as np

from .catalog import FORMATS, lookup
from .format_record import Format, decode_bits, encode_bits
from .format_record import nan_code_of  # noqa: F401  (ecosim.core.rounding's NaN codes)

__all__ = ["Format", "custom", "get", "names", "encode", "decode", "pack", "unpack"]


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
    default_bias = (2 ** (exponent_bits - 1) - 1 if isinstance(exponent_bits, int)
                    and exponent_bits >= 1 else 0)  # else Format reports the width
    if bias is None:
        bias = default_bias
    if name is None:
        name = f"e{exponent_bits}m{mantissa_bits}"
        if bias != default_bias:
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
    if not isinstance(name, str):
        raise TypeError(f"format must be a name or a Format, got {type(name).__name__}")
    fmt = lookup(name)
    if fmt is None:
        raise ValueError(f"unknown format {name!r}; valid names: {', '.join(names(aliases=True))}"
                         f" (or build one with ecosim.core.formats.custom)")
    assert fmt.name in FORMATS
    return fmt


def names(*, aliases: bool = False) -> list[str]:
    """Canonical names of the catalogued formats (and their aliases if asked)."""
    out = list(FORMATS)
    if aliases:
        out += [a for f in FORMATS.values() for a in f.aliases]
    return out


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
