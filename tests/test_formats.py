"""Formats: catalogue, finfo-style properties against ml_dtypes, enumeration, storage."""

import warnings

import ml_dtypes
import numpy as np
import pytest
from numpy.testing import assert_array_equal

from ecosim import formats
from ecosim.core.formats import custom, decode, decode_bits, encode, pack, unpack

ML_DTYPE_FLOATS = [n for n in formats.names() if formats.get(n).is_float]
FINFO_FIELDS = ["bits", "eps", "epsneg", "max", "min", "maxexp", "minexp", "nexp", "nmant",
                "smallest_normal", "smallest_subnormal", "tiny"]


@pytest.mark.parametrize("name", ML_DTYPE_FLOATS)
def test_properties_equal_ml_dtypes_finfo(name):
    fmt = formats.get(name)
    fi = ml_dtypes.finfo(fmt.dtype)
    for field in FINFO_FIELDS:
        assert float(getattr(fmt, field)) == float(getattr(fi, field)), field


@pytest.mark.parametrize("name", ML_DTYPE_FLOATS)
def test_every_code_decodes_as_ml_dtypes_and_reencodes_to_itself(name):
    fmt = formats.get(name)
    codes = np.arange(2**fmt.bits, dtype=fmt.code_dtype)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        theirs = codes.view(fmt.dtype).astype(np.float64)
    ours = decode_bits(codes, fmt)
    assert_array_equal(ours, theirs)  # NaN where they have NaN
    ok = ~np.isnan(ours)
    # Every non-NaN code is its own encoding (negative zero included where it exists).
    assert_array_equal(formats.encode_bits(ours[ok], fmt), codes[ok])
    # Storage round trip through the real dtype.
    stored = encode(ours[ok], fmt)
    assert stored.dtype == fmt.dtype
    assert_array_equal(decode(stored, fmt, np.float64), ours[ok])


def test_fp8_storage_is_one_byte_per_element():
    x = formats.get("e4m3").values()
    stored = encode(np.resize(x, 1000), "e4m3")
    assert stored.dtype == ml_dtypes.float8_e4m3fn and stored.nbytes == 1000


def test_values_are_sorted_unique_and_counted():
    # E4M3FN: 256 codes - 2 NaN - 1 duplicate zero = 253 distinct finite values.
    assert formats.get("e4m3").values().size == 253
    assert formats.get("e5m2").values().size == 256 - 6 - 2 - 1  # 6 NaN, 2 inf, -0
    assert formats.get("fp4").values().size == 15
    assert formats.get("float8_e4m3fnuz").values().size == 255
    assert formats.get("e8m0").values().size == 255
    assert_array_equal(formats.get("ternary").values(), [-1, 0, 1])
    assert_array_equal(formats.get("int4").values(), np.arange(-8, 8))
    for n in formats.names():
        v = formats.get(n).values()
        assert (np.diff(v) > 0).all() and v.dtype == np.float64
    with pytest.raises(ValueError, match="16 bits or fewer"):
        custom(8, 23).values()


def test_names_and_aliases():
    assert formats.get("fp8") is formats.get("float8_e4m3fn")
    assert formats.get("E4M3") is formats.get("e4m3")
    assert formats.get("bf16").name == "bfloat16"
    assert formats.get("int1.58").name == "ternary"
    assert "float8_e4m3fn" in formats.names() and "fp8" in formats.names(aliases=True)
    with pytest.raises(ValueError, match="valid names:.*float8_e4m3fn"):
        formats.get("fp9")
    with pytest.raises(TypeError):
        formats.get(8)


def test_spec_table():
    table = {"float8_e4m3fn": 448, "float8_e5m2": 57344, "float8_e4m3fnuz": 240,
             "float8_e5m2fnuz": 57344, "float6_e2m3fn": 7.5, "float6_e3m2fn": 28,
             "float4_e2m1fn": 6, "float8_e8m0fnu": 2.0**127, "int8": 127, "int4": 7, "int2": 1,
             "ternary": 1}
    for name, mx in table.items():
        assert formats.get(name).max == mx


def test_formats_are_frozen_and_validated():
    f = formats.get("e4m3")
    with pytest.raises(AttributeError):
        f.bias = 3
    with pytest.raises(ValueError, match="exponent_bits"):
        custom(0, 3)
    with pytest.raises(ValueError, match="nan must be"):
        custom(4, 3, nan="maybe")
    with pytest.raises(ValueError, match="integer range"):
        formats.Format(name="bad", kind="int", int_min=1, int_max=3)


def test_custom_formats_match_named_ones():
    assert custom(8, 7).max == formats.get("bf16").max
    assert custom(5, 10).smallest_subnormal == formats.get("fp16").smallest_subnormal
    assert custom(4, 3, nan="fn").max == 448
    assert_array_equal(custom(4, 3, nan="fn").values(), formats.get("e4m3").values())
    assert custom(4, 3, subnormals=False).smallest_subnormal == 2.0**-6
    for m in range(1, 24):
        f = custom(8, m)
        assert f.eps == 2.0**-m and f.max == (2 - 2.0**-m) * 2.0**127


def test_pack_unpack_round_trip():
    rng = np.random.default_rng(0)
    for bits in (1, 2, 4):
        c = rng.integers(0, 2**bits, 1001).astype(np.uint8)
        p = pack(c, bits)
        assert p.nbytes == -(-1001 * bits // 8)
        assert_array_equal(unpack(p, bits, 1001), c)
    with pytest.raises(ValueError):
        pack(c, 3)


def test_encode_refuses_values_off_the_grid():
    with pytest.raises(ValueError, match="not on the"):
        encode(np.array([1.01]), "e4m3")
    with pytest.raises(ValueError, match="not on the"):
        encode(np.array([0.5]), "int4")
