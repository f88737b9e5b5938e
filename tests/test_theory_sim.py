"""The theory of docs/theory.md §5 against simulation with real rounding on real grids.

Statistical tolerances: every floor estimate comes with a batch-means standard error (SE) from
:func:`ecosim.experiments.floor.simulate_floor` (20 blocks of the stationary phase, each many
relaxation times long). Where the issue fixes a tolerance (5%), the tests also assert that the
estimate is precise enough for that tolerance to mean something (5% >= 4 SE).
"""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ecosim import Quantizer, optim, problems, theory, train
from ecosim.experiments.floor import simulate_floor
from ecosim.metrics import error_similarity

BETAS = (0.5, 0.9)
LRS = (0.3, 0.1, 0.01)  # spans 30x
SCHEMES = ("master", "naive", "eco")


@pytest.fixture(scope="module")
def uniform_sr():
    """Real SR on a fixed-scale int8 grid (step 2**-6), d = 1000, exact gradients.

    60 relaxation times per run: naive's error is the slowest to decorrelate (at lr = 0.01 a
    40-time run gives a 1.4% SE, too coarse for a 5% check)."""
    return {(s, lr, b): simulate_floor(s, lr, b, d=1000, horizon=60, key=7)
            for b in BETAS for lr in LRS for s in SCHEMES}


@pytest.mark.parametrize("beta", BETAS)
@pytest.mark.parametrize("lr", LRS)
@pytest.mark.parametrize("scheme", SCHEMES)
def test_real_sr_normalised_floor_matches_the_closed_form(uniform_sr, scheme, lr, beta):
    r = uniform_sr[(scheme, lr, beta)]
    pred = theory.quadratic_stationary(scheme, 1.0, lr, beta, 1.0)
    rel_err = abs(r["ratio"] / pred - 1)
    rel_se = r["ratio_se"] / pred
    assert 0.05 >= 4 * rel_se, f"estimate too noisy for a 5% check: SE {rel_se:.3%}"
    assert rel_err < 0.05, (scheme, lr, beta, r["ratio"], pred)
    # The Lyapunov solution of the same linear model is the same number.
    assert r["lyapunov"] == pytest.approx(pred, rel=1e-9)


@pytest.mark.parametrize("beta", BETAS)
def test_eco_over_master_tends_to_one_over_one_minus_beta_squared(uniform_sr, beta):
    limit = 1 / (1 - beta**2)
    ratio = {lr: uniform_sr[("eco", lr, beta)]["ratio"] / uniform_sr[("master", lr, beta)]["ratio"]
             for lr in LRS}
    small, large = min(LRS), max(LRS)
    assert abs(ratio[small] - limit) < abs(ratio[large] - limit)
    # At lr = 0.01 the closed forms put the ratio within 1% of the limit; measured within 5%.
    assert ratio[small] == pytest.approx(limit, rel=0.05)


@pytest.mark.parametrize("beta", BETAS)
def test_naive_normalised_floor_follows_the_one_over_eta_law(uniform_sr, beta):
    # naive * lr * 2L -> 1 as lr -> 0 (closed form: 1 + O(lr)); measured: it decreases toward 1.
    scaled = [uniform_sr[("naive", lr, beta)]["ratio"] * lr * 2 for lr in sorted(LRS)]
    assert scaled[0] < scaled[1] < scaled[2]
    assert scaled[0] == pytest.approx(1.0, rel=0.12)  # closed form at lr=0.01: 1.013 / 1.095
    # From lr = 0.3 to 0.01 (30x) the normalised floor grows by more than 8x.
    assert (uniform_sr[("naive", 0.01, beta)]["ratio"]
            > 8 * uniform_sr[("naive", 0.3, beta)]["ratio"])


def test_e4m3_grid_with_absmax_scales_how_far_the_closed_forms_hold():
    # Non-uniform grid: each coordinate sees the step of its own binade and the scale moves
    # with max|x|. The closed forms are linear in sigma^2, so coordinates with different local
    # steps still average to the prediction; what remains is coordinates near a binade edge.
    # Measured in development (d = 1000, beta = 0.9): within 2.1% for lr in {0.3, 0.03, 0.003}.
    for lr in (0.3, 0.03):
        for scheme in SCHEMES:
            r = simulate_floor(scheme, lr, 0.9, grid="e4m3", d=1000, key=3)
            pred = theory.quadratic_stationary(scheme, 1.0, lr, 0.9, 1.0)
            assert abs(r["ratio"] / pred - 1) < 0.05, (scheme, lr, r["ratio"], pred)


