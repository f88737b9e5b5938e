"""The scheme records (ecosim.optim.schemes): one registry that the optimizers, the memory
accounting and the torch mirror all read, and the shared real-number checks (ecosim.core.checks)."""
import dataclasses
import doctest

import numpy as np
import pytest

from ecosim import Quantizer, memory
from ecosim.core.checks import check_positive, check_real
from ecosim.optim import ADAMW_SCHEMES, SCHEMES, adamw, muon, schemes, sgdm
from ecosim.optim.schemes import Scheme, get, injection, names_for, torch_names_for

Q = Quantizer("e4m3", "sr", granularity="row")


def test_docstring_examples_run():
    res = doctest.testmod(schemes)
    assert res.attempted > 0 and res.failed == 0


def test_the_scheme_lists_come_from_the_registry():
    assert SCHEMES == ("fp", "master", "naive", "eco", "eco_exact", "kahan")
    assert ADAMW_SCHEMES == names_for("adamw")
    assert ADAMW_SCHEMES[:len(SCHEMES)] == SCHEMES
    assert names_for("sgdm") == names_for("muon") == SCHEMES
    assert set(torch_names_for("sgdm")) <= set(names_for("sgdm")) - {"fp"}
    with pytest.raises(ValueError, match="scheme must be one of"):
        get("nope")


@pytest.mark.parametrize("scheme", ADAMW_SCHEMES)
def test_every_optimizer_keeps_the_buffers_its_scheme_declares(scheme):
    """The state holds exactly the record's buffers (besides the moments), and the memory
    formula counts exactly those."""
    p = {"W": np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)}
    opts = [adamw(1e-2, scheme=scheme, weights=None if scheme == "fp" else Q)]
    if scheme in SCHEMES:
        opts += [sgdm(0.05, scheme=scheme, weights=None if scheme == "fp" else Q),
                 muon(0.02, scheme=scheme, weights=None if scheme == "fp" else Q)]
    for opt in opts:
        w, st = opt.init(p, key=0)
        w, st = opt.step(w, {"W": np.ones((3, 4), np.float32)}, st)
        held = {b for b in ("master", "e_prev", "c") if getattr(st, b) is not None}
        assert held == set(get(scheme).buffers), (opt.name, scheme)
        moments = ("m", "v") if opt.name == "adamw" else ("m",)
        assert opt.state_buffers("W", (3, 4)) == moments + get(scheme).buffers
        formula = memory.bytes_per_param(opt.name, scheme, weights=Q)
        assert {b for b in ("master", "e_prev", "c") if getattr(formula, b)} == held


def test_a_record_is_checked():
    with pytest.raises(ValueError, match="base in"):
        Scheme("x", "", base="elsewhere")
    with pytest.raises(ValueError, match="exact is set exactly"):
        Scheme("x", "", after="exact")
    with pytest.raises(ValueError, match="buffers among"):
        Scheme("x", "", buffers=("z",))


def test_base_values_and_the_exact_schemes_route():
    w, bufs = np.float64(1.0), {"master": 5.0, "c": 0.25, "e_prev": 0.5}
    load = bufs.__getitem__
    assert get("master").base_value(w, load, pending=False, linear=True) == 5.0
    assert get("kahan").base_value(w, load, pending=False, linear=True) == 1.25
    assert get("eco").base_value(w, load, pending=True, linear=False) == 1.0
    exact = get("eco_exact")
    # SGDM (linear): carried in the momentum unless pending; AdamW and Muon: feedback.
    assert exact.base_value(w, load, pending=False, linear=True) == 1.0
    assert exact.base_value(w, load, pending=True, linear=True) == 1.5
    assert exact.base_value(w, load, pending=False, linear=False) == 1.5
    mexact = get("eco_momentum_exact")
    assert mexact.base_value(w, load, pending=False, linear=False) == 1.0
    assert mexact.through_momentum(False) and not exact.through_momentum(False)


def test_coefficient_is_eco_times_decay_when_corrected():
    eco = get("eco")
    assert eco.coefficient(100.0, 0.9) == 100.0 * (1.0 - 1.0 / 0.9)
    corrected = dataclasses.replace(eco, decay_corrected=True)
    assert corrected.coefficient(100.0, 0.9, 0.99) == (100.0 * (1.0 - 1.0 / 0.9)) * 0.99


