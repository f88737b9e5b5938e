"""Figures ``compressed_states`` and ``lowmem_pareto``: how low static memory can go."""
from __future__ import annotations

import numpy as np

from . import style
from .base import figure
from .mantissa_sweep import style_column

__all__ = ["compressed_states", "lowmem_pareto"]

CAPTION = """
ECO with compressed optimizer states on the teacher-student MLP (FP8 E4M3 weights with
row-wise absmax scales unless a row says w:e2m1; mean final validation loss over the seeds,
bars from the best to the worst seed; dashed: the unquantized FP32 run). A row is
SCHEME-WEIGHT ROUNDING then the formats of the first moment m, the second moment v and the
master copy (default FP32; FP8/FP4 states have one absmax scale per 8 elements; -sr: stochastic
rounding, else round-to-nearest). Right: static bytes per parameter at scale (the paper's
accounting, scales left out; Muon: every parameter a matrix), ||m||/||g|| over the second
half of training (how much of the stored momentum is injected error rather than averaged
gradient), and, for ECO, what the stored momentum did with the injection: the fraction kept
(in energy) and the share of injected elements left unchanged (for block-scaled formats a
re-derived scale moves the whole block, so this undercounts). (a) AdamW: with RTN weights
ECO's momentum is mostly injected error; with a round-to-nearest FP4 (one mantissa bit)
momentum its rounding error, proportional to that inflated momentum, feeds back and the run
fails, although master weights with the same momentum are fine and SR on the momentum fixes
it; v in E4M3 diverges (small entries flush to zero within a block, d falls to eps) while
E5M2 keeps the range.
(b) Muon: error feedback (eco_exact, 9 B) reproduces master weights; the experimental
memory-free injection does not beat naive storage, hurts with RTN weights, and inflates the
momentum without bound (the orthogonalisation is scale-invariant, so nothing gives the
injected error back).
"""

PARETO_CAPTION = """
How low can memory go: final validation loss (relative to the unquantized FP32 run, mean over
seeds) against static bytes per parameter at scale, for every configuration of the
compressed_states experiment; the line is the Pareto front (the best loss at or below each
memory). Circled: the ECO paper's two AdamW points, 12 bytes/param (FP32 master weights with
FP32 m and v) and 9 bytes/param (ECO: FP8 weights, FP32 m and v). Crosses at the top: runs
that diverged. Marker colour: the weight-update scheme.
"""

_SCHEME_ORDER = ("fp", "master", "eco_exact", "eco", "naive", "kahan")
_OPT_LABELS = {"adamw": "AdamW", "muon": "Muon"}


def _label(spec: str) -> str:
    return spec.replace(" ", "  ")


def _bars(ax, r, opt: str):
    sel = np.flatnonzero(r["optimizer"] == opt)
    y = np.arange(sel.size)[::-1]
    ref = float(r["reference"][sel][0])
    finite = np.isfinite(r["final_max"][sel])
    top = float(np.nanmax(np.where(finite, r["final_max"][sel], np.nan)))
    xmax = max(top, ref) * 1.25
    for yy, i in zip(y, sel):
        scheme = str(r["scheme"][i])
        color = style.METHOD_COLORS.get(scheme, style.COLORS["grey"])
        f, lo, hi = float(r["final"][i]), float(r["final_min"][i]), float(r["final_max"][i])
        if np.isfinite(f):
            ax.barh(yy, f, color=color, alpha=0.75, height=0.7)
        else:
            ax.barh(yy, xmax, color=color, alpha=0.15, height=0.7, hatch="///")
            ax.text(xmax * 0.98, yy, "diverged", ha="right", va="center", fontsize=7)
        if np.isfinite(lo):
            ax.plot([lo, min(hi, xmax)], [yy, yy], color="black", linewidth=1.0)
        note = f"{float(r['bytes_at_scale'][i]):g} B"
        mg = float(r["m_over_g"][i])
        if np.isfinite(mg):
            note += f"   |m|/|g| {mg:.2g}"
        kept, lost = float(r["inject_kept"][i]), float(r["inject_lost"][i])
        if np.isfinite(kept):
            note += f"   kept {kept:.2f}, lost {100 * lost:.0f}%"
        ax.text(1.01, yy, note, transform=ax.get_yaxis_transform(), va="center", fontsize=7.2)
    ax.axvline(ref, color="black", linestyle="--", linewidth=1.0)
    ax.set_yticks(y)
    ax.set_yticklabels([_label(str(s)) for s in r["spec"][sel]], fontsize=7.4)
    ax.set_xlim(0, xmax)
    ax.set_ylim(-0.6, sel.size - 0.4)
    ax.set_xlabel("final validation loss")
    ax.grid(axis="y", visible=False)