def _windows(h, d, fracs):
    """Normalised error ex2/s2 averaged over windows [a, b) of the run (fractions of steps)."""
    n = len(h["step"])
    out = []
    for a, b in fracs:
        sl = slice(int(a * n), int(b * n))
        out.append((np.mean(h["dist2"][sl]) / d) / np.mean(h["mean_e2"][sl]))
    return out


def test_decaying_lr_naive_grows_eco_stays_bounded():
    d, steps = 1000, 8000
    prob = problems.Quadratic(d, L=1.0, key=5)
    sched = optim.warmup_cosine(0.3, steps, final_frac=0.03)
    res = {}
    for scheme in ("naive", "eco"):
        opt = optim.sgdm(sched, 0.9, scheme=scheme,
                         weights=Quantizer("int8", "sr", scale=2.0**-6))
        h = train(prob, opt, steps, key=1, log_every=2)
        # after warmup at peak lr vs the last 10% (lr about 0.03x..0.05x of the peak)
        res[scheme] = _windows(h, d, [(0.15, 0.25), (0.9, 1.0)])
    naive_growth = res["naive"][1] / res["naive"][0]
    eco_growth = res["eco"][1] / res["eco"][0]
    assert naive_growth > 5, res
    # eco's normalised floor stays near 1/(1 - beta^2) = 5.26 throughout
    assert all(3 < v < 8 for v in res["eco"]), res
    assert eco_growth < 1.5


def test_rtn_naive_stalls_exactly_below_half_a_step_and_eco_escapes():
    step = 2.0**-6
    lr, beta, d = 0.01, 0.9, 50
    prob = problems.Quadratic(d, L=1.0, key=2)
    q = Quantizer("int8", "rtn", scale=step)
    x0 = np.zeros(d)  # on the grid, far from x* (about 0.4 per coordinate)
    naive = optim.sgdm(lr, beta, scheme="naive", weights=q)
    p, s = naive.init(x0)
    moved_steps, stuck_from = [], None
    for t in range(3000):
        p_new, s = naive.step(p, prob.grad(p), s)
        moved = p_new != p
        lrm = np.abs(lr * s.m)
        clear = np.abs(lrm - step / 2) > 1e-12  # exact ties are decided by the even rule
        # The exact claim: a weight moves iff |lr * m| exceeds half a grid step.
        np.testing.assert_array_equal(moved[clear], (lrm > step / 2)[clear])
        moved_steps.append(moved.any())
        p = p_new
    observed = max(i for i, m in enumerate(moved_steps) if m) + 1
    # Predicted stall: once frozen, m -> g = L (x_hat - x*) monotonically, so the weights stay
    # put iff lr * L |x_hat - x*| < step / 2 for every coordinate.
    assert (lr * np.abs(p - prob.optimum) < step / 2).all()
    assert observed < 3000 and not any(moved_steps[observed:])
    stall_dist2 = float(np.sum((p - prob.optimum) ** 2))
    assert stall_dist2 > 10  # stuck far from the optimum

    eco = optim.sgdm(lr, beta, scheme="eco", weights=q)
    h = train(prob, eco, 3000, params=x0, key=0)
    assert h["dist2"][-1] < 1e-3 * stall_dist2
    # the eco+RTN floor sits under the RTN bound (norms over all d coordinates)
    g_max = math.sqrt(h["grad_norm"].max() ** 2)
    delta = math.sqrt(d) * step / 2
    floor = np.mean(h["dist2"][-500:])  # L = 1: ||grad f||^2 = ||x_hat - x*||^2
    assert floor <= theory.rtn_floor(1.0, g_max, delta, lr, beta)


