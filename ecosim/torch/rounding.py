"""Torch mirror of :func:`ecosim.quantize`: the same RTN and SR, bit for bit, on any device.

The algorithm is :mod:`ecosim.core.rounding`'s, on the bit pattern of the working float (float32
for float32/float16/bfloat16 input, float64 for float64): above the format's smallest normal,
rounding is "add a carry to the kept bits and truncate", the one rule both backends run
(:func:`ecosim.core.bitops.round_bits`, through torch's word shim); below it, the input is a uniform
grid point count and is rounded with integer shifts (:func:`ecosim.core.gridrules.small_values`, the
rule NumPy's faster path is tested against; integer formats:
:func:`ecosim.core.gridrules.int_grid_bits`). The plan constants (bit patterns of max, inf, the
smallest normal) come from the NumPy module itself, so both backends use one set of numbers.

Integers, not floats, do the work, but for the two CPU fast paths named below, which are taken only
where a flush-to-zero mode cannot change their result either. The float32 kernel runs in int32 and
the float64 one in int64, with no overflow anywhere: the magnitude is clamped at the inf pattern
before a carry is added (``0x7F800000 + (2**23 - 1)`` still fits in int32; a NaN input becomes inf
there and is restored from its original bits afterwards). The part below the smallest normal works
in int64 on integer significands, so neither power-of-two scaling of subnormals nor a flush-to-zero
mode of the device can change a result. Half-precision inputs and outputs are converted through bit
patterns where torch's own casts differ from NumPy's (NaN payloads and signs), and plain casts only
where they are exact.

Performance: on the CPU the kernel runs on chunks of ``2**18`` elements (torch's per-op
overhead of microseconds dominates smaller ones); elsewhere the whole tensor is one chunk. A
chunk whose magnitudes cannot round past the format's max (no NaN, inf or overflow: the
common case, scaled blocks included) skips the overflow, sign and NaN passes: SR adds the
carry to the bits with their sign and truncates; RTN on the CPU, for formats with a uniform
subnormal step well above float32's (or float64's) smallest normal, rounds by one float
addition of a power of two whose unit in the last place is the grid step (:func:`_round_by_add`:
exact, and with no separate pass for the inputs below the format's smallest normal). Other
chunks take the general path. SR's few inputs below the smallest normal are gathered and, on
the CPU, rounded by exact power-of-two scaling and integer carries
(:func:`_small_sr_by_scaling`). Random bits for ``key=``: element ``i`` (C order) uses counter
``counter + i``, exactly as in NumPy; float32 work takes them as int32 words, on the CPU from
NumPy's own generator (:func:`ecosim.core.rng.fill_bits`, writing into the tensor's memory: the same
words at a fraction of the per-call overhead of torch ops), elsewhere from
:mod:`ecosim.torch.rng`.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

from ..core import gridrules
from ..core.bitops import finish_bits, round_bits
from ..core.checks import native
from ..core.formats import Format, get
from ..core.rng import fill_bits, seed_and_counter
from ..core.rounding import Plan, prepare, representable, src_for, unrepresentable
from ..core.rounding_modes import MODES, Rounding
from . import rng as trng
from .bitops import TORCH_WORDS, const

__all__ = ["quantize", "MODES"]

_NP_DTYPE = {
    torch.float32: np.dtype(np.float32),
    torch.float64: np.dtype(np.float64),
    torch.float16: np.dtype(np.float16),
    torch.bfloat16: np.dtype(ml_dtypes.bfloat16),
}
_INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.uint16,
               torch.uint32, torch.uint64)
_SIGNED_INTS = (torch.int8, torch.int16, torch.int32, torch.int64)


def quantize(x, fmt: Format | str, mode: str | Rounding = "rtn", *, rbits=None, nbits: int = 32,
             key=None, saturate: bool = True, sr_rule: str = "floor") -> torch.Tensor:
    """Round ``x`` onto the grid of ``fmt``: :func:`ecosim.quantize` for torch tensors.

    Same arguments, rules and errors as the NumPy function, and the same bits: given the same
    input values and the same ``rbits`` (or ``key``/counter), the result equals
    ``ecosim.quantize`` element for element, bit for bit (NaN payloads and signed zeros
    included), on every format, for RTN and SR, on the CPU and on CUDA.

    Args:
        x: float16, bfloat16, float32 or float64 tensor on any device (anything else is passed
            through ``numpy.asarray`` first, so Python floats become float64).
        fmt: a :class:`~ecosim.core.formats.Format` or a name (``"e4m3"``, ``"bf16"``, ``"int4"``).
        mode: ``"rtn"`` (nearest, ties to an even code; E8M0 ties away), ``"sr"`` (the
            magnitude goes up iff ``r + floor(p * 2**nbits) >= 2**nbits``, with ``r`` the low
            ``nbits`` of the random word and ``p`` the position between the neighbours), any
            other name of :data:`~ecosim.core.rounding_modes.MODES`, or a
            :class:`~ecosim.core.rounding_modes.Rounding`.
        rbits: random bits for SR: an integer tensor (or array) of ``x``'s shape with
            non-negative values (int64 holding words below 2**32, as
            :func:`ecosim.torch.rng.random_bits` returns, or any torch integer dtype; only the
            low ``nbits`` bits are used). Moved to ``x``'s device.
        nbits: how many low bits of each random word SR uses (1..32).
        key: instead of ``rbits``: an int, or ``(key, counter)``.
        saturate: True: finite overflow and infinities clamp to +-max, NaN propagates. False:
            the format's own rules, as an ``ml_dtypes`` cast of float32 gives them.
        sr_rule: ``"floor"`` (default, the rule above) or ``"nearest"``: SR counts
            ``p * 2**nbits`` rounded to nearest, ties to even, instead of its floor (nearly
            unbiased with few random bits; see :func:`ecosim.quantize`).

    Returns:
        A tensor of ``x``'s dtype, shape and device, on the grid.

    Example:
        >>> import torch
        >>> quantize(torch.tensor([1.0625, 1.1875, 500.0]), "e4m3")
        tensor([  1.0000,   1.2500, 448.0000])
    """
    x, plan, bits_src = checked_call(x, fmt, mode, rbits, nbits, key, saturate, sr_rule)
    b = to_work_bits(x)
    out = torch.empty_like(b)
    run_chunks(plan, b, out, bits_src)
    return from_work_bits(out, x.dtype).reshape(x.shape)


def checked_call(x, fmt, mode, rbits, nbits, key, saturate, sr_rule):
    """quantize's checks of its arguments: ``(x as a tensor, plan, source of random bits)``."""
    fmt = get(fmt)
    rounding = Rounding.of(mode, nbits, sr_rule, saturate)
    x = as_tensor(x)
    if x.dtype not in _NP_DTYPE:
        raise TypeError(f"expected a floating-point tensor (float16, bfloat16, float32 or "
                        f"float64), got dtype {x.dtype}")
    plan = prepare(fmt, _NP_DTYPE[x.dtype], rounding, shown=x.dtype)
    bits_src = None
    if rounding.stochastic:
        bits_src = _random_source(x, rbits, key)
    elif rbits is not None or key is not None:
        raise ValueError("rbits and key are for mode='sr'")
    return x, plan, bits_src


