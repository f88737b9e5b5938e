"""Optimizers over quantized weights: one table of optimizers x precisions through the same
checks (fp reference, grid membership, determinism, no mutation, dtypes), then the identities
(exact ECO = master, the virtual sequence = gradient descent), guards, and behaviour (RTN stall,
floors, the paper's ordering on a small MLP)."""
import copy
import dataclasses
import doctest
import importlib
import math

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from ecosim import Quantizer
from ecosim.optim import (
    SCHEMES,
    AdamWState,
    SGDMState,
    adamw,
    compensation_quantizer,
    dqt,
    on_grid,
    sgdm,
    warmup_cosine,
)
from ecosim.problems import MLP, Quadratic

F32 = np.float32

def test_docstring_examples_run():
    # importlib: the package's `sgdm`, `adamw` and `dqt` attributes are the factories, which
    # shadow the submodules of the same names.
    for name in ("sgdm", "adamw", "dqt"):
        mod = importlib.import_module(f"ecosim.optim.{name}")
        res = doctest.testmod(mod)
        assert res.attempted > 0 and res.failed == 0, mod.__name__


# -- shared helpers -----------------------------------------------------------------------------

TINY = MLP((6, 8, 4), n_train=64, n_val=16, key=0)  # float32, params W0 b0 W1 b1


def run(problem, opt, steps, *, key=0, pkey=1, dkey=3, batch_size=None, record=False):
    """A minimal training loop: (final params, final state[, trajectory of stored params])."""
    w, st = opt.init(problem.init(pkey), key=key)
    traj = [w]
    for t in range(steps):
        w, st = opt.step(w, problem.grad(w, problem.batch(dkey, t, batch_size)), st)
        if record:
            traj.append(w)
    return (w, st, traj) if record else (w, st)


def arrays_of(tree):
    if tree is None:
        return []
    if isinstance(tree, dict):
        return [tree[k] for k in sorted(tree)]
    return [tree]


def state_arrays(state):
    out = []
    for f in state._fields:
        v = getattr(state, f)
        if isinstance(v, (dict, np.ndarray)):
            out += arrays_of(v)
    return out


def assert_on_grids(opt, prev, params, state):
    """Every stored buffer lies on its declared grid."""
    for name, w in params.items():
        q = opt.weight_quantizer(name)
        if q is not None:
            scales = q.scales(prev[name]) if opt.prev_scale else None
            assert on_grid(q, w, scales=scales), f"weights {name} off their grid"
            if state.c is not None:
                assert on_grid(compensation_quantizer(q), state.c[name]), f"c[{name}] off grid"
        for k, qs in opt.states.items():
            assert on_grid(qs, getattr(state, k)[name]), f"{k}[{name}] off its grid"


# -- the table of optimizers x precisions -------------------------------------------------------

E4M3_RTN = Quantizer("e4m3", "rtn", granularity="row")
E4M3_SR = Quantizer("e4m3", "sr", granularity="row")
INT8_FIXED_SR = Quantizer("int8", "sr", scale=2.0**-6)  # a fixed grid
# pow2="ceil": the floor and even rules are not idempotent for int4 (RTN can round a block's
# largest negative value to the code -8, which moves the re-derived scale up a binade), so a
# re-quantization check could not tell the grid from the values alone.
INT4_GROUP = Quantizer("int4", "rtn", granularity=2, scale="absmax_pow2", pow2="ceil")

OPTIMIZERS = {
    "sgdm": lambda **kw: sgdm(0.05, 0.9, **kw),
    "sgdm_nesterov_wd": lambda **kw: sgdm(0.05, 0.8, nesterov=True, weight_decay=1e-2, **kw),
    "sgdm_heavy_ball": lambda **kw: sgdm(0.005, 0.9, heavy_ball=True, **kw),
    "adamw": lambda **kw: adamw(1e-2, **kw),
    "adamw_wd_sched": lambda **kw: adamw(warmup_cosine(1e-2, 12), 0.9, 0.98, 1e-9, 0.1,
                                         wd_corrected_injection=True, **kw),
}


def _states(spec, opt_id):
    keys = ("m",) if opt_id.startswith("sgdm") else ("m", "v")
    return {k: spec for k in keys}


PRECISIONS = {"fp": dict(scheme="fp")}
for _scheme in SCHEMES[1:]:
    PRECISIONS[f"{_scheme}-e4m3_rtn"] = dict(scheme=_scheme, weights=E4M3_RTN)
    PRECISIONS[f"{_scheme}-e4m3_sr"] = dict(scheme=_scheme, weights=E4M3_SR)
PRECISIONS.update({
    "eco-int8_fixed_sr": dict(scheme="eco", weights=INT8_FIXED_SR),
    "kahan-int8_fixed_sr": dict(scheme="kahan", weights=INT8_FIXED_SR),
    "naive-int4_pow2": dict(scheme="naive", weights=INT4_GROUP),
    "eco-policy": dict(scheme="eco",
                       weights={n: E4M3_SR for n in TINY.quantized_names("matrices")}),
    "master-policy": dict(scheme="master", weights={"W0": E4M3_RTN, "b0": None}),
    "eco-e4m3_sr-bf16_states_sr": dict(scheme="eco", weights=E4M3_SR,
                                       states=Quantizer("bf16", "sr", scale=1.0)),
    "eco-e4m3_rtn-e4m3_states": dict(scheme="eco", weights=E4M3_RTN, states="e4m3"),
    "eco_exact-e4m3_sr-bf16_states": dict(scheme="eco_exact", weights=E4M3_SR, states="bf16"),
})


