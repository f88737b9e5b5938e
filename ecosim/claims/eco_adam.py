"""What the ``eco_adam_breakdown`` experiment shows: outcomes per variant and the cost of each
of ECO's approximations, as paired gaps to master weights.

The figure ``eco_adam_breakdown`` (:mod:`ecosim.figures.eco_adam`) draws these numbers.
Variants of part 2 (``"approx"``) are named ``"scheme:mode"``.
"""
from __future__ import annotations

import numpy as np

from ..experiments.eco_adam import OUTCOMES
from .stats import LEVEL, t_interval

__all__ = ["LEVEL", "outcome_counts", "paired_gaps", "select"]


def select(r, part: str, name: str) -> np.ndarray:
    """Mask of the units of one variant of a part (``"breakdown"``, or ``"approx"`` with a
    name ``"scheme:mode"``)."""
    sel = r["unit_part"] == part
    if part == "approx":
        scheme, mode = name.split(":")
        return sel & (r["unit_variant"] == scheme) & (r["unit_mode"] == mode)
    return sel & (r["unit_variant"] == name)


def outcome_counts(r, part: str, names) -> dict[str, dict[str, int]]:
    """``{variant: {outcome: count}}`` over the seeds of one part (``"breakdown"`` or, with
    names ``"scheme:mode"``, ``"approx"``)."""
    out = {}
    for name in names:
        sel = select(r, part, name)
        out[name] = {o: int(np.sum(r["outcome"][sel] == o)) for o in OUTCOMES}
    return out


def paired_gaps(r, scheme: str, mode: str) -> dict:
    """Final validation loss of ``scheme`` minus master's, paired by seed, over the seeds where
    both trained: ``{"n", "mean", "lo", "hi"}`` (95% t-interval; NaN bounds below 2 seeds)."""
    a, b = select(r, "approx", f"{scheme}:{mode}"), select(r, "approx", f"master:{mode}")
    sa, sb = r["unit_seed"][a], r["unit_seed"][b]
    common = sorted(set(sa[r["outcome"][a] == "trained"]) & set(sb[r["outcome"][b] == "trained"]))
    fa = dict(zip(sa, r["final_val_loss"][a]))
    fb = dict(zip(sb, r["final_val_loss"][b]))
    ti = t_interval(np.array([fa[s] - fb[s] for s in common], np.float64), LEVEL)
    return {k: ti[k] for k in ("n", "mean", "lo", "hi")}
