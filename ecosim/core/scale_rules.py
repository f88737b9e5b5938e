"""Block scale rules written once for NumPy and torch: which scale a block of values gets.

A block's scale follows from its absolute maximum ``amax`` (and, for ``"absmean"``, its mean
magnitude), both already reduced by the backend in the scales' dtype (float32 or float64):

- ``"absmax"``: ``s = max(amax / rho, tiny)``, ``rho`` the format's max and ``tiny`` the
  smallest normal of the scales' dtype, both rounded to that dtype (a nonzero block never gets a
  scale of 0 or a subnormal one);
- ``"absmax_pow2"``: ``s = 2**e`` with ``e`` by the ``pow2`` rule (``"floor"``: the OCP MX
  ``floor(log2 amax) - emax``; ``"ceil"``: the smallest power of two ``>= amax / rho``;
  ``"even"``: ``amax / rho`` in float64 rounded to E8M0, a tie to the even E8M0 code), taken
  from exponent bits (frexp), never from logarithms, and clamped to E8M0's range
  ``[-127, 127]``;
- ``"absmean"``: the float64 mean of ``|x|`` rounded to the scales' dtype, at least ``tiny``;
  a mean that overflows that dtype is refused (:func:`ecosim.core.checks.scale_error`);
- a block of zeros gets ``s = 1`` under every rule; NaN or inf input (seen as a non-finite
  ``amax``) is refused, since a data-dependent scale from it is meaningless.

The rules take a *scale shim* ``ops`` (the pattern of :mod:`ecosim.core.bitops`' word shims) for
what the two libraries spell differently: :data:`NUMPY_SCALES` here and
``ecosim.torch.scales.TORCH_SCALES``. A shim has:

- ``const(v, like)``: the Python float ``v`` rounded to the dtype of ``like``, as an operand
  on its device (never written into);
- ``maximum(a, b)``: the elementwise maximum;
- ``ones_where_zero(amax, s)``: ``s`` in ``amax``'s dtype, with 1 where ``amax == 0``;
- ``peak(x)``: the largest value of the non-negative ``x`` as a Python float (NaN when one
  is NaN; 0.0 when ``x`` is empty);
- ``count_nonfinite(x)``: the number of NaN and inf in ``x``, a Python int;
- ``frexp(v)``: ``(half, e)`` for finite ``v >= 0`` written ``m * 2**e`` with ``m`` in
  ``[0.5, 1)``: int64 arrays, ``half`` 1 where ``m == 0.5`` (0 for ``v == 0``, whose ``e`` is 0);
  ``exponent(v)``: ``frexp(v)[1]`` alone;
- ``f64(x)``: ``x`` as float64; ``astype(x, like)``: ``x`` in ``like``'s dtype;
- ``clip(e, lo, hi)``: integers clamped; ``pow2(e, like)``: ``2.0**e`` exactly, in ``like``'s
  dtype (``e`` in E8M0's range);
- ``quantize(x, fmt)``: the backend's RTN :func:`~ecosim.quantize`.

How the maxima and means are reduced (fused row passes, NumPy's summation order in torch) stays
in the backends; used by :mod:`ecosim.core.quantizer` and :mod:`ecosim.torch.quantizer`.
"""

from __future__ import annotations

import math
from functools import lru_cache, partial

import numpy as np

from .checks import scale_error
from .formats import get
from .rounding import quantize as _np_quantize

__all__ = ["E8M0_RANGE", "NumpyScales", "NUMPY_SCALES", "refuse_nonfinite", "absmax_scales",
           "pow2_scales", "absmean_scales", "block_scales"]

#: The exponents an E8M0 scale can hold (its NaN code, 255, left out).
E8M0_RANGE = (-127, 127)


@lru_cache(maxsize=1)
def _e8m0_even():
    """E8M0 with ties to the even code (an odd exponent: the bias is 127): the grid of the
    ``pow2="even"`` rule."""
    return get("e8m0").replace(ties="even", name="e8m0_even")


def refuse_nonfinite(amax, xb, ops) -> None:
    """Raise :func:`~ecosim.core.checks.scale_error` when a block maximum ``amax`` of the blocked
    input ``xb`` is not finite (NaN and inf propagate through ``|x|`` and the maxima)."""
    if not math.isfinite(ops.peak(amax)):
        raise scale_error(ops.count_nonfinite(xb), xb.dtype)


def absmax_scales(amax, rho, tiny, ops):
    """``max(amax / rho, tiny)`` (1 for a block of zeros); ``rho`` and ``tiny`` are
    ``ops.const`` of ``amax``'s dtype (callers in a loop make them once)."""
    return ops.ones_where_zero(amax, ops.maximum(amax / rho, tiny))


