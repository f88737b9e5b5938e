"""The training loop: determinism, what it records, and that the records mean what they say."""

import math

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from ecosim import Quantizer, optim, problems
from ecosim.metrics import error_similarity
from ecosim.train import DIAGNOSTICS, FIELDS, initial_point, train

FIXED = Quantizer("int8", scale=2.0**-6)


def test_same_key_same_history_and_different_key_differs():
    prob = problems.Quadratic(32, L=1.0, cond=10.0, grad_noise=0.01)
    opt = optim.sgdm(0.1, 0.9, scheme="eco", weights=Quantizer("int8", "sr", scale=2.0**-6))
    a, b = train(prob, opt, 100, key=3), train(prob, opt, 100, key=3)
    for f in FIELDS:
        assert_array_equal(a[f], b[f])
    assert_array_equal(a.params, b.params)
    c = train(prob, opt, 100, key=4)
    assert not np.array_equal(a["loss"], c["loss"])


def test_records_are_consistent_with_a_manual_loop():
    prob = problems.Quadratic(16, L=1.0)
    opt = optim.sgdm(0.05, 0.9, scheme="naive", weights=Quantizer("int8", "sr", scale=2.0**-5))
    h = train(prob, opt, 30, key=1, log_every=1)
    # Re-run by hand with the keys train() documents.
    from ecosim import rng
    p = prob.init(rng.fold_in(1, "init"))
    p, s = opt.init(p, key=rng.fold_in(1, "opt"))
    errors = []
    for t in range(30):
        loss, g = prob.loss_and_grad(p, None)
        assert h["loss"][t] == loss
        p, s, d = opt.step(p, g, s, diagnostics=True)
        errors.append(d["e"])
        assert h["dist2"][t] == pytest.approx(float(np.sum((p - prob.optimum) ** 2)), rel=1e-12)
        assert h["mean_e2"][t] == pytest.approx(float(np.mean(d["e"] ** 2)), rel=1e-12)
    sim = error_similarity(errors[-2], errors[-1])
    assert h["cos_e"][-1] == pytest.approx(sim.cosine, rel=1e-12)
    assert math.isnan(h["cos_e"][0])  # no previous error at the first step
    assert_array_equal(h.params, p)


def test_log_every_and_last_step_logged():
    prob = problems.Rosenbrock(4)
    h = train(prob, optim.sgdm(1e-4, 0.9, scheme="fp"), 25, log_every=10)
    assert_array_equal(h["step"], [0, 10, 20, 24])
    assert np.isnan(h["mean_e2"]).all()  # fp has no quantization error
    assert h.final_loss < h["loss"][0]


def test_mlp_with_batches_and_validation():
    prob = problems.MLP((8, 16, 4), loss="xent", n_train=256, n_val=64, key=0)
    q = Quantizer("e4m3", "sr", granularity="row")
    opt = optim.adamw(3e-3, scheme="eco", weights={n: q for n in prob.quantized_names("all")})
    seen = []
    h = train(prob, opt, 60, key=0, batch_size=32, log_every=20,
              callbacks=[lambda t, p, s, rec: seen.append((t, rec["loss"]))])
    assert [t for t, _ in seen] == [0, 20, 40, 59]
    assert np.isfinite(h["val_loss"]).all()
    assert h.final_val_loss == pytest.approx(h["val_loss"][-1])
    assert h["loss"][-1] < h["loss"][0]
    assert (h["changed_frac"] > 0).all()


def test_initial_params_are_not_mutated():
    prob = problems.Quadratic(8)
    p0 = prob.init(0)
    keep = p0.copy()
    train(prob, optim.sgdm(0.1, scheme="eco", weights=FIXED), 10, params=p0)
    assert_array_equal(p0, keep)


@pytest.mark.parametrize("kwargs", [dict(steps=0), dict(steps=1.5), dict(steps=5, log_every=0),
                                    dict(steps=5, key=-1), dict(steps=5, eval_every=0)])
