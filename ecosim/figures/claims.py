"""Figure ``claims``: every theoretical claim of docs/theory.md §5 beside the number that tests it.

This figure runs no simulation of its own. It reads the theory experiments behind figures 2-6
(``floor``, ``floor_additive``, ``beta_factor``, ``naive_decay``, ``rtn_stall``,
``error_similarity``) and condenses them into

* a markdown table (``claims.md``, quoted by the README through ``ecosim readme``) with one row
  per claim: what the theory says (with its predicted numbers, computed from
  :mod:`ecosim.theory`), what the runs measured, and whether the claim holds, decided by an
  explicit criterion written in the same cell;
* a compact figure: (a) measured over predicted for every quantitative prediction, on a log
  axis around 1 with +-2 standard errors; (b) the qualitative contrasts (absolute floors,
  error cosines) on their own log scale;
* the data behind both (``claims.points.csv``, ``claims.verdicts.csv``).

The verdicts, their criteria and every number in the table come from :mod:`ecosim.claims`
(computed from the runs; nothing is typed in); this module only draws them.
"""
from __future__ import annotations

import numpy as np
from matplotlib.lines import Line2D

from ..claims import HEADER, TOL_CLOSED_FORM, TOL_ETA_LAW, TOL_FP8_PARTLY  # noqa: F401
from ..claims import TOL_GROWTH_ECO, TOL_GROWTH_NAIVE, Claim, claims_markdown  # noqa: F401
from ..claims import evaluate
from . import style
from .base import figure

__all__ = ["claims", "claims_markdown", "evaluate", "Claim", "HEADER", "TOL_CLOSED_FORM",
           "TOL_FP8_PARTLY", "TOL_ETA_LAW", "TOL_GROWTH_NAIVE", "TOL_GROWTH_ECO"]

CAPTION = """
Every theoretical claim of docs/theory.md §5, tested on the runs of figures 2-6 (the same
table, with the numbers and the criteria, is claims.md, quoted in the README). (a) Measured over
predicted for each quantitative prediction, log axis, +-2 standard errors (batch means; none for
counts and growth factors); the shaded band is +-5%. (1) Normalised noise floors
E||x_hat - x*||^2/d / sigma_emp^2 of master weights, naive removal and ECO under real stochastic
rounding on the uniform grid over the closed forms, every beta and learning rate (markers:
beta); (2) ECO over master at the smallest learning rate over 1/(1 - beta^2); (3) naive's
normalised floor times 2 L eta at the smallest learning rate (the 1/eta law: 1); (4) the same
floors (and the eco/master ratio over its exact closed form) on FP8 E4M3 with an absmax scale;
(6) under a warmup + cosine schedule, the growth of each scheme's normalised error from the
plateau at the peak to the last 10% of the steps over the quasi-static closed forms; (7) RTN:
observed over predicted step (+1) of every naive stall and every ECO release; (9) ECO's absolute
floor over master's at the smallest learning rate over the exact closed-form ratio (the additive
model on 1; real SR, with and without gradient noise, far below: what a user pays is not the
normalised factor). (b) The
contrasts: (5) naive's absolute floor over master's at the smallest learning rate, real SR
(filled, marker: beta) against the additive-noise model (open) and the additive closed form
(bars); (8) consecutive quantization errors on the MLP (stars: plateau at the peak; pentagons:
last 10% of the steps): ||e_t - e_t+1|| / ||e_t||, the error ECO's substitution makes (master
weights with RTN; 1 is what injecting nothing would do), and the cosines: master weights with
RTN near 1, SR near 0 (absolute values; a hollow marker is a negative cosine).
"""

_BETA_MARKERS = ("o", "s", "D", "^", "v", "P", "X", "h")
_ADDITIVE_MARKER, _CLOSED_MARKER = "<", "|"          # panel (b), claim 5
_PHASE_MARKERS = {"peak": "*", "end": "p"}            # panel (b), claim 8
_TICKS = (0.1, 0.2, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99, 1.0, 1.01, 1.02, 1.05, 1.1,
          1.25, 1.5, 2.0, 3.0, 5.0, 10.0)


