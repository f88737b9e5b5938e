"""torch's shim for the block scale rules of :mod:`ecosim.core.scale_rules` (:data:`TORCH_SCALES`).

The rules (which scale a block takes, in which dtype, the clamps, E8M0's range, the zero block)
are written once there; this module supplies torch's spelling of the operations they use:
constants as :func:`ecosim.torch.numerics.scalar`'s cached 0-dim tensors on the operand's
device, NumPy's ``frexp`` and ``ldexp`` of powers of two read from and written as exponent bits
(same values as NumPy's, on every device), and :func:`ecosim.torch.quantize` for E8M0.
"""

from __future__ import annotations

import torch

from ..core.gridrules import ilog2
from ..core.rounding import SRC_F32 as _F32
from ..core.rounding import SRC_F64 as _F64
from .bitops import TORCH_WORDS
from .numerics import scalar
from .rounding import pow2_bits, quantize, to_work_bits

__all__ = ["TorchScales", "TORCH_SCALES"]


def _frexp(v: torch.Tensor, half: bool = True):
    """(mantissa == 0.5, exponent) of NumPy's ``frexp`` for finite ``v >= 0``, from its bits
    (the exponent alone when ``half`` is false).

    ``v = m * 2**e`` with ``m`` in [0.5, 1); zero gives ``(False, 0)``.
    """
    src = _F64 if v.dtype == torch.float64 else _F32
    S = src.mant
    a = to_work_bits(v).to(torch.int64) & ((1 << (63 if S == 52 else 31)) - 1)
    E = a >> S
    m = a & ((1 << S) - 1)
    lg = ilog2(m.clamp(min=1), TORCH_WORDS)  # floor(log2 m), exact
    e = torch.where(E > 0, E - src.bias + 1, lg + (src.emin - S) + 1)
    e = torch.where(a == 0, 0, e).reshape(v.shape)
    if not half:
        return e
    pow2 = torch.where(E > 0, m == 0, (m & (m - 1)) == 0) & (a != 0)
    return pow2.reshape(v.shape), e


class TorchScales:
    """The scale shim of torch (the protocol is in :mod:`ecosim.core.scale_rules`): constants are
    :func:`scalar`'s cached 0-dim tensors on the operand's device, ``frexp`` and ``pow2`` work
    on exponent bits."""

    @staticmethod
    def const(v: float, like: torch.Tensor) -> torch.Tensor:
        return scalar(v, like.dtype, like.device)

    maximum = staticmethod(torch.maximum)

    @staticmethod
    def ones_where_zero(amax: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return torch.where(amax == 0, scalar(1.0, amax.dtype, amax.device), s)

    @staticmethod
    def peak(x: torch.Tensor) -> float:
        return float(x.max()) if x.numel() else 0.0

    @staticmethod
    def count_nonfinite(x: torch.Tensor) -> int:
        return int((~torch.isfinite(x)).sum())

    @staticmethod
    def frexp(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        half, e = _frexp(v)
        return half.to(torch.int64), e

    @staticmethod
    def exponent(v: torch.Tensor) -> torch.Tensor:
        return _frexp(v, half=False)

    @staticmethod
    def f64(x: torch.Tensor) -> torch.Tensor:
        return x.to(torch.float64)

    @staticmethod
    def astype(x: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        return x.to(like.dtype)

    clip = staticmethod(torch.clamp)

    @staticmethod
    def pow2(e: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        src = _F64 if like.dtype == torch.float64 else _F32
        bits = pow2_bits(torch.ones_like(e), e, src)
        return (bits if src is _F64 else bits.to(torch.int32)).view(like.dtype)

    quantize = staticmethod(quantize)


#: torch's scale shim.
TORCH_SCALES = TorchScales()
