"""DQT and BitNet b1.58 in torch: bit-for-bit parity with the NumPy DQT optimizer, the stored
(code) layers, BitNet's forward and straight-through gradient (the language-model methods:
tests/test_torch_dqt_lm.py).

CPU, float32, one thread; every comparison of weights and states is exact (``torch.equal``).
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.usefixtures("one_torch_thread")

import ecosim  # noqa: E402
from ecosim.optim import dqt  # noqa: E402
from ecosim.problems import bitnet_quantizers  # noqa: E402
from ecosim.torch import QuantizedLinear, store_weights  # noqa: E402
from ecosim.torch.bitnet import BitLinear, bitnet_linears  # noqa: E402
from ecosim.torch.dqt import DQTAdamW, dqt_quantizers, previous_scales  # noqa: E402
from test_torch_optim import KEY, _feed, _problem  # noqa: E402  (the parity tests' helpers)

HYPER = dict(betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)


def _check(to, tp, w, s):
    for k, p in tp:
        assert torch.equal(p.detach(), torch.from_numpy(w[k])), k
        for b in ("m", "v"):
            assert torch.equal(to.state_values(p, b), torch.from_numpy(getattr(s, b)[k])), (k, b)


@pytest.mark.parametrize("scheme", ["naive", "eco"])
@pytest.mark.parametrize("scale", ["absmax", "max"])
@pytest.mark.parametrize("bits", [8, "ternary"])
def test_parity_with_numpy_dqt(bits, scale, scheme):
    """Torch DQT steps equal ecosim.optim.dqt's bit for bit: the RTN init (absmax / absmean),
    then 8 SR steps onto the previous step's grid, weights and both moments."""
    P, G = _problem(8, seed=3)
    b1, b2 = HYPER["betas"]
    no = dqt(1e-2, bits, b1=b1, b2=b2, eps=HYPER["eps"], weight_decay=HYPER["weight_decay"],
             scheme=scheme, scale=scale)
    tp = [(k, torch.nn.Parameter(torch.from_numpy(v.copy()))) for k, v in P.items()]
    to = DQTAdamW(tp, 1e-2, bits, **HYPER, scheme=scheme, scale=scale, key=KEY)
    w, s = no.init(P, key=KEY)
    _check(to, tp, w, s)
    for t in range(8):
        w, s = no.step(w, G[t], s)
        _feed(tp, G[t])
        to.step()
        _check(to, tp, w, s)
    # the weights stay on one per-tensor grid: few distinct values (3 for ternary)
    n_levels = np.unique(w["w1"]).size
    assert n_levels == 3 if bits == "ternary" else 3 < n_levels <= 256


@pytest.mark.parametrize("bits", [8, "ternary"])
def test_stored_codes_equal_float_parameters(bits):
    """Weights held as INT8 / packed ternary codes (QuantizedLinear) follow the float32
    parameter run bit for bit, and hold 1 byte (INT8) or a quarter byte (ternary) per weight."""
    gen = torch.Generator().manual_seed(0)
    lin = torch.nn.Linear(16, 8, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(8, 16, generator=gen))
    grads = [torch.randn(8, 16, generator=gen) for _ in range(6)]
    plain = torch.nn.Parameter(lin.weight.detach().clone())
    ref = DQTAdamW([("lin.weight", plain)], 1e-2, bits, **HYPER, scale="max", key=KEY)
    model = torch.nn.Sequential()
    model.add_module("lin", lin)
    store_weights(model, dqt_quantizers(bits)[0], key=KEY)
    layer = model.lin
    opt = DQTAdamW(model.named_parameters(), 1e-2, bits, **HYPER, scale="max", key=KEY)
    assert torch.equal(layer.read(), plain.detach())
    for g in grads:
        plain.grad, layer.weight.grad = g.clone(), g.clone()
        ref.step()
        opt.step()
        assert torch.equal(layer.read(), plain.detach())
    assert layer.codes.nbytes == (128 if bits == 8 else 32)


def test_store_checks_the_layout():
    q = dqt_quantizers(8)[0]
    layer = QuantizedLinear(4, 2, q, bias=False)
    enc = q.encode(torch.tensor([[1.0, -2.0, 0.5, 0.0], [0.25, 1.0, -1.0, 2.0]]),
                   key=0, scales=torch.full((1, 1), 2.0**-6))
    layer.store(enc)
    assert torch.equal(layer.read(), q.decode(enc))
    with pytest.raises(ValueError, match="holds torch.int8 codes"):
        layer.store(dqt_quantizers("ternary")[1].encode(torch.ones(2, 4)))


