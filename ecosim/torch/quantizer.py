"""Torch mirror of :class:`ecosim.Quantizer`: scaled quantization with real torch storage.

:class:`Quantizer` takes the NumPy class's configuration (and its validation) and maps tensors
to dequantized values, or to :class:`Encoded` codes in real low-precision torch storage
(``torch.float8_e4m3fn`` ..., int8, packed uint8) and back, on any device. On the CPU every
output equals the NumPy quantizer's bit for bit:

- scales: the rules of :mod:`ecosim.core.scale_rules`, the ones NumPy runs, through torch's shim
  (:mod:`ecosim.torch.scales`: an absmax divided by ``rho`` in the input's float type;
  power-of-two scales from exponent bits, not logarithms);
- absmean: a mean in float64 *summed in NumPy's order* (pairwise summation with 8-way
  unrolled leaves of at most 128 values along a contiguous block; buffers of
  ``numpy.getbufsize()`` values, summed one after another, when float32 is widened; a plain
  running sum over the leading axes for column blocks), because a float64 mean rounded
  differently would change the last bit of a scale (:mod:`ecosim.torch.numerics`);
- dequantization ``s * code`` rounded once in the input's float type, with NumPy's rules for
  half types (the exact float64 product rounded once onto the half grid) and NumPy's NaN
  propagation (the code's NaN, not the device's).

On the CPU a float32 or float64 tensor of more than one chunk whose codes cannot be NaN is
divided, rounded and multiplied back chunk by chunk of whole rows (:func:`quantize_scaled`):
the same float operations on each element, so the same bits, without a full-size ``x / s``;
the blocks' ``amax / s`` bound the scaled values, so RTN needs no overflow test.

Codes are written as integers and reinterpreted, never produced by torch's float8 casts (which
saturate E4M3 overflow to 448 where ml_dtypes gives NaN).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..core import quantizer as _np_quantizer
from ..core.checks import native, scale_error
from ..core.formats import Format, get
from ..core.rounding import SRC_F32 as _F32
from ..core.rounding_modes import Rounding
from ..core.rounding import SRC_F64 as _F64
from ..core.scale_rules import absmean_scales, block_scales, refuse_nonfinite
from .numerics import numpy_mean, scalar
from .scales import TORCH_SCALES
from .rng import bits_chunk_size, chunk_size
from .rounding import (as_tensor, check_representable, run_chunks, checked_call, from_work_bits,
                       pow2_bits, quantize, to_work_bits)

__all__ = ["Quantizer", "Encoded"]


# Torch dtypes holding one code of a format, where torch has them (else raw uint8 codes).
STORAGE_DTYPES = {name: getattr(torch, name) for name in
            ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
            if hasattr(torch, name)}
STORAGE_DTYPES.update({"bfloat16": torch.bfloat16, "float16": torch.float16})
E8M0_DTYPE = getattr(torch, "float8_e8m0fnu", None)


@dataclass(frozen=True)
class Encoded:
    """Codes in real low-precision torch storage plus their scales.

    Attributes:
        codes: one element per value for formats of 5 to 16 bits: ``torch.float8_e4m3fn``,
            ``float8_e5m2``, ``float8_e4m3fnuz``, ``float8_e5m2fnuz``, ``bfloat16``,
            ``float16``, ``int8``; raw uint8 codes for the 8- and 6-bit formats torch has no
            dtype for (``float8_e4m3``, ``float8_e3m4``, ``float8_e4m3b11fnuz``, FP6); raw
            codes in int16/int32/int64 (same bits) for wider custom formats; or uint8 bytes
            holding two 4-bit (or four 2-bit) codes, low end first, for int4, FP4, int2 and
            ternary.
        scales: one per block, shaped to broadcast against the blocked values; float32/float64,
            or ``torch.float8_e8m0fnu`` (one byte, uint8 where torch lacks it) for
            power-of-two scales.
        shape, dtype: of the original tensor.
        packed_bits: bits per packed code (0 when not packed).
    """

    codes: torch.Tensor
    scales: torch.Tensor
    shape: tuple
    dtype: torch.dtype
    packed_bits: int = 0

    @property
    def nbytes(self) -> int:
        """Bytes actually held: codes plus scales."""
        return int(self.codes.nbytes + self.scales.nbytes)


@dataclass(frozen=True)
class Quantizer(_np_quantizer.QuantizerConfig):
    """A scaled quantizer ``q(x) = fl(s * Q(x / s))`` on torch tensors.

    The arguments, their checks and the semantics are those of :class:`ecosim.Quantizer`
    (granularity ``"tensor"``/``"row"``/``"column"``/group size; scale ``"absmax"``,
    ``"absmax_pow2"`` with ``pow2`` ``"floor"``/``"ceil"``/``"even"``, ``"absmean"`` or a fixed
    float; ``mode``, ``nbits``, ``saturate``, ``sr_rule``); only the arrays are tensors, on
    any device. SR bits from ``key=`` are consumed in ``x``'s C order, as in NumPy, so both
    backends draw the same bits; ``rbits=`` is an integer tensor of ``x``'s shape.

    Bit-exactness with NumPy holds for C-contiguous NumPy input (absmean sums in NumPy's
    order for that layout).

    Example:
        >>> import torch
        >>> q = Quantizer("int4", granularity="row")
        >>> q(torch.tensor([[0.7, -0.35], [7.0, 1.4]]))
        tensor([[ 0.7000, -0.4000],
                [ 7.0000,  1.0000]])
        >>> enc = q.encode(torch.linspace(-1, 1, 32).reshape(4, 8))  # two codes per byte
        >>> enc.codes.dtype, enc.codes.nbytes, enc.nbytes
        (torch.uint8, 16, 32)
        >>> q8 = Quantizer("e4m3", granularity="row").encode(torch.ones(4, 8))
        >>> q8.codes.dtype, q8.nbytes                # one byte per weight + a scale per row
        (torch.float8_e4m3fn, 48)
    """

    def _blocked(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple]:
        """``x`` reshaped so that each block is reduced over the returned axes (as NumPy)."""
        return _np_quantizer.blocked(self, x)

    # -- blocks and scales --------------------------------------------------------------------
    def scales(self, x) -> torch.Tensor:
        """The scale of each block of ``x`` (shaped to broadcast against the blocked tensor)."""
        x = _check_float(x)
        xb, axes = self._blocked(x)
        return self._scales(xb, axes)

    @staticmethod
    def _scales_dtype(xb: torch.Tensor) -> torch.dtype:
        return xb.dtype if xb.dtype in (torch.float32, torch.float64) else torch.float32

    def _scale_shape(self, xb: torch.Tensor, axes: tuple) -> tuple:
        if self.fixed:
            return (1,) * xb.ndim
        return tuple(1 if i in axes else d for i, d in enumerate(xb.shape))

    def _scales(self, xb: torch.Tensor, axes: tuple) -> torch.Tensor:
        return self._scales_amax(xb, axes)[0]

    def _scales_amax(self, xb: torch.Tensor, axes: tuple) -> tuple[torch.Tensor, torch.Tensor]:
        """The scales and the blocks' absmax (None for fixed scales)."""
        dt = self._scales_dtype(xb)
        if self.fixed:
            return torch.full((1,) * xb.ndim, self.scale, dtype=dt, device=xb.device), None
        xd = xb if xb.dtype == dt else xb.to(dt)
        if xd.numel() == 0:
            amax = xd.new_zeros(self._scale_shape(xb, axes))
        elif axes and self.scale != "absmean" and xd.numel() > bits_chunk_size(xd.device, 0):
            # max(-min, max): two reads, no full-size |x| (NaN propagates as through abs; a
            # block of zeros may give -0, which the `amax == 0` test below takes as 0).
            # (torch.aminmax over a dim is ~3x slower on the CPU than amax plus amin.) Below a
            # chunk, |x| costs less than the two extra ops.
            lo = xd.amin(dim=axes, keepdim=True)
            amax = torch.maximum(lo.neg_(), xd.amax(dim=axes, keepdim=True))
        elif axes:
            amax = xd.abs().amax(dim=axes, keepdim=True)
        else:
            amax = xd.abs()
        # The rule (ecosim.core.scale_rules): constants rounded to dt, a nonzero block's scale at
        # least the smallest normal, a block of zeros s = 1.
        refuse_nonfinite(amax, xb, TORCH_SCALES)  # amax propagates NaN (and inf)
        tiny = scalar(torch.finfo(dt).tiny, dt, xb.device)
        if self.scale == "absmean":
            mean = numpy_mean(xd.abs(), axes) if xd.numel() else amax  # empty: s = 1
            return absmean_scales(mean, amax, tiny, TORCH_SCALES), amax
        rho = scalar(self.rho, dt, xb.device)
        return block_scales(self, amax, rho, tiny, TORCH_SCALES), amax

    # -- the quantizer ------------------------------------------------------------------------
    def _codes(self, x, key, rbits, scales=None, dequantize=False):
        """``(x, codes, scales)``. ``dequantize``: where the fused path applies (a float32 or
        float64 CPU tensor of more than one chunk whose codes cannot be NaN), the codes come back
        already multiplied by their scales (:func:`quantize_scaled`) and the scales as None.
        """
        x = _check_float(x)
        xb, axes = self._blocked(x)
        # quantize's check, before the scales (rho would overflow converted to float32)
        check_representable(self.fmt, self._scales_dtype(xb))
        amax = None
        if scales is None:
            s, amax = self._scales_amax(xb, axes)
        else:
            s = _as_float_tensor(scales).to(device=xb.device, dtype=self._scales_dtype(xb))
            want = self._scale_shape(xb, axes)
            if tuple(s.shape) != want:
                raise ValueError(f"scales must have shape {want} (one per block), got "
                                 f"{tuple(s.shape)}")
            if not bool((torch.isfinite(s) & (s > 0)).all()):
                raise ValueError("scales must be positive and finite")
        rb = None
        if rbits is not None:
            rb = rbits if isinstance(rbits, torch.Tensor) else torch.from_numpy(
                np.ascontiguousarray(native(np.asarray(rbits))))
            rb = rb.reshape(xb.shape)
        if not self.rounding.stochastic and (key is not None or rbits is not None):
            raise ValueError("key/rbits are for mode='sr'")
        kw = dict(rbits=rb, key=key)
        if (dequantize and xb.dtype == s.dtype and xb.device.type == "cpu"
                and not self._may_nan and xb.numel() > bits_chunk_size(xb.device, 0)):
            # |x| <= amax, so no |x / s| exceeds the block's amax / s (division is monotone)
            bound = (amax / s).max() if amax is not None and amax.numel() else None
            return x, quantize_scaled(xb, s, self.fmt, self.rounding, bound=bound, **kw), None
        # Half inputs are scaled in float32, widened through their bits: torch's own cast
        # turns every float16 NaN into 0x7FFFFFFF, NumPy keeps sign and payload.
        xw = xb if xb.dtype == s.dtype else to_work_bits(xb).view(torch.float32).reshape(xb.shape)
        if xw.dtype != s.dtype:
            xw = xw.to(s.dtype)
        return x, quantize(xw / s, self.fmt, self.rounding, **kw), s

    @property
    def _may_nan(self) -> bool:
        """Whether codes can be NaN: fixed scales pass NaN input through, and saturate=False
        turns overflow (a clipped top binade) into NaN."""
        return self.fixed or not self.saturate

    def __call__(self, x, *, key=None, rbits=None, scales=None) -> torch.Tensor:
        """Dequantized values ``fl(s * Q(x / s))``, same shape, dtype and device as ``x``.

        Args:
            x: float tensor.
            key, rbits: randomness for ``mode="sr"`` (see :func:`ecosim.torch.quantize`).
            scales: use these scales (e.g. ``q.scales(previous_weights)``) instead of
                computing them from ``x``; shaped as :meth:`scales` returns them.
        """
        x, c, s = self._codes(x, key, rbits, scales, dequantize=True)
        if s is None:
            return c.reshape(x.shape)
        if x.dtype == c.dtype and x.dtype in (torch.float32, torch.float64) and not self._may_nan:
            return c.mul_(s).reshape(x.shape)  # the codes are ours: no second full-size buffer
        return _dequantize(c, s, x.dtype, self._may_nan).reshape(x.shape)

    def encode(self, x, *, key=None, rbits=None, scales=None) -> Encoded:
        """Quantize and store: codes in real low-precision torch storage, plus scales."""
        x, c, s = self._codes(x, key, rbits, scales)
        fmt = self.fmt
        packed = 0
        if fmt.bits <= 4:
            packed = 4 if fmt.bits > 2 else 2
            codes = pack(encode_bits(c, fmt, check=False), packed)
        elif not fmt.is_float:
            codes = encode_bits(c, fmt, check=False)
            codes = c.to(torch.int8) if fmt.dtype_name == "int8" else _raw_storage(codes, fmt)
        else:
            codes = _raw_storage(encode_bits(c, fmt, check=False), fmt)
            if fmt.dtype_name in STORAGE_DTYPES:
                codes = codes.view(STORAGE_DTYPES[fmt.dtype_name])
        if self.scale == "absmax_pow2":
            # Exact: powers of two in E8M0's range.
            e8 = encode_bits(s, get("e8m0"), check=False).to(torch.uint8)
            s = e8.view(E8M0_DTYPE) if E8M0_DTYPE is not None else e8
        return Encoded(codes=codes, scales=s, shape=tuple(x.shape), dtype=x.dtype,
                       packed_bits=packed)

    def decode(self, enc: Encoded) -> torch.Tensor:
        """Inverse of :meth:`encode`: exactly the values that :meth:`__call__` returns."""
        fmt = self.fmt
        n = math.prod(enc.shape)
        work = enc.dtype if enc.dtype in (torch.float32, torch.float64) else torch.float32
        if enc.packed_bits:
            raw = unpack(enc.codes, enc.packed_bits, n)
        elif fmt.dtype_name == "int8":
            raw = enc.codes.to(torch.int64) & 0xFF
        else:
            raw = _raw_codes(enc.codes, fmt)
        vals = decode_bits(raw, fmt, work)
        if enc.scales.dtype in (torch.uint8, E8M0_DTYPE):
            s = decode_bits(_raw_codes(enc.scales, get("e8m0")), get("e8m0"), work)
            s = s.reshape(enc.scales.shape)
        else:
            s = enc.scales.to(work)
        blocked_shape = self._blocked(torch.empty(enc.shape, dtype=torch.bool, device="meta"))[0]
        c = vals.reshape(blocked_shape.shape)
        return _dequantize(c, s, enc.dtype, True).reshape(enc.shape)


