"""Tests for ecosim.theory: ECO coefficients, closed forms, Lyapunov solver, bounds."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_allclose

from ecosim import theory as th

CLOSED_FORM_SCHEMES = ("master", "naive", "eco")


def _rel(a, b):
    return abs(a / b - 1.0)


# --------------------------------------------------------------------------------------------
# ECO coefficients
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("lr, beta", [(0.1, 0.5), (1e-3, 0.9), (3e-4, 0.98), (2.0, 0.01)])
def test_eco_alpha_both_forms(lr, beta):
    alpha = th.eco_alpha(lr, beta)
    assert isinstance(alpha, float)
    assert alpha < 0
    assert_allclose(alpha, (1 / lr) * (1 - 1 / beta), rtol=1e-13)
    assert_allclose(alpha, -(1 - beta) / (lr * beta), rtol=1e-15)


def test_eco_alpha_exact_value():
    assert th.eco_alpha(0.1, 0.5) == -10.0
    assert th.eco_alpha(0.25, 0.5) == -4.0


@pytest.mark.parametrize("lr, beta", [(0.0, 0.9), (-1e-3, 0.9), (0.1, 0.0), (0.1, 1.0),
                                      (0.1, -0.5), (0.1, 1.5), (math.nan, 0.9),
                                      (0.1, math.inf)])
def test_eco_alpha_rejects_bad_inputs(lr, beta):
    with pytest.raises(ValueError):
        th.eco_alpha(lr, beta)


def test_adam_eco_coefficient_formula_and_no_mutation():
    d = np.array([[1e-3, 0.5], [2.0, 7.0]])
    d_before = d.copy()
    lr, b1, t, wd = 3e-4, 0.9, 7, 0.1
    plain = th.adam_eco_coefficient(lr, b1, t, d)
    expected = ((1 - b1**t) / lr) * (1 - 1 / b1) * d
    assert plain.dtype == np.float64 and plain.shape == d.shape
    assert_allclose(plain, expected, rtol=1e-13)
    np.testing.assert_array_equal(d, d_before)
    # weight_decay alone does not change the plain rule; wd_corrected multiplies by (1-lr*wd).
    assert_allclose(th.adam_eco_coefficient(lr, b1, t, d, weight_decay=wd), plain, rtol=0)
    corrected = th.adam_eco_coefficient(lr, b1, t, d, weight_decay=wd, wd_corrected=True)
    assert_allclose(corrected, plain * (1 - lr * wd), rtol=1e-15)


def test_adam_eco_coefficient_tends_to_alpha_times_d():
    # 1 - b1**t -> 1, so the coefficient becomes alpha * d (frozen-v Adam = preconditioned SGDM).
    d = np.array([0.5, 2.0])
    coefficient = th.adam_eco_coefficient(1e-3, 0.9, 10_000, d)
    assert_allclose(coefficient, th.eco_alpha(1e-3, 0.9) * d, rtol=1e-13)


@pytest.mark.parametrize("kwargs", [dict(lr=0.0), dict(b1=1.0), dict(b1=0.0), dict(step=0),
                                    dict(step=1.5), dict(weight_decay=-0.1)])
def test_adam_eco_coefficient_rejects_bad_inputs(kwargs):
    args = dict(lr=1e-3, b1=0.9, step=1, d=np.ones(3)) | kwargs
    with pytest.raises(ValueError):
        th.adam_eco_coefficient(args.pop("lr"), args.pop("b1"), args.pop("step"),
                                args.pop("d"), **args)


# --------------------------------------------------------------------------------------------
# Closed forms
# --------------------------------------------------------------------------------------------

def test_stability_limit_values():
    assert_allclose(th.stability_limit(1.0, 0.9), 2 * 1.9 / 0.1, rtol=1e-15)
    assert_allclose(th.stability_limit(4.0, 0.5), 2 * 1.5 / (0.5 * 4), rtol=1e-15)
    assert_allclose(th.stability_limit(2.0, 0.9, heavy_ball=True), 1.9, rtol=1e-15)
    assert th.stability_limit(1.0, 0.0) == 2.0  # plain gradient descent


def test_quadratic_stationary_spec_example():
    # docs/theory.md §5.2 quotes master 1.005, naive 54.75, eco 5.265 (x sigma^2) at
    # beta = 0.9, lr = 0.01, L = 1; the closed forms give these to the quoted digits.
    values = {s: th.quadratic_stationary(s, 1.0, 0.01, 0.9, 1.0) for s in CLOSED_FORM_SCHEMES}
    assert round(values["master"], 3) == 1.005
    assert round(values["naive"], 2) == 54.75
    assert round(values["eco"], 3) == 5.265


def test_quadratic_stationary_broadcasts_and_scales_with_sigma2():
    lr = np.array([1e-3, 1e-2, 1e-1])
    out = th.quadratic_stationary("eco", 1.0, lr, 0.9, 2.5)
    assert out.shape == (3,)
    for i, lr_i in enumerate(lr):
        assert_allclose(out[i], 2.5 * th.quadratic_stationary("eco", 1.0, lr_i, 0.9, 1.0),
                        rtol=1e-15)


@pytest.mark.parametrize("scheme", CLOSED_FORM_SCHEMES)
def test_quadratic_stationary_outside_stability_region_says_the_limit(scheme):
    limit = th.stability_limit(2.0, 0.9)
    with pytest.raises(ValueError, match="stability region") as info:
        th.quadratic_stationary(scheme, 2.0, limit, 0.9, 1.0)
    assert repr(limit) in str(info.value)


@pytest.mark.parametrize("args", [("sgd", 1.0, 0.1, 0.9, 1.0), ("eco", 0.0, 0.1, 0.9, 1.0),
                                  ("eco", -1.0, 0.1, 0.9, 1.0), ("eco", 1.0, 0.0, 0.9, 1.0),
                                  ("eco", 1.0, 0.1, 0.0, 1.0), ("eco", 1.0, 0.1, 1.0, 1.0),
                                  ("naive", 1.0, 0.1, 0.9, -1.0), ("master", 1.0, 0.1, 1.0, 1.0)])
def test_quadratic_stationary_rejects_bad_inputs(args):
    with pytest.raises(ValueError):
        th.quadratic_stationary(*args)


def test_quadratic_stationary_beta_zero_allowed_without_alpha():
    # beta = 0 is plain GD for master/naive; only ECO's alpha is undefined there.
    assert th.quadratic_stationary("naive", 1.0, 0.5, 0.0, 1.0) > 0
    assert th.quadratic_stationary("master", 1.0, 0.5, 0.0, 1.0) > 0


# --------------------------------------------------------------------------------------------
# Lyapunov solver against the closed forms
# --------------------------------------------------------------------------------------------

BETAS = (0.1, 0.5, 0.9, 0.99)
CURVATURES = (0.1, 1.0, 10.0)
# Learning rates as fractions of the stability limit, plus absolute lr*L = 1e-4.
LIMIT_FRACTIONS = (1e-4, 1e-2, 0.1, 0.5, 0.9)


def _grid_learning_rates(L, beta):
    limit = th.stability_limit(L, beta)
    return [f * limit for f in LIMIT_FRACTIONS] + [1e-4 / L]


@pytest.mark.parametrize("scheme", CLOSED_FORM_SCHEMES)
@pytest.mark.parametrize("beta", BETAS)
@pytest.mark.parametrize("L", CURVATURES)
def test_lyapunov_reproduces_closed_forms(scheme, L, beta):
    for lr in _grid_learning_rates(L, beta):
        closed = th.quadratic_stationary(scheme, L, lr, beta, 0.7)
        lyap = th.lyapunov_stationary(scheme, L, lr, beta, sigma2=0.7)
        assert _rel(lyap, closed) < 1e-10, (scheme, L, lr, beta, lyap, closed)


@pytest.mark.slow
@pytest.mark.parametrize("scheme", CLOSED_FORM_SCHEMES)
def test_lyapunov_reproduces_closed_forms_wide(scheme):
    # Down to lr*L = 1e-5 and up to beta = 0.999 and 0.99 of the stability limit.
    for L in np.geomspace(1e-3, 1e3, 7):
        for beta in (0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 0.95, 0.99, 0.999):
            limit = th.stability_limit(L, beta)
            for lr in [f * limit for f in (1e-3, 0.3, 0.99)] + [h / L for h in (1e-5, 1e-3)]:
                closed = th.quadratic_stationary(scheme, L, lr, beta, 1.0)
                lyap = th.lyapunov_stationary(scheme, L, lr, beta)
                assert _rel(lyap, closed) < 1e-10, (scheme, L, lr, beta, lyap, closed)


@pytest.mark.parametrize("heavy_ball", [False, True])
@pytest.mark.parametrize("beta", BETAS)
@pytest.mark.parametrize("L", CURVATURES)
def test_eco_exact_reproduces_master(L, beta, heavy_ball):
    # The literal eco_exact recursion keeps e/(lr*beta) in its momentum; its Lyapunov equation
    # is ill-conditioned as lr*L -> 0 and beta -> 1 (see lyapunov_covariance), so the 1e-10
    # check uses lr >= 1e-2 of the stability limit (lr*L >= 0.024 at beta = 0.1).
    limit = th.stability_limit(L, beta, heavy_ball=heavy_ball)
    for fraction in (1e-2, 0.1, 0.5, 0.9):
        lr = fraction * limit
        kwargs = dict(sigma2=1.3, grad_noise=0.4, heavy_ball=heavy_ball)
        exact = th.lyapunov_stationary("eco_exact", L, lr, beta, **kwargs)
        master = th.lyapunov_stationary("master", L, lr, beta, **kwargs)
        assert _rel(exact, master) < 1e-10, (L, lr, beta, exact, master)


def test_eco_exact_covariance_has_implicit_master_structure():
    # x_hat = theta - e with theta = x_hat + e independent of the current error e = -xi:
    # Var(e) = sigma2, Cov(x_hat, e) = -sigma2, Var(x_hat + e) = master's Var(theta).
    L, lr, beta, sigma2 = 2.0, 0.05, 0.9, 0.3
    exact = th.lyapunov_covariance("eco_exact", L, lr, beta, sigma2=sigma2)
    master = th.lyapunov_covariance("master", L, lr, beta, sigma2=sigma2)
    assert exact.state == ("x_hat", "m", "e") and master.state == ("theta", "m")
    cov = exact.covariance
    assert_allclose(cov, cov.T, rtol=0, atol=0)
    assert_allclose(cov[2, 2], sigma2, rtol=1e-12)
    assert_allclose(cov[0, 2], -sigma2, rtol=1e-12)
    implicit_master = cov[0, 0] + 2 * cov[0, 2] + cov[2, 2]
    assert_allclose(implicit_master, master.covariance[0, 0], rtol=1e-10)
    assert_allclose(master.iterate, master.covariance[0, 0] + sigma2, rtol=1e-15)


# --------------------------------------------------------------------------------------------
# Small-lr limits (exact expansions of the closed forms, h = L*lr)
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("beta", [0.1, 0.5, 0.9, 0.99])
@pytest.mark.parametrize("h", [1e-2, 1e-3, 1e-4])
def test_eco_over_master_tends_to_one_over_one_minus_beta_squared(beta, h):
    # With a = (1-beta)/(2(1+beta)), the closed forms give
    #   (1-beta^2) eco/master = 1 / ((1 - a h)(1 + eps_m)),  eps_m = (h/2)/(1 - a h),
    # whose expansion is 1 - (beta/(1+beta)) h + (beta/(1+beta))^2 h^2 + O(h^3).
    # So after removing the O(h) term the remainder is <= h^2/4 + O(h^3); we allow h^2
    # (4x margin) plus 1e-10 for the solver's rounding.
    L = 3.0
    lr = h / L
    ratio = (th.lyapunov_stationary("eco", L, lr, beta)
             / th.lyapunov_stationary("master", L, lr, beta))
    normalised = ratio * (1 - beta**2)
    first_order = 1 - beta / (1 + beta) * h
    assert abs(normalised - first_order) <= h**2 + 1e-10
    assert abs(normalised - 1) <= h  # the O(lr) correction itself is at most h*beta/(1+beta)


@pytest.mark.parametrize("beta", [0.1, 0.5, 0.9, 0.99])
@pytest.mark.parametrize("h", [1e-2, 1e-3, 1e-4])
def test_naive_times_lr_tends_to_sigma2_over_2L(beta, h):
    # Exactly, n = naive*lr*2L/sigma2 = (1 + b h)/(1 - a h) with b = 2 beta/(1-beta^2) and
    # a = (1-beta)/(2(1+beta)), so n - 1 - (a+b) h = (a+b) a h^2/(1 - a h); since
    # a(a+b) = a^2 + beta/(1+beta)^2 <= 1/2 and a h <= 1/2, the remainder is <= h^2.
    L, sigma2 = 0.5, 1.7
    lr = h / L
    n = th.lyapunov_stationary("naive", L, lr, beta, sigma2=sigma2) * lr * 2 * L / sigma2
    a = (1 - beta) / (2 * (1 + beta))
    b = 2 * beta / (1 - beta**2)
    assert abs(n - 1 - (a + b) * h) <= h**2 + 1e-10


# --------------------------------------------------------------------------------------------
# Lyapunov solver: options and failures
# --------------------------------------------------------------------------------------------

def test_lyapunov_stationary_vectorises_over_eigenvalues_and_precond():
    eigenvalues = np.array([0.5, 1.0, 4.0])
    d = np.array([1.0, 0.5, 2.0])
    lr, beta = 0.05, 0.9
    out = th.lyapunov_stationary("eco", eigenvalues, lr, beta, precond=d, sigma2=0.2)
    assert out.shape == (3,)
    for i in range(3):
        # Frozen-v Adam with coefficient alpha*d is SGDM with effective lr/d.
        expected = th.quadratic_stationary("eco", eigenvalues[i], lr / d[i], beta, 0.2)
        assert _rel(out[i], expected) < 1e-10


def test_lyapunov_fp_without_gradient_noise_is_zero():
    assert th.lyapunov_stationary("fp", 1.0, 0.1, 0.9, sigma2=5.0) == 0.0
    assert th.lyapunov_stationary("fp", 1.0, 0.1, 0.9, grad_noise=1.0) > 0.0


def test_gradient_noise_adds_linearly():
    # The system is linear and the two noises are independent: moments add.
    args = ("eco", 2.0, 0.03, 0.9)
    both = th.lyapunov_stationary(*args, sigma2=0.5, grad_noise=0.8)
    quant = th.lyapunov_stationary(*args, sigma2=0.5, grad_noise=0.0)
    grad = th.lyapunov_stationary(*args, sigma2=0.0, grad_noise=0.8)
    assert _rel(both, quant + grad) < 1e-12


@pytest.mark.parametrize("heavy_ball", [False, True])
@pytest.mark.parametrize("scheme", th.SCHEMES)
def test_lyapunov_raises_outside_stability(scheme, heavy_ball):
    L, beta = 2.0, 0.9
    limit = th.stability_limit(L, beta, heavy_ball=heavy_ball)
    th.lyapunov_stationary(scheme, L, 0.99 * limit, beta, heavy_ball=heavy_ball)  # stable
    with pytest.raises(ValueError, match="spectral radius"):
        th.lyapunov_stationary(scheme, L, 1.01 * limit, beta, heavy_ball=heavy_ball)
    with pytest.raises(ValueError, match="spectral radius"):
        th.lyapunov_stationary(scheme, [1.0, 0.0], 0.1, beta, heavy_ball=heavy_ball)
    with pytest.raises(ValueError, match="spectral radius"):
        th.lyapunov_stationary(scheme, -1.0, 0.1, beta, heavy_ball=heavy_ball)


@pytest.mark.parametrize("kwargs", [dict(scheme="kahan"), dict(lr=0.0), dict(beta=1.0),
                                    dict(scheme="eco", beta=0.0), dict(sigma2=-1.0),
                                    dict(grad_noise=-1.0), dict(precond=[1.0, 0.0]),
                                    dict(eigenvalues=[1.0, math.nan])])
def test_lyapunov_rejects_bad_inputs(kwargs):
    args = dict(scheme="naive", eigenvalues=[1.0, 2.0], lr=0.1, beta=0.9) | kwargs
    with pytest.raises(ValueError):
        th.lyapunov_stationary(args.pop("scheme"), args.pop("eigenvalues"), args.pop("lr"),
                               args.pop("beta"), **args)


# --------------------------------------------------------------------------------------------
# Monte Carlo of the additive-noise recursions
# --------------------------------------------------------------------------------------------

def _simulate(scheme, L, lr, beta, *, sigma2, grad_noise, heavy_ball, precond, rng, chains,
              burn, window):
    """Per-chain time averages of x_hat^2, written out from docs/theory.md §4.2.

    Quantization is q(y) = y + xi with xi ~ Uniform(-h, h), h^2/3 = sigma2 (the prediction only
    depends on the variance). Returns an array (chains, *L.shape).
    """
    L = np.asarray(L, dtype=np.float64)
    shape = (chains, *L.shape)
    lr = lr / np.asarray(precond, dtype=np.float64)      # step lr*m/d
    c = 1.0 if heavy_ball else 1.0 - beta
    alpha = (1.0 / lr) * (1.0 - 1.0 / beta)               # ECO coefficient (times d)
    half_width = math.sqrt(3.0 * sigma2)
    w = np.zeros(shape)        # master theta, or the stored weight itself
    m = np.zeros(shape)
    e = np.zeros(shape)        # previous error (eco_exact)
    total = np.zeros(shape)
    for t in range(burn + window):
        xi = rng.uniform(-half_width, half_width, size=shape)
        x_hat = w + xi if scheme == "master" else w
        g = L * x_hat
        if grad_noise:
            g = g + rng.normal(0.0, math.sqrt(grad_noise), size=shape)
        m = beta * m + c * g
        if scheme in ("fp", "master"):
            w = w - lr * m
        else:
            theta_tilde = x_hat - lr * m
            w = theta_tilde + xi            # q(theta_tilde)
            e_new = theta_tilde - w         # = -xi
            if scheme == "eco":
                m = m + alpha * e_new
            elif scheme == "eco_exact":
                m = m + e / lr - e_new / (lr * beta)
                e = e_new
        if t >= burn:
            total += x_hat**2
    return total / window


MC_CASES = [
    # scheme, L, lr, beta, sigma2, grad_noise, heavy_ball, precond
    ("naive", 1.0, 0.01, 0.9, 1.0, 0.0, False, 1.0),    # docs/theory.md §5.2 example
    ("eco", 1.0, 0.01, 0.9, 1.0, 0.0, False, 1.0),
    ("master", 1.0, 0.05, 0.9, 1.0, 0.0, False, 1.0),
    ("naive", 1.0, 0.05, 0.9, 1.0, 0.0, False, 1.0),
    ("eco", 1.0, 0.05, 0.9, 1.0, 0.0, False, 1.0),
    ("eco_exact", 1.0, 0.05, 0.9, 1.0, 0.0, False, 1.0),
    ("naive", 2.0, 0.05, 0.8, 0.5, 2.0, False, 1.0),
    ("eco", 1.0, 0.02, 0.9, 1.0, 0.5, True, 1.0),
    ("master", 1.0, 0.02, 0.9, 1.0, 0.5, True, 1.0),
    ("fp", 1.0, 0.02, 0.9, 1.0, 1.0, True, 1.0),
    ("eco", (1.0, 4.0), 0.1, 0.9, 1.0, 0.0, False, (1.0, 2.0)),
]


@pytest.mark.parametrize("case", MC_CASES, ids=lambda c: f"{c[0]}-L{c[1]}-lr{c[2]}-hb{c[6]}")
def test_monte_carlo_matches_lyapunov(case):
    scheme, L, lr, beta, sigma2, grad_noise, heavy_ball, precond = case
    options = dict(sigma2=sigma2, grad_noise=grad_noise, heavy_ball=heavy_ball)
    predicted = np.atleast_1d(th.lyapunov_stationary(scheme, L, lr, beta, precond=precond,
                                                     **options))
    # Burn-in: from the zero state the second moment approaches its limit like rho(A)^(2t);
    # we start averaging once rho^(2*burn) < 1e-9, far below the statistical error.
    L_all, d_all = np.broadcast_arrays(np.atleast_1d(L), np.atleast_1d(precond))
    rho = max(
        np.max(np.abs(np.linalg.eigvals(
            th.linear_system(scheme, L_i, lr / d_i, beta, heavy_ball=heavy_ball).A)))
        for L_i, d_i in zip(L_all, d_all)
    )
    burn = math.ceil(math.log(1e-9) / (2 * math.log(rho)))
    chains = 20_000
    per_chain = _simulate(scheme, L, lr, beta, precond=precond, chains=chains, burn=burn,
                          window=1000, rng=np.random.default_rng(20260129), **options)
    per_chain = per_chain.reshape(chains, -1)
    # Chains are independent and identically distributed, so their time averages are i.i.d.
    # with mean E[x_hat^2] (up to the negligible burn-in bias); by the CLT the grand mean has
    # standard error std(per-chain averages)/sqrt(chains). A 5-standard-error band has a
    # two-sided false-alarm probability of about 6e-7 (and the seed is fixed).
    estimate = per_chain.mean(axis=0)
    stderr = per_chain.std(axis=0, ddof=1) / math.sqrt(chains)
    assert np.all(stderr < 0.01 * predicted)  # the check is sharp: < 1% per standard error
    assert np.all(np.abs(estimate - predicted) <= 5 * stderr), (estimate, predicted, stderr)


# --------------------------------------------------------------------------------------------
# Property test
# --------------------------------------------------------------------------------------------

@given(
    L=st.floats(1e-2, 1e2),
    lr_times_L=st.floats(1e-3, 0.5),
    beta=st.floats(0.05, 0.99),
    sigma2=st.floats(1e-3, 1e3),
)
def test_closed_forms_positive_match_lyapunov_and_respect_sr_floor(L, lr_times_L, beta, sigma2):
    lr = lr_times_L / L  # lr <= 1/(2L): inside the stability region and the SR theorem
    values = {}
    for scheme in CLOSED_FORM_SCHEMES:
        closed = th.quadratic_stationary(scheme, L, lr, beta, sigma2)
        assert math.isfinite(closed) and closed > 0
        lyap = th.lyapunov_stationary(scheme, L, lr, beta, sigma2=sigma2)
        assert _rel(lyap, closed) < 1e-10
        values[scheme] = closed
    # E||grad f(x_hat)||^2 = L^2 E[x_hat^2] is stationary, so the SR floor (with G = 0,
    # the bound's smallest value) must lie above ECO's exact value.
    assert L**2 * values["eco"] <= th.sr_floor(L, 0.0, sigma2, lr, beta)
    # ECO never does worse than naive removal for L*lr <= (1+beta)/2.
    assert values["eco"] <= values["naive"]


# --------------------------------------------------------------------------------------------
# Bounds
# --------------------------------------------------------------------------------------------

def test_sr_floor_formula_and_limit():
    L, G, sigma2, lr, beta = 2.0, 3.0, 0.1, 0.01, 0.9
    expected = (4 * lr**2 * beta**2 * L**2 * G**2 / (1 - beta) ** 2
                + 4 * L**2 * sigma2 / (1 - beta**2))
    assert_allclose(th.sr_floor(L, G, sigma2, lr, beta), expected, rtol=1e-15)
    limit = th.sr_floor_limit(L, sigma2, beta)
    assert_allclose(limit, 4 * L**2 * sigma2 / (1 - beta**2), rtol=1e-15)
    # The drift term is O(lr^2): the floor approaches the limit from above at that rate.
    for lr_small in (1e-4, 1e-6):
        gap = th.sr_floor(L, G, sigma2, lr_small, beta) - limit
        assert 0 < gap <= 4 * lr_small**2 * beta**2 * L**2 * G**2 / (1 - beta) ** 2 * 1.000001


def test_sr_bound_adds_the_optimisation_term():
    L, G, sigma2, lr, beta, T = 1.0, 1.0, 0.01, 0.1, 0.9, 1000
    bound = th.sr_bound(5.0, lr, T, L=L, G=G, sigma2=sigma2, beta=beta)
    assert_allclose(bound, 4 * 5.0 / (lr * T) + th.sr_floor(L, G, sigma2, lr, beta),
                    rtol=1e-15)
    with pytest.raises(ValueError):
        th.sr_bound(5.0, lr, 0, L=L, G=G, sigma2=sigma2, beta=beta)
    with pytest.raises(ValueError):
        th.sr_bound(-1.0, lr, T, L=L, G=G, sigma2=sigma2, beta=beta)


def test_rtn_floor_formula_simplification_and_limit():
    L, G, delta, beta = 2.0, 3.0, 1e-3, 0.9
    for lr in (0.1, 1e-3, 1e-6):
        alpha = th.eco_alpha(lr, beta)
        literal = (2 * L**2 * lr**2 * beta**2 / (1 - beta) ** 2
                   * (G + abs(alpha) * delta / (1 - beta)) ** 2)
        floor = th.rtn_floor(L, G, delta, lr, beta)
        assert_allclose(floor, literal, rtol=1e-14)
        # lr*beta*|alpha| = 1 - beta turns it into 2 L^2 (lr beta G + delta)^2 / (1-beta)^2.
        assert_allclose(floor, 2 * L**2 * (lr * beta * G + delta) ** 2 / (1 - beta) ** 2,
                        rtol=1e-13)
    assert_allclose(th.rtn_floor_limit(L, delta, beta), 2 * L**2 * delta**2 / (1 - beta) ** 2,
                    rtol=1e-15)
    assert_allclose(th.rtn_floor(L, G, delta, 1e-12, beta), th.rtn_floor_limit(L, delta, beta),
                    rtol=1e-8)


@pytest.mark.parametrize("fn, args", [
    (th.sr_floor, (1.0, 1.0, 0.1, 0.6, 0.9)),       # lr > 1/(2L)
    (th.sr_floor, (1.0, 1.0, 0.1, 0.0, 0.9)),
    (th.sr_floor, (1.0, -1.0, 0.1, 0.1, 0.9)),
    (th.sr_floor, (1.0, 1.0, 0.1, 0.1, 1.0)),
    (th.sr_floor, (0.0, 1.0, 0.1, 0.1, 0.9)),
    (th.rtn_floor, (1.0, 1.0, 0.1, 0.6, 0.9)),
    (th.rtn_floor, (1.0, 1.0, -0.1, 0.1, 0.9)),
    (th.rtn_floor, (1.0, 1.0, 0.1, 0.1, 0.0)),
    (th.sr_floor_limit, (1.0, 0.1, 1.0)),
    (th.rtn_floor_limit, (1.0, 0.1, 0.0)),
    (th.rtn_stall_threshold, (0.0,)),
    (th.rtn_stall_threshold, (-1.0,)),
])
def test_bounds_reject_bad_inputs(fn, args):
    with pytest.raises(ValueError):
        fn(*args)


def test_sr_floor_accepts_lr_exactly_half_over_L():
    assert th.sr_floor(2.0, 1.0, 0.1, 0.25, 0.9) > 0


def test_rtn_stall_threshold_is_half_a_step():
    assert th.rtn_stall_threshold(0.125) == 0.0625
    steps = np.array([2.0**-9, 2.0**-3, 1.0])
    np.testing.assert_array_equal(th.rtn_stall_threshold(steps), steps / 2)
