"""FP8 activations: the inputs of the quantized linear layers rounded to E4M3 (``--act-fp8``).

Part of :mod:`ecosim.torch.lm`. As in the paper's FP8 runs, every block-internal linear layer
(attention ``wq, wk, wv, wo``, MLP ``w_gate, w_up, w_down``) multiplies FP8 weights by FP8
activations: a forward pre-hook replaces the layer's input ``x`` by ``q(x)``, with
``q = Quantizer("e4m3", "rtn", granularity="row")`` applied to ``x`` viewed as (tokens,
features), i.e. one absmax scale per token. The gradient passes straight through (the
derivative of ``q`` is taken as 1). Embedding, head and norms are not touched.
"""

from __future__ import annotations

import torch
from torch import nn

from ..model import quantized_names
from ..quantizer import Quantizer

__all__ = ["ACT_QUANTIZER", "quantize_activations", "quantize_input"]

#: E4M3 with round-to-nearest and one absmax scale per row (a token's features)
ACT_QUANTIZER = Quantizer("e4m3", "rtn", granularity="row")


def quantize_input(x: torch.Tensor) -> torch.Tensor:
    """``x`` with its last axis rounded by :data:`ACT_QUANTIZER` (one scale per token), and
    a straight-through gradient. ``x`` itself is not modified.

    The forward value equals ``ACT_QUANTIZER(x.reshape(-1, x.shape[-1]))`` reshaped, bit for
    bit; the gradient with respect to ``x`` is the incoming gradient.
    """
    if x.ndim < 1 or not x.is_floating_point():
        raise ValueError(f"quantize_input needs a floating tensor with a feature axis, got "
                         f"{x.dtype} of shape {tuple(x.shape)}")
    xd = x.detach()
    xq = ACT_QUANTIZER(xd.reshape(-1, x.shape[-1])).reshape(x.shape)
    return xq + (x - xd)  # x - x.detach() is exactly 0: the value is xq, the gradient 1


def quantize_activations(model: nn.Module) -> list:
    """Register :func:`quantize_input` as a forward pre-hook on each block-internal linear
    layer of ``model`` (a :class:`~ecosim.torch.model.Transformer`); returns the hook
    handles (``handle.remove()`` undoes one)."""
    layers = {n.rsplit(".", 1)[0] for n in quantized_names(model)}
    handles = []
    for name, mod in model.named_modules():
        if name in layers:
            handles.append(mod.register_forward_pre_hook(
                lambda m, args: (quantize_input(args[0]), *args[1:])))
    if not handles:
        raise ValueError("the model has no block-internal linear layers to quantize")
    return handles
