"""Positive and negative controls of the nine theory verdicts (ecosim.claims.theory): each
claim is judged on constructed runs where it holds and on runs where it does not, and must
say so. The runs are built from the closed forms (ecosim.theory), so "holds" means exactly
what the theory predicts."""
from types import SimpleNamespace

import numpy as np
import pytest

from ecosim import theory
from ecosim.claims import theory as T
from ecosim.experiments.beta_factor import exact_ratio


class Run(dict):
    """A results mapping with a config, as the runner returns."""

    def __init__(self, config=None, **arrays):
        super().__init__({k: np.asarray(v) for k, v in arrays.items()})
        self.config = SimpleNamespace(**(config or {}))


BETAS, LRS, L = (0.5, 0.9), (0.01, 0.1), 1.0


def _floor(scale=None, e4m3=1.0, naive_s2_slope=1.0, sr_ratio=1.0):
    """floor runs: every (grid, scheme, beta, lr) with the normalised floor equal to its closed
    form times ``scale[scheme]``; naive's s2 proportional to lr**naive_s2_slope."""
    scale = {"master": 1.0, "naive": 1.0, "eco": 1.0} | (scale or {})
    cols = {k: [] for k in ("unit_grid", "unit_mode", "unit_scheme", "unit_beta", "unit_lr",
                            "ratio", "ratio_se", "closed_form", "ex2", "s2")}
    for grid in ("uniform", "e4m3"):
        for s in ("master", "naive", "eco"):
            for b in BETAS:
                for lr in LRS:
                    cf = float(theory.quadratic_stationary(s, L, lr, b, 1.0))
                    r = cf * scale[s] * (e4m3 if grid == "e4m3" else 1.0)
                    s2 = lr ** naive_s2_slope if s == "naive" else 1.0
                    ex2 = r * s2 * (sr_ratio if s == "naive" else 1.0)
                    for k, v in (("unit_grid", grid), ("unit_mode", "sr"), ("unit_scheme", s),
                                 ("unit_beta", b), ("unit_lr", lr), ("ratio", r),
                                 ("ratio_se", 0.001 * r), ("closed_form", cf), ("ex2", ex2),
                                 ("s2", s2)):
                        cols[k].append(v)
    return Run({"L": L}, **cols)


def _additive(scale=1.0):
    cols = {k: [] for k in ("unit_scheme", "unit_beta", "unit_lr", "ex2")}
    for s in ("master", "naive"):
        for b in BETAS:
            for lr in LRS:
                v = float(theory.quadratic_stationary(s, L, lr, b, 1.0))
                v *= scale if s == "naive" else 1.0
                for k, x in zip(cols, (s, b, lr, v)):
                    cols[k].append(x)
    return Run({"L": L}, **cols)


def _beta_factor(scale=1.0, e4m3=1.0, absolute=None):
    """beta_factor's table: the normalised ratio equal to the exact one times ``scale``, the
    absolute ratio of each kind equal to the exact ratio times ``absolute[kind]``."""
    absolute = {"additive": 1.0, "uniform": 1.0, "uniform_noise": 1.0} | (absolute or {})
    cols = {k: [] for k in ("tab_kind", "tab_lr", "tab_beta", "tab_ratio", "tab_ratio_se",
                            "tab_exact", "tab_limit", "tab_abs_ratio", "tab_abs_ratio_se")}
    for kind in ("uniform", "uniform_noise", "e4m3", "additive"):
        for b in BETAS:
            ex = float(exact_ratio(L, 0.001, b))
            r = ex * (scale if kind == "uniform" else e4m3 if kind == "e4m3" else 1.0)
            a = ex * absolute.get(kind, 1.0)
            for k, v in zip(cols, (kind, 0.001, b, r, 0.001 * r, ex, 1 / (1 - b * b), a,
                                   0.001 * a)):
                cols[k].append(v)
    return Run({}, **cols)


def _naive_decay(naive=1.0, eco=1.0):
    cols = {k: [] for k in ("unit_scheme", "unit_mode", "unit_grad_noise", "lr_peak",
                            "lr_end", "normalised_peak", "normalised_end")}
    lp, le, b = 0.1, 0.01, 0.9
    for s, f in (("master", 1.0), ("naive", naive), ("eco", eco)):
        grow = float(theory.quadratic_stationary(s, L, le, b, 1.0)
                     / theory.quadratic_stationary(s, L, lp, b, 1.0)) * f
        for k, v in zip(cols, (s, "sr", 0.0, lp, le, 1.0, grow)):
            cols[k].append(v)
    return Run({"L": L, "beta": b}, **cols)


def _rtn_stall(wrong=0):
    pn = np.arange(10)
    on = pn.copy()
    on[:wrong] += 1
    return Run({}, unit_scheme=["master", "naive", "eco"], threshold=0.5,
               naive_predicted=pn, naive_observed=on, eco_predicted=pn, eco_observed=pn,
               eco_censored=2, eco_censored_ok=2, x=np.zeros((3, 5)), xstar=np.zeros(3),
               u=np.zeros((3, 5)), dead_zone=1.0)


def _similarity(rtn_diff=(0.3, 0.1), sr_cos=0.01, sr_diff=1.41, rtn_cos=(0.95, 0.99),
                rtn_ratio=1.0):
    cols = {k: [] for k in ("unit_method", "cos_e_peak", "cos_e_end", "norm_ratio_e_peak",
                            "norm_ratio_e_end", "rel_diff_e_peak", "rel_diff_e_end")}
    rows = [("master_rtn", *rtn_cos, rtn_ratio, rtn_ratio, *rtn_diff),
            ("master_sr", sr_cos, sr_cos, 1.0, 1.0, sr_diff, sr_diff),
            ("eco_sr", sr_cos, sr_cos, 1.0, 1.0, sr_diff, sr_diff)]
    for row in rows:
        for k, v in zip(cols, row):
            cols[k].append(v)
    return Run({"sizes": (8, 32, 4), "fmt": "e4m3", "granularity": "row"}, **cols)


