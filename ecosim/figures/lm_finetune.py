"""Figure ``lm_finetune``: Table 2 of the ECO paper in miniature, beside the paper's numbers.

Reads the ``lm_finetune`` experiment (:mod:`ecosim.experiments.lm_finetune`): per seed, a
BF16-with-master pretraining run on the standard library's sources and, from its weights,
one INT4 fine-tuning run per method on its ``.txt`` files. What a cell says (each run's
outcome, the paired gap to INT4 with master weights and RTN with its 95% t-interval, whether
an ordering holds) is decided in :mod:`ecosim.claims`; this module only draws and writes it.

The paper's Table 2 (:data:`ecosim.recipes.TABLE2`, zero-shot accuracies of
DeepSeek-MoE-16B-Base) and this miniature share no metric: what compares is the ordering and
the size of the gaps between methods (ECO within reach of master weights, naive diverging or
far behind), not the numbers.
"""
from __future__ import annotations

import math

import numpy as np

from .. import claims as _claims
from .. import recipes
from ..experiments.lm import method_parts
from ..experiments.lm_finetune import BASE, FINETUNE_METHODS
from . import style
from .base import figure
from .mlp_methods import method_style

__all__ = ["lm_finetune", "finetune_markdown", "FINETUNE_ORDERINGS"]


def _label(method: str) -> str:
    return recipes.lm_method(method).label.replace("w/ master", "w/ MW")


def _paper_mean(method: str) -> float:
    """The paper's mean zero-shot accuracy (%) over Table 2's six benchmarks (NaN: not
    reported, the naive runs diverged)."""
    acc = recipes.TABLE2.get(method)
    return math.fsum(acc) / len(acc) if acc is not None else math.nan


def _paper_gap_text(a: str, b: str) -> str:
    pa, pb = _paper_mean(a), _paper_mean(b)
    for m, p in ((a, pa), (b, pb)):
        if math.isnan(p):
            return f"{_label(m)} diverged"
    return f"{pa - pb:+.2f} points"


#: the paper's observations as orderings of the final validation loss (A, relation, B, what
#: the paper shows: mean zero-shot accuracy of A minus B, or which run diverged)
FINETUNE_ORDERINGS = tuple(
    (a, rel, b, _paper_gap_text(a, b)) for a, rel, b in (
        ("int4_eco_rtn", "~", "int4_master_rtn"), ("int4_eco_sr", "~", "int4_master_sr"),
        ("int4_eco_rtn", "<", "int4_naive_rtn"), ("int4_eco_sr", "<", "int4_naive_sr")))

_VERDICT = {"holds": "holds", "reversed": "**reversed**", "does not hold": "**does not hold**",
            "not resolved": "not resolved"}


def _interval(d: dict) -> str:
    if d["n"] == 0:
        return ""
    if d["n"] < 2:
        return f"{d['mean']:+.4f}"
    return f"{d['mean']:+.4f} [{d['lo']:+.4f}, {d['hi']:+.4f}]"


def _mean_sd(x) -> str:
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    if not x.size:
        return ""
    return f"{x.mean():.4f}" + (f" ± {x.std(ddof=1):.4f}" if x.size > 1 else "")


def _methods(r) -> list[str]:
    present = {str(m) for m in r["method"]}
    return [m for m in FINETUNE_METHODS if m in present] + sorted(
        present - set(FINETUNE_METHODS))


def _base_row(r) -> dict:
    """Table 2's "Base": the pretrained model on the fine-tuning corpus, one value per seed
    (``seed`` ascending and ``loss`` aligned with it, whatever the order of the rows), and its
    paired gap to :data:`BASE`'s fine-tuned loss."""
    seeds = np.asarray(r["seed"]).astype(np.int64)
    method = np.asarray(r["method"]).astype(str)
    base = dict(sorted({int(s): float(v) for s, v in zip(seeds, r["base_val_loss"])}.items()))
    cells = _claims.lm_cells(r, None, BASE)
    ok = {int(s): float(v) for s, v, m, d in zip(seeds, r["val_loss"], method, r["diverged"])
          if m == BASE and not d and math.isfinite(float(v))}
    paired = [base[s] - ok[s] for s in sorted(ok) if s in base]
    return {"seed": np.array(list(base), dtype=np.int64),
            "loss": np.array(list(base.values()), dtype=np.float64),
            "gap": _claims.t_interval(paired), "cells": cells}