_TT = np.array([0.25, 1.75, -2.375])
_E = _TT - np.round(_TT)  # [0.25, -0.25, -0.375], exact in binary


@pytest.mark.parametrize("scheme, error, buffer, moves_linear, moves_nonlinear", [
    ("fp", False, None, False, False),
    ("master", False, None, False, False),
    ("naive", False, None, False, False),
    ("eco", True, None, True, True),
    ("eco_wd", True, None, True, True),
    ("kahan", True, "c", False, False),
    ("eco_exact", True, "e_prev", True, False),
    ("eco_momentum_exact", True, "e_prev", True, True),
])
def test_the_write_of_every_scheme(scheme, error, buffer, moves_linear, moves_nonlinear):
    """Scheme.write, the one write both backends run: the stored weights (tt as is for fp,
    else the rounding), the error e = tt - q(tt) where the scheme keeps or moves it, where it
    keeps it, and whether the momentum takes it (for a linear and a nonlinear optimizer)."""
    calls = []

    def rounded(x):
        calls.append(x.copy())
        return np.round(x)

    sch = get(scheme)
    new_w, e = sch.write(_TT.copy(), rounded)
    np.testing.assert_array_equal(new_w, _TT if scheme == "fp" else np.round(_TT))
    assert len(calls) == (0 if scheme == "fp" else 1)
    if error:
        np.testing.assert_array_equal(e, _E)
    else:
        assert e is None
    assert sch.error_buffer == buffer
    assert (sch.moves_error(True), sch.moves_error(False)) == (moves_linear, moves_nonlinear)


def test_the_injection_scales_element_wise_in_a_fixed_order():
    e = _E.copy()
    k = injection(e, 2.0, np.array([1.0, 4.0, 0.5]))
    np.testing.assert_array_equal(k, np.array([1.0, 4.0, 0.5]) * 2.0 * _E)
    np.testing.assert_array_equal(injection(_E.copy(), -3.0), -3.0 * _E)


@pytest.mark.parametrize("scheme", ADAMW_SCHEMES)
def test_the_initial_buffers_of_every_scheme(scheme):
    full, w = np.array([0.25, 1.75]), np.array([0.0, 2.0])
    bufs = get(scheme).initial_buffers(full, w, lambda e: 10.0 * e)
    assert tuple(bufs) == get(scheme).buffers
    want = {"master": full, "e_prev": full - w, "c": 10.0 * (full - w)}
    for b, x in bufs.items():
        np.testing.assert_array_equal(x, want[b])


def test_the_shared_real_checks():
    assert check_real(np.float32(0.25), "x") == 0.25
    assert check_positive(0, "wd", allow_zero=True) == 0.0
    for bad, err in ((True, TypeError), ("1", TypeError), (float("nan"), ValueError)):
        with pytest.raises(err, match="x must be"):
            check_real(bad, "x")
    with pytest.raises(ValueError, match="lr must be > 0"):
        check_positive(0.0, "lr")
    with pytest.raises(ValueError, match="weight_decay must be >= 0"):
        sgdm(0.1, weight_decay=-1.0, scheme="fp")
    with pytest.raises(ValueError, match="eco_gain must be >= 0"):
        muon(0.1, scheme="fp", eco_gain=-1.0)


# -- eco_wd: the weight-decay-corrected injection, as its own scheme ------------------------------

def _adam_run(scheme, wd, steps, *, params, grads, q, lr=1e-2, b2=0.999, start=0, **kw):
    """Stored weights, moments and rounding errors of ``steps`` AdamW steps from ``start``."""
    opt = adamw(lr, 0.9, b2, 1e-8, wd, scheme=scheme, weights=q, **kw)
    w, st = opt.init(params, key=5)
    st = st._replace(step=start)
    out = [(w, st.m, None)]
    for t in range(steps):
        w, st, dg = opt.step(w, grads(t), st, diagnostics=True)
        out.append((w, st.m, dg["e"]))
    return out