def _build(opt_id, prec_id):
    kw = dict(PRECISIONS[prec_id])
    if "states" in kw:
        kw["states"] = _states(kw["states"], opt_id)
    return OPTIMIZERS[opt_id](**kw)


CASES = [(o, p) for o in OPTIMIZERS for p in PRECISIONS]
# DQT joins the table as whole configurations.
DQT_CASES = {
    "dqt8-adamw-naive": lambda: dqt(1e-2, 8, base="adamw", scheme="naive"),
    "dqt8-adamw-eco": lambda: dqt(1e-2, 8, base="adamw", scheme="eco"),
    "dqt4-sgdm-eco": lambda: dqt(0.05, 4, base="sgdm", scheme="eco", beta=0.9),
    "dqt-ternary-sgdm-naive": lambda: dqt(0.05, "ternary", base="sgdm", names=["W0", "W1"]),
    "dqt-ternary-adamw-master": lambda: dqt(1e-2, 1.58, base="adamw", scheme="master"),
}
ALL = [pytest.param(lambda o=o, p=p: _build(o, p), id=f"{o}-{p}") for o, p in CASES] + [
    pytest.param(f, id=k) for k, f in DQT_CASES.items()]

STEPS = 12


@pytest.mark.parametrize("make", ALL)
def test_table_grids_dtypes_and_no_mutation(make):
    opt = make()
    p0 = TINY.init(1)
    p0_copy = copy.deepcopy(p0)
    w, st = opt.init(p0, key=5)
    assert_array_equal_tree(p0, p0_copy)  # init does not touch its input
    assert st.step == 0 and st.key == 5
    if not opt.prev_scale:  # DQT's init grid is the init quantizer's (absmean for ternary)
        assert_on_grids(opt, w, w, st)
    for t in range(STEPS):
        g = TINY.grad(w, TINY.batch(3, t, 16))
        snap = (copy.deepcopy(w), copy.deepcopy(g), [a.copy() for a in state_arrays(st)])
        w2, st2, diag = opt.step(w, g, st, diagnostics=True)
        # inputs never mutated
        assert_array_equal_tree(w, snap[0])
        assert_array_equal_tree(g, snap[1])
        for a, b in zip(state_arrays(st), snap[2]):
            assert_array_equal(a, b)
        # dtypes: float32 stays float32, shapes kept
        for a in arrays_of(w2) + state_arrays(st2):
            assert a.dtype == F32
        assert {k: v.shape for k, v in w2.items()} == {k: v.shape for k, v in w.items()}
        assert st2.step == t + 1 and type(st2) is type(st)
        assert_on_grids(opt, w, w2, st2)
        assert all(np.isfinite(a).all() for a in arrays_of(w2) + state_arrays(st2))
        # diagnostics
        assert 0.0 <= diag["changed_frac"] <= 1.0 and diag["update_norm"] >= 0.0
        if opt.scheme == "fp":
            assert diag["e"] is None
        else:
            for name, e in diag["e"].items():
                if opt.weight_quantizer(name) is None:
                    assert not e.any()
        w, st = w2, st2


def assert_array_equal_tree(a, b):
    assert sorted(a) == sorted(b)
    for k in a:
        assert_array_equal(a[k], b[k])
        assert a[k].dtype == b[k].dtype


@pytest.mark.parametrize("make", ALL)
def test_table_determinism(make):
    opt = make()
    a_w, a_st = run(TINY, opt, 6, key=11, batch_size=16)
    b_w, b_st = run(TINY, make(), 6, key=11, batch_size=16)
    for x, y in zip(arrays_of(a_w) + state_arrays(a_st), arrays_of(b_w) + state_arrays(b_st)):
        assert_array_equal(x, y)
    sr = any(q is not None and q.mode == "sr" for q in map(opt.weight_quantizer, a_w))
    if sr:  # another key, another SR draw
        c_w, _ = run(TINY, make(), 6, key=12, batch_size=16)
        assert any((a_w[k] != c_w[k]).any() for k in a_w)


# -- fp equals an independent float64 reference -------------------------------------------------

def ref_sgdm(w, grad, steps, lr, beta, weight_decay=0.0, nesterov=False, heavy_ball=False):
    """SGD with momentum written out (torch.optim.SGD with dampening = beta, except that the
    first buffer is (1 - beta) g rather than g)."""
    m = np.zeros_like(w)
    traj = []
    for t in range(steps):
        g = grad(w) + weight_decay * w
        m = beta * m + (g if heavy_ball else (1 - beta) * g)
        u = beta * m + (g if heavy_ball else (1 - beta) * g) if nesterov else m
        w = w - lr(t) * u
        traj.append(w)
    return traj


def ref_adamw(w, grad, steps, lr, b1, b2, eps, wd):
    m, v = np.zeros_like(w), np.zeros_like(w)
    traj = []
    for t in range(steps):
        g = grad(w)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        d = np.sqrt(v / (1 - b2 ** (t + 1))) + eps
        w = w * (1 - lr(t) * wd) - (lr(t) / (1 - b1 ** (t + 1))) * (m / d)
        traj.append(w)
    return traj


QUAD = Quadratic(16, L=2.0, cond=20.0, rotated=True, key=1)


@pytest.mark.parametrize("kw", [dict(), dict(nesterov=True), dict(heavy_ball=True),
                                dict(nesterov=True, heavy_ball=True, weight_decay=0.1)])
