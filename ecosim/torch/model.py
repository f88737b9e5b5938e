"""A Llama-style decoder and the model presets of the ECO paper's Table 1 (docs/theory.md §7).

Architecture (pre-norm, no biases anywhere): token embedding; ``n_layers`` blocks of
``x + attn(rmsnorm(x))`` then ``x + mlp(rmsnorm(x))``, where ``attn`` is causal multi-head
attention with rotary position embeddings (RoPE, rotate-half form, base 10000) computed by
``torch.nn.functional.scaled_dot_product_attention``, and ``mlp`` is SwiGLU
``w_down(silu(w_gate x) * w_up x)``; a final RMSNorm; an untied linear head. The vocabulary is
256 (bytes; see :mod:`ecosim.torch.data`).

Quantized layers: only the block-internal linears (attention ``wq, wk, wv, wo``, MLP
``w_gate, w_up, w_down``), as in the paper; embedding, head and norm gains stay in FP32.
:func:`quantized_names` lists them.

Mixture of experts (:class:`MoEConfig`, presets ``*_moe``): each block's MLP is a
:class:`ecosim.torch.moe.MoE`, ``n_experts`` SwiGLU experts of width ``d_ff`` behind a top-k
router. As in the paper's SMoE (Figure 3), only the expert linears are quantized there; router,
attention, embedding and head stay FP32 under plain AdamW.

SwiGLU width: ``d_ff = 64 * ceil((8/3) d / 64)`` (8/3 d keeps the MLP at ``8 d^2`` weights, the
same as a 4d GELU MLP, and a multiple of 64 suits matmul tiles). Then each block holds
``4 d^2 + 3 d d_ff ~ 12 d^2`` quantized weights, and the non-embedding counts of the paper's
presets are 29.7M, 49.6M, 101.2M, 198.3M, 434.8M and 809.6M (see :func:`param_counts`; the
names match within 1.2%).

Initialisation (from an explicit ``torch.Generator``, no global random state): normal with
std 0.02 for every matrix, the residual outputs ``wo`` and ``w_down`` scaled by
``1/sqrt(2 n_layers)`` (GPT-2), norm gains 1.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .moe import MoE

__all__ = ["MoEConfig", "ModelConfig", "PRESETS", "Preset", "Transformer", "ffn_dim",
           "get_preset", "param_counts", "quantized_names"]

_QUANTIZED = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")


def ffn_dim(d_model: int, multiple: int = 64) -> int:
    """SwiGLU hidden width: ``8/3 d_model`` rounded up to a multiple of ``multiple``.

    Example:
        >>> ffn_dim(640), ffn_dim(2048)
        (1728, 5504)
    """
    return multiple * math.ceil(8 * d_model / (3 * multiple))


@dataclass(frozen=True)
class ModelConfig:
    """Shape of a :class:`Transformer`.

    Attributes:
        d_model: residual width (``n_heads * head_dim``).
        n_layers: number of blocks.
        n_heads: attention heads.
        d_ff: SwiGLU hidden width (default :func:`ffn_dim`).
        vocab: vocabulary size (256: bytes).
        rope_base: RoPE frequency base.
        norm_eps: RMSNorm epsilon.
    """

    d_model: int
    n_layers: int
    n_heads: int
    d_ff: int | None = None
    vocab: int = 256
    rope_base: float = 10000.0
    norm_eps: float = 1e-5

    def __post_init__(self):
        for f in ("d_model", "n_layers", "n_heads", "vocab"):
            v = getattr(self, f)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{f} must be a positive int, got {v!r}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if self.head_dim % 2:
            raise ValueError(f"RoPE needs an even head dimension, got {self.head_dim}")
        if self.d_ff is None:
            object.__setattr__(self, "d_ff", ffn_dim(self.d_model))

    @property
    def head_dim(self) -> int:
        """Per-head width."""
        return self.d_model // self.n_heads


@dataclass(frozen=True)
class MoEConfig(ModelConfig):
    """Shape of a sparse mixture-of-experts :class:`Transformer` (:mod:`ecosim.torch.moe`).

    A subclass, so that dense shapes (and the records that store them) keep their fields.

    Attributes:
        d_ff: each expert's SwiGLU width (default :func:`ffn_dim`).
        n_experts: experts per block.
        top_k: experts each token is routed to.
        aux_coef: weight of the load-balancing loss (:func:`ecosim.torch.moe.balance_loss`,
            mean over the blocks) added to the loss of forwards that record gradients
            (training); under ``torch.no_grad`` (validation) the loss is the cross-entropy
            alone. 0 leaves it out.
    """

    n_experts: int = 4
    top_k: int = 2
    aux_coef: float = 0.0

    def __post_init__(self):
        super().__post_init__()
        for f in ("n_experts", "top_k"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{f} must be a positive int, got {v!r}")
        if self.top_k > self.n_experts:
            raise ValueError(f"top_k={self.top_k} must not exceed n_experts={self.n_experts}")
        if not (math.isfinite(self.aux_coef) and self.aux_coef >= 0):
            raise ValueError(f"aux_coef must be a finite number >= 0, got {self.aux_coef!r}")


@dataclass(frozen=True)
class Preset:
    """A named model with its training defaults.

    Attributes:
        model: the shape.
        lr: peak learning rate (the paper's for its sizes).
        seq: default sequence length (bytes).
        batch: default micro-batch (sequences per process and accumulation step).
    """

    model: ModelConfig
    lr: float
    seq: int
    batch: int


PRESETS: dict[str, Preset] = {
    # CPU-sized models (head dims 32 and 64); learning rates chosen by short sweeps on the
    # stdlib corpus (micro takes tiny's, untuned). micro is the size of make figures' Table 1
    # protocol (ecosim.experiments.lm): 20 tokens per non-embedding parameter in 650 steps.
    "micro": Preset(ModelConfig(32, 2, 1), lr=3e-3, seq=64, batch=16),
    "tiny": Preset(ModelConfig(64, 2, 2), lr=3e-3, seq=64, batch=16),
    # micro's attention with 4 experts of width 64, 2 routed per token: the size of the lm_moe
    # experiment (Figure 3 in miniature; counts in ecosim.experiments.lm_moe); lr untuned.
    "micro_moe": Preset(MoEConfig(32, 2, 1, d_ff=64, n_experts=4, top_k=2, aux_coef=0.01),
                        lr=3e-3, seq=64, batch=64),
    "small": Preset(ModelConfig(256, 4, 4), lr=2e-3, seq=256, batch=16),
    # The ECO paper's Table 1 shapes (head dim 128) and peak learning rates.
    "30m": Preset(ModelConfig(640, 6, 5), lr=1.2e-3, seq=512, batch=32),
    "50m": Preset(ModelConfig(768, 7, 6), lr=1.2e-3, seq=512, batch=32),
    "100m": Preset(ModelConfig(1024, 8, 8), lr=6e-4, seq=512, batch=32),
    "200m": Preset(ModelConfig(1280, 10, 10), lr=3e-4, seq=512, batch=32),
    "430m": Preset(ModelConfig(1664, 13, 13), lr=1.5e-4, seq=512, batch=16),
    "800m": Preset(ModelConfig(2048, 16, 16), lr=7.5e-5, seq=512, batch=16),
}


class RMSNorm(nn.Module):
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last axis."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def _rope(seq: int, head_dim: int, base: float, device, dtype):
    """cos and sin tables of shape (seq, head_dim), rotate-half layout.

    Computed once per (seq, head_dim, base, device, dtype) and shared by every forward: a
    pure function of its arguments, and the tables are constants nothing writes to (traced
    code computes them: ``torch.compile`` sees no cache)."""
    if torch.compiler.is_compiling():
        return _rope_tables(seq, head_dim, base, device, dtype)
    return _rope_cached(seq, head_dim, base, device, dtype)


def _rope_tables(seq: int, head_dim: int, base: float, device, dtype):
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32)
                          / head_dim))
    ang = torch.outer(torch.arange(seq, device=device, dtype=torch.float32), inv)
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos().to(dtype), ang.sin().to(dtype)


@functools.lru_cache(maxsize=16)
def _rope_cached(seq: int, head_dim: int, base: float, device, dtype):
    # outside autograd and inference mode, so that any later forward may save them
    with torch.inference_mode(False), torch.no_grad():
        return _rope_tables(seq, head_dim, base, device, dtype)


def _apply_rope(x, cos, sin):
    h = x.shape[-1] // 2
    rot = torch.cat([-x[..., h:], x[..., :h]], dim=-1)
    return x * cos + rot * sin


class Attention(nn.Module):
    """Causal multi-head self-attention with RoPE; ``wq, wk, wv, wo`` without biases."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        d = cfg.d_model
        self.n_heads, self.head_dim = cfg.n_heads, cfg.head_dim
        self.wq = nn.Linear(d, d, bias=False)
        self.wk = nn.Linear(d, d, bias=False)
        self.wv = nn.Linear(d, d, bias=False)
        self.wo = nn.Linear(d, d, bias=False)

    def forward(self, x, cos, sin):
        B, T, d = x.shape
        shape = (B, T, self.n_heads, self.head_dim)
        q = self.wq(x).view(shape).transpose(1, 2)  # (B, h, T, hd)
        k = self.wk(x).view(shape).transpose(1, 2)
        v = self.wv(x).view(shape).transpose(1, 2)
        q, k = _apply_rope(q, cos, sin), _apply_rope(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(B, T, d))


class MLP(nn.Module):
    """SwiGLU: ``w_down(silu(w_gate x) * w_up x)``."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.w_gate = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.w_up = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.w_down = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)

    def forward(self, x):
        return self.w_down(F.silu(self.w_gate(x)) * self.w_up(x))


class Block(nn.Module):
    """Pre-norm residual block: attention then SwiGLU (an MoE of SwiGLU experts for an
    :class:`MoEConfig`)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.mlp_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        moe = isinstance(cfg, MoEConfig)
        self.mlp = MoE(cfg.d_model, cfg.n_experts, cfg.top_k, lambda: MLP(cfg)) if moe \
            else MLP(cfg)
        self.aux = moe and cfg.aux_coef > 0  # the MoE keeps its balance loss for the model

    def forward(self, x, cos, sin):
        x = x + self.attn(self.attn_norm(x), cos, sin)
        if self.aux:
            return x + self.mlp(self.mlp_norm(x), aux=True)
        return x + self.mlp(self.mlp_norm(x))


class Transformer(nn.Module):
    """Llama-style decoder (see the module docstring).

    Args:
        cfg: the shape.
        generator: initialise from this generator (None: leave torch's default init, e.g. on
            the meta device where nothing is allocated).

    Example:
        >>> m = Transformer(ModelConfig(32, 1, 2), torch.Generator().manual_seed(0))
        >>> x = torch.zeros(2, 5, dtype=torch.int64)
        >>> m(x).shape
        torch.Size([2, 5, 256])
        >>> abs(m(x, x).item() - math.log(256)) < 0.5   # small init: near-uniform predictions
        True
    """

    def __init__(self, cfg: ModelConfig, generator: torch.Generator | None = None):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        if generator is not None:
            self.reset_parameters(generator)

    @torch.no_grad()
    def reset_parameters(self, generator: torch.Generator) -> None:
        """Initialise every parameter, in ``named_parameters`` order, from ``generator``."""
        resid = 0.02 / math.sqrt(2 * self.cfg.n_layers)
        for name, p in self.named_parameters():
            if p.ndim == 1:
                p.fill_(1.0)
                continue
            std = resid if name.endswith(("wo.weight", "w_down.weight")) else 0.02
            # Drawn on the CPU, then moved: the same numbers on every device.
            p.copy_(torch.randn(p.shape, generator=generator) * std)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        """Logits ``(B, T, vocab)``, or the mean next-token cross-entropy when ``targets``."""
        T = idx.shape[1]
        x = self.embed(idx)
        cos, sin = _rope(T, self.cfg.head_dim, self.cfg.rope_base, x.device, x.dtype)
        for blk in self.blocks:
            x = blk(x, cos, sin)
        logits = self.head(self.norm(x))
        if targets is None:
            return logits
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))
        if self.blocks[0].aux and torch.is_grad_enabled():  # training an MoE: + balance loss
            aux = sum(blk.mlp.aux for blk in self.blocks) / len(self.blocks)
            loss = loss + self.cfg.aux_coef * aux
        return loss


