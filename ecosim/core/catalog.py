"""The named formats of docs/theory.md §1, built from one table by two family factories.

Canonical names follow ``ml_dtypes``; aliases are short names people type. Names and aliases are
checked unique when the module is imported.
"""

from __future__ import annotations

from types import MappingProxyType

from .format_record import Format

# name, exponent bits, mantissa bits, bias, NaN convention, aliases
_FLOATS = (
    ("float8_e4m3fn", 4, 3, 7, "fn", ("e4m3", "fp8", "e4m3fn", "fp8_e4m3")),
    ("float8_e5m2", 5, 2, 15, "ieee", ("e5m2", "fp8_e5m2")),
    ("float8_e4m3fnuz", 4, 3, 8, "fnuz", ("e4m3fnuz",)),
    ("float8_e5m2fnuz", 5, 2, 16, "fnuz", ("e5m2fnuz",)),
    ("float8_e4m3", 4, 3, 7, "ieee", ("e4m3ieee",)),
    ("float8_e3m4", 3, 4, 3, "ieee", ("e3m4",)),
    ("float8_e4m3b11fnuz", 4, 3, 11, "fnuz", ("e4m3b11fnuz",)),
    ("float6_e2m3fn", 2, 3, 1, "none", ("e2m3", "fp6_e2m3", "fp6")),
    ("float6_e3m2fn", 3, 2, 3, "none", ("e3m2", "fp6_e3m2")),
    ("float4_e2m1fn", 2, 1, 1, "none", ("e2m1", "fp4", "nvfp4_elem", "mxfp4_elem")),
    ("bfloat16", 8, 7, 127, "ieee", ("bf16",)),
    ("float16", 5, 10, 15, "ieee", ("fp16", "half")),
)

# name, min, max, storage bits, ml_dtypes/NumPy dtype of one code, aliases
_INTS = (
    ("int8", -128, 127, 8, "int8", ("i8",)),
    ("int4", -8, 7, 4, "int4", ("i4",)),
    ("int2", -2, 1, 2, "int2", ("i2",)),
    ("ternary", -1, 1, 2, None, ("int1.58", "ternary158", "bitnet")),
)


def _float_family(name, e, m, bias, nan, aliases) -> Format:
    return Format(name=name, exponent_bits=e, mantissa_bits=m, bias=bias, nan=nan,
                  dtype_name=name, aliases=aliases)


def _int_family(name, lo, hi, bits, dtype_name, aliases) -> Format:
    return Format(name=name, kind="int", int_min=lo, int_max=hi, storage_bits=bits,
                  dtype_name=dtype_name, aliases=aliases)


def _e8m0() -> Format:
    # OCP MX scale format: unsigned, exponent only, no zero, 0xFF is NaN. ml_dtypes rounds
    # ties away from zero here (there is no mantissa bit to make even).
    return Format(name="float8_e8m0fnu", exponent_bits=8, mantissa_bits=0, bias=127, signed=False,
                  nan="fn", subnormals=False, has_zero=False, ties="away",
                  dtype_name="float8_e8m0fnu", aliases=("e8m0", "e8m0fnu", "mx_scale"))


def _build() -> tuple[MappingProxyType, MappingProxyType]:
    formats = ([_float_family(*row) for row in _FLOATS] + [_e8m0()]
               + [_int_family(*row) for row in _INTS])
    by_name: dict[str, Format] = {}
    by_alias: dict[str, Format] = {}
    for f in formats:
        for key in (f.name, *f.aliases):
            if key in by_name or key in by_alias:
                raise RuntimeError(f"format name {key!r} is defined twice")
            (by_name if key == f.name else by_alias)[key] = f
    return MappingProxyType(by_name), MappingProxyType(by_alias)


FORMATS, ALIASES = _build()


def lookup(name: str) -> Format | None:
    """The format called ``name`` (canonical or alias, case-insensitive), or None."""
    key = name.strip().lower()
    return FORMATS.get(key) or ALIASES.get(key)


def markdown_table() -> str:
    """The catalogue as a markdown table (the README's formats table is this, verbatim)."""
    rows = ["| name | aliases | bits | exp/man | bias | max | smallest subnormal | inf | NaN |",
            "|---|---|---|---|---|---|---|---|---|"]
    for f in FORMATS.values():
        aliases = ", ".join(f.aliases)
        if f.is_float:
            layout = f"{f.exponent_bits}/{f.mantissa_bits}" + ("" if f.signed else " unsigned")
            nan = {"ieee": "IEEE", "fn": "all-ones code", "fnuz": "0x80 (no -0)",
                   "none": "none"}[f.nan]
            sub = f"{f.smallest_subnormal:.6g}" if f.subnormals else "none (no zero)"
            rows.append(f"| {f.name} | {aliases} | {f.bits} | {layout} | {f.bias} | "
                        f"{f.max:.6g} | {sub} | {'yes' if f.has_inf else 'no'} | {nan} |")
        else:
            rows.append(f"| {f.name} | {aliases} | {f.bits} | integers {f.int_min}..{f.int_max}"
                        f" | | {f.max:g} | | | |")
    return "\n".join(rows)
