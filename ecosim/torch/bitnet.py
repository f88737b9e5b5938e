"""BitNet b1.58 for torch: linear layers whose forward uses ternary weights and 8-bit activations.

Mirror of :class:`ecosim.problems.QuantizedForward` with :func:`ecosim.problems.bitnet_quantizers`
(Ma et al., "The Era of 1-bit LLMs", arXiv 2402.17764): the weights stay FP32 master weights
under an ordinary optimizer (AdamW), and the forward of each :class:`BitLinear` computes

    y = Qa(x) Qw(W)^T (+ b)

with ``Qw`` ternary with one absmean scale per tensor (round to nearest) and ``Qa`` INT8 with
one absmax scale per token (the rows of ``x`` viewed as (tokens, features), round to nearest).
The backward is the straight-through estimator: both quantizers count as the identity, so
``dL/dW = dy^T Qa(x)`` goes to the master weights and ``dL/dx = dy Qw(W)``. The forward values
equal the NumPy quantizers' bit for bit (they are :class:`ecosim.torch.Quantizer`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .quantizer import Quantizer

__all__ = ["ACT_QUANTIZER", "WEIGHT_QUANTIZER", "BitLinear", "bitnet_linears", "ste"]

#: BitNet b1.58's weights: ternary, one absmean scale per tensor, round to nearest
WEIGHT_QUANTIZER = Quantizer("ternary", "rtn", granularity="tensor", scale="absmean")
#: BitNet b1.58's activations: INT8, one absmax scale per row (token), round to nearest
ACT_QUANTIZER = Quantizer("int8", "rtn", granularity="row", scale="absmax")


def ste(q: Quantizer, x: torch.Tensor, *, rows: bool = False) -> torch.Tensor:
    """``q(x)`` with a straight-through gradient (``x`` itself is not modified).

    Args:
        q: a round-to-nearest quantizer.
        x: a floating tensor.
        rows: quantize ``x`` viewed as ``(-1, x.shape[-1])`` (one row per token).
    """
    if not x.is_floating_point() or x.ndim < 1:
        raise ValueError(f"ste needs a floating tensor with at least one axis, got {x.dtype} "
                         f"of shape {tuple(x.shape)}")
    xd = x.detach()
    xq = q(xd.reshape(-1, x.shape[-1]) if rows else xd).reshape(x.shape)
    return xq + (x - xd)  # x - x.detach() is exactly 0: the value is xq, the gradient 1


class BitLinear(nn.Linear):
    """``nn.Linear`` with BitNet b1.58's forward: ``ste(Qa, x) ste(Qw, W)^T + b``.

    The parameters are the FP32 master weights (same names as ``nn.Linear``'s); train them
    with any optimizer. :meth:`from_linear` takes an existing layer's parameters (the same
    ``nn.Parameter`` objects, so an optimizer built over the model keeps working).

    Example:
        >>> import torch
        >>> lin = BitLinear(4, 2, bias=False)
        >>> with torch.no_grad():
        ...     _ = lin.weight.copy_(torch.tensor([[0.4, -0.1, 0.0, 0.3], [0.2, 0.2, -0.4, 0.1]]))
        >>> lin.quantized_weight()         # absmean 0.2125: codes rounded to nearest
        tensor([[ 0.2125,  0.0000,  0.0000,  0.2125],
                [ 0.2125,  0.2125, -0.2125,  0.0000]])
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(ste(ACT_QUANTIZER, x, rows=True), ste(WEIGHT_QUANTIZER, self.weight),
                        self.bias)

    def quantized_weight(self) -> torch.Tensor:
        """The ternary weights the forward multiplies with (no gradient)."""
        return WEIGHT_QUANTIZER(self.weight.detach())

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> "BitLinear":
        """A BitLinear holding ``linear``'s own weight and bias parameters."""
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"from_linear takes an nn.Linear, got {type(linear).__name__}")
        out = cls(linear.in_features, linear.out_features, bias=False, device="meta")
        out.weight = linear.weight
        out.bias = linear.bias
        return out


def bitnet_linears(model: nn.Module, names) -> list[str]:
    """Replace the ``nn.Linear`` modules of ``model`` at the module paths ``names`` by
    :class:`BitLinear` (in place, the same parameters); returns the paths replaced."""
    names = list(names)
    mods = dict(model.named_modules())
    for name in names:
        mod = mods.get(name)
        if not isinstance(mod, nn.Linear) or not name:
            raise ValueError(f"{name!r} is not an nn.Linear submodule of the model")
        parent_name, _, attr = name.rpartition(".")
        setattr(mods[parent_name], attr, BitLinear.from_linear(mod))
    return names
