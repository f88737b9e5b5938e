"""The scientific content of figures 2-6, checked on their smoke-mode data.

``tests/test_figures.py`` checks that every figure builds; this module checks that the smoke
runs behind figures 2-6 still show what their captions claim. Every run is deterministic
(explicit keys), so nothing here is flaky; the tolerances are set from the statistical and
systematic errors of the *smoke* sizes (d = 64 coordinates, a few hundred steps), written next
to each assertion, and leave a margin of 2x or more against the values measured when the test
was written. The precise statistical checks of the closed forms (5% on the uniform grid at
d = 1000) belong to the full-size runs and to ``tests/test_theory_sim.py``.
"""
from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from ecosim import experiments as E
from ecosim import theory


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    cache = tmp_path_factory.mktemp("theory_cache")
    names = ("floor", "floor_additive", "beta_factor", "naive_decay", "rtn_stall",
             "error_similarity")
    jobs = [(n, E.get(n).default_config(smoke=True)) for n in names]
    return {r.name: r for r in E.run_many(jobs, cache=cache)}


def _one(run, **where):
    """The single unit of a stacked run matching ``unit_<field> == value``."""
    mask = np.ones(len(run[f"unit_{next(iter(where))}"]), bool)
    for k, v in where.items():
        col = run[f"unit_{k}"]
        mask &= np.isclose(col, v) if col.dtype.kind == "f" else (col == v)
    (i,) = np.flatnonzero(mask)
    return i


# -- figure 2: noise floor vs learning rate -----------------------------------------------------

def test_noise_floor_theory_curves_lyapunov_equals_closed_form(runs):
    add = runs["floor_additive"]
    for s in ("master", "naive", "eco"):
        # the two are algebraically identical: only round-off separates them
        assert_allclose(add[f"curve_lyapunov_{s}"], add[f"curve_closed_{s}"], rtol=1e-9)


def test_noise_floor_real_sr_normalised_shapes(runs):
    f = runs["floor"]
    lrs = np.unique(f["unit_lr"])
    lo, hi = lrs.min(), lrs.max()   # 0.03 and 0.3 in smoke mode: a factor 10
    beta = float(f["unit_beta"][0])
    r = {(s, lr): f["ratio"][_one(f, scheme=s, lr=lr, grid="uniform", mode="sr")]
         for s in ("master", "naive", "eco") for lr in (lo, hi)}
    # naive's normalised floor grows like 1/lr: the closed forms give 21.4/6.45 = 3.3x over the
    # factor 10 in lr (measured 3.3x); the smoke runs' ratios carry ~5% statistical and up to
    # ~15% transient bias each, so 2x cannot be reached by chance.
    assert r["naive", lo] / r["naive", hi] > 2.0
    # ECO's is flat (closed forms: 0.993x; measured 0.92x): +-25%.
    assert 0.75 < r["eco", lo] / r["eco", hi] < 1.25
    # ordering master < eco < naive at every lr, and eco/master near 1/(1-beta^2) at the small
    # lr (exact closed-form ratio 5.19 at beta = 0.9, lr = 0.03; measured 5.07): +-20%.
    for lr in (lo, hi):
        assert r["master", lr] < r["eco", lr] < r["naive", lr]
    exact = (theory.quadratic_stationary("eco", 1.0, lo, beta, 1.0)
             / theory.quadratic_stationary("master", 1.0, lo, beta, 1.0))
    assert r["eco", lo] / r["master", lo] == pytest.approx(exact, rel=0.2)


def test_noise_floor_absolute_naive_sr_does_not_blow_up_but_rtn_and_additive_do(runs):
    f, add = runs["floor"], runs["floor_additive"]
    lrs = np.unique(f["unit_lr"])
    lo, hi = lrs.min(), lrs.max()
    def ex2(s, lr, m="sr"):
        return f["ex2"][_one(f, scheme=s, lr=lr, grid="uniform", mode=m)]
    # real SR: naive's absolute floor stays within a small factor of master's (measured 1.7x
    # at lr = 0.03) and does not grow as lr falls (measured 0.58x from 0.3 to 0.03)
    assert ex2("naive", lo) < 3.0 * ex2("master", lo)
    assert ex2("naive", lo) < 1.5 * ex2("naive", hi)
    # naive+RTN stalls far from the optimum: measured 230x naive+SR's error at lr = 0.03
    assert ex2("naive", lo, "rtn") > 10.0 * ex2("naive", lo)
    # the additive model with a fixed variance diverges like 1/lr (closed forms: 3.3x;
    # measured 3.2x over the factor 10)
    a = {lr: add["ex2"][_one(add, scheme="naive", lr=lr)] for lr in (lo, hi)}
    assert a[lo] / a[hi] > 2.0


