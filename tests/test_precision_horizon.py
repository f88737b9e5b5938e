"""Precision against horizon: the theory's error terms (ecosim.theory.horizon), the mantissa search,
the verdicts (ecosim.claims.horizon) and the experiment on a tiny config."""
from __future__ import annotations

import math

import numpy as np
import pytest

from ecosim.theory import horizon as H
from ecosim import theory
from ecosim.claims import horizon as HC
from ecosim.experiments.precision_horizon import (PrecisionHorizonConfig, buffers_for,
                                                  smallest_fine)

TS = np.array([1.0, 10.0, 250.0, 1e3, 4e3, 1.6e4, 1e6])


# --------------------------------------------------------------------------------------------
# theory
# --------------------------------------------------------------------------------------------

def test_theory_reexports_the_horizon_functions():
    for name in ("ERROR_ORDERS", "error_terms", "horizon_bound", "required_mantissa",
                 "theory_slope", "moment_condition", "relative_error"):
        assert getattr(theory, name) is getattr(H, name)
        assert name in theory.__all__


def test_orders_are_the_papers():
    assert H.ERROR_ORDERS == {"adam": {"weights": 2.0, "g": 1.0, "m": 1.0, "v": 2.0},
                              "muon": {"weights": 0.5, "g": 0.5, "m": 0.5}}
    assert [H.theory_slope("adam", b) for b in ("weights", "g", "m", "v")] == [2, 1, 1, 2]
    assert H.relative_error(0) == 1.0 and H.relative_error(10) == 2.0**-10
    assert H.relative_error(math.inf) == 0.0


@pytest.mark.parametrize("opt", H.OPTIMIZERS)
def test_error_terms_grow_with_T_and_shrink_with_M(opt):
    for buf in H.ERROR_ORDERS[opt]:
        byT = H.error_terms(opt, TS, {buf: 8}, b2=0.99)[buf]
        assert (np.diff(byT) > 0).all()
        byM = H.error_terms(opt, 1e3, {buf: np.arange(0, 24)}, b2=0.99)[buf]
        np.testing.assert_array_equal(byM[1:], byM[:-1] / 2)   # one bit halves the term
        # exact form: s * T**a * 2**-M
        s = 1 / (1 - 0.99) if (opt, buf) in (("adam", "weights"), ("adam", "v")) else 1.0
        assert H.error_terms(opt, 64.0, {buf: 5}, b2=0.99)[buf] == pytest.approx(
            s * 64.0 ** H.ERROR_ORDERS[opt][buf] * 2.0**-5, rel=1e-15)


def test_b2_raises_only_adams_weight_and_v_terms():
    for buf in ("weights", "v"):
        t = [H.error_terms("adam", 1e3, {buf: 10}, b2=b2)[buf] for b2 in (0.9, 0.99, 0.999)]
        assert t[0] < t[1] < t[2]
    for opt, buf in (("adam", "g"), ("adam", "m"), ("muon", "weights")):
        t = {H.error_terms(opt, 1e3, {buf: 10}, b2=b2)[buf] for b2 in (0.9, 0.99, 0.999)}
        assert len(t) == 1


def test_required_mantissa_slope_is_the_order_exactly():
    # b2 = 0.5: s = 2 for Adam's weights and v, so M = a k + 1 at T = 2**k (exact)
    for k in range(0, 20):
        assert H.required_mantissa("adam", "weights", 2.0**k, b2=0.5) == 2 * k + 1
        assert H.required_mantissa("adam", "g", 2.0**k) == k
        assert H.required_mantissa("muon", "m", 4.0**k) == k
    M = H.required_mantissa("adam", "v", TS, b2=0.999)
    assert M.dtype == np.int64 and (np.diff(M) >= 0).all()
    # the smallest M whose term is <= tol: one bit fewer is above it
    for T in (250, 1000, 4000, 16000):
        for opt in H.OPTIMIZERS:
            for buf in H.ERROR_ORDERS[opt]:
                M = H.required_mantissa(opt, buf, T, b2=0.99, tol=0.5)
                assert H.error_terms(opt, T, {buf: M}, b2=0.99)[buf] <= 0.5
                if M > 0:
                    assert H.error_terms(opt, T, {buf: M - 1}, b2=0.99)[buf] > 0.5
    # Adam needs at least as many bits as Muon for every buffer they share
    for buf in ("weights", "g", "m"):
        assert (H.required_mantissa("adam", buf, TS) >= H.required_mantissa("muon", buf, TS)
                ).all()


