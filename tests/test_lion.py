"""Lion over quantized weights: the update against a hand-written Lion, every scheme's write,
the refusal of ECO's injection, error feedback against master weights, and the memory
formula read from the optimizer catalog."""

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import ecosim
from ecosim import memory
from ecosim.optim import catalog
from ecosim.optim.lion import lion
from ecosim.optim.schemes import names_for


def _hand_lion(w, grads, lr, b1, b2, wd):
    """Lion as its paper writes it, in float64, for full-precision weights."""
    w, m = w.astype(np.float64), np.zeros_like(w, np.float64)
    for g in grads:
        c = b1 * m + (1 - b1) * g
        w = w * (1 - lr * wd) - lr * np.sign(c)
        m = b2 * m + (1 - b2) * g
    return w


def _problem(steps=30, seed=0):
    rs = np.random.default_rng(seed)
    w = rs.standard_normal((6, 9))
    return w, [rs.standard_normal((6, 9)) for _ in range(steps)]


def test_fp_is_the_papers_update():
    w0, G = _problem()
    opt = lion(3e-3, 0.9, 0.99, 0.1, scheme="fp")
    w, s = opt.init(w0)
    for g in G:
        w, s = opt.step(w, g, s)
    want = _hand_lion(w0, G, 3e-3, 0.9, 0.99, 0.1)
    np.testing.assert_allclose(w, want, rtol=0, atol=1e-12)
    # negative control: the same comparison sees a different b1
    assert np.abs(_hand_lion(w0, G, 3e-3, 0.5, 0.99, 0.1) - want).max() > 1e-3


def test_schemes_are_the_non_injecting_ones_and_eco_is_refused():
    assert names_for("lion") == ("fp", "master", "naive", "eco_exact", "kahan")
    assert not catalog.get("lion").injects and catalog.get("sgdm").injects
    with pytest.raises(ValueError, match=r"scheme must be one of \('fp', 'master', 'naive', "
                                         r"'eco_exact', 'kahan'\), got 'eco'"):
        lion(1e-3, scheme="eco", weights=ecosim.Quantizer("e4m3"))
    assert ecosim.optim.SCHEMES == ("fp", "master", "naive", "eco", "eco_exact", "kahan")


@pytest.mark.parametrize("scheme", ["master", "naive", "eco_exact", "kahan"])
def test_each_scheme_writes_the_grid_and_keeps_its_buffers(scheme):
    w0, G = _problem(10)
    q = ecosim.Quantizer("e4m3", "sr", granularity="row")
    opt = lion(1e-2, scheme=scheme, weights=q)
    w, s = opt.init(w0.astype(np.float32), key=3)
    for g in G:
        w, s = opt.step(w, g.astype(np.float32), s)
    rtn = ecosim.Quantizer("e4m3", granularity="row")
    assert_array_equal(rtn(w), w)  # stored on the grid
    kept = {b for b in ("master", "e_prev", "c") if getattr(s, b) is not None}
    assert kept == set(ecosim.optim.schemes.get(scheme).buffers)
    assert s.step == 10


def test_error_feedback_gives_back_what_naive_loses():
    """On a fixed grid whose step is far above Lion's step, naive never moves; error feedback
    and Kahan follow master weights to the step of the grid."""
    q = ecosim.Quantizer("int8", scale=2.0**-4)
    g = np.array([1.0, -1.0, 0.5])
    out = {}
    for scheme in ("naive", "master", "eco_exact", "kahan"):
        opt = lion(0.01, scheme=scheme, weights=q)
        w, s = opt.init(np.array([1.0, 0.0, -0.5]), key=0)
        for _ in range(100):
            w, s = opt.step(w, g, s)
        out[scheme] = w
    assert_array_equal(out["naive"], [1.0, 0.0, -0.5])
    assert_array_equal(out["eco_exact"], out["master"])
    assert_array_equal(out["kahan"], out["master"])
    assert np.abs(out["master"] - np.array([0.0, 1.0, -1.5])).max() <= 2.0**-4


def test_memory_formula_is_one_moment_and_matches_the_arrays():
    q = ecosim.Quantizer("e4m3", granularity="row")
    for scheme, extra in (("naive", 0), ("eco_exact", 4), ("master", 4)):
        opt = lion(1e-3, scheme=scheme, weights=q)
        per = memory.bytes_per_param(opt).total
        sgd = memory.bytes_per_param(ecosim.optim.sgdm(1e-3, scheme=scheme, weights=q)).total
        assert per == sgd  # one moment, as SGDM
        w, s = opt.init(np.zeros((256, 256), np.float32) + 0.5)
        measured = memory.measured_bytes(opt, w, s).total
        formula = memory.static_bytes(opt, (256, 256)).total
        assert measured == formula
    assert memory.bytes_per_param(lion(1e-3, scheme="naive", weights=q)).total < \
        memory.bytes_per_param(ecosim.optim.adamw(1e-3, scheme="naive", weights=q)).total


def test_memory_refuses_a_scheme_the_optimizer_does_not_run_and_kahan_is_cheapest():
    with pytest.raises(ValueError, match=r"optimizer 'lion' runs the schemes .*, got scheme "
                                         r"'eco'"):
        memory.bytes_per_param("lion", "eco")
    per = {s: memory.bytes_per_param("lion", s).total for s in ("kahan", "eco_exact", "master")}
    assert per == {"kahan": 6.0, "eco_exact": 9.0, "master": 8.0}  # docs/theory.md 4.9
    assert memory.bytes_per_param("adamw", "eco").total == 9.0  # the injecting ones still run