def quantized_names(model: nn.Module) -> list[str]:
    """Names (as ``model.named_parameters()`` gives them) of the quantized linear weights: the
    block-internal linears of a dense model; of an MoE model (one with ``.experts.`` layers)
    the expert linears only, so its router and attention stay FP32."""
    names = [n for n, _ in model.named_parameters()
             if n.startswith("blocks.") and n.rsplit(".", 2)[-2] in _QUANTIZED]
    experts = [n for n in names if ".experts." in n]
    return experts or names


def param_counts(cfg: ModelConfig | str) -> dict:
    """Parameter counts of a model (built on the meta device: nothing is allocated).

    Args:
        cfg: a shape or a preset name.

    Returns:
        ``{"total", "embedding", "non_embedding", "quantized"}``: ``embedding`` counts the
        token embedding and the (untied) head, ``non_embedding`` the rest (blocks and final
        norm), ``quantized`` the linears of :func:`quantized_names`. An :class:`MoEConfig`
        adds ``experts`` (all expert weights) and ``active_non_embedding`` (the non-embedding
        weights one token uses: ``top_k`` of the ``n_experts`` experts); dense shapes do
        not have these keys, so their records are unchanged.

    Example:
        >>> param_counts("30m")["non_embedding"]
        29745280
        >>> c = param_counts("micro_moe")
        >>> c["non_embedding"], c["active_non_embedding"], c["quantized"]
        (57760, 33184, 49152)
    """
    if isinstance(cfg, str):
        cfg = get_preset(cfg).model
    with torch.device("meta"):
        m = Transformer(cfg)
    q = set(quantized_names(m))
    total = emb = quant = experts = 0
    for n, p in m.named_parameters():
        total += p.numel()
        if n.startswith(("embed.", "head.")):
            emb += p.numel()
        if n in q:
            quant += p.numel()
        if ".experts." in n:
            experts += p.numel()
    out = {"total": total, "embedding": emb, "non_embedding": total - emb, "quantized": quant}
    if isinstance(cfg, MoEConfig):
        out["experts"] = experts
        out["active_non_embedding"] = (total - emb - experts
                                       + experts * cfg.top_k // cfg.n_experts)
    return out


def get_preset(name: str) -> Preset:
    """The preset called ``name`` (a key of :data:`PRESETS`).

    Raises:
        ValueError: no such preset (the message lists them).
    """
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    return PRESETS[name]


def markdown_table() -> str:
    """The presets as a markdown table (shapes, parameter counts, learning rates) and the
    command that trains each: the README's presets table, generated (``ecosim readme``).

    The paper-size commands follow the ECO paper's recipe (docs/theory.md §7): a global batch
    of 512 sequences of 512 tokens and 100 training tokens per non-embedding parameter; the
    CPU presets' commands train 20 tokens per non-embedding parameter (an MoE's active ones;
    steps rounded up to a multiple of 50), the least the Table 1 protocol of :mod:`ecosim.experiments.lm` accepts
    as a claim."""
    lines = ["| preset | d_model / layers / heads (head dim) | SwiGLU width | non-embedding "
             "params | quantized (block linears) | embedding + head | peak lr | seq x batch |",
             "|---|---|---|---|---|---|---|---|"]

    def m(n: int) -> str:
        return f"{n / 1e6:.2f}M" if n < 10e6 else f"{n / 1e6:.1f}M"

    cmds = []
    for name, p in PRESETS.items():
        c = param_counts(p.model)
        cfg = p.model
        active = c.get("active_non_embedding", c["non_embedding"])  # MoE: per token
        moe = (f" (MoE: {cfg.n_experts} experts, top {cfg.top_k}; {m(active)} active)"
               if isinstance(cfg, MoEConfig) else "")
        lines.append(f"| `{name}` | {cfg.d_model} / {cfg.n_layers} / {cfg.n_heads} "
                     f"({cfg.head_dim}) | {cfg.d_ff} | {m(c['non_embedding'])}{moe} | "
                     f"{m(c['quantized'])} | {m(c['embedding'])} | {p.lr:g} | "
                     f"{p.seq} x {p.batch} |")
        if p.seq < 512:  # a CPU preset
            steps = 50 * math.ceil(20 * active / (p.seq * p.batch * 50))
            cmds.append(f"python -m ecosim.torch.lm --preset {name} --method fp8_eco_sr "
                        f"--steps {steps} --results runs.jsonl")
        else:
            steps = math.ceil(100 * c["non_embedding"] / (512 * 512))
            accum = 512 // p.batch
            cmds.append(f"python -m ecosim.torch.lm --preset {name} --method fp8_eco_sr "
                        f"--device cuda --steps {steps} --global-batch 512 --grad-accum "
                        f"{accum} --out ck-{name} --results runs.jsonl")
    return "\n".join(lines + ["", "```sh", *cmds, "```"])
