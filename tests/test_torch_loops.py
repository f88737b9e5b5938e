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


# -- DQTAdamW on every stored layer type -------------------------------------------------------

def test_dqtadamw_is_exported():
    import ecosim.torch as et
    from ecosim.torch.dqt import DQTAdamW, dqt_quantizers
    assert et.DQTAdamW is DQTAdamW and et.dqt_quantizers is dqt_quantizers
    assert {"DQTAdamW", "dqt_quantizers"} <= set(et.__all__)


def _conv1d_class():
    try:
        from transformers.pytorch_utils import Conv1D
    except ImportError:
        class Conv1D(nn.Module):  # transformers' layout: weight (in, out), y = x W + b
            def __init__(self, nf, nx):
                super().__init__()
                self.nf = nf
                self.weight = nn.Parameter(torch.randn(nx, nf) * 0.1)
                self.bias = nn.Parameter(torch.zeros(nf))

            def forward(self, x):
                return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).view(
                    *x.shape[:-1], self.nf)
    return Conv1D


def _dqt_run(model, x, steps=4):
    from ecosim.torch.dqt import DQTAdamW, dqt_quantizers
    rep = quantize_model(model, dqt_quantizers(8)[0], key=2)
    opt = DQTAdamW(rep.param_groups(), 1e-2, key=5)
    for t in range(steps):
        opt.zero_grad()
        (model(x) ** 2).mean().backward()
        opt.step()
    return opt


def test_dqtadamw_on_a_stored_conv2d_equals_dqt_on_its_plain_kernel():
    from ecosim.torch.dqt import DQTAdamW
    torch.manual_seed(0)
    conv = nn.Conv2d(3, 8, 3, bias=False)
    kernel = nn.Parameter(conv.weight.detach().clone())
    x = torch.randn(2, 3, 6, 6)
    model = nn.Sequential(conv)
    plain = DQTAdamW([("0.weight", kernel)], 1e-2, key=5)
    opt = _dqt_run(model, x, steps=0)
    for t in range(4):
        opt.zero_grad(), plain.zero_grad()
        (model(x) ** 2).mean().backward()
        (torch.nn.functional.conv2d(x, kernel) ** 2).mean().backward()
        opt.step(), plain.step()
        assert torch.equal(model[0].read(), kernel.detach()), t


def test_dqtadamw_on_a_stored_conv1d_equals_dqt_on_the_linear_it_is():
    """A Conv1D holds W transposed; its codes are the (out, in) matrix of the linear layer."""
    torch.manual_seed(0)
    conv = _conv1d_class()(8, 6)
    lin = nn.Linear(6, 8)
    with torch.no_grad():
        lin.weight.copy_(conv.weight.t()), lin.bias.copy_(conv.bias)
    x = torch.randn(5, 6)
    a, b = nn.Sequential(conv), nn.Sequential(lin)
    _dqt_run(a, x), _dqt_run(b, x)
    assert torch.equal(a[0].codes, b[0].codes) and torch.equal(a[0].scales, b[0].scales)
    assert torch.equal(a[0].read(), b[0].read().t())


def test_dqtadamw_leaves_the_report_s_full_precision_group_alone():
    """Norms and embeddings (quantize_model's second group) train by plain AdamW."""
    from ecosim.torch.dqt import DQTAdamW, dqt_quantizers
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(10, 6), nn.Linear(6, 6), nn.LayerNorm(6))
    rep = quantize_model(model, dqt_quantizers(8)[0])
    plain = [p for _, p in rep.param_groups()[1]["params"]]
    twins = [nn.Parameter(p.detach().clone()) for p in plain]
    opt = DQTAdamW(rep.param_groups(), 1e-2)
    adam = torch.optim.AdamW(twins, 1e-2, weight_decay=0.0)
    for p, twin in zip(plain, twins):
        assert torch.equal(p.detach(), twin.detach())  # no initial write onto a grid
    tokens = torch.tensor([[1, 4, 2, 7]])
    for _ in range(3):
        opt.zero_grad()
        (model(tokens) ** 2).mean().backward()
        for p, twin in zip(plain, twins):
            twin.grad = p.grad.clone()
        opt.step(), adam.step()
    for p, twin in zip(plain, twins):  # AdamW's update, up to its order of float operations
        torch.testing.assert_close(p.detach(), twin.detach(), rtol=1e-6, atol=1e-7)
    assert model[2].weight.unique().numel() == 6  # the norm's gains did not collapse
    with pytest.raises(ValueError, match="nothing to quantize"):
        DQTAdamW(plain, 1e-2, quantize_plain=False)


