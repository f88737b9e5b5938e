"""The scaled quantizer's fused pass for RTN with absmax scales per row or per group.

:class:`ecosim.Quantizer` with ``granularity="row"`` or an int group size, ``"absmax"`` or
``"absmax_pow2"`` scales and ``mode="rtn"`` on float32 or float64 input spends most of its time
outside the rounding itself: the blocks' maxima, the division by the scales and the
multiplication back. This module does that work in the chunked pass with fewer passes over
each chunk, to the same bits as the general path of :meth:`ecosim.Quantizer._run`:

- the blocks' maxima are ``max(max x, -min x)`` over long rows (two reductions, no pass that
  writes) and, over short rows such as groups of 32, the unsigned maximum of the magnitude bits
  ``bits & ~sign`` (monotone in ``|x|``; NaN shows as bits above inf's), which NumPy reduces
  about twice as fast as a float maximum there;
- once the maxima say that no quotient ``x / s`` can round past the grid's largest value (the
  general path's ``no_over``), the rounding needs neither the overflow rules nor a separate
  sign: a float format that has ``-0`` (signed, not fnuz) is rounded on the quotient's bits
  with their sign (:func:`signed_float_rtn`), and an integer grid is ``rint`` plus ``0`` (which
  turns ``-0`` into ``+0``) with no clip (:func:`int_rtn`);
- for short rows (groups) the scales are expanded once per chunk to one per element, so the
  division and the multiplication run on contiguous operands.

Every float operation is the general path's, on the same operands in the same order, so the
results are bit-identical; the quantizer falls back to the general path whenever the bound
fails (e.g. ``absmax_pow2`` with ``pow2="floor"``, whose top binade may clip).
"""

from __future__ import annotations

import numpy as np

from .bitops import NUMPY_WORDS, add_rounding, round_bits
from .rounding import CHUNK, round_kernel, small_magnitudes
from .rounding_codes import candidate_codes, code_kernel

__all__ = ["code_pending", "fast_rtn_ok", "fused_rows", "row_absmax", "rows_rtn"]

_EXPAND_BELOW = 256  # rows shorter than this get their scales expanded per element
_GROUP = 8  # chunks per group: its scales are computed in one call


def fast_rtn_ok(plan) -> bool:
    """Whether :func:`rows_rtn` can round for ``plan``: RTN onto an integer grid, or onto a
    float format with a negative zero (signed, not fnuz), where the sign bit needs no rule."""
    if plan.mode != "rtn":
        return False
    fmt = plan.fmt
    return (not fmt.is_float) or (fmt.signed and fmt.nan != "fnuz")