@pytest.mark.parametrize("lr", [0.05, warmup_cosine(0.1, 100)])
def test_fp_sgdm_equals_reference(kw, lr):
    opt = sgdm(lr, 0.9, scheme="fp", **kw)
    _, _, traj = run(QUAD, opt, 100, record=True)
    sched = opt.lr
    ref = ref_sgdm(QUAD.init(1), QUAD.grad, 100, sched, 0.9, **kw)
    for a, b in zip(traj[1:], ref):
        assert_allclose(a, b, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("wd", [0.0, 0.1])
@pytest.mark.parametrize("lr", [0.05, warmup_cosine(0.1, 100)])
def test_fp_adamw_equals_reference(wd, lr):
    opt = adamw(lr, 0.9, 0.98, 1e-9, wd, scheme="fp")
    _, _, traj = run(QUAD, opt, 100, record=True)
    ref = ref_adamw(QUAD.init(1), QUAD.grad, 100, opt.lr, 0.9, 0.98, 1e-9, wd)
    for a, b in zip(traj[1:], ref):
        assert_allclose(a, b, rtol=1e-13, atol=1e-15)


def test_fp_matches_torch_when_installed():
    torch = pytest.importorskip("torch")
    w0 = QUAD.init(1)
    for kind in ("sgd", "adamw"):
        p = torch.tensor(w0.copy(), dtype=torch.float64, requires_grad=True)
        if kind == "sgd":  # heavy-ball = torch's undamped momentum, first step included
            topt = torch.optim.SGD([p], lr=0.05, momentum=0.9, weight_decay=0.1)
            opt = sgdm(0.05, 0.9, scheme="fp", heavy_ball=True, weight_decay=0.1)
        else:
            topt = torch.optim.AdamW([p], lr=0.01, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.1)
            opt = adamw(0.01, 0.9, 0.98, 1e-9, 0.1, scheme="fp")
        w, st = opt.init(w0)
        for _ in range(50):
            g = QUAD.grad(w)
            w, st = opt.step(w, g, st)
            p.grad = torch.tensor(QUAD.grad(p.detach().numpy()))
            topt.step()
        assert_allclose(w, p.detach().numpy(), rtol=1e-10, atol=1e-12)


# -- exact ECO reproduces the master trajectory ---------------------------------------------------

def codes_and_scales(q, w):
    enc = dataclasses.replace(q, mode="rtn").encode(w)
    return enc.codes.view(np.uint8), enc.scales


def compare_trajectories(q, a, b):
    """Codes must agree exactly; returns (elements whose dequantized values differ, total,
    largest relative difference of the scales)."""
    diff = total = 0
    worst = 0.0
    for x, y in zip(a, b):
        x = x if isinstance(x, dict) else {"": x}
        y = y if isinstance(y, dict) else {"": y}
        for k in x:
            cx, sx = codes_and_scales(q, x[k])
            cy, sy = codes_and_scales(q, y[k])
            assert_array_equal(cx, cy)
            worst = max(worst, float(np.max(np.abs(sx - sy) / sx)))
            diff += int(np.count_nonzero(x[k] != y[k]))
            total += x[k].size
    return diff, total, worst


EXACT_QUAD = Quadratic(50, L=1.0, cond=10.0, rotated=True, key=0)


_EXACT_OPTS = {
    "sgdm": (lambda lr, **kw: sgdm(lr, 0.9, **kw), 0.05),
    "nesterov": (lambda lr, **kw: sgdm(lr, 0.9, nesterov=True, **kw), 0.05),
    "heavy_ball": (lambda lr, **kw: sgdm(lr, 0.9, heavy_ball=True, **kw), 0.005),
    "adamw": (lambda lr, **kw: adamw(lr, weight_decay=0.1, **kw), 0.01),
}
_EXACT_CASES = [(o, m, "constant") for o in _EXACT_OPTS for m in ("rtn", "sr")] + [
    (o, "sr", s) for o in ("sgdm", "nesterov", "adamw") for s in ("warmup_cosine",
                                                                   "warmup_from_zero")]


@pytest.mark.parametrize("opt_id,mode,sched", _EXACT_CASES)
def test_eco_exact_reproduces_master_on_quadratic(opt_id, mode, sched):
    """1000 steps in float64, same key. Fixed-scale grid: bit-identical stored weights.
    Absmax (data-dependent) scale: identical codes at every step; the scale max|theta|/rho may
    differ in its last bit because master computes theta - lr m and exact ECO
    theta_hat + (e terms) - lr m, which round differently."""
    make, lr = _EXACT_OPTS[opt_id]
    steps = 1000
    if sched == "warmup_cosine":
        lr = warmup_cosine(lr, steps)
    elif sched == "warmup_from_zero":  # lr(0) = 0: exercises the pending error
        lr = warmup_cosine(lr, steps, init_frac=0.0)
    fixed = Quantizer("int8", mode, scale=2.0**-5)
    _, _, a = run(EXACT_QUAD, make(lr, scheme="master", weights=fixed), steps, record=True)
    _, _, b = run(EXACT_QUAD, make(lr, scheme="eco_exact", weights=fixed), steps, record=True)
    for x, y in zip(a, b):
        assert_array_equal(x, y)
    q = Quantizer("e4m3", mode)
    _, _, a = run(EXACT_QUAD, make(lr, scheme="master", weights=q), steps, record=True)
    _, _, b = run(EXACT_QUAD, make(lr, scheme="eco_exact", weights=q), steps, record=True)
    diff, total, worst = compare_trajectories(q, a, b)
    # Measured: AdamW (exact error feedback) 0 differing values; SGDM up to ~60% of the
    # 50,050 stored values differ, all by one scale ulp (worst relative scale gap ~3e-15).
    assert worst < 1e-13
    if make(0.1, scheme="fp").name == "adamw":
        assert diff == 0


@pytest.mark.parametrize("make,lr,mode", [
    (lambda lr, **kw: sgdm(lr, 0.9, **kw), 0.05, "sr"),
    (lambda lr, **kw: adamw(lr, weight_decay=0.01, **kw), 1e-3, "rtn"),
], ids=["sgdm-sr", "adamw-rtn"])
def test_eco_exact_reproduces_master_on_mlp(make, lr, mode):
    """A small float64 MLP, FP8 row-wise, mini-batches, 1000 steps, same keys."""
    mlp = MLP((8, 16, 16, 4), n_train=256, n_val=64, key=0, dtype=np.float64)
    q = Quantizer("e4m3", mode, granularity="row")
    _, _, a = run(mlp, make(lr, scheme="master", weights=q), 1000, batch_size=32, record=True)
    _, _, b = run(mlp, make(lr, scheme="eco_exact", weights=q), 1000, batch_size=32,
                  record=True)
    diff, total, worst = compare_trajectories(q, a, b)
    # Measured (SGDM, SR): codes identical at all 1000 steps; ~70% of the dequantized values
    # differ from master's by the last bits of their row's scale (relative gap < 1e-11: the
    # one-ulp scale differences feed back through the gradients). AdamW: bit-identical.
    assert worst < 1e-9
    if make(0.1, scheme="fp").name == "adamw":
        assert diff == 0


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["rtn", "sr"])
@pytest.mark.parametrize("name", ["sgdm", "adamw"])
def test_eco_exact_reproduces_master_on_mlp_wide(name, mode):
    mlp = MLP((8, 32, 32, 4), n_train=256, n_val=64, key=0, dtype=np.float64)
    q = Quantizer("e4m3", mode, granularity="row")
    make = (lambda **kw: sgdm(0.05, 0.9, **kw)) if name == "sgdm" else (
        lambda **kw: adamw(1e-3, weight_decay=0.01, **kw))
    for key in range(3):
        _, _, a = run(mlp, make(scheme="master", weights=q), 1000, key=key, batch_size=32,
                      record=True)
        _, _, b = run(mlp, make(scheme="eco_exact", weights=q), 1000, key=key, batch_size=32,
                      record=True)
        _, _, worst = compare_trajectories(q, a, b)
        assert worst < 1e-9


