"""Weights stored as real low-precision codes (ecosim.torch.nn), exact on the CPU in float32.

Every comparison is bit for bit (``torch.equal``): the stored layer's forward and backward equal
``nn.Linear`` holding the dequantized weights, the ECO optimizers on stored weights follow the
same trajectory as on float32 parameters and as the NumPy optimizers, checkpoints resume
exactly, and a 2-process DDP run (gloo) equals one process accumulating the same two
micro-batches.
"""

import copy
import io
import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ecosim  # noqa: E402
import ecosim.torch as et  # noqa: E402
from ecosim.optim import adamw, sgdm  # noqa: E402
from ecosim.torch.memory import measured_memory  # noqa: E402
from ecosim.torch.nn import GradSlot, QuantizedLinear, data_parallel, stored  # noqa: E402
from ecosim.torch.layers import store_weights  # noqa: E402
from ecosim.torch.optim import ECOAdamW, ECOSGD  # noqa: E402
from torch_parity import linear_model, random_problem, step_both  # noqa: E402

nn = torch.nn
KEY = 5


def _mlp(seed=0, bias=True):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(12, 16, bias=bias), nn.ReLU(), nn.Linear(16, 6, bias=bias),
                         nn.Tanh(), nn.Linear(6, 3))


def _data(seed=1, n=8):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 12, generator=g), torch.randn(n, 3, generator=g)


def _store(model, mode="sr", fmt="e4m3"):
    q = et.Quantizer(fmt, mode, granularity="row")
    names = store_weights(model, q, key=KEY, predicate=lambda name, mod: name != "4")
    return q, names


# -- the layer ---------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt,dtype,nbytes", [("e4m3", torch.float8_e4m3fn, 16 * 12),
                                              ("e5m2", torch.float8_e5m2, 16 * 12),
                                              ("int4", torch.uint8, 16 * 6)])
def test_codes_are_the_quantizer_encoding(fmt, dtype, nbytes):
    lin = _mlp()[0]
    q = et.Quantizer(fmt, "sr", granularity="row")
    layer = QuantizedLinear.from_linear(lin, q, key=KEY, name="0.weight")
    ref = q.encode(lin.weight.detach(), key=et.fold_in(KEY, "init", "0.weight"))
    enc = layer.encoded()
    assert layer.codes.dtype == torch.uint8 and enc.codes.dtype == dtype
    assert layer.codes.nbytes == nbytes and layer.scales.nbytes == 16 * 4
    assert torch.equal(layer.codes, ref.codes.view(torch.uint8))
    assert torch.equal(layer.scales, ref.scales)
    values = q(lin.weight.detach(), key=et.fold_in(KEY, "init", "0.weight"))
    assert torch.equal(layer.read(), values)
    assert torch.equal(q.decode(enc), values)
    assert layer.weight.untyped_storage().nbytes() == 4  # the slot: one float


@pytest.mark.parametrize("shape", [(5, 12), (2, 3, 12), (12,)])
@pytest.mark.parametrize("bias", [True, False])
def test_forward_backward_equal_nn_linear(shape, bias):
    lin = nn.Linear(12, 16, bias=bias)
    layer = QuantizedLinear.from_linear(lin, et.Quantizer("e4m3", granularity="row"))
    ref = nn.Linear(12, 16, bias=bias)
    with torch.no_grad():
        ref.weight.copy_(layer.read())
        if bias:
            ref.bias.copy_(lin.bias)
    x = torch.randn(*shape, requires_grad=True)
    x2 = x.detach().clone().requires_grad_(True)
    y, y2 = layer(x), ref(x2)
    assert torch.equal(y, y2)
    dy = torch.randn_like(y)
    y.backward(dy)
    y2.backward(dy)
    assert torch.equal(x.grad, x2.grad)
    assert torch.equal(layer.weight.grad, ref.weight.grad)
    assert layer.weight.grad.is_contiguous()
    if bias:
        assert torch.equal(layer.bias.grad, ref.bias.grad)