def quantize_scaled(x: torch.Tensor, s: torch.Tensor, fmt: Format | str,
                    mode: str | Rounding = "rtn", *,
                    rbits=None, nbits: int = 32, key=None, saturate: bool = True,
                    sr_rule: str = "floor", bound=None) -> torch.Tensor:
    """``quantize(x / s, ...) * s`` bit for bit, for a float32 or float64 CPU tensor ``x`` and
    scales ``s`` of its dtype that broadcast against it (``s.shape[0]`` is 1 or
    ``x.shape[0]``), chunk by chunk: each chunk of rows is divided, rounded and multiplied
    while in cache, with no full-size ``x / s``. ``bound``: a float no ``|x / s|`` exceeds (the
    largest ``amax / s`` of the blocks), which lets RTN skip the overflow test when it is small.
    """
    x, plan, bits_src = checked_call(x, fmt, mode, rbits, nbits, key, saturate, sr_rule)
    out = torch.empty(x.numel(), dtype=torch.int64 if x.dtype == torch.float64 else torch.int32)
    bounded = bound is not None and float(bound) <= _value_of(plan, plan.hi)
    if s.numel() == 1 or x.ndim == 0:
        x, s = x.reshape(-1), s.reshape(1)
    run_chunks(plan, None, out, bits_src, (x, s, bounded))
    return out.view(x.dtype).reshape(x.shape)


