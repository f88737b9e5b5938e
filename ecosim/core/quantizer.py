"""Scaled quantization ``q(x) = s * Q(x / s)`` with per-tensor, row, column or group scales.

Training never rounds raw weights: a scale ``s`` maps each block onto the grid (docs/theory.md
§3). :class:`Quantizer` holds the choices (format, rounding, granularity, scale rule)
and maps arrays to dequantized values, or to real low-precision storage (:class:`Encoded`)
and back.
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from .checks import native, scale_error
from .formats import Format, get
from .rounding import (CHUNK, Rounding, chunk_bits, round_kernel, prepare, random_source,
                       quantize)
from .quantizer_rows import code_pending, fused_rows
from .scale_rules import (NUMPY_SCALES, absmax_scales, absmean_scales, pow2_scales,
                          refuse_nonfinite)
from .rounding_codes import code_kernel, code_values, decode_table, pack_codes

__all__ = ["Quantizer", "QuantizerConfig", "Encoded", "SCALE_RULES", "POW2_RULES"]

SCALE_RULES = ("absmax", "absmax_pow2", "absmean")
POW2_RULES = ("floor", "ceil", "even")
_GRANULARITIES = ("tensor", "row", "column")
_MEMO_MAX = 64  # shapes and dtypes remembered per Quantizer (cleared when full)


class _ShapeInfo(NamedTuple):
    """What one call of a :class:`Quantizer` derives from the input's shape and dtype alone."""

    blocked: tuple  # shape and reduced axes of the blocked array (Quantizer._blocked)
    axes: tuple
    dt: np.dtype  # the scales' (and the kernel's) dtype, and the rounding plan in it
    plan: object
    R: int  # the flat array as R rows of C, scaled per "row", "col" or "one" (_layout)
    C: int
    kind: str
    # np.finfo(dt).tiny and the format's max (rho) in dt, as read-only 0-d arrays (cheaper
    # operands than NumPy scalars); Format.max is computed on every access
    tiny: np.ndarray
    rho: np.ndarray


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
class QuantizerConfig:
    """The arguments of a scaled quantizer, checked, and what follows from them alone.

    The fields, their checks (the same ValueErrors) and the derived properties are shared by
    :class:`Quantizer` and :class:`ecosim.torch.Quantizer`, which add the array and tensor
    computations; the arguments are documented at :class:`Quantizer`. ``fmt`` is held as a
    :class:`~ecosim.core.formats.Format` (a name is looked up) and ``saturate`` as a bool;
    :attr:`rounding` is the checked :class:`~ecosim.core.rounding_modes.Rounding` of ``mode``,
    ``nbits``, ``sr_rule`` and ``saturate`` (``mode`` may be a Rounding itself).

    Example:
        >>> QuantizerConfig("int4", scale=0.5).fixed, QuantizerConfig("e4m3").rho
        (True, 448.0)
    """

    fmt: Format | str
    mode: str = "rtn"
    granularity: str | int = "tensor"
    scale: str | float = "absmax"
    pow2: str = "floor"
    nbits: int = 32
    saturate: bool = True
    sr_rule: str = "floor"
    rounding: Rounding = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        # fields normalised once, as the record is built: the format looked up, the rounding
        # checked (and a Rounding given as mode spread into its fields)
        object.__setattr__(self, "fmt", get(self.fmt))
        r = Rounding.of(self.mode, self.nbits, self.sr_rule, self.saturate)
        object.__setattr__(self, "rounding", r)
        if isinstance(self.mode, Rounding):
            for name in ("mode", "nbits", "sr_rule"):
                object.__setattr__(self, name, getattr(r, name))
        object.__setattr__(self, "saturate", r.saturate)
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

    @property
    def fixed(self) -> bool:
        """True when the scale is a fixed number (a fixed grid)."""
        return not isinstance(self.scale, str)

    @property
    def rho(self) -> float:
        """The grid value that a block's absmax maps to."""
        return self.fmt.max