def test_autocast_matches_nn_linear():
    """Under CPU bf16 autocast the layer casts x, W and b as F.linear does: same outputs and
    gradients as nn.Linear holding the dequantized weights."""
    lin = nn.Linear(12, 16)
    layer = QuantizedLinear.from_linear(lin, et.Quantizer("e4m3", granularity="row"))
    ref = nn.Linear(12, 16)
    with torch.no_grad():
        ref.weight.copy_(layer.read())
        ref.bias.copy_(lin.bias)
    x = torch.randn(2, 5, 12, requires_grad=True)
    x2 = x.detach().clone().requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y, y2 = layer(x), ref(x2)
    assert y.dtype == torch.bfloat16 and torch.equal(y, y2)
    dy = torch.randn_like(y)
    y.backward(dy)
    y2.backward(dy)
    assert torch.equal(x.grad, x2.grad)
    assert layer.weight.grad.dtype == torch.float32
    assert torch.equal(layer.weight.grad, ref.weight.grad)
    assert torch.equal(layer.bias.grad, ref.bias.grad)


def test_backward_saves_codes_not_weights():
    layer = QuantizedLinear.from_linear(nn.Linear(64, 32), et.Quantizer("e4m3", granularity="row"))
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        layer(torch.randn(4, 64)).sum().backward()
    assert sorted(t.dtype for t in saved if t.numel() == 32 * 64) == [torch.uint8]


# -- training: stored == float32 parameters == NumPy ------------------------------------------

def _train(model, opt, steps, clip=None):
    x, y = _data()
    for t in range(steps):
        opt.zero_grad()
        loss = ((model(x[t % 2::2]) - y[t % 2::2]) ** 2).mean()
        loss.backward()
        if clip is not None:
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
    return norm if clip is not None else None


def _weights(model):
    """Stored weights (dequantized) and other parameters by name."""
    out = {}
    for name, mod in model.named_modules():
        if isinstance(mod, QuantizedLinear):
            out[mod.name] = mod.read()
    for name, p in model.named_parameters():
        if stored(p) is None:
            out[name] = p.detach().clone()
    return out


@pytest.mark.parametrize("cls,scheme,mode", [(ECOAdamW, "eco", "sr"), (ECOAdamW, "naive", "rtn"),
                                             (ECOSGD, "eco", "rtn"), (ECOSGD, "eco", "sr")])
def test_stored_training_equals_float32_parameters(cls, scheme, mode):
    """Same model, same key: codes in QuantizedLinear vs dequantized float32 parameters (the
    predicate keeps the last layer in full precision in both runs), gradient clipping on."""
    q = et.Quantizer("e4m3", mode, granularity="row")
    lr = 1e-2 if cls is ECOAdamW else 0.05
    ref = _mlp()
    ref_opt = cls(ref.named_parameters(), lr, scheme=scheme, key=KEY,
                  weights={"0.weight": q, "2.weight": q})
    model = _mlp()
    names = store_weights(model, q, key=KEY, predicate=lambda name, mod: name != "4")
    assert names == ["0.weight", "2.weight"]
    opt = cls(model.named_parameters(), lr, scheme=scheme, key=KEY)
    assert _weights(model).keys() == _weights(ref).keys()
    for k, v in _weights(model).items():
        assert torch.equal(v, dict(ref.named_parameters())[k].detach()), k
    n1 = _train(ref, ref_opt, 6, clip=0.5)
    n2 = _train(model, opt, 6, clip=0.5)
    assert torch.equal(n1, n2)
    refw = {k: p.detach() for k, p in ref.named_parameters()}
    for k, v in _weights(model).items():
        assert torch.equal(v, refw[k]), k
    for k in ("0.weight", "2.weight"):
        assert torch.equal(opt.encoded(k).codes.view(torch.uint8),
                           ref_opt.encoded(k).codes.view(torch.uint8))


@pytest.mark.parametrize("kind,scheme,states", [
    ("adamw", "eco", None), ("adamw", "master", None), ("adamw", "eco_exact", None),
    ("adamw", "kahan", None), ("adamw", "eco", {"m": ("e4m3", "sr"), "v": "bf16"}),
    ("sgd", "eco_exact", None), ("sgd", "naive", {"m": "bf16"})])