def test_bad_arguments(kwargs):
    prob = problems.Quadratic(4)
    with pytest.raises((ValueError, TypeError)):
        train(prob, optim.sgdm(0.1, scheme="fp"), **kwargs)


class _Exploding:
    """A quadratic whose gradient turns non-finite (or only its loss) from step ``at`` on."""

    has_validation = False
    optimum = None

    def __init__(self, at: int, loss_only: bool = False):
        self.inner, self.at, self.loss_only = problems.Quadratic(4), at, loss_only

    def init(self, key):
        return self.inner.init(key)

    def batch(self, key, step, batch_size=None):
        return step

    def loss(self, params, batch=None):
        return self.inner.loss(params, None)

    def loss_and_grad(self, params, batch):
        loss, g = self.inner.loss_and_grad(params, None)
        if batch >= self.at:
            return math.inf, (g if self.loss_only else g * np.inf)
        return loss, g


def test_stop_returns_the_history_so_far():
    prob = problems.Quadratic(8, L=1.0)
    opt = optim.sgdm(0.1, 0.9, scheme="eco", weights=FIXED)
    full = train(prob, opt, 40, key=2, log_every=5)
    h = train(prob, opt, 40, key=2, log_every=5, stop=lambda t, rec: t >= 12)
    assert (h.outcome, h.stopped_at, h.diverged) == ("stopped", 16, False)
    assert_array_equal(h["step"], [0, 5, 10, 15])
    for f in FIELDS:  # the same run, cut short
        assert_array_equal(h[f], full[f][:4])
    assert (full.outcome, full.stopped_at) == ("completed", 40)
    assert h.final_loss == prob.loss(h.params, None)


def test_divergence_is_an_outcome_not_an_exception():
    opt = optim.sgdm(0.1, 0.9, scheme="eco", weights=FIXED)
    h = train(_Exploding(7), opt, 20, key=0, diagnostics=True)
    assert (h.outcome, h.diverged, h.stopped_at) == ("diverged", True, 7)
    assert_array_equal(h["step"], np.arange(7))
    assert h.final_loss == math.inf and h.state.step == 7
    assert h.diagnostics["loss"].size == 7
    # a non-finite loss with a finite gradient diverges only when asked to
    assert train(_Exploding(7, loss_only=True), opt, 20, key=0).outcome == "completed"
    h = train(_Exploding(7, loss_only=True), opt, 20, key=0, diverge_on_loss=True)
    assert (h.outcome, h.stopped_at) == ("diverged", 7)


def test_per_step_diagnostics_match_the_optimizer():
    prob = problems.MLP((8, 16, 4), n_train=128, n_val=32, key=0)
    q = Quantizer("e4m3", "rtn", granularity="row")
    opt = optim.adamw(3e-3, scheme="eco", weights={n: q for n in prob.quantized_names("all")},
                      states={"m": Quantizer("bfloat16", scale=1.0)})
    h = train(prob, opt, 12, key=5, batch_size=16, log_every=None, diagnostics=True)
    assert all(h[f].size == 0 for f in FIELDS)  # nothing logged, everything per step
    d = h.diagnostics
    assert set(d) == set(DIAGNOSTICS) and all(v.size == 12 for v in d.values())
    from ecosim import rng
    p, s = initial_point(prob, opt, 5)
    for t in range(12):
        loss, g = prob.loss_and_grad(p, prob.batch(rng.fold_in(5, "data"), t, 16))
        p, s, diag = opt.step(p, g, s, diagnostics=True)
        assert d["loss"][t] == loss and d["step"][t] == t
        for f in ("lr", "update_norm", "changed_frac", "inject_kept", "inject_lost"):
            assert d[f][t] == diag[f] or (math.isnan(d[f][t]) and math.isnan(diag[f]))
        m = math.sqrt(sum(float(np.sum(a.astype(np.float64) ** 2)) for a in s.m.values()))
        gn = math.sqrt(sum(float(np.sum(a.astype(np.float64) ** 2)) for a in g.values()))
        assert d["m_over_g"][t] == pytest.approx(m / gn, rel=1e-12)
    assert_array_equal(h.params["W0"], p["W0"])
    assert 0 < np.nanmean(d["inject_kept"]) <= 1.0 + 1e-12