# -- the virtual sequence follows gradient descent ----------------------------------------------

def _virtual_steps(opt, steps):
    """Runs ``opt`` on EXACT_QUAD from ``init(1)`` (key 0); yields ``(g, w, w_new, x, x_new)``
    at every step: the gradient at the stored weights ``w``, the weights after the step, and
    the virtual sequence before and after it."""
    w, st = opt.init(EXACT_QUAD.init(1), key=0)
    x = opt.virtual(w, st)
    for _ in range(steps):
        g = EXACT_QUAD.grad(w)
        w_new, st = opt.step(w, g, st)
        x_new = opt.virtual(w_new, st)
        yield g, w, w_new, x, x_new
        w, x = w_new, x_new

@pytest.mark.parametrize("mode", ["rtn", "sr"])
@pytest.mark.parametrize("kw,gd_step", [
    (dict(), 1.0), (dict(nesterov=True), 1.0),
    (dict(heavy_ball=True), 1 / (1 - 0.9)), (dict(nesterov=True, heavy_ball=True), 1 / (1 - 0.9)),
], ids=["ema", "nesterov", "heavy_ball", "nesterov_heavy_ball"])
def test_virtual_sequence_is_gradient_descent(kw, gd_step, mode):
    """x_t = theta_hat_t - (lr gain/(1-beta)) m_t satisfies x_{t+1} = x_t - lr' grad f(theta_hat_t)
    with lr' = lr (EMA form) or lr/(1-beta) (heavy ball), to round-off, every step."""
    lr, eps = 0.02, np.finfo(np.float64).eps
    opt = sgdm(lr, 0.9, scheme="eco", weights=Quantizer("e4m3", mode), **kw)
    moved = 0
    for g, w, w_new, x, x_new in _virtual_steps(opt, 500):
        moved += int(np.count_nonzero(w_new != w))
        scale = max(np.abs(x_new).max(), np.abs(w_new).max(), 1.0)
        # measured worst residual: 0.76 * eps * scale
        assert np.abs(x_new - (x - lr * gd_step * g)).max() <= 8 * eps * scale
    assert moved > 0  # the weights did move: the identity is not vacuous


def test_virtual_sequence_is_not_gradient_descent_for_naive():
    lr = 0.02
    opt = sgdm(lr, 0.9, scheme="naive", weights=Quantizer("e4m3"))
    worst = max(np.abs(x_new - (x - lr * g)).max()
                for g, _, _, x, x_new in _virtual_steps(opt, 100))
    assert worst > 1e-3  # the dropped error shows up


# -- zero learning rates, guards ----------------------------------------------------------------

class OnOff:
    """lr = 0 on odd steps (and at step 0), `lr` otherwise."""

    def __init__(self, lr):
        self.lr = lr

    def __call__(self, t):
        return 0.0 if t % 2 == 1 or t == 0 else self.lr


@pytest.mark.parametrize("scheme", ["master", "naive", "eco", "eco_exact", "kahan"])
@pytest.mark.parametrize("make", [lambda **kw: sgdm(OnOff(0.05), 0.9, **kw),
                                  lambda **kw: adamw(OnOff(1e-2), weight_decay=0.1, **kw)],
                         ids=["sgdm", "adamw"])
