"""horizon_theorem: its rounding against ecosim's, its optimizers against ecosim's, a smoke run
(shapes, finiteness, determinism from the key) and the controls of its two verdicts."""
from __future__ import annotations

import numpy as np
import pytest

from ecosim.claims import horizon as HC
from ecosim.experiments import get
from ecosim.experiments import horizon_theorem as HT
from ecosim.core.formats import custom
from ecosim.optim import adamw, muon
from ecosim.optim.muon import newton_schulz
from ecosim.core.quantizer import Quantizer
from ecosim.core.rounding import quantize

SMOKE = HT.HorizonTheoremConfig().smoke()


def _values(M: int) -> np.ndarray:
    """Random magnitudes over many binades, every sign, zeros, and the ties and their
    neighbours of an M-bit grid (even and odd codes)."""
    r = np.random.default_rng(M)
    x = r.standard_normal(4000) * 2.0 ** r.integers(-40, 40, 4000)
    grid = np.round(r.uniform(1, 2, 500) * 2**M) / 2**M * 2.0 ** r.integers(-20, 20, 500)
    ulp = np.abs(grid) * 0 + 2.0 ** (np.floor(np.log2(np.abs(grid))) - M)
    ties = grid + ulp / 2
    return np.concatenate([x, -x, grid, ties, -ties, np.nextafter(ties, 0),
                           np.nextafter(ties, np.inf), [0.0, -0.0, 1e-310, -3e-320]])


@pytest.mark.parametrize("M", range(1, 31))
def test_round_mantissa_is_ecosims_rtn_bit_for_bit(M):
    x = _values(M)
    want = quantize(x, custom(11, M), "rtn")
    got = HT.round_mantissa(x, M)
    np.testing.assert_array_equal(got.view(np.uint64), want.view(np.uint64))


def test_round_mantissa_takes_one_width_per_lane_and_keeps_its_input():
    x = _values(7).reshape(-1)[:600].reshape(3, 200)
    before = x.copy()
    ms = np.array([1, 12, 30]).reshape(3, 1)
    got = HT.round_mantissa(x, ms)
    for i, M in enumerate((1, 12, 30)):
        np.testing.assert_array_equal(got[i], quantize(x[i], custom(11, M), "rtn"))
    np.testing.assert_array_equal(x, before)
    with pytest.raises(ValueError, match="widths in 1..51"):
        HT.round_mantissa(x, 0)


def test_batched_newton_schulz_is_ecosims():
    x = np.random.default_rng(0).standard_normal((6, 5, 5))
    got = HT._newton_schulz(x, 5)
    for i in range(6):
        np.testing.assert_allclose(got[i], newton_schulz(x[i]), rtol=0, atol=1e-13)


def _ecosim_run(cfg, optimizer, T, buffer, M, seed):
    """One lane with ecosim's own optimizer and quantizer, step by step."""
    X, Y = HT._problem(cfg)
    Z = HT._noise(cfg, T)[:, seed]
    q = None if buffer is None else Quantizer(custom(11, M), "rtn", scale=1.0)
    scheme, weights, states = (("fp", None, {}) if buffer is None else
                               ("naive", q, {}) if buffer == "weights" else
                               ("fp", None, {buffer: q}))
    if optimizer == "adam":
        opt = adamw(cfg.adam_c / np.sqrt(T), cfg.b1, 1.0 - 1.0 / T, cfg.eps, scheme=scheme,
                    weights=weights, states=states)
    else:
        opt = muon(cfg.muon_c / np.sqrt(T), cfg.muon_beta, scheme=scheme, weights=weights,
                   states=states, nesterov=cfg.nesterov, ns_steps=cfg.ns_steps)
    W, state = opt.init(np.zeros((cfg.size, cfg.size)))
    acc = 0.0
    for t in range(T):
        R = W @ X - Y[seed]
        grad = (2.0 / cfg.samples) * (R / (1.0 + R * R)) @ X.T
        acc += float(np.sum(grad * grad))
        W, state = opt.step(W, grad + Z[t], state)
    return acc / T


@pytest.mark.parametrize("optimizer", HT.OPTIMIZERS)
def test_lanes_are_ecosims_optimizers(optimizer):
    """The reference and one lane per buffer equal ecosim's adamw / muon with a custom(11, M)
    RTN quantizer on that buffer (weights: scheme naive, no master copy)."""
    T, seed, M = 32, 1, 4
    r = HT.simulate(SMOKE, optimizer, T)
    assert r["reference"][seed] == pytest.approx(_ecosim_run(SMOKE, optimizer, T, None, M, seed),
                                                 rel=1e-9)
    j = int(np.flatnonzero(SMOKE.mantissas == M)[0])
    for k, b in enumerate(HT.buffers_of(optimizer)):
        want = _ecosim_run(SMOKE, optimizer, T, b, M, seed)
        assert r["avg_sq_grad"][k, j, seed] == pytest.approx(want, rel=1e-9), b