def test_a_moment_that_overflows_into_a_data_dependent_scale_is_a_divergence():
    """FP8 E4M3 momentum with a per-row absmax scale: when m overflows to inf the scale is
    undefined and the quantizer raises NonFiniteError; train records a divergence (as the
    mlp_states sweep needs for this variant and seed) instead of raising."""
    from ecosim import experiments as E
    from ecosim.core.checks import NonFiniteError, NonFiniteGradient

    assert issubclass(NonFiniteGradient, NonFiniteError)
    exp = E.get("mlp_states")
    out = exp.compute(exp.default_config(), {"variant": "adamw:eco_sr:bf16_rtn:e4m3_rtn",
                                             "seed": 3})
    assert bool(out["diverged"]) and int(out["stopped_at"]) == 1
    assert np.isnan(out["final_val_loss"])


@pytest.mark.parametrize("opt_name", ["adamw", "sgdm"])
def test_updates_without_diagnostics_give_the_same_run(opt_name):
    # train() steps the updates whose diagnostics it does not read without them; a run that
    # keeps every update's diagnostics (diagnostics=True) is the reference, bit for bit. The
    # schedule has zero learning rates right before logged updates, so the error compared at
    # a logged update comes from further back.
    prob = problems.MLP((8, 16, 4), n_train=128, n_val=32, key=0)
    q = Quantizer("e4m3", "sr", granularity="row")
    weights = {n: q for n in prob.quantized_names("all")}

    def lr(t):
        return 0.0 if t % 7 in (5, 6) else 3e-3

    opt = (optim.adamw(lr, scheme="eco", weights=weights) if opt_name == "adamw"
           else optim.sgdm(lr, 0.9, scheme="eco", weights=weights))
    kw = dict(key=2, batch_size=16, log_every=7)
    fast, ref = train(prob, opt, 40, **kw), train(prob, opt, 40, diagnostics=True, **kw)
    for f in FIELDS:
        assert_array_equal(fast[f], ref[f])
    assert np.isfinite(fast["cos_e"][1:]).all()  # every logged update compared two errors
    for name in ref.params:
        assert_array_equal(fast.params[name], ref.params[name])
        assert_array_equal(fast.state.m[name], ref.state.m[name])
    assert (fast.final_val_loss, fast.outcome) == (ref.final_val_loss, ref.outcome)


def test_fields_compute_only_what_is_asked_and_change_nothing_else():
    # fields=... skips the logged quantities a caller never reads: the run, its outcome and
    # the fields kept are bit for bit those of the full record, the others NaN.
    prob = problems.Quadratic(16, L=1.0, grad_noise=0.01)
    opt = optim.sgdm(0.1, 0.9, scheme="eco", weights=Quantizer("int8", "sr", scale=2.0**-6))
    full = train(prob, opt, 60, key=4, log_every=3)
    kept = ("dist2", "mean_e2")
    some = train(prob, opt, 60, key=4, log_every=3, fields=kept)
    always = ("step", "lr", "loss", "changed_frac", "update_norm")
    for f in FIELDS:
        if f in kept + always:
            assert_array_equal(some[f], full[f])
        else:
            assert np.isnan(some[f]).all()
            assert f == "val_loss" or np.isfinite(full[f][1:]).all()  # (no validation set)
    assert_array_equal(some.params, full.params)
    assert (some.outcome, some.final_loss) == (full.outcome, full.final_loss)
    cos = train(prob, opt, 60, key=4, log_every=3, fields=("cos_e",))
    assert_array_equal(cos["cos_e"], full["cos_e"])
    assert np.isnan(cos["norm_ratio_e"]).all() and np.isnan(cos["dist2"]).all()