def test_eco_wd_equals_eco_bit_for_bit_without_weight_decay():
    rs = np.random.default_rng(1)
    p = {"W": rs.standard_normal((6, 8)).astype(np.float32)}
    G = [{"W": rs.standard_normal((6, 8)).astype(np.float32)} for _ in range(15)]
    for states in (None, {"m": "bf16"}):
        a = _adam_run("eco", 0.0, 15, params=p, grads=G.__getitem__, q=Q, states=states)
        b = _adam_run("eco_wd", 0.0, 15, params=p, grads=G.__getitem__, q=Q, states=states)
        for (wa, ma, _), (wb, mb, _) in zip(a, b):
            np.testing.assert_array_equal(wa["W"], wb["W"])
            np.testing.assert_array_equal(ma["W"], mb["W"])
    # with weight decay the injections differ (the test can fail)
    a = _adam_run("eco", 0.1, 15, params=p, grads=G.__getitem__, q=Q)
    b = _adam_run("eco_wd", 0.1, 15, params=p, grads=G.__getitem__, q=Q)
    assert not np.array_equal(a[-1][1]["W"], b[-1][1]["W"])
    assert memory.bytes_per_param("adamw", "eco_wd") == memory.bytes_per_param("adamw", "eco")


@pytest.mark.parametrize("scheme, flag, share", [
    ("eco_wd", False, 0.0),   # the error drops out of the virtual iterate
    ("eco", False, 1.0),      # ECO's rule leaves lr wd / (c - b1) of it
    ("eco", True, 0.9),       # times (1 - lr wd): b1 times as much
])
def test_eco_wd_removes_the_error_from_the_decayed_virtual_iterate(scheme, flag, share):
    """docs/theory.md §4.5 with s and c frozen: b2 = 0 and a constant gradient freeze
    d = |g| + eps, and from step 400 on the bias correction 1 - 0.9**n is 1.0 in float64. Then
    x = theta_hat - K m (K = s b1 / (c - b1), c = 1 - lr wd) follows
    x' = c x - (s c (1 - b1) / (c - b1)) g + rho e with rho = share * lr wd / (c - b1): 0 for
    eco_wd. The weights live on a fixed int8 grid (step 2^-6), float64."""
    lr, wd, b1 = 1e-2, 0.5, 0.9
    c = 1.0 - lr * wd
    g = np.array([0.5, -1.0, 2.0, -0.75, 1.5, -2.0, 1.0, -0.5])
    p = np.linspace(-0.5, 0.5, 8)
    grid = Quantizer("int8", "rtn", scale=2.0**-6)
    run = _adam_run(scheme, wd, 60, params=p, grads=lambda t: g, q=grid, lr=lr, b2=0.0,
                    start=400, wd_corrected_injection=flag)
    s = lr / (np.sqrt(g * g) + 1e-8)
    K = s * b1 / (c - b1)
    G = s * c * (1.0 - b1) / (c - b1) * g
    rho = share * lr * wd / (c - b1)
    errors = np.array([e for _, _, e in run[1:]])
    assert np.mean(errors != 0) > 0.5  # the grid does round: there is an error to carry
    for (w0, m0, _), (w1, m1, e) in zip(run[:-1], run[1:]):
        x0, x1 = w0 - K * m0, w1 - K * m1
        # Round-off bound: about ten float64 roundings of values below 4 per step,
        # 10 * 4 * 2**-53 ~ 4.4e-15; 1e-12 leaves a wide margin, and is far below the
        # eco residual rho |e| (~1e-4 here).
        np.testing.assert_allclose(x1 - (c * x0 - G), rho * e, rtol=0, atol=1e-12)


def test_torch_eco_wd_follows_numpy_bit_for_bit():
    torch = pytest.importorskip("torch")
    import ecosim.torch as et
    from ecosim.torch.optim import ECOAdamW
    assert "eco_wd" in torch_names_for("adamw")
    rs = np.random.default_rng(2)
    P = {"w": rs.standard_normal((8, 16)).astype(np.float32)}
    G = [{"w": rs.standard_normal((8, 16)).astype(np.float32)} for _ in range(6)]
    no = adamw(1e-2, 0.9, 0.999, 1e-8, 0.1, scheme="eco_wd", weights=Q)
    w, st = no.init(P, key=7)
    tp = torch.nn.Parameter(torch.from_numpy(P["w"].copy()))
    to = ECOAdamW([("w", tp)], 1e-2, (0.9, 0.999), 1e-8, 0.1, scheme="eco_wd", key=7,
                  weights=et.Quantizer("e4m3", "sr", granularity="row"))
    for g in G:
        w, st = no.step(w, g, st)
        tp.grad = torch.from_numpy(g["w"])
        to.step()
        assert torch.equal(tp.detach(), torch.from_numpy(w["w"]))
        assert torch.equal(to.state_values(tp, "m"), torch.from_numpy(st.m["w"]))