def test_bound_limits_and_rate():
    T = np.array([1e2, 1e4, 1e6, 1e8])
    lr, b1 = T**-0.75, 1 - T**-0.5
    exact = H.horizon_bound("muon", T, None, lr=lr, b1=b1)
    # D/(lr T) + 2 L lr/(1-b1) + 2 sigma sqrt(1-b1) + 2 sigma/((1-b1) T) = 5 T**-1/4 + 2 T**-1/2
    np.testing.assert_allclose(exact * T**0.25, 5 + 2 * T**-0.25, rtol=1e-12)
    # with M = required_mantissa (tol 1) every term is <= 1: the bound at most doubles
    for opt in H.OPTIMIZERS:
        ms = {b: H.required_mantissa(opt, b, T, b2=0.9) for b in H.ERROR_ORDERS[opt]}
        q = H.horizon_bound(opt, T, ms, lr=lr, b1=0.9, b2=0.9)
        base = H.horizon_bound(opt, T, None, lr=lr, b1=0.9, b2=0.9)
        assert (q >= base).all() and (q <= base * (1 + len(ms))).all()
    # decreasing in M, and M -> large recovers the unquantized bound
    bM = [H.horizon_bound("adam", 1e3, {"weights": m, "v": m}, lr=1e-2, b1=0.9, b2=0.99)
          for m in range(8, 60)]
    assert (np.diff(bM) < 0).all()
    assert bM[-1] == pytest.approx(H.horizon_bound("adam", 1e3, lr=1e-2, b1=0.9, b2=0.99),
                                   rel=1e-9)
    # the moment condition: b1^2 (1 + q_m)^2 < b2 (1 - q_v)
    assert H.moment_condition(0.9, 0.99) and not H.moment_condition(0.9, 0.8)
    assert not H.moment_condition(0.9, 0.99, M_m=1)        # (1.5 * 0.9)^2 > 0.99
    assert H.horizon_bound("adam", 100, {"m": 1}, lr=0.1, b1=0.9, b2=0.99) == math.inf
    assert math.isfinite(H.horizon_bound("muon", 100, {"m": 1}, lr=0.1, b1=0.9))


def test_bad_input_errors_and_no_mutation():
    ms = {"weights": 5, "v": 7}
    H.horizon_bound("adam", 100, ms, lr=0.1)
    assert ms == {"weights": 5, "v": 7}
    cases = [
        (lambda: H.error_terms("sgd", 10, {}), "optimizer: expected one of"),
        (lambda: H.error_terms("muon", 10, {"v": 3}), "buffer: expected one of"),
        (lambda: H.error_terms("adam", 0.5, {"g": 3}), "T: expected a horizon of at least 1"),
        (lambda: H.error_terms("adam", 10, {"g": -1}), "mantissa bits >= 0"),
        (lambda: H.error_terms("adam", 10, {"g": math.nan}), "mantissa bits >= 0"),
        (lambda: H.error_terms("adam", 10, [("g", 3)]), "expected a mapping"),
        (lambda: H.error_terms("adam", 10, {"g": 3}, b2=1.0), r"b2 must lie in \[0, 1\)"),
        (lambda: H.horizon_bound("adam", 10, lr=0.0), "lr must be > 0"),
        (lambda: H.horizon_bound("adam", 10, lr=0.1, sigma=-1), "sigma: expected >= 0"),
        (lambda: H.required_mantissa("adam", "h", 10), "buffer: expected one of"),
        (lambda: H.required_mantissa("adam", "g", 10, tol=0), "tol must be > 0"),
        (lambda: H.relative_error(-1), "mantissa bits >= 0"),
    ]
    for fn, msg in cases:
        with pytest.raises((ValueError, TypeError), match=msg):
            fn()


# --------------------------------------------------------------------------------------------
# the search
# --------------------------------------------------------------------------------------------

def _brute(pred, lo, hi):
    best = hi + 1
    for m in range(hi, lo - 1, -1):
        if not pred(m):
            break
        best = m
    return best