@figure("compressed_states", experiments=["compressed_states"], caption=CAPTION)
def compressed_states(compressed_states):
    r = compressed_states
    opts = [o for o in ("adamw", "muon") if (r["optimizer"] == o).any()]
    n = [int((r["optimizer"] == o).sum()) for o in opts]
    fig = style.new_figure(7.6, 0.24 * sum(n) + 1.6 * len(opts))
    axes = fig.subplots(len(opts), 1, height_ratios=[k + 3 for k in n], squeeze=False)[:, 0]
    for ax, o, letter in zip(axes, opts, "ab"):
        _bars(ax, r, o)
        style.panel_title(ax, letter, f"{_OPT_LABELS[o]}: loss per configuration "
                                      f"({int(r['n_seeds'])} seeds, {int(r['steps'])} steps)")
    cols = ("optimizer", "spec", "scheme", "wmode", "weights", "m", "v", "master", "final",
            "final_min", "final_max", "reference", "ratio", "cls", "inject_kept",
            "inject_lost", "m_over_g", "bytes_at_scale", "bytes_toy")
    table = {k: style_column(r[k]) for k in cols}
    for k in ("inject_kept", "inject_lost", "m_over_g"):  # blank where undefined
        table[k] = np.array(["" if not np.isfinite(v) else repr(float(v)) for v in r[k]])
    smallest = {"optimizer": [], "criterion": [], "spec": [], "bytes_at_scale": [],
                "final": [], "ratio": []}
    for o in opts:
        for crit in ("fine", "trains"):
            spec = str(r[f"smallest_{crit}_{o}"])
            i = np.flatnonzero((r["optimizer"] == o) & (r["spec"] == spec))[0]
            for k, v in (("optimizer", o), ("criterion", crit), ("spec", spec),
                         ("bytes_at_scale", float(r["bytes_at_scale"][i])),
                         ("final", float(r["final"][i])), ("ratio", float(r["ratio"][i]))):
                smallest[k].append(v)
    md = ["| optimizer | criterion | smallest configuration | bytes/param | final loss "
          "| loss / FP32 |", "|---|---|---|---|---|---|"]
    crit_text = {"fine": "within 20% of FP32", "trains": "still trains"}
    for i in range(len(smallest["spec"])):
        md.append(f"| {_OPT_LABELS[smallest['optimizer'][i]]} | "
                  f"{crit_text[smallest['criterion'][i]]} | `{smallest['spec'][i]}` | "
                  f"{smallest['bytes_at_scale'][i]:g} | {smallest['final'][i]:.4f} | "
                  f"{smallest['ratio'][i]:.2f} |")
    md.append("")
    md.append("Reference points: FP32 master weights 12 bytes/param, ECO with FP8 weights 9 "
              "(the ECO paper); scales are left out, as there.")
    return (fig, {"configs": table, "smallest": {k: np.array(v) for k, v in smallest.items()}},
            "\n".join(md))


def _front(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The Pareto front: best y at or below each x (a staircase through the points)."""
    ok = np.isfinite(y)
    order = np.lexsort((y[ok], x[ok]))
    xs, ys = x[ok][order], y[ok][order]
    fx, fy, best = [], [], np.inf
    for a, b in zip(xs, ys):
        if b < best:
            best = b
            fx.append(a)
            fy.append(b)
    return np.array(fx), np.array(fy)


@figure("lowmem_pareto", experiments=["compressed_states"], caption=PARETO_CAPTION)
def lowmem_pareto(compressed_states):
    r = compressed_states
    opts = [o for o in ("adamw", "muon") if (r["optimizer"] == o).any()]
    fig = style.new_figure(5.2 * len(opts), 4.2)
    axes = fig.subplots(1, len(opts), squeeze=False)[0]
    tables = {}
    for ax, o, letter in zip(axes, opts, "ab"):
        sel = r["optimizer"] == o
        x = r["bytes_at_scale"][sel].astype(np.float64)
        y = r["ratio"][sel].astype(np.float64)
        schemes = r["scheme"][sel]
        specs = r["spec"][sel]
        finite = np.isfinite(y)
        ytop = max(2.0, float(np.max(y[finite])) * 1.15) if finite.any() else 2.0
        for s in _SCHEME_ORDER:
            k = (schemes == s) & finite
            if k.any():
                ax.scatter(x[k], y[k], color=style.METHOD_COLORS.get(s), s=28, zorder=3,
                           label=s, edgecolor="white", linewidth=0.5)
        if (~finite).any():
            ax.scatter(x[~finite], np.full((~finite).sum(), ytop), marker="x", color="black",
                       s=30, zorder=3, label="diverged")
        fx, fy = _front(x, y)
        ax.step(fx, fy, where="post", color=style.COLORS["grey"], linewidth=1.0, zorder=2)
        if o == "adamw":
            for spec, text, off in (
                    ("master-rtn", "paper: 12 B/param\n(FP32 master, m, v)", (-4, 48)),
                    ("eco-sr", "paper: 9 B/param\n(ECO, FP32 m, v)", (-62, 22))):
                k = np.flatnonzero(specs == spec)
                if k.size and np.isfinite(y[k[0]]):
                    ax.scatter(x[k], y[k], s=160, facecolor="none", edgecolor="black",
                               linewidth=1.2, zorder=4)
                    ax.annotate(text, (x[k[0]], y[k[0]]), xytext=off,
                                textcoords="offset points", ha="right", fontsize=7.5,
                                arrowprops={"arrowstyle": "-", "linewidth": 0.7})
        ax.axhline(1.0, color="black", linestyle="--", linewidth=0.8)
        ax.set_xlim(0, max(13.0, float(x.max()) + 1))
        ax.set_ylim(0.8 * min(1.0, float(np.min(y[finite]))) if finite.any() else 0.5,
                    ytop * 1.08)
        ax.set_xlabel("static bytes per parameter (at scale)")
        ax.set_ylabel("final loss / FP32 run")
        ax.legend(loc="upper right", fontsize=7.5)
        style.panel_title(ax, letter, f"{_OPT_LABELS[o]}: memory vs loss")
        tables[f"points_{o}"] = {"spec": specs, "scheme": schemes, "bytes_at_scale": x,
                                 "ratio": style_column(y)}
        tables[f"front_{o}"] = {"bytes_at_scale": fx, "ratio": fy}
    return fig, tables
