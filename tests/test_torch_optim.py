"""Parity of ecosim.torch.optim (ECOSGD, ECOAdamW) with the NumPy optimizers, bit for bit.

CPU, float32. Every comparison is exact (``torch.equal`` on the stored weights and the states):
the torch mirror performs NumPy's float operations in NumPy's order, and takes AdamW's square
root in float64 (torch's vectorized float32 sqrt is not correctly rounded), so no tolerance is
needed.
"""

import copy
import io

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ecosim  # noqa: E402
import ecosim.torch as et  # noqa: E402
from ecosim.optim import adamw, sgdm  # noqa: E402
from ecosim.torch.optim import ECOAdamW, ECOSGD  # noqa: E402

SGD_SCHEMES = ("master", "naive", "eco", "eco_exact", "kahan")
ADAM_SCHEMES = ("master", "naive", "eco", "eco_exact", "kahan")
KEY = 7


def _problem(steps, seed=0):
    rs = np.random.default_rng(seed)
    P = {"w1": rs.standard_normal((8, 16)).astype(np.float32),
         "w2": rs.standard_normal((4, 5)).astype(np.float32) * 0.1}
    G = [{k: rs.standard_normal(v.shape).astype(np.float32) for k, v in P.items()}
         for _ in range(steps)]
    return P, G


def _pair(kind, scheme, mode, P, fmt="e4m3", states=None, **kw):
    cfg = dict(fmt=fmt, mode=mode, granularity="row")
    qn, qt = ecosim.Quantizer(**cfg), et.Quantizer(**cfg)
    tp = [(k, torch.nn.Parameter(torch.from_numpy(v.copy()))) for k, v in P.items()]
    if kind == "sgd":
        no = sgdm(0.05, 0.9, scheme=scheme, weights=qn, weight_decay=0.01, states=states, **kw)
        to = ECOSGD(tp, 0.05, 0.9, 0.01, scheme=scheme, weights=qt, key=KEY, states=states,
                    **{"heavy_ball": False, **kw})  # NumPy sgdm's default: EMA momentum
    else:
        no = adamw(1e-2, 0.9, 0.999, 1e-8, 0.1, scheme=scheme, weights=qn, states=states, **kw)
        to = ECOAdamW(tp, 1e-2, (0.9, 0.999), 1e-8, 0.1, scheme=scheme, weights=qt, key=KEY,
                      states=states, **kw)
    w, s = no.init(P, key=KEY)
    return no, w, s, to, tp


def _check_equal(to, tp, w, s, kind):
    """Stored weights and every state buffer (dequantized) equal NumPy's, bit for bit."""
    for k, p in tp:
        assert torch.equal(p.detach(), torch.from_numpy(w[k])), k
        bufs = ("m", "v") if kind == "adamw" else ("m",)
        for b in bufs + ("master", "e_prev", "c"):
            ref = getattr(s, b)
            if ref is not None:
                got = to.state_values(p, b)
                assert torch.equal(got, torch.from_numpy(ref[k])), (k, b)


def _feed(tp, grads):
    for k, p in tp:
        p.grad = torch.from_numpy(grads[k].copy())


CASES = ([("sgd", sc) for sc in SGD_SCHEMES] + [("adamw", sc) for sc in ADAM_SCHEMES])


@pytest.mark.parametrize("mode", ["rtn", "sr"])
@pytest.mark.parametrize("kind,scheme", CASES)
def test_parity_with_numpy(kind, scheme, mode):
    P, G = _problem(20)
    no, w, s, to, tp = _pair(kind, scheme, mode, P)
    _check_equal(to, tp, w, s, kind)  # the initial write
    for t in range(20):  # t == 0 is the one-step check
        w, s = no.step(w, G[t], s)
        _feed(tp, G[t])
        to.step()
        _check_equal(to, tp, w, s, kind)


@pytest.mark.parametrize("kind,scheme,kw", [
    ("sgd", "eco", dict(nesterov=True)), ("sgd", "eco", dict(heavy_ball=True)),
    ("sgd", "eco_exact", dict(nesterov=True, heavy_ball=True)),
    ("sgd", "kahan", dict(nesterov=True)),
    ("adamw", "eco", dict(wd_corrected_injection=True))])
