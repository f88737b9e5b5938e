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
    by torch's own kernels; inductor also runs but compiles each graph far more slowly)."""
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
    old = (et.QuantizedConv1D.from_conv1d if isinstance(mod, Conv1D)
           else et.QuantizedConv.from_conv)(mod, Q, key=1, name="layer.weight")
    assert type(old) is type(s) and torch.equal(old.codes, s.codes)  # the former names
    assert torch.equal(old.scales, s.scales)
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


# -- whole models --------------------------------------------------------------------------------

class _Block(nn.Module):
    def __init__(self, c_in, c_out, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.down = (nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False),
                                   nn.BatchNorm2d(c_out)) if stride != 1 or c_in != c_out
                     else nn.Identity())

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.down(x))


def resnet(width=16, classes=10):
    """A small ResNet (torchvision's layout: stem, residual blocks, pooled linear head)."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width),
                         nn.ReLU(), _Block(width, width, 1), _Block(width, 2 * width, 2),
                         _Block(2 * width, 4 * width, 2), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(4 * width, classes))


def vit_block(d=64, heads=4):
    """A ViT encoder block: pre-norm attention (nn.MultiheadAttention) and an MLP."""
    torch.manual_seed(0)
    return nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True,
                                      norm_first=True)


class _TinyLM(nn.Module):
    def __init__(self, v=11, d=8):
        super().__init__()
        self.emb = nn.Embedding(v, d)
        self.ln = nn.LayerNorm(d)
        self.mlp = nn.Linear(d, d)
        self.head = nn.Linear(d, v, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, t):
        return self.head(self.mlp(self.ln(self.emb(t))))


def test_quantize_model_resnet_reports_and_trains():
    model = resnet()
    ref = copy.deepcopy(model)
    rep = et.quantize_model(model, Q, key=0)
    assert rep.n_matrices == 10 and len(rep.names) == 10 and not rep.skipped
    assert all(isinstance(m, (et.QuantizedConv, QuantizedLinear)) for m in
               (model[0], model[3].conv1, model[4].down[0], model[8]))
    assert str(rep) == "stored 10 of 10 weight matrices, 99.1% of parameters"
    assert rep.stored_params == sum(p.numel() for n, p in ref.named_parameters()
                                    if p.ndim >= 2)
    assert model[0].scales.numel() == 16  # one per output channel
    groups = rep.param_groups()
    assert [len(g["params"]) for g in groups] == [10, 19]
    opt = ECOAdamW(groups, 1e-2, scheme="eco", key=0)
    x, y = torch.randn(8, 3, 12, 12), torch.randint(0, 10, (8,))
    losses = []
    for _ in range(10):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    mem = et.measured_memory(model, opt).per_param()
    assert mem["weights"] < 1.1  # FP8 codes, 4 bytes per output channel, FP32 norms


def test_quantize_model_skips_embeddings_norms_tied_head_and_named():
    lm = _TinyLM()
    rep = et.quantize_model(lm, Q)
    assert rep.names == ("mlp.weight",)
    assert rep.skipped == {"emb": "Embedding", "head": "tied weight"}
    assert str(rep) == ("stored 1 of 2 weight matrices, 36.4% of parameters; kept in full "
                        "precision: Embedding: emb; tied weight: head")
    assert lm.head.weight is lm.emb.weight
    block = vit_block(16, 2)
    rep = et.quantize_model(block, Q, skip=["linear*"])
    assert rep.names == ("self_attn.in_proj_weight", "self_attn.out_proj.weight")
    assert rep.skipped == {"linear1": "skip=", "linear2": "skip="}
    with pytest.raises(ValueError, match="nothing to store"):
        et.quantize_model(nn.Sequential(nn.Embedding(3, 2)), Q)
    with pytest.raises(TypeError, match="skip must be"):
        et.quantize_model(resnet(), Q, skip=[1])
    with pytest.raises(TypeError, match="quantizer must be"):
        et.quantize_model(resnet(), "e4m3")


def test_unstore_weights_round_trip_and_ema():
    """unstore_weights gives the original architecture back (its state_dict loads into a fresh
    one, outputs equal); ema_update averages stored weights into a plain copy."""
    model = resnet()
    et.quantize_model(model, Q)
    x = torch.randn(2, 3, 8, 8)
    model.eval()
    with torch.no_grad():
        y = model(x)
    plain = et.unstore_weights(copy.deepcopy(model))
    fresh = resnet()
    fresh.load_state_dict(plain.state_dict())
    fresh.eval()
    with torch.no_grad():
        assert torch.equal(fresh(x), y)
    assert torch.equal(fresh[0].weight, model[0].read())
    ema = et.unstore_weights(copy.deepcopy(model))
    before = ema[0].weight.detach().clone()
    model[0].write(model[0].read() * 2, key=7)
    et.ema_update(ema, model, 0.75)
    assert torch.equal(ema[0].weight, before.lerp(model[0].read(), 0.25))
    with pytest.raises(ValueError, match="decay"):
        et.ema_update(ema, model, 1.5)
    with pytest.raises(ValueError, match="different parameters"):
        et.ema_update(ema, resnet(8), 0.5)
    stored_ema = copy.deepcopy(model)  # a stored EMA: averaged, then written back
    et.ema_update(stored_ema, model, 0.5)
    assert torch.equal(stored_ema[0].read(), model[0].read())
    assert isinstance(et.unstore_weights(et.store_module(nn.Linear(3, 2), Q)), nn.Linear)


# -- the weight a stored layer exposes ----------------------------------------------------------

@pytest.mark.parametrize("make", [lambda: nn.Linear(6, 4), lambda: nn.Conv2d(2, 3, 3),
                                  lambda: Conv1D(4, 6)])
def test_stored_weight_reads_values_differentiably(make):
    """Reading a stored layer's ``.weight`` reads the dequantized weights (not the zero
    placeholder), also through ``detach()``/``.data``; a penalty on it reaches ``.grad``."""
    torch.manual_seed(0)
    layer = et.store_module(make(), Q)
    w, values = layer.weight, layer.read()
    assert torch.count_nonzero(values) > 0
    assert torch.equal(w.detach(), values) and torch.equal(w.data.clone(), values)
    assert torch.equal(w.norm(), values.norm()) and torch.equal(w * 3, values * 3)
    assert torch.equal(w.mT, values.mT) and torch.equal(w.real, values)
    if w.dim() == 2:
        assert torch.equal(w.T, values.T)
    assert torch.equal(torch.stack([w, w]), torch.stack([values, values]))
    assert not w.detach().requires_grad and stored(w.detach()) is layer
    (w ** 2).sum().backward()
    assert torch.equal(w.grad, 2 * values)
    assert w.grad.shape == w.shape and w.untyped_storage().nbytes() == 4  # still one element


INPLACE = {
    "nn.init.normal_": lambda w: nn.init.normal_(w),
    "nn.init.kaiming_uniform_": lambda w: nn.init.kaiming_uniform_(w),
    "mul_": lambda w: w.mul_(2),
    "setitem": lambda w: w.__setitem__(0, 1.0),
    "detach().copy_": lambda w: w.detach().copy_(torch.zeros(w.shape)),
    "data.zero_": lambda w: w.data.zero_(),
    "out=": lambda w: torch.add(torch.ones(w.shape), 1, out=w),
    "torch.optim.AdamW": lambda w: torch.optim.AdamW([w], 1e-3).step(),
    "torch.optim.SGD": lambda w: torch.optim.SGD([w], 1e-3, weight_decay=0.0).step(),
}


@pytest.mark.parametrize("what", sorted(INPLACE))
def test_inplace_write_into_stored_weight_refused_clearly(what):
    """In-place writes into a stored weight (initialisers, torch.optim, EMA-style copies) raise
    a TypeError naming what to use instead, and leave the codes unchanged."""
    layer = et.store_module(nn.Linear(6, 4), Q, key=1)
    layer.weight.grad = torch.ones(4, 6)
    codes = layer.codes.clone()
    with pytest.raises(TypeError, match=r"stored as codes by ecosim.*layer\.write.*ema_update"):
        INPLACE[what](layer.weight)
    assert torch.equal(layer.codes, codes)


def test_averaged_model_refused_and_ema_update_works():
    """torch's AveragedModel writes into the slot (refused, with ema_update named);
    ema_update averages the same model."""
    model = nn.Sequential(nn.Linear(6, 4))
    et.quantize_model(model, Q)
    avg = torch.optim.swa_utils.AveragedModel(model)
    with pytest.raises(TypeError, match="ema_update"):
        avg.update_parameters(model)
    ema = et.unstore_weights(copy.deepcopy(model))
    et.ema_update(ema, model, 0.5)
    assert torch.equal(ema[0].weight, model[0].read())


def test_to_float64_converts_read_and_scales():
    layer = et.store_module(nn.Conv2d(2, 3, 3), Q)
    r32, s32 = layer.read(), layer.scales.clone()
    layer.double()
    assert layer.read().dtype == torch.float64 and layer.scales.dtype == torch.float64
    # the float64 products code * s are exact: rounded to float32 they are float32's
    assert torch.equal(layer.read().float(), r32) and torch.equal(layer.scales, s32.double())
    y = layer(torch.randn(1, 2, 5, 5, dtype=torch.float64))
    y.sum().backward()
    assert layer.weight.grad.dtype == torch.float64
    layer.float()
    assert torch.equal(layer.read(), r32) and layer.scales.dtype == torch.float32


@pytest.mark.parametrize("make,shape", [
    (lambda: nn.Linear(5, 4), (2, 5)),
    (lambda: nn.Conv2d(3, 4, 3, padding=1), (2, 3, 6, 6)),
    (lambda: nn.Conv1d(3, 4, 3), (2, 3, 7)),
    (lambda: Conv1D(6, 5), (2, 3, 5)),
    (lambda: nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True), (2, 3, 8)),
], ids=["Linear", "Conv2d", "Conv1d", "Conv1D", "MultiheadAttention"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_to_dtype_moves_every_stored_layer_type(make, shape, dtype):
    """After quantize_model, model.to(dtype) leaves codes and scales as they are and every
    stored layer type runs forward and backward in that dtype, equal bit for bit to the plain
    model holding the dequantized weights converted the same way; .float() moves it back.
    (float64 decodes in float64: test_to_float64_converts_read_and_scales.)"""
    torch.manual_seed(0)
    model = nn.Sequential(make())
    et.quantize_model(model, Q, key=4)
    plain = et.unstore_weights(copy.deepcopy(model)).to(dtype)
    bufs = {k: v.clone() for k, v in model.state_dict().items() if k.endswith(("codes",
                                                                               "scales"))}
    model.to(dtype)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in bufs.items())
    x = torch.randn(shape, dtype=dtype)
    y1, (dx1,) = _fwd_bwd(model, x)
    y2, (dx2,) = _fwd_bwd(plain, x)
    assert y1.dtype == dx1.dtype == dtype
    assert torch.equal(y1, y2) and torch.equal(dx1, dx2)
    g1, g2 = _grads(model), _grads(plain)
    assert g1.keys() == g2.keys()
    for k in g1:
        assert g1[k].dtype == dtype and torch.equal(g1[k], g2[k]), k
    back = et.unstore_weights(copy.deepcopy(model))  # the plain model, in the module's dtype
    assert all(p.dtype == dtype for p in back.parameters())
    model.float()
    assert model(x.float()).dtype == torch.float32


# -- transformers models built from configs (no download) ----------------------------------------

def _causal_lm(kind):
    transformers = pytest.importorskip(
        "transformers", reason="the end-to-end example needs transformers (pip install "
        "transformers); ecosim does not depend on it")
    torch.manual_seed(0)
    if kind == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=2,
                                      n_head=4, resid_pdrop=0.0, embd_pdrop=0.0,
                                      attn_pdrop=0.0)
        return transformers.GPT2LMHeadModel(cfg)
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=32,
                                   tie_word_embeddings=True)
    return transformers.LlamaForCausalLM(cfg)


@pytest.mark.parametrize("kind,n_stored", [("gpt2", 8), ("llama", 14)])
def test_transformers_causal_lm_end_to_end(kind, n_stored):
    """quantize_model on a transformers causal LM: block weights stored (GPT-2's Conv1D,
    Llama's linears), embeddings/norms/tied head kept; ECO AdamW lowers the loss; the
    unstored model's state_dict loads into a fresh model of the same config and gives the
    same logits."""
    model = _causal_lm(kind)
    rep = et.quantize_model(model, et.Quantizer("e4m3", "sr", granularity="row"), key=0)
    assert len(rep.names) == n_stored and rep.skipped.get("lm_head") == "tied weight"
    opt = ECOAdamW(rep.param_groups(), 3e-3, scheme="eco", key=0)
    ids = torch.arange(64).reshape(4, 16) % 7  # a periodic sequence: learnable
    losses = []
    for _ in range(30):
        loss = model(input_ids=ids, labels=ids).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    plain = et.unstore_weights(copy.deepcopy(model))
    fresh = _causal_lm(kind)
    fresh.load_state_dict(plain.state_dict())
    fresh.eval()
    with torch.no_grad():
        assert torch.equal(fresh(input_ids=ids).logits, logits)


def test_save_pretrained_of_a_stored_gpt2_reloads_with_equal_outputs(tmp_path):
    """ecosim.torch.save_pretrained writes a stored GPT-2 as plain weights that
    from_pretrained reloads with the same logits; the stored model is unchanged and its own
    save_pretrained is refused (it would write codes from_pretrained loads as random)."""
    model = _causal_lm("gpt2")
    transformers = pytest.importorskip("transformers")
    et.quantize_model(model, Q, key=2)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    idx = torch.randint(0, 64, (2, 12))
    et.save_pretrained(model, tmp_path / "plain")
    back = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "plain")
    with torch.no_grad():
        assert torch.equal(back(idx).logits, model(idx).logits)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
    with pytest.raises(TypeError, match=r"stored as codes.*ecosim.torch.save_pretrained"):
        model.save_pretrained(tmp_path / "raw")
    assert not (tmp_path / "raw").exists()
    with pytest.raises(TypeError, match="transformers model"):
        et.save_pretrained(nn.Sequential(nn.Linear(2, 2)), tmp_path / "seq")
