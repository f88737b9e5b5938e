"""Round-to-nearest and stochastic rounding onto a format's grid, exactly, with integer bit ops.

:func:`quantize` never goes through an intermediate precision. For a float format with ``M``
mantissa bits and an input with ``S`` (23 for float32, 52 for float64), every input whose
magnitude is at least the format's smallest normal is rounded on its own bit pattern: the low
``S - M`` bits are the exact fraction ``p`` between the two neighbours, and adding a carry to the
kept bits is exactly "go to the next representable value" (it carries into the exponent);
that rule is :func:`ecosim.core.bitops.round_bits`, which the torch backend runs as well.
Inputs below the smallest normal lie on a uniform grid of step ``2**(emin - M)`` and integer
formats on one of step 1: both rules are written once for NumPy and torch in
:mod:`ecosim.core.gridrules`; NumPy's faster float paths for the common cases (one subnormal step,
finite integer-grid inputs) are tested bit-equal to them.

Work is done in cache-sized chunks (every temporary stays in L2), which is what makes the exact
path also fast. There is no thread pool over the chunks: on two cores it is slower than one
thread (GIL hand-offs between the short NumPy calls cost more than the second core gives).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from . import gridrules, rng
from .bitops import NUMPY_WORDS, finish_bits, round_bits
from .checks import native
from .formats import Format, get
from .rounding_modes import MODES, SR_RULES, ModeRule, Rounding

__all__ = ["quantize", "MODES", "SR_RULES", "Rounding"]
CHUNK = 1 << 15  # elements: 128 KiB per float32 temporary
#: The modes NumPy's faster paths below the smallest normal and on integer grids serve; every
#: other mode takes the rules of ecosim.core.gridrules.
_FAST_MODES = ("rtn", "sr")


@dataclass(frozen=True)
class _Src:
    """Bit layout of a working float dtype."""

    dtype: np.dtype
    udtype: np.dtype
    mant: int  # S
    bias: int
    emin: int  # smallest normal exponent
    emax: int


_F32 = _Src(np.dtype(np.float32), np.dtype(np.uint32), 23, 127, -126, 127)
_F64 = _Src(np.dtype(np.float64), np.dtype(np.uint64), 52, 1023, -1022, 1023)
_F16 = _Src(np.dtype(np.float16), np.dtype(np.uint16), 10, 15, -14, 15)


def _bf16_src():
    import ml_dtypes

    return _Src(np.dtype(ml_dtypes.bfloat16), np.dtype(np.uint16), 7, 127, -126, 127)


def _src_for(dtype: np.dtype) -> _Src:
    if dtype == np.float32:
        return _F32
    if dtype == np.float64:
        return _F64
    if dtype == np.float16:
        return _F16
    if dtype.name == "bfloat16":
        return _bf16_src()
    raise TypeError(f"expected a floating-point array (float16, bfloat16, float32 or float64), "
                    f"got dtype {dtype}")


def _representable(fmt: Format, src: _Src) -> bool:
    """Whether every finite value of ``fmt`` is exactly a value of ``src``."""
    if not fmt.is_float:
        return max(fmt.int_max, -fmt.int_min) <= 2 ** (src.mant + 1)
    low = fmt.emin - (fmt.mantissa_bits if fmt.subnormals else 0)
    return (fmt.mantissa_bits <= src.mant and low >= src.emin - src.mant
            and fmt.emax <= src.emax)


@dataclass(frozen=True)
class Plan:
    """Constants of one (format, working dtype, rounding) combination.

    ``rule``, ``mode``, ``stochastic``, ``nbits``, ``sr_rule`` and ``saturate`` are the
    rounding's, held as plain fields for the kernels.
    """

    fmt: Format
    src: _Src
    rounding: Rounding
    rule: ModeRule
    mode: str
    stochastic: bool
    nbits: int
    sr_rule: str
    saturate: bool
    sh: int = 0  # S - M: low bits dropped in the normal range
    minnorm: int = 0  # bits of 2**max(emin, working emin): below it, small_magnitudes
    maxbits: int = 0  # bits of the largest finite value
    infbits: int = 0  # bits of +inf in the working dtype
    qexp: int = 0  # exponent of the uniform step below the smallest normal
    hi: int = 0  # largest magnitude bits that cannot round past max (see _float_code_kernel)
    uniform_small: bool = False  # below minnorm: one subnormal step (see _uniform_small)


@lru_cache(maxsize=256)
def _plan(fmt: Format, work: np.dtype, rounding: Rounding) -> Plan:
    src = _src_for(work)
    if not _representable(fmt, src):
        raise ValueError(f"{fmt.name} values are not all representable in {work}; "
                         "pass float64 input")
    rule = rounding.rule
    of_rounding = (rounding, rule, rounding.mode, rule.stochastic, rounding.nbits,
                   rounding.sr_rule, rounding.saturate)
    if not fmt.is_float:
        return Plan(fmt, src, *of_rounding)
    S, M = src.mant, fmt.mantissa_bits
    bits_of = lambda v: int(np.array(v, work).view(src.udtype))  # noqa: E731
    qexp = fmt.emin - M if fmt.subnormals else fmt.emin
    maxbits = bits_of(fmt.max)
    return Plan(fmt, src, *of_rounding, sh=S - M,
                 minnorm=bits_of(math.ldexp(1.0, max(fmt.emin, src.emin))), maxbits=maxbits,
                 infbits=bits_of(np.inf), qexp=qexp,
                 hi=maxbits + (rule.headroom(S - M) if S > M else 0),
                 uniform_small=(fmt.subnormals and fmt.has_zero and fmt.signed
                                and fmt.ties == "even" and fmt.emin >= src.emin
                                and -qexp <= src.emax))


def quantize(x, fmt: Format | str, mode: str | Rounding = "rtn", *, rbits=None, nbits: int = 32,
             key=None, saturate: bool = True, sr_rule: str = "floor") -> np.ndarray:
    """Round ``x`` onto the grid of ``fmt``.

    Args:
        x: float16, bfloat16, float32 or float64 array (Python floats become float64), in
            either byte order (a byte-swapped array is read as its values; the result is in the
            machine's byte order).
        fmt: a :class:`~ecosim.core.formats.Format` or a name (``"e4m3"``, ``"bf16"``, ``"int4"``).
        mode: ``"rtn"``, round to nearest, ties to the neighbour with an even code (ties away
            from zero for formats that say so: E8M0), computed from the exact input value; or
            ``"sr"``, stochastic rounding: with ``p`` the position of ``|x|`` between its two
            neighbours ``lo < hi`` and ``r`` the low ``nbits`` of the random bits, the magnitude
            goes to ``hi`` iff ``r + floor(p * 2**nbits) >= 2**nbits``. Exactly
            ``floor(p * 2**nbits)`` of the ``2**nbits`` values of ``r`` round up (the default
            ``sr_rule="floor"``).
        rbits: random bits for SR, an integer array of ``x``'s shape (unsigned, or signed with
            non-negative values); only the low ``nbits`` of each word are used.
        nbits: how many low bits of each random word SR uses (1..32).
        key: instead of ``rbits``: an int, or ``(key, counter)``; element ``i`` (C order) uses
            the bits of counter ``counter + i`` from :mod:`ecosim.core.rng`.
        saturate: a bool. True (the training default): finite values and infinities beyond the range
            clamp to +-max; NaN stays NaN (NaN is on no grid: it propagates). False: the
            format's own rules, exactly as an ``ml_dtypes`` cast gives them for float32 input
            (overflow to inf or NaN, or to +-max for FP6/FP4, which also map NaN to a zero).
        sr_rule: for ``mode="sr"``, how ``p`` becomes a count of rounding-up words.
            ``"floor"`` (default): ``t = floor(p * 2**nbits)``, biased toward zero by up to
            ``2**-nbits`` of a step (about ``2**-(nbits+1)`` on average) when ``p`` has more than
            ``nbits`` bits. ``"nearest"``: ``t = p * 2**nbits`` rounded to nearest, ties to even
            (``t`` may be ``2**nbits``: always up); the error of ``t`` is then at most half a
            unit and averages out, so SR is nearly unbiased (gfloat's ``RoundMode.Stochastic``;
            ``"floor"`` is its ``StochasticFastest``). Either way the magnitude goes up iff
            ``r + t >= 2**nbits``; with ``nbits >= `` the bits of ``p`` the rules agree.

    ``mode`` may be any name of :data:`~ecosim.core.rounding_modes.MODES` (each mode's rule is
    described there), or a :class:`~ecosim.core.rounding_modes.Rounding`, which then carries
    ``nbits``, ``sr_rule`` and ``saturate`` itself.

    Returns:
        An array of ``x``'s dtype (native byte order) and shape whose values lie on the grid. Signed zeros keep
        their sign where the format has -0 (not fnuz formats, not integer grids). Integer
        formats require ``saturate=True``; an unsigned E8M0 maps zero and negatives to NaN and
        values below its smallest value to that value (as ``ml_dtypes``).

    Example:
        >>> import numpy as np
        >>> quantize(np.array([1.0625, 1.1875, 500.0], np.float32), "e4m3")
        array([  1.  ,   1.25, 448.  ], dtype=float32)
    """
    arr, plan = _checked(x, fmt, mode, nbits, saturate, sr_rule)
    out_dtype = arr.dtype
    sr = plan.stochastic
    work = plan.src.dtype
    xw = np.ascontiguousarray(arr, dtype=work).reshape(-1)
    bits_src = None
    if sr:
        bits_src = random_source(arr.shape, rbits, key)
    elif rbits is not None or key is not None:
        raise ValueError("rbits and key are for mode='sr'")
    out = np.empty(xw.size, work)
    _run_chunks(plan, xw, out, bits_src)
    out = out.reshape(arr.shape)
    return out if out_dtype == work else out.astype(out_dtype)


# Plans of argument combinations that passed the checks, keyed by the arguments themselves (a
# format by identity: the entry holds it, so its id is not reused while the entry lives). On
# arrays of a few thousand elements the checks cost as much as the rounding: each combination
# is checked once. Only exact types are keyed (``True == 1``, and a bool is not a valid nbits).
_CHECKED: dict = {}
_CHECKED_MAX = 1024


def _remember(key, value):
    if len(_CHECKED) >= _CHECKED_MAX:
        _CHECKED.clear()
    _CHECKED[key] = value
    return value


def _checked(x, fmt, mode, nbits, saturate, sr_rule) -> tuple[np.ndarray, Plan]:
    """:func:`quantize`'s checks, in its order: ``(x as a native array, plan)``."""
    exact = (type(x) is np.ndarray and type(mode) in (str, Rounding) and type(nbits) is int
             and type(saturate) is bool and type(sr_rule) is str)
    if exact:
        key = ("quantize", fmt if type(fmt) is str else id(fmt), x.dtype, mode, nbits,
               saturate, sr_rule)
        hit = _CHECKED.get(key)
        if hit is not None and (type(fmt) is str or hit[0] is fmt):
            return x, hit[1]  # only native dtypes are keys: x needs no conversion
    f = get(fmt)
    rounding = Rounding.of(mode, nbits, sr_rule, saturate)
    arr = np.asarray(x)
    if arr.dtype.kind != "f" and arr.dtype.name != "bfloat16":
        raise TypeError(f"expected a floating-point array (float16, bfloat16, float32 or "
                        f"float64), got dtype {arr.dtype}")
    arr = native(arr)  # dtype dispatch compares dtypes, and ">f4" != float32
    plan = prepare(f, arr.dtype, rounding)
    if exact and arr is x:
        _remember(key, (fmt, plan))
    return arr, plan