def test_momentum_variants_parity(kind, scheme, kw):
    P, G = _problem(10, seed=4)
    no, w, s, to, tp = _pair(kind, scheme, "sr", P, **kw)
    for t in range(10):
        w, s = no.step(w, G[t], s)
        _feed(tp, G[t])
        to.step()
        _check_equal(to, tp, w, s, kind)


# Low-precision states: each key's quantization point, RTN and SR, plain casts and scaled
# FP8 (row absmax); every buffer compared dequantized with NumPy's.
STATES = [
    ("sgd", "eco", {"m": "bf16"}),
    ("sgd", "eco", {"m": ("e4m3", "sr"), "g": ("bf16", "sr")}),
    ("sgd", "eco_exact", {"m": ("bf16", "sr")}),
    ("sgd", "master", {"master": ("bf16", "sr")}),
    ("adamw", "eco", {"m": "bf16", "v": "bf16"}),
    ("adamw", "eco", {"m": ("e4m3", "sr"), "v": ("bf16", "sr")}),
    ("adamw", "naive", {"m": "e5m2", "v": "e4m3", "g": "fp16"}),
    ("adamw", "master", {"m": "bf16", "v": "bf16", "master": ("bf16", "sr")}),
    ("adamw", "eco_exact", {"m": ("int8", "sr")}),
]


@pytest.mark.parametrize("kind,scheme,states", STATES)
def test_low_precision_states_parity(kind, scheme, states):
    P, G = _problem(8, seed=5)
    no, w, s, to, tp = _pair(kind, scheme, "sr", P, states=states)
    _check_equal(to, tp, w, s, kind)
    for t in range(8):
        w, s = no.step(w, G[t], s)
        _feed(tp, G[t])
        to.step()
        _check_equal(to, tp, w, s, kind)


def test_low_precision_states_are_stored_small():
    P, _ = _problem(1)
    tp = [(k, torch.nn.Parameter(torch.from_numpy(v.copy()))) for k, v in P.items()]
    opt = ECOAdamW(tp, 1e-3, weights=et.Quantizer("e4m3", granularity="row"),
                   states={"m": "e4m3", "v": "bf16"})
    st = opt.state[tp[0][1]]
    assert st["m"].dtype == torch.float8_e4m3fn and st["m_scales"].shape == (8, 1)
    assert st["v"].dtype == torch.bfloat16 and "v_scales" not in st
    assert st["m"].nbytes + st["v"].nbytes == 3 * 8 * 16


@pytest.mark.parametrize("kind,scheme", [("sgd", "eco"), ("adamw", "eco")])
def test_int4_parity(kind, scheme):
    P, G = _problem(5, seed=2)
    no, w, s, to, tp = _pair(kind, scheme, "sr", P, fmt="int4")
    for t in range(5):
        w, s = no.step(w, G[t], s)
        _feed(tp, G[t])
        to.step()
        _check_equal(to, tp, w, s, kind)


@pytest.mark.parametrize("kind,scheme,states", [
    ("sgd", "eco_exact", None), ("sgd", "master", None), ("adamw", "eco", None),
    ("adamw", "master", None), ("adamw", "eco", {"m": ("e4m3", "sr"), "v": "bf16"}),
    ("sgd", "kahan", {"m": "bf16"})])
def test_state_dict_resume_is_bit_exact(kind, scheme, states):
    P, G = _problem(12, seed=1)
    _, _, _, ref, ref_p = _pair(kind, scheme, "sr", P, states=states)
    for t in range(12):
        _feed(ref_p, G[t])
        ref.step()
    _, _, _, a, a_p = _pair(kind, scheme, "sr", P, states=states)
    for t in range(5):
        _feed(a_p, G[t])
        a.step()
    buf = io.BytesIO()
    torch.save({"opt": a.state_dict(),
                "params": {k: p.detach().clone() for k, p in a_p}}, buf)
    buf.seek(0)
    saved = torch.load(buf, weights_only=False)
    # a fresh optimizer (different key at construction, overwritten by the checkpoint)
    fresh = [(k, torch.nn.Parameter(torch.from_numpy(v.copy()))) for k, v in P.items()]
    cls = ECOSGD if kind == "sgd" else ECOAdamW
    qt = et.Quantizer("e4m3", "sr", granularity="row")
    b = cls(fresh, 0.05 if kind == "sgd" else 1e-2, scheme=scheme, weights=qt, key=999,
            states=states,
            **({"weight_decay": 0.01, "heavy_ball": False} if kind == "sgd"
               else {"weight_decay": 0.1}))
    with torch.no_grad():
        for k, p in fresh:
            p.copy_(saved["params"][k])
    with pytest.warns(UserWarning, match="SR key 7 replaces this optimizer's key 999"):
        b.load_state_dict(copy.deepcopy(saved["opt"]))
    for t in range(5, 12):
        _feed(fresh, G[t])
        b.step()
    for (k, p), (_, r) in zip(fresh, ref_p):
        assert torch.equal(p.detach(), r.detach()), k
        for key, val in ref.state[r].items():  # same dtypes (codes restored), same bits
            assert b.state[p][key].dtype == val.dtype, (k, key)
            assert torch.equal(b.state[p][key].view(torch.uint8) if val.element_size() == 1
                               else b.state[p][key], val.view(torch.uint8)
                               if val.element_size() == 1 else val), (k, key)


