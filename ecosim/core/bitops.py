"""Bit-level rules written once for NumPy and torch: the random-bit mixer and the rounding.

Each rule here is a function of arrays and a *word shim*, a small object that supplies what
the array-API standard leaves out or that the two libraries spell differently: a logical right
shift into a buffer, a constant of the word type, and the extraction of a field of random words.
The rules use only what both libraries share besides: in-place ``^=``, ``&=``, ``+=``, ``*=``,
``<<=`` and ``>>=`` with wrap-around modulo the word width. :data:`NUMPY_WORDS` is NumPy's shim
(unsigned words: ``uint32`` or ``uint64``); ``ecosim.torch.bitops.TORCH_WORDS`` is torch's
(``int32`` or ``int64`` words holding the two's complement of the unsigned bits, since torch
has no usable unsigned arithmetic). The same rule run through either shim gives the same bits,
which is what the NumPy/torch bit-identity tests check.

A shim has:

- ``shr(x, s, out)``: the logical right shift of the words ``x`` by ``s`` bits, into ``out``.
- ``word(v, like)``: the Python int ``v`` (taken modulo the word width) as a constant of the
  words ``like`` (a scalar, or NumPy's read-only 0-d array), ready for in-place arithmetic.
- ``add(x, v, out)``: the words ``x`` plus the Python int ``v`` (modulo the width), into ``out``.
- ``peak(x)``: the largest of the words ``x``, which are below the sign bit, as a Python int
  (-1 when ``x`` is empty).
- ``fill(x, mask, v)``: set the words of ``x`` where ``mask`` holds to the Python int ``v``.
- ``field(words, lo, n, out)``: bits ``lo .. lo+n-1`` of ``words`` (random words of any
  integer dtype, or the rounded bits themselves; a signed word's bits are its two's
  complement), as the words of ``out``, written there.

The rules of :mod:`ecosim.core.gridrules` (uniform grids: below the smallest normal, integer
formats) also use ``xp`` (the array library), ``clip``, ``cast``, ``int64``, ``float64``,
``floats``, ``float_const`` and ``select``, which that module describes.

Used by :mod:`ecosim.core.rng` and :mod:`ecosim.core.rounding` and by their torch counterparts.
"""

from __future__ import annotations

import numpy as np

__all__ = ["NumpyWords", "NUMPY_WORDS", "mix32", "hash_block", "add_rounding",
           "round_bits", "nan_words", "finish_bits", "M32A", "M32B"]

#: lowbias32's two multipliers (C. Wellons' hash-prospector).
M32A, M32B = 0x7FEB352D, 0x846CA68B


# Word constants by width in bytes, then value: a dict lookup costs less than building the NumPy
# constant (the rules take a few dozen constants per call, and small calls are overhead-bound).
_WORDS: dict = {4: {}, 8: {}}
_WORD_TYPES = {4: np.uint32, 8: np.uint64}
_WORDS_MAX = 4096  # per width: keys and counters bring new values, so the memo is cleared
_right_shift, _add = np.right_shift, np.add


def _np_word(v: int, itemsize: int):
    """``v`` modulo the width as a read-only 0-d NumPy array of unsigned words of ``itemsize``
    bytes (4 or 8).

    A 0-d array rather than a NumPy scalar: as an operand of a ufunc on an array of words it
    gives the same words (same dtype, same promotion), and NumPy 2 handles it with less
    per-call overhead (a scalar is converted to an array on every call).
    """
    memo = _WORDS[itemsize]
    w = memo.get(v)
    if w is None:
        if len(memo) >= _WORDS_MAX:
            memo.clear()
        w = memo[v] = np.array(v & ((1 << (8 * itemsize)) - 1), _WORD_TYPES[itemsize])
        w.flags.writeable = False
    return w


