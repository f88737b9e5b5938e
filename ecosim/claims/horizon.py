"""Verdicts on the precision-against-horizon claims, computed from ``precision_horizon``.

The claims come from two places and are tested, not assumed:

* the paper (Tang, Li, Zou, arXiv 2510.21314; :mod:`ecosim.horizon`): the mantissa a buffer
  needs grows with ``log2 T`` at slope 2 (Adam's weights and v), 1 (Adam's g and m) and 1/2
  (Muon), and Adam's weights and v need more bits as ``b2 -> 1``;
* a secondary summary of it, which names widths: Adam W5/G7/m10/v10, Muon W3/G5/m5, and "Adam
  diverges on Rosenbrock at M = 4".

Rules (each verdict is ``"agree"``, ``"disagree"`` or ``"mixed"``):

named width ``w`` for a buffer
    read as "``w`` mantissa bits suffice": per problem, agree when the smallest fine ``M`` of
    every measured cell (every horizon and ``b2``) is at most ``w``, disagree when none is,
    mixed otherwise. The measured range is shown, so a width that is far more than needed is
    visible too.
divergence at ``M = 4``
    all four buffers at the probe width, Adam on Rosenbrock, every cell: agree when every run
    diverged, disagree when none did, mixed otherwise (the classes are shown).
slope
    per (problem, b2) series the least-squares slope of the smallest ``M`` against ``log2 T``,
    compared with the theory's: a series agrees when it is less than 0.5 bit per doubling away
    (an integer ``M`` over ``k`` doublings resolves slopes to about ``1/k``; the default grid
    spans 2 doublings on the MLP and 4 on Rosenbrock, hence the coarse tolerance); agree when every series does,
    disagree when none does, mixed otherwise. Series with a cell above the searched range are
    left out (their slope is only a lower bound) and counted.
``b2 -> 1``
    the mean over (problem, T) of ``M(b2 = largest) - M(b2 = smallest)`` for Adam's weights
    and v: agree when at least 1 bit, disagree otherwise.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..horizon import ERROR_ORDERS

__all__ = ["NAMED_WIDTHS", "PROBE_CLAIM", "width_verdicts", "divergence_verdict",
           "slope_verdicts", "b2_verdicts", "verdicts", "markdown_table", "series_slopes"]

#: The widths the secondary summary names, as (optimizer, buffer) -> M.
NAMED_WIDTHS = {("adamw", "weights"): 5, ("adamw", "g"): 7, ("adamw", "m"): 10,
                ("adamw", "v"): 10, ("muon", "weights"): 3, ("muon", "g"): 5, ("muon", "m"): 5}
PROBE_CLAIM = "Adam diverges on Rosenbrock at M = 4"
_THEORY_NAME = {"adamw": "adam", "muon": "muon"}
_LABEL = {"adamw": "Adam", "muon": "Muon"}
_BUF = {"weights": "W", "g": "G", "m": "m", "v": "v"}
_REQUIRED = ("problem", "optimizer", "horizon", "b2", "buffer", "smallest", "m_max",
             "probe_mantissa", "probe_diverged", "probe_cls")


def _check(results: Mapping) -> None:
    missing = [k for k in _REQUIRED if k not in results]
    if missing:
        raise ValueError(f"expected precision_horizon results; missing keys {missing}")


def _three_way(n_yes: int, n: int) -> str:
    if n == 0:
        raise ValueError("no measured cells for this claim")
    return "agree" if n_yes == n else "disagree" if n_yes == 0 else "mixed"


def _sel(r, **kw) -> np.ndarray:
    s = np.ones(len(r["problem"]), bool)
    for k, v in kw.items():
        s &= np.asarray(r[k]) == v
    return s


def width_verdicts(results: Mapping) -> list[dict]:
    """One row per (named width, problem): the measured smallest M and the verdict."""
    _check(results)
    r, out = results, []
    m_max = int(r["m_max"])
    for (opt, buf), w in NAMED_WIDTHS.items():
        for p in dict.fromkeys(str(x) for x in r["problem"]):
            sel = _sel(r, optimizer=opt, buffer=buf, problem=p)
            if not sel.any():
                continue
            ms = np.asarray(r["smallest"])[sel]
            lo, hi = (f">{m_max}" if m > m_max else str(m) for m in (int(ms.min()),
                                                                    int(ms.max())))
            text = hi if lo == hi else f"{lo} to {hi}"
            out.append({"claim": f"{_LABEL[opt]} {_BUF[buf]}{w}", "problem": p,
                        "measured": (f"smallest M {text} over {int(sel.sum())} "
                                     f"cell{'s' if sel.sum() > 1 else ''}"),
                        "n": int(sel.sum()), "n_agree": int((ms <= w).sum()),
                        "verdict": _three_way(int((ms <= w).sum()), int(sel.sum()))})
    return out


def divergence_verdict(results: Mapping) -> dict:
    """The probe run (all buffers at ``probe_mantissa``), AdamW on Rosenbrock, every cell."""
    _check(results)
    r = results
    # one probe per cell: take the first buffer's row of each (horizon, b2)
    sel = _sel(r, optimizer="adamw", problem="rosenbrock") & (np.asarray(r["buffer"])
                                                                == r["buffer"][0])
    if not sel.any():
        raise ValueError("no AdamW Rosenbrock cells in the results")
    div = np.asarray(r["probe_diverged"])[sel]
    classes = np.asarray(r["probe_cls"])[sel]
    counts = ", ".join(f"{int((classes == c).sum())} {c}" for c in ("fine", "degraded",
                                                                     "failed")
                       if (classes == c).any())
    return {"claim": PROBE_CLAIM, "problem": "rosenbrock",
            "measured": (f"all buffers at M = {int(r['probe_mantissa'])}: "
                         f"{int(div.sum())} of {div.size} runs diverged ({counts})"),
            "n": int(div.size), "n_agree": int(div.sum()),
            "verdict": _three_way(int(div.sum()), int(div.size))}


def series_slopes(results: Mapping) -> list[dict]:
    """Least-squares slope of the smallest M against log2 T per (problem, optimizer, buffer,
    b2); ``censored`` when a cell lies above the searched range."""
    _check(results)
    r, out = results, []
    keys = dict.fromkeys(zip(*(map(str, r[k]) for k in ("problem", "optimizer", "buffer")),
                             map(float, r["b2"])))
    for p, o, b, b2 in keys:
        sel = _sel(r, problem=p, optimizer=o, buffer=b) & (np.asarray(r["b2"]) == b2)
        T = np.asarray(r["horizon"])[sel].astype(float)
        M = np.asarray(r["smallest"])[sel].astype(float)
        slope = (round(float(np.polyfit(np.log2(T), M, 1)[0]), 9) + 0.0
                 if np.unique(T).size >= 2 else np.nan)
        out.append({"problem": p, "optimizer": o, "buffer": b, "b2": b2, "slope": slope,
                    "theory": ERROR_ORDERS[_THEORY_NAME[o]][b],
                    "censored": bool((M > int(r["m_max"])).any()), "n": int(sel.sum())})
    return out


def slope_verdicts(results: Mapping, tol: float = 0.5) -> list[dict]:
    """Per (optimizer, buffer): the measured slope of every series against the theory's."""
    rows, out = series_slopes(results), []
    for o, b in dict.fromkeys((s["optimizer"], s["buffer"]) for s in rows):
        ss = [s for s in rows if (s["optimizer"], s["buffer"]) == (o, b)]
        ok = [s["slope"] for s in ss if not s["censored"] and np.isfinite(s["slope"])]
        theory = ss[0]["theory"]
        cens = sum(s["censored"] for s in ss)
        note = f"; {cens} censored series left out" if cens else ""
        if not ok:
            out.append({"claim": f"{_LABEL[o]} {b}: slope {theory:g} bit per doubling of T",
                        "problem": "all", "measured": f"no uncensored series{note}",
                        "n": 0, "n_agree": 0, "verdict": "mixed"})
            continue
        mean = float(np.mean(ok)) + 0.0
        ok = [v + 0.0 for v in ok]
        n_ok = sum(abs(v - theory) < tol for v in ok)
        out.append({"claim": f"{_LABEL[o]} {b}: slope {theory:g} bit per doubling of T",
                    "problem": "all",
                    "measured": (f"slope {min(ok):.2f} to {max(ok):.2f} (mean {mean:.2f}) over "
                                 f"{len(ok)} series, {n_ok} less than {tol:g} away{note}"),
                    "n": len(ok), "n_agree": int(n_ok), "verdict": _three_way(n_ok, len(ok))})
    return out


