"""The Rounding record and round toward zero ("rtz"): the record is checked once and carries
everything; RTZ equals the exact reference on every small format, the torch backend equals
NumPy bit for bit, its codes equal the encoding of its values, and the optimizers run it."""

import re

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import ecosim
from ecosim import formats
from ecosim.core._reference import round_reference
from ecosim.core.rounding_modes import MODES, RULES, Rounding
from rounding_probes import F32_SPECIALS, F64_SPECIALS, bits_of, probe_points

SMALL = [n for n in formats.names() if formats.get(n).bits <= 16]


# -- the record --------------------------------------------------------------------------------

def test_modes_are_the_rules_and_the_record_normalises():
    assert MODES == ("rtn", "sr", "rtz") and tuple(RULES) == MODES
    assert [RULES[m].stochastic for m in MODES] == [False, True, False]
    assert Rounding("rtn", nbits=8, sr_rule="nearest") == Rounding("rtn")
    assert Rounding("sr", nbits=8) != Rounding("sr")
    r = Rounding("sr", 8, "nearest", np.bool_(False))
    assert (r.nbits, r.sr_rule, r.saturate, r.stochastic) == (8, "nearest", False, True)
    assert type(r.saturate) is bool
    assert Rounding.of(r) is r and Rounding.of("rtz") == Rounding("rtz")


@pytest.mark.parametrize("args, err", [
    (("round",), "mode must be one of ('rtn', 'sr', 'rtz'), got 'round'"),
    ((None,), "mode must be one of"),
    (("sr", 0), "nbits must be an int in 1..32, got 0"),
    (("sr", True), "nbits must be an int in 1..32, got True"),
    (("rtn", 33), "nbits must be an int in 1..32"),  # checked even where it is not read
    (("sr", 8, "up"), "sr_rule must be one of ('floor', 'nearest'), got 'up'"),
])
def test_bad_roundings_are_one_line_errors(args, err):
    with pytest.raises(ValueError, match=re.escape(err)):
        Rounding(*args)


def test_a_rounding_beside_its_own_fields_is_refused():
    with pytest.raises(ValueError, match="a Rounding carries nbits"):
        ecosim.quantize(np.ones(3, np.float32), "e4m3", Rounding("sr"), nbits=8, key=0)
    with pytest.raises(TypeError, match="saturate"):
        Rounding("rtn", saturate=1)


def test_a_rounding_is_the_same_as_its_fields_everywhere():
    x = np.random.default_rng(0).standard_normal((6, 40)).astype(np.float32) * 3
    r = Rounding("sr", nbits=5, sr_rule="nearest")
    want = ecosim.quantize(x, "e4m3", "sr", nbits=5, sr_rule="nearest", key=4)
    assert_array_equal(bits_of(ecosim.quantize(x, "e4m3", r, key=4)), bits_of(want))
    q = ecosim.Quantizer("e4m3", r, granularity="row")
    assert (q.mode, q.nbits, q.sr_rule, q.rounding) == ("sr", 5, "nearest", r)
    assert q == ecosim.Quantizer("e4m3", "sr", granularity="row", nbits=5, sr_rule="nearest")
    assert_array_equal(bits_of(q(x, key=4)), bits_of(ecosim.Quantizer(
        "e4m3", "sr", granularity="row", nbits=5, sr_rule="nearest")(x, key=4)))
    with pytest.raises(ValueError, match="nbits must be an int in 1..32"):
        ecosim.Quantizer("e4m3", "sr", nbits=40)  # checked when the quantizer is built


# -- round toward zero: NumPy against the exact reference ----------------------------------------

@pytest.mark.parametrize("name", SMALL)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rtz_equals_the_exact_reference(name, dtype):
    fmt = formats.get(name)
    x = probe_points(fmt, dtype)
    if not fmt.signed:
        x = np.abs(x[x != 0])
    x = x[np.isfinite(x)]
    for sat in (True, False) if fmt.is_float else (True,):
        ours = ecosim.quantize(x, fmt, "rtz", saturate=sat)
        ref = round_reference(x.astype(np.float64), fmt, "rtz", saturate=sat).astype(dtype)
        assert_array_equal(ours, ref)
        num = ~np.isnan(ref)
        assert_array_equal(np.signbit(ours[num]), np.signbit(ref[num]))


