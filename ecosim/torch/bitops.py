"""torch's word shim for the rules of :mod:`ecosim.core.bitops`.

torch has no usable unsigned 32-bit arithmetic (``torch.uint32`` lacks add and shifts in 2.x,
and its multiply is not vectorized), so the words are **int32 (or int64) tensors holding the
two's complement of the unsigned bits**: a logical right shift is the arithmetic one masked to
its low bits, a product keeps the low bits of the unsigned product (two's-complement
wrap-around, what torch's integer multiply does on every backend), and a constant is the signed
value with its bits. With this shim the shared rules give NumPy's bits on any device.

On the CPU the constants are 0-dim tensors of the words' dtype, cached per value
(:func:`ecosim.torch.numerics.scalar`): an op with a Python int wraps it in a new tensor and
converts it to the words' dtype on every call, which on a few thousand words costs more than
the op itself (same bits either way: the constant is the same signed word). Elsewhere they stay
Python ints (no fill kernel per constant).
"""

from __future__ import annotations

import numpy as np
import torch

from .numerics import scalar

__all__ = ["TorchWords", "TORCH_WORDS", "signed_word"]


def signed_word(v: int, bits: int = 32) -> int:
    """The signed ``bits``-bit integer with the low ``bits`` bits of ``v`` (two's complement)."""
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


_UNSIGNED = {torch.int32: np.uint32, torch.int64: np.uint64}


def _width(x: torch.Tensor) -> int:
    return 64 if x.dtype == torch.int64 else 32


def const(v: int, like: torch.Tensor):
    """The signed word ``v`` (already in range) as an operand of ops on ``like``: a cached 0-dim
    tensor of ``like``'s dtype on the CPU, the int elsewhere (see the module docstring)."""
    dev = like.device
    return scalar(v, like.dtype, dev) if dev.type == "cpu" else v


class TorchWords:
    """The word shim of torch: signed int32/int64 words holding unsigned bits."""

    @staticmethod
    def shr(x: torch.Tensor, s: int, out: torch.Tensor) -> None:
        torch.bitwise_right_shift(x, const(s, x), out=out)
        if s:
            out &= const((1 << (_width(x) - s)) - 1, out)

    @staticmethod
    def word(v: int, like: torch.Tensor):
        return const(signed_word(v, _width(like)), like)

    @staticmethod
    def add(x: torch.Tensor, v: int, out: torch.Tensor) -> None:
        torch.add(x, const(signed_word(v, _width(x)), x), out=out)

    @staticmethod
    def peak(x: torch.Tensor) -> int:
        return int(x.max()) if x.numel() else -1

    @staticmethod
    def fill(x: torch.Tensor, mask: torch.Tensor, v: int) -> None:
        x.masked_fill_(mask, signed_word(v, _width(x)))

    xp = torch

    @staticmethod
    def clip(x: torch.Tensor, lo, hi, out=None) -> torch.Tensor:
        return torch.clamp(x, lo, hi, out=out)

    int64, float64 = torch.int64, torch.float64
    floats = {torch.int32: torch.float32, torch.int64: float64}

    @staticmethod
    def cast(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return x.to(dtype)

    @staticmethod
    def float_const(v: float, like: torch.Tensor) -> torch.Tensor:
        return torch.tensor(v, dtype=like.dtype, device=like.device)

    @staticmethod
    def select(cond: torch.Tensor, a, b: torch.Tensor, out: torch.Tensor) -> None:
        torch.where(cond, a, b, out=out)

    @staticmethod
    def field(words: torch.Tensor, lo: int, n: int, out: torch.Tensor) -> None:
        if words.dtype == out.dtype and out.device.type == "cpu" and lo and out.numel() >= 4096:
            # NumPy's logical shift of the same memory as unsigned words: no mask pass after (on
            # a few thousand words or more, where a pass costs more than the NumPy views)
            ut = _UNSIGNED[out.dtype]
            np.right_shift(words.numpy().view(ut), ut(lo), out=out.numpy().view(ut))
            if lo + n < _width(out):
                out &= const((1 << n) - 1, out)
            return
        if words.dtype == out.dtype:
            torch.bitwise_right_shift(words, const(lo, words), out=out)
            if lo + n < _width(out) or lo:
                out &= const((1 << n) - 1, out)
            return
        w = words.to(torch.int64)
        if words.dtype == torch.int32:
            w &= 0xFFFFFFFF  # the unsigned word (w is a new tensor)
        w = w >> lo  # not in place: `w` may be `words` itself
        w &= (1 << n) - 1
        out.copy_(w)


#: torch's word shim.
TORCH_WORDS = TorchWords()
