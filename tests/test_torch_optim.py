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

SGD_SCHEMES = ("master", "naive", "eco", "eco_exact")
ADAM_SCHEMES = ("master", "naive", "eco")
KEY = 7


def _problem(steps, seed=0):
    rs = np.random.default_rng(seed)
    P = {"w1": rs.standard_normal((8, 16)).astype(np.float32),
         "w2": rs.standard_normal((4, 5)).astype(np.float32) * 0.1}
    G = [{k: rs.standard_normal(v.shape).astype(np.float32) for k, v in P.items()}
         for _ in range(steps)]
    return P, G


def _pair(kind, scheme, mode, P, fmt="e4m3"):
    cfg = dict(fmt=fmt, mode=mode, granularity="row")
    qn, qt = ecosim.Quantizer(**cfg), et.Quantizer(**cfg)
    tp = [(k, torch.nn.Parameter(torch.from_numpy(v.copy()))) for k, v in P.items()]
    if kind == "sgd":
        no = sgdm(0.05, 0.9, scheme=scheme, weights=qn, weight_decay=0.01)
        to = ECOSGD(tp, 0.05, 0.9, 0.01, scheme=scheme, weights=qt, key=KEY)
    else:
        no = adamw(1e-2, 0.9, 0.999, 1e-8, 0.1, scheme=scheme, weights=qn)
        to = ECOAdamW(tp, 1e-2, (0.9, 0.999), 1e-8, 0.1, scheme=scheme, weights=qt, key=KEY)
    w, s = no.init(P, key=KEY)
    return no, w, s, to, tp


def _check_equal(to, tp, w, s, kind):
    for k, p in tp:
        assert torch.equal(p.detach(), torch.from_numpy(w[k])), k
        st = to.state[p]
        assert torch.equal(st["m"], torch.from_numpy(s.m[k])), k
        if kind == "adamw":
            assert torch.equal(st["v"], torch.from_numpy(s.v[k])), k
        if s.master is not None:
            assert torch.equal(st["master"], torch.from_numpy(s.master[k])), k
        if s.e_prev is not None:
            assert torch.equal(st["e_prev"], torch.from_numpy(s.e_prev[k])), k


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


@pytest.mark.parametrize("kind,scheme", [("sgd", "eco"), ("adamw", "eco")])
def test_int4_parity(kind, scheme):
    P, G = _problem(5, seed=2)
    no, w, s, to, tp = _pair(kind, scheme, "sr", P, fmt="int4")
    for t in range(5):
        w, s = no.step(w, G[t], s)
        _feed(tp, G[t])
        to.step()
        _check_equal(to, tp, w, s, kind)


@pytest.mark.parametrize("kind,scheme", [("sgd", "eco_exact"), ("sgd", "master"),
                                         ("adamw", "eco"), ("adamw", "master")])
def test_state_dict_resume_is_bit_exact(kind, scheme):
    P, G = _problem(12, seed=1)
    _, _, _, ref, ref_p = _pair(kind, scheme, "sr", P)
    for t in range(12):
        _feed(ref_p, G[t])
        ref.step()
    _, _, _, a, a_p = _pair(kind, scheme, "sr", P)
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
            **({"weight_decay": 0.01} if kind == "sgd" else {"weight_decay": 0.1}))
    with torch.no_grad():
        for k, p in fresh:
            p.copy_(saved["params"][k])
    b.load_state_dict(copy.deepcopy(saved["opt"]))
    for t in range(5, 12):
        _feed(fresh, G[t])
        b.step()
    for (k, p), (_, r) in zip(fresh, ref_p):
        assert torch.equal(p.detach(), r.detach()), k
        assert torch.equal(b.state[p]["m"], ref.state[r]["m"]), k


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
                 weights=et.Quantizer("e4m3", "sr", granularity="row"), key=3)
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
        ECOAdamW([p], 1e-3, scheme="kahan", weights=q)
    with pytest.raises(ValueError):
        ECOSGD([p], 1e-3, scheme="eco", weights=None)
    with pytest.raises(ValueError):
        ECOSGD([p], 1e-3, momentum=0.0, scheme="eco", weights=q)