def _value_of(plan, bits: int) -> float:
    """The value of the working float of ``plan`` with the bits ``bits``."""
    return float(np.array(bits, plan.src.udtype).view(plan.src.dtype))


# -- helpers -----------------------------------------------------------------------------------

def _check_float(x) -> torch.Tensor:
    x = _as_float_tensor(x)
    if not x.is_floating_point() or x.dtype not in (torch.float16, torch.bfloat16,
                                                    torch.float32, torch.float64):
        raise TypeError(f"expected a floating-point tensor, got dtype {x.dtype}")
    return x


def _as_float_tensor(x) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x
    return as_tensor(x)


def _dequantize(c: torch.Tensor, s: torch.Tensor, dtype: torch.dtype, may_nan: bool):
    """``s * code`` rounded once in ``dtype``, as NumPy computes it, NaN codes included.

    NumPy's product of a NaN code returns that NaN (quieted, sign kept); devices differ, so NaN
    lanes are taken from the code when codes may be NaN.
    """
    if dtype in (torch.float32, torch.float64):
        out = c * s
        return torch.where(torch.isnan(c), c, out) if may_nan else out
    # Half types: the exact float64 product rounded once onto the half grid, as NumPy does.
    prod = c.to(torch.float64) * s.to(torch.float64)  # exact: 24 x 24 bits
    half = "float16" if dtype == torch.float16 else "bfloat16"
    q = quantize(prod, half, saturate=False).to(torch.float32)  # exact: on the half grid
    bits = to_work_bits(q)
    if may_nan:
        bits = torch.where(torch.isnan(c).reshape(-1), to_work_bits(c.to(torch.float32)), bits)
    return from_work_bits(bits, dtype).reshape(c.shape)


