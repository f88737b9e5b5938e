"""Figure ``lm_moe``: the ECO paper's Figure 3 (a sparse MoE with FP8 expert weights) in
miniature, beside the paper's numbers.

Reads the ``lm_moe`` experiment (:mod:`ecosim.experiments.lm_moe`). Runs are grouped as in
``lm_table`` (one column per preset and setting, :mod:`ecosim.figures.lm`); within a column
each method's final validation loss is paired by seed with FP8 master + SR's (the paper's
reference in its Figure 3). :mod:`ecosim.claims.lm_moe` decides each run's outcome (trained,
stalled, diverged: failed runs are counted, never averaged), the 95% t-intervals and which of
the paper's observations hold, and holds the paper's numbers (approximate: read from a bar
chart); this module only draws and writes them.
"""
from __future__ import annotations

import math

import numpy as np

from .. import claims as _claims
from ..claims import lm_moe as _verdicts
from . import lm as _lm
from . import style
from .base import figure

__all__ = ["lm_moe", "lm_moe_markdown"]

BASE = _verdicts.MOE_BASE


def lm_moe_markdown(r, cols, col, cells) -> str:
    """Our table (loss, paired gap to FP8 master + SR with its interval, outcomes), the
    paper's observations judged on the runs, and the paper's Figure 3."""
    methods = _lm.method_order(r)
    head = ["method"] + [c["label"] for c in cols] + ["paper SMoE (gap)", "paper Gemma (gap)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m in methods:
        row = [_lm.cell_text(cells, c, m, BASE) for c in range(len(cols))]
        for model in ("SMoE", "Gemma"):
            v, g = _verdicts.paper_loss(model, m), _verdicts.paper_gap(model, m)
            row.append("" if not math.isfinite(v) else
                       f"{v:.4f}" + (f" ({g:+.4f})" if m != BASE else ""))
        lines.append(f"| {_lm.method_label(m)} | " + " | ".join(row) + " |")
    prot = []
    for c, cc in enumerate(cols):
        rows = np.flatnonzero(col == c)
        tokens, active = int(np.max(r["tokens"][rows])), int(r["n_active"][rows[0]])
        seeds = len({int(x) for x in r["seed"][rows]})
        prot.append(f"{cc['label']}: {active:,} active of {cc['n_nonembed']:,} non-embedding "
                    f"parameters, {cc['steps']} steps, {tokens:,} training tokens = "
                    f"{tokens / active:.1f} per active parameter, {seeds} seed"
                    + "s" * (seeds > 1))
    lines += ["", f"Validation loss (nats per byte) at the end ({'; '.join(prot)}): mean ± "
              "standard deviation over the seeds that trained; in brackets the gap to FP8 "
              "with master weights + SR paired by seed (same init, data order and SR keys), "
              f"mean and {_claims.LM_LEVEL:.0%} t-interval; stalled or diverged runs are "
              "counted, not averaged (as in lm_table). Paper: final validation loss of its "
              "Figure 3 (a bar chart) as a secondary summary of the paper gives it "
              "(approximate), in brackets minus its FP8 w/ MW + SR; that summary gives the "
              "SMoE two naive-removal values (2.9144, 3.0997) without saying which rounding "
              "each is, so neither is labelled or compared."]
    found = _verdicts.moe_orderings(r, col)
    if found:
        lines += ["", "The paper's observations on these runs (A - B per seed, mean and "
                  f"{_claims.LM_LEVEL:.0%} t-interval; < holds when the interval lies below 0; "
                  f"≈ holds when it lies within ±{_claims.EQUIV_MARGIN:g}):", "",
                  "| paper's observation | paper (A - B) | "
                  + " | ".join(c["label"] for c in cols) + " |",
                  "|" + "---|" * (2 + len(cols))]
        by = {(o["group"], o["a"], o["b"]): o for o in found}
        for a, rel, b, paper in _verdicts.MOE_ORDERINGS:
            row = [f"{_lm.method_label(a)} {'<' if rel == '<' else '≈'} "
                   f"{_lm.method_label(b)}", paper]
            for c in range(len(cols)):
                o = by.get((c, a, b))
                if o is None:
                    row.append("")
                    continue
                row.append(_lm.verdict_text(o))
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


CAPTION = """
The ECO paper's Figure 3 in miniature: a sparse mixture-of-experts decoder (preset micro_moe:
d_model 32, 2 blocks, each with 4 SwiGLU experts of width 64 and a top-2 router, load-balancing
loss 0.01) in which, as in the paper, only the expert linear layers hold FP8 E4M3 weights
(row-wise scales); router, attention, embedding and head stay FP32 under AdamW, trained on the
Python standard library's sources, seeds paired by seed (steps, tokens per active parameter
and seeds: panel (a)'s title and lm_moe.md). (a) Validation loss, mean over the seeds.
(b) Final validation loss minus FP8 master + SR's, per seed (bars: mean; whiskers: 95%
t-interval; hatched: RTN); black diamonds: the paper's gaps (SMoE 2.1B on LM1B, from a secondary
summary of its bar chart; its two naive values, whose rounding is not stated, are in lm_moe.md
and not drawn). Runs that stalled
or diverged are marked at the top and not averaged.
"""


@figure("lm_moe", experiments=["lm_moe"], caption=CAPTION)
def lm_moe(lm_moe):
    r = lm_moe
    cols, col = _lm.columns(r)
    cells = _verdicts.moe_cells(r, col)
    methods = _lm.method_order(r)
    fig = style.new_figure(10.0, 3.9)
    ax, bx = fig.subplots(1, 2)
    big = len(cols) - 1
    final = {k: [] for k in ("setting", "method", "runs", "trained", "stalled", "diverged",
                             "val_loss", "sd", "gap", "gap_lo", "gap_hi", "gap_seeds",
                             "paper_smoe", "paper_smoe_gap", "paper_gemma", "paper_gemma_gap")}
    others = [m for m in methods if m != BASE]
    width = 0.8 / max(len(others), 1)
    tops = [0.0]
    for m in methods:
        st = _lm.run_style(m)
        for c, cc in enumerate(cols):
            cell = cells.get((c, m))
            if cell is None:
                continue
            oc = cell["outcomes"]
            final["setting"].append(cc["label"])
            final["method"].append(m)
            final["runs"].append(cell["n"])
            for k in ("trained", "stalled", "diverged"):
                final[k].append(oc[k])
            final["val_loss"].append(cell["loss"]["mean"])
            final["sd"].append(cell["loss"]["sd"])
            g = cell["gap"]
            final["gap"].append(g["mean"])
            final["gap_lo"].append(g["lo"])
            final["gap_hi"].append(g["hi"])
            final["gap_seeds"].append(g["n"])
            for model, key in (("SMoE", "paper_smoe"), ("Gemma", "paper_gemma")):
                final[key].append(_verdicts.paper_loss(model, m))
                final[key + "_gap"].append(_verdicts.paper_gap(model, m))
            if m == BASE:
                continue
            x = c + (others.index(m) - (len(others) - 1) / 2) * width
            if oc["trained"] == 0:
                tops.append(math.inf)  # drawn at the top once the scale is known
                continue
            rtn = m.endswith("rtn")
            bx.bar(x, g["mean"], width * 0.9, color="white" if rtn else st["color"],
                   edgecolor=st["color"], hatch="///" if rtn else None, lw=1.2,
                   label=_lm.method_label(m) if c == 0 else None)
            tops += [g["mean"], g["hi"] if math.isfinite(g["hi"]) else g["mean"]]
            if math.isfinite(g["lo"]):
                bx.errorbar(x, g["mean"], yerr=[[g["mean"] - g["lo"]], [g["hi"] - g["mean"]]],
                            color="black", lw=1, capsize=2)
            paper = _verdicts.paper_gap("SMoE", m)
            if math.isfinite(paper):
                bx.plot(x, paper, marker="D", color="black", ms=5, ls="none",
                        label="paper (SMoE 2.1B)" if c == 0 and m == "fp8_eco_sr" else None)
        rows = np.flatnonzero((col == big) & (r["method"] == m))
        if rows.size:
            step, _, val = _lm.aligned_curves(r, rows)
            ok = np.all(np.isfinite(val), axis=0)
            ax.plot(step[ok], val[:, ok].mean(axis=0), color=st["color"], ls=st["ls"],
                    marker=st["marker"], ms=3.5, lw=1.5, label=_lm.method_label(m))
    top = max([t for t in tops if math.isfinite(t)]) * 1.15 + 0.005
    for m in others:  # every seed failed: a cross (diverged) or triangle (stalled) at the top
        for c in range(len(cols)):
            cell = cells.get((c, m))
            if cell is not None and cell["outcomes"]["trained"] == 0:
                x = c + (others.index(m) - (len(others) - 1) / 2) * width
                stalled = cell["outcomes"]["stalled"] >= cell["outcomes"]["diverged"]
                bx.plot(x, top, marker="v" if stalled else "x", color=_lm.run_style(m)["color"],
                        ms=8, mew=2, label=f"{_lm.method_label(m)} "
                        f"({'stalled' if stalled else 'diverged'})")
    bx.axhline(0, color=style.COLORS["black"], lw=0.8)
    bx.set_xticks(range(len(cols)), [c["label"].replace(" · ", "\n") for c in cols])
    bx.set_ylabel("val. loss − FP8 master + SR")
    bx.legend(fontsize=7, loc="upper left")
    style.panel_title(bx, "b", "gap to FP8 with master weights + SR")
    ax.set_xlabel("update")
    ax.set_ylabel("validation loss (nats/byte)")
    fin = [v for v in final["val_loss"] if math.isfinite(v)]
    if fin:
        ax.set_ylim(min(fin) * 0.97, max(fin) * 1.35)
    ax.legend(fontsize=7, loc="upper right")
    nseeds = len({int(x) for x in r["seed"][col == big]})
    tokens = int(np.max(r["tokens"][col == big]))
    per = tokens / int(r["n_active"][np.flatnonzero(col == big)[0]])
    style.panel_title(ax, "a", f"'{cols[big]['preset']}': validation loss, mean of {nseeds} "
                      f"seed{'s' * (nseeds > 1)}\n{cols[big]['steps']} steps, {per:.3g} "
                      "tokens per active parameter")
    fig3 = _verdicts.PAPER_FIG3
    paper = {"model": np.array([p[0] for p in fig3]), "method": np.array([p[1] for p in fig3]),
             "val_loss": np.array([p[2] for p in fig3])}
    tables = {"final": {k: np.array(v) for k, v in final.items()}, "paper": paper}
    return fig, tables, lm_moe_markdown(r, cols, col, cells)