@dataclass(frozen=True)
class Quantizer(QuantizerConfig):
    """A scaled quantizer ``q(x) = fl(s * Q(x / s))``.

    Args:
        fmt: format or name (``"e4m3"``, ``"int4"``, ``"ternary"`` ...).
        mode: a name of :data:`~ecosim.core.rounding_modes.MODES` (see :func:`ecosim.quantize`),
            or a :class:`~ecosim.core.rounding_modes.Rounding` (which then carries ``nbits``,
            ``saturate`` and ``sr_rule``).
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
            power of two to ``max|x| / rho``, ties to the even E8M0 code (with E8M0's bias
            of 127 that is an odd exponent: ``0.75 rho`` gives 0.5, ``3 rho`` gives 2).
        nbits, saturate, sr_rule: passed to :func:`ecosim.quantize` (``saturate`` must be a
            bool): SR with the low ``nbits`` of each random word, counting
            ``floor(p * 2**nbits)`` (``sr_rule="floor"``) or ``p * 2**nbits`` rounded to
            nearest (``"nearest"``) rounding-up words.

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

    # -- blocks and scales --------------------------------------------------------------------
    def _blocked(self, x: np.ndarray) -> tuple[np.ndarray, tuple]:
        """``x`` reshaped so that each block is reduced over the returned axes."""
        g = self.granularity
        if g == "tensor" or x.ndim == 0:
            return x, tuple(range(x.ndim))
        if g == "row":
            return x, (x.ndim - 1,)
        if g == "column":
            if x.ndim == 1 and not self.fixed:  # each element its own block: no rounding
                raise ValueError(f"granularity='column' needs an array of 2 or more dimensions "
                                 f"(one scale per column), got shape {tuple(x.shape)}; use "
                                 "'tensor' or 'row' for a 1-D array such as a bias")
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

    def _scales(self, xb: np.ndarray, axes: tuple, dt=None, tiny=None, rho=None) -> np.ndarray:
        """Scales of the blocks of ``xb`` (reduced over ``axes``) in the scales' dtype ``dt``
        (``dt``, ``tiny`` and ``rho``, as :meth:`_absmax_scales` takes them, passed by callers
        that know them)."""
        dt = self._scales_dtype(xb) if dt is None else dt
        if self.fixed:
            return np.full((1,) * xb.ndim, self.scale, dtype=dt)
        a = np.abs(xb.astype(dt, copy=False))
        amax = np.maximum.reduce(a, axis=axes, keepdims=True, initial=0.0)  # what a.max calls
        refuse_nonfinite(amax, xb, NUMPY_SCALES)
        if self.scale != "absmean":
            return self._absmax_scales(amax, dt, tiny, rho)
        with np.errstate(over="ignore"):  # finite values whose sum overflows: refused
            mean = a.mean(axis=axes, keepdims=True, dtype=np.float64) if a.size else amax
        return absmean_scales(mean, amax, np.finfo(dt).tiny, NUMPY_SCALES)

    def _absmax_scales(self, amax: np.ndarray, dt: np.dtype, tiny=None, rho=None) -> np.ndarray:
        """Scales of blocks of absolute maximum ``amax`` (finite) under ``absmax``/``absmax_pow2``
        (:mod:`ecosim.core.scale_rules`; ``tiny``: ``np.finfo(dt).tiny``, ``rho``: ``self.rho`` in
        ``dt``, passed as 0-d arrays by callers in a loop)."""
        if self.scale == "absmax":
            return absmax_scales(amax, _constant(self.rho, dt) if rho is None else rho,
                                 np.finfo(dt).tiny if tiny is None else tiny, NUMPY_SCALES)
        return pow2_scales(amax, self, NUMPY_SCALES)

    # -- the quantizer ------------------------------------------------------------------------
    # One pass over the array in cache-sized chunks of whole blocks: for row and group scales
    # each chunk's block maxima and scales are computed while the chunk is in cache (a non-finite
    # value shows as a non-finite maximum), then the chunk is divided by its scales, rounded by
    # the kernel of ecosim.core.rounding and multiplied back (or turned into codes; RTN on
    # float32/64 in ecosim.core.quantizer_rows). Tensor, column, absmean scales, blocks over a
    # chunk: _scales.

    def _layout(self, shape: tuple) -> tuple[int, int, str]:
        """The flat C-order array as ``R`` rows of ``C``, scaled per row, column or once."""
        n = math.prod(shape)
        g = self.granularity
        if self.fixed or g == "tensor" or len(shape) == 0:
            return 1, n, "one"
        c = g if isinstance(g, numbers.Integral) else shape[-1]
        return (n // c if c else math.prod(shape[:-1])), c, ("col" if g == "column" else "row")

    def _given_scales(self, scales, xb: np.ndarray, axes: tuple) -> np.ndarray:
        s = np.asarray(scales).astype(self._scales_dtype(xb))
        want = tuple(1 if i in axes else n for i, n in enumerate(xb.shape))
        if self.fixed:
            want = (1,) * xb.ndim
        if s.shape != want:
            raise ValueError(f"scales must have shape {want} (one per block), got {s.shape}")
        if not (np.isfinite(s) & (s > 0)).all():
            raise ValueError("scales must be positive and finite")
        return s

    @functools.cached_property
    def _memo(self) -> dict:
        """``{(shape, dtype): _ShapeInfo}`` (a cache in the instance, not a field: equality,
        hashing and ``repr`` skip it)."""
        return {}

    def _remember(self, x: np.ndarray, info: _ShapeInfo) -> None:
        """Keep ``info`` in this quantizer's memo of shapes and dtypes (bounded)."""
        memo = self._memo
        if len(memo) >= _MEMO_MAX:
            memo.clear()
        memo[(x.shape, x.dtype)] = info

    def __getstate__(self):
        """The fields only (the memo of shapes is not pickled nor copied)."""
        return {k: v for k, v in self.__dict__.items() if k != "_memo"}

    def _run(self, x, key, rbits, scales, codes_out: bool):
        """``(x, blocked values or flat codes, scales)`` of one chunked pass (see above)."""
        x = _check_float(x)
        info = self._memo.get((x.shape, x.dtype))  # what follows from x's shape and dtype alone
        if info is None:  # checks and layout, once per shape and dtype
            xb, axes = self._blocked(x)
        else:  # they passed before for this shape and dtype
            xb, axes = x.reshape(info.blocked), info.axes
        s = None if scales is None else self._given_scales(scales, xb, axes)
        sr = self.rounding.stochastic
        if not sr and (key is not None or rbits is not None):
            raise ValueError("key/rbits are for mode='sr'")
        if info is None:
            dt = self._scales_dtype(xb)
            plan = prepare(self.fmt, dt, self.rounding)
            info = _ShapeInfo(xb.shape, axes, dt, plan, *self._layout(x.shape),
                              *(_constant(v, dt) for v in (np.finfo(dt).tiny, self.rho)))
            self._remember(x, info)
        dt, plan, R, C, kind = info.dt, info.plan, info.R, info.C, info.kind
        bits_src = None
        if sr:
            rb = None if rbits is None else np.asarray(rbits).reshape(xb.shape)
            bits_src = random_source(xb.shape, rb, key)
        n = R * C
        if not codes_out and n <= CHUNK:  # one chunk: whole-array steps cost fewer calls
            xw = xb.astype(dt, copy=False)
            if s is None:
                s = self._scales(xb, info.axes, dt, info.tiny, info.rho)
            y = (xw / s).reshape(-1)
            c = np.empty(n, dt)
            round_kernel(plan, y, c, chunk_bits(bits_src, 0, n))
            c = c.reshape(xb.shape)
            if x.dtype == dt:  # s * code rounded once in dt, as _dequantize does
                return x, np.multiply(c, s, out=c), s
            return x, _dequantize(c, s, x.dtype), s
        fuse = (s is None and kind == "row" and self.scale in ("absmax", "absmax_pow2")
                and 0 < C <= CHUNK)
        res = cbuf = None
        if codes_out:
            res = np.empty(n + 3, self.fmt.code_dtype)  # room to pack 2- and 4-bit codes
            res[n:] = 0
        if fuse:
            s = np.empty(tuple(1 if i in axes else m for i, m in enumerate(xb.shape)), dt)
            if self.rounding.mode == "rtn" and x.dtype == dt:  # ecosim.core.quantizer_rows
                return self._fused_rtn(x, xb, s, plan, info, res)
        elif s is None:
            s = self._scales(xb, axes)
        s2 = s.reshape((R, 1) if kind == "row" else (1, C) if kind == "col" else (1, 1))
        X2 = np.ascontiguousarray(xb).reshape(R, C)
        half = x.dtype not in (np.float32, np.float64)
        m = min(n, CHUNK)
        ybuf = np.empty(m, dt)
        if not codes_out:
            res, cbuf = np.empty(n, dt), np.empty(m, dt)
        R2 = res[:n].reshape(R, C)
        pending = []  # candidates of the code kernel, coded once at the end
        # No |y| above y_hi rounds past max: the kernels skip that test (their no_over).
        y_hi = np.array(plan.hi, plan.src.udtype).view(dt)[()] if plan.fmt.is_float else None
        no_over = False
        if fuse:
            abuf = np.empty(m, dt)
            amax = np.empty((R, 1), dt)
        for g0, g1 in _groups(R, C, fuse):
            if fuse:  # the group's scales (its rows stay in cache for the pass below)
                for i0, i1, _, _ in _chunks(g1 - g0, C):
                    xc = X2[g0 + i0:g0 + i1]
                    if half:
                        xc = xc.astype(dt)
                    np.abs(xc, out=abuf[:xc.size].reshape(xc.shape)).max(
                        axis=1, keepdims=True, out=amax[g0 + i0:g0 + i1])
                am = amax[g0:g1]
                refuse_nonfinite(am, xb, NUMPY_SCALES)
                sg = s2[g0:g1] = self._absmax_scales(am, dt, info.tiny, info.rho)
                # max |y| of a row is amax / s exactly (the division is monotone)
                no_over = y_hi is not None and bool((am / sg).max() <= y_hi)
            for i0, i1, j0, j1 in _chunks(g1 - g0, C):
                i0, i1 = i0 + g0, i1 + g0
                xc = X2[i0:i1, j0:j1]
                if half:
                    xc = xc.astype(dt)
                shape2 = xc.shape
                lo, k = i0 * C + j0, xc.size
                sc = s2[i0:i1] if kind == "row" else s2[:, j0:j1] if kind == "col" else s2
                y = np.divide(xc, sc, out=ybuf[:k].reshape(shape2)).reshape(-1)
                r = chunk_bits(bits_src, lo, lo + k)
                if codes_out:
                    p = code_kernel(plan, y, res[lo:lo + k], r, no_over=no_over, defer=True)
                    if p is not None:
                        pending.append((p[0] + lo, p[1], p[2]))
                elif half:
                    round_kernel(plan, y, res[lo:lo + k], r, no_over=no_over)
                else:
                    c = cbuf[:k]
                    round_kernel(plan, y, c, r, no_over=no_over)
                    np.multiply(c.reshape(shape2), sc, out=R2[i0:i1, j0:j1])
        if codes_out:
            code_pending(plan, res, pending)
            return x, res, s
        out = res.reshape(xb.shape)
        if half:
            out = _dequantize(out, s, x.dtype)
        return x, out, s

    def _fused_rtn(self, x, xb, s, plan, info, res):
        """:meth:`_run`'s result by :func:`ecosim.core.quantizer_rows.fused_rows` (RTN, absmax
        scales per row or group, float32/float64 input): ``s`` its empty scales, ``res`` its
        codes."""
        got = fused_rows(plan, np.ascontiguousarray(xb).reshape(info.R, info.C),
                         s.reshape(info.R, 1), self._absmax_scales, info.tiny, res)
        if got is None:
            raise _nonfinite(xb)
        if res is None:
            return x, got[0].reshape(xb.shape), s
        code_pending(plan, res, got[1])
        return x, res, s

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
        x, out, _ = self._run(x, key, rbits, scales, codes_out=False)
        return out.reshape(x.shape)

    def encode(self, x, *, key=None, rbits=None, scales=None) -> Encoded:
        """Quantize and store: codes in real low-precision storage, plus scales.

        The codes come from the rounding kernel's bit arithmetic in the same chunked pass
        (:func:`ecosim.core.rounding_codes.code_kernel`); they equal
        :func:`ecosim.core.formats.encode` of the values :meth:`__call__` rounds to, bit for bit.
        """
        x, res, s = self._run(x, key, rbits, scales, codes_out=True)
        fmt = self.fmt
        n = x.size
        xb_shape = self._blocked(np.empty(x.shape, np.bool_))[0].shape
        if fmt.bits <= 4:
            packed = 4 if fmt.bits > 2 else 2
            codes = pack_codes(res, packed, n)
        else:
            packed = 0
            codes = res[:n].reshape(xb_shape)
            dt = fmt.dtype
            if dt is not None:
                codes = codes.view(dt) if dt.itemsize == codes.itemsize else codes.astype(dt)
        if self.scale == "absmax_pow2":
            import ml_dtypes

            s = s.astype(ml_dtypes.float8_e8m0fnu)  # exact: powers of two in range
        return Encoded(codes=codes, scales=s, shape=x.shape, dtype=x.dtype, packed_bits=packed)

    def decode(self, enc: Encoded) -> np.ndarray:
        """Inverse of :meth:`encode`: exactly the values that :meth:`__call__` returns.

        Codes are decoded through a table of every code's value (256 entries indexed by the
        byte; a byte of packed 4- or 2-bit codes indexes a table of its 2 or 4 values) and
        multiplied by their scales chunk by chunk.
        """
        fmt = self.fmt
        n = math.prod(enc.shape)
        dtype = np.dtype(enc.dtype).newbyteorder("=")
        work = dtype if dtype in (np.float32, np.float64) else np.dtype(np.float32)
        s = np.asarray(enc.scales).astype(work)
        blocked_shape = self._blocked(np.empty(enc.shape, np.bool_))[0].shape
        R, C, kind = self._layout(tuple(enc.shape))
        idx = None
        if enc.packed_bits:
            raw = np.asarray(enc.codes, np.uint8).reshape(-1)
            vals = np.take(decode_table(fmt, work, enc.packed_bits), raw).view(work)[:n]
        else:
            stored = np.asarray(enc.codes)
            if fmt.dtype is not None and stored.dtype == fmt.dtype:
                idx = stored.view(np.dtype(f"u{stored.dtype.itemsize}"))
            elif stored.dtype.kind == "u":
                idx = stored
            else:
                raise TypeError(f"expected {fmt.name} storage ({fmt.dtype}) or unsigned raw "
                                f"codes, got {stored.dtype}")
            idx = idx.reshape(-1)
            if idx.dtype.itemsize > 2:  # formats of more than 16 bits: no table
                vals = code_values(idx, fmt, work)
                idx = None
            else:
                vals = np.empty(n, work)
        if dtype != work:
            if idx is not None:
                np.take(decode_table(fmt, work, 8 * idx.dtype.itemsize), idx, out=vals)
            return _dequantize(vals.reshape(blocked_shape), s, dtype).reshape(enc.shape)
        s2 = s.reshape((R, 1) if kind == "row" else (1, C) if kind == "col" else (1, 1))
        V2 = vals.reshape(R, C)
        table = None if idx is None else decode_table(fmt, work, 8 * idx.dtype.itemsize)
        for i0, i1, j0, j1 in _chunks(R, C):
            if table is not None:
                lo, hi = i0 * C + j0, (i1 - 1) * C + j1
                np.take(table, idx[lo:hi], out=vals[lo:hi])
            v = V2[i0:i1, j0:j1]
            np.multiply(v, s2[i0:i1] if kind == "row" else s2[:, j0:j1] if kind == "col" else s2,
                        out=v)
        return vals.reshape(enc.shape)