@pytest.mark.parametrize("model_first", [True, False])
def test_dqtadamw_resume_in_either_order_keeps_the_codes(model_first):
    from ecosim.torch.dqt import DQTAdamW, dqt_quantizers

    def net(seed):
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Linear(6, 12), nn.LayerNorm(12), nn.Tanh(), nn.Linear(12, 3))
        return model, quantize_model(model, dqt_quantizers(8)[0], key=1)

    model, rep = net(0)
    opt = DQTAdamW(rep.param_groups(), 1e-2, key=3)
    _train(model, opt, 4, 0)
    sd, osd = copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict())
    want = _train(model, opt, 3, 4)
    model2, rep2 = net(7)
    if model_first:
        model2.load_state_dict(sd)
    opt2 = DQTAdamW(rep2.param_groups(), 1e-2, key=3)
    if not model_first:
        model2.load_state_dict(sd)
    opt2.load_state_dict(osd)
    assert all(torch.equal(a, b) for a, b in zip(_codes(model2), sd_codes(sd)))
    assert _train(model2, opt2, 3, 4) == want


# -- schedulers that cycle beta1 -------------------------------------------------------------

@pytest.mark.parametrize("scheme", ["eco", "eco_wd", "eco_momentum_exact"])
def test_a_cycled_beta1_is_used_by_each_step_as_numpy_would(scheme):
    """Under OneCycleLR (cycle_momentum), every step, its ECO injection included, uses the
    beta1 and lr the scheduler set for it: NumPy's AdamW with those values, step by step."""
    import numpy as np

    import ecosim
    from ecosim.optim import adamw
    rs = np.random.default_rng(0)
    P = {"w": rs.standard_normal((4, 6)).astype(np.float32)}
    p = nn.Parameter(torch.from_numpy(P["w"].copy()))
    cfg = dict(fmt="e4m3", mode="sr", granularity="row")
    opt = ECOAdamW([("w", p)], 1e-2, weight_decay=0.1, scheme=scheme,
                   weights=Quantizer(**cfg), key=4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, total_steps=12)
    w, s = adamw(1e-2, weight_decay=0.1, scheme=scheme,
                 weights=ecosim.Quantizer(**cfg)).init(P, key=4)
    seen = set()
    for _ in range(12):
        g = rs.standard_normal((4, 6)).astype(np.float32)
        (b1, b2), lr = opt.param_groups[0]["betas"], opt.param_groups[0]["lr"]
        seen.add(b1)
        w, s = adamw(lr, b1, b2, weight_decay=0.1, scheme=scheme,
                     weights=ecosim.Quantizer(**cfg)).step(w, {"w": g}, s)
        p.grad = torch.from_numpy(g)
        opt.step()
        sched.step()
        assert torch.equal(p.detach(), torch.from_numpy(w["w"]))
        assert torch.equal(opt.state_values(p, "m"), torch.from_numpy(s.m["w"]))
    assert len(seen) > 5  # beta1 really cycled


def test_sgd_eco_exact_refuses_a_momentum_changed_under_it():
    from ecosim.torch import ECOSGD
    p = nn.Parameter(torch.randn(4, 6))
    opt = ECOSGD([p], 0.1, 0.9, scheme="eco_exact", weights=Q)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=10)
    p.grad = torch.randn(4, 6)
    before = p.detach().clone()
    with pytest.raises(ValueError, match="momentum changed from 0.9 to 0.95"):
        opt.step()  # OneCycleLR starts at max_momentum
    assert torch.equal(p.detach(), before)
    opt.param_groups[0]["momentum"] = 0.9
    opt.step()  # constant again: runs
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=10,
                                                cycle_momentum=False)
    opt.step(), sched.step(), opt.step()


def test_dqtadamw_on_stored_attention_writes_one_int8_grid_per_tensor():
    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.MultiheadAttention(8, 2, batch_first=True)

        def forward(self, x):
            return self.a(x, x, x)[0]

    from ecosim.torch.nn import QuantizedLinear
    torch.manual_seed(0)
    model = Attn()
    opt = _dqt_run(model, torch.randn(2, 3, 8))
    layers = [m for m in model.modules() if isinstance(m, QuantizedLinear)]
    assert opt.t == 4 and len(layers) == 2  # in_proj and out_proj
    for layer in layers:
        enc = layer.encoded()
        assert enc.codes.dtype == torch.int8 and enc.scales.numel() == 1
        assert torch.equal(layer.read().reshape(enc.codes.shape), enc.codes.float() * enc.scales)