class NumpyWords:
    """The word shim of NumPy: unsigned words (``uint32`` or ``uint64``), whose right shift is
    already logical.

    The memo of constants is read in each method itself (:func:`_np_word` fills it): the rules
    call the shim a few dozen times per call on arrays of a few hundred words, where a Python
    call costs as much as the arithmetic.
    """

    @staticmethod
    def shr(x: np.ndarray, s: int, out: np.ndarray) -> None:
        w = _WORDS[x.itemsize].get(s)
        _right_shift(x, _np_word(s, x.itemsize) if w is None else w, out=out)

    @staticmethod
    def word(v: int, like: np.ndarray):
        w = _WORDS[like.itemsize].get(v)
        return _np_word(v, like.itemsize) if w is None else w

    @staticmethod
    def add(x: np.ndarray, v: int, out: np.ndarray) -> None:
        w = _WORDS[x.itemsize].get(v)
        _add(x, _np_word(v, x.itemsize) if w is None else w, out=out)

    @staticmethod
    def peak(x: np.ndarray) -> int:
        return int(np.maximum.reduce(x)) if x.size else -1

    @staticmethod
    def fill(x: np.ndarray, mask: np.ndarray, v: int) -> None:
        x[mask] = _np_word(v, x.itemsize)

    xp = np

    @staticmethod
    def clip(x: np.ndarray, lo, hi, out=None) -> np.ndarray:
        if lo is not None:
            x = np.maximum(x, lo, out=out)
        if hi is not None:
            x = np.minimum(x, hi, out=out)
        return x

    int64, float64 = np.dtype(np.int64), np.dtype(np.float64)
    floats = {np.dtype(np.uint32): np.dtype(np.float32), np.dtype(np.uint64): float64}

    @staticmethod
    def cast(x: np.ndarray, dtype) -> np.ndarray:
        return x.astype(dtype)

    @staticmethod
    def float_const(v: float, like: np.ndarray):
        return like.dtype.type(v)

    @staticmethod
    def select(cond: np.ndarray, a, b: np.ndarray, out: np.ndarray) -> None:
        np.copyto(out, b)
        np.copyto(out, a, where=cond)

    @staticmethod
    def field(words: np.ndarray, lo: int, n: int, out: np.ndarray) -> None:
        if words.dtype != out.dtype:
            words = words.astype(out.dtype)  # non-negative words: only low bits are read
        np.right_shift(words, _np_word(lo, out.itemsize), out=out)
        if lo + n < 8 * out.itemsize:
            out &= _np_word((1 << n) - 1, out.itemsize)


#: NumPy's word shim.
NUMPY_WORDS = NumpyWords()


def mix32(x, t, ops) -> None:
    """lowbias32 (C. Wellons' xorshift-multiply integer hash), in place on 32-bit words ``x``.

    ``t`` is scratch space like ``x``; ``ops`` the word shim.
    """
    ops.shr(x, 16, t)
    x ^= t
    x *= ops.word(M32A, x)
    ops.shr(x, 15, t)
    x ^= t
    x *= ops.word(M32B, x)
    ops.shr(x, 16, t)
    x ^= t


def hash_block(x, base, lo: int, k0: int, k1: int, t, ops) -> None:
    """The random words of ``x.size`` consecutive counters with low words ``lo, lo+1, ...`` (no
    wrap) under the key words ``k0`` and ``k1`` (the latter already mixed with the high counter
    word): ``mix32(mix32(lo + i ^ k0) ^ k1)``, into the 32-bit words ``x``.

    ``base`` holds ``0, 1, ...`` (at least ``x``'s size) and ``t`` is scratch like ``x``. The
    words of ``x`` are of the shim's kind (:mod:`ecosim.core.rng` gives the construction).
    """
    ops.add(base[:x.shape[0]], lo, x)
    x ^= ops.word(k0, x)
    mix32(x, t, ops)
    x ^= ops.word(k1, x)
    mix32(x, t, ops)