def test_the_reference_comparison_tells_rtz_from_its_neighbours():
    """Negative control: RTN's and SR's results are not RTZ's on the same probe points."""
    fmt = formats.get("e4m3")
    x = probe_points(fmt, np.float64)
    ref = round_reference(x, fmt, "rtz")
    assert (ecosim.quantize(x, fmt, "rtn") != ref).sum() > 100
    assert (ecosim.quantize(x, fmt, "sr", key=1) != ref).sum() > 100


@pytest.mark.parametrize("name", ["e4m3", "e5m2", "e2m1", "bf16", "int4", "ternary", "e8m0"])
def test_rtz_never_grows_a_magnitude_and_is_the_grid_value_below(name):
    fmt = formats.get(name)
    x = probe_points(fmt, np.float32)
    x = x[np.isfinite(x) & (np.abs(x) <= fmt.max)]
    if not fmt.signed:
        x = np.abs(x[x != 0])
    x = x[np.abs(x) >= fmt.values()[fmt.values() > 0].min()] if not fmt.has_zero else x
    q = ecosim.quantize(x, fmt, "rtz")
    assert (np.abs(q) <= np.abs(x)).all()
    v = np.unique(np.abs(fmt.values()))
    below = v[np.searchsorted(v, np.abs(x), side="right") - 1]  # largest grid value <= |x|
    assert_array_equal(np.abs(q), below)


def test_rtz_overflows_as_ieee_says():
    """A finite value past max becomes max even without saturating; infinities follow the
    format (inf where it has one, NaN in E4M3, which has none)."""
    x = np.array([60000.0, 1e30, -1e30, np.inf, -np.inf, np.nan], np.float32)
    e5 = ecosim.quantize(x, "e5m2", "rtz", saturate=False)
    assert_array_equal(e5[:5], [57344.0, 57344.0, -57344.0, np.inf, -np.inf])
    assert np.isnan(e5[5])
    e4 = ecosim.quantize(x, "e4m3", "rtz", saturate=False)
    assert_array_equal(e4[:3], [448.0, 448.0, -448.0])
    assert np.isnan(e4[3:]).all()
    # round to nearest without saturating overflows instead (the mode is what differs)
    assert np.isinf(ecosim.quantize(x[:2], "e5m2", "rtn", saturate=False)[1])


# -- the torch backend -------------------------------------------------------------------------

@pytest.mark.parametrize("name", formats.names())
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_torch_rtz_equals_numpy_bit_for_bit(name, dtype):
    torch = pytest.importorskip("torch")
    import ecosim.torch as et

    fmt = formats.get(name)
    x = np.concatenate([probe_points(fmt, dtype),
                        F32_SPECIALS if dtype == np.float32 else F64_SPECIALS])
    for sat in (True, False) if fmt.is_float else (True,):
        got = et.quantize(torch.from_numpy(x.copy()), fmt, "rtz", saturate=sat).numpy()
        assert_array_equal(bits_of(got), bits_of(ecosim.quantize(x, fmt, "rtz", saturate=sat)))


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2", "fp4", "int4", "int8", "bf16"])
@pytest.mark.parametrize("gran", ["tensor", "row", 32])
def test_rtz_quantizers_agree_and_codes_are_the_values(fmt, gran):
    torch = pytest.importorskip("torch")
    import ecosim.torch as et

    x = np.random.default_rng(3).standard_normal((64, 512)).astype(np.float32)
    q = ecosim.Quantizer(fmt, "rtz", granularity=gran)
    values = q(x)
    enc = q.encode(x)
    assert_array_equal(q.decode(enc), values)
    got = et.Quantizer(fmt, "rtz", granularity=gran)(torch.from_numpy(x))
    assert_array_equal(bits_of(got.numpy()), bits_of(values))
    # truncation: no value grows past its input on the block's scale
    assert (np.abs(values) <= np.abs(x) * (1 + 1e-6)).all()
    assert not np.array_equal(values, ecosim.Quantizer(fmt, "rtn", granularity=gran)(x))


