"""Rounding onto uniform grids, written once for NumPy and torch: inputs below a float format's
smallest normal, and the integer formats.

Like :mod:`ecosim.core.bitops`, each rule is a function of arrays and a shim; here the shim also
names the array library (``ops.xp``: ``numpy`` or ``torch``, of which the rules use only what
both spell alike: ``where``, ``abs``, ``floor``, ``round``, ``fmin``, ``copysign``, ``isnan``
and the operators) and supplies what the two spell differently (or NumPy does slowly):

- ``clip(x, lo, hi, out=None)``: ``x`` clamped to ``[lo, hi]`` (Python numbers; ``None``: no
  bound), into ``out`` when given (NumPy's ``clip`` costs ten ufunc calls on small arrays).
- ``cast(x, dtype)``: ``x`` converted to ``dtype`` (integers to a narrower or signed type wrap,
  keeping their low bits; the rules never write into the result), with ``int64`` and
  ``float64`` the library's dtypes and ``floats`` mapping the 32- and 64-bit words to the
  working float of their width.
- ``float_const(v, like)``: the Python float ``v`` as a constant of ``like``'s float dtype.
- ``select(cond, a, b, out)``: ``a`` where ``cond`` holds, else ``b``, written into ``out``.

:data:`ecosim.core.bitops.NUMPY_WORDS` and ``ecosim.torch.bitops.TORCH_WORDS`` carry these. Below
the smallest normal everything is done in int64 on integer significands (no power-of-two scaling of
subnormals, so no flush-to-zero mode of a device can change a result); the integer grids round
with float operations that are exact (a clamp first, then ``floor`` or ``2**S`` addition).
NumPy's float paths (``ecosim.core.rounding``) and torch's CPU paths (``ecosim.torch.rounding``)
that are faster on their hot paths are tested bit-equal to these rules.
"""

from __future__ import annotations

__all__ = ["ilog2", "pow2_bits", "small_values", "uniform_small_values", "int_grid_bits"]


def _f64_bits(n, ops):
    """The bits, as int64, of the int64 values ``n`` converted to float64."""
    return ops.cast(n, ops.float64).view(ops.int64)


def ilog2(v, ops):
    """floor(log2 v) for int64 ``0 < v <= 2**53`` (exact: the value converts to float64 exactly)."""
    return (_f64_bits(v, ops) >> 52) - 1023


def pow2_bits(n, e, src, ops):
    """int64 bits, in the working float ``src``, of the exact value ``n * 2**e``.

    ``n`` is an int64 array with ``0 <= n <= 2**53``; ``e`` an int or an int64 array; the
    value must be representable (a normal or a subnormal of ``src``, or zero).
    """
    xp, S = ops.xp, src.mant
    nf = _f64_bits(n, ops)  # exact: n <= 2**53
    top = (nf >> 52) - 1023 + e  # exponent of the result
    mant = (nf & ((1 << 52) - 1)) >> (52 - S)  # exact: the value has at most S + 1 bits
    normal = (top >= src.emin) & (n > 0)
    normal_bits = (ops.clip(top + src.bias, 0, None) << S) | mant
    # Subnormal results are n * 2**(e - (emin - S)) units of the smallest subnormal.
    shift = e - (src.emin - S)
    shift = min(max(shift, 0), 62) if isinstance(shift, int) else ops.clip(shift, 0, 62)
    return xp.where(normal, normal_bits, n << shift)


