"""ECOAdamW's batched step (``_step_group``: the parameters of a group in runs of at most
``_BATCH`` elements, ``torch._foreach`` moments, ``d`` and ``theta_tilde`` on concatenated
buffers, ECO's injection after the run's writes) stores exactly what the per-parameter step
(``_step_param`` for each parameter, the path checked against NumPy by test_torch_optim and
test_torch_eco_adam) stores: weights and every state tensor, bit for bit, for every scheme,
with weight decay, a full-precision parameter in the group, the schedule guard, a zero
learning rate, stored codes and DQT, and with the group cut into runs anywhere.

CPU, float32, one thread; every comparison is ``torch.equal``.
"""

import pytest

torch = pytest.importorskip("torch")

import ecosim.torch as et  # noqa: E402
import ecosim.torch.optim as topt  # noqa: E402
from ecosim.optim.schemes import torch_names_for  # noqa: E402
from ecosim.torch.dqt import DQTAdamW  # noqa: E402
from ecosim.torch import store_weights  # noqa: E402
from ecosim.torch.nn import QuantizedLinear  # noqa: E402
from ecosim.torch.optim import ECOAdamW  # noqa: E402
from ecosim.torch.optim_base import ECOBase  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# (out, in) of the linears a, b, c; c's bias stays in full precision (weights=None for it)
SHAPES = {"a": (8, 16), "b": (4, 8), "c": (5, 6)}
STEPS = 4


def _lr(t):
    """A rate that starts at 0 (no write, eco_momentum_exact's error pending) and changes."""
    return (0.0, 0.01, 0.02, 0.005, 0.01)[t]


def _model():
    gen = torch.Generator().manual_seed(1)
    model = torch.nn.Module()
    for name, (o, i) in SHAPES.items():
        setattr(model, name, torch.nn.Linear(i, o, bias=name == "c"))
        with torch.no_grad():
            for p in getattr(model, name).parameters():
                p.copy_(torch.randn(p.shape, generator=gen))
    return model


def _run(make, codes=False):
    """Weights and states (name -> tensor) after STEPS steps of ``make(named_params)`` on
    fixed gradients."""
    model = _model()
    if codes:
        store_weights(model, et.Quantizer("e4m3", "sr", granularity="row"), key=3,
                      predicate=lambda name, mod: name in ("a", "b"))
    opt = make(list(model.named_parameters()))
    first = {n: p.detach().clone() for n, p in model.named_parameters()}
    gen = torch.Generator().manual_seed(2)
    for t in range(STEPS):
        for group in opt.param_groups:
            group["lr"] = _lr(t)
            for p in group["params"]:
                p.grad = torch.randn(p.shape, generator=gen)
        opt.step()
    out = {}
    for group in opt.param_groups:
        for name, p in zip(group["names"], group["params"]):
            mod = getattr(model, name.split(".")[0])
            out[name] = (mod.read() if isinstance(mod, QuantizedLinear)
                         else p.detach()).clone()
            for k, v in opt.state[p].items():
                out[f"{name}/{k}"] = v.clone() if isinstance(v, torch.Tensor) else v
    moved = [n for n, p in model.named_parameters() if not torch.equal(p.detach(), first[n])]
    return out, moved


def _assert_same(a, b):
    """Same weights and states, and the run moved some stored weights."""
    (a, moved), (b, moved_b) = a, b
    assert moved and moved == moved_b
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], torch.Tensor):
            assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k
        else:
            assert a[k] == b[k], k


def _both(monkeypatch, make, batch, codes=False):
    """(batched with ``_BATCH = batch``, per parameter) results of ``make``."""
    with monkeypatch.context() as mp:
        mp.setattr(topt, "_BATCH", batch)
        batched = _run(make, codes)
    with monkeypatch.context() as mp:
        mp.setattr(ECOAdamW, "_step_group", ECOBase._step_group)
        each = _run(make, codes)
    return batched, each


def _adamw(scheme, **kw):
    q = et.Quantizer("e4m3", "sr", granularity="row")
    weights = {f"{n}.weight": q for n in SHAPES}
    weights["c.bias"] = None

    def make(named):
        return ECOAdamW(named, 0.01, weights=weights, scheme=scheme, key=5,
                        weight_decay=0.1, **kw)
    return make


# 128 + 32 + 30 + 5 elements: one run, runs cut inside the group, one parameter per run
@pytest.mark.parametrize("batch", [1 << 18, 150, 1])
@pytest.mark.parametrize("scheme", torch_names_for("adamw"))
def test_batched_step_equals_the_per_parameter_step(monkeypatch, scheme, batch):
    _assert_same(*_both(monkeypatch, _adamw(scheme), batch))


@pytest.mark.parametrize("scheme", ["eco", "eco_wd"])
def test_batched_step_with_the_schedule_guard(monkeypatch, scheme):
    make = _adamw(scheme, schedule_guard=True, lr_schedule=lambda t: _lr(min(t, 4)))
    _assert_same(*_both(monkeypatch, make, 150))


@pytest.mark.parametrize("scheme", ["eco", "master"])
def test_batched_step_on_stored_codes(monkeypatch, scheme):
    def make(named):
        return ECOAdamW(named, 0.01, scheme=scheme, key=5, weight_decay=0.1)
    _assert_same(*_both(monkeypatch, make, 150, codes=True))


@pytest.mark.parametrize("scheme", ["naive", "eco"])
def test_batched_dqt_step(monkeypatch, scheme):
    def make(named):
        return DQTAdamW([(n, p) for n, p in named if n.endswith("weight")], 0.01,
                        bits="ternary", scheme=scheme, key=5, weight_decay=0.1)
    _assert_same(*_both(monkeypatch, make, 150))


def test_batching_needs_float_moments(monkeypatch):
    """A moment format (here bf16 m) keeps the per-parameter path; float moments batch the
    group's four parameters in one run a step (the default ``_BATCH``)."""
    runs = []
    step_run = ECOAdamW._step_run

    def spy(self, run, group, t):
        runs.append(len(run))
        return step_run(self, run, group, t)
    monkeypatch.setattr(ECOAdamW, "_step_run", spy)
    _run(_adamw("eco", states={"m": "bf16"}))
    assert runs == []
    _run(_adamw("eco"))
    assert runs == [4] * STEPS