def _ticks(lo: float, hi: float, min_gap: float = 0.09) -> list[float]:
    """Ticks of a log axis around 1 from :data:`_TICKS`, at least ``min_gap`` of the axis's
    log range apart (walking outward from 1, so 1 is always kept)."""
    span = np.log(hi / lo)
    kept = [1.0]
    for side in ([t for t in _TICKS if t > 1], [t for t in reversed(_TICKS) if t < 1]):
        last = 1.0
        for t in side:
            if lo <= t <= hi and abs(np.log(t / last)) >= min_gap * span:
                kept.append(t)
                last = t
    return sorted(kept)


# -- the figure ---------------------------------------------------------------------------------

def _row_color(label: str):
    """A row's colour: the scheme it is about (``eco/master`` counts as ECO)."""
    tail = label.split(": ", 1)[-1].lower()
    for s in ("eco", "naive", "master"):
        if tail.startswith(s) or f" {s}" in tail:
            return style.METHOD_COLORS[s]
    return style.COLORS["black"]


def _plot_quantitative(ax, items, betas):
    """Panel (a): measured/predicted, one row per label, +-2 SE, log axis."""
    labels, ys = [], {}
    for c in items:
        if c.number in (5, 8):
            continue
        for p in c.points:
            if p[0] not in ys:
                ys[p[0]] = len(labels)
                labels.append(p[0])
    rng_ = np.random.default_rng(0)  # vertical jitter only (display), fixed
    lo, hi = 0.95, 1.05
    for label, y in ys.items():
        pts = [p for c in items for p in c.points if p[0] == label]
        color = _row_color(label)
        q = np.array([p[1] / p[3] for p in pts])
        e = np.array([2 * p[2] / p[3] for p in pts])
        lo, hi = min(lo, float(np.min(q - e))), max(hi, float(np.max(q + e)))
        marks = np.array([_BETA_MARKERS[betas.index(p[4]) % len(_BETA_MARKERS)]
                          if isinstance(p[4], float) and p[4] in betas else "o" for p in pts])
        jit = rng_.uniform(-0.22, 0.22, len(pts)) if len(pts) > 1 else np.zeros(1)
        for mk in dict.fromkeys(marks):  # one call per marker (hundreds of RTN points)
            k = marks == mk
            ax.errorbar(q[k], y + jit[k], xerr=e[k] if np.any(e[k] > 0) else None, fmt=mk,
                        color=color, markerfacecolor="white" if "FP8" in label else color,
                        markeredgecolor=color, ms=4.5, capsize=1.5, elinewidth=0.9,
                        alpha=0.85, zorder=4)
    ax.axvspan(1 - TOL_CLOSED_FORM, 1 + TOL_CLOSED_FORM, color=style.COLORS["green"],
               alpha=0.10, lw=0, zorder=0)
    ax.axvline(1.0, color=style.COLORS["grey"], lw=1, zorder=1)
    ax.set_xscale("log")
    pad = 1.25
    ax.set_xlim(max(lo, 1e-3) / pad ** 0.3, hi * pad ** 0.3)
    ticks = _ticks(*ax.get_xlim())
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.minorticks_off()
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylim(len(labels) - 0.5, -0.5)
    ax.grid(axis="y", visible=False)
    ax.set_xlabel("measured / predicted")
    style.panel_title(ax, "a", "Quantitative predictions")
    return labels


