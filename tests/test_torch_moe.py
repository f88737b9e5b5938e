"""The sparse mixture-of-experts layer (ecosim.torch.moe) and the ``micro_moe`` preset: the
router, the layer against a hand loop, the quantize-the-experts-only policy, and a short run
that is deterministic and resumes bit-exactly.
"""

import dataclasses
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from ecosim import memory  # noqa: E402
from ecosim.experiments.lm import train_record  # noqa: E402
from ecosim.torch import lm  # noqa: E402
from ecosim.torch.lm.activations import quantize_activations  # noqa: E402
from ecosim.torch.model import (PRESETS, MoEConfig, Transformer, param_counts,  # noqa: E402
                                quantized_names)
from ecosim.torch.moe import MoE, balance_loss, route  # noqa: E402
from ecosim.torch.nn import QuantizedLinear  # noqa: E402
from ecosim.torch.optim import ECOAdamW  # noqa: E402
from lm_checks import assert_same_checkpoint  # noqa: E402

EXPERT_LINEARS = ("w_gate", "w_up", "w_down")


# -- the router ----------------------------------------------------------------------------------

def test_route_picks_top_k_with_index_tie_break():
    logits = torch.tensor([[1.0, 3.0, 3.0, 0.0],    # tie for first: 1 before 2
                           [0.0, 0.0, 0.0, 0.0],    # all tied: the two lowest indices
                           [5.0, -1.0, 2.0, 2.0],   # tie for second: 2 before 3
                           [-2.0, -1.0, 4.0, 7.0]])
    experts, weights = route(logits, 2)
    assert experts.tolist() == [[1, 2], [0, 1], [0, 2], [3, 2]]
    # weights: softmax over the two chosen scores; equal scores share 1/2 exactly
    assert weights[0].tolist() == [0.5, 0.5] and weights[1].tolist() == [0.5, 0.5]
    for row, (a, b) in ((2, (5.0, 2.0)), (3, (7.0, 4.0))):
        ref = [1 / (1 + math.exp(b - a)), 1 / (1 + math.exp(a - b))]
        # float32 softmax of two numbers: each weight within a few ulps (2^-24 relative)
        np.testing.assert_allclose(weights[row].tolist(), ref, rtol=4 * 2**-24, atol=0)
    # each row sums to 1 up to the float32 rounding of a two-term sum (one ulp of 1)
    assert torch.all((weights.sum(-1) - 1).abs() <= 2**-23)
    one, w1 = route(logits, 1)
    assert one.tolist() == [[1], [0], [0], [3]] and torch.equal(w1, torch.ones(4, 1))
    every, _ = route(logits, 4)  # top_k = n_experts: every expert, by decreasing score
    assert every[0].tolist() == [1, 2, 0, 3]


def test_route_gradient_reaches_the_chosen_logits_only():
    logits = torch.tensor([[0.0, 1.0, 2.0]], requires_grad=True)
    _, w = route(logits, 2)
    w[0, 0].backward()
    assert logits.grad[0, 0] == 0 and logits.grad[0, 1] != 0 and logits.grad[0, 2] != 0


def test_route_and_moe_refuse_bad_arguments():
    with pytest.raises(ValueError, match="top_k must be an int"):
        route(torch.zeros(3, 4), 5)
    with pytest.raises(ValueError, match="shape"):
        route(torch.zeros(4), 1)
    with pytest.raises(ValueError, match="must not exceed"):
        MoE(8, 2, 3, lambda: nn.Identity())
    with pytest.raises(ValueError, match="must not exceed"):
        MoEConfig(32, 1, 1, n_experts=2, top_k=3)
    with pytest.raises(ValueError, match="aux_coef"):
        MoEConfig(32, 1, 1, aux_coef=-1.0)


def test_balance_loss_by_hand():
    # uniform load and uniform router probabilities: E * sum_e (1/E)(1/E) = 1 (exact for
    # E = 4: every term a power of two)
    assert balance_loss(torch.zeros(8, 4), torch.tensor([[0], [1], [2], [3]] * 2)).item() == 1.0
    # all assignments to expert 0 (f = [1, 0]) with P = softmax([ln 3, 0]) = [3/4, 1/4]:
    # 2 * (1 * 3/4) = 3/2
    z = torch.tensor([[math.log(3.0), 0.0]] * 4)
    assert balance_loss(z, torch.zeros(4, 1, dtype=torch.int64)).item() == pytest.approx(
        1.5, rel=4 * 2**-24)