def small_values(plan, a, rbits, ops):
    """int64 bits of the rounded magnitudes of the int64 magnitude bits ``a`` below
    ``plan.minnorm`` (``rbits``: their random words, for SR; only the low ``nbits`` are read).

    These are the format's subnormals (a uniform step ``2**(emin - M)``), its flush-to-zero gap,
    or, where the format reaches below the working dtype's normals (E8M0 in float32), normal
    binades of the format whose inputs are subnormal in the working dtype. In integers:
    ``|x| = sig * 2**ex`` exactly, the grid step is ``2**qexp``, and ``|x| / step`` splits into
    a floor and a remainder by a shift of ``d = qexp - ex`` bits, so the mode decides from exact
    integers (:meth:`ecosim.core.rounding_modes.ModeRule.count`: RTN ties to even, or away for
    formats that say so; SR ``r + t >= 2**nbits``, ``t`` the floor or the nearest of
    ``p * 2**nbits``).
    """
    xp, fmt, src = ops.xp, plan.fmt, plan.src
    S = src.mant
    E = a >> S
    if plan.uniform_small and S == 23 and plan.sr_rule == "floor":
        return uniform_small_values(plan, a, E, rbits, ops)
    m = a & ((1 << S) - 1)
    normal = E > 0
    sig = xp.where(normal, m | (1 << S), m)  # < 2**(S+1) <= 2**53
    ex = xp.where(normal, E - (src.bias + S), src.emin - S)
    # floor(log2 |x|); -1 for zero, as NumPy's frexp(0)[1] - 1.
    e = xp.where(normal, E - src.bias, ilog2(ops.clip(m, 1, None), ops) + (src.emin - S))
    e = xp.where(sig == 0, -1, e)
    qexp = xp.where(e >= fmt.emin, e - fmt.mantissa_bits, plan.qexp)
    d = qexp - ex  # |x| / 2**qexp = sig / 2**d
    dpos = ops.clip(d, 0, 62)  # sig < 2**54: a shift of 62 already leaves nothing
    dneg = ops.clip(-d, 0, 62)
    pos = d > 0
    fl = xp.where(pos, sig >> dpos, sig << dneg)  # d <= 0 only for values < 2**(M+1) steps
    rem = xp.where(pos, sig & ((1 << dpos) - 1), 0)
    n = plan.rule.count(plan, fl, rem, d, rbits, ops)
    if not fmt.has_zero:
        n = ops.clip(n, 1, None)  # nothing below the smallest value (ml_dtypes maps it there)
    return pow2_bits(n, qexp, src, ops)


def uniform_small_values(plan, a, E, rbits, ops):
    """:func:`small_values` where every input shares the step ``2**qexp`` (float32 work;
    ``E = a >> 23``).

    With ``|x| = sig * 2**ex`` and ``d = qexp - ex >= 1``, the count of steps is ``sig`` with
    ``d`` bits dropped, rounded by the mode (:meth:`ecosim.core.rounding_modes.ModeRule.count`).
    ``d`` is clamped at 62: ``sig < 2**24``, so every count past that shift is 0 either way.
    """
    xp, src = ops.xp, plan.src
    S = src.mant
    sig = (a & ((1 << S) - 1)) | (ops.clip(E, None, 1) << S)  # the implicit bit of normals
    d = ops.clip(plan.qexp + src.bias + S - ops.clip(E, 1, None), None, 62)  # ex = max(E,1)-bias-S
    # the count of steps: sig with d bits dropped (the remainder is exact: d <= 62 bits)
    rem = sig & ((1 << ops.clip(d, 0, None)) - 1)
    n = plan.rule.count(plan, sig >> d, rem, d, rbits, ops)
    return pow2_bits(n, plan.qexp, src, ops)


def int_grid_bits(plan, b, out, rbits, ops) -> None:
    """Into ``out``: the bits (of ``b``'s dtype) of the working-float values of bits ``b``
    rounded onto the integer grid ``[int_min, int_max]`` with step 1 (``rbits``: random words,
    for SR).

    Beyond the range everything clamps anyway, so ``|x|`` is clamped first: ``fmin`` also
    sends inf and NaN to a finite value, and every later step is exact. The mode rounds the
    clamped magnitudes (:meth:`ecosim.core.rounding_modes.ModeRule.on_step_one`: RTN ties to even,
    by adding ``2**S`` where that is exact; SR the floor plus one iff ``r + t >= 2**nbits``).
    The sign goes back on, ``-0`` becomes ``+0``
    and a NaN input gives its own bits, quieted (what NumPy's float ops return).
    """
    xp, fmt, src = ops.xp, plan.fmt, plan.src
    x = b.view(ops.floats[b.dtype])
    lim = float(max(fmt.int_max, -fmt.int_min))
    y = xp.fmin(xp.abs(x), ops.float_const(lim, x))
    n = plan.rule.on_step_one(plan, y, rbits, ops)
    xp.copysign(n, x, out=n)
    ops.clip(n, fmt.int_min, fmt.int_max, n)
    n += 0.0  # integer grids have no -0
    quiet = 1 << (src.mant - 1)
    ops.select(xp.isnan(x), b | ops.word(quiet, b), n.view(b.dtype), out)