def check_representable(fmt: Format, dtype: torch.dtype) -> None:
    """Refuse a format whose values ``dtype`` cannot all hold (NumPy's rule and message)."""
    if not representable(fmt, src_for(_NP_DTYPE[dtype])):
        raise ValueError(unrepresentable(fmt, dtype))


def as_tensor(x) -> torch.Tensor:
    """``x`` as a tensor; a NumPy array of either byte order is copied in native order."""
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, (list, tuple)) and any(isinstance(v, (np.ndarray, torch.Tensor))
                                            for v in x):
        raise TypeError(f"expected one floating-point tensor, got a {type(x).__name__} of "
                        "arrays/tensors: quantize each one separately")
    arr = native(np.asarray(x))  # torch.from_numpy refuses a byte-swapped array
    if arr.dtype.kind != "f" and arr.dtype.name != "bfloat16":
        raise TypeError(f"expected a floating-point tensor, got {type(x).__name__} of dtype "
                        f"{arr.dtype}")
    if arr.dtype.name == "bfloat16":
        return torch.from_numpy(arr.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(arr).copy())


def _random_source(x: torch.Tensor, rbits, key):
    if (rbits is None) == (key is None):
        raise ValueError("mode='sr' needs exactly one of rbits= (random bits) or key=")
    if rbits is not None:
        rb = rbits
        if not isinstance(rb, torch.Tensor):
            arr = native(np.asarray(rb))
            if arr.dtype.kind not in "ui":
                raise TypeError(f"rbits must be an integer array of non-negative random words, "
                                f"got dtype {arr.dtype}")
            rb = torch.from_numpy(np.ascontiguousarray(arr).copy())
        if rb.dtype not in _INT_DTYPES:
            raise TypeError(f"rbits must be an integer tensor, got dtype {rb.dtype}")
        if tuple(rb.shape) != tuple(x.shape):
            raise ValueError(f"rbits must have x's shape {tuple(x.shape)}, got {tuple(rb.shape)}")
        if rb.dtype in _SIGNED_INTS and rb.numel() and bool((rb < 0).any()):
            raise ValueError("rbits must be non-negative")
        # uint64 words >= 2**63 wrap to negative int64; only their low nbits are used.
        return ("bits", rb.to(device=x.device, dtype=torch.int64).reshape(-1))
    return ("key", *seed_and_counter(key))