def prepare(fmt: Format, out_dtype: np.dtype, rounding: Rounding, *, shown=None) -> Plan:
    """The plan of ``rounding`` onto ``fmt`` for an input of (native) ``out_dtype``, after the
    checks that need the format and the dtype: every value of ``fmt`` is one of ``out_dtype``
    (``shown``: the dtype the message names, a torch dtype for the torch backend), and an
    integer format saturates.

    The plan works in float64 for float64 input and in float32 otherwise.
    """
    key = ("prepare", id(fmt), out_dtype, rounding)
    hit = _CHECKED.get(key)
    if hit is not None and hit[0] is fmt:
        return hit[1]
    if not _representable(fmt, _src_for(out_dtype)):
        raise ValueError(unrepresentable(fmt, out_dtype if shown is None else shown))
    if not fmt.is_float and not rounding.saturate:
        raise ValueError(f"integer format {fmt.name} has no overflow encoding: use saturate=True")
    work = np.dtype(np.float64) if out_dtype == np.float64 else np.dtype(np.float32)
    return _remember(key, (fmt, _plan(fmt, work, rounding)))[1]


def unrepresentable(fmt: Format, dtype) -> str:
    """The message for a format whose values the result's dtype ``dtype`` (the input's)
    cannot all hold, naming the wider input that can."""
    wider = "float64" if str(dtype).removeprefix("torch.") == "float32" else "float32 or float64"
    return (f"{fmt.name} values are not all representable in {dtype} (the result has the "
            f"input's dtype); pass {wider} input")