def _chunks(R: int, C: int):
    """``(i0, i1, j0, j1)`` tiles of an ``R x C`` C-order array, each a contiguous flat range of
    at most ``CHUNK`` elements: whole rows when a row fits, else pieces of one row."""
    if R == 0 or C == 0:
        return
    if C <= CHUNK:
        k = CHUNK // C
        for i in range(0, R, k):
            yield i, min(i + k, R), 0, C
    else:
        for i in range(R):
            for j in range(0, C, CHUNK):
                yield i, i + 1, j, min(j + CHUNK, C)


def _groups(R: int, C: int, fuse: bool):
    """Row ranges ``(g0, g1)``: groups of 8 chunks of whole rows when scales are computed in the
    pass (their small per-block arithmetic is done once per group), else all rows at once."""
    if not fuse:
        yield 0, R
        return
    step = 8 * max(1, CHUNK // C)
    for g in range(0, R, step):
        yield g, min(g + step, R)


def _constant(v, dt: np.dtype) -> np.ndarray:
    """``v`` in ``dt`` as a read-only 0-d array."""
    a = np.array(v, dt)
    a.flags.writeable = False
    return a


def _nonfinite(xb: np.ndarray) -> Exception:
    return scale_error(NUMPY_SCALES.count_nonfinite(xb), xb.dtype)


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


def blocked(q: Quantizer, x):
    """``x`` reshaped so that each block of ``q``'s granularity is reduced over the returned
    axes: ``(blocked x, axes)``. The layout both backends share (``q`` may be an
    :class:`ecosim.torch.Quantizer` and ``x`` a tensor)."""
    return Quantizer._blocked(q, x)


__all__ += ["blocked"]