# -- the layer against a hand loop ---------------------------------------------------------------

class _SwiGLU(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.w_gate, self.w_up = nn.Linear(d, h, bias=False), nn.Linear(d, h, bias=False)
        self.w_down = nn.Linear(h, d, bias=False)

    def forward(self, x):
        return self.w_down(nn.functional.silu(self.w_gate(x)) * self.w_up(x))


def _moe(d=8, h=12, n=4, k=2, seed=0):
    torch.manual_seed(seed)  # test-local init; the model itself draws from a Generator
    return MoE(d, n, k, lambda: _SwiGLU(d, h)).double()


def test_moe_equals_a_hand_loop_over_tokens_and_experts():
    layer = _moe()
    x = torch.randn(3, 5, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        y = layer(x)
        ref = torch.zeros_like(x)
        chosen = []
        for b in range(3):
            for t in range(5):
                xt = x[b, t]
                scores = [float(layer.router.weight[e] @ xt) for e in range(4)]
                top = sorted(range(4), key=lambda e: (-scores[e], e))[:2]
                chosen.append(top)
                z = sum(math.exp(scores[e] - scores[top[0]]) for e in top)
                for e in sorted(top):  # the layer sums in ascending expert index
                    w = math.exp(scores[e] - scores[top[0]]) / z
                    ref[b, t] += w * layer.experts[e](xt[None])[0]
    # float64 throughout; the layer runs each expert on a batch of rows, the loop on one row,
    # so only the order of the float64 sums inside the matmuls differs: |y| ~ 1e-1, a few
    # ulps of 2^-52 each over sums of <= 12 terms stay far below 1e-13.
    torch.testing.assert_close(y, ref, rtol=0, atol=1e-13)
    assert layer.counts.tolist() == [sum(e in c for c in chosen) for e in range(4)]
    assert int(layer.counts.sum()) == 15 * 2


def test_moe_ties_and_unchosen_experts_still_get_a_gradient():
    layer = _moe()
    x = torch.zeros(2, 3, 8, dtype=torch.float64, requires_grad=True)
    out = layer(x + 0.0)  # every logit 0: all tied, so experts 0 and 1 for every token
    assert layer.counts.tolist() == [6, 6, 0, 0]
    (out.sum() + layer.router.weight.sum()).backward()
    for e in (2, 3):  # ran on zero tokens: a gradient of zeros, not None
        for p in layer.experts[e].parameters():
            assert p.grad is not None and not p.grad.any()
    assert layer.experts[0].w_down.weight.grad is not None


# -- the preset and the quantization policy ------------------------------------------------------

def test_micro_moe_counts_match_the_memory_model():
    cfg = PRESETS["micro_moe"].model
    c = param_counts("micro_moe")
    d, h, L, E, k = cfg.d_model, cfg.d_ff, cfg.n_layers, cfg.n_experts, cfg.top_k
    expert = 3 * d * h
    assert c["experts"] == c["quantized"] == L * E * expert == 49_152
    # per block: attention 4 d^2, router E d, two norms; then the final norm
    assert c["non_embedding"] == L * (4 * d * d + E * d + 2 * d + E * expert) + d == 57_760
    assert c["active_non_embedding"] == c["non_embedding"] - L * (E - k) * expert == 33_184
    spec = memory.ModelSpec.moe(d, L, n_experts=E, top_k=k, expert_hidden=h, vocab=256)
    assert spec.total == c["total"]
    assert spec.active == c["active_non_embedding"] + c["embedding"]
    assert "active_non_embedding" not in param_counts("micro")  # dense counts as before


def test_only_the_expert_linears_are_quantized():
    model = Transformer(PRESETS["micro_moe"].model, torch.Generator().manual_seed(0))
    names = quantized_names(model)
    experts = [n for n, _ in model.named_parameters()
               if ".experts." in n and n.rsplit(".", 2)[-2] in EXPERT_LINEARS]
    assert names == experts and len(names) == 2 * 4 * 3
    assert not any(".attn." in n or "router" in n for n in names)
    dense = quantized_names(Transformer(PRESETS["micro"].model, torch.Generator().manual_seed(0)))
    assert len(dense) == 14 and sum(".attn." in n for n in dense) == 8  # dense: unchanged

    cfg = lm.LMConfig(preset="micro_moe", method="fp8_eco_sr", quiet=True).resolved()
    opts = lm.build_optimizers(model, cfg)
    eco, rest = opts
    assert isinstance(eco, ECOAdamW) and isinstance(rest, torch.optim.AdamW)
    named = dict(model.named_parameters())
    eco_ids = {id(p) for g in eco.param_groups for p in g["params"]}
    assert eco_ids == {id(named[n]) for n in names}
    rest_ids = {id(p) for g in rest.param_groups for p in g["params"]}
    assert rest_ids == {id(p) for n, p in named.items() if n not in names}
    for name, mod in model.named_modules():  # stored as codes: the expert linears only
        if isinstance(mod, (QuantizedLinear, nn.Linear)) and name.startswith("blocks."):
            expert = ".experts." in name
            assert isinstance(mod, QuantizedLinear) == expert, name
            if not expert:  # router and attention: FP32 parameters under torch AdamW
                assert mod.weight.dtype == torch.float32 and id(mod.weight) in rest_ids
    # FP8 activations enter the quantized linears only: one hook per expert linear
    assert len(quantize_activations(model)) == 24


def test_aux_loss_is_added_with_its_coefficient():
    base = PRESETS["micro_moe"].model
    assert base.aux_coef == 0.01
    x = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(3))
    # the coefficient changes no parameter: the same generator gives the same weights
    m0 = Transformer(dataclasses.replace(base, aux_coef=0.0), torch.Generator().manual_seed(0))
    m1 = Transformer(dataclasses.replace(base, aux_coef=0.5), torch.Generator().manual_seed(0))
    ce = m0(x, x)
    assert all(blk.mlp.aux is None for blk in m0.blocks)
    loss = m1(x, x)
    aux = sum(blk.mlp.aux for blk in m1.blocks) / 2
    assert loss.item() == (ce + 0.5 * aux).item()
    assert aux.item() > 0
    with torch.no_grad():  # validation: the cross-entropy alone
        assert m1(x, x).item() == ce.item()


# -- a short run: deterministic, resumes bit-exactly ---------------------------------------------

def _run(corpus, **kw):
    base = dict(preset="micro_moe", method="fp8_eco_sr", steps=10, batch=4, seq=32,
                data=corpus, eval_every=5, eval_batches=2, log_every=1)
    return train_record("test_torch_moe", **{**base, **kw})  # on one CPU thread


def test_micro_moe_run_is_deterministic_and_resumes_bit_exactly(corpus, tmp_path):
    full = _run(corpus, out=str(tmp_path / "full"))
    again = _run(corpus)
    assert not full["diverged"] and full["steps_done"] == 10
    assert full["curve"] == again["curve"] and full["val_loss"] == again["val_loss"]
    assert full["n_params"] == param_counts("micro_moe")
    assert full["model"]["n_experts"] == 4 and full["model"]["top_k"] == 2
    half = _run(corpus, out=str(tmp_path / "half"), stop_after=4)
    assert half["finished"] is False and half["step"] == 4
    rest = _run(corpus, out=str(tmp_path / "half"), resume=True)
    assert rest["curve"] == full["curve"] and rest["segments"] == 2
    assert_same_checkpoint(tmp_path / "full" / lm.CHECKPOINT, tmp_path / "half" / lm.CHECKPOINT)


def test_lm_moe_protocol_trains_20_tokens_per_active_parameter():
    from ecosim.experiments.lm_moe import LMMoEConfig

    cfg = LMMoEConfig()
    active = param_counts(cfg.presets[0])["active_non_embedding"]
    tokens = cfg.steps[0] * cfg.batch * cfg.seq
    assert tokens == 696_320 and tokens / active >= 20  # 21.0
    assert cfg.seeds == (3,) and "fp8_master_sr" in cfg.methods
