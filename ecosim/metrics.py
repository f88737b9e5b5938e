"""Metrics on quantization errors: how similar consecutive errors are.

ECO replaces the previous quantization error by the current one when it injects the error into
the momentum (``e_prev ~ e``; ECO paper, M. Nikdan et al., arXiv 2601.22101). This module
measures how good that approximation is for two consecutive errors ``e_t`` and ``e_{t+1}``
(docs/theory.md §5.8):

- ``cosine``     = <e_t, e_{t+1}> / (||e_t|| ||e_{t+1}||), clipped to [-1, 1];
- ``norm_ratio`` = ||e_{t+1}|| / ||e_t||;
- ``rel_diff``   = ||e_t - e_{t+1}|| / ||e_t||  (ECO's relative approximation error).

Conventions: all arithmetic is float64 on flattened copies (inputs are never modified);
non-finite entries raise ``ValueError``. Where a ratio's denominator is zero the field is NaN,
without a warning: ``cosine`` is NaN if either error is all zeros, ``norm_ratio`` and
``rel_diff`` are NaN if ``e_prev`` is all zeros. NaN marks "undefined" (for instance the first
step of a run whose initial weights lie on the grid) and is skipped by plotting.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from .core.checks import check_bool

__all__ = ["ErrorSimilarity", "error_similarity"]


class ErrorSimilarity(NamedTuple):
    """Similarity of two consecutive quantization errors (see the module docstring)."""

    cosine: float
    norm_ratio: float
    rel_diff: float


def _flat(x, name):
    """Flattened float64 copy-or-view of ``x`` (only ever read); rejects NaN and inf."""
    arr = np.asarray(x, dtype=np.float64).ravel()
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} has non-finite entries")
    return arr


def _ratio(num, den):
    """num / den, or NaN when den == 0 (no warning)."""
    return float(num / den) if den > 0 else float("nan")


def _similarity(e_prev, e_next):
    """Similarity of two flat float64 vectors of equal length."""
    norm_prev = float(np.linalg.norm(e_prev))
    norm_next = float(np.linalg.norm(e_next))
    cosine = _ratio(float(np.dot(e_prev, e_next)), norm_prev * norm_next)
    if not np.isnan(cosine):
        # Rounding can push |cos| a few ulp above 1.
        cosine = min(1.0, max(-1.0, cosine))
    return ErrorSimilarity(
        cosine=cosine,
        norm_ratio=_ratio(norm_next, norm_prev),
        rel_diff=_ratio(float(np.linalg.norm(e_prev - e_next)), norm_prev),
    )


def _flat_pair(e_prev, e_next, name):
    """Flattened float64 versions of one pair of same-shaped errors."""
    if np.shape(e_prev) != np.shape(e_next):
        where = f" for {name!r}" if name is not None else ""
        raise ValueError(f"shape mismatch{where}: {np.shape(e_prev)} vs {np.shape(e_next)}")
    suffix = f"[{name!r}]" if name is not None else ""
    return _flat(e_prev, "e_prev" + suffix), _flat(e_next, "e_next" + suffix)


def error_similarity(e_prev, e_next, *, per_tensor=False):
    """Cosine, norm ratio and relative difference of consecutive quantization errors.

    Args:
        e_prev: the earlier error ``e_t``: an array, or a mapping of names to arrays.
        e_next: the later error ``e_{t+1}``, of the same kind, keys and shapes.
        per_tensor: for mappings, return one record per name instead of one global record
            (the global record flattens and concatenates all tensors).

    Returns:
        An :class:`ErrorSimilarity`, or a dict name -> :class:`ErrorSimilarity` when
        ``per_tensor`` is true.

    Raises:
        TypeError: one input is a mapping and the other is not, or ``per_tensor`` is true for
            plain arrays.
        ValueError: different keys or shapes, or non-finite entries.

    Example:
        >>> r = error_similarity(np.array([1.0, 0.0]), np.array([0.0, 2.0]))
        >>> (r.cosine, r.norm_ratio, round(r.rel_diff ** 2, 12))
        (0.0, 2.0, 5.0)
    """
    per_tensor = check_bool(per_tensor, "per_tensor")
    prev_is_map = isinstance(e_prev, Mapping)
    if prev_is_map != isinstance(e_next, Mapping):
        raise TypeError("e_prev and e_next must both be arrays or both be mappings")
    if not prev_is_map:
        if per_tensor:
            raise TypeError("per_tensor=True needs mappings of named arrays")
        return _similarity(*_flat_pair(e_prev, e_next, None))

    if set(e_prev) != set(e_next):
        raise ValueError(f"different tensor names: {sorted(map(str, set(e_prev) ^ set(e_next)))}")
    names = list(e_prev)
    pairs = {name: _flat_pair(e_prev[name], e_next[name], name) for name in names}
    if per_tensor:
        return {name: _similarity(*pairs[name]) for name in names}
    if not names:
        return _similarity(np.zeros(0), np.zeros(0))
    return _similarity(np.concatenate([pairs[n][0] for n in names]),
                       np.concatenate([pairs[n][1] for n in names]))