def test_zero_lr_steps_write_nothing_and_stay_finite(make, scheme):
    opt = make(scheme=scheme, weights=E4M3_SR)
    w, st = opt.init(TINY.init(1), key=0)
    for t in range(8):
        g = TINY.grad(w, TINY.batch(3, t, 16))
        w2, st2, diag = opt.step(w, g, st, diagnostics=True)
        if t % 2 == 1 or t == 0:
            for k in w:
                assert w2[k] is w[k]  # not rewritten
            assert diag["changed_frac"] == 0.0 and diag["update_norm"] == 0.0
            assert not any(e.any() for e in diag["e"].values())
            assert not all((st2.m[k] == st.m[k]).all() for k in w)  # moments still accumulate
        assert all(np.isfinite(a).all() for a in state_arrays(st2) + arrays_of(w2))
        w, st = w2, st2


def test_eco_exact_with_zero_lr_steps_still_reproduces_master():
    q = Quantizer("int8", "sr", scale=2.0**-5)
    for make in (lambda **kw: sgdm(OnOff(0.05), 0.9, **kw),
                 lambda **kw: sgdm(OnOff(0.05), 0.9, nesterov=True, **kw)):
        _, _, a = run(EXACT_QUAD, make(scheme="master", weights=q), 200, record=True)
        _, _, b = run(EXACT_QUAD, make(scheme="eco_exact", weights=q), 200, record=True)
        for x, y in zip(a, b):
            assert_array_equal(x, y)


def test_eco_exact_pending_flag():
    zero_at = {0, 3}
    opt = sgdm(lambda t: 0.0 if t in zero_at else 0.05, 0.9, scheme="eco_exact",
               weights=E4M3_RTN)
    w, st = opt.init(TINY.init(1))
    assert st.pending and not any(st.m[k].any() for k in st.m)  # lr(0) = 0: m_0 = 0
    g = TINY.grad(w)
    # t=0: lr 0, stays pending; t=1: lr(1), lr(2) > 0: injected; t=2: lr(3) = 0: pending;
    # t=3: lr 0: pending; t=4: injected again
    for expected in (True, False, True, True, False):
        w, st = opt.step(w, g, st)
        assert st.pending == expected
    opt2 = sgdm(0.05, 0.9, scheme="eco_exact", weights=E4M3_RTN)
    w, st = opt2.init(TINY.init(1))
    assert not st.pending
    e0 = {k: TINY.init(1)[k] - w[k] for k in w}
    for k in w:  # m_0 = -e_0 / (beta lr)
        assert_allclose(st.m[k], -e0[k] / (0.9 * 0.05), rtol=1e-6)


@pytest.mark.parametrize("scheme", ["eco", "eco_exact"])
def test_guards_eco_constant_lr_and_beta(scheme):
    for bad_lr in (0.0, -0.1):
        with pytest.raises(ValueError, match="lr > 0"):
            sgdm(bad_lr, 0.9, scheme=scheme, weights=E4M3_RTN)
        with pytest.raises(ValueError, match="lr > 0"):
            adamw(bad_lr, scheme=scheme, weights=E4M3_RTN)
    for bad_beta in (0.0, 1.0, 1.5, -0.1):
        with pytest.raises(ValueError, match=r"beta in \(0, 1\)"):
            sgdm(0.1, bad_beta, scheme=scheme, weights=E4M3_RTN)
        with pytest.raises(ValueError, match=r"b1 in \(0, 1\)"):
            adamw(0.1, bad_beta, scheme=scheme, weights=E4M3_RTN)
    with pytest.raises(ValueError, match="finite"):
        sgdm(float("nan"), 0.9, scheme=scheme, weights=E4M3_RTN)


def test_guards_other_arguments():
    sgdm(0.1, 0.0, scheme="master", weights=E4M3_RTN)  # plain SGD is fine without ECO
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        sgdm(0.1, 1.0, scheme="naive", weights=E4M3_RTN)
    with pytest.raises(ValueError, match="scheme must be one of"):
        sgdm(0.1, scheme="ecoo", weights=E4M3_RTN)
    with pytest.raises(ValueError, match="needs weights"):
        sgdm(0.1, scheme="eco")
    with pytest.raises(ValueError, match="weights=None"):
        adamw(0.1, scheme="fp", weights=E4M3_RTN)
    with pytest.raises(TypeError, match="Quantizer"):
        sgdm(0.1, scheme="eco", weights="e4m3")
    with pytest.raises(ValueError, match="states keys"):
        sgdm(0.1, scheme="eco", weights=E4M3_RTN, states={"v": "bf16"})
    with pytest.raises(ValueError, match="eps"):
        adamw(0.1, eps=0.0, scheme="fp")
    with pytest.raises(ValueError, match="weight_decay"):
        adamw(0.1, weight_decay=-1.0, scheme="fp")
    with pytest.raises(ValueError, match="not parameters"):
        sgdm(0.1, scheme="eco", weights={"W9": E4M3_RTN}).init(TINY.init(1))
    with pytest.raises(ValueError, match="dict params"):
        sgdm(0.1, scheme="eco", weights={"W0": E4M3_RTN}).init(np.ones(3))
    with pytest.raises(ValueError, match="bits"):
        dqt(0.1, bits=3)
    with pytest.raises(ValueError, match="base"):
        dqt(0.1, base="lion")


