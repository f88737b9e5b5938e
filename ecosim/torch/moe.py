"""A sparse mixture-of-experts feed-forward layer: top-k routing over SwiGLU experts.

Used by :class:`ecosim.torch.model.Transformer` for MoE presets (:class:`~ecosim.torch.model.
MoEConfig`), in place of a block's dense SwiGLU MLP, as in the sparse MoE of the ECO paper's
Figure 3 (there a 2.1B SMoE on LM1B; only the expert linear layers are quantized, see
:func:`ecosim.torch.model.quantized_names`).

Routing, per token ``x`` (a row of the flattened ``(tokens, d_model)`` input):

* router logits ``z = W_r x`` (an unbiased ``nn.Linear(d_model, n_experts)``, FP32);
* the chosen experts are the ``top_k`` largest logits, ties broken by the lower expert index
  (a stable descending sort, so the choice is a function of the logits alone);
* their weights are a softmax over the chosen ``top_k`` logits only (Mixtral's rule), so they
  are positive and sum to 1 whatever ``top_k`` is;
* the output is ``sum_j w_j expert_{e_j}(x)``, summed in ascending expert index.

Each expert runs once per forward on the tokens that chose it (in token order); an expert
nobody chose runs on zero tokens, so every expert weight has a gradient (zeros) at every
step, and the optimizers see the same parameters every step.

Load balance: :func:`balance_loss` is the Switch Transformer's auxiliary loss
``n_experts * sum_e f_e P_e`` (``f_e``: the fraction of the ``tokens * top_k`` assignments that
went to expert ``e``; ``P_e``: the mean over tokens of the full softmax over all experts); it
is 1 when the load is uniform. The model adds ``aux_coef`` times its mean over the blocks to
the training loss (``MoEConfig.aux_coef``: 0, off, by default; 0.01 in the ``micro_moe``
preset, so its training loss is the cross-entropy plus 0.01 x the balance loss, and its
validation loss the cross-entropy alone). :attr:`MoE.counts` keeps the
tokens each expert received in the last forward (no gradient), to watch the load.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

__all__ = ["MoE", "balance_loss", "route"]


def route(logits: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``top_k`` experts of each row of ``logits`` and their weights.

    Args:
        logits: router scores, shape ``(tokens, n_experts)``.
        top_k: experts per token, ``1 <= top_k <= n_experts``.

    Returns:
        ``(experts, weights)``, both ``(tokens, top_k)``: expert indices by decreasing score
        (equal scores: the lower index first) and the softmax of their scores (each row
        sums to 1; differentiable with respect to ``logits``).

    Example:
        >>> e, w = route(torch.tensor([[0.0, 2.0, 2.0, 1.0]]), 2)
        >>> e.tolist(), w.tolist()
        ([[1, 2]], [[0.5, 0.5]])
    """
    if logits.ndim != 2:
        raise ValueError(f"route needs logits of shape (tokens, n_experts), got "
                         f"{tuple(logits.shape)}")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= \
            logits.shape[1]:
        raise ValueError(f"top_k must be an int in [1, {logits.shape[1]}], got {top_k!r}")
    order = torch.sort(logits.detach(), dim=-1, descending=True, stable=True).indices
    experts = order[:, :top_k]
    weights = torch.softmax(logits.gather(1, experts), dim=-1)
    return experts, weights


def balance_loss(logits: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
    """The Switch Transformer's load-balancing loss ``E * sum_e f_e P_e`` (1 when uniform).

    Args:
        logits: router scores ``(tokens, E)``.
        experts: the chosen experts ``(tokens, top_k)`` (:func:`route`).

    Example:
        >>> z = torch.zeros(4, 2)
        >>> balance_loss(z, torch.tensor([[0], [1], [0], [1]])).item()
        1.0
    """
    n_experts = logits.shape[1]
    f = torch.bincount(experts.reshape(-1), minlength=n_experts).to(logits.dtype)
    f = f / experts.numel()
    p = torch.softmax(logits.float(), dim=-1).mean(0)
    return n_experts * (f * p).sum()


class MoE(nn.Module):
    """Top-k routed experts (see the module docstring).

    Args:
        d_model: input and output width.
        n_experts: number of experts.
        top_k: experts per token.
        expert: builds one expert (a module mapping ``(n, d_model)`` to ``(n, d_model)``),
            called ``n_experts`` times.

    Attributes:
        router: ``nn.Linear(d_model, n_experts, bias=False)``.
        experts: the experts (``nn.ModuleList``).
        aux: the last forward's :func:`balance_loss` (a graph tensor), or None.
        counts: tokens routed to each expert in the last forward (int64, no gradient).
    """

    def __init__(self, d_model: int, n_experts: int, top_k: int,
                 expert: Callable[[], nn.Module]):
        super().__init__()
        for name, v in (("d_model", d_model), ("n_experts", n_experts), ("top_k", top_k)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        if top_k > n_experts:
            raise ValueError(f"top_k={top_k} must not exceed n_experts={n_experts}")
        self.top_k = top_k
        self.router = nn.Linear(d_model, n_experts, bias=False)
        self.experts = nn.ModuleList(expert() for _ in range(n_experts))
        self.aux: torch.Tensor | None = None
        self.counts: torch.Tensor | None = None

    def forward(self, x: torch.Tensor, aux: bool = False) -> torch.Tensor:
        """``sum_j w_j expert_{e_j}(x)`` per token (shape of ``x``); with ``aux``, also keeps
        the balance loss in :attr:`aux`."""
        flat = x.reshape(-1, x.shape[-1])
        logits = self.router(flat)
        experts, weights = route(logits, self.top_k)
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            # each token picks an expert at most once: `tok` is unique and ascending
            tok, slot = (experts == e).nonzero(as_tuple=True)
            y = expert(flat[tok]) * weights[tok, slot].unsqueeze(-1)
            out = out.index_add(0, tok, y.to(out.dtype))
        self.counts = torch.bincount(experts.reshape(-1).detach(),
                                     minlength=len(self.experts))
        self.aux = balance_loss(logits, experts) if aux else None
        return out.reshape(x.shape)