def test_previous_scales_max_rule():
    q = dqt_quantizers(2)[0]  # INT2: codes -2..1, rho = 1
    w = torch.tensor([[-1.0, 0.0, 0.5]])  # codes -2, 0, 1 at s = 0.5
    assert previous_scales(q, w, "absmax").item() == 1.0   # max|w| / rho: the grid doubles
    assert previous_scales(q, w, "max").item() == 0.5      # max(w) / rho: it does not
    assert previous_scales(q, -w.abs(), "max").item() == 1.0  # no positive value: absmax
    with pytest.raises(ValueError, match="scale must be"):
        previous_scales(q, w, "mean")
    with pytest.raises(ValueError, match="scheme must be 'naive' or 'eco'"):
        DQTAdamW([torch.nn.Parameter(w.clone())], 1e-2, 2, scheme="master")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("bits", [8, "ternary"])
def test_previous_scales_given_their_shape(bits, dtype):
    """``like=(shape, dtype)`` of the scales (what DQTAdamW remembers from its last write)
    gives the same tensor as computing them, with and without a positive value."""
    q = dqt_quantizers(bits)[0]
    gen = torch.Generator().manual_seed(4)
    for w in (torch.randn(6, 10, generator=gen, dtype=dtype),
              -torch.rand(6, 10, generator=gen, dtype=dtype)):
        for rule in ("max", "absmax"):
            want = previous_scales(q, w, rule)
            got = previous_scales(q, w, rule, like=(want.shape, want.dtype))
            assert got.dtype == want.dtype and torch.equal(got, want), rule


def test_bitnet_forward_and_ste():
    """BitLinear's forward is the hand computation Qa(x) Qw(W)^T (absmean ternary weights,
    INT8 absmax activations per token), equal to the NumPy baseline's quantizers; its gradients
    are the straight-through ones: dW = dy^T Qa(x), dx = dy Qw(W)."""
    W = torch.tensor([[0.4, -0.1, 0.0, 0.3], [0.2, 0.2, -0.4, 0.1], [-0.6, 0.05, 0.2, 0.0]])
    x = torch.tensor([[[1.0, -0.5, 0.25, 2.0], [0.1, 0.2, -0.3, 0.0]]], requires_grad=True)
    lin = BitLinear(4, 3, bias=False)
    with torch.no_grad():
        lin.weight.copy_(W)
    # by hand: gamma = mean|W|; codes round(W / gamma) clipped to [-1, 1]
    gamma = W.double().abs().mean().float()
    codes = torch.clamp(torch.round(W / gamma), -1, 1)
    assert codes.tolist() == [[1, 0, 0, 1], [1, 1, -1, 0], [-1, 0, 1, 0]]
    wq = codes * gamma
    # per token: s = max|x_row| / 127, codes round(x / s) (ties to even)
    xr = x.detach().reshape(-1, 4)
    s = xr.abs().amax(dim=1, keepdim=True) / 127
    xq = torch.round(xr / s) * s
    assert torch.equal(lin.quantized_weight(), wq)
    nq_w, nq_a = bitnet_quantizers(8)  # the NumPy baseline's quantizers agree
    assert torch.equal(wq, torch.from_numpy(nq_w(W.numpy())))
    assert torch.equal(xq, torch.from_numpy(nq_a(xr.numpy())))
    y = lin(x)
    assert torch.equal(y.detach(), torch.nn.functional.linear(xq.reshape(x.shape), wq))
    dy = torch.tensor([[[1.0, -2.0, 0.5], [0.0, 1.0, 3.0]]])
    y.backward(dy)
    assert torch.equal(lin.weight.grad, dy.reshape(-1, 3).T.mm(xq))  # dW = dy^T Qa(x)
    assert torch.equal(x.grad, dy.matmul(wq))                        # dx = dy Qw(W)


def test_bitnet_linears_keep_the_parameters():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    before = list(model.parameters())
    assert bitnet_linears(model, ["0"]) == ["0"]
    assert isinstance(model[0], BitLinear) and not isinstance(model[2], BitLinear)
    assert all(a is b for a, b in zip(before, model.parameters()))
    with pytest.raises(ValueError, match="not an nn.Linear"):
        bitnet_linears(model, ["1"])