def pow2_scales(amax, q, ops):
    """Power-of-two scales of finite block maxima ``amax`` under ``q.pow2`` (``q`` a
    :class:`~ecosim.core.quantizer.QuantizerConfig`), clamped to :data:`E8M0_RANGE`; 1 for a block
    of zeros."""
    if q.pow2 == "floor":  # OCP MX: 2**(floor(log2 amax) - emax)
        e = ops.exponent(amax) - (1 + q.fmt.emax)
    elif q.pow2 == "ceil":  # amax/rho = m * 2**e: 2**e, or 2**(e-1) when m == 0.5
        half, e = ops.frexp(amax / ops.const(q.rho, amax))
        e = e - half
    else:  # amax/rho in float64, to the nearest power of two (E8M0, ties to the even code)
        r = ops.f64(amax)
        r = ops.maximum(r / ops.const(q.rho, r), ops.const(2.0**-127, r))
        e = ops.exponent(ops.quantize(r, _e8m0_even())) - 1
    return ops.ones_where_zero(amax, ops.pow2(ops.clip(e, *E8M0_RANGE), amax))


def absmean_scales(mean, amax, tiny, ops):
    """Scales from the blocks' float64 mean magnitudes ``mean`` (``amax`` itself for an empty
    input): the mean rounded to ``amax``'s dtype, at least ``tiny`` (1 for a block of zeros).
    A mean that overflows the dtype (finite values whose sum does) is refused."""
    s = ops.astype(mean, amax)
    if not math.isfinite(ops.peak(s)):
        raise scale_error(0, s.dtype)
    return ops.ones_where_zero(amax, ops.maximum(s, tiny))


def block_scales(q, amax, rho, tiny, ops, mean=None):
    """The scales of blocks of finite maxima ``amax`` under ``q.scale`` (``"absmax"``,
    ``"absmax_pow2"``, or ``"absmean"`` with the blocks' ``mean``); ``rho``, ``tiny`` as
    :func:`absmax_scales` takes them."""
    if q.scale == "absmax":
        return absmax_scales(amax, rho, tiny, ops)
    if q.scale == "absmax_pow2":
        return pow2_scales(amax, q, ops)
    return absmean_scales(mean, amax, tiny, ops)


# -- NumPy's shim ------------------------------------------------------------------------------

_CONSTS: dict = {}  # (value, dtype) -> read-only 0-d array


class NumpyScales:
    """The scale shim of NumPy (see the module docstring). Constants are read-only 0-d arrays,
    remembered by value and dtype: cheaper ufunc operands than NumPy scalars."""

    @staticmethod
    def const(v: float, like: np.ndarray) -> np.ndarray:
        key = (v, like.dtype)
        c = _CONSTS.get(key)
        if c is None:
            if len(_CONSTS) >= 256:
                _CONSTS.clear()
            c = _CONSTS[key] = np.array(v, like.dtype)
            c.flags.writeable = False
        return c

    maximum = staticmethod(np.maximum)

    @staticmethod
    def ones_where_zero(amax: np.ndarray, s: np.ndarray) -> np.ndarray:
        dt = amax.dtype
        if np.count_nonzero(amax) == amax.size:  # no block of zeros (amax.all(), faster)
            return s.astype(dt, copy=False)
        return np.where(amax == 0, dt.type(1.0), s).astype(dt)

    @staticmethod
    def peak(x: np.ndarray) -> float:
        return np.maximum.reduce(x, axis=None, initial=0.0)

    @staticmethod
    def count_nonfinite(x: np.ndarray) -> int:
        return int((~np.isfinite(x)).sum())

    @staticmethod
    def frexp(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        m, e = np.frexp(v)
        return (m == 0.5).astype(np.int64), e.astype(np.int64)

    @staticmethod
    def exponent(v: np.ndarray) -> np.ndarray:
        return np.frexp(v)[1].astype(np.int64)

    f64 = staticmethod(partial(np.asarray, dtype=np.float64))

    @staticmethod
    def astype(x: np.ndarray, like: np.ndarray) -> np.ndarray:
        return x.astype(like.dtype)

    clip = staticmethod(np.clip)

    @staticmethod
    def pow2(e: np.ndarray, like: np.ndarray) -> np.ndarray:
        return np.ldexp(np.ones_like(like), e).astype(like.dtype)

    quantize = staticmethod(_np_quantize)


#: NumPy's scale shim.
NUMPY_SCALES = NumpyScales()