def row_absmax(X2: np.ndarray, i0: int, i1: int, amax: np.ndarray, ubuf: np.ndarray,
               amin: np.ndarray) -> None:
    """``max |x|`` of rows ``i0..i1-1`` of ``X2`` (float32 or float64) into ``amax[i0:i1]``
    (shape ``(i1 - i0, 1)``, ``X2``'s dtype; ``amin`` is scratch of that shape), chunk by chunk.
    A row holding NaN gets a NaN maximum, one holding inf an infinite one; a zero row 0 or -0.

    Short rows: an unsigned maximum of the magnitude bits ``bits & ~sign`` (through ``ubuf``, a
    chunk of unsigned words), which NumPy reduces over short rows about twice as fast as
    floats. Long rows: ``max(max x, -min x)``, two reductions that write nothing.
    """
    C = X2.shape[1]
    k = max(1, CHUNK // C)
    if C >= _EXPAND_BELOW:
        for a in range(i0, i1, k):
            b = min(a + k, i1)
            np.maximum.reduce(X2[a:b], axis=1, keepdims=True, out=amax[a:b])
            np.minimum.reduce(X2[a:b], axis=1, keepdims=True, out=amin[a:b])
        np.negative(amin[i0:i1], out=amin[i0:i1])
        np.maximum(amax[i0:i1], amin[i0:i1], out=amax[i0:i1])
        return
    U = ubuf.dtype.type
    mask = U((1 << (8 * ubuf.itemsize - 1)) - 1)
    am = amax.view(ubuf.dtype)
    for a in range(i0, i1, k):
        b = min(a + k, i1)
        xc = X2[a:b].view(ubuf.dtype)
        u = np.bitwise_and(xc, mask, out=ubuf[:xc.size].reshape(xc.shape))
        np.maximum.reduce(u, axis=1, keepdims=True, out=am[a:b])


def signed_float_rtn(plan, y: np.ndarray, c: np.ndarray, ubuf: np.ndarray, defer=False):
    """:func:`ecosim.core.rounding.round_kernel` (RTN, ``no_over``) of ``y`` into ``c`` for a float
    format with ``-0`` (signed, not fnuz), on the bits with their sign.

    With ``no_over`` (no ``|y|`` above ``plan.hi``, no NaN) the carry of the rounding never
    reaches the sign bit, so rounding the signed bits is rounding the magnitude and putting the
    sign back, which is all the kernel's last step does for such a format. Inputs below the
    smallest normal (``|y|`` bits under ``minnorm``: the bits shifted left by one, which drops
    the sign, under ``minnorm << 1``) are rounded by :func:`small_bits`, or with ``defer``
    returned as ``(indices, inputs)`` for the caller to round them all at once (None when
    there are none). ``ubuf`` is scratch of ``y``'s size in the unsigned words.
    """
    src = plan.src
    U = src.udtype.type
    b = y.view(src.udtype)
    r = c.view(src.udtype)
    k = _split_factor(plan)
    if k is None:
        round_bits(plan, b, r, None, NUMPY_WORDS)
    else:  # Veltkamp's split: 3 float operations for the kernel's 5 on the bits
        np.multiply(y, k, out=c)
        d = np.subtract(c, y, out=ubuf[:b.size].view(y.dtype))
        np.subtract(c, d, out=c)
    t = np.left_shift(b, U(1), out=ubuf[:b.size])
    idx = np.flatnonzero(t < U(plan.minnorm << 1))  # a few per chunk: no test of the minimum
    if not idx.size:
        return None
    if defer:
        return idx, y[idx]
    r[idx] = small_bits(plan, y[idx])
    return None


def _split_factor(plan):
    """``2**sh + 1`` in the working dtype where Veltkamp's split rounds like the kernel, else None.

    In binary with round-to-nearest-even arithmetic, ``c - (c - y)`` with ``c = y * (2**sh + 1)``
    is ``y`` rounded to nearest, ties to even, on ``S + 1 - sh`` bits (S. Boldo, "Pitfalls of a
    full floating-point proof: example on the formal proof of the Veltkamp/Dekker algorithms",
    IJCAR 2006), here the kernel's rounding of a normal input; required: ties to even,
    ``2 <= sh <= S - 1``, and no product overflowing for ``|y|`` up to the bound. Checked on
    every float32 input from the smallest normal to the bound, both signs, for every
    catalogued format this module rounds (tests/test_quantizer_rows.py, marked slow).
    """
    if plan.fmt.ties != "even" or not 2 <= plan.sh <= plan.src.mant - 1:
        return None
    dt = plan.src.dtype
    top = float(np.array(plan.hi, plan.src.udtype).view(dt)[()])
    k = 2.0 ** plan.sh + 1
    return dt.type(k) if top * k * 2 < float(np.finfo(dt).max) else None


def small_bits(plan, ys: np.ndarray) -> np.ndarray:
    """The rounded bits, sign included, of inputs ``ys`` below the smallest normal
    (:func:`ecosim.core.rounding.small_magnitudes` of their magnitudes, and their sign bits)."""
    udt = plan.src.udtype
    return small_magnitudes(plan, ys, None) | (ys.view(udt) & udt.type(1 << (8 * udt.itemsize - 1)))


def int_rtn(y: np.ndarray, c: np.ndarray) -> None:
    """:func:`ecosim.core.rounding.round_kernel` (RTN) of ``y`` into ``c`` for an integer grid, when
    no ``|y|`` reaches ``int_max + 1/2`` (nor ``-int_min + 1/2``): ``rint`` is odd-symmetric, so
    the kernel's ``copysign(rint(|y|), y)`` is ``rint(y)``, nothing needs the clip, and adding
    ``0`` turns ``-0`` into ``+0`` as there."""
    np.rint(y, out=c)
    np.add(c, c.dtype.type(0.0), out=c)


def fast_codes_ok(plan) -> bool:
    """Whether :func:`signed_float_codes` can code for ``plan`` (one that :func:`fast_rtn_ok`
    accepts): one-byte codes whose sign is their top used bit, and the working word's sign,
    shifted with the kept bits, falling outside the byte (true of every catalogued format
    of 8 bits or fewer)."""
    fmt, src = plan.fmt, plan.src
    src_ebits = 8 * src.udtype.itemsize - 1 - src.mant
    return (fmt.code_dtype.itemsize == 1 and fmt.bits <= 8
            and src_ebits + fmt.mantissa_bits >= 8)


def signed_float_codes(plan, y: np.ndarray, codes: np.ndarray, ubuf: np.ndarray,
                       rbuf: np.ndarray):
    """:func:`ecosim.core.rounding_codes.code_kernel` (RTN, ``no_over``, ``defer``) of ``y`` into
    one-byte ``codes``, on the bits with their sign (see :func:`signed_float_rtn`).

    With ``W`` the working dtype's exponent width, the rounded bits of a normal value less the
    bias difference ``(bias_w - bias) << S`` (subtracted with the rounding's addend: the
    exponent field exceeds it, so nothing borrows from the sign), shifted right by ``S - M``, are
    ``sign << (W + M) | e << M | m`` with ``e << M | m`` the code's low ``E + M`` bits; the byte
    keeps them (``W + M >= 8``: the sign falls outside) and the sign bit is added at bit
    ``E + M``. Inputs below the smallest normal are returned as candidates
    ``(indices, inputs, None)`` (None when there are none), as the code kernel's ``defer``
    returns them. ``ubuf``, ``rbuf``: scratch of ``y``'s size in the unsigned words.
    """
    fmt, src = plan.fmt, plan.src
    U = src.udtype.type
    b = y.view(src.udtype)
    r = rbuf[:b.size]
    sh, width = plan.sh, 1 << (8 * src.udtype.itemsize)
    bias_bits = ((src.bias - fmt.bias) << src.mant) % width  # subtracted modulo the width
    if sh and fmt.ties == "even":  # add_rounding's ties-to-even addend, less the bias difference
        np.right_shift(b, U(sh), out=r)
        r &= U(1)  # the kept part's lowest bit
        r += b
        r += U(((1 << (sh - 1)) - 1 - bias_bits) % width)
    else:
        add_rounding(plan, b, r, None, NUMPY_WORDS)
        r -= U(bias_bits)
    if sh:
        r >>= U(sh)  # the truncation and the shift to the mantissa field at once
    np.copyto(codes, r, casting="unsafe")  # modulo 256: the sign bit falls outside
    # the sign bit: 0/1 bytes times 2**(E + M) (a multiplication: NumPy has no vector 8-bit shift)
    sgn = np.greater_equal(b, U(1 << (8 * src.udtype.itemsize - 1)),
                           out=ubuf.view(np.uint8)[:b.size])
    sgn *= np.uint8(1 << (fmt.exponent_bits + fmt.mantissa_bits))
    codes |= sgn
    t = np.left_shift(b, U(1), out=ubuf[:b.size])  # magnitude bits, doubled
    idx = np.flatnonzero(t < U(plan.minnorm << 1))
    return (idx, y[idx], None) if idx.size else None


def int_codes(plan, y: np.ndarray, codes: np.ndarray, cbuf: np.ndarray) -> None:
    """:func:`ecosim.core.rounding_codes.code_kernel` (RTN) of ``y`` into one-byte ``codes`` for an
    integer grid, under :func:`int_rtn`'s bound: ``rint`` needs no clip and no value is NaN;
    the two's complement byte, masked to the storage bits. Returns None (no candidates)."""
    fmt = plan.fmt
    c = np.rint(y, out=cbuf[:y.size])
    np.copyto(codes.view(np.int8), c, casting="unsafe")
    if fmt.storage_bits < 8:
        codes &= np.uint8((1 << fmt.storage_bits) - 1)
    return None


def rows_rtn(plan, X2: np.ndarray, s2: np.ndarray, out2: np.ndarray, i0: int, i1: int,
             bufs: tuple, no_over: bool, pending: list | None = None) -> None:
    """Rows ``i0..i1-1`` of ``X2`` rounded (RTN) on the grid of their scales, chunk by chunk:
    ``out2 = fl(s2 * Q(X2 / s2))``, or with ``pending`` a list, the codes of ``Q(X2 / s2)``
    (``out2`` then flat, ``plan.fmt.code_dtype``) and the candidates of the code kernel
    appended to ``pending`` as ``(flat indices, inputs, None)``, to be coded by the caller.

    ``X2``: ``(R, C)`` in the working dtype; ``s2``: ``(R, 1)`` row scales; ``bufs``:
    ``(ybuf, cbuf, ubuf, sbuf)``, chunk-sized scratch (``sbuf`` holds the expanded scales of
    short rows); ``no_over``: the caller checked that no quotient can round past the grid (nor
    is NaN). Then a plan that :func:`fast_rtn_ok` accepts rounds by :func:`signed_float_rtn`,
    :func:`int_rtn` or :func:`signed_float_codes`, any other by the kernels of
    :mod:`ecosim.core.rounding`. The division and the product are the general path's, operand for
    operand.
    """
    ybuf, cbuf, ubuf, sbuf = bufs
    C = X2.shape[1]
    k = max(1, CHUNK // C)
    expand = C < _EXPAND_BELOW
    is_float = plan.fmt.is_float
    fast = no_over and fast_rtn_ok(plan)
    codes_out = pending is not None
    small = []  # fast float values: inputs below the smallest normal, rounded at the end
    if codes_out and fast:
        fast = fast_codes_ok(plan) if is_float else plan.fmt.code_dtype.itemsize == 1
    for a in range(i0, i1, k):
        b = min(a + k, i1)
        xc = X2[a:b]
        n = xc.size
        sc = s2[a:b]
        if expand:  # one scale per element: contiguous operands for both products
            sc = sbuf[:n].reshape(xc.shape)
            np.copyto(sc, s2[a:b])
        y = np.divide(xc, sc, out=ybuf[:n].reshape(xc.shape)).reshape(-1)
        if codes_out:
            lo = a * C
            codes = out2[lo:lo + n]
            if not fast:
                p = code_kernel(plan, y, codes, None, no_over=no_over, defer=True)
            elif is_float:
                p = signed_float_codes(plan, y, codes, ubuf, cbuf.view(ubuf.dtype))
            else:
                p = int_codes(plan, y, codes, cbuf)
            if p is not None:
                pending.append((p[0] + lo, p[1], p[2]))
            continue
        c = cbuf[:n]
        if not fast:
            round_kernel(plan, y, c, None, no_over=no_over)
        elif is_float:
            p = signed_float_rtn(plan, y, c, ubuf, defer=True)
            if p is not None:
                small.append((p[0] + a * C, p[1]))
        else:
            int_rtn(y, c)
        np.multiply(c.reshape(xc.shape), sc, out=out2[a:b])
    if small:  # the inputs below the smallest normal, rounded at once: s * code as above
        idx = np.concatenate([p[0] for p in small])
        vals = small_bits(plan, np.concatenate([p[1] for p in small])).view(out2.dtype)
        out2.reshape(-1)[idx] = vals * s2.reshape(-1)[idx // C]


def fused_rows(plan, X2: np.ndarray, s2: np.ndarray, scales_of, tiny, codes=None):
    """RTN of ``X2`` (``(R, C)``, float32 or float64, ``0 < C <= CHUNK``) with absmax scales per
    row, the scales written into ``s2`` (``(R, 1)``): ``(values, None)``, the rounded values
    ``(R, C)``, or with ``codes`` (flat, ``plan.fmt.code_dtype``, at least ``R * C``) the codes
    written there and ``(codes, pending)``, the code kernel's candidates as :func:`rows_rtn`
    lists them. None when a row holds NaN or inf (the caller raises).

    Rows go in groups of 8 chunks: the group's maxima (:func:`row_absmax`), its scales
    ``scales_of(amax, dtype, tiny)`` in one call, the bound that decides ``no_over`` (the
    largest quotient ``amax / s`` of the group: division is monotone), then :func:`rows_rtn`.
    """
    R, C = X2.shape
    dt = X2.dtype
    fmt = plan.fmt
    k = max(1, CHUNK // C)
    m = min(R, k) * C
    bufs = (np.empty(m, dt), np.empty(m, dt), np.empty(m, plan.src.udtype), np.empty(m, dt))
    pending = None if codes is None else []
    out = np.empty((R, C), dt) if codes is None else codes
    amax, amin = np.empty((R, 1), dt), np.empty((R, 1), dt)
    if fmt.is_float:  # no |y| up to the value of bits plan.hi rounds past max
        hi = np.array(plan.hi, plan.src.udtype).view(dt)[()]
    else:  # no |y| below int_max + 1/2 (and -int_min + 1/2) rounds past the grid
        lim = dt.type(min(fmt.int_max, -fmt.int_min) + 0.5)
    step = _GROUP * k
    for g0 in range(0, R, step):
        g1 = min(g0 + step, R)
        row_absmax(X2, g0, g1, amax, bufs[2], amin)
        am = amax[g0:g1]
        if not np.isfinite(am).all():
            return None
        sg = s2[g0:g1] = scales_of(am, dt, tiny)
        top = (am / sg).max()
        no_over = bool(top <= hi) if fmt.is_float else bool(top < lim)
        rows_rtn(plan, X2, s2, out, g0, g1, bufs, no_over, pending)
    return out, pending


def code_pending(plan, codes: np.ndarray, pending: list) -> None:
    """Code the candidates that chunks of the code kernel set aside (``pending``: their
    ``(flat indices, inputs, random words or None)``) into ``codes``, all in one call."""
    if pending:
        idx, xs, rs = (np.concatenate(p) if p[0] is not None else None for p in zip(*pending))
        codes[idx] = candidate_codes(plan, xs, rs)
