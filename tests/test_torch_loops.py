"""The ECO optimizers inside the training loops people write (issue 27): resume in the usual
order, parameters without a gradient, torch's meaning of SGD momentum, DQTAdamW on every
stored layer type, schedulers that cycle beta1."""
import copy

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from ecosim.optim.schemes import torch_names_for  # noqa: E402
from ecosim.torch import ECOAdamW, Quantizer, quantize_model  # noqa: E402

pytestmark = pytest.mark.torch

Q = Quantizer("e4m3", "sr", granularity="row")


def _net(seed):
    """A quantized MLP with a norm (a full-precision group) and its report."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 12), nn.LayerNorm(12), nn.Tanh(), nn.Linear(12, 3))
    return model, quantize_model(model, Q, key=1)


def _batch(t):
    g = torch.Generator().manual_seed(100 + t)
    return torch.randn(16, 6, generator=g), torch.randn(16, 3, generator=g)


def _train(model, opt, steps, t0):
    losses = []
    for t in range(t0, t0 + steps):
        x, y = _batch(t)
        loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _codes(model):
    return [b.clone() for n, b in model.named_buffers() if n.endswith("codes")]


# -- resume ----------------------------------------------------------------------------------

@pytest.mark.parametrize("model_first", [True, False])
@pytest.mark.parametrize("scheme", torch_names_for("adamw"))
def test_resume_in_either_order_continues_bit_identically(scheme, model_first):
    model, rep = _net(0)
    opt = ECOAdamW(rep.param_groups(), 1e-2, scheme=scheme, key=3)
    _train(model, opt, 4, 0)
    sd, osd = copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict())
    want = _train(model, opt, 3, 4)
    want_codes = _codes(model)

    model2, rep2 = _net(7)  # other random initial weights, overwritten by the checkpoint
    if model_first:
        model2.load_state_dict(sd)
        opt2 = ECOAdamW(rep2.param_groups(), 1e-2, scheme=scheme, key=3)
        assert all(torch.equal(a, b) for a, b in zip(_codes(model2), sd_codes(sd)))
    else:
        opt2 = ECOAdamW(rep2.param_groups(), 1e-2, scheme=scheme, key=3)
        model2.load_state_dict(sd)
    opt2.load_state_dict(osd)
    assert all(torch.equal(a, b) for a, b in zip(_codes(model2), sd_codes(sd)))
    assert _train(model2, opt2, 3, 4) == want
    assert all(torch.equal(a, b) for a, b in zip(_codes(model2), want_codes))


def sd_codes(sd):
    return [v for k, v in sd.items() if k.endswith("codes")]


@pytest.mark.parametrize("scheme", ["master", "kahan"])
def test_optimizer_keeps_weights_written_before_it(scheme):
    model, rep = _net(0)
    layer = model[0]
    w = torch.linspace(-1, 1, 72).reshape(12, 6)
    want = layer.write(w, key=5)
    opt = ECOAdamW(rep.param_groups(), 1e-2, scheme=scheme)
    assert torch.equal(layer.read(), want)
    if scheme == "master":
        assert torch.equal(opt.state_values(layer.weight, "master"), want)


# -- parameters without a gradient -------------------------------------------------------------

def _optimizers():
    from ecosim.torch import ECOSGD
    from ecosim.torch.dqt import DQTAdamW
    return {"ECOAdamW": lambda ps: ECOAdamW(ps, 1e-2, scheme="eco", weights=Q),
            "ECOAdamW-kahan": lambda ps: ECOAdamW(ps, 1e-2, scheme="kahan", weights=Q),
            "ECOSGD": lambda ps: ECOSGD(ps, 0.1, 0.9, scheme="eco_exact", weights=Q),
            "DQTAdamW": lambda ps: DQTAdamW(ps, 1e-2)}


def _snapshot(opt, p):
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in opt.state[p].items()
            if k != "skipped"}


@pytest.mark.parametrize("which", ["ECOAdamW", "ECOAdamW-kahan", "ECOSGD", "DQTAdamW"])
def test_parameters_without_grad_are_skipped_and_left_alone(which):
    torch.manual_seed(0)
    a, b = (nn.Parameter(torch.randn(4, 5)) for _ in range(2))
    opt = _optimizers()[which]([("a", a), ("b", b)])
    before_a, before_b = a.detach().clone(), b.detach().clone()
    st_b = _snapshot(opt, b)
    opt.step()  # step() before any backward: nothing to do
    assert opt.t == 0 and torch.equal(a, before_a) and torch.equal(b, before_b)
    for _ in range(3):  # b frozen (no .grad): a moves, b and its state do not
        a.grad = torch.randn(4, 5)
        opt.step()
    assert opt.t == 3 and not torch.equal(a, before_a) and torch.equal(b, before_b)
    after = _snapshot(opt, b)
    assert after.keys() == st_b.keys()
    assert all(torch.equal(after[k], v) if isinstance(v, torch.Tensor) else after[k] == v
               for k, v in st_b.items())


def test_a_late_parameter_gets_adamw_bias_correction_of_its_own_steps():
    """A parameter skipped for 3 steps then updated takes torch.optim.AdamW's first step."""
    torch.manual_seed(0)
    q, late = nn.Parameter(torch.randn(4, 5)), nn.Parameter(torch.randn(3, 2))
    ref = nn.Parameter(late.detach().clone())
    opt = ECOAdamW([("q", q), ("late", late)], 1e-2, weights={"q": Q}, key=0)
    torch_opt = torch.optim.AdamW([ref], 1e-2, weight_decay=0.0)
    for t in range(6):
        q.grad = torch.randn(4, 5)
        if t >= 3:
            late.grad = torch.randn(3, 2)
            ref.grad = late.grad.clone()
            torch_opt.step()
        opt.step()
    torch.testing.assert_close(late.detach(), ref.detach(), rtol=1e-6, atol=1e-7)


# -- SGD momentum means what torch.optim.SGD means ---------------------------------------------

@pytest.mark.parametrize("nesterov", [False, True])
def test_ecosgd_momentum_is_torch_sgd_momentum(nesterov):
    """The master copy of ECOSGD(lr, momentum) is torch.optim.SGD(lr, momentum)'s parameter;
    heavy_ball=False is the EMA form, 1 - beta times the step."""
    from ecosim.torch import ECOSGD
    torch.manual_seed(0)
    w0 = torch.randn(4, 6)
    ref, p, ema = (nn.Parameter(w0.clone()) for _ in range(3))
    sgd = torch.optim.SGD([ref], lr=0.1, momentum=0.9, nesterov=nesterov)
    eco = ECOSGD([p], lr=0.1, momentum=0.9, scheme="master", weights=Q, nesterov=nesterov)
    eco_ema = ECOSGD([ema], lr=0.1, momentum=0.9, scheme="master", weights=Q,
                     nesterov=nesterov, heavy_ball=False)
    for _ in range(20):
        g = torch.randn(4, 6)  # gradients independent of the weights: the same in all three
        ref.grad, p.grad, ema.grad = g.clone(), g.clone(), g.clone()
        sgd.step(), eco.step(), eco_ema.step()
    # a few ulps apart after 20 steps: torch's p.add_(buf, alpha=-lr) may round the product
    # and the sum once where ECOSGD rounds twice; the EMA default was 10x off
    torch.testing.assert_close(eco.state_values(p, "master"), ref.detach(), rtol=1e-6,
                               atol=1e-6)
    moved, moved_ema = ref.detach() - w0, eco_ema.state_values(ema, "master") - w0
    torch.testing.assert_close(moved_ema, 0.1 * moved, rtol=1e-4, atol=1e-5)