class _NaNErrors:
    """sgdm whose reported rounding error turns NaN from update ``at`` on (the weights stay
    finite): only the check of the compared errors can call that run diverged."""

    def __init__(self, at: int):
        self.inner, self.at = optim.sgdm(0.1, 0.9, scheme="eco", weights=FIXED), at

    def init(self, params, key):
        return self.inner.init(params, key=key)

    def step(self, params, grads, state, diagnostics=False):
        out = self.inner.step(params, grads, state, diagnostics=diagnostics)
        if diagnostics and state.step >= self.at:
            out[2]["e"] = out[2]["e"] * np.nan
        return out


def test_fields_keep_the_divergence_rule():
    # the finiteness check of the compared errors is the divergence rule, not a metric: a
    # run that records none of the error metrics still diverges where the full one does
    prob = problems.Quadratic(8)
    full = train(prob, _NaNErrors(6), 20, key=0)
    some = train(prob, _NaNErrors(6), 20, key=0, fields=("dist2",))
    assert (full.outcome, full.stopped_at) == ("diverged", 6)
    assert (some.outcome, some.stopped_at) == (full.outcome, full.stopped_at)
    assert_array_equal(some["dist2"], full["dist2"])


@pytest.mark.parametrize("fields,error", [(("dist2", "nope"), ValueError), ("dist2", TypeError),
                                          ((1,), TypeError)])
def test_bad_fields(fields, error):
    with pytest.raises(error):
        train(problems.Quadratic(4), optim.sgdm(0.1, scheme="fp"), 5, fields=fields)


def _mlp_adamw(scheme: str):
    """A small MLP and AdamW over its E4M3-SR weights (a scale per row)."""
    prob = problems.MLP((8, 16, 4), n_train=128, n_val=32, key=0)
    q = Quantizer("e4m3", "sr", granularity="row")
    return prob, optim.adamw(3e-3, scheme=scheme,
                             weights={n: q for n in prob.quantized_names("all")})


def test_diagnostics_by_name_skip_only_m_over_g():
    prob, opt = _mlp_adamw("eco")
    kw = dict(key=1, batch_size=16, log_every=None)
    full = train(prob, opt, 10, diagnostics=True, **kw)
    names = tuple(f for f in DIAGNOSTICS if f != "m_over_g")
    some = train(prob, opt, 10, diagnostics=names, **kw)
    for f in names:
        assert_array_equal(some.diagnostics[f], full.diagnostics[f])
    assert np.isnan(some.diagnostics["m_over_g"]).all()
    assert np.isfinite(full.diagnostics["m_over_g"]).all()
    assert_array_equal(train(prob, opt, 10, diagnostics=list(DIAGNOSTICS), **kw)
                       .diagnostics["m_over_g"], full.diagnostics["m_over_g"])
    with pytest.raises(ValueError):
        train(prob, opt, 2, diagnostics=("loss", "nope"), **kw)
    with pytest.raises(TypeError):
        train(prob, opt, 2, diagnostics="loss", **kw)


def test_diagnostics_without_the_optimizers_skip_its_step_diagnostics():
    # naming none of the optimizer's five diagnostics steps every update without them (no
    # logged step reads them): the same run bit for bit, those five NaN, loss and m_over_g kept
    prob, opt = _mlp_adamw("naive")
    kw = dict(key=3, batch_size=16, log_every=None)
    full = train(prob, opt, 12, diagnostics=True, **kw)
    calls = []

    class _Counting:
        def __getattr__(self, name):
            return getattr(opt, name)

        def step(self, *a, **k):
            calls.append(k.get("diagnostics", False))
            return opt.step(*a, **k)

    some = train(prob, _Counting(), 12, diagnostics=("step", "loss", "m_over_g"), **kw)
    assert calls == [False] * 12
    for f in ("step", "loss", "m_over_g"):
        assert_array_equal(some.diagnostics[f], full.diagnostics[f])
    for f in ("lr", "update_norm", "changed_frac", "inject_kept", "inject_lost"):
        assert np.isnan(some.diagnostics[f]).all()
    for name in full.params:
        assert_array_equal(some.params[name], full.params[name])
        assert_array_equal(some.state.m[name], full.state.m[name])
    assert (some.final_val_loss, some.outcome) == (full.final_val_loss, full.outcome)