@pytest.mark.parametrize("kind", ["sgd", "adamw"])
@pytest.mark.parametrize("scheme", ["eco", "naive", "master"])
def test_the_optimizers_run_rtz_weights_and_the_backends_agree(kind, scheme):
    """ECO, naive and master weights on an RTZ grid: NumPy's and torch's optimizers give the
    same stored weights over 10 steps, and they move."""
    torch = pytest.importorskip("torch")
    import ecosim.torch as et
    from ecosim.optim import adamw, sgdm

    rs = np.random.default_rng(2)
    P = {"w": rs.standard_normal((8, 16)).astype(np.float32)}
    G = [{"w": rs.standard_normal((8, 16)).astype(np.float32)} for _ in range(10)]
    qn = ecosim.Quantizer("e4m3", "rtz", granularity="row")
    qt = et.Quantizer("e4m3", "rtz", granularity="row")
    p = torch.nn.Parameter(torch.from_numpy(P["w"].copy()))
    if kind == "sgd":
        no = sgdm(0.05, 0.9, scheme=scheme, weights=qn)
        to = et.ECOSGD([("w", p)], 0.05, 0.9, scheme=scheme, weights=qt, heavy_ball=False)
    else:
        no = adamw(1e-2, 0.9, 0.999, 1e-8, 0.0, scheme=scheme, weights=qn)
        to = et.ECOAdamW([("w", p)], 1e-2, (0.9, 0.999), 1e-8, 0.0, scheme=scheme, weights=qt)
    w, s = no.init(P)
    first = w["w"].copy()
    for g in G:
        w, s = no.step(w, g, s)
        p.grad = torch.from_numpy(g["w"].copy())
        to.step()
        assert torch.equal(p.detach(), torch.from_numpy(w["w"]))
    assert not np.array_equal(w["w"], first)
    assert np.isfinite(w["w"]).all()


def test_naive_rtz_pulls_the_weights_toward_zero():
    """Every write off the grid loses a fraction of a step toward zero: with zero-mean
    gradients, naive SGD on an RTZ grid ends with smaller weights than on an RTN one (the
    control), and master weights on the same RTZ grid do not shrink so."""
    from ecosim.optim import sgdm

    rs = np.random.default_rng(5)
    w0 = rs.uniform(-1, 1, 2000)
    G = [rs.standard_normal(2000) for _ in range(200)]

    def run(mode, scheme):
        q = ecosim.Quantizer("int8", mode, scale=2.0**-6)
        opt = sgdm(0.02, 0.0, scheme=scheme, weights=q)
        w, s = opt.init(w0, key=0)
        for g in G:
            w, s = opt.step(w, g, s)
        return np.abs(w).mean()

    rtz, rtn, master = run("rtz", "naive"), run("rtn", "naive"), run("rtz", "master")
    assert rtz < 0.7 * rtn
    assert master > 0.95 * rtn


def test_a_cast_state_keeps_every_field_of_its_rounding():
    """A bf16 moment with SR's "nearest" rule and 4 random bits (a plain cast in the torch
    codec) rounds as NumPy's does: the record, not some of its fields, reaches the kernel."""
    torch = pytest.importorskip("torch")
    import ecosim.torch as et
    from ecosim.optim import adamw

    rs = np.random.default_rng(4)
    P = {"w": rs.standard_normal((8, 16)).astype(np.float32)}
    G = [{"w": rs.standard_normal((8, 16)).astype(np.float32)} for _ in range(5)]
    cfg = dict(fmt="bf16", mode="sr", nbits=4, sr_rule="nearest", scale=1.0)
    qn = ecosim.Quantizer("e4m3", granularity="row")
    no = adamw(1e-2, scheme="eco", weights=qn, states={"m": ecosim.Quantizer(**cfg)})
    p = torch.nn.Parameter(torch.from_numpy(P["w"].copy()))
    to = et.ECOAdamW([("w", p)], 1e-2, scheme="eco", key=0,
                     weights=et.Quantizer("e4m3", granularity="row"),
                     states={"m": et.Quantizer(**cfg)})
    w, s = no.init(P, key=0)
    for g in G:
        w, s = no.step(w, g, s)
        p.grad = torch.from_numpy(g["w"].copy())
        to.step()
        assert torch.equal(to.state_values(p, "m"), torch.from_numpy(s.m["w"]))
    floor = dict(cfg, sr_rule="floor")
    assert not np.array_equal(ecosim.Quantizer(**floor)(s.m["w"] * 1.01, key=1),
                              ecosim.Quantizer(**cfg)(s.m["w"] * 1.01, key=1))


def test_a_deterministic_forward_takes_rtz_and_refuses_sr():
    from ecosim.problems import MLP
    from ecosim.problems.quantized import QuantizedForward

    mlp = MLP([4, 8, 2])
    QuantizedForward(mlp, ecosim.Quantizer("int8", "rtz"))
    with pytest.raises(ValueError, match="must round deterministically"):
        QuantizedForward(mlp, ecosim.Quantizer("int8", "sr"))
