"""SR's two count rules (``sr_rule="floor"``, the default, and ``"nearest"``).

With ``n`` random bits and the position ``p`` of ``|x|`` between its neighbours, ``"floor"`` rounds
up for exactly ``floor(p * 2**n)`` of the ``2**n`` words and ``"nearest"`` for
``rint(p * 2**n)`` (ties to even). Checked by enumerating every word, against gfloat's
``StochasticFastest`` and ``Stochastic`` modes, against the exact bias formulas of
docs/theory.md §2.2, between NumPy and torch bit for bit, and the default against a hash of
the output of the code before the option existed.
"""

import hashlib

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from ecosim import formats
from ecosim.core._reference import round_reference
from ecosim.core.rounding import quantize
from rounding_probes import probe_points

RULES = ("floor", "nearest")


def _count_rule(p, n, rule):
    """The number of the 2**n words that round up, from the exact position p (float64)."""
    scaled = np.ldexp(p, n)
    return (np.rint(scaled) if rule == "nearest" else np.floor(scaled)).astype(np.int64)


def _up_counts(x, fmt, n, rule, lo, hi):
    """For each x in (lo, hi): how many of all 2**n words round it up (enumerated)."""
    words = np.arange(2**n, dtype=np.uint32)
    xs = np.repeat(x, words.size)
    rb = np.tile(words, x.size)
    q = quantize(xs, fmt, "sr", rbits=rb, nbits=n, sr_rule=rule).reshape(x.size, words.size)
    assert np.all((q == lo) | (q == hi))
    return (q == hi).sum(axis=1)


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("n", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("name,lo,hi", [("e4m3", 1.0, 1.125), ("e4m3", 2.0**-9, 2 * 2.0**-9),
                                        ("int4", 3.0, 4.0), ("e2m1", 4.0, 6.0)])
def test_count_of_up_words_is_the_rule(rule, n, name, lo, hi):
    """All 2**n words enumerated: floor(p 2^n) of them round up, or rint(p 2^n) (ties even)."""
    fmt = formats.get(name)
    m = 12  # p = i / 2**12 has more bits than n: the rules differ; ties at odd multiples of 2**-(n+1)
    p = np.arange(1, 2**m) / 2.0**m
    x = lo + p * (hi - lo)  # exact: hi - lo is a power of two and p has 12 bits
    counts = _up_counts(x, fmt, n, rule, lo, hi)
    assert_array_equal(counts, _count_rule(p, n, rule))
    if rule == "nearest":
        ties = p * 2**n % 1 == 0.5
        assert ties.any()
        assert np.all(counts[ties] % 2 == 0)  # ties go to the even count
        assert np.all(np.abs(counts / 2**n - p) <= 2.0 ** -(n + 1))
    else:
        assert np.all((counts / 2**n <= p) & (counts / 2**n > p - 2.0**-n))


@pytest.mark.parametrize("n", [2, 4, 8])
def test_mean_bias_matches_the_formula(n):
    """Over p = i / 2**m (i = 0..2**m - 1), the mean of P(up) - p is exactly
    -2**-(n+1) * (1 - 2**(n-m)) for floor and exactly 0 for nearest (every error of the floor
    rule is <= 0; the nearest rule's errors cancel in pairs, and its ties alternate)."""
    fmt = formats.get("e4m3")
    m = 12
    p = np.arange(2**m) / 2.0**m
    x = 1.0 + p * 0.125
    for rule, want in (("floor", -(2.0 ** -(n + 1)) * (1 - 2.0 ** (n - m))), ("nearest", 0.0)):
        bias = np.mean(_up_counts(x, fmt, n, rule, 1.0, 1.125) / 2**n - p)
        # Sums of multiples of 2**-m / 2**m in float64: exact; a tolerance of 1e-15 all the same.
        assert abs(bias - want) <= 1e-15, (rule, bias, want)


def test_rules_agree_when_p_has_few_bits():
    """With p = i / 2**n exactly, rint = floor: both rules give the same bits."""
    fmt = formats.get("e4m3")
    n = 3
    x = 1.0 + np.arange(2**n) / 2**n * 0.125
    words = np.arange(2**n, dtype=np.uint32)
    xs, rb = np.repeat(x, words.size), np.tile(words, x.size)
    assert_array_equal(quantize(xs, fmt, "sr", rbits=rb, nbits=n),
                       quantize(xs, fmt, "sr", rbits=rb, nbits=n, sr_rule="nearest"))


GFLOAT = {"float8_e4m3fn": "format_info_ocp_e4m3", "float8_e5m2": "format_info_ocp_e5m2",
          "float6_e3m2fn": "format_info_ocp_e3m2", "float4_e2m1fn": "format_info_ocp_e2m1",
          "bfloat16": "format_info_bfloat16"}


@pytest.mark.parametrize("name", list(GFLOAT))
@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_rules_equal_gfloat_stochastic_modes(name, n):
    """float64 inputs: "nearest" is gfloat's RoundMode.Stochastic (fed the low n bits of each
    word as srbits). Not an oracle for "floor": gfloat's StochasticFastest decides
    ``delta + srbits * 2**-n >= 1.0`` in float64, whose sum rounds up to 1.0 when ``delta`` is
    within an ulp of ``1 - srbits * 2**-n`` (seen on probe points next to the smallest
    subnormal); the floor rule is checked by enumeration and against the exact reference."""
    gfloat = pytest.importorskip("gfloat", reason="gfloat (the test extra) is not installed")
    import gfloat.formats as gff
    fmt = formats.get(name)
    x = probe_points(fmt, np.float64)
    x = x[np.isfinite(x) & (np.abs(x) <= fmt.max)]
    rb = np.random.default_rng(n).integers(0, 2**32, x.size, dtype=np.uint64)
    low = (rb & np.uint64(2**n - 1)).astype(np.int64)
    for rule, mode in (("nearest", gfloat.RoundMode.Stochastic),):
        ours = quantize(x, fmt, "sr", rbits=rb, nbits=n, sr_rule=rule)
        theirs = gfloat.round_ndarray(getattr(gff, GFLOAT[name]), x, mode, sat=True,
                                      srbits=low, srnumbits=n)
        assert_array_equal(ours, theirs, err_msg=rule)


@pytest.mark.parametrize("name", ["e4m3", "e5m2", "e2m1", "int4", "int8", "e8m0", "fp16"])
def test_nearest_equals_the_reference(name):
    """Every dtype path (normal bits, small values, integer grids) against the slow reference."""
    fmt = formats.get(name)
    rng = np.random.default_rng(3)
    for dt in (np.float32, np.float64):
        x = probe_points(fmt, dt)
        x = x[np.isfinite(x)]
        for n in (1, 3, 8, 20, 32):
            rb = rng.integers(0, 2**32, x.size, dtype=np.uint64).astype(np.uint32)
            ours = quantize(x, fmt, "sr", rbits=rb, nbits=n, sr_rule="nearest")
            ref = round_reference(x.astype(np.float64), fmt, "sr", rbits=rb, nbits=n,
                                  sr_rule="nearest")
            assert_array_equal(ours.astype(np.float64), ref)


@pytest.mark.parametrize("name", ["e4m3", "e5m2", "e2m1", "e3m2", "int4", "int8", "e8m0", "bf16",
                                  "fp16"])
def test_numpy_equals_torch_bit_for_bit(name):
    torch = pytest.importorskip("torch")
    from ecosim.torch.rounding import quantize as tquantize
    fmt = formats.get(name)
    for dt, ui in ((np.float32, np.uint32), (np.float64, np.uint64)):
        x = probe_points(fmt, dt)
        for n in (1, 2, 5, 8, 13, 32):
            for rule in RULES:
                ours = quantize(x, fmt, "sr", key=(n, 5), nbits=n, sr_rule=rule)
                theirs = tquantize(torch.from_numpy(x), fmt, "sr", key=(n, 5), nbits=n,
                                   sr_rule=rule).numpy()
                assert_array_equal(ours.view(ui), theirs.view(ui), err_msg=f"{dt} {n} {rule}")


def test_bad_rule_raises():
    with pytest.raises(ValueError, match="sr_rule"):
        quantize(np.ones(2), "e4m3", "sr", key=0, sr_rule="round")


def test_default_output_unchanged():
    """The default (and sr_rule="floor") gives the bits of the code before sr_rule existed:
    the hash was computed with that code on this input."""
    rng = np.random.default_rng(20261201)
    x = np.concatenate([rng.standard_normal(4096) * 2.0 ** rng.integers(-12, 10, 4096),
                        [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, 3e38]])
    digests = []
    for kw in ({}, {"sr_rule": "floor"}):
        h = hashlib.sha256()
        for dt in (np.float32, np.float64):
            for f in ("e4m3", "e5m2", "e2m1", "int4", "bf16"):
                for n in (1, 2, 4, 8, 32):
                    q = quantize(x.astype(dt), f, "sr", key=(7, 11), nbits=n, **kw)
                    h.update(np.ascontiguousarray(q).tobytes())
                h.update(np.ascontiguousarray(quantize(x.astype(dt), f)).tobytes())
        digests.append(h.hexdigest())
    want = "d81ca81256e162ee0903b06bc53e8f87f7061119d806cd0d49c57a2c043de4ef"
    assert digests == [want, want]


@pytest.mark.parametrize("granularity", ["tensor", "row", 8])
@pytest.mark.parametrize("rule", RULES)
def test_quantizer_passes_the_rule(granularity, rule):
    """Quantizer(sr_rule=...) equals quantize on the scaled values with the same bits and rule,
    for the value path and for encode/decode (NumPy and torch, bit for bit)."""
    from ecosim import Quantizer
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 16)).astype(np.float32)
    rb = rng.integers(0, 2**32, x.shape, dtype=np.uint32)
    q = Quantizer("e4m3", "sr", granularity=granularity, nbits=3, sr_rule=rule)
    s = q.scales(x)
    xb = x.reshape(4, 2, 8) if granularity == 8 else x
    sb = s.reshape(4, 2, 1) if granularity == 8 else s
    want = (quantize(xb / sb, "e4m3", "sr", rbits=rb.reshape(xb.shape), nbits=3,
                     sr_rule=rule) * sb).reshape(x.shape)
    assert_array_equal(q(x, rbits=rb), want)
    assert_array_equal(q.decode(q.encode(x, rbits=rb)), want)
    other = Quantizer("e4m3", "sr", granularity=granularity, nbits=3,
                      sr_rule="floor" if rule == "nearest" else "nearest")
    assert not np.array_equal(other(x, rbits=rb), want)  # the rule is not ignored
    torch = pytest.importorskip("torch")
    import ecosim.torch as et
    qt = et.Quantizer("e4m3", "sr", granularity=granularity, nbits=3, sr_rule=rule)
    assert_array_equal(qt(torch.from_numpy(x), rbits=torch.from_numpy(rb.astype(np.int64)))
                       .numpy(), want)


def test_quantizer_bad_rule_raises():
    from ecosim import Quantizer
    with pytest.raises(ValueError, match="sr_rule must be one of"):
        Quantizer("e4m3", "sr", sr_rule="round")


def test_optimizer_weight_writes_use_the_rule():
    """An optimizer's weight write with a few-bit SR quantizer follows its rule, on the
    plain-cast fast path (fixed scale 1) and the scaled path: the initial write equals
    ``q(w, key=fold_in(key, "init", name))``, and the two rules give different weights."""
    from ecosim import Quantizer, rng
    from ecosim.optim import sgdm
    w0 = {"w": np.random.default_rng(0).standard_normal(256).astype(np.float32)}
    for scale in (1.0, "absmax"):
        outs = []
        for rule in RULES:
            q = Quantizer("e4m3", "sr", scale=scale, nbits=2, sr_rule=rule)
            w, _ = sgdm(0.01, 0.9, scheme="naive", weights=q).init(w0, key=5)
            assert_array_equal(w["w"], q(w0["w"], key=rng.fold_in(5, "init", "w")))
            outs.append(w["w"])
        assert not np.array_equal(*outs), scale