def test_error_similarity_rtn_high_sr_low_on_the_mlp():
    prob = problems.MLP((16, 64, 64, 4), loss="xent", n_train=512, n_val=128, key=0)
    names = prob.quantized_names("all")
    out = {}
    for mode in ("rtn", "sr"):
        q = Quantizer("e4m3", mode, granularity="row")
        opt = optim.adamw(optim.warmup_cosine(1e-3, 400), 0.9, 0.98, 1e-9, scheme="master",
                          weights={n: q for n in names})
        h = train(prob, opt, 400, key=0, batch_size=32, log_every=1)
        out[mode] = h
    rtn, sr = out["rtn"], out["sr"]
    n = sum(prob.init(0)[k].size for k in names)
    late = slice(300, 400)  # lr has decayed to ~0.1-0.3x of the peak
    early = slice(40, 100)  # right after warmup, peak lr
    assert np.mean(rtn["cos_e"][late]) > 0.95
    assert abs(np.mean(rtn["norm_ratio_e"][late]) - 1) < 0.02
    # moving with the schedule: smaller updates, more similar consecutive errors
    assert np.mean(rtn["cos_e"][late]) > np.mean(rtn["cos_e"][early])
    # SR: consecutive errors are independent given the weights: cosine ~ 0 +- 1/sqrt(n)
    assert abs(np.mean(sr["cos_e"][late])) < 6 / math.sqrt(n)
    assert n > 1000


@settings(max_examples=12, deadline=None)
@given(L=st.floats(0.5, 4.0), lr_L=st.floats(0.03, 0.5), beta=st.floats(0.3, 0.95),
       d=st.integers(200, 600), log2_step=st.integers(-6, -4), key=st.integers(0, 2**20))
def test_eco_floor_under_the_sr_bound_and_lyapunov_within_its_ci(L, lr_L, beta, d, log2_step,
                                                                key):
    # lr <= 1/(2L): inside the bound's validity, so inside the stability region. Grid steps
    # keep the optimum (|x*| < 1) inside int8's range (127 steps >= 1.98).
    lr = lr_L / L
    r = simulate_floor("eco", lr, beta, L=L, d=d, step=2.0**log2_step, horizon=15,
                       min_steps=400, key=key, blocks=10)
    # E||grad f(x_hat)||^2 = L^2 E||x_hat - x*||^2 per coordinate vs the SR floor with the
    # measured sigma^2 (per coordinate) and G = 0 (exact gradients vanish at the optimum).
    assert L**2 * r["ex2"] <= theory.sr_floor(L, 0.0, r["s2"], lr, beta)
    # Lyapunov prediction (additive model with the measured sigma^2) within 5 SE + 1%
    # (the 1% is real SR's measured distance from the additive model, docs/theory.md §5.4).
    assert abs(r["ratio"] - r["lyapunov"]) <= 5 * r["ratio_se"] + 0.01 * r["lyapunov"]


@pytest.mark.slow
@pytest.mark.parametrize("grid", ["uniform", "e4m3"])
@pytest.mark.parametrize("beta", [0.3, 0.5, 0.7, 0.9, 0.95])
@pytest.mark.parametrize("lr", [0.3, 0.1, 0.03, 0.01, 0.003])
def test_wide_sweep_normalised_floors(grid, beta, lr):
    """The wide version (pytest -m slow): every scheme, 5 betas x 5 lrs (100x), both grids."""
    for scheme in SCHEMES:
        r = simulate_floor(scheme, lr, beta, grid=grid, d=1000, horizon=60, key=11)
        pred = theory.quadratic_stationary(scheme, 1.0, lr, beta, 1.0)
        assert abs(r["ratio"] / pred - 1) < max(0.05, 4 * r["ratio_se"] / pred), \
            (scheme, r["ratio"], r["ratio_se"], pred)


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(L=st.floats(0.5, 4.0), lr_L=st.floats(0.01, 0.5), beta=st.floats(0.1, 0.98),
       d=st.integers(200, 1000), log2_step=st.integers(-6, -4), key=st.integers(0, 2**20))
def test_wide_property_eco_floor_and_lyapunov(L, lr_L, beta, d, log2_step, key):
    test_eco_floor_under_the_sr_bound_and_lyapunov_within_its_ci.hypothesis.inner_test(
        L, lr_L, beta, d, log2_step, key)