@pytest.mark.parametrize("keep_initial", [True, False])
def test_stored_weights_match_numpy(kind, scheme, states, keep_initial):
    """Gradients fed by hand. NumPy starts from the original float32 weights: every scheme
    matches it, master/eco_exact/kahan through the W_0 that store_weights keeps for the first
    optimizer. Without it (``keep_initial=False``: as after loading codes from a checkpoint)
    those three start from the stored values, and match NumPy started there."""
    shapes = {"a.weight": (8, 16), "b.weight": (4, 8)}
    P, G = random_problem(shapes, 8, seed=3)
    model = linear_model(P)
    qt = et.Quantizer("e4m3", "sr", granularity="row")
    store_weights(model, qt, key=KEY)
    layers = {m.name: m for m in model.modules() if isinstance(m, QuantizedLinear)}
    P0 = P
    if not keep_initial:
        for layer in layers.values():
            assert layer.pop_initial() is not None and layer.pop_initial() is None
        if scheme not in ("naive", "eco"):
            P0 = {k: l.read().numpy() for k, l in layers.items()}
    qn = ecosim.Quantizer("e4m3", "sr", granularity="row")
    if kind == "adamw":
        no = adamw(1e-2, weight_decay=0.1, scheme=scheme, weights=qn, states=states)
        to = ECOAdamW(model.named_parameters(), 1e-2, weight_decay=0.1, scheme=scheme, key=KEY,
                      states=states)
    else:
        no = sgdm(0.05, 0.9, scheme=scheme, weights=qn, states=states)
        to = ECOSGD(model.named_parameters(), 0.05, 0.9, scheme=scheme, key=KEY, states=states,
                    heavy_ball=False)
    w, s = no.init(P0, key=KEY)
    slots = dict(model.named_parameters())
    for t in range(8):
        w, s = step_both(no, w, s, to, slots, G[t])
        for k in shapes:
            assert torch.equal(layers[k].read(), torch.from_numpy(w[k])), (t, k)
            assert torch.equal(to.state_values(k, "m"), torch.from_numpy(s.m[k])), (t, k)


def test_checkpoint_resume_is_bit_exact():
    q = et.Quantizer("e4m3", "sr", granularity="row")

    def build():
        model = _mlp()
        store_weights(model, q, key=KEY)
        opt = ECOAdamW(model.named_parameters(), 1e-2, scheme="eco", key=KEY,
                       states={"m": ("e4m3", "sr"), "v": "bf16"})
        return model, opt

    ref, ref_opt = build()
    _train(ref, ref_opt, 8)
    a, a_opt = build()
    _train(a, a_opt, 3)
    sd = a.state_dict()
    assert not any(k.endswith("weight") for k in sd)  # codes, scales, bias: no slot
    assert sd["0.codes"].dtype == torch.uint8
    buf = io.BytesIO()
    torch.save({"model": sd, "opt": a_opt.state_dict()}, buf)
    buf.seek(0)
    saved = torch.load(buf)  # weights_only: plain tensors and containers only
    b, b_opt = build()
    b.load_state_dict(saved["model"])
    b_opt.load_state_dict(saved["opt"])
    x, y = _data()
    for t in range(3, 8):  # the rest of the reference's schedule
        b_opt.zero_grad()
        ((b(x[t % 2::2]) - y[t % 2::2]) ** 2).mean().backward()
        b_opt.step()
    for (k, u), (_, v) in zip(b.state_dict().items(), ref.state_dict().items()):
        assert torch.equal(u, v), k
    for p, r in zip(b.parameters(), ref.parameters()):
        for key, val in ref_opt.state[r].items():
            got = b_opt.state[p][key]
            assert got.dtype == val.dtype, key
            assert torch.equal(got.view(torch.uint8) if val.element_size() == 1 else got,
                               val.view(torch.uint8) if val.element_size() == 1 else val), key


# -- module plumbing ---------------------------------------------------------------------------

def test_conversions_copies_and_errors():
    model = _mlp()
    _store(model)
    layer = model[0]
    codes, scales = layer.codes.clone(), layer.scales.clone()
    model.half().float().to("cpu")
    assert torch.equal(layer.codes, codes) and torch.equal(layer.scales, scales)
    assert layer.scales.dtype == torch.float32 and isinstance(layer.weight, GradSlot)
    assert layer.weight.stride() == (0, 0) and stored(layer.weight) is layer
    twin = copy.deepcopy(model)
    assert stored(twin[0].weight) is twin[0] and twin[0].weight.stride() == (0, 0)
    assert torch.equal(twin[0].codes, codes) and twin[0].codes is not layer.codes
    assert "fmt=float8_e4m3fn" in repr(model)
    with pytest.raises(TypeError, match="from_linear"):
        store_weights(nn.Linear(3, 3), et.Quantizer("e4m3"))
    with pytest.raises(ValueError, match="no nn.Linear"):
        store_weights(_mlp(), et.Quantizer("e4m3"), predicate=lambda name, mod: False)
    tied = nn.Module()
    tied.emb, tied.head = nn.Embedding(3, 4), nn.Linear(4, 3, bias=False)
    tied.head.weight = tied.emb.weight
    with pytest.raises(ValueError, match="tied"):
        store_weights(tied, et.Quantizer("e4m3", granularity="row"))
    shared = nn.Sequential(nn.Linear(4, 4))
    shared.append(shared[0])  # one module used twice: both places get the same store
    store_weights(shared, et.Quantizer("e4m3", granularity="row"))
    assert shared[0] is shared[1] and isinstance(shared[0], QuantizedLinear)
    with pytest.raises(ValueError, match="holds codes of"):
        ECOAdamW(model.named_parameters(), 1e-3, weights=et.Quantizer("int4", granularity="row"))