def run_chunks(plan: Plan, b, out: torch.Tensor, bits_src, scaled=None) -> None:
    """Round chunk by chunk; inputs below the smallest normal are gathered and done at once.

    The few elements below the smallest normal take many small integer ops: doing them once for the
    whole tensor, not once per chunk, keeps per-op overhead off the CPU path. ``scaled``: ``(x, s,
    bounded)`` of :func:`ecosim.torch.quantizer.quantize_scaled` instead of the bits ``b``: chunks
    of whole rows of ``x`` are divided by their scales into a buffer, rounded (small inputs
    included) and multiplied back in ``out``.
    """
    n = out.numel()
    step = trng.bits_chunk_size(out.device, n)
    bounded = False
    if scaled is not None:
        x, s, bounded = scaled
        inner = n // x.shape[0] if n else 1
        step = max(1, step // inner) * inner
        ybuf = torch.empty((min(n, step) // inner,) + tuple(x.shape[1:]), dtype=x.dtype)
        ybits, outf = ybuf.view(-1).view(out.dtype), out.view(x.dtype).view(x.shape)
    m = min(n, step)
    keyed = bits_src is not None and bits_src[0] == "key"
    narrow = plan.src.mant != 52  # int32 working bits
    cpu_words = keyed and narrow and out.device.type == "cpu"
    buf = work = None
    if keyed:
        # int32 words for float32 work (NumPy's generator on the CPU, torch's mixer elsewhere);
        # int64 values in [0, 2**32) for float64 work
        buf = torch.empty(m, dtype=torch.int32, device=out.device)
        work = None if cpu_words else trng.make_work(out.device, m)
        wide_bits = None if narrow else torch.empty(m, dtype=torch.int64, device=out.device)
    small_idx, small_bits = [], []
    magic = _adds_exactly(plan, out.device)
    ws = (torch.empty(m, dtype=out.dtype, device=out.device),
          torch.empty(m, dtype=out.dtype, device=out.device))
    for lo in range(0, n, step):
        hi = min(lo + step, n)
        oc = _part(out, lo, hi)
        if scaled is None:
            bc = _part(b, lo, hi)
        else:
            rows = slice(lo // inner, hi // inner)
            sc = s if s.shape[0] == 1 else s[rows]
            torch.div(x[rows], sc, out=ybuf[:(hi - lo) // inner])
            bc = ybits[:hi - lo]
        r = None
        if bits_src is not None:
            if bits_src[0] == "bits":
                r = _part(bits_src[1], lo, hi)
            elif cpu_words:
                # NumPy's generator writing into the same memory: the same words (both are
                # ecosim.core.rng's hash), at a fraction of the per-call overhead of torch's ops
                r = _part(buf, 0, hi - lo)
                fill_bits(bits_src[1], bits_src[2] + lo, r.numpy().view(np.uint32))
            else:
                r = trng.fill_bits32(bits_src[1], bits_src[2] + lo, buf[:hi - lo], work)
                if not narrow:
                    r = wide_bits[:hi - lo].copy_(r).bitwise_and_(0xFFFFFFFF)
        if not plan.fmt.is_float:
            _int_kernel(plan, bc, oc, None if r is None else _low32(r))
        else:
            idx = _float_kernel(plan, bc, oc, r, [_part(w, 0, hi - lo) for w in ws], magic,
                                bounded)
            if idx.numel() and scaled is not None:
                _small_into(plan, bc, oc, idx, None if r is None else
                            _low32(r.index_select(0, idx)))
            elif idx.numel():
                small_idx.append(idx + lo if lo else idx)
                if r is not None:
                    small_bits.append(_low32(r.index_select(0, idx)))
        if scaled is not None:
            outf[rows].mul_(sc)
    if small_idx:
        idx = torch.cat(small_idx) if len(small_idx) > 1 else small_idx[0]
        rbits = None
        if small_bits:
            rbits = torch.cat(small_bits) if len(small_bits) > 1 else small_bits[0]
        _small_into(plan, b, out, idx, rbits)


def _part(t: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
    """``t[lo:hi]`` of a flat ``t``; ``t`` itself when that is all of it (a tensor of one chunk,
    the common case on small tensors, skips the slicing op)."""
    return t if lo == 0 and hi == t.shape[0] else t[lo:hi]


def _small_into(plan: Plan, b: torch.Tensor, out: torch.Tensor, idx: torch.Tensor,
                rbits) -> None:
    """The rounded bits of the inputs ``b[idx]`` below the smallest normal, into ``out[idx]``
    (``rbits``: their int64 random words, for SR)."""
    # index_select/index_copy_: advanced indexing is ~100x slower on multi-threaded CPUs.
    bs = b.index_select(0, idx)
    a = bs & ~_signbit(plan.src.mant == 52)
    if _scales_exactly(plan, b.device):
        rs = _small_sr_by_scaling(plan, a, rbits)
    else:
        rs = gridrules.small_values(plan, a.to(torch.int64), rbits, TORCH_WORDS).to(b.dtype)
    _finish(plan, bs, a, rs)
    out.index_copy_(0, idx, rs)


def _low32(r: torch.Tensor) -> torch.Tensor:
    """int64 random words: int32 words (two's complement) as their values in [0, 2**32)."""
    return r.to(torch.int64) & 0xFFFFFFFF if r.dtype == torch.int32 else r


def _below(a: torch.Tensor, bound: int, t: torch.Tensor) -> torch.Tensor:
    """int64 indices of the non-negative ``a`` below ``bound`` (``t`` is scratch like ``a``).

    On the CPU NumPy's ``flatnonzero`` on a view of the same memory is several times faster
    than ``torch.nonzero``; the indices are the same.
    """
    if a.device.type == "cpu":
        return torch.from_numpy(np.flatnonzero(a.numpy() < bound))
    torch.sub(a, bound, out=t)
    t >>= 8 * t.element_size() - 1  # integer tests: cheaper than boolean masks
    return torch.nonzero(t).reshape(-1)


# -- bit patterns of the working float ---------------------------------------------------------

def _signbit(wide: bool) -> int:
    """The sign bit as a value of the signed working integer (int32 or int64)."""
    return -(1 << 63) if wide else -(1 << 31)


def to_work_bits(x: torch.Tensor) -> torch.Tensor:
    """Flat int32 bits of ``x`` as float32 (int64 bits for float64), exactly as NumPy widens.

    float16 NaNs keep sign and payload (``sig << 13``, not quieted), as NumPy's cast does;
    bfloat16 is ``bits << 16``.
    """
    if x.dtype == torch.float64:
        return x.reshape(-1).view(torch.int64)
    if x.dtype == torch.float32:
        return x.reshape(-1).view(torch.int32)
    h = x.reshape(-1).view(torch.int16).to(torch.int32)  # sign-extended
    if x.dtype == torch.bfloat16:
        return h * 65536  # == h << 16 as two's complement, without a shift of a negative value
    b = x.reshape(-1).to(torch.float32).view(torch.int32)  # exact for every non-NaN value
    nan = (h & 0x7FFF) > 0x7C00
    nanbits = ((h & 0x3FF) << 13) | 0x7F800000
    return torch.where(nan, torch.where(h < 0, nanbits | _signbit(False), nanbits), b)


def from_work_bits(bits: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Values of ``dtype`` from working bits of values representable in ``dtype``.

    Narrowing to half types follows NumPy/ml_dtypes for NaN: float16 keeps sign and the top
    payload bits (``0x7C00 | sig >> 13``), bfloat16 gives the quiet NaN ``0x7FC0`` with the
    sign; every other value is exact, so a plain cast (or a shift) is used.
    """
    if dtype == torch.float64:
        return bits.view(torch.float64)
    if dtype == torch.float32:
        return bits.view(torch.float32)
    a = bits & 0x7FFFFFFF
    nan = a > 0x7F800000
    neg = bits < 0
    if dtype == torch.bfloat16:
        h = torch.where(nan, torch.where(neg, -64, 0x7FC0), bits >> 16)  # 0xFFC0 is -64
        return h.to(torch.int16).view(torch.bfloat16)
    h = bits.view(torch.float32).to(torch.float16).view(torch.int16).to(torch.int32)
    payload = (a & 0x7FFFFF) >> 13
    nanbits = 0x7C00 | torch.where(payload == 0, 1, payload)
    h = torch.where(nan, torch.where(neg, nanbits - 0x8000, nanbits), h)  # 0x8000 | v as int16
    return h.to(torch.int16).view(torch.float16)


# -- kernels -----------------------------------------------------------------------------------

def _float_kernel(plan: Plan, b: torch.Tensor, r: torch.Tensor, rbits, ws,
                  magic: bool = False, bounded: bool = False) -> torch.Tensor:
    """Rounded bits of the working-float bits ``b`` into ``r`` (ecosim.core.rounding.float_kernel).

    ``ws`` is scratch space: two buffers of ``b``'s size and dtype (reused across chunks: fresh CPU
    temporaries cost a page fault per 4 KiB). ``rbits`` (SR) are int64 words or int32 ones (two's
    complement of the uint32 words, for float32 work). ``magic``: RTN of a chunk that cannot round
    past max takes :func:`_round_by_add` (see :func:`_adds_exactly`); ``bounded``: the caller knows
    that no input is NaN or rounds past max, so RTN by addition needs no test at all. Returns the
    indices of the inputs below the smallest normal, whose ``r`` is not final yet.
    """
    fmt = plan.fmt
    sign = _signbit(plan.src.mant == 52)
    a, t = ws
    torch.bitwise_and(b, const(~sign, b), out=a)  # magnitude bits: monotone in |x|
    if magic and bounded:
        _round_by_add(plan, b, a, r, t)
        return a.new_empty(0, dtype=torch.int64)
    amin, amax = (int(v) for v in torch.aminmax(a))
    if magic and amax <= plan.hi:
        _round_by_add(plan, b, a, r, t)
        return a.new_empty(0, dtype=torch.int64)
    if amax <= plan.hi and fmt.signed and plan.sh and (plan.mode != "rtn"
                                                       or fmt.ties == "even"):
        # No NaN or inf, and nothing rounds past max (plan.hi: max plus the mode's headroom),
        # so the carry never reaches the sign bit: round the bits with their sign (`r` is then
        # final wherever the input is at least the smallest normal), with NumPy's rule
        # (ecosim.core.bitops), skipping the overflow, sign and NaN rules of _finish. RTN
        # with ties away from zero (E8M0's) takes the general path.
        round_bits(plan, b, r, rbits, TORCH_WORDS)
    else:
        # NaN inputs become inf here, so no carry below can overflow; `a` still knows they
        # are NaN.
        torch.clamp(a, max=const(plan.infbits, a), out=t)
        round_bits(plan, t, r, rbits, TORCH_WORDS)
        _finish(plan, b, a, r, t)
    # Below the smallest normal: a uniform grid (subnormals, flush-to-zero, or no zero at all),
    # done by the caller on these indices.
    if amin >= plan.minnorm:
        return a.new_empty(0, dtype=torch.int64)
    return _below(a, plan.minnorm, t)


def _adds_exactly(plan: Plan, device: torch.device) -> bool:
    """Whether RTN may round by :func:`_round_by_add`: ties to even onto normals and a uniform
    subnormal step, on the CPU (IEEE float addition, round to nearest even), with half that
    step at least the working float's smallest normal, so that even a mode that reads
    subnormal inputs as zero (``torch.set_flush_denormal``) changes no result: such inputs
    round to zero either way, and no sum or result is subnormal. Not for fnuz formats, whose
    zero has no sign."""
    return (device.type == "cpu" and plan.mode == "rtn" and plan.uniform_small and plan.sh > 0
            and plan.fmt.nan != "fnuz" and plan.qexp - 1 >= plan.src.emin)


def _round_by_add(plan: Plan, b: torch.Tensor, a: torch.Tensor, r: torch.Tensor,
                  m: torch.Tensor) -> None:
    """RTN ties to even of finite inputs (bits ``b``, magnitude bits ``a``) that cannot round past
    max, into ``r``, by one float addition: ``m`` (scratch) becomes ``2**e`` with ``e`` the
    exponent of ``|x|``, at least the format's ``emin``; ``|x| + 2**sh * m`` lies in a binade
    whose unit in the last place is the grid step at ``|x|`` (``2**(e - M)``, the subnormal step
    below ``emin``), so the rounded sum minus ``2**sh * m`` (exact) is ``|x|`` rounded onto the
    grid, ties to even, for normals and subnormals of the format alike, with no separate pass
    for the inputs below the smallest normal. The sign is copied back (``-0`` included).
    """
    fdt = torch.float64 if plan.src.mant == 52 else torch.float32
    torch.bitwise_and(a, const(plan.infbits, a), out=m)  # the exponent field: 2**e as a float
    m.clamp_(min=const(plan.minnorm, m))
    rf, mf, step = r.view(fdt), m.view(fdt), float(1 << plan.sh)
    torch.add(a.view(fdt), mf, alpha=step, out=rf)  # alpha * m is exact: one rounding
    rf.sub_(mf, alpha=step)
    torch.copysign(rf, b.view(fdt), out=rf)


def _finish(plan: Plan, b: torch.Tensor, a: torch.Tensor, r: torch.Tensor, t=None) -> None:
    """Overflow, sign, -0 and NaN rules on rounded magnitudes ``r`` of inputs ``b`` (in place):
    NumPy's rule, :func:`ecosim.core.bitops.finish_bits`.

    ``a`` holds the input magnitude bits; ``t`` is optional scratch space like ``r``.
    """
    t = torch.bitwise_and(b, const(_signbit(plan.src.mant == 52), b), out=t)
    finish_bits(plan, t, a, r, TORCH_WORDS)


def pow2_bits(n: torch.Tensor, e, src) -> torch.Tensor:
    """int64 bits, in the working float ``src``, of the exact value ``n * 2**e``
    (:func:`ecosim.core.gridrules.pow2_bits` on torch tensors)."""
    return gridrules.pow2_bits(n, e, src, TORCH_WORDS)


def _scales_exactly(plan: Plan, device: torch.device) -> bool:
    """Whether SR below the smallest normal may take :func:`_small_sr_by_scaling`: float32 work
    on the CPU, one subnormal step ``2**qexp``, the floor rule, and ``2**(qexp - nbits)`` at
    least float32's smallest normal (so a subnormal input, read as zero or not, counts zero
    units of ``2**(qexp - nbits)`` either way, and no product is subnormal)."""
    return (device.type == "cpu" and plan.mode == "sr" and plan.uniform_small
            and plan.sr_rule == "floor"
            and plan.src.mant == 23 and plan.qexp - plan.nbits >= plan.src.emin)


def _small_sr_by_scaling(plan: Plan, a: torch.Tensor, rbits: torch.Tensor) -> torch.Tensor:
    """int32 bits of SR'd magnitudes (float32 magnitude bits ``a`` below the smallest normal,
    int64 random words ``rbits``), from a few float32 and int64 ops.

    ``|x| * 2**(nbits - qexp)`` is exact (a power-of-two scaling to below ``2**(M + nbits)``) and
    its truncating conversion is ``F = floor(|x| / 2**qexp * 2**nbits)``: the count of steps
    times ``2**nbits`` plus ``floor(p * 2**nbits)``, so ``(F + r) >> nbits`` (``r`` the low
    ``nbits`` random bits) is the count rounded up iff ``r + floor(p * 2**nbits) >= 2**nbits``,
    the SR rule; the count times ``2**qexp`` is exact.
    """
    nb = plan.nbits
    f = a.view(torch.float32) * float(2 ** (nb - plan.qexp))
    n = f.to(torch.int64)
    n += rbits & ((1 << nb) - 1)
    n >>= nb
    return (n.to(torch.float32) * 2.0 ** plan.qexp).view(torch.int32)


def _int_kernel(plan: Plan, b: torch.Tensor, r: torch.Tensor, rbits) -> None:
    """Integer grids: :func:`ecosim.core.gridrules.int_grid_bits`, into ``r``."""
    gridrules.int_grid_bits(plan, b, r, rbits, TORCH_WORDS)
