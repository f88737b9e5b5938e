"""Slow, obviously-correct reference for the rounding rules of docs/theory.md §2 (tests only).

It shares nothing with :mod:`ecosim.core.rounding`'s bit manipulation: it enumerates the format's
finite values, finds the two neighbours of ``|x|`` by search, and decides with exact float64
arithmetic. Exactness: the neighbours satisfy ``lo <= |x| < hi <= 2*lo`` (or ``lo = 0``), so
``|x| - lo`` and ``hi - |x|`` are exact by Sterbenz's lemma, and ``hi - lo`` is a power of two,
so ``p = (|x| - lo) / (hi - lo)`` and ``floor(p * 2**nbits)`` are exact too. Inputs are float64
(float32 inputs are converted exactly). Only formats of 16 bits or fewer, finite inputs.
"""

from __future__ import annotations

import numpy as np

from .formats import Format, encode_bits, get


def _magnitude_grid(fmt: Format):
    """Sorted non-negative finite magnitudes, plus the code parity of each."""
    v = fmt.values()
    mags = v[v >= 0]
    if fmt.is_float:
        parity = encode_bits(mags, fmt).astype(np.int64) & 1
    else:
        parity = mags.astype(np.int64) & 1
    return mags, parity


def round_reference(x, fmt: Format | str, mode: str = "rtn", *, rbits=None, nbits: int = 32,
                    saturate: bool = True, sr_rule: str = "floor") -> np.ndarray:
    """Round finite float64 values ``x`` onto ``fmt`` (see :func:`ecosim.quantize`).

    ``sr_rule="nearest"`` counts ``rint(p * 2**nbits)`` rounding-up words (ties to even)
    instead of ``floor(p * 2**nbits)``. ``mode="rtz"`` keeps the neighbour nearer zero, and a
    value past the range becomes the top value even with ``saturate=False``.
    """
    fmt = get(fmt)
    x = np.asarray(x, dtype=np.float64)
    if not np.isfinite(x).all():
        raise ValueError("the reference handles finite inputs only")
    mags, parity = _magnitude_grid(fmt)
    top = mags[-1]
    # One virtual value past the top, continuing the top binade's step, with the other parity.
    step_top = np.ldexp(1.0, fmt.emax - fmt.mantissa_bits) if fmt.is_float else 1.0
    ext = np.append(mags, top + step_top)
    ext_parity = np.append(parity, 1 - parity[-1])
    # Magnitudes on each side; the negative side of an integer grid is its own range.
    a = np.abs(x)
    i = np.searchsorted(ext, a, side="right") - 1  # ext[i] <= a < ext[i+1]
    beyond = i >= ext.size - 1
    i = np.minimum(i, ext.size - 2)
    lo, hi = ext[i], ext[i + 1]
    below_first = a < ext[0]  # only for formats without zero (E8M0)
    if mode == "rtn":
        dlo, dhi = a - lo, hi - a
        tie = dlo == dhi
        if fmt.ties == "even":
            tie_up = ext_parity[i + 1] == 0
            if fmt.is_float and not fmt.subnormals:
                tie_up &= lo > 0  # flush-to-zero gap: both ends have even codes; ties go to 0
        else:
            tie_up = np.ones_like(tie)
        up = (dhi < dlo) | (tie & tie_up)
    elif mode == "rtz":
        up = np.zeros(a.shape, bool)
    else:
        rb = np.asarray(rbits).astype(np.uint64) & np.uint64((1 << nbits) - 1)
        scaled = np.ldexp((a - lo) / (hi - lo), nbits)
        t = (np.rint(scaled) if sr_rule == "nearest" else np.floor(scaled)).astype(np.uint64)
        up = (rb + t) >= np.uint64(1 << nbits)
    mag = np.where(up, hi, lo)
    mag = np.where(beyond, a, mag)  # far past the top: overflow below
    mag = np.where(below_first, ext[0], mag)
    neg = np.signbit(x)
    if not fmt.is_float:
        # Integer grids are asymmetric: clamp each side to its own end.
        mag = np.minimum(mag, np.where(neg, -fmt.int_min, fmt.int_max))
        return np.where(neg, -mag, mag) + 0.0
    overflow = mag > top
    if saturate or fmt.nan == "none" or mode == "rtz":
        mag = np.where(overflow, top, mag)
    elif fmt.has_inf:
        mag = np.where(overflow, np.inf, mag)
    else:
        mag = np.where(overflow, np.nan, mag)
    out = np.where(neg, -mag, mag)
    if not fmt.signed:
        out = np.where(neg | (x == 0), np.nan, out)
    if fmt.nan == "fnuz":
        out = out + 0.0  # no negative zero
    return out