# -- figure 3: the 1/(1 - beta^2) factor --------------------------------------------------------

def test_beta_factor_follows_exact_ratio_and_grows_with_beta(runs):
    b = runs["beta_factor"]
    # with gradient noise the normalised floors hold the gradient noise's share too, so the
    # closed forms of exact gradients are not their prediction (claim 9 reads that kind)
    for kind in set(np.unique(b["tab_kind"])) - {"uniform_noise"}:
        sel = np.flatnonzero(b["tab_kind"] == kind)
        sel = sel[np.argsort(b["tab_beta"][sel])]
        ratio, exact = b["tab_ratio"][sel], b["tab_exact"][sel]
        # smoke runs: each normalised floor carries ~5% statistical error (largest measured
        # deviation from the exact ratio: -10%, uniform grid at beta = 0.5): +-25%
        assert_allclose(ratio, exact, rtol=0.25, err_msg=str(kind))
        assert np.all(np.diff(ratio) > 0), kind
    assert_allclose(b["tab_limit"], 1.0 / (1.0 - b["tab_beta"] ** 2), rtol=1e-15)
    # the absolute ratio of the additive model is its normalised ratio (equal noise) ...
    add = b["tab_kind"] == "additive"
    assert_allclose(b["tab_abs_ratio"][add], b["tab_ratio"][add], rtol=0.1)
    # ... and real SR's is far below the factor at beta = 0.9 (ECO rounds with less variance)
    uni = (b["tab_kind"] == "uniform") & np.isclose(b["tab_beta"], 0.9)
    assert np.all(b["tab_abs_ratio"][uni] < 0.5 * b["tab_ratio"][uni])
    # the exact ratio tends to the limit from below as lr -> 0
    assert np.all(b["curve_exact"] < b["curve_limit"])


# -- figure 4: naive removal under a decaying learning rate --------------------------------------

def test_naive_decay_naive_grows_eco_stays_bounded(runs):
    r = runs["naive_decay"]
    g = {s: r["normalised_end"][i] / r["normalised_peak"][i] for s in ("master", "naive", "eco")
         for i in [_one(r, scheme=s, mode="sr", grad_noise=0.0)]}
    lr_i = _one(r, scheme="naive", mode="sr", grad_noise=0.0)
    lr_fall = r["lr_peak"][lr_i] / r["lr_end"][lr_i]   # ~8.9 with the 0.1x cosine floor
    # naive's normalised error follows ~1/(2 L lr): quasi-statically ~5x here (closed forms at
    # the two learning rates; measured 5.7x in smoke, 5.0x full size); >3x leaves room for the
    # smoke run's ~10% window noise and its lag behind the schedule
    assert g["naive"] > 3.0 and lr_fall > 5.0
    # ECO and master stay at their levels (measured 0.88x and 0.88x): within +-30%
    assert 0.7 < g["eco"] < 1.3
    assert 0.7 < g["master"] < 1.3
    # and at the end ECO sits near 1/(1-beta^2) (5.26 at beta = 0.9; measured 4.56)
    eco_end = r["normalised_end"][_one(r, scheme="eco", mode="sr", grad_noise=0.0)]
    assert eco_end == pytest.approx(1.0 / (1.0 - 0.9**2), rel=0.3)