def add_rounding(plan, a, r, rbits, ops) -> None:
    """Write into ``r`` the bits ``a`` plus what rounds them when ``plan.sh`` low bits are
    dropped: truncating ``r`` afterwards gives the rounded magnitude (a carry out of the dropped
    bits is the step up, and it carries into the exponent). What is added is the mode's
    (:meth:`ecosim.core.rounding_modes.ModeRule.addend`: half a step for RTN, the scaled random word
    for SR).

    ``a`` is magnitude bits, or the bits with their sign where the caller knows no carry reaches
    the sign bit; ``r`` is a distinct buffer of the same words.
    """
    plan.rule.addend(plan, a, r, rbits, ops)


def round_bits(plan, a, r, rbits, ops) -> None:
    """:func:`add_rounding` and the truncation of the ``plan.sh`` dropped bits: ``r`` holds the
    rounded bits (the carry goes into the exponent; overflow past max is not handled here)."""
    add_rounding(plan, a, r, rbits, ops)
    if plan.sh:
        r &= ops.word(~((1 << plan.sh) - 1), r)


def nan_words(plan) -> tuple[int, int]:
    """The whole bit patterns (unsigned, sign included) of what a NaN input (or a NaN
    overflow) becomes in the working float, for a positive and for a negative input.

    A quiet NaN with the input's sign; fnuz formats have one NaN (the sign bit set, as
    ``ml_dtypes``), unsigned formats the positive one; a format without NaN, not saturating,
    gives a zero of the opposite sign (what an ``ml_dtypes`` cast does).
    """
    fmt, src = plan.fmt, plan.src
    signbit = 1 << (8 * src.udtype.itemsize - 1)
    qnan = plan.infbits | (1 << (src.mant - 1))
    if fmt.nan == "none" and not plan.saturate:
        return signbit, 0
    if fmt.nan == "fnuz":
        return qnan | signbit, qnan | signbit
    if not fmt.signed:
        return qnan, qnan
    return qnan, qnan | signbit


def finish_bits(plan, sign, a, r, ops, no_over: bool = False) -> None:
    """The rules after rounding, in place on the rounded magnitude bits ``r``: overflow, the
    sign, negative zero and NaN, for inputs of magnitude bits ``a`` and sign bits ``sign``.

    Past max after rounding (inf and NaN inputs land there too): ``+-max`` when saturating or
    when the format has no NaN (and a finite input under a mode whose overflow goes to max,
    :attr:`ecosim.core.rounding_modes.ModeRule.overflow_to_max`), inf where it has one, NaN
    otherwise. The sign goes back on
    (fnuz formats have no -0). NaN inputs, and for an unsigned format negatives and zero, take
    :func:`nan_words`. ``sign`` is overwritten. ``no_over``: the caller knows that nothing
    rounds past max and no input is NaN (the overflow test is skipped).
    """
    fmt = plan.fmt
    special = None  # results that are whole bit patterns (sign included): NaN
    if not no_over and ops.peak(r) > plan.maxbits:
        over = r > ops.word(plan.maxbits, r)
        special = a > ops.word(plan.infbits, a)  # NaN inputs
        if plan.saturate or fmt.nan == "none":
            ops.fill(r, over, plan.maxbits)
        else:
            if plan.rule.overflow_to_max:  # a finite overflow clamps; an infinity goes on
                finite = a < ops.word(plan.infbits, a)
                ops.fill(r, over & finite, plan.maxbits)
                over &= ~finite
            if fmt.has_inf:
                ops.fill(r, over, plan.infbits)
            else:
                special |= over
    neg = None
    if not fmt.signed or (fmt.nan != "fnuz" and special is not None):
        neg = sign != 0
    if not fmt.signed:
        unsigned_nan = neg | (a == 0)  # no sign, no zero: NaN as ml_dtypes gives
        special = unsigned_nan if special is None else special | unsigned_nan
    if fmt.nan == "fnuz":
        ops.fill(sign, r == 0, 0)  # no negative zero
    r |= sign
    if special is not None and special.any():
        pos, negw = nan_words(plan)
        if pos == negw:
            ops.fill(r, special, pos)
        else:
            ops.fill(r, special & neg, negw)
            ops.fill(r, special & ~neg, pos)
