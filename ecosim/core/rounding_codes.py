"""The rounding kernel's results as the format's codes (bit patterns), without the values.

:func:`code_kernel` is :func:`ecosim.core.rounding.quantize`'s kernel with a different last step:
the rounded magnitude, shifted right by the dropped bits, is already the format's exponent and
mantissa fields up to a bias difference, so :class:`ecosim.Quantizer` (``encode``) gets real
low-precision storage in the same chunked pass as the rounding, bit-identical to
:func:`ecosim.core.formats.encode` of the rounded values. The inputs off that fast path (below the
smallest normal, past max, inf, NaN) are rounded by the value kernel and converted
(:func:`candidate_codes`, :func:`_codes_of_bits`). The storage of codes (packing 2- and 4-bit
codes into bytes, the tables that decode them) is here as well.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from .bitops import NUMPY_WORDS, add_rounding
from .formats import Format, decode_bits
from .rounding import absmask, float_kernel, int_kernel, Plan, small_magnitudes


def code_kernel(plan: Plan, x: np.ndarray, codes: np.ndarray, rbits, *, no_over=False,
                 defer=False):
    """Raw codes (``plan.fmt.code_dtype``) of the values that :func:`round_kernel` rounds ``x`` to.

    This is the kernel's own arithmetic with a different last step: for an input whose
    magnitude bits ``a`` lie in ``[minnorm, hi]`` (a normal value of both the format and the
    working dtype that cannot round past max), the rounded magnitude shifted right by ``S - M``
    is the working dtype's exponent and the format's mantissa field, ``E_w << M | m``; the
    format's code is that minus ``(bias_w - bias) << M``, computed modulo ``2**bits`` in the code
    dtype itself, with the sign bit added from the input. The other inputs, the candidates
    (below the smallest normal, zeros included; past ``hi``, inf, NaN; for an unsigned format
    negatives), are coded by :func:`candidate_codes`. Integer grids round as :func:`round_kernel`
    (RTN: ``rint`` and a clip, the same values) and cast.

    ``no_over``: the caller knows that no ``|x|`` exceeds the value of bits ``plan.hi`` (and
    none is NaN), so only small inputs are candidates. ``defer``: return the candidates as
    ``(indices, inputs, random words or None)`` instead of coding them (None when there are
    none), so that a caller working in chunks codes them all at once.
    """
    if plan.fmt.is_float:
        return _float_code_kernel(plan, x, codes, rbits, no_over, defer)
    _int_code_kernel(plan, x, codes, rbits)
    return None


def _float_code_kernel(plan: Plan, x, codes, rbits, no_over: bool, defer: bool):
    fmt, src = plan.fmt, plan.src
    U = src.udtype.type
    C = codes.dtype.type
    b = x.view(src.udtype)
    a = b & U(absmask(src))
    r = np.empty_like(a)
    # Candidates: a < minnorm or a > hi, in one unsigned comparison (wrapping below minnorm);
    # unsigned formats test the signed bits, so negatives are candidates. No input up to hi
    # rounds past max: hi is max plus the mode's headroom (SR: none, as it adds less than one
    # step 2**sh; RTN adds at most half a step, so up to maxbits + 2**(sh-1) - 1 the truncation
    # gives maxbits: the largest input of an absmax block lands just above max after the
    # division).
    if no_over and fmt.signed:
        cand = a < U(plan.minnorm)
    else:
        np.subtract(a if fmt.signed else b, U(plan.minnorm), out=r)
        cand = r > U(plan.hi - plan.minnorm)
    sh = plan.sh
    add_rounding(plan, a, r, rbits, NUMPY_WORDS)
    if sh:
        r >>= U(sh)  # the truncation and the shift to the mantissa field at once
    np.copyto(codes, r, casting="unsafe")  # modulo 2**(code bits): the subtraction wraps alike
    codes -= C(((src.bias - fmt.bias) << fmt.mantissa_bits) % (1 << (8 * codes.itemsize)))
    if fmt.signed:
        sgn = np.greater(b, a).view(np.uint8)  # the sign bit
        if C is np.uint8:  # 0/1 times 2**(E + M): NumPy has no vector 8-bit shift
            sgn *= np.uint8(1 << (fmt.exponent_bits + fmt.mantissa_bits))
        else:
            sgn = sgn.astype(codes.dtype) << C(fmt.exponent_bits + fmt.mantissa_bits)
        codes |= sgn
    if not cand.any():
        return None
    idx = np.flatnonzero(cand)
    pending = idx, x[idx], None if rbits is None else rbits[idx]
    if defer:
        return pending
    codes[idx] = candidate_codes(plan, *pending[1:])
    return None


def candidate_codes(plan: Plan, xs: np.ndarray, rbits) -> np.ndarray:
    """Codes of the inputs that :func:`_float_code_kernel` leaves aside (any inputs, in fact).

    Where everything below the smallest normal is one uniform grid (``plan.uniform_small``:
    zeros and subnormals, the usual candidates) the code of such an input is the number of
    steps ``2**qexp`` that :func:`small_magnitudes` rounds it to, plus the sign bit (none on a
    fnuz zero); the rest are rounded by :func:`float_kernel` and converted by
    :func:`_codes_of_bits`.
    """
    fmt, src = plan.fmt, plan.src
    U = src.udtype.type
    out = np.empty(xs.size, fmt.code_dtype)
    rest = np.ones(xs.size, bool)
    if plan.uniform_small:
        b = xs.view(src.udtype)
        a = b & U(absmask(src))
        small = a < U(plan.minnorm)
        sidx = np.flatnonzero(small)
        mags = small_magnitudes(plan, xs[sidx], None if rbits is None else rbits[sidx])
        n = (mags.view(src.dtype) * src.dtype.type(2.0 ** -plan.qexp)).astype(out.dtype)
        neg = b[sidx] > a[sidx]
        if fmt.nan == "fnuz":
            neg &= n != 0  # no negative zero
        out[sidx] = n | (neg.astype(out.dtype) << (fmt.exponent_bits + fmt.mantissa_bits))
        rest = ~small
    if rest.any():
        ridx = np.flatnonzero(rest)
        vals = np.empty(ridx.size, src.dtype)
        float_kernel(plan, xs[ridx], vals, None if rbits is None else rbits[ridx])
        out[ridx] = _codes_of_bits(plan, vals.view(src.udtype))
    return out


def _codes_of_bits(plan: Plan, vb: np.ndarray) -> np.ndarray:
    """Raw codes of on-grid values given as working-dtype bits (NaN, inf and zeros included).

    Integer arithmetic on the bit fields: a normal value of the format is ``(a >> (S - M))``
    minus the bias difference; a subnormal one is its integer multiple of ``2**qexp`` (the
    significand shifted by the exponent difference); a format laid out as the working dtype
    (same exponent width and bias: bfloat16 and E8M0 in float32) keeps ``a >> (S - M)`` for
    every finite value. NaN and inf take the format's codes (:func:`ecosim.core.formats.encode_bits`
    conventions); NaN in a format without one, or a value off the grid, raises ValueError.
    Values below the working dtype's smallest normal in a format laid out otherwise (no catalogued
    format in float32 or float64) go through :func:`ecosim.core.formats.encode_bits`.
    """
    from .formats import nan_code_of, encode_bits

    fmt, src = plan.fmt, plan.src
    E, M, S = fmt.exponent_bits, fmt.mantissa_bits, src.mant
    W = 8 * src.udtype.itemsize
    a = (vb & src.udtype.type(absmask(src))).astype(np.int64)
    sign = (vb >> src.udtype.type(W - 1)).astype(np.int64)
    if not fmt.signed:
        sign[:] = 0
    sh = S - M
    infbits = int(plan.infbits)
    src_ebits = W - 1 - S
    same_layout = E == src_ebits and fmt.bias == src.bias
    lowest_normal = (max(fmt.emin, src.emin) + src.bias) << S  # bits of 2**max(emin, src emin)
    code = (a >> sh) - ((src.bias - fmt.bias) << M)
    finite = a < infbits
    below = finite & (a < lowest_normal)
    if same_layout:
        code = np.where(below, a >> sh, code)
    else:
        ef = a >> S
        sig = (a & ((1 << S) - 1)) | ((ef > 0).astype(np.int64) << S)
        e_unb = np.maximum(ef, 1) - (src.bias + S)  # |v| = sig * 2**e_unb
        k = plan.qexp - e_unb
        with np.errstate(over="ignore"):
            sub = np.where(k >= 0, sig >> np.clip(k, 0, 63), sig << np.clip(-k, 0, 63))
        if fmt.emin >= src.emin:
            if not fmt.subnormals:
                sub = np.zeros_like(sub)  # flush to zero: only 0 lies below the smallest normal
            code = np.where(below, sub, code)
        else:
            code = np.where(below, 0, code)
            odd = below & (a > 0)
            if odd.any():
                fb = encode_bits(vb[odd].view(src.dtype), fmt).astype(np.int64)
                code[odd] = fb & ((1 << (E + M)) - 1)
    code |= sign << (E + M)
    if fmt.nan == "fnuz":
        code = np.where(a == 0, 0, code)  # no negative zero
    nan = a > infbits
    inf = a == infbits
    if nan.any() or inf.any():
        bad = (nan & (fmt.nan == "none")) | (inf & (not fmt.has_inf))
        if bad.any():
            shown = vb[bad][:3].view(src.dtype).astype(np.float64)
            raise ValueError(f"values {shown.tolist()} are not on the {fmt.name} grid; "
                             "quantize first")
        code = np.where(nan, nan_code_of(fmt, sign), code)
        code = np.where(inf, (sign << (E + M)) | (((1 << E) - 1) << M), code)
    return code.astype(fmt.code_dtype)


def _int_code_kernel(plan: Plan, x: np.ndarray, codes: np.ndarray, rbits) -> None:
    fmt = plan.fmt
    vals = np.empty_like(x)
    if plan.mode == "rtn":
        # The RTN values of int_kernel: rint is odd-symmetric and the clip is its min; only the
        # sign of a zero (no code of its own) and of NaN can differ.
        np.rint(x, out=vals)
        np.clip(vals, x.dtype.type(fmt.int_min), x.dtype.type(fmt.int_max), out=vals)
    else:
        int_kernel(plan, x, vals, rbits)
    if np.isnan(vals).any():
        raise ValueError(f"{fmt.name} has no NaN code")
    if codes.dtype.itemsize == 1:
        np.copyto(codes.view(np.int8), vals, casting="unsafe")  # two's complement
    else:
        np.copyto(codes, vals.astype(np.int64) & ((1 << fmt.storage_bits) - 1), casting="unsafe")
    if fmt.storage_bits < 8 * codes.dtype.itemsize:
        codes &= codes.dtype.type((1 << fmt.storage_bits) - 1)


# -- storage of codes (ecosim.Quantizer.encode and decode) -------------------------------------
def pack_codes(codes: np.ndarray, bits: int, n: int) -> np.ndarray:
    """:func:`ecosim.core.formats.pack` of the first ``n`` codes (``codes`` holds zeros after them
    and at least 3 more elements), by shifts of 16- or 32-bit words."""
    per = 8 // bits
    m = -(-n // per)  # bytes
    if bits == 4:
        w = codes[:2 * m].view(np.uint16)
        w = w | (w >> np.uint16(4))
    else:
        w = codes[:4 * m].view(np.uint32)
        w = w | (w >> np.uint32(6)) | (w >> np.uint32(12)) | (w >> np.uint32(18))
    return w.astype(np.uint8)


def code_values(codes: np.ndarray, fmt: Format, work: np.dtype) -> np.ndarray:
    """:func:`~ecosim.core.formats.decode_bits` of ``codes`` in ``work`` (a NaN code gives the
    positive quiet NaN, as :func:`ecosim.core.formats.decode` and the torch backend give it)."""
    return decode_bits(np.asarray(codes).astype(np.int64), fmt).astype(work)


@lru_cache(maxsize=64)
def decode_table(fmt: Format, work: np.dtype, bits: int) -> np.ndarray:
    """Values (``work``) of every code: indexed by an 8- or 16-bit code (``bits`` 8 or 16), or by
    a byte of packed 4- or 2-bit codes (``bits`` 4 or 2: one element of 2 or 4 values, lowest
    code first, viewed as a single wider item so that one ``take`` decodes a byte)."""
    if bits in (8, 16):
        t = code_values(np.arange(1 << bits, dtype=np.int64), fmt, work)
    else:
        per = 8 // bits
        byte = np.arange(256, dtype=np.int64)[:, None]
        shifts = np.arange(per, dtype=np.int64) * bits
        t = code_values((byte >> shifts) & ((1 << bits) - 1), fmt, work)
        size = t.itemsize * per
        item = {4: np.uint32, 8: np.uint64, 16: np.complex128}.get(size, (np.void, size))
        t = np.ascontiguousarray(t).view(np.dtype(item)).reshape(256)
    t.setflags(write=False)
    return t