def _independent_sr_draws(n=5000, seed=0):
    """Two independent SR error draws on the same E4M3-scale values: unrelated errors."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.0, 1.0, n)           # position within a grid step of size 1
    e1 = np.where(rng.random(n) < x, 1.0 - x, -x)
    e2 = np.where(rng.random(n) < x, 1.0 - x, -x)
    cos = float(e1 @ e2 / np.linalg.norm(e1) / np.linalg.norm(e2))
    ratio = float(np.linalg.norm(e2) / np.linalg.norm(e1))
    diff = float(np.linalg.norm(e1 - e2) / np.linalg.norm(e1))
    return cos, ratio, diff


# -- claims 1-7 ---------------------------------------------------------------------------------

def test_claim_1_floors():
    assert T._claim_floors(_floor()).verdict == "yes"
    assert T._claim_floors(_floor({"naive": 1.3, "eco": 1.3, "master": 1.3})).verdict == "no"


def test_claim_2_normalised_price():
    assert T._claim_beta_factor(_beta_factor()).verdict == "yes"
    assert T._claim_beta_factor(_beta_factor(scale=0.2)).verdict == "no"


def test_claim_3_eta_law():
    # the closed form itself is 1.5% (beta 0.5) and 9.5% (beta 0.9) above the limit at lr 0.01
    assert T._claim_eta_law(_floor()).verdict == "partly"
    assert T._claim_eta_law(_floor({"naive": 1 / 1.05})).verdict == "yes"
    assert T._claim_eta_law(_floor({"naive": 0.3})).verdict == "no"


def test_claim_4_fp8():
    assert T._claim_fp8(_floor(), _beta_factor()).verdict == "yes"
    assert T._claim_fp8(_floor(e4m3=1.5), _beta_factor(e4m3=1.5)).verdict == "no"


def test_claim_5_absolute_naive():
    assert T._claim_absolute(_floor(sr_ratio=1.0 / 60), _additive()).verdict == "yes"
    bad = T._claim_absolute(_floor(naive_s2_slope=0.0), _additive(scale=3.0))
    assert bad.verdict == "no"


def test_claim_6_decay():
    assert T._claim_decay(_naive_decay()).verdict == "yes"
    assert T._claim_decay(_naive_decay(naive=0.2, eco=3.0)).verdict == "no"


def test_claim_7_rtn_stall():
    assert T._claim_rtn(_rtn_stall()).verdict == "yes"
    assert T._claim_rtn(_rtn_stall(wrong=5)).verdict == "no"


# -- claim 8: error similarity judges ECO's substitution error ----------------------------------

def test_claim_8_holds_for_similar_rtn_and_decorrelated_sr():
    assert T._claim_similarity(_similarity()).verdict == "yes"


def test_claim_8_independent_errors_fail_it():
    """Negative control: two independent SR draws pass the old norm-ratio test (|ratio - 1| a
    few percent) but their relative difference is about sqrt(2), so as 'RTN' they fail."""
    cos, ratio, diff = _independent_sr_draws()
    assert abs(ratio - 1) < 0.05 and diff > 1.3
    c = T._claim_similarity(_similarity(rtn_diff=(diff, diff), rtn_cos=(cos, cos),
                                        rtn_ratio=ratio))
    assert c.verdict == "partly"  # the SR half still holds ...
    assert "≤ 0.5 at peak and end (partly: below 1) [0/1]" in c.criterion  # ... RTN's fails
    assert "smaller at the end (smaller η) [0/1]" in c.criterion


def test_claim_8_half_wrong_substitution_is_not_yes():
    """cos 0.865 means d = 0.52: ECO's substitution half wrong; the verdict is partly."""
    d = np.sqrt(2 - 2 * 0.865)
    c = T._claim_similarity(_similarity(rtn_diff=(d, 0.4), rtn_cos=(0.865, 0.92)))
    assert round(d, 2) == 0.52 and c.verdict == "partly"


def test_claim_8_correlated_sr_fails_its_half():
    c = T._claim_similarity(_similarity(sr_cos=0.5, sr_diff=0.9))
    assert c.verdict == "partly" and "[0/2]" in c.criterion


def test_claim_8_nothing_holds():
    c = T._claim_similarity(_similarity(rtn_diff=(1.4, 1.5), sr_cos=0.6, sr_diff=0.8))
    assert c.verdict == "no"


# -- claim 9: the absolute price ------------------------------------------------------------------

def test_claim_9_holds_where_every_kind_pays_the_factor():
    assert T._claim_price(_beta_factor()).verdict == "yes"


def test_claim_9_real_sr_paying_less_is_partly():
    c = T._claim_price(_beta_factor(absolute={"uniform": 0.2, "uniform_noise": 0.2}))
    assert c.verdict == "partly"
    assert "additive model within 5% [2/2]" in c.criterion
    assert "real SR within 5% [0/2]" in c.criterion


def test_claim_9_no_kind_pays_the_factor():
    c = T._claim_price(_beta_factor(absolute={"additive": 0.5, "uniform": 0.2,
                                              "uniform_noise": 0.2}))
    assert c.verdict == "no"


def test_claims_that_need_runs_refuse_empty_ones():
    empty = _beta_factor()
    keep = np.flatnonzero(empty["tab_kind"] == "e4m3")
    only_e4m3 = Run({}, **{k: v[keep] for k, v in empty.items()})
    with pytest.raises(ValueError, match="ran none of"):
        T._claim_price(only_e4m3)
