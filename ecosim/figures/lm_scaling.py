"""Figure ``lm_scaling``: what moves the gap between ECO and naive master-weight removal on the
language model: the model's size, the tokens per parameter, or the learning rate.

Reads the ``lm`` experiment (the protocol ``make figures`` trains) and the shipped runs of
``lm_budget`` (the same protocol at other sizes, budgets and learning rates), set side by side
by :func:`ecosim.figures.lm.with_budget`. Each column of ``lm_table`` (one preset and setting)
is one point here. The gaps are decided in :func:`ecosim.claims.lm.lm_gaps` (paired by seed,
over the seeds where both methods trained); the paper's are Table 1's differences at its six
sizes, all at 100 tokens per parameter, each with its own peak learning rate.
"""
from __future__ import annotations

import math

import numpy as np
from matplotlib.lines import Line2D

from .. import claims as _claims
from .. import recipes
from ..claims.stats import interval_text
from . import style
from .base import figure
from .lm import BASE, columns, with_budget

__all__ = ["GAPS", "lm_scaling", "paper_gaps", "readings", "scaling_points"]

#: the gaps plotted: label -> (method A, method B), the gap being val_loss(A) - val_loss(B)
GAPS = {"naive+SR − ECO+SR": ("fp8_naive_sr", "fp8_eco_sr"),
        "ECO+SR − BF16 w/ master": ("fp8_eco_sr", BASE)}

#: the paper's sizes as numbers of parameters, and their peak learning rates (the presets of
#: ecosim.torch.model named after them hold the paper's)
_PAPER_N = {s: float(s[:-1]) * 1e6 for s in recipes.PAPER_SIZES}
_PAPER_LR = {"30M": 1.2e-3, "50M": 1.2e-3, "100M": 6e-4, "200M": 3e-4, "430M": 1.5e-4,
             "800M": 7.5e-5}
_PAPER_TPP = 100.0


def paper_gaps() -> dict[str, list[tuple[str, float]]]:
    """Each of :data:`GAPS` in the paper's Table 1: ``{label: [(size, gap), ...]}`` over the
    sizes where both methods have a number."""
    rows = {m.name: m.paper for m in recipes.TABLE1}
    out = {}
    for label, (a, b) in GAPS.items():
        out[label] = [(size, va - vb) for size, va, vb in zip(recipes.PAPER_SIZES, rows[a],
                                                              rows[b])
                      if isinstance(va, float) and isinstance(vb, float)]
    return out


def scaling_points(r) -> list[dict]:
    """One point per column of ``lm_table`` (:func:`ecosim.figures.lm.columns`) that has runs
    of both methods of a gap: ``label``, ``preset``, ``n_nonembed``, ``steps``,
    ``tokens_per_param``,
    ``lr``, ``seeds`` and, per label of :data:`GAPS`, the paired interval
    (:func:`ecosim.claims.lm.lm_gaps`; absent where the column lacks a method)."""
    cols, col = columns(r)
    gaps = {label: _claims.lm_gaps(r, a, b, col, BASE) for label, (a, b) in GAPS.items()}
    out = []
    for c, cc in enumerate(cols):
        if not any(c in g for g in gaps.values()):
            continue
        rows = np.flatnonzero(col == c)
        tokens = int(np.max(r["tokens"][rows]))
        out.append({"label": cc["label"], "preset": cc["preset"], "n_nonembed": cc["n_nonembed"],
                    "steps": cc["steps"],
                    "tokens_per_param": tokens / cc["n_nonembed"],
                    "lr": float(r["lr"][rows[0]]),
                    "seeds": len({int(s) for s in r["seed"][rows]}),
                    **{label: g[c] for label, g in gaps.items() if c in g}})
    return out


CAPTION = """
What moves the gap between ECO and naive master-weight removal (both FP8 E4M3 with stochastic
rounding) on the language model of lm_table: top, naive+SR minus ECO+SR (positive: ECO ahead);
bottom, ECO+SR minus BF16 with master weights (positive: ECO behind). Each point is one column
of lm_table (one preset, budget and learning rate; 5 seeds paired by seed; whiskers: 95%
t-interval over the seeds where both trained). (a) Against the number of non-embedding
parameters at the presets' learning rate, 20 (open) and 100 (filled) training tokens per
parameter, beside the paper's Table 1 at 100 tokens per parameter (black diamonds, 30M-800M).
(b) Against tokens per parameter, per preset. (c) Against the peak learning rate, micro at 100
tokens per parameter; the paper's sizes at their own learning rates in grey (its lr falls as
its models grow, so there size and lr move together). The numbers are in lm_scaling.md.
"""