def random_source(shape, rbits, key):
    if (rbits is None) == (key is None):
        raise ValueError("mode='sr' needs exactly one of rbits= (random bits) or key=")
    if rbits is not None:
        rb = native(np.asarray(rbits))
        if rb.dtype.kind not in "ui":
            raise TypeError(f"rbits must be an integer array of non-negative random words, "
                            f"got dtype {rb.dtype}")
        if rb.shape != tuple(shape):
            raise ValueError(f"rbits must have x's shape {tuple(shape)}, got {rb.shape}")
        if rb.dtype.kind == "i":
            if rb.size and rb.min() < 0:
                raise ValueError("rbits must be non-negative")
        return ("bits", np.ascontiguousarray(rb).reshape(-1))
    return ("key", *rng.seed_and_counter(key))


def _run_chunks(plan: Plan, xw: np.ndarray, out: np.ndarray, bits_src) -> None:
    n = xw.size
    if n <= CHUNK:
        round_kernel(plan, xw, out, chunk_bits(bits_src, 0, n))
        return
    for lo in range(0, n, CHUNK):
        hi = min(lo + CHUNK, n)
        round_kernel(plan, xw[lo:hi], out[lo:hi], chunk_bits(bits_src, lo, hi))


def chunk_bits(bits_src, lo: int, hi: int):
    """The random words of flat elements ``lo..hi-1`` (None for RTN).

    ``bits_src`` is what :func:`random_source` returns: given words, or a key whose element
    ``i`` uses counter ``counter + i`` (so any chunk is generated on its own).
    """
    if bits_src is None:
        return None
    if bits_src[0] == "bits":
        return bits_src[1][lo:hi]
    return rng.fill_bits(bits_src[1], bits_src[2] + lo, np.empty(hi - lo, np.uint32))


