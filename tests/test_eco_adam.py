"""AdamW's momentum-exact ECO scheme, ECO's schedule guard and the eco_adam_breakdown experiment."""
import numpy as np
import pytest

from ecosim import Quantizer, rng
from ecosim.experiments import eco_adam, run
from ecosim.experiments.mlp_methods import MLPMethodsConfig, make_problem
from ecosim.optim import adamw, sgdm
from ecosim.recipes import weight_quantizer
from ecosim.train import train

# -- eco_momentum_exact == master when s = lr / ((1 - b1**n) d) and 1 - lr wd are frozen -------
#
# The scheme gives the error back through the momentum sized with this step's s; the next step
# consumes it with its own s. Equality with master weights is exact when s does not change:
#   * lr constant;
#   * d constant: b2 = 0 (so v = g**2 and the bias correction 1 - 0**n = 1) and |g| constant
#     per element: f = sum a_i |w_i - c_i| with the c_i off the grid (g = a_i sign(w_i - c_i)
#     never 0);
#   * the bias correction 1 - b1**n constant: the state starts at step 400, where
#     b1**401 < 2**-54, so 1 - b1**n is 1.0 exactly;
#   * (1 - lr wd) constant (lr constant), with the factor in the rule.
# float64 keeps the round-off (the two compute theta_tilde differently) far below the distance
# of any theta_tilde to a rounding boundary in these runs; the test asserts the stored weights
# bit for bit, and the negative controls show each frozen quantity matters.

_RS = np.random.default_rng(0)
_N = 64
_A = 2.0 ** _RS.integers(-3, 2, _N)
_C = _RS.normal(0.0, 1.0, _N) + 1.0 / 3072
_P0 = _RS.normal(0.0, 1.0, _N)


def _sign_grad(w):
    return _A * np.sign(w - _C)


def _quad_grad(w):  # |g| changes with w: d is not frozen
    return _A * (w - _C)


def _run(scheme, mode, *, start=400, grad=_sign_grad, b2=0.0, steps=300):
    q = Quantizer("int8", mode, scale=2.0**-5)
    opt = adamw(0.01, 0.9, b2, 1e-8, 0.01, scheme=scheme, weights=q)
    w, state = opt.init(_P0, key=3)
    state = state._replace(step=start)
    out = []
    for _ in range(steps):
        w, state = opt.step(w, grad(w), state)
        out.append(w)
    return np.array(out)


@pytest.mark.parametrize("mode", ["rtn", "sr"])
def test_momentum_exact_equals_master_with_frozen_step_size(mode):
    master = _run("master", mode)
    assert np.unique(master, axis=0).shape[0] > 50  # the weights do move
    np.testing.assert_array_equal(_run("eco_momentum_exact", mode), master)


@pytest.mark.parametrize("mode", ["rtn", "sr"])
def test_momentum_exact_differs_when_something_is_not_frozen(mode):
    master = _run("master", mode)
    # the memory-free rule (e_prev replaced by e) is not exact even then
    assert not np.array_equal(_run("eco", mode), master)
    # the bias correction 1 - b1**n moving (start at step 0)
    assert not np.array_equal(_run("eco_momentum_exact", mode, start=0),
                              _run("master", mode, start=0))
    # d moving (gradient magnitude depends on w)
    assert not np.array_equal(_run("eco_momentum_exact", mode, grad=_quad_grad),
                              _run("master", mode, grad=_quad_grad))


def test_momentum_exact_state_and_pending():
    q = Quantizer("int8", "rtn", scale=2.0**-5)
    opt = adamw(lambda t: 0.0 if t == 0 else 0.01, scheme="eco_momentum_exact", weights=q)
    w, s = opt.init(_P0, key=0)
    np.testing.assert_array_equal(s.e_prev, _P0 - w)
    assert s.pending
    w1, s1 = opt.step(w, _sign_grad(w), s)  # lr 0: nothing written, still pending
    assert s1.pending and w1 is w
    np.testing.assert_array_equal(s1.e_prev, s.e_prev)
    w2, s2 = opt.step(w1, _sign_grad(w1), s1)
    assert not s2.pending
    assert opt.state_buffers("") == ("m", "v", "e_prev")