def test_per_parameter_weights_dict():
    """A dict of quantizers: None (or absent) keeps a parameter in full precision."""
    P, G = _problem(5, seed=3)
    qn = ecosim.Quantizer("e4m3", "sr", granularity="row")
    qt = et.Quantizer("e4m3", "sr", granularity="row")
    no = adamw(1e-2, scheme="eco", weights={"w1": qn, "w2": None})
    w, s = no.init(P, key=KEY)
    tp = [(k, torch.nn.Parameter(torch.from_numpy(v.copy()))) for k, v in P.items()]
    to = ECOAdamW(tp, 1e-2, scheme="eco", weights={"w1": qt}, key=KEY)
    for t in range(5):
        w, s = no.step(w, G[t], s)
        _feed(tp, G[t])
        to.step()
        _check_equal(to, tp, w, s, "adamw")
    with pytest.raises(ValueError, match="not parameters"):
        ECOAdamW(tp, 1e-2, weights={"w3": qt})
    with pytest.raises(ValueError, match="nothing to quantize"):
        ECOAdamW(tp, 1e-2, weights=None)


def test_lr_scheduler_and_param_groups():
    P, G = _problem(6)
    qt = et.Quantizer("e4m3", "rtn", granularity="row")
    tp = {k: torch.nn.Parameter(torch.from_numpy(v.copy())) for k, v in P.items()}
    opt = ECOAdamW([{"params": [("w1", tp["w1"])], "lr": 1e-2},
                    {"params": [("w2", tp["w2"])], "lr": 1e-3}], 1e-2, scheme="eco",
                   weights=qt)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    lrs = lambda t: 1e-2 * 0.5 ** (t // 2)  # noqa: E731
    no = adamw(lrs, scheme="eco", weights=ecosim.Quantizer("e4m3", "rtn", granularity="row"))
    w, s = no.init({"w1": P["w1"]}, key=0)
    for t in range(6):
        w, s = no.step(w, {"w1": G[t]["w1"]}, s)
        _feed(list(tp.items()), G[t])
        opt.step()
        sched.step()
        assert torch.equal(tp["w1"].detach(), torch.from_numpy(w["w1"]))
    assert opt.param_groups[1]["lr"] == pytest.approx(1e-3 * 0.125)


def test_encoded_low_precision_storage():
    P, G = _problem(3)
    qt = et.Quantizer("e4m3", "sr", granularity="row")
    tp = [(k, torch.nn.Parameter(torch.from_numpy(v.copy()))) for k, v in P.items()]
    opt = ECOSGD(tp, 0.05, scheme="eco", weights=qt, key=1)
    for t in range(3):
        _feed(tp, G[t])
        opt.step()
    for k, p in tp:
        enc = opt.encoded(p)
        assert enc.codes.dtype == torch.float8_e4m3fn
        assert torch.equal(qt.decode(enc), p.detach())
        assert torch.equal(opt.encoded(k).codes.view(torch.uint8), enc.codes.view(torch.uint8))


def test_unnamed_params_are_named_by_position():
    P, G = _problem(2)
    q = ecosim.Quantizer("e4m3", "sr", granularity="row")
    no = sgdm(0.05, 0.9, scheme="eco", weights=q)
    w, s = no.init({"0": P["w1"], "1": P["w2"]}, key=3)
    ps = [torch.nn.Parameter(torch.from_numpy(P[k].copy())) for k in ("w1", "w2")]
    opt = ECOSGD(ps, 0.05, 0.9, scheme="eco",
                 weights=et.Quantizer("e4m3", "sr", granularity="row"), key=3, heavy_ball=False)
    w, s = no.step(w, {"0": G[0]["w1"], "1": G[0]["w2"]}, s)
    ps[0].grad, ps[1].grad = torch.from_numpy(G[0]["w1"]), torch.from_numpy(G[0]["w2"])
    opt.step()
    assert torch.equal(ps[0].detach(), torch.from_numpy(w["0"]))
    assert torch.equal(ps[1].detach(), torch.from_numpy(w["1"]))


@pytest.mark.parametrize("cls,scheme", [(ECOSGD, "eco"), (ECOSGD, "eco_exact"),
                                        (ECOAdamW, "eco")])
@pytest.mark.parametrize("lr", [0.0, -1e-3])
def test_eco_guards(cls, scheme, lr):
    p = torch.nn.Parameter(torch.ones(2, 3))
    with pytest.raises(ValueError):
        cls([p], lr, scheme=scheme, weights=et.Quantizer("e4m3", granularity="row"))
    with pytest.raises(ValueError):  # a param group with lr <= 0
        cls([{"params": [p], "lr": lr}], 1e-3, scheme=scheme,
            weights=et.Quantizer("e4m3", granularity="row"))


def test_bad_arguments():
    p = torch.nn.Parameter(torch.ones(2, 3))
    q = et.Quantizer("e4m3", granularity="row")
    with pytest.raises(ValueError):
        ECOAdamW([p], 1e-3, scheme="fp", weights=q)
    with pytest.raises(ValueError):
        ECOSGD([p], 1e-3, scheme="eco", weights=None)
    with pytest.raises(ValueError):
        ECOSGD([p], 1e-3, momentum=0.0, scheme="eco", weights=q)
    with pytest.raises(ValueError, match="states keys"):
        ECOSGD([p], 1e-3, weights=q, states={"v": "bf16"})
    with pytest.raises(ValueError, match="master"):
        ECOAdamW([p], 1e-3, weights=q, states={"master": "bf16"})
    with pytest.raises(TypeError, match="Quantizer"):
        ECOAdamW([p], 1e-3, weights="e4m3")
    opt = ECOSGD([p], 1e-3, scheme="eco_exact", weights=q)
    opt.param_groups[0]["next_lr"] = 0.0
    p.grad = torch.ones(2, 3)
    with pytest.raises(ValueError, match="zero learning rate"):
        opt.step()
    p.grad = torch.full((2, 3), float("nan"))
    with pytest.raises(ValueError, match="non-finite"):
        ECOAdamW([p], 1e-3, weights=q).step()


def _adam_run(P, G, **kw):
    qt = et.Quantizer("e4m3", "sr", granularity="row")
    tp = [(k, torch.nn.Parameter(torch.from_numpy(v.copy()))) for k, v in P.items()]
    opt = ECOAdamW(tp, 1e-2, (0.9, 0.999), 1e-8, 0.1, scheme="eco", weights=qt, key=KEY, **kw)
    for g in G:
        _feed(tp, g)
        opt.step()
    return opt, tp


def test_compile_falls_back_to_eager(monkeypatch):
    """compile=True where torch.compile fails: one RuntimeWarning, then the eager path."""
    from ecosim.torch.optim import _AdamMath

    def broken(*args, **kwargs):
        raise RuntimeError("no compiler here")

    monkeypatch.setattr(torch, "compile", broken)
    monkeypatch.setattr(_AdamMath, "_warned", False)
    P, G = _problem(3, seed=6)
    with pytest.warns(RuntimeWarning, match="running eager"):
        opt, tp = _adam_run(P, G, compile=True)
    ref, ref_p = _adam_run(P, G)
    for (k, p), (_, r) in zip(tp, ref_p):
        assert torch.equal(p.detach(), r.detach()), k


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.compile's own internals
def test_compiled_math_parity_with_numpy():
    """inductor's C++ (-ffp-contract=off) kept NumPy's roundings on the CPU with torch 2.13;
    compiles for several seconds, hence slow."""
    P, G = _problem(10, seed=7)
    no, w, s, _, _ = _pair("adamw", "eco", "sr", P)
    for g in G:
        w, s = no.step(w, g, s)
    opt, tp = _adam_run(P, G, compile=True)
    if opt._math.compiled is None:
        pytest.skip("torch.compile unavailable here")
    _check_equal(opt, tp, w, s, "adamw")