def round_kernel(plan: Plan, x: np.ndarray, out: np.ndarray, rbits, *, no_over=False) -> None:
    """Round ``x`` into ``out``. ``no_over``: the caller knows that no ``|x|`` exceeds the
    value of bits ``plan.hi`` and none is NaN, so nothing can round past max (the test for it
    is skipped)."""
    if plan.fmt.is_float:
        float_kernel(plan, x, out, rbits, no_over)
    else:
        int_kernel(plan, x, out, rbits)


def _sr_up(frac_units: np.ndarray, rbits: np.ndarray, nbits: int, udt) -> np.ndarray:
    """SR decision: ``r + t >= 2**nbits`` written as ``t > (2**nbits - 1) - r`` (no overflow).

    ``frac_units`` is ``t`` in ``[0, 2**nbits]``: ``floor(p * 2**nbits)``, or with
    ``sr_rule="nearest"`` ``p * 2**nbits`` rounded to nearest (see :func:`_sr_units`).
    """
    nmask = udt.type((1 << nbits) - 1)
    r = rbits.astype(udt, copy=False)
    if nbits < 32 or rbits.dtype.itemsize > 4:
        r = r & nmask
    return frac_units > (nmask - r)


def _sr_units(plan: Plan, scaled: np.ndarray, udt) -> np.ndarray:
    """``t`` from ``scaled = p * 2**nbits`` (exact): its floor, or rint (ties to even)."""
    t = np.rint(scaled) if plan.sr_rule == "nearest" else np.floor(scaled)
    return t.astype(udt)


def float_kernel(plan: Plan, x: np.ndarray, out: np.ndarray, rbits, no_over=False) -> None:
    src = plan.src
    U = src.udtype.type
    b = x.view(src.udtype)
    a = b & NUMPY_WORDS.word(absmask(src), b)  # magnitude bits: monotone in |x|
    sign = b ^ a
    r = out.view(src.udtype)  # the rounded magnitude is built in place in the output
    # the carry out of the dropped bits, then truncation, is the rounding (ecosim.core.bitops)
    round_bits(plan, a, r, rbits, NUMPY_WORDS)

    # Below the smallest normal: a uniform grid (subnormals, flush-to-zero, or no zero at all).
    # One reduction says whether there is any (the mask is built only then).
    if a.size and np.minimum.reduce(a) < plan.minnorm:
        idx = np.flatnonzero(a < U(plan.minnorm))
        r[idx] = small_magnitudes(plan, x[idx], None if rbits is None else rbits[idx])

    # Overflow, sign, -0 and NaN (ecosim.core.bitops).
    finish_bits(plan, sign, a, r, NUMPY_WORDS, no_over)


def absmask(src: _Src) -> int:
    return (1 << (8 * src.udtype.itemsize - 1)) - 1


