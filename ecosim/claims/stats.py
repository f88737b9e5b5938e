"""Small-sample statistics the verdicts share: Student-t intervals and what they decide.

Every claim that compares two methods pairs their runs by seed and judges the per-seed
differences by a two-sided t-interval (:func:`t_interval`); :func:`sign_verdict` reads an
ordering off such an interval. :func:`interval_text` and :func:`counts_text` write an interval
and a row of outcome counts the way the claims tables quote them.
"""
from __future__ import annotations

import numpy as np

__all__ = ["LEVEL", "t_interval", "sign_verdict", "interval_text", "counts_text"]

LEVEL = 0.95  # two-sided level of the t-intervals


def t_interval(x, level: float = LEVEL) -> dict:
    """Mean and two-sided Student-t interval of a sample (e.g. paired per-seed gaps).

    Args:
        x: the sample (1-D; NaN is an error: drop failed runs first).
        level: the interval's coverage, in (0, 1).

    Returns:
        ``{"n", "mean", "sd", "se", "lo", "hi"}``: ``sd`` with ``ddof=1``, ``se = sd/sqrt(n)``
        and ``[lo, hi] = mean -+ t_{(1+level)/2, n-1} se``; the spread fields are NaN below two
        values (and everything is NaN for an empty sample).

    Example:
        >>> d = t_interval([1.0, 2.0, 3.0])
        >>> d["mean"], d["se"], round(d["hi"], 4)
        (2.0, 0.5773502691896258, 4.4841)
    """
    from scipy import stats

    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 1:
        raise ValueError(f"t_interval needs a 1-D sample, got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError("t_interval needs finite values; leave diverged or stalled runs out")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    n = int(a.size)
    nan = float("nan")
    if n == 0:
        return {"n": 0, "mean": nan, "sd": nan, "se": nan, "lo": nan, "hi": nan}
    mean = float(a.mean())
    if n < 2:
        return {"n": 1, "mean": mean, "sd": nan, "se": nan, "lo": nan, "hi": nan}
    sd = float(a.std(ddof=1))
    se = sd / float(np.sqrt(n))
    h = float(stats.t.ppf(0.5 + level / 2, n - 1)) * se
    return {"n": n, "mean": mean, "sd": sd, "se": se, "lo": mean - h, "hi": mean + h}


def sign_verdict(ti: dict, expect: str) -> str:
    """Whether an interval of differences has the expected sign.

    Args:
        ti: a :func:`t_interval` of differences ``A - B``.
        expect: ``"<"`` (A below B expected) or ``">"``.

    Returns:
        ``"holds"`` when the whole interval has the expected sign, ``"reversed"`` when it has
        the other, else ``"not resolved"`` (an interval across 0, or none: NaN bounds).

    Example:
        >>> sign_verdict(t_interval([-1.0, -1.2, -0.8]), "<")
        'holds'
    """
    if expect not in ("<", ">"):
        raise ValueError(f"expect must be '<' or '>', got {expect!r}")
    below, above = ti["hi"] < 0, ti["lo"] > 0
    if expect == ">":
        below, above = above, below
    return "holds" if below else "reversed" if above else "not resolved"


def interval_text(ti: dict) -> str:
    """A :func:`t_interval` as a claims table quotes it: ``mean [lo, hi] (n=N)``, or what is
    missing below two values.

    Example:
        >>> interval_text(t_interval([1.0, 2.0, 3.0]))
        '+2.0000 [-0.4841, +4.4841] (n=3)'
        >>> interval_text(t_interval([1.0]))
        'n=1 (no interval)'
    """
    if ti["n"] < 2:
        return f"n={ti['n']} (no interval)"
    return f"{ti['mean']:+.4f} [{ti['lo']:+.4f}, {ti['hi']:+.4f}] (n={ti['n']})"


def counts_text(counts) -> str:
    """Outcome counts as a claims table quotes them: the nonzero ones, in the mapping's order.

    Example:
        >>> counts_text({"trained": 3, "stalled": 0, "diverged": 1})
        '3 trained, 1 diverged'
    """
    return ", ".join(f"{int(v)} {k}" for k, v in counts.items() if v)