# -- codes -------------------------------------------------------------------------------------

def _src_of(t: torch.Tensor):
    return _F64 if t.dtype == torch.float64 else _F32


def encode_bits(values: torch.Tensor, fmt: Format, *, check: bool = True) -> torch.Tensor:
    """int64 raw codes of on-grid values (:func:`ecosim.core.formats.encode_bits` for tensors).

    NaN maps to the format's NaN code (keeping the sign where the format has two), +-inf to
    the inf codes. Values off the grid raise ValueError (quantize them first); ``check=False``
    skips that round trip for values that come from :func:`~ecosim.torch.quantize` (only a
    NaN where the format has none is still refused).
    """
    v = values.reshape(-1)
    if v.dtype not in (torch.float32, torch.float64):
        v = v.to(torch.float32)
    out = torch.empty(v.shape, dtype=torch.int64, device=v.device)
    for lo, hi in _chunks(v):
        out[lo:hi] = _encode_chunk(v[lo:hi], fmt, check)
    return out.reshape(values.shape)


def _chunks(t: torch.Tensor):
    """``(lo, hi)`` ranges as :func:`ecosim.torch.rng.chunk_size` cuts them (cache-sized on the
    CPU, where full-size int64 temporaries are memory-bound; one range elsewhere)."""
    n = t.numel()
    step = chunk_size(t.device, n)
    return [(lo, min(lo + step, n)) for lo in range(0, n, step)]