def finetune_markdown(r) -> str:
    """This miniature's table (with the pretrained model's row), the paper's orderings judged
    on it, and the paper's Table 2."""
    b = _base_row(r)
    cells = b["cells"]
    seeds = len({int(s) for s in r["seed"]})
    head = ["method", "val. loss after the INT4 write", "val. loss after fine-tuning",
            f"gap to {_label(BASE)} ({_claims.LM_LEVEL:.0%} interval)", "runs",
            "paper: mean zero-shot acc. (%)", f"paper: minus {_label(BASE)}"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
             "| Base (no fine-tune) | | " + _mean_sd(b["loss"]) + " | "
             + _interval(b["gap"]) + f" | {len(b['loss'])} | "
             + f"{_paper_mean('base'):.2f} | "
             + f"{_paper_mean('base') - _paper_mean(BASE):+.2f} |"]
    method = np.asarray(r["method"]).astype(str)
    for m in _methods(r):
        cell = cells[(0, m)]
        oc = cell["outcomes"]
        failed = ", ".join(f"{k} {oc[k]}" for k in ("diverged", "stalled") if oc[k])
        runs = f"{oc['trained']} of {cell['n']} trained" + (f"; {failed}" if failed else "")
        loss = (f"{cell['loss']['mean']:.4f}" + (f" ± {cell['loss']['sd']:.4f}"
                                                  if cell["loss"]["n"] > 1 else "")
                if oc["trained"] else failed)
        pm = _paper_mean(m)
        paper = ("diverged (not reported)", "") if math.isnan(pm) else (
            f"{pm:.2f}", f"{pm - _paper_mean(BASE):+.2f}" if m != BASE else "")
        lines.append(f"| {_label(m)} | {_mean_sd(r['start_val_loss'][method == m])} | {loss} | "
                     f"{_interval(cell['gap']) if m != BASE else ''} | {runs} | "
                     f"{paper[0]} | {paper[1]} |")
    steps, pre = int(np.max(r["steps"])), int(np.max(r["pretrain_tokens"]))
    lines += ["", f"Validation loss (nats per byte) on the fine-tuning corpus, {seeds} "
              f"seed{'s' * (seeds > 1)} paired by seed (the same pretrained weights, data order "
              f"and SR keys for every method): each seed pretrains preset "
              f"{r['preset'][0]} with BF16 weights and a master copy ({pre:,} tokens of the "
              f"standard library's sources, the lm experiment's run), then fine-tunes "
              f"{steps} steps ({int(np.max(r['tokens'])):,} tokens) on its .txt files with "
              "INT4 weights (one absmax scale per tensor, block linears only), weight decay 0 and "
              "the learning rate annealed to zero. Base: the pretrained model before "
              "fine-tuning; its gap is Base minus INT4 w/ MW + RTN after fine-tuning. Gaps: "
              f"mean and {_claims.LM_LEVEL:.0%} t-interval of the per-seed differences over "
              "the seeds where both trained. Runs that diverged or stalled (over the second "
              f"half their loss fell by less than {_claims.STALL_RATIO:g}x what the same "
              f"seed's {_label(BASE)} run fell) enter no mean. The paper's columns: mean of "
              "Table 2's six zero-shot accuracies (higher is better; here lower loss is "
              "better)."]
    found = _claims.lm_orderings(r, None, FINETUNE_ORDERINGS, BASE)
    if found:
        lines += ["", "The paper's observations on these runs (A - B per seed; < holds when "
                  f"the {_claims.LM_LEVEL:.0%} interval lies below 0, reversed when above; ≈ "
                  f"holds when it lies within ±{_claims.EQUIV_MARGIN:g}, does not hold when "
                  "outside; otherwise not resolved):", "",
                  "| observation | paper (accuracy A - B) | here (loss A - B) |", "|---|---|---|"]
        for o in found:
            v = _VERDICT[o["verdict"]]
            if o["how"] == "outcome":
                v += f" (by outcome: {o['failed'].upper()} stalled or diverged)"
            elif o["diff"]["n"]:
                v += f": {_interval(o['diff'])} n={o['diff']['n']}"
            rel = "<" if o["rel"] == "<" else "≈"
            lines.append(f"| {_label(o['a'])} {rel} {_label(o['b'])} | {o['paper']} | {v} |")
    bench = recipes.TABLE2_BENCHMARKS
    lines += ["", "The paper's Table 2 (DeepSeek-MoE-16B-Base, INT4 weight-only fine-tuning, "
              "zero-shot accuracy %; the naive runs diverged and are not reported):", "",
              "| method | " + " | ".join(bench) + " | mean |", "|" + "---|" * (len(bench) + 2)]
    for m, acc in recipes.TABLE2.items():
        name = "Base (no fine-tune)" if m == "base" else _label(m)
        lines.append(f"| {name} | " + " | ".join(f"{a:.2f}" for a in acc)
                     + f" | {_paper_mean(m):.2f} |")
    return "\n".join(lines)


CAPTION = """
Table 2 of the ECO paper in miniature: INT4 weight-only fine-tuning (one absmax scale per tensor)
of a BF16-pretrained byte-level decoder. Each seed pretrains the lm experiment's preset with
BF16 weights and a master copy (its run on the standard library's sources; preset, steps and
seeds: panel (a)'s title and lm_finetune.md), then
fine-tunes it on the library's .txt files (a distribution shift) under master, naive and ECO
weights with RTN or SR, with the paper's fine-tuning recipe (weight decay 0, learning rate
annealed to zero). (a) Validation loss on the fine-tuning corpus during fine-tuning (mean over
seeds; dotted: the pretrained model before fine-tuning); (b) each method's final loss minus
that of INT4 with master weights and RTN, paired by seed (bars: mean; whiskers: 95%
t-interval; hatched: RTN; a cross: every seed diverged); (c) the paper's Table 2: mean
zero-shot accuracy over six benchmarks minus that of INT4 with master weights and RTN (its
naive runs diverged). The numbers and which observations hold are in lm_finetune.md.
"""