def test_momentum_exact_is_adamw_only():
    q = Quantizer("int8", scale=2.0**-5)
    with pytest.raises(ValueError, match="scheme must be one of"):
        sgdm(0.1, scheme="eco_momentum_exact", weights=q)
    with pytest.raises(ValueError, match="needs b1 in"):
        adamw(0.1, 0.0, scheme="eco_momentum_exact", weights=q)


# -- the schedule guard -------------------------------------------------------------------------

def _mlp():
    cfg = MLPMethodsConfig(n_train=256, n_val=64)
    prob = make_problem(cfg, 16)
    return prob, prob.quantized_names("matrices")


@pytest.mark.parametrize("lr", [3e-3, lambda t: 3e-3])
def test_guard_is_identity_at_constant_lr(lr):
    prob, names = _mlp()
    q = weight_quantizer("fp8", "sr")
    runs = []
    for guard in (False, True):
        opt = adamw(lr, 0.9, 0.98, 1e-9, 0.1, scheme="eco", weights={n: q for n in names},
                    schedule_guard=guard)
        runs.append(train(prob, opt, 40, key=5, batch_size=8, log_every=None))
    for n in names:
        np.testing.assert_array_equal(runs[0].params[n], runs[1].params[n])
        np.testing.assert_array_equal(runs[0].state.m[n], runs[1].state.m[n])
        np.testing.assert_array_equal(runs[0].state.v[n], runs[1].state.v[n])


def test_guard_bounds_the_tiny_lr_warmup_hazard():
    # 8 steps at 1e-3 x the peak, then the peak: unguarded ECO+SR injects e / (b1 lr_tiny) and
    # the peak rate consumes it, moving weights by ~(1 - b1) * 1000 grid steps.
    prob = make_problem(MLPMethodsConfig(), 32)
    names = prob.quantized_names("matrices")
    q = weight_quantizer("int4", "sr")
    peak = 3e-3
    w0 = prob.init(rng.fold_in(0, "init"))
    start = max(float(np.abs(w0[n]).max()) for n in names)
    largest = {}
    for guard in (False, True):
        opt = adamw(lambda t: peak * 1e-3 if t < 8 else peak, 0.9, 0.98, 1e-9,
                    scheme="eco", weights={n: q for n in names}, schedule_guard=guard)
        seen = []
        train(prob, opt, 40, key=0, batch_size=8, log_every=1, eval_every=1000,
              callbacks=[lambda t, p, s, r: seen.append(max(float(np.abs(p[n]).max())
                                                            for n in names))])
        largest[guard] = max(seen)
    assert largest[False] > 5 * start        # the hazard, unguarded
    assert largest[True] <= 1.1 * start      # 40 steps of 3e-3 move no weight by 10%


def test_guard_needs_eco():
    with pytest.raises(ValueError, match="schedule_guard"):
        adamw(0.1, scheme="master", weights=Quantizer("int8", scale=2.0**-5),
              schedule_guard=True)
    with pytest.raises(TypeError):
        adamw(0.1, scheme="eco", weights=Quantizer("int8", scale=2.0**-5), schedule_guard=1)


# -- the experiment on a tiny config -----------------------------------------------------------

def test_eco_adam_breakdown_smoke(tmp_path):
    r = run("eco_adam_breakdown", smoke=True, cache=tmp_path)
    cfg = r.config
    n = len(cfg.variants) * cfg.seeds + len(cfg.approx_schemes) * len(cfg.approx_modes) * cfg.seeds
    assert r["outcome"].shape == (n,)
    assert set(map(str, r["outcome"])) <= set(eco_adam.OUTCOMES)
    length = max(cfg.steps, cfg.approx_steps)
    assert r["loss"].shape == r["m_over_d"].shape == r["scale_growth"].shape == (n, length)
    sg = r["unit_variant"] == "sgdm"
    assert np.isnan(r["m_over_d"][sg]).all()           # no d without AdamW
    fixed = r["unit_variant"] == "fixed_scale"
    done = np.isfinite(r["scale_growth"][fixed])
    np.testing.assert_array_equal(r["scale_growth"][fixed][done], 1.0)  # the scale is kept