def test_measured_memory():
    """AdamW: float32 master = 12 bytes/param plus the model's copy; ECO with FP8 codes = 9
    plus 4 bytes per row; bf16 moments bring ECO to 5."""
    def net():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(256, 128, bias=False), nn.Linear(128, 256, bias=False))

    q = et.Quantizer("e4m3", "sr", granularity="row")
    plain = net()
    adam = torch.optim.AdamW(plain.parameters())
    plain(torch.ones(1, 256)).sum().backward()
    adam.step()  # torch builds its states at the first step
    m = measured_memory(plain, adam)
    assert (m.weights, m.m, m.v) == (4 * m.n_params,) * 3
    master = net()
    opt = ECOAdamW(master.parameters(), 1e-3, scheme="master", weights=q)
    per = measured_memory(master, opt).per_param()
    assert per["master"] + per["m"] + per["v"] == 12 and per["weights"] > 4
    eco = net()
    store_weights(eco, q)
    per = measured_memory(eco, ECOAdamW(eco.parameters(), 1e-3, scheme="eco")).per_param()
    rows = (128 + 256) * 4 + 2 * 4  # a float32 scale per row, plus the two 4-byte slots
    assert per["weights"] == 1 + rows / (2 * 256 * 128)
    assert per["m"] + per["v"] == 8 and per["total"] == 9 + rows / (2 * 256 * 128)
    low = ECOAdamW(eco.parameters(), 1e-3, states={"m": "bf16", "v": "bf16"})
    assert measured_memory(eco, low).per_param()["total"] == 5 + rows / (2 * 256 * 128)


# -- DDP ---------------------------------------------------------------------------------------

def _ddp_worker(out_dir):
    """One rank of the DDP check (this file under torchrun: ``RANK`` etc. in the env)."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    try:
        model = _mlp(seed=rank)  # different init on rank 1: data_parallel broadcasts rank 0's
        q = et.Quantizer("e4m3", "sr", granularity="row")
        store_weights(model, q, key=KEY)
        ddp = data_parallel(model)
        opt = ECOAdamW(model.named_parameters(), 1e-2, scheme="eco", key=KEY)
        x, y = _data()
        for _ in range(3):
            opt.zero_grad()
            ((ddp(x[rank::2]) - y[rank::2]) ** 2).mean().backward()
            opt.step()
        torch.save(model.state_dict(), os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def test_ddp_two_processes_equal_accumulation(tmp_path, torchrun):
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("no gloo backend")
    # two fresh processes (torchrun; not a fork of this threaded process, which can hang)
    torchrun([os.path.abspath(__file__), "ddp-worker", tmp_path], tmp_path)
    # One process, the same two micro-batches accumulated; DDP averages (g0 + g1) / 2 as
    # g0/2 + g1/2, which loss/2 reproduces exactly (halving is exact).
    model = _mlp(seed=0)
    store_weights(model, et.Quantizer("e4m3", "sr", granularity="row"), key=KEY)
    opt = ECOAdamW(model.named_parameters(), 1e-2, scheme="eco", key=KEY)
    x, y = _data()
    for _ in range(3):
        opt.zero_grad()
        for r in range(2):
            (((model(x[r::2]) - y[r::2]) ** 2).mean() / 2).backward()
        opt.step()
    ref = model.state_dict()
    for r in range(2):
        got = torch.load(tmp_path / f"rank{r}.pt")
        assert got.keys() == ref.keys()
        for k in ref:
            assert torch.equal(got[k], ref[k]), (r, k)


if __name__ == "__main__" and sys.argv[1:2] == ["ddp-worker"]:
    _ddp_worker(sys.argv[2])
