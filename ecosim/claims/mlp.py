"""The shape of the ECO paper's Table 1 judged on a table of gaps (figure ``mlp_table``).

A table here is one list of gaps to BF16 with master weights per method, one entry per model
size (``None``: diverged; NaN: not reported). :func:`shape_checks` states, for such a table,
each statement the paper's Table 1 makes about its shape, and returns the verdict behind each
(:data:`SHAPE_NAMES`); the figure applies it to ecosim's MLP table and to the paper's own
numbers with the same code, and :func:`shape_verdict` says which of the paper's statements the
small scale reproduces.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["SHAPE_NAMES", "shape_checks", "shape_verdict", "trend"]

#: the shape statements, by the key :func:`shape_checks` gives their verdict under
SHAPE_NAMES = {
    "eco_sr_close": "ECO+SR close to master weights",
    "naive_sr_worse": "naive+SR worse than ECO+SR at every size",
    "naive_sr_grows": "naive+SR's penalty growing with size",
    "naive_rtn_fails": "naive+RTN failing",
    "eco_rtn_between": "ECO+RTN between ECO+SR and naive+RTN",
    "eco_rtn_below_naive_sr": "ECO+RTN below naive+SR at every size",
}


def trend(values: list[float]) -> str:
    """How a sequence over growing sizes moves: "grows with size", "shrinks with size",
    "no monotone trend" or "one size only".

    >>> trend([0.1, 0.2, 0.4]), trend([0.1, 0.3, 0.2])
    ('grows with size', 'no monotone trend')
    """
    if len(values) < 2:
        return "one size only"
    d = np.diff(values)
    if np.all(d > 0):
        return "grows with size"
    if np.all(d < 0):
        return "shrinks with size"
    return "no monotone trend"


def _g(v) -> str:
    if v is None:
        return "diverged"
    return "n/a" if math.isnan(v) else f"{v:+.4f}"


def shape_checks(gap: dict[str, list], prefix: str) -> tuple[list[str], dict[str, bool]]:
    """Statements about the shape of a table of gaps to BF16 w/ master and the verdicts
    behind them (keys of :data:`SHAPE_NAMES`, plus ``naive_rtn_diverges``).

    Args:
        gap: one list of gaps per method name (``f"{prefix} ECO + SR"``, ``... naive + SR``,
            ``... ECO + RTN``, ``... naive + RTN``, ``... w/ master + SR``), one entry per size
            in growing order; None = diverged, NaN = not reported.
        prefix: the format's name in the method names ("FP8", "INT4", ...).

    Raises:
        ValueError: the five lists are empty or of different lengths. A statement "at every
            size" over no sizes would hold whatever the runs did, and lists of different
            lengths would be judged over the shortest one's sizes only.
    """
    eco_sr, naive_sr = gap[f"{prefix} ECO + SR"], gap[f"{prefix} naive + SR"]
    eco_rtn, naive_rtn = gap[f"{prefix} ECO + RTN"], gap[f"{prefix} naive + RTN"]
    master_sr = gap[f"{prefix} w/ master + SR"]
    sizes = {len(v) for v in (eco_sr, naive_sr, eco_rtn, naive_rtn, master_sr)}
    if len(sizes) != 1 or 0 in sizes:
        raise ValueError(f"shape_checks needs one gap per size for each of the five methods, "
                         f"the same number of sizes (at least one); got lengths "
                         f"{sorted(sizes)}")

    def num(*vals):
        return all(v is not None and math.isfinite(v) for v in vals)

    out, verdict = [], {}
    pairs = [(e, m) for e, m in zip(eco_sr, master_sr) if num(e, m)]
    naive_pen = [n - e for n, e in zip(naive_sr, eco_sr) if num(n, e)]
    if pairs:
        worst = max(abs(e - m) for e, m in pairs)
        # "close": within a tenth of naive+SR's penalty (or 0.005 when that is smaller)
        tol = max(0.005, 0.1 * max(naive_pen, default=0.0))
        verdict["eco_sr_close"] = worst <= tol
        out.append(f"ECO+SR vs master+SR: largest difference {worst:.4f} "
                   f"({'close' if verdict['eco_sr_close'] else 'not close'}: the bar is "
                   f"{tol:.4f}, the larger of 0.005 and a tenth of naive+SR's largest "
                   f"penalty; ECO+SR gap to BF16: {', '.join(_g(v) for v in eco_sr)})")
    if naive_pen:
        how = trend(naive_pen)
        verdict["naive_sr_grows"] = how == "grows with size"
        verdict["naive_sr_worse"] = all(d > 0 for d in naive_pen)
        out.append(f"naive+SR minus ECO+SR: {', '.join(f'{d:+.4f}' for d in naive_pen)} "
                   f"({how})")
    scale = max([abs(x) for x in eco_sr if num(x)] + [1e-3])
    failed = [v is None or v > 10 * scale for v in naive_rtn]
    verdict["naive_rtn_fails"] = all(failed)
    verdict["naive_rtn_diverges"] = all(v is None for v in naive_rtn)
    out.append(f"naive+RTN gap: {', '.join(_g(v) for v in naive_rtn)} "
               f"({'fails at every size' if all(failed) else 'does not fail at every size'})")
    between = [num(e, s) and e > s and (n is None or e < n)
               for e, n, s in zip(eco_rtn, naive_rtn, eco_sr)]
    verdict["eco_rtn_between"] = all(between)
    out.append(f"ECO+RTN gap: {', '.join(_g(v) for v in eco_rtn)} (between ECO+SR and "
               f"naive+RTN at {sum(between)}/{len(between)} sizes)")
    # a size where either is missing is not a size where the ordering holds
    below = [num(e, n) and e < n for e, n in zip(eco_rtn, naive_sr)]
    verdict["eco_rtn_below_naive_sr"] = bool(below) and all(below)
    diffs = [f"{e - n:+.4f}" if num(e, n) else "n/a" for e, n in zip(eco_rtn, naive_sr)]
    out.append(f"ECO+RTN minus naive+SR: {', '.join(diffs)} (ECO+RTN below at "
               f"{sum(below)}/{len(below)} sizes)")
    return out, verdict


def shape_verdict(ours: dict[str, bool], paper: dict[str, bool]) -> str:
    """One paragraph: which of the paper's shape statements (those true of its own table)
    the small scale reproduces, and which it does not."""
    same = [t for k, t in SHAPE_NAMES.items() if paper.get(k) and ours.get(k)]
    differ = [t for k, t in SHAPE_NAMES.items() if paper.get(k) and not ours.get(k)]
    text = "Reproduced at this scale: " + ("; ".join(same) if same else "none") + "."
    if differ:
        text += " Not reproduced: " + "; ".join(differ) + "."
    if paper.get("naive_rtn_diverges") and ours.get("naive_rtn_fails") and not ours.get(
            "naive_rtn_diverges"):
        text += (" naive+RTN fails by stalling rather than diverging: its updates round "
                 "away, so the loss stays near where the weights froze.")
    return text