def _plot_contrasts(ax, items, betas):
    """Panel (b): absolute floors (claim 5) and error cosines (claim 8), log axis."""
    rows = []
    for c in items:
        if c.number in (5, 8):
            for p in c.points:
                if p[0] not in rows:
                    rows.append(p[0])
    for c in items:
        for label, m, _se, pred, key in c.points:
            if c.number not in (5, 8):
                continue
            y = rows.index(label)
            if c.number == 5:
                b = betas.index(key) if key in betas else 0  # the figure-wide β marker
                row = sorted({p[4] for p in c.points if p[0] == label})  # this row's betas
                y += (row.index(key) - (len(row) - 1) / 2) * 0.25
                additive = "additive" in label
                color = style.METHOD_COLORS["naive"]
                ax.plot(m, y, _BETA_MARKERS[b % len(_BETA_MARKERS)] if not additive
                        else _ADDITIVE_MARKER, color=color, ms=6,
                        markerfacecolor="white" if additive else color, zorder=4)
                ax.plot(pred, y, _CLOSED_MARKER, color=style.COLORS["black"], ms=11, mew=1.6,
                        zorder=5)
            else:
                color = (style.METHOD_COLORS["master"] if "master" in label
                         else style.METHOD_COLORS["eco"])
                dy = -0.12 if key == "peak" else 0.12
                ax.plot(max(abs(m), 1e-6), y + dy, _PHASE_MARKERS[key], color=color,
                        ms=8 if key == "peak" else 6.5,
                        markerfacecolor=color if m >= 0 else "white", zorder=4)
    ax.axvline(1.0, color=style.COLORS["grey"], lw=1)
    ax.set_xscale("log")
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.grid(axis="y", visible=False)
    ax.set_xlabel("value (log scale)")
    style.panel_title(ax, "b", "Contrasts")
    handles = [Line2D([], [], color=style.METHOD_COLORS["naive"], ls="none", marker="o",
                      label="(5) real SR (marker: β)"),
               Line2D([], [], color=style.METHOD_COLORS["naive"], ls="none",
                      marker=_ADDITIVE_MARKER, markerfacecolor="white",
                      label="(5) additive model"),
               Line2D([], [], color="k", ls="none", marker=_CLOSED_MARKER, ms=11, mew=1.6,
                      label="(5) additive closed form"),
               Line2D([], [], color="k", ls="none", marker=_PHASE_MARKERS["peak"], ms=8,
                      label="(8) peak plateau"),
               Line2D([], [], color="k", ls="none", marker=_PHASE_MARKERS["end"],
                      label="(8) last 10% of the steps")]
    ax.legend(handles=handles, loc="lower right", fontsize=7.5)


@figure("claims", experiments=["floor", "floor_additive", "beta_factor", "naive_decay",
                                 "rtn_stall", "error_similarity"], caption=CAPTION)
def claims(floor, floor_additive, beta_factor, naive_decay, rtn_stall, error_similarity):
    """The theory claims of docs/theory.md §5 against the runs: figure, data, markdown."""
    items = evaluate(floor, floor_additive, beta_factor, naive_decay, rtn_stall,
                     error_similarity)
    betas = sorted({float(b) for b in floor["unit_beta"]}
                   | {float(b) for b in beta_factor["tab_beta"]})

    n_a = len({p[0] for c in items if c.number not in (5, 8) for p in c.points})
    n_b = len({p[0] for c in items if c.number in (5, 8) for p in c.points})
    fig = style.new_figure(12.0, 0.32 * max(n_a, n_b) + 2.2)
    ax_a, ax_b = fig.subplots(1, 2, width_ratios=[1.35, 1.0])
    _plot_quantitative(ax_a, items, betas)
    _plot_contrasts(ax_b, items, betas)
    handles = [Line2D([], [], color=style.METHOD_COLORS[s], lw=3, label=lab)
               for s, lab in (("master", "master weights"), ("naive", "naive (no master)"),
                              ("eco", "ECO"))]
    handles += [Line2D([], [], color="k", ls="none", marker=_BETA_MARKERS[i % 8], ms=5,
                       label=f"β = {b:g}") for i, b in enumerate(betas)]
    handles += [Line2D([], [], color="k", ls="none", marker="o", markerfacecolor="white",
                       label="FP8 E4M3 (open)")]
    fig.legend(handles=handles, loc="outside upper center", ncol=min(len(handles), 7),
               fontsize=8)

    pts = [(c.number,) + p for c in items for p in c.points]
    tables = {
        "points": {
            "claim": np.array([p[0] for p in pts], np.int64),
            "item": np.array([p[1] for p in pts]),
            "tag": np.array(["" if p[5] is None else (f"beta={p[5]:g}" if isinstance(p[5], float)
                                                       else str(p[5])) for p in pts]),
            "measured": np.array([p[2] for p in pts], np.float64),
            "std_error": np.array([p[3] for p in pts], np.float64),
            "predicted": np.array([p[4] for p in pts], np.float64),
        },
        "verdicts": {
            "claim": np.array([c.number for c in items], np.int64),
            "name": np.array([c.claim for c in items]),
            "holds": np.array([c.verdict for c in items]),
            "criterion": np.array([c.criterion for c in items]),
        },
    }
    return fig, tables, claims_markdown(items)
