"""Scaled quantization ``q(x) = s * Q(x / s)`` with per-tensor, row, column or group scales.

Training never rounds raw weights: a scale ``s`` maps each block onto the grid (docs/theory.md
§3). :class:`Quantizer` holds the choices (format, rounding, granularity, scale rule)
and maps arrays to dequantized values, or to real low-precision storage (:class:`Encoded`)
and back.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

from ._checks import check_bool, native
from .formats import Format, decode_bits, encode_bits, get, pack, unpack
from .rounding import MODES, quantize

__all__ = ["Quantizer", "Encoded", "SCALE_RULES", "POW2_RULES"]

SCALE_RULES = ("absmax", "absmax_pow2", "absmean")
POW2_RULES = ("floor", "ceil", "even")
_GRANULARITIES = ("tensor", "row", "column")


@dataclass(frozen=True)
class Encoded:
    """Codes in real low-precision storage plus their scales.

    Attributes:
        codes: one ``ml_dtypes``/int8 element per value for formats of 5 to 8 bits (FP8, FP6,
            int8), float16/bfloat16 for 16-bit formats, or bytes with two 4-bit (or four 2-bit)
            codes each for int4, FP4, int2 and ternary.
        scales: one per block, shaped to broadcast against the blocked values; float32/float64
            for absmax/absmean/fixed scales, ``float8_e8m0fnu`` (1 byte) for power-of-two ones.
        shape, dtype: of the original array.
        packed_bits: bits per packed code (0 when not packed).
    """

    codes: np.ndarray
    scales: np.ndarray
    shape: tuple
    dtype: np.dtype
    packed_bits: int = 0

    @property
    def nbytes(self) -> int:
        """Bytes actually held: codes plus scales."""
        return int(self.codes.nbytes + self.scales.nbytes)


@dataclass(frozen=True)
class Quantizer:
    """A scaled quantizer ``q(x) = fl(s * Q(x / s))``.

    Args:
        fmt: format or name (``"e4m3"``, ``"int4"``, ``"ternary"`` ...).
        mode: ``"rtn"`` or ``"sr"`` (see :func:`ecosim.quantize`).
        granularity: ``"tensor"`` (one scale), ``"row"`` (one per index of the leading axes,
            reducing over the last axis: per output channel of a ``(out, in)`` weight, what the
            ECO paper uses for FP8), ``"column"`` (reducing over all but the last axis), or an
            int ``g``: groups of ``g`` consecutive elements along the last axis, which ``g``
            must divide.
        scale: ``"absmax"``: ``s = max|x_block| / rho`` with ``rho`` the format's max (448 for
            E4M3, 7 for int4), recomputed on every call; ``"absmax_pow2"``: a power of two
            (an E8M0 scale, stored in one byte) chosen by ``pow2``; ``"absmean"``:
            ``s = mean|x_block|`` (BitNet b1.58's rule for ternary weights); or a float, a fixed
            scale (the fixed grid the theory assumes).
        pow2: rule for ``"absmax_pow2"``: ``"floor"``, the OCP MX rule
            ``2**(floor(log2 max|x|) - emax)`` (the top binade may clip); ``"ceil"``, the
            smallest power of two ``>= max|x| / rho`` (never clips); ``"even"``, the nearest
            power of two to ``max|x| / rho``, ties to the even exponent.
        nbits, saturate: passed to :func:`ecosim.quantize` (``saturate`` must be a bool).

    Edge cases: a block of zeros gets ``s = 1`` (codes 0, decoded exactly 0). A nonzero block
    whose ``"absmax"`` or ``"absmean"`` scale would fall below the smallest normal number
    ``tiny`` of the scale's dtype (``2**-126`` in float32, ``2**-1022`` in float64: a block of
    absmax below ``rho * tiny``) gets ``s = tiny``: dividing by it and multiplying by it are exact
    power-of-two scalings, the block's values lie below ``rho`` on the grid's scale (no
    clipping), and the output is finite and as exact as the grid allows (a scale that underflowed
    to 0 gave NaN; a subnormal one lost precision and could overflow the grid). Data-dependent
    scales refuse NaN/inf input with a ValueError (a scale from them is meaningless), while a
    fixed scale lets :func:`ecosim.quantize`'s rules apply (inf saturates, NaN propagates).
    Input arrays may have either byte order (results are native). The input is never
    modified. Dequantized values are ``s * code`` rounded once in the input's
    float type.

    Example:
        >>> import numpy as np
        >>> q = Quantizer("int4", granularity="row")
        >>> q(np.array([[0.7, -0.35], [7.0, 1.4]], np.float32))
        array([[ 0.7, -0.4],
               [ 7. ,  1. ]], dtype=float32)
    """

    fmt: Format | str
    mode: str = "rtn"
    granularity: str | int = "tensor"
    scale: str | float = "absmax"
    pow2: str = "floor"
    nbits: int = 32
    saturate: bool = True

    def __post_init__(self):
        object.__setattr__(self, "fmt", get(self.fmt))
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        g = self.granularity
        if isinstance(g, bool) or not (g in _GRANULARITIES or (isinstance(g, numbers.Integral)
                                                                 and g > 0)):
            raise ValueError(f"granularity must be one of {_GRANULARITIES} or a positive int "
                             f"group size, got {g!r}")
        s = self.scale
        if isinstance(s, str):
            if s not in SCALE_RULES:
                raise ValueError(f"scale must be one of {SCALE_RULES} or a positive float, "
                                 f"got {s!r}")
        elif isinstance(s, bool) or not isinstance(s, numbers.Real) or not (
                math.isfinite(s) and s > 0):
            raise ValueError(f"a fixed scale must be a positive finite float, got {s!r}")
        if self.pow2 not in POW2_RULES:
            raise ValueError(f"pow2 must be one of {POW2_RULES}, got {self.pow2!r}")
        object.__setattr__(self, "saturate", check_bool(self.saturate, "saturate"))

    # -- blocks and scales --------------------------------------------------------------------
    @property
    def fixed(self) -> bool:
        """True when the scale is a fixed number (a fixed grid)."""
        return not isinstance(self.scale, str)

    @property
    def rho(self) -> float:
        """The grid value that a block's absmax maps to."""
        return self.fmt.max

    def _blocked(self, x: np.ndarray) -> tuple[np.ndarray, tuple]:
        """``x`` reshaped so that each block is reduced over the returned axes."""
        g = self.granularity
        if g == "tensor" or x.ndim == 0:
            return x, tuple(range(x.ndim))
        if g == "row":
            return x, (x.ndim - 1,)
        if g == "column":
            return x, tuple(range(x.ndim - 1))
        n = x.shape[-1]
        if n % g:
            raise ValueError(f"group size {g} does not divide the last axis ({n}) of shape "
                             f"{x.shape}")
        return x.reshape(x.shape[:-1] + (n // g, g)), (x.ndim,)

    def scales(self, x: np.ndarray) -> np.ndarray:
        """The scale of each block of ``x`` (shaped to broadcast against the blocked array)."""
        x = _check_float(x)
        xb, axes = self._blocked(x)
        return self._scales(xb, axes)

    @staticmethod
    def _scales_dtype(xb: np.ndarray) -> np.dtype:
        return xb.dtype if xb.dtype in (np.float32, np.float64) else np.dtype(np.float32)

    def _scales(self, xb: np.ndarray, axes: tuple) -> np.ndarray:
        dt = self._scales_dtype(xb)
        if self.fixed:
            return np.full((1,) * xb.ndim, self.scale, dtype=dt)
        bad = ~np.isfinite(xb)
        if bad.any():
            raise ValueError(f"input has {int(bad.sum())} non-finite values; a data-dependent "
                             "scale is undefined (check gradients/updates for inf/NaN)")
        a = np.abs(xb.astype(dt, copy=False))
        tiny = np.finfo(dt).tiny
        if self.scale == "absmean":
            s = a.mean(axis=axes, keepdims=True, dtype=np.float64).astype(dt)
            zero = a.max(axis=axes, keepdims=True, initial=0.0) == 0
            s = np.maximum(s, tiny)  # an underflowing scale: the smallest normal
        else:
            amax = a.max(axis=axes, keepdims=True, initial=0.0)
            if self.scale == "absmax":
                s = np.maximum(amax / dt.type(self.rho), tiny)  # never 0 nor subnormal
            else:
                s = self._pow2(amax)
            zero = amax == 0
        return np.where(zero, dt.type(1.0), s).astype(dt)  # a block of zeros: s = 1

    def _pow2(self, amax: np.ndarray) -> np.ndarray:
        """Power-of-two scales (exact: frexp/ldexp), clamped to E8M0's range."""
        with np.errstate(divide="ignore"):
            if self.pow2 == "floor":  # OCP MX: 2**(floor(log2 amax) - emax)
                e = np.frexp(amax)[1].astype(np.int64) - 1 - self.fmt.emax
            elif self.pow2 == "ceil":
                m, e = np.frexp(amax / self.rho)  # amax/rho = m * 2**e, m in [0.5, 1)
                e = e.astype(np.int64) - (m == 0.5)
            else:
                e8 = get("e8m0").replace(ties="even", name="e8m0_even")
                r = np.maximum(amax.astype(np.float64) / self.rho, 2.0**-127)
                e = np.frexp(quantize(r, e8))[1].astype(np.int64) - 1
        e = np.clip(e, -127, 127)
        return np.ldexp(np.ones_like(amax), e).astype(amax.dtype)

    # -- the quantizer ------------------------------------------------------------------------
    def _codes(self, x, key, rbits, scales=None):
        x = _check_float(x)
        xb, axes = self._blocked(x)
        if scales is None:
            s = self._scales(xb, axes)
        else:
            s = np.asarray(scales).astype(self._scales_dtype(xb))
            want = tuple(1 if i in axes else n for i, n in enumerate(xb.shape))
            if self.fixed:
                want = (1,) * xb.ndim
            if s.shape != want:
                raise ValueError(f"scales must have shape {want} (one per block), got {s.shape}")
            if not (np.isfinite(s) & (s > 0)).all():
                raise ValueError("scales must be positive and finite")
        y = xb.astype(s.dtype, copy=False) / s  # half inputs: scaled in float32
        rb = None if rbits is None else np.asarray(rbits).reshape(xb.shape)
        if self.mode == "sr":
            c = quantize(y, self.fmt, "sr", rbits=rb, key=key, nbits=self.nbits,
                         saturate=self.saturate)
        else:
            if key is not None or rbits is not None:
                raise ValueError("key/rbits are for mode='sr'")
            c = quantize(y, self.fmt, "rtn", saturate=self.saturate)
        return x, c, s

    def __call__(self, x, *, key=None, rbits=None, scales=None) -> np.ndarray:
        """Dequantized values ``fl(s * Q(x / s))``, same shape and dtype as ``x``.

        Args:
            x: float array.
            key, rbits: randomness for ``mode="sr"`` (see :func:`ecosim.quantize`); bits are
                consumed in ``x``'s C order.
            scales: use these scales (e.g. ``q.scales(previous_weights)``, DQT's grid from the
                previous step) instead of computing them from ``x``; shaped as
                :meth:`scales` returns them.
        """
        x, c, s = self._codes(x, key, rbits, scales)
        return _dequantize(c, s, x.dtype).reshape(x.shape)

    def encode(self, x, *, key=None, rbits=None, scales=None) -> Encoded:
        """Quantize and store: codes in real low-precision storage, plus scales."""
        x, c, s = self._codes(x, key, rbits, scales)
        fmt = self.fmt
        if fmt.bits <= 4:
            codes = pack(encode_bits(c, fmt), 4 if fmt.bits > 2 else 2)
            packed = 4 if fmt.bits > 2 else 2
        else:
            from .formats import encode

            codes = encode(c, fmt)
            packed = 0
        if self.scale == "absmax_pow2":
            import ml_dtypes

            s = s.astype(ml_dtypes.float8_e8m0fnu)  # exact: powers of two in range
        return Encoded(codes=codes, scales=s, shape=x.shape, dtype=x.dtype, packed_bits=packed)

    def decode(self, enc: Encoded) -> np.ndarray:
        """Inverse of :meth:`encode`: exactly the values that :meth:`__call__` returns."""
        fmt = self.fmt
        n = int(np.prod(enc.shape, dtype=np.int64))
        if enc.packed_bits:
            raw = unpack(enc.codes, enc.packed_bits, n)
            vals = decode_bits(raw, fmt)
        else:
            from .formats import decode

            vals = decode(enc.codes, fmt, dtype=np.float64)
        dtype = np.dtype(enc.dtype).newbyteorder("=")
        work = dtype if dtype in (np.float32, np.float64) else np.dtype(np.float32)
        s = np.asarray(enc.scales).astype(work)
        blocked_shape = self._blocked(np.empty(enc.shape, np.bool_))[0].shape
        c = vals.reshape(blocked_shape).astype(work)
        return _dequantize(c, s, dtype).reshape(enc.shape)


def _dequantize(codes: np.ndarray, s: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``s * code`` rounded once in ``dtype``.

    Half types: the float64 product is exact (24 x 24 bits) and is rounded once, correctly,
    onto the half grid by :func:`quantize` (an ml_dtypes cast from float64 would go through
    float32 and could round twice); the cast of the on-grid result is then exact.
    """
    if dtype in (np.float32, np.float64):
        return codes * s
    prod = codes.astype(np.float64) * s
    half = "bfloat16" if dtype.name == "bfloat16" else "float16"
    return quantize(prod, half, saturate=False).astype(dtype)


def _check_float(x) -> np.ndarray:
    """``x`` as a float array in native byte order (a copy only when byte-swapped)."""
    if isinstance(x, (list, tuple)) and any(isinstance(v, np.ndarray) for v in x):
        raise TypeError("expected one floating-point array, got a "
                        f"{type(x).__name__} of arrays: quantize each array separately")
    x = np.asarray(x)
    if x.dtype.kind != "f" and x.dtype.name != "bfloat16":
        raise TypeError(f"expected a floating-point array, got dtype {x.dtype}")
    return native(x)
