"""Stored layers hold no full-precision copy of their weights from forward to backward.

Every stored layer type (convolutions, transformers ``Conv1D``, ``nn.MultiheadAttention``)
saves its codes and decodes again in backward (:mod:`ecosim.torch.layer_ops`); the plain
layer holding the same weights saves a float copy, which is what each test's detector finds
there (its negative control). Gradients stay equal to the plain layer's bit for bit, also
under autocast, activation checkpointing and after ``.to(bfloat16)``.
"""

import copy

import pytest

torch = pytest.importorskip("torch")

import ecosim.torch as et  # noqa: E402
from ecosim.torch.nn import stored  # noqa: E402
from test_torch_models import Conv1D  # noqa: E402  (transformers' Conv1D, without it)

nn = torch.nn
Q = et.Quantizer("e4m3", "sr", granularity="row")
# the plain layer's warning of its own padded copy ("same" with an even kernel length)
pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same':UserWarning")


class _Attn(nn.Module):
    """Attention called as a model calls it: self-attention, or cross-attention on ``mem``."""

    def __init__(self, **kw):
        super().__init__()
        self.attn = nn.MultiheadAttention(batch_first=True, **kw)
        self.cross = "kdim" in kw

    def forward(self, x):
        mem = x[..., :7] if self.cross else x
        return self.attn(x, mem, mem, need_weights=False)[0]


LAYERS = {
    "Conv2d": (lambda: nn.Conv2d(3, 8, 3, stride=2, padding=1), (2, 3, 9, 9)),
    "Conv2d-same-odd": (lambda: nn.Conv2d(4, 6, (3, 2), padding="same", groups=2,
                                          bias=False), (1, 4, 7, 6)),
    "Conv1d-reflect": (lambda: nn.Conv1d(3, 5, 3, padding=2, padding_mode="reflect"),
                       (2, 3, 11)),
    "Conv3d-valid": (lambda: nn.Conv3d(2, 3, 2, padding="valid", dilation=2), (1, 2, 5, 5, 5)),
    "Conv1D": (lambda: Conv1D(12, 7), (2, 3, 7)),
    "MHA": (lambda: _Attn(embed_dim=16, num_heads=4), (2, 5, 16)),
    "MHA-kdim": (lambda: _Attn(embed_dim=16, num_heads=2, kdim=7, vdim=7), (2, 5, 16)),
}


def _model(name):
    torch.manual_seed(0)
    make, shape = LAYERS[name]
    plain = nn.Sequential(make())
    model = copy.deepcopy(plain)
    et.store_weights(model, Q, key=1)
    return et.unstore_weights(copy.deepcopy(model)), model, torch.randn(shape)


def _weight_numels(plain):
    return {p.numel() for p in plain.parameters() if p.ndim >= 2}


def _saved_copies(model, x, numels):
    """Floating tensors autograd saved for backward with a weight's number of elements (``x``
    requires grad, as a hidden layer's input does: backward then needs the weights)."""
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        model(x.clone().requires_grad_(True)).square().sum().backward()
    return [tuple(t.shape) for t in saved if t.is_floating_point() and t.numel() in numels]


@pytest.mark.parametrize("name", list(LAYERS))
def test_backward_saves_no_decoded_weights(name):
    plain, model, x = _model(name)
    numels = _weight_numels(plain)
    assert x.numel() not in numels  # the detector would mistake the input for a weight
    assert _saved_copies(plain, x, numels)  # negative control: the plain layer saves W
    assert _saved_copies(model, x, numels) == []


def _run(model, x, dtype=None, autocast=False, checkpoint=False):
    x = x.clone().requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        if checkpoint:
            y = torch.utils.checkpoint.checkpoint(model, x, use_reentrant=False)
        else:
            y = model(x)
    (y.float() * torch.linspace(-1, 1, y.numel()).reshape(y.shape)).sum().backward()
    grads = {(stored(p).name if stored(p) is not None else n): p.grad
             for n, p in model.named_parameters()}
    return y.detach(), x.grad, grads


@pytest.mark.parametrize("name", list(LAYERS))
@pytest.mark.parametrize("how", ["plain", "autocast", "checkpoint", "bf16"])
def test_gradients_equal_the_plain_layer(name, how):
    """Outputs, input and weight gradients equal the plain layer holding the decoded weights,
    bit for bit: eagerly, under CPU bf16 autocast, inside non-reentrant activation
    checkpointing (its hooks see every other saved tensor) and after .to(bfloat16)."""
    plain, model, x = _model(name)
    if how == "bf16":
        plain, model, x = plain.to(torch.bfloat16), model.to(torch.bfloat16), x.bfloat16()
    kw = {"autocast": how == "autocast", "checkpoint": how == "checkpoint"}
    y1, dx1, g1 = _run(model, x, **kw)
    y2, dx2, g2 = _run(plain, x, **kw)
    assert y1.dtype == y2.dtype and torch.equal(y1, y2)
    assert dx1.dtype == dx2.dtype and torch.equal(dx1, dx2)
    assert g1.keys() == g2.keys()
    for k in g1:
        assert g1[k].dtype == g2[k].dtype and torch.equal(g1[k], g2[k]), k


@pytest.mark.parametrize("name", list(LAYERS))
def test_codes_written_between_forward_and_backward_refused(name):
    """Backward needs the weights forward used: a write of the codes in between is an error
    (as an in-place write of a plain weight is), never a gradient of other weights."""
    _, model, x = _model(name)
    y = model(x)
    for mod in model.modules():
        if isinstance(mod, et.QuantizedLinear):
            mod.write(mod.read() * 0.5, key=0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation|were written"):
        y.sum().backward()


@pytest.mark.filterwarnings("ignore:.*should not be instantiated:DeprecationWarning")
@pytest.mark.parametrize("name", ["Conv2d", "Conv1D", "MHA"])
def test_compiled_layer_equals_the_plain_layer(name):
    """torch.compile (backend aot_eager) of a stored layer: outputs and gradients equal the
    plain layer's bit for bit (attention saves its decoded weights there, see layer_ops)."""
    torch._dynamo.reset()
    plain, model, x = _model(name)
    y1, dx1, g1 = _run(torch.compile(model, backend="aot_eager"), x)
    y2, dx2, g2 = _run(plain, x)
    assert torch.equal(y1, y2) and torch.equal(dx1, dx2)
    g1 = {k.removeprefix("_orig_mod."): v for k, v in g1.items()}
    assert g1.keys() == g2.keys()
    for k in g1:
        assert torch.equal(g1[k], g2[k]), k


def test_attention_scales_written_between_forward_and_backward_refused():
    """The attention path checks the scales too (its hooks hold the codes and scales)."""
    _, model, x = _model("MHA")
    y = model(x.requires_grad_(True))  # then backward needs in_proj's weights
    layer = model[0].attn.in_proj
    layer.scales.mul_(2)
    with pytest.raises(RuntimeError, match="were written"):
        y.sum().backward()