def test_guards_schedule_values():
    class Sched:
        def __call__(self, t):
            return [0.1, -0.1, float("nan")][t]

    for scheme, q in (("eco", E4M3_RTN), ("fp", None)):
        opt = sgdm(Sched(), 0.9, scheme=scheme, weights=q)
        w, st = opt.init(np.ones(4))
        w, st = opt.step(w, np.ones(4), st)
        with pytest.raises(ValueError, match="learning rate at step 1"):
            opt.step(w, np.ones(4), st)
        with pytest.raises(ValueError, match="learning rate at step 2"):
            opt.step(w, np.ones(4), st._replace(step=2))
    # exact ECO needs lr(t+1) at step t: the bad value is reported one step earlier
    opt = sgdm(Sched(), 0.9, scheme="eco_exact", weights=E4M3_RTN)
    w, st = opt.init(np.ones(4))
    with pytest.raises(ValueError, match="learning rate at step 1"):
        opt.step(w, np.ones(4), st)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("scheme", ["fp", "naive", "eco", "master"])
def test_non_finite_gradients_are_refused(bad, scheme):
    opt = adamw(1e-2, scheme=scheme, weights=None if scheme == "fp" else E4M3_SR)
    w, st = opt.init(TINY.init(1))
    g = TINY.grad(w)
    g["b0"] = g["b0"].copy()
    g["b0"][2] = bad
    with pytest.raises(ValueError, match=r"gradient of parameter 'b0' has 1 non-finite"):
        opt.step(w, g, st)


def test_structure_and_state_checks():
    opt = sgdm(0.1, scheme="eco", weights=E4M3_RTN)
    w, st = opt.init(TINY.init(1))
    g = TINY.grad(w)
    with pytest.raises(ValueError, match="structure"):
        opt.step(w, {k: g[k] for k in ("W0", "b0")}, st)
    with pytest.raises(ValueError, match="shape"):
        opt.step(w, {**g, "W0": g["W0"][:2]}, st)
    with pytest.raises(TypeError, match="SGDMState"):
        opt.step(w, g, adamw(0.1, scheme="fp").init(w)[1])
    with pytest.raises(TypeError, match="float32 or float64"):
        opt.init({"a": np.arange(3)})
    with pytest.raises(ValueError, match="non-finite"):
        opt.init({"a": np.array([1.0, np.nan])})


def test_float64_grads_do_not_upcast_float32_params():
    opt = adamw(1e-2, scheme="eco", weights=E4M3_SR)
    w, st = opt.init(TINY.init(1))
    g = {k: v.astype(np.float64) for k, v in TINY.grad(w).items()}
    w, st = opt.step(w, g, st)
    assert all(a.dtype == F32 for a in arrays_of(w) + state_arrays(st))


def test_bare_arrays_and_key_derivation():
    """A bare array is the parameter named "": its SR key at step t is fold_in(key, t, "")."""
    from ecosim import rng

    q = Quantizer("int8", "sr", scale=2.0**-6)
    opt = sgdm(0.1, 0.9, scheme="naive", weights=q)
    w0 = np.linspace(-1, 1, 7)
    w, st = opt.init(w0, key=9)
    assert_array_equal(w, q(w0, key=rng.fold_in(9, "init", "")))
    g = np.full(7, 0.3)
    w1, st1 = opt.step(w, g, st)
    m = (1 - 0.9) * g  # m_0 = 0
    assert_array_equal(w1, q(w - 0.1 * m, key=rng.fold_in(9, 0, "")))
    assert isinstance(st1, SGDMState) and isinstance(st1.m, np.ndarray)
    assert isinstance(adamw(0.1, scheme="fp").init(w0)[1], AdamWState)


def test_diagnostics_values():
    opt = sgdm(0.05, 0.9, scheme="naive", weights=E4M3_RTN)
    w, st = opt.init(TINY.init(1))
    for t in range(5):
        g = TINY.grad(w, TINY.batch(3, t, 16))
        w2, st2, d = opt.step(w, g, st, diagnostics=True)
        tt = {k: w[k] - 0.05 * st2.m[k] for k in w}
        for k in w:
            assert_array_equal(d["e"][k], tt[k] - w2[k])
        n = sum(v.size for v in w.values())
        assert d["changed_frac"] == sum(int((w2[k] != w[k]).sum()) for k in w) / n
        norm = math.sqrt(sum(float(np.sum((tt[k] - w[k]).astype(np.float64) ** 2)) for k in w))
        assert d["update_norm"] == pytest.approx(norm, rel=1e-6)
        assert d["lr"] == 0.05
        w, st = w2, st2


def test_kahan_tracks_master_weights_better_than_naive():
    """Kahan is exact error feedback with e stored on the compensation grid (int8 with its own
    absmax scale here): it differs from exact ECO by the rounding of e, yet tracks the master
    trajectory far more closely than naive rounding."""
    q = Quantizer("int8", "rtn", scale=2.0**-5)
    _, _, a = run(QUAD, adamw(0.01, weight_decay=0.1, scheme="eco_exact", weights=q), 200,
                  record=True)
    _, _, b = run(QUAD, adamw(0.01, weight_decay=0.1, scheme="kahan", weights=q), 200,
                  record=True)
    assert any((x != y).any() for x, y in zip(a, b))
    _, _, m = run(QUAD, adamw(0.01, weight_decay=0.1, scheme="master", weights=q), 200,
                  record=True)
    _, _, n = run(QUAD, adamw(0.01, weight_decay=0.1, scheme="naive", weights=q), 200,
                  record=True)
    dk = np.mean([np.abs(x - y).mean() for x, y in zip(m, b)])
    dn = np.mean([np.abs(x - y).mean() for x, y in zip(m, n)])
    assert dk < 0.5 * dn


# -- DQT ------------------------------------------------------------------------------------------