def test_naive_decay_absolute_failures(runs):
    r = runs["naive_decay"]
    def end(s, m, g):
        return r["ex2_end"][_one(r, scheme=s, mode=m, grad_noise=g)]
    # naive+RTN with exact gradients freezes (no stored weight changes over the last 10%) far
    # from the optimum (measured 60x master+RTN's error)
    i = _one(r, scheme="naive", mode="rtn", grad_noise=0.0)
    assert r["changed_end"][i] == 0.0
    assert end("naive", "rtn", 0.0) > 10.0 * end("master", "rtn", 0.0)
    # with exact gradients naive+SR's absolute error is master's, to within 20% (measured 2%)
    assert end("naive", "sr", 0.0) == pytest.approx(end("master", "sr", 0.0), rel=0.2)
    noisy = max(r["unit_grad_noise"])
    # with gradient noise naive+SR fails in absolute terms (measured 2.3x master's), ECO does
    # not (measured 1.08x)
    assert end("naive", "sr", noisy) > 1.5 * end("master", "sr", noisy)
    assert end("eco", "sr", noisy) < 1.3 * end("master", "sr", noisy)


# -- figure 5: the RTN stall --------------------------------------------------------------------

def test_rtn_stall_predictions_are_exact(runs):
    r = runs["rtn_stall"]
    # exact claims: the half-grid-step threshold decides every write (ties have probability 0
    # with an irrational optimum), so predicted and observed steps agree one for one
    assert_array_equal(r["naive_predicted"], r["naive_observed"])
    assert r["eco_predicted"].size > 3 * r["naive_predicted"].size  # many release phases
    assert_array_equal(r["eco_predicted"], r["eco_observed"])
    assert r["eco_censored_ok"] == r["eco_censored"]


def test_rtn_stall_naive_frozen_eco_keeps_moving(runs):
    r = runs["rtn_stall"]
    idx = {str(s): i for i, s in enumerate(r["unit_scheme"])}
    stall = r["naive_predicted"]
    xn, xe = r["x"][idx["naive"]], r["x"][idx["eco"]]
    h = 2.0 * float(r["threshold"])
    T = r["u"].shape[1]
    assert np.all(stall < T)
    for j, t in enumerate(stall):
        # naive's stored weight never changes after the predicted stall step...
        assert np.all(xn[t:, j] == xn[t, j]), j
        # ...while ECO's still moves (measured: 1 to 10 moves per coordinate)
        assert np.any(xe[t + 1:, j] != xe[t, j]), j
    xstar = r["xstar"][idx["naive"]]
    # naive ends inside the dead zone; ECO within about one grid step of the optimum
    # (measured max 0.94 steps after the smoke run's 400 steps)
    assert np.all(np.abs(xn[-1] - xstar) < float(r["dead_zone"]))
    assert np.all(np.abs(xe[-1] - xstar) <= 1.5 * h)


# -- figure 6: error similarity ----------------------------------------------------------------

def test_error_similarity_rtn_errors_are_similar_sr_errors_are_not(runs):
    r = runs["error_similarity"]
    m = {str(s): i for i, s in enumerate(r["unit_method"])}
    cos = {k: np.nanmean(r["cos_e"][i]) for k, i in m.items()}
    # master+RTN: consecutive errors nearly parallel (measured mean cosine 0.91); SR draws a
    # fresh error per write: cosine ~ 0 with a per-step spread ~1/sqrt(#weights) ~ 0.03 over
    # the smoke model's ~1300 quantized weights, averaged over ~240 steps (measured 0.002)
    assert cos["master_rtn"] > 0.8
    assert cos["master_rtn"] > cos["master_sr"] + 0.5
    assert abs(cos["master_sr"]) < 0.05 and abs(cos["eco_sr"]) < 0.05
    # the cosine tracks the schedule: lower at the peak than at the end (measured 0.82 vs 0.98)
    i = m["master_rtn"]
    assert r["cos_e_peak"][i] < r["cos_e_end"][i]
    # independent SR errors: ||e_t - e_{t+1}|| / ||e_t|| ~ sqrt(2) (measured 1.42-1.44)
    for k in ("master_sr", "eco_sr"):
        assert np.nanmean(r["rel_diff_e"][m[k]]) == pytest.approx(np.sqrt(2), abs=0.1)
    # the norm ratio stays near 1 with RTN (measured deviations ~1e-3 per step)
    assert np.nanmean(r["norm_dev_e"][i]) < 1e-2