def small_magnitudes(plan: Plan, xs: np.ndarray, rbits) -> np.ndarray:
    """Bits of the rounded magnitudes of inputs below ``plan.minnorm``: the rule of
    :func:`ecosim.core.gridrules.small_values` (subnormals, the flush-to-zero gap, E8M0's binades
    below the working dtype's normals), which torch runs as well.

    Where one step ``2**qexp`` serves every such input (:attr:`Plan.uniform_small`), NumPy
    takes its own faster path for RTN and SR, tested bit-equal to the rule: the scalings by
    ``2**-qexp`` and ``2**qexp`` are exact multiplications by finite powers of two, so
    ``rint``/``floor`` round exactly (a chunk has a few such inputs, and a few calls do them).
    Other modes take the rule.
    """
    src = plan.src
    ax = np.abs(xs)
    if plan.uniform_small and plan.mode in _FAST_MODES:
        y = ax * src.dtype.type(2.0 ** -plan.qexp)
        if plan.stochastic:
            n = np.floor(y)
            t = _sr_units(plan, np.ldexp(y - n, plan.nbits), src.udtype)
            n += _sr_up(t, rbits, plan.nbits, src.udtype)
        else:
            n = np.rint(y, out=y)
        n *= src.dtype.type(2.0 ** plan.qexp)
        return n.view(src.udtype)
    a = ax.astype(src.dtype, copy=False).view(src.udtype).astype(np.int64)
    return gridrules.small_values(plan, a, rbits, NUMPY_WORDS).astype(src.udtype)


def int_kernel(plan: Plan, x: np.ndarray, out: np.ndarray, rbits) -> None:
    """Integer grids: :func:`ecosim.core.gridrules.int_grid_bits` (which torch runs as well), or,
    for RTN and SR where every input is finite, :func:`_finite_int_kernel`, tested bit-equal
    to it."""
    y = np.abs(x)
    # NaN and inf show in the maximum
    if plan.mode in _FAST_MODES and y.size and np.isfinite(np.maximum.reduce(y)):
        _finite_int_kernel(plan, x, y, out, rbits)
        return
    udt = plan.src.udtype
    gridrules.int_grid_bits(plan, x.view(udt), out.view(udt), rbits, NUMPY_WORDS)


def _finite_int_kernel(plan: Plan, x: np.ndarray, y: np.ndarray, out: np.ndarray,
                       rbits) -> None:
    """:func:`int_kernel` for finite ``x`` (``y = |x|``), in fewer passes, to the same bits.

    Without NaN or inf no fraction needs repairing. ``t = floor(p * 2**nbits)`` is below
    ``2**nbits <= 2**32`` and is taken by truncation (the scaling by a power of two is exact), so
    the SR decision is made in uint32 when the random words are. The signed clip
    ``-min(n, -int_min)`` / ``min(n, int_max)`` of the general kernel is ``copysign`` and a clip
    to ``[int_min, int_max]``; adding 0 turns ``-0`` into ``+0`` as there.
    """
    fmt = plan.fmt
    if plan.stochastic:
        n = np.floor(y)
        scaled = np.subtract(y, n, out=y)  # p, in [0, 1)
        scaled *= y.dtype.type(2.0 ** plan.nbits)
        if plan.sr_rule == "floor" and rbits.dtype == np.uint32:
            t, udt = scaled.astype(np.uint32), np.dtype(np.uint32)
        else:
            udt = np.dtype(np.uint64)
            t = _sr_units(plan, scaled, udt)
        n += _sr_up(t, rbits, plan.nbits, udt)
    else:
        n = np.rint(y, out=y)
    np.copysign(n, x, out=n)
    np.minimum(n, x.dtype.type(fmt.int_max), out=n)
    np.maximum(n, x.dtype.type(fmt.int_min), out=n)
    np.add(n, x.dtype.type(0.0), out=out)  # integer grids have no -0


# -- what the torch backend and the code kernels share --------------------------------------------
#: ``plan(fmt, work, rounding)``: the :class:`Plan` of a :class:`Rounding` (ValueError when the
#: format's values are not all representable in the working dtype ``work``).
plan = _plan
#: ``representable(fmt, src)``: whether every finite value of ``fmt`` is a value of ``src``.
representable = _representable
#: ``src_for(dtype)``: the bit layout (width, mantissa bits, bias, exponent range) of a working
#: float dtype; ``SRC_F32`` and ``SRC_F64`` are float32's and float64's.
src_for = _src_for
SRC_F32, SRC_F64 = _F32, _F64
__all__ += ["Plan", "SRC_F32", "SRC_F64", "plan", "prepare", "representable", "src_for",
            "unrepresentable"]