def test_dqt_grid_comes_from_the_previous_weights():
    opt = dqt(0.05, 8, base="sgdm", scheme="naive", beta=0.9)
    p0 = TINY.init(1)
    w, st = opt.init(p0)
    step_q = opt.weight_quantizer("W0")
    for t in range(10):
        g = TINY.grad(w, TINY.batch(3, t, 16))
        w2, st = opt.step(w, g, st)
        for k in w:
            s_prev = step_q.scales(w[k])
            assert on_grid(step_q, w2[k], scales=s_prev)
            assert np.abs(w2[k]).max() <= 127 * s_prev.max() * (1 + 1e-6)  # saturates
        w = w2


def test_dqt_ternary_init_is_absmean_and_grid_step_is_kept():
    opt = dqt(0.05, "ternary", base="sgdm")
    p0 = TINY.init(1)
    w, st = opt.init(p0)
    s0 = opt._init_quantizer("W0").scales(p0["W0"])  # mean|W0| (accumulated in float64)
    assert_allclose(s0, np.abs(p0["W0"]).mean(), rtol=1e-6)
    assert np.isin(w["W0"] / s0, [-1, 0, 1]).all()
    for t in range(20):
        w, st = opt.step(w, TINY.grad(w, TINY.batch(3, t, 16)), st)
    vals = np.unique(np.abs(w["W0"]))
    assert vals[0] == 0 and len(vals) == 2
    assert vals[1] == s0.item()  # the absmax of ternary weights is exactly their step


# -- behaviour ------------------------------------------------------------------------------------

STALL_QUAD = Quadratic(64, L=1.0, cond=10.0, key=0)


def tail_loss(problem, opt, steps, key, tail):
    w, st = opt.init(problem.init(1), key=key)
    losses, changed = [], []
    for _ in range(steps):
        w, st, d = opt.step(w, problem.grad(w), st, diagnostics=True)
        losses.append(problem.loss(w))
        changed.append(d["changed_frac"])
    return float(np.mean(losses[-tail:])), float(np.mean(changed[-tail:]))


def test_quadratic_naive_rtn_stalls_eco_escapes_eco_sr_near_master_sr():
    """Exact gradients, a fixed-scale int8 grid (step 1/32), SGDM lr 0.05, beta 0.9.

    Measured (2000 steps, tail = mean loss over the last 1000): f(x0) = 17.4; naive+RTN
    freezes at 3.50 (no stored weight changes in the tail) at distance 5.8 from x*; eco+RTN
    reaches 2.0e-3, as master+RTN; over keys 0..2 eco+SR's floor is 1.21-1.23x master+SR's
    (2.0e-3). (naive+SR: 2.4e-3 -- with exact gradients naive SR does not blow up,
    docs/theory.md §5.4.)"""
    steps, tail = 2000, 1000
    fixed = lambda mode: Quantizer("int8", mode, scale=2.0**-5)  # noqa: E731
    make = lambda scheme, mode: sgdm(0.05, 0.9, scheme=scheme, weights=fixed(mode))  # noqa: E731
    f0 = STALL_QUAD.loss(STALL_QUAD.init(1))
    naive, ch_naive = tail_loss(STALL_QUAD, make("naive", "rtn"), steps, 0, tail)
    eco, _ = tail_loss(STALL_QUAD, make("eco", "rtn"), steps, 0, tail)
    master, _ = tail_loss(STALL_QUAD, make("master", "rtn"), steps, 0, tail)
    assert ch_naive == 0.0 and naive > 0.1 * f0  # stalled far from the optimum
    assert eco < 3 * master and eco < 1e-3 * naive  # ECO escapes the stall
    ratios = []
    for key in range(3):
        e_sr, _ = tail_loss(STALL_QUAD, make("eco", "sr"), steps, key, tail)
        m_sr, _ = tail_loss(STALL_QUAD, make("master", "sr"), steps, key, tail)
        ratios.append(e_sr / m_sr)
    assert max(ratios) < 2.0, ratios  # and well under the additive-noise 1/(1-beta^2) = 5.3


#: The MLP experiment of the paper's shape, small: teacher-student regression with a linear
#: teacher and label noise 0.3 (irreducible validation loss 0.09), widths 8-32-32-2, AdamW
#: (0.9, 0.98), eps 1e-9, warmup + cosine from 3e-3, batch 8, 1500 steps; FP8 E4M3 row-wise
#: absmax weights on the three weight matrices, biases in full precision.
PAPER_MLP = MLP((8, 32, 32, 2), n_train=2048, n_val=512, key=0, noise=0.3, teacher=())


def paper_mlp_run(scheme, mode, seed, steps=1500):
    q = Quantizer("e4m3", mode, granularity="row")
    names = PAPER_MLP.quantized_names("matrices")
    opt = adamw(warmup_cosine(3e-3, steps), 0.9, 0.98, 1e-9, 0.0, scheme=scheme,
                weights=None if scheme == "fp" else {n: q for n in names})
    w, st = opt.init(PAPER_MLP.init(seed + 1), key=seed)
    for t in range(steps):
        w, st = opt.step(w, PAPER_MLP.grad(w, PAPER_MLP.batch(seed + 10, t, 8)), st)
    return PAPER_MLP.val_loss(w)


PAPER_RUNS = (("master", "rtn"), ("master", "sr"), ("eco", "sr"), ("eco", "rtn"), ("naive", "sr"),
              ("naive", "rtn"))