@pytest.mark.parametrize("lo,hi", [(1, 1), (1, 2), (1, 16), (3, 9), (1, 23)])
def test_bisection_equals_brute_force_on_every_monotone_threshold(lo, hi):
    for threshold in range(lo, hi + 2):
        calls = []

        def pred(m, t=threshold):
            calls.append(m)
            return m >= t

        expected = _brute(lambda m, t=threshold: m >= t, lo, hi)
        got, seen, mono = smallest_fine(pred, lo, hi)
        assert got == expected == threshold
        assert mono and len(calls) == len(seen) == len(set(calls))
        assert len(calls) == len(seen) <= math.ceil(math.log2(hi - lo + 2))
        scan, seen_s, mono_s = smallest_fine(pred, lo, hi, search="scan")
        assert scan == threshold and mono_s and sorted(seen_s) == list(range(lo, hi + 1))


def test_scan_sees_a_non_monotone_cell():
    pred = {1: False, 2: True, 3: False, 4: True, 5: True}.__getitem__
    got, seen, mono = smallest_fine(pred, 1, 5, search="scan")
    assert (got, mono) == (4, False) and seen == {1: False, 2: True, 3: False, 4: True, 5: True}
    for bad in ((0, 3), (4, 3), (1.0, 3)):
        with pytest.raises(ValueError, match="1 <= lo <= hi"):
            smallest_fine(pred, *bad)
    with pytest.raises(ValueError, match="'bisect' or 'scan'"):
        smallest_fine(pred, 1, 3, search="grid")


def test_buffers_for_muon_has_no_v():
    assert buffers_for("adamw") == ("weights", "g", "m", "v")
    assert buffers_for("muon") == ("weights", "g", "m")


# --------------------------------------------------------------------------------------------
# the experiment on a tiny config: bisection against a brute-force scan
# --------------------------------------------------------------------------------------------

def test_experiment_bisection_matches_scan_on_a_tiny_config(tmp_path):
    from ecosim import experiments as E

    tiny = dict(rosen_horizons=(40, 80), mlp_horizons=(20,), rosen_b2s=(0.9, 0.999),
                mlp_b2s=(0.99,), m_max=6, mlp_sizes=(4, 8, 2), mlp_train=64, batch_size=16)
    bis = E.run("precision_horizon", PrecisionHorizonConfig(**tiny), cache=tmp_path)
    scan = E.run("precision_horizon", PrecisionHorizonConfig(**tiny, search="scan"),
                 cache=tmp_path)
    for k in ("problem", "optimizer", "horizon", "b2", "buffer"):
        np.testing.assert_array_equal(bis[k], scan[k])
    # rows: Rosenbrock AdamW 2 T x 2 b2 x 4 buffers, Muon 2 T x 3, MLP AdamW 4, Muon 3
    assert len(bis["problem"]) == 16 + 6 + 4 + 3
    assert not (bis["buffer"][bis["optimizer"] == "muon"] == "v").any()
    mono = scan["monotone"]
    np.testing.assert_array_equal(bis["smallest"][mono], scan["smallest"][mono])
    assert (scan["evals"] == 6).all() and (bis["evals"] <= 3).all()
    # the scan's fine flags reproduce its answer
    for i in range(len(scan["smallest"])):
        assert _brute(lambda m, i=i: bool(scan["fine"][i, m - 1]), 1, 6) == scan["smallest"][i]
    assert (bis["smallest"] >= 1).all() and (bis["smallest"] <= 7).all()
    verdict_rows = HC.verdicts(bis)
    assert {v["verdict"] for v in verdict_rows} <= {"agree", "disagree", "mixed"}


def test_config_checks():
    from ecosim.experiments import ConfigError

    for bad in (dict(m_min=5, m_max=4), dict(m_max=24), dict(rosen_horizons=(1,)),
                dict(buffers=("weights", "master")), dict(search="grid"),
                dict(batch_size=64, mlp_train=32), dict(mlp_b2s=(1.0,))):
        with pytest.raises((ConfigError, ValueError)):
            PrecisionHorizonConfig(**bad)


# --------------------------------------------------------------------------------------------
# verdicts on hand-made results
# --------------------------------------------------------------------------------------------

def _results(rows, *, m_max=16, probe=None):
    """rows: (problem, optimizer, T, b2, buffer, smallest)."""
    cols = list(zip(*rows))
    n = len(rows)
    probe = probe or {}
    div = [probe.get((r[0], r[1], r[2], r[3]), False) for r in rows]
    return {"problem": np.array(cols[0]), "optimizer": np.array(cols[1]),
            "horizon": np.array(cols[2], np.int64), "b2": np.array(cols[3], float),
            "buffer": np.array(cols[4]), "smallest": np.array(cols[5], np.int64),
            "m_max": np.int64(m_max), "probe_mantissa": np.int64(4),
            "probe_diverged": np.array(div), "probe_cls": np.array(
                ["failed" if d else "fine" for d in div]), "n": n}


