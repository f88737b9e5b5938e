"""Figure ``precision_horizon``: the smallest mantissa per buffer against log2 T, with the
slope of the relative-error theory beside it, and the verdict table on the named widths."""
from __future__ import annotations

import numpy as np
from matplotlib.lines import Line2D

from ..claims import horizon as horizon_claims
from . import style
from .base import figure

__all__ = ["precision_horizon"]

CAPTION = """
Precision against horizon (the relative-error theory of quantized Adam and Muon, Tang, Li and
Zou): for each horizon T, b2 and buffer, the smallest mantissa width M for which rounding that
buffer alone to nearest onto custom(8, M) (float32's exponent range) keeps the final loss
within 20% of the unquantized run of the same T (on Rosenbrock both floored at 1e-5), found by
bisection over M = 1 ... 15 (a point above the dotted line was not fine even at 15; the
bisection assumes a buffer fine at M is fine at every wider M, which one measured cell
contradicts, see the README). Weights are stored without a master copy. Rosenbrock: the 16-d
chained function, Muon on it as a 4x4 matrix with no AdamW parameter (b2 does not enter); MLP:
a small teacher-student network, one seed, Muon at one b2 (it enters only through the AdamW
biases); Muon has no second moment v. Marker: b2; dashed: the theory's slope (2 bits per
doubling of T for Adam's weights and v, 1 for its g and m, 1/2 for Muon), drawn through the
measured mean at the shortest T, as the theory fixes slopes, not offsets. "Within 20%" is
relative to the FP32 run of the same T and b2: where that run itself is far from converged
(Rosenbrock with b2 = 0.999), the target is loose, so b2's effect is mixed with the
reference's own progress. The verdicts on the named widths are the table under the README
paragraph (figures/precision_horizon.md).
"""

_BUFFER_COLORS = {"weights": style.COLORS["red"], "g": style.COLORS["blue"],
                  "m": style.COLORS["green"], "v": style.COLORS["purple"]}
_BUFFER_LABELS = {"weights": "weights (no master)", "g": "gradient g", "m": "1st moment m",
                  "v": "2nd moment v"}
_B2_MARKERS = ["o", "s", "^", "D", "v"]
_PROBLEM_LABELS = {"rosenbrock": "Rosenbrock", "mlp": "MLP"}
_OPT_LABELS = {"adamw": "AdamW", "muon": "Muon"}


@figure("precision_horizon", experiments=["precision_horizon"], caption=CAPTION)
def precision_horizon(precision_horizon):
    r = precision_horizon
    m_max = int(r["m_max"])
    problems = list(dict.fromkeys(str(p) for p in r["problem"]))
    optimizers = list(dict.fromkeys(str(o) for o in r["optimizer"]))
    buffers = list(dict.fromkeys(str(b) for b in r["buffer"]))
    b2_all = sorted({float(b) for b in r["b2"]})
    slopes = horizon_claims.series_slopes(r)

    fig = style.new_figure(3.6 * len(optimizers) + 0.6, 2.9 * len(problems) + 0.9)
    for _, p, j, o, ax, letter in style.panel_grid(fig, problems, optimizers):
        cell = (r["problem"] == p) & (r["optimizer"] == o)
        b2s = sorted({float(b) for b in r["b2"][cell]})
        for k, b in enumerate(buffers):
            sel = cell & (r["buffer"] == b)
            if not sel.any():
                continue
            color = _BUFFER_COLORS.get(b, style.COLORS["grey"])
            for n, b2 in enumerate(b2s):
                s = sel & (r["b2"] == b2)
                T = r["horizon"][s].astype(float)
                order = np.argsort(T)
                x = np.log2(T[order]) + 0.06 * (k - 1.5) + 0.02 * (n - 1)
                y = r["smallest"][s][order].astype(float)
                ax.plot(x, y, color=color, lw=1.0, alpha=0.8,
                        marker=_B2_MARKERS[b2_all.index(b2) % len(_B2_MARKERS)], ms=4)
            # the theory's slope through the mean at the shortest horizon
            T0 = int(r["horizon"][sel].min())
            y0 = float(np.mean(r["smallest"][sel & (r["horizon"] == T0)]))
            a = next(s["theory"] for s in slopes if (s["problem"], s["optimizer"],
                                                     s["buffer"]) == (p, o, b))
            Ts = np.unique(r["horizon"][sel]).astype(float)
            xs = np.log2(Ts)
            ax.plot(xs, y0 + a * (xs - np.log2(T0)), color=color, lw=1.0, ls="--",
                    alpha=0.6)
        ax.axhline(m_max + 0.5, color=style.COLORS["grey"], lw=0.8, ls=":")
        ax.set_ylim(0, max(m_max + 2, float(r["smallest"][cell].max()) + 1))
        Ts = np.unique(r["horizon"][cell])
        ax.set_xticks(np.log2(Ts.astype(float)))
        ax.set_xticklabels([f"{int(t) // 1000}k" if t % 1000 == 0 else str(int(t))
                            for t in Ts])
        ax.set_xlabel("horizon T (steps, log2 scale)")
        if j == 0:
            ax.set_ylabel("smallest fine M")
        ax.set_title(f"({letter}) {_OPT_LABELS.get(o, o)}, "
                     f"{_PROBLEM_LABELS.get(p, p)}", fontsize=9.5)
    handles = [Line2D([], [], color=_BUFFER_COLORS[b], lw=1.2, label=_BUFFER_LABELS[b])
               for b in buffers if b in _BUFFER_COLORS]
    handles += [Line2D([], [], color="#555555", lw=0, marker=_B2_MARKERS[n % 5], ms=4,
                       label=f"b2 = {b2:g}") for n, b2 in enumerate(b2_all)]
    handles.append(Line2D([], [], color="#555555", lw=1.0, ls="--", label="theory's slope"))
    fig.legend(handles=handles, loc="outside lower center", ncol=4, fontsize=8)

    tables = {
        "cells": {k: r[k] for k in ("problem", "optimizer", "horizon", "b2", "buffer",
                                    "smallest", "evals", "monotone", "reference",
                                    "probe_final", "probe_diverged", "probe_cls")},
        "slopes": {k: np.array([s[k] for s in slopes]) for k in (
            "problem", "optimizer", "buffer", "b2", "slope", "theory", "censored", "n")},
    }
    # a series with one horizon has no slope (smoke configs): text, so the CSV stays finite
    tables["slopes"]["slope"] = np.array(
        [repr(float(v)) if np.isfinite(v) else "n/a (one horizon)" for v in
         tables["slopes"]["slope"]])
    tables["cells"]["probe_final"] = np.array(
        [repr(float(v)) if np.isfinite(v) else "diverged" for v in r["probe_final"]])
    return fig, tables, horizon_claims.markdown_table(r)