def _paper_per_seed(seeds):
    """The claims that hold on every seed with a margin (measured over seeds 0-23)."""
    res = {r: np.array([paper_mlp_run(*r, seed) for seed in seeds]) for r in PAPER_RUNS}
    init = np.mean([PAPER_MLP.val_loss(PAPER_MLP.init(s + 1)) for s in seeds])
    for r, v in res.items():  # everything trains
        assert v.mean() < 0.5 * init, (r, v, init)
    # ECO+SR is close to master+SR on every seed (measured: |difference| at most 0.0061)
    assert (abs(res["eco", "sr"] - res["master", "sr"]) < 0.01).all(), res
    # RTN: naive stalls far above ECO on every seed (measured: ratio at least 1.86)
    assert (res["naive", "rtn"] > 1.5 * res["eco", "rtn"]).all(), res
    return res


def _one_sided_lower(d, level):
    """Lower end of the one-sided `level` Student-t interval for the mean of the paired
    differences `d` (one per seed: the seeds are independent, the methods within a seed share
    initial weights, batches and SR draws)."""
    from scipy import stats
    n = d.size
    return d.mean() - stats.t.ppf(level, n - 1) * d.std(ddof=1) / math.sqrt(n)


def test_mlp_fp8_paper_ordering():
    """Measured validation losses, seeds 0/1/2 (numpy 2.4.6 with its OpenBLAS 0.3.31, Haswell
    kernel; initial 1.38/3.33/3.42, irreducible 0.09; fp 0.113/0.120/0.113): master+RTN
    0.115/0.121/0.114, master+SR 0.117/0.128/0.114, ECO+SR 0.114/0.124/0.117, ECO+RTN
    0.117/0.123/0.158, naive+SR 0.116/0.129/0.116, naive+RTN 0.37/0.45/0.37.

    Not asserted here: naive+SR worse than ECO+SR. The paired difference is +0.0016/+0.0043/
    -0.0008 (mean +0.0017, standard deviation 0.0025): three seeds cannot tell the two apart
    (one-sided 95% t bound -0.0026). The same holds for ECO+RTN above ECO+SR (seed 1: -0.0014).
    Both are asserted over 24 seeds in the slow test below.

    The last digits are not portable: float32 matrix products go through OpenBLAS, whose kernel
    (chosen at run time for the CPU) fixes the order of the sums, and training turns last-bit
    differences into different SR outcomes and trajectories, so another CPU gives other losses of
    the same spread (forcing OPENBLAS_CORETYPE=Sandybridge here moves seed 2's ECO+SR from 0.1171
    to 0.1155; numpy 2.2.6, 2.3.5 and 2.4.6 on the same kernel agree bit for bit).
    """
    _paper_per_seed(range(3))


@pytest.mark.slow
def test_mlp_fp8_paper_ordering_more_seeds():
    """The orderings that are statistical claims, over seeds 0-23, on paired differences.

    Measured (as above; mean over 24 seeds): master+RTN 0.1137, master+SR 0.1152, ECO+SR
    0.1144, ECO+RTN 0.1299, naive+SR 0.1176, naive+RTN 0.392. naive+SR - ECO+SR: mean +0.0032,
    standard deviation 0.0037, naive+SR worse on 19 of 24 seeds; one-sided bounds 95% +0.0019,
    99% +0.0013. ECO+RTN - ECO+SR: mean +0.0156, one-sided 95% bound +0.0091. ECO+SR - master+SR:
    mean -0.0008, standard error 0.0005.

    The 95% level: with a true effect of this size (mean/sd about 0.86, t about 4.2 at n = 24)
    another CPU's draw falls under the 95% threshold (t = 1.71) with probability under 1%, under
    the 99% one (t = 2.50) about 5% of the time; with no effect the test fails 95% of the time.
    """
    seeds = range(24)
    res = _paper_per_seed(seeds)
    assert len(seeds) == 24
    # naive+SR is worse than ECO+SR: a small effect, significant over 24 seeds
    assert _one_sided_lower(res["naive", "sr"] - res["eco", "sr"], 0.95) > 0, res
    # ECO+RTN lies above ECO+SR
    assert _one_sided_lower(res["eco", "rtn"] - res["eco", "sr"], 0.95) > 0, res
    # ECO+SR is within 0.005 of master+SR: both one-sided 95% bounds inside (equivalence)
    d = res["eco", "sr"] - res["master", "sr"]
    assert _one_sided_lower(d, 0.95) > -0.005 and -_one_sided_lower(-d, 0.95) < 0.005, d


def test_dqt_and_eco_meet_on_one_problem():
    """DQT (naive + SR on the previous step's int4 grid) and ECO on the same grids both train.

    Measured in development (800 steps, 2 seeds, 16-64-64-4 MLP, AdamW): int4 naive (DQT)
    0.726/0.677, eco 0.661/0.659, master 0.666/0.694, fp 0.607; at 8 bits all within 0.01 of
    fp; ternary about 0.65-0.68 for all three. The assertions keep to what holds per seed.
    """
    from ecosim import train
    mlp = MLP((16, 64, 64, 4), loss="xent", n_train=2048, n_val=512, key=0)
    names = mlp.quantized_names("matrices")
    lr = warmup_cosine(3e-3, 800)
    init = mlp.val_loss(mlp.init(0))
    fp = train(mlp, adamw(lr, 0.9, 0.98, 1e-9, scheme="fp"), 800, key=0, batch_size=32)
    for scheme in ("naive", "eco"):
        opt = dqt(lr, 4, scheme=scheme, names=names, b1=0.9, b2=0.98, eps=1e-9)
        h = train(mlp, opt, 800, key=0, batch_size=32)
        assert h.final_val_loss < 0.6 * init
        assert h.final_val_loss < fp.final_val_loss + 0.15
        for n in names:  # stored weights stay on a per-tensor int4 grid: 16 levels at most
            assert np.unique(h.params[n]).size <= 16