@figure("lm_finetune", experiments=["lm_finetune"], caption=CAPTION)
def lm_finetune(lm_finetune):
    r = lm_finetune
    methods = _methods(r)
    b = _base_row(r)
    cells = b["cells"]
    fig = style.new_figure(12.0, 3.9)
    ax, bx, cx = fig.subplots(1, 3)
    method = np.asarray(r["method"]).astype(str)
    table = {k: [] for k in ("method", "runs", "trained", "stalled", "diverged", "start_loss",
                             "val_loss", "std", "gap", "gap_lo", "gap_hi", "gap_seeds",
                             "paper_mean_acc", "paper_gap")}
    others = [m for m in methods if m != BASE]
    for m in methods:
        st = method_style(*method_parts(m))
        cell = cells[(0, m)]
        rows = np.flatnonzero(method == m)
        steps, vals = r["curve_step"][rows[0]], r["curve_val"][rows]
        ok = np.isfinite(steps) & np.all(np.isfinite(vals), axis=0)  # every seed evaluated
        val = vals[:, ok].mean(axis=0)
        if val.size:
            ax.plot(steps[ok], val, color=st["color"], ls=st["ls"], marker=st["marker"], ms=3,
                    lw=1.4, label=_label(m))
        oc, gap = cell["outcomes"], cell["gap"]
        table["method"].append(m)
        table["runs"].append(cell["n"])
        for k in ("trained", "stalled", "diverged"):
            table[k].append(oc[k])
        table["start_loss"].append(float(np.mean(r["start_val_loss"][rows])))
        table["val_loss"].append(cell["loss"]["mean"])
        table["std"].append(cell["loss"]["sd"])
        table["gap"].append(gap["mean"] if m != BASE else 0.0)
        table["gap_lo"].append(gap["lo"] if m != BASE else 0.0)
        table["gap_hi"].append(gap["hi"] if m != BASE else 0.0)
        table["gap_seeds"].append(gap["n"])
        pm = _paper_mean(m)
        table["paper_mean_acc"].append(pm)
        table["paper_gap"].append(pm - _paper_mean(BASE))
        if m == BASE:
            continue
        x = others.index(m)
        rtn = m.endswith("rtn")
        if oc["trained"] == 0:
            bx.plot(x, 0, marker="x", color=st["color"], ms=9, mew=2)
        elif math.isfinite(gap["mean"]):
            bx.bar(x, gap["mean"], 0.7, color="white" if rtn else st["color"],
                   edgecolor=st["color"], hatch="///" if rtn else None, lw=1.2)
            if math.isfinite(gap["lo"]):
                bx.errorbar(x, gap["mean"], yerr=[[gap["mean"] - gap["lo"]],
                                                  [gap["hi"] - gap["mean"]]],
                            color="black", lw=1, capsize=2)
        pg = pm - _paper_mean(BASE)
        if math.isnan(pg):
            cx.plot(x, 0, marker="x", color=st["color"], ms=9, mew=2)
            cx.annotate("diverged", (x, 0), ha="center", va="bottom", fontsize=7,
                        xytext=(0, 6), textcoords="offset points", color=st["color"])
        else:
            cx.bar(x, pg, 0.7, color="white" if rtn else st["color"], edgecolor=st["color"],
                   hatch="///" if rtn else None, lw=1.2)
    base_mean = float(np.mean(b["loss"]))
    ax.axhline(base_mean, color=style.COLORS["grey"], ls=":", lw=1.2, label="Base (before)")
    ax.set_xlabel("fine-tuning step")
    ax.set_ylabel("val. loss, fine-tuning corpus")
    ax.legend(fontsize=6.5, loc="upper right")
    nseeds, n_steps = len(b["seed"]), int(np.max(r["steps"]))
    style.panel_title(ax, "a", f"fine-tuning the BF16 checkpoint ('{r['preset'][0]}')\n"
                      f"{n_steps} steps, mean of {nseeds} seed{'s' * (nseeds > 1)}")
    for x_ in (bx, cx):
        x_.axhline(0, color=style.COLORS["black"], lw=0.8)
        x_.set_xticks(range(len(others)), [_label(m).replace("INT4 ", "").replace(" + ", "\n")
                                           for m in others], fontsize=7)
    bx.set_ylabel(f"val. loss − {_label(BASE)}")
    style.panel_title(bx, "b", "here: loss gap (lower: better)")
    cx.set_ylabel(f"mean acc. − {_label(BASE)} (points)")
    style.panel_title(cx, "c", "paper: accuracy gap (higher: better)")
    tables = {"methods": {k: np.array(v) for k, v in table.items()},
              "base": {"seed": b["seed"], "base_val_loss": b["loss"]}}
    return fig, tables, finetune_markdown(r)