_PRESET_COLORS = {"micro": "blue", "tiny": "orange"}


def _color(preset: str) -> str:
    return style.COLORS.get(_PRESET_COLORS.get(preset, "grey"), style.COLORS["grey"])


def _point(ax, x, g, color, filled, label=None):
    if not g or g["n"] == 0:
        return
    yerr = None
    if g["n"] > 1:
        yerr = [[g["mean"] - g["lo"]], [g["hi"] - g["mean"]]]
    ax.errorbar(x, g["mean"], yerr=yerr, color=color, marker="o", ms=6, capsize=3,
                mfc=color if filled else "white", ls="none", label=label)


#: what a reading varies: the field of a point and how it is written
_AXES = (("preset", "size", lambda p: f"{p['preset']} ({p['n_nonembed']:,})"),
         ("tokens_per_param", "tokens per parameter", lambda p: f"{p['tokens_per_param']:.0f}"),
         ("lr", "peak lr", lambda p: f"{p['lr']:g}"))


def readings(points) -> list[str]:
    """For every two columns that differ in one of size, tokens per parameter and peak lr
    only, and each gap of :data:`GAPS`: how the gap changes from one to the other
    (:func:`ecosim.claims.lm.gap_change`), the smaller value first."""
    def key(p, skip):  # budgets are planned in whole tokens per parameter
        held = {"preset": p["preset"], "tokens_per_param": round(p["tokens_per_param"]),
                "lr": round(p["lr"], 9)}
        return tuple(v for f, v in held.items() if f != skip)

    order = {"micro": 0, "tiny": 1}
    lines = []
    for field, what, fmt in _AXES:
        groups = {}
        for p in points:
            groups.setdefault(key(p, field), []).append(p)
        for ps in groups.values():
            ps = sorted(ps, key=lambda p: order.get(p[field], 9) if field == "preset"
                        else p[field])
            for a, b in zip(ps, ps[1:]):
                for label in GAPS:
                    if label not in a or label not in b:
                        continue
                    c = _claims.gap_change(a[label], b[label])
                    ci = "" if not math.isfinite(c["lo"]) else \
                        f" [{c['lo']:+.4f}, {c['hi']:+.4f}]"
                    held = ", ".join(f"{w} {f(a)}" for f2, w, f in _AXES if f2 != field)
                    lines.append(f"- {label}, {what} {fmt(a)} → {fmt(b)} ({held}): "
                                 f"{a[label]['mean']:+.4f} → {b[label]['mean']:+.4f}, "
                                 f"change {c['mean']:+.4f}{ci}: {c['verdict']}")
    return lines


def _markdown(points, note: str) -> str:
    labels = list(GAPS)
    lines = ["| column | non-embedding parameters | tokens / parameter | peak lr | seeds | "
             + " | ".join(labels) + " |", "|" + "---|" * (5 + len(labels))]
    for p in points:
        cells = [interval_text(p[k]) if k in p else "" for k in labels]
        lines.append(f"| {p['label']} | {p['n_nonembed']:,} | {p['tokens_per_param']:.1f} | "
                     f"{p['lr']:g} | {p['seeds']} | " + " | ".join(cells) + " |")
    lines += ["", "Final validation loss differences (nats per byte), per seed (same init, data "
              f"order and SR keys), mean and {_claims.LM_LEVEL:.0%} t-interval over the seeds "
              "where both methods trained (n, the number of such seeds); a run that stalled or diverged enters no "
              "difference. The paper's Table 1 (C4, 100 tokens per parameter, each size at its "
              "own peak lr):", "",
              "| paper's size | peak lr | " + " | ".join(labels) + " |",
              "|" + "---|" * (2 + len(labels))]
    paper = paper_gaps()
    for size in recipes.PAPER_SIZES:
        vals = [dict(paper[k]).get(size) for k in labels]
        lines.append(f"| {size} | {_PAPER_LR[size]:g} | "
                     + " | ".join("n/a" if v is None else f"{v:+.4f}" for v in vals) + " |")
    read = readings(points)
    if read:
        lines += ["", "What moves the gaps: each change between two columns that differ in one "
                  "of size, tokens per parameter and peak lr (difference of the two columns' "
                  f"means, {_claims.LM_LEVEL:.0%} Welch interval; the columns are different "
                  "runs):", ""] + read
    if note:
        lines += ["", note]
    return "\n".join(lines)


