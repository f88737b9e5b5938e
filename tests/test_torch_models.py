"""Stored weights on the layers real models use, and back: ecosim.torch on third-party models.

Covers ``torch.compile`` of stored layers, the stored convolution / ``Conv1D`` /
``MultiheadAttention`` layers (forward and backward against the plain layer holding the
dequantized weights, bit for bit on the CPU), :func:`ecosim.torch.quantize_model`,
:func:`ecosim.torch.unstore_weights`, in-place writes and EMA on stored weights, dtype
conversions, and an end-to-end run on transformers models built from configs (skipped where
transformers is not installed).
"""

import copy

import pytest

torch = pytest.importorskip("torch")

import ecosim.torch as et  # noqa: E402
from ecosim.torch.nn import QuantizedLinear, stored  # noqa: E402
from ecosim.torch.optim import ECOAdamW  # noqa: E402

nn = torch.nn


# -- torch.compile -------------------------------------------------------------------------------

# torch 2.13's dynamo instantiates an autograd.Function while tracing one and warns about it
_DYNAMO_WARNING = "ignore:.*should not be instantiated:DeprecationWarning"


@pytest.mark.filterwarnings(_DYNAMO_WARNING)
@pytest.mark.parametrize("scheme", ["master", "naive", "eco"])
def test_compile_fresh_stored_layer(scheme):
    """A freshly built layer (no weight decoded before) compiles: forward, backward and the
    optimizer step equal eager execution bit for bit (backend aot_eager: the traced graph run
    by torch's own kernels; inductor also runs but takes ~30 s per graph on one CPU)."""
    torch._dynamo.reset()
    q = et.Quantizer("e4m3", "sr", granularity="row")
    torch.manual_seed(0)
    lin = nn.Linear(16, 8)
    x = torch.randn(4, 16)
    runs = []
    for compiled in (False, True):
        layer = QuantizedLinear.from_linear(lin, q, key=3, name="w")
        opt = ECOAdamW([layer.weight, layer.bias], 1e-2, scheme=scheme, key=3)
        f = torch.compile(layer, backend="aot_eager", fullgraph=True) if compiled else layer
        y = f(x)
        y.square().sum().backward()
        grad = layer.weight.grad.clone()
        opt.step()
        runs.append((y.detach(), grad, layer.codes.clone(), layer.scales.clone()))
    for a, b in zip(*runs):
        assert torch.equal(a, b)


# -- every weight-bearing layer ------------------------------------------------------------------

Q = et.Quantizer("e4m3", "sr", granularity="row")


class Conv1D(nn.Module):
    """transformers.pytorch_utils.Conv1D as GPT-2 uses it: weight (in, out), y = x W + b."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.1)
        self.bias = nn.Parameter(torch.randn(nf) * 0.1)

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(size_out)


def _plain_twin(stored_mod):
    """The plain module holding the stored module's dequantized weights."""
    return stored_mod.to_plain()


def _fwd_bwd(mod, *inputs):
    inputs = [t.clone().requires_grad_(True) for t in inputs]
    out = mod(*inputs)
    out = out[0] if isinstance(out, tuple) else out
    (out * torch.linspace(-1, 1, out.numel()).reshape(out.shape)).sum().backward()
    return out.detach(), [t.grad for t in inputs]


def _grads(mod):
    return {(stored(p).name if stored(p) is not None else n): p.grad
            for n, p in mod.named_parameters()}