def _encode_chunk(v: torch.Tensor, fmt: Format, check: bool) -> torch.Tensor:
    if not fmt.is_float:
        if bool(torch.isnan(v).any()):
            raise ValueError(f"{fmt.name} has no NaN code")
        iv = v.to(torch.int64)
        if check:
            ok = (iv.to(v.dtype) == v) & (iv >= fmt.int_min) & (iv <= fmt.int_max)
            if not bool(ok.all()):
                raise ValueError(f"values are not on the {fmt.name} grid; quantize them first")
        return iv & ((1 << fmt.storage_bits) - 1)
    src = _src_of(v)
    S, E, M = src.mant, fmt.exponent_bits, fmt.mantissa_bits
    b = to_work_bits(v).to(torch.int64)
    a = b & ((1 << (63 if S == 52 else 31)) - 1)
    neg = (b < 0) if fmt.signed else torch.zeros_like(b, dtype=torch.bool)
    expw = a >> S
    m = a & ((1 << S) - 1)
    normal_w = expw > 0
    sig = torch.where(normal_w, m | (1 << S), m)
    ex = torch.where(normal_w, expw - (src.bias + S), src.emin - S)  # |v| = sig * 2**ex
    lg = (sig.clamp(min=1).to(torch.float64).view(torch.int64) >> 52) - 1023
    e = lg + ex  # floor(log2 |v|)
    finite = expw < (1 << (11 if S == 52 else 8)) - 1
    normal = (e >= fmt.emin) & finite & (a != 0)
    # Normal codes: M bits below the leading one; subnormal ones: units of 2**(emin - M).
    k = torch.where(normal, M - lg, ex - (fmt.emin - M))
    shifted = torch.where(k >= 0, sig << k.clamp(0, 62), sig >> (-k).clamp(0, 62))
    mant = torch.where(normal, shifted - (1 << M), shifted)
    mant = torch.where(finite, mant, 0)
    expf = torch.where(normal, e + fmt.bias, 0)
    code = (neg.to(torch.int64) << (E + M)) | (expf << M) | mant
    if fmt.nan == "fnuz":
        code = torch.where(a == 0, 0, code)  # no negative zero
    isnan = torch.isnan(v)
    signpart = neg.to(torch.int64) << (E + M)
    if fmt.nan == "ieee":
        code = torch.where(isnan, signpart | (((1 << E) - 1) << M) | (1 << (M - 1)), code)
        code = torch.where(torch.isinf(v), signpart | (((1 << E) - 1) << M), code)
    elif fmt.nan == "fn":
        code = torch.where(isnan, signpart | ((1 << (E + M)) - 1), code)
    elif fmt.nan == "fnuz":
        code = torch.where(isnan, 1 << (E + M), code)
    if fmt.storage_bits < 64:
        code &= (1 << fmt.storage_bits) - 1  # off-grid garbage is caught below
    if not check:
        if fmt.nan == "none" and bool(isnan.any()):
            raise ValueError(f"values [nan] are not on the {fmt.name} grid; quantize first")
        return code
    back = _decode_chunk(code, fmt, v.dtype)
    ok = (back == v) | (torch.isnan(back) & isnan)
    if fmt.nan == "fnuz":
        ok |= (v == 0) & (back == 0)
    if not bool(ok.all()):
        bad = v[~ok][:3].tolist()
        raise ValueError(f"values {bad} are not on the {fmt.name} grid; quantize first")
    return code