def test_smoke_run_shapes_finite_and_deterministic(tmp_path):
    from ecosim.experiments import run
    exp = get("horizon_theorem")
    res = run(exp, SMOKE, cache=tmp_path).results
    nT, nM, S = len(SMOKE.horizons), SMOKE.mantissas.size, SMOKE.seeds
    assert res["ratio"].shape == (2, nT, 4, nM, S)
    assert res["geo_ratio"].shape == (2, nT, 4, nM)
    assert res["reference"].shape == (2, nT, S)
    assert np.isfinite(res["ratio"][0]).all() and np.isfinite(res["ratio"][1, :, :3]).all()
    assert np.isnan(res["ratio"][1, :, 3]).all()          # Muon has no v
    assert (res["reference"] > 0).all()
    np.testing.assert_allclose(res["geo_ratio"],
                               np.exp(np.log(res["ratio"]).mean(-1)), rtol=1e-12)
    a = HT.simulate(SMOKE, "adam", 16)
    b = HT.simulate(SMOKE, "adam", 16)
    np.testing.assert_array_equal(a["avg_sq_grad"], b["avg_sq_grad"])
    c = HT.simulate(SMOKE.replace(key=1), "adam", 16)
    assert not np.array_equal(a["reference"], c["reference"])


# -- verdict controls on constructed results -----------------------------------------------------

def _results(ratio_of, horizons=(256, 512, 1024, 2048, 4096, 8192, 16384), seeds=5,
             mantissas=range(1, 31)):
    """horizon_theorem-shaped results for Adam only, with ratio ``ratio_of(buffer, log2 T, M,
    seed)``."""
    T = np.array(horizons, np.int64)
    ms = np.array(list(mantissas), np.int64)
    r = np.empty((1, T.size, 4, ms.size, seeds))
    for j, t in enumerate(T):
        for k, b in enumerate(HT.BUFFERS):
            for n, M in enumerate(ms):
                for s in range(seeds):
                    r[0, j, k, n, s] = ratio_of(b, np.log2(t), M, s)
    return {"optimizer": np.array(["adam"]), "horizon": T, "buffer": np.array(HT.BUFFERS),
            "mantissa": ms, "ratio": r, "geo_ratio": np.exp(np.log(r).mean(-1))}


def _theory_like(b, k, M, s):
    """The theorem's shape for the weights: excess 2^(k/2 - M + 2), a seed jitter of 1%;
    g, m, v: flat at 1 (a loose bound)."""
    jitter = 1.0 + 0.01 * (s - 2)
    return (1.0 + 2.0 ** (k / 2 - M + 2)) * jitter if b == "weights" else jitter


def test_sufficiency_verdict_controls():
    """Positive: with the excess 2^(log2(T)/2 - M) a width growing half a bit per doubling
    keeps the ratio bounded; negative: the same width when the excess grows a full bit per
    doubling (the claim is false), and a fixed width (a = 0) on the half-bit data."""
    res = _results(_theory_like)
    ok = HC.sufficiency_verdict(res, "adam", "weights", a=0.5)
    assert ok["verdict"] == "holds" and ok["ratios"].max() <= HC.SUFFICIENT_RATIO
    assert HC.sufficiency_verdict(res, "adam", "weights")["verdict"] == "holds"   # a = 2
    fast = _results(lambda b, k, M, s: 1.0 + 2.0 ** (k - M + 2))
    bad = HC.sufficiency_verdict(fast, "adam", "weights", a=0.5)
    assert bad["verdict"] == "does not hold"
    assert HC.sufficiency_verdict(res, "adam", "weights", a=0.0)["verdict"] == "does not hold"
    # a width that leaves the scan is not a test
    assert HC.sufficiency_verdict(fast, "adam", "weights", a=3.0)["verdict"] == "not testable"


def test_tightness_verdict_controls():
    """Positive ("tight here"): the weights' ratio grows with T at a fixed M; negative
    ("loose here"): flat ratios (g, m, v here) and ratios that fall; noise around a flat line
    larger than the bar is "not resolved"."""
    res = _results(_theory_like)
    assert HC.tightness_verdict(res, "adam", "weights", 6)["verdict"] == "tight here"
    for b in ("g", "m", "v"):
        assert HC.tightness_verdict(res, "adam", b, 6)["verdict"] == "loose here"
    falls = _results(lambda b, k, M, s: 1.0 + 2.0 ** (-k))
    assert HC.tightness_verdict(falls, "adam", "weights", 6)["verdict"] == "loose here"
    r = np.random.default_rng(0)
    noisy = _results(lambda b, k, M, s: 2.0 ** r.normal(0, 0.5))
    assert HC.tightness_verdict(noisy, "adam", "g", 6)["verdict"] == "not resolved"
    with pytest.raises(ValueError, match="scanned mantissa"):
        HC.tightness_verdict(res, "adam", "g", 99)
    no_v = dict(res, geo_ratio=np.where(np.arange(4)[None, None, :, None] == 3, np.nan,
                                        res["geo_ratio"]))
    with pytest.raises(ValueError, match="no buffer 'v'"):
        HC.tightness_verdict(no_v, "adam", "v", 6)
    np.testing.assert_array_equal(HC.theorem_width([256, 1000, 16384], 0.5, 1), [5, 6, 8])


def test_theorem_verdicts_list_and_table():
    """Every reading appears once per buffer; on data where the theorem's requirement is not
    needed (everything flat) every tightness reading says loose."""
    res = _results(_theory_like)
    rows = HC.theorem_verdicts(res)
    claims = [v["claim"] for v in rows]
    # weights: 3 widths (a = 2, 1/2, 1) and M = 6; g, m, v: a = theory, M = 6 and M = 1
    assert len(claims) == len(set(claims)) == 3 + 1 + 3 * 3
    flat = HC.theorem_verdicts(_results(lambda b, k, M, s: 1.0 + 0.01 * s))
    assert {v["verdict"] for v in flat if "fixed M" in v["claim"]} == {"loose here"}
    table = HC.theorem_markdown_table(res)
    assert table.count("\n") == len(rows) + 1 and "tight here" in table