@pytest.mark.parametrize("make,shape", [
    (lambda: nn.Conv2d(3, 8, 3, stride=2, padding=1), (2, 3, 9, 9)),
    (lambda: nn.Conv2d(4, 6, (3, 1), padding="same", groups=2, bias=False), (1, 4, 7, 6)),
    (lambda: nn.Conv1d(3, 5, 3, padding=2, padding_mode="reflect"), (2, 3, 11)),
    (lambda: Conv1D(6, 5), (2, 3, 5)),
    (lambda: nn.Bilinear(3, 3, 2), None),
])
def test_stored_conv_layers_equal_the_plain_layer(make, shape):
    """Stored convolutions and Conv1D: one scale per output channel / feature, and forward
    and backward equal the plain layer holding the dequantized weights bit for bit."""
    torch.manual_seed(0)
    mod = make()
    if shape is None:
        with pytest.raises(TypeError, match="Bilinear is not a supported layer type"):
            et.store_module(mod, Q)
        return
    before = {k: v.clone() for k, v in mod.state_dict().items()}
    s = et.store_module(mod, Q, key=1, name="layer")
    assert all(torch.equal(v, mod.state_dict()[k]) for k, v in before.items())  # not mutated
    w = mod.weight
    n_out = w.shape[1] if isinstance(mod, Conv1D) else w.shape[0]
    assert s.scales.numel() == n_out and s.codes.numel() == w.numel()
    assert s.weight.shape == w.shape and stored(s.weight) is s and s.name == "layer.weight"
    matrix = w.detach().t() if isinstance(mod, Conv1D) else w.detach().reshape(n_out, -1)
    expect = Q(matrix, key=et.fold_in(1, "init", "layer.weight"))
    got = s.read()
    assert torch.equal(got.t() if isinstance(mod, Conv1D) else got.reshape(n_out, -1), expect)
    plain = _plain_twin(s)
    assert type(plain) is type(mod) and torch.equal(plain.weight, got)
    x = torch.randn(shape)
    y1, (dx1,) = _fwd_bwd(s, x)
    y2, (dx2,) = _fwd_bwd(plain, x)
    assert torch.equal(y1, y2) and torch.equal(dx1, dx2)
    assert torch.equal(s.weight.grad, plain.weight.grad)
    if mod.bias is not None:
        assert torch.equal(s.bias.grad, plain.bias.grad)
    opt = ECOAdamW(s.named_parameters(), 1e-2, scheme="eco", key=1)
    codes = s.codes.clone()
    opt.step()
    assert not torch.equal(s.codes, codes)


def test_stored_attention_equals_plain_attention():
    """nn.MultiheadAttention: the packed in_proj_weight (one scale per output row) and out_proj
    are stored; forward and backward equal the plain module with the dequantized weights;
    an nn.TransformerEncoderLayer gives the same output in eval/no_grad (its fused path
    would read out_proj.weight directly)."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)
    ref = copy.deepcopy(layer)
    names = et.store_weights(layer, Q, key=2)
    assert names == ["self_attn.in_proj_weight", "self_attn.out_proj.weight",
                     "linear1.weight", "linear2.weight"]
    attn = layer.self_attn
    assert isinstance(attn, et.QuantizedMultiheadAttention)
    assert attn.in_proj.scales.numel() == 48 and attn.out_proj.scales.numel() == 16
    assert torch.equal(attn.in_proj_weight.detach(), attn.in_proj.read())
    plain = et.unstore_weights(copy.deepcopy(layer))
    assert type(plain.self_attn) is nn.MultiheadAttention
    assert type(plain.self_attn.out_proj) is type(ref.self_attn.out_proj)
    assert plain.state_dict().keys() == ref.state_dict().keys()
    x = torch.randn(2, 5, 16)
    y1, (dx1,) = _fwd_bwd(layer, x)
    y2, (dx2,) = _fwd_bwd(plain, x)
    assert torch.equal(y1, y2) and torch.equal(dx1, dx2)
    g1, g2 = _grads(layer), _grads(plain)
    assert g1.keys() == g2.keys()
    for k in g1:
        assert torch.equal(g1[k], g2[k]), k
    layer.eval(), plain.eval()
    with torch.no_grad():
        assert torch.equal(layer(x), plain(x))
        assert not torch.equal(layer(x), torch.zeros_like(x))
    opt = ECOAdamW(layer.named_parameters(), 1e-2, scheme="eco", key=2)
    assert "self_attn.in_proj_weight" in opt.param_groups[0]["names"]


def test_weights_on_a_plain_conv_parameter_refused():
    """weights= with a row quantizer on a 4-D parameter would scale kernel rows: refused."""
    conv = nn.Conv2d(3, 4, 3)
    with pytest.raises(ValueError, match=r"'weight' has shape \(4, 3, 3, 3\).*quantize_model"):
        ECOAdamW(conv.named_parameters(), 1e-3, weights=Q)
    ECOAdamW(conv.named_parameters(), 1e-3, weights=et.Quantizer("e4m3"))  # tensor-wise: fine