def decode_bits(codes: torch.Tensor, fmt: Format, dtype: torch.dtype) -> torch.Tensor:
    """Values of raw integer codes as ``dtype`` (float32 or float64), exactly as NumPy's
    :func:`ecosim.core.formats.decode_bits` followed by a cast: NaN codes give the positive quiet
    NaN, invalid integer codes NaN."""
    c = codes.reshape(-1)
    out = torch.empty(c.shape, dtype=dtype, device=c.device)
    for lo, hi in _chunks(c):
        out[lo:hi] = _decode_chunk(c[lo:hi], fmt, dtype)
    return out.reshape(codes.shape)


def _decode_chunk(c: torch.Tensor, fmt: Format, dtype: torch.dtype) -> torch.Tensor:
    c = c.to(torch.int64)
    src = _F64 if dtype == torch.float64 else _F32
    qnan = (0x7FF8 << 48) if src is _F64 else 0x7FC00000
    if not fmt.is_float:
        nb = fmt.storage_bits
        v = torch.where(c >= 1 << (nb - 1), c - (1 << nb), c)
        out = v.to(dtype)
        bad = (v < fmt.int_min) | (v > fmt.int_max)
        return torch.where(bad, torch.full_like(out, math.nan), out)
    E, M = fmt.exponent_bits, fmt.mantissa_bits
    mant = c & ((1 << M) - 1)
    expf = (c >> M) & ((1 << E) - 1)
    neg = ((c >> (E + M)) & 1) == 1 if fmt.signed else torch.zeros_like(c, dtype=torch.bool)
    if fmt.has_zero:
        normal = expf > 0
        sub = mant if fmt.subnormals else torch.zeros_like(mant)
        sig = torch.where(normal, mant | (1 << M), sub)
        ex = torch.where(normal, expf - fmt.bias - M, fmt.emin - M)
    else:
        sig = mant | (1 << M)
        ex = expf - fmt.bias - M
    bits = pow2_bits(sig, ex, src)
    sign = -(1 << 63) if src is _F64 else -(1 << 31)
    bits = torch.where(neg, bits | sign, bits)
    allones = expf == (1 << E) - 1
    if fmt.nan == "ieee":
        infbits = ((1 << 11) - 1) << 52 if src is _F64 else 0x7F800000
        bits = torch.where(allones & (mant == 0), torch.where(neg, infbits | sign, infbits), bits)
        nan = allones & (mant != 0)
    elif fmt.nan == "fn":
        nan = allones & (mant == (1 << M) - 1)
    elif fmt.nan == "fnuz":
        nan = neg & (expf == 0) & (mant == 0)
    else:
        nan = torch.zeros_like(neg)
    bits = torch.where(nan, qnan, bits)
    if src is _F32:
        bits = bits.to(torch.int32)
    return bits.view(dtype)