@figure("lm_scaling", experiments=["lm", "lm_budget"], caption=CAPTION)
def lm_scaling(lm, lm_budget=None):
    r, note = with_budget(lm, lm_budget)
    points = scaling_points(r)
    paper = paper_gaps()
    default_lr = {p["preset"]: p["lr"] for p in points
                  if p["tokens_per_param"] < 50}  # the protocol's own columns' lr
    fig = style.new_figure(11.0, 6.4)
    axes = fig.subplots(2, 3)
    tab = {k: [] for k in ("label", "preset", "n_nonembed", "tokens_per_param", "lr", "gap",
                           "mean", "lo", "hi", "n")}
    for row, label in enumerate(GAPS):
        ax_n, ax_t, ax_lr = axes[row]
        series = {}  # (panel, key) -> [(x, mean)]: points of one series joined by a line
        for p in points:
            g = p.get(label)
            if g is None:
                continue
            for k, v in (("label", p["label"]), ("preset", p["preset"]),
                         ("n_nonembed", p["n_nonembed"]),
                         ("tokens_per_param", p["tokens_per_param"]), ("lr", p["lr"]),
                         ("gap", label), ("mean", g["mean"]), ("lo", g["lo"]), ("hi", g["hi"]),
                         ("n", g["n"])):
                tab[k].append(v)
            color = _color(p["preset"])
            big = p["tokens_per_param"] >= 50
            at_default = math.isclose(p["lr"], default_lr.get(p["preset"], p["lr"]))
            placed = []
            if at_default:
                placed += [(ax_n, p["n_nonembed"], big, ("n", big)),
                           (ax_t, p["tokens_per_param"], True, ("t", p["preset"]))]
            if p["preset"] == "micro" and big:
                placed.append((ax_lr, p["lr"], True, ("lr", p["preset"])))
            for ax, x, filled, key in placed:
                _point(ax, x, g, color, filled)
                if g["n"]:
                    series.setdefault((ax, key), []).append((x, g["mean"]))
        for (ax, key), xy in series.items():
            xy.sort()
            ax.plot(*zip(*xy), color=style.COLORS["grey"], lw=0.6, zorder=1)
        sizes = [s for s, _ in paper[label]]
        vals = [v for _, v in paper[label]]
        ax_n.plot([_PAPER_N[s] for s in sizes], vals, color=style.COLORS["black"], marker="D",
                  ms=5, lw=1, label="paper (100 tok/param)")
        ax_lr.plot([_PAPER_LR[s] for s in sizes], vals, color=style.COLORS["grey"], marker="D",
                   ms=4, lw=0.8, ls=":")
        for s, v in paper[label]:
            ax_lr.annotate(s, (_PAPER_LR[s], v), xytext=(3, 2), textcoords="offset points",
                           fontsize=6, color=style.COLORS["grey"])
        for ax in (ax_n, ax_t, ax_lr):
            ax.axhline(0.0, color=style.COLORS["grey"], lw=0.8)
            ax.set_xscale("log")
            ax.set_ylabel(label)
        tpps = sorted({round(p["tokens_per_param"]) for p in points})
        ax_t.set_xticks(tpps, [str(t) for t in tpps])
        ax_t.minorticks_off()
        ax_n.set_xlabel("non-embedding parameters")
        ax_t.set_xlabel("training tokens per parameter")
        ax_lr.set_xlabel("peak learning rate")
        for ax, letter, what in ((ax_n, "a", "size"), (ax_t, "b", "tokens per parameter"),
                                 (ax_lr, "c", "learning rate")):
            style.panel_title(ax, f"{letter}{row + 1}", f"against {what}")
    handles = [
        Line2D([], [], color=_color("micro"), marker="o", ls="none", label="micro"),
        Line2D([], [], color=_color("tiny"), marker="o", ls="none", label="tiny"),
        Line2D([], [], color=style.COLORS["grey"], marker="o", mfc="white", ls="none",
                     label="20 tokens/param (open)"),
        Line2D([], [], color=style.COLORS["black"], marker="D", label="paper, 100 tok/param")]
    axes[0][0].legend(handles=handles, fontsize=6.5, loc="best")
    table = {k: np.array(v) for k, v in tab.items()}
    return fig, {"gaps": table}, _markdown(points, note)