def b2_verdicts(results: Mapping) -> list[dict]:
    """Adam's weights and v: the mean change of the smallest M from the smallest to the
    largest b2 at equal (problem, T)."""
    _check(results)
    r, out = results, []
    for b in ("weights", "v"):
        diffs = []
        for p in dict.fromkeys(str(x) for x in r["problem"]):
            sel = _sel(r, optimizer="adamw", buffer=b, problem=p)
            b2s = np.unique(np.asarray(r["b2"])[sel])
            if b2s.size < 2:
                continue
            for T in np.unique(np.asarray(r["horizon"])[sel]):
                at = sel & (np.asarray(r["horizon"]) == T)
                lo = np.asarray(r["smallest"])[at & (np.asarray(r["b2"]) == b2s[0])]
                hi = np.asarray(r["smallest"])[at & (np.asarray(r["b2"]) == b2s[-1])]
                if lo.size and hi.size:
                    diffs.append(int(hi[0]) - int(lo[0]))
        if not diffs:
            continue
        mean = float(np.mean(diffs))
        out.append({"claim": f"Adam {b}: more bits as b2 -> 1", "problem": "all",
                    "measured": (f"M(largest b2) - M(smallest b2): mean {mean:+.2f} bits over "
                                 f"{len(diffs)} (problem, T) pairs, range {min(diffs):+d} to "
                                 f"{max(diffs):+d}"),
                    "n": len(diffs), "n_agree": int(mean >= 1),
                    "verdict": "agree" if mean >= 1 else "disagree"})
    return out


def verdicts(results: Mapping) -> list[dict]:
    """Every verdict: named widths, the M = 4 divergence, slopes, b2 sensitivity."""
    out = width_verdicts(results)
    if _sel(results, optimizer="adamw", problem="rosenbrock").any():
        out.append(divergence_verdict(results))
    return out + slope_verdicts(results) + b2_verdicts(results)


def markdown_table(results: Mapping) -> str:
    """The verdicts as the markdown table the README quotes (``figures/precision_horizon.md``)."""
    lines = ["| claim | problem | measured | verdict |", "|---|---|---|---|"]
    for v in verdicts(results):
        lines.append(f"| {v['claim']} | {v['problem']} | {v['measured']} | {v['verdict']} |")
    return "\n".join(lines)