def _raw_storage(codes: torch.Tensor, fmt: Format) -> torch.Tensor:
    """Raw int64 codes in the narrowest torch integer of the format's width (same bits)."""
    nbytes = np.dtype(fmt.code_dtype).itemsize
    if nbytes == 1:
        return codes.to(torch.uint8)
    dt = {2: torch.int16, 4: torch.int32, 8: torch.int64}[nbytes]
    half = 1 << (8 * nbytes - 1)
    return torch.where(codes >= half, codes - 2 * half, codes).to(dt) if nbytes < 8 else codes


def _raw_codes(stored: torch.Tensor, fmt: Format) -> torch.Tensor:
    """int64 raw codes of storage written by :func:`_raw_storage` (or a torch float8 view)."""
    if stored.element_size() == 1:
        return stored.view(torch.uint8).to(torch.int64)
    int_dt = {2: torch.int16, 4: torch.int32, 8: torch.int64}[stored.element_size()]
    raw = stored.view(int_dt).to(torch.int64)
    return raw if int_dt == torch.int64 else raw & ((1 << (8 * stored.element_size())) - 1)


def pack(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack unsigned codes of 1, 2 or 4 bits into uint8 bytes, low end first (flattened)."""
    if bits not in (1, 2, 4):
        raise ValueError(f"pack handles 1, 2 or 4 bits per code, got {bits}")
    per = 8 // bits
    c = codes.reshape(-1).to(torch.uint8)
    pad = (-c.numel()) % per
    if pad:
        c = torch.cat([c, c.new_zeros(pad)])
    c = c.reshape(-1, per)
    out = c[:, 0].clone()
    for j in range(1, per):
        out |= c[:, j] << (j * bits)
    return out


def unpack(packed: torch.Tensor, bits: int, size: int) -> torch.Tensor:
    """Inverse of :func:`pack`: the first ``size`` codes as int64."""
    if bits not in (1, 2, 4):
        raise ValueError(f"unpack handles 1, 2 or 4 bits per code, got {bits}")
    per = 8 // bits
    p = packed.reshape(-1).to(torch.int64)
    shifts = torch.arange(per, device=p.device) * bits
    return ((p[:, None] >> shifts) & ((1 << bits) - 1)).reshape(-1)[:size]