def test_width_verdicts_agree_disagree_mixed():
    rows = [("rosenbrock", "adamw", 250, 0.9, "weights", 5),
            ("rosenbrock", "adamw", 1000, 0.9, "weights", 5),      # W5: all <= 5: agree
            ("rosenbrock", "adamw", 250, 0.9, "g", 8),
            ("rosenbrock", "adamw", 1000, 0.9, "g", 9),            # G7: none: disagree
            ("rosenbrock", "adamw", 250, 0.9, "v", 10),
            ("rosenbrock", "adamw", 1000, 0.9, "v", 17),           # v10: one of two: mixed
            ("mlp", "muon", 250, 0.999, "weights", 3)]             # Muon W3 on the MLP: agree
    got = {(v["claim"], v["problem"]): v for v in HC.width_verdicts(_results(rows))}
    assert got["Adam W5", "rosenbrock"]["verdict"] == "agree"
    assert got["Adam G7", "rosenbrock"]["verdict"] == "disagree"
    assert got["Adam v10", "rosenbrock"]["verdict"] == "mixed"
    assert got["Adam v10", "rosenbrock"]["measured"] == "smallest M 10 to >16 over 2 cells"
    assert got["Muon W3", "mlp"]["verdict"] == "agree"
    assert ("Adam m10", "rosenbrock") not in got               # no m cells: no verdict


def test_divergence_slope_and_b2_verdicts():
    rows = []
    for T, k in ((256, 8), (1024, 10), (4096, 12)):
        for b2, extra in ((0.9, 0), (0.999, 3)):
            rows += [("rosenbrock", "adamw", T, b2, "weights", 2 * k - 8 + extra),  # slope 2
                     ("rosenbrock", "adamw", T, b2, "g", 4)]                        # slope 0
    probe = {("rosenbrock", "adamw", T, b2): True for T in (256, 1024, 4096)
             for b2 in (0.9, 0.999)}
    r = _results(rows, probe=probe, m_max=23)
    d = HC.divergence_verdict(r)
    assert d["verdict"] == "agree" and d["n"] == 6 and "6 of 6 runs diverged" in d["measured"]
    probe[("rosenbrock", "adamw", 256, 0.9)] = False
    assert HC.divergence_verdict(_results(rows, probe=probe))["verdict"] == "mixed"
    assert HC.divergence_verdict(_results(rows))["verdict"] == "disagree"
    sl = {v["claim"].split(":")[0]: v for v in HC.slope_verdicts(r)}
    assert sl["Adam weights"]["verdict"] == "agree"
    assert sl["Adam weights"]["measured"] == ("slope 2.00 to 2.00 (mean 2.00) over 2 series, "
                                              "2 less than 0.5 away")
    assert sl["Adam g"]["verdict"] == "disagree"               # 0 against 1
    b2 = {v["claim"]: v for v in HC.b2_verdicts(r)}
    assert b2["Adam weights: more bits as b2 -> 1"]["verdict"] == "agree"
    assert "mean +3.00 bits over 3" in b2["Adam weights: more bits as b2 -> 1"]["measured"]
    # a series above the searched range is censored and left out of the slope
    rows_c = [("mlp", "muon", T, 0.999, "m", m) for T, m in ((256, 3), (1024, 17))]
    rows_c += [("mlp", "muon", T, 0.99, "m", m) for T, m in ((256, 3), (1024, 4))]
    sc = HC.slope_verdicts(_results(rows_c))[0]
    assert "over 1 series" in sc["measured"] and "1 censored series left out" in sc["measured"]
    assert sc["verdict"] == "agree"                            # slope 0.5 exactly
    # one series on the theory's slope, one 0.5 away (not less): mixed
    rows_m = [("mlp", "adamw", T, b2, "m", m) for b2, ms in ((0.9, (2, 4)), (0.99, (2, 3)))
              for T, m in zip((256, 1024), ms)]
    sm = HC.slope_verdicts(_results(rows_m))[0]
    assert sm["verdict"] == "mixed" and sm["n_agree"] == 1
    table = HC.markdown_table(r)
    assert table.splitlines()[0] == "| claim | problem | measured | verdict |"
    with pytest.raises(ValueError, match="missing keys"):
        HC.verdicts({"problem": np.array(["mlp"])})
