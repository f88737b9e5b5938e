"""Figures ``dqt``, ``dqt_claims`` and ``dqt_lm``: DQT (Zhao et al., arXiv 2412.04787).

``dqt`` and ``dqt_claims`` read the NumPy ``dqt`` experiment (:mod:`ecosim.experiments.dqt`,
the MLP; numbers, outcomes and verdicts from :mod:`ecosim.claims.dqt`), ``dqt_lm`` the torch
``dqt_lm`` experiment (:mod:`ecosim.experiments.dqt_lm`, the micro LM; verdicts from
:mod:`ecosim.claims.dqt_lm`), so a NumPy-only install still builds the first two. These
functions only draw. ``dqt`` writes the paired-gap table as ``dqt.md``, ``dqt_claims`` the
claims table as ``dqt_claims.md``, ``dqt_lm`` the LM's claims rows and gap table as
``dqt_lm.md``.
"""
from __future__ import annotations

import math

import numpy as np

from ..claims import dqt as dqt_claims
from ..claims import dqt_lm as dqt_lm_claims
from ..claims.dqt import method_label, outcomes, summary
from . import style
from .base import figure

__all__ = ["dqt", "dqt_claims_figure", "dqt_lm_figure"]

CAPTION = """
DQT (direct quantized training: no master copy, every AdamW update written onto the previous
step's ternary or n-bit integer grid, one scale per tensor) on the teacher-student MLP
(8-32-32-2, ReLU, label noise 0.3; dotted: the irreducible loss 0.09), AdamW (b = (0.9, 0.98),
eps = 1e-9), batch 8, 1000 steps, warmup + cosine from 3e-3, 4 seeds paired by seed (initial
weights, batch order, SR draws). (a) Mean validation loss over the seeds of the main methods:
FP32 AdamW (black), BitNet b1.58 (FP32 master weights, absmean-ternary weights and 8-bit
absmax activations in the forward, straight-through gradients; grey), DQT with stochastic
rounding on ternary, INT2, INT4 and INT8 grids with the reference code's signed-max scale, DQT
INT2 with ecosim's default absmax scale (dash-dot: a weight at code -2 doubles that scale),
DQT INT8 with round-to-nearest (dashed), and the INT8 DQT model evaluated with its weights
re-quantized to ternary (dotted). A cross ends a
curve where a seed stopped. (b) Final validation loss minus FP32's on the same seed: mean and
95% t-interval over the seeds where both trained; the right column counts the seeds that
trained / stalled (covered less than half the way from their initial loss to FP32's final
loss) / diverged.
"""

CLAIMS_CAPTION = """
DQT's four claims (Zhao et al., arXiv 2412.04787) against the runs of figure `dqt`: the number
that tests each claim (mean and 95% t-interval over paired seeds) and its threshold (dashed);
verdicts and criteria in `figures/dqt_claims.md`. (1) DQT+SR minus FP32 AdamW per grid; (2)
INT8 DQT minus BitNet b1.58; (3) DQT INT8 with BF16 or FP8 (E4M3, row-wise scales) AdamW
moments minus the same with FP32 moments; (4) the fraction of the INT8 model's loss reduction
kept when its weights are re-quantized to ternary. The same claims (1) and (2) on the language
model: figure `dqt_lm`.
"""

LM_CAPTION = """
DQT's claims (1) and (2) (Zhao et al., arXiv 2412.04787) on the micro language model
(experiment `dqt_lm`: Table 1's protocol, 650 steps, 3 seeds paired by seed; DQT's block
linears stored as INT8 or ternary codes with one scale per tensor and written with stochastic
rounding, BitNet b1.58 with FP32 master weights and a ternary/INT8 forward): mean and 95%
t-interval over the paired seeds where both runs trained, in nats per byte; verdicts,
criteria and the per-method gap table in `figures/dqt_lm.md`. (a) Final validation loss of DQT
minus FP32 AdamW per grid. (b) DQT INT8 minus BitNet b1.58; dashed: the MLP's tolerance (5% of
BitNet's loss), which on this model is most of BitNet's own gap to FP32, so the interval, not
the verdict, is the number to read.
"""

_CURVES = ("fp32", "bitnet", "dqt_ternary_sr", "dqt_int2_sr", "dqt_int4_sr", "dqt_int8_sr",
           "dqt_int2_sr_absmax", "dqt_int8_rtn", "dqt_int8_sr_ternary_inference")
_COLORS = {"fp32": "black", "bitnet": "grey", "ternary": "purple", "int2": "red",
           "int4": "orange", "int8": "blue"}


def _color(method: str) -> str:
    key = method if method in _COLORS else method.split("_")[1]
    return style.COLORS[_COLORS[key]]


def _ls(method: str) -> str:
    if method.endswith("ternary_inference"):
        return ":"
    if method.endswith("_absmax"):
        return "-."
    return "--" if method.endswith("_rtn") else "-"


def _curve(r, rows):
    """Mean over seeds up to the first point where a seed stopped; whether one stopped."""
    v = r["val_loss"][rows]
    alive = np.all(np.isfinite(v), axis=0)
    n = v.shape[1] if alive.all() else int(np.argmin(alive))
    return r["step"][rows[0]][:n].astype(np.float64), v[:, :n].mean(axis=0), not alive.all()


@figure("dqt", experiments=["dqt"], caption=CAPTION)
def dqt(dqt):
    """Curves and the paired-gap table of the ``dqt`` experiment."""
    r = dqt
    cfg = r.config
    rows_all = summary(r)
    fig = style.new_figure(12.0, 0.3 * len(rows_all) + 2.4)
    ax, bx = fig.subplots(1, 2, width_ratios=[1.0, 1.15])
    curves = {k: [] for k in ("method", "step", "mean")}
    present = set(r["unit_method"].tolist())
    for m in _CURVES:
        if m not in present:
            continue
        rows = np.flatnonzero(r["unit_method"] == m)
        step, mean, stopped = _curve(r, rows)
        ax.plot(step, mean, color=_color(m), ls=_ls(m), lw=1.4, label=method_label(m))
        if stopped and step.size:
            ax.plot(step[-1], mean[-1], "x", color=_color(m), ms=8, mew=2)
        curves["method"] += [m] * step.size
        curves["step"] += step.tolist()
        curves["mean"] += mean.tolist()
    ax.axhline(cfg.noise**2, color=style.COLORS["grey"], ls=":", lw=1)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("validation loss (mean over seeds)")
    ax.legend(fontsize=7.5, loc="upper right")
    style.panel_title(ax, "a", "Validation loss")

    gaps = {k: [] for k in ("method", "trained", "stalled", "diverged", "mean_final",
                            "gap_mean", "gap_lo", "gap_hi", "gap_n", "bytes_per_param")}
    y = np.arange(len(rows_all))
    for i, s in enumerate(rows_all):
        g = s["gap"]
        m = s["method"]
        if g["n"] >= 2:
            bx.errorbar(g["mean"], i, xerr=[[g["mean"] - g["lo"]], [g["hi"] - g["mean"]]],
                        fmt="o", color=_color(m) if m.split("_")[0] != "eco" else
                        style.METHOD_COLORS["eco"], ms=5, capsize=3)
        for k in ("trained", "stalled", "diverged"):
            gaps[k].append(s[k])
        gaps["method"].append(m)
        gaps["mean_final"].append(s["mean"])
        gaps["gap_mean"].append(g["mean"])
        gaps["gap_lo"].append(g["lo"])
        gaps["gap_hi"].append(g["hi"])
        gaps["gap_n"].append(g["n"])
        gaps["bytes_per_param"].append(s["bytes"])
    bx.axvline(0.0, color=style.COLORS["black"], lw=1)
    bx.set_xscale("symlog", linthresh=1e-3)
    bx.set_yticks(y, [s["label"] for s in rows_all], fontsize=7.5)
    bx.set_ylim(len(rows_all) - 0.5, -0.5)
    bx.grid(axis="y", visible=False)
    bx.set_xlabel("final val loss − FP32's, same seed (symlog; linear below 1e-3)")
    right = bx.secondary_yaxis("right")
    right.set_yticks(y, [f"{s['trained']}/{s['stalled']}/{s['diverged']}" for s in rows_all],
                     fontsize=7.5)
    right.set_ylabel("trained / stalled / diverged", fontsize=8)
    style.panel_title(bx, "b", "Paired gap to FP32 AdamW, 95% t-interval")
    tables = {
        "curves": {"method": np.array(curves["method"]),
                   "step": np.array(curves["step"], np.float64),
                   "mean": np.array(curves["mean"], np.float64)},
        "gaps": {k: np.array(v, np.float64 if k not in ("method",) else None)
                 for k, v in gaps.items()},
    }
    return fig, tables, dqt_claims.gap_table_markdown(r)


@figure("dqt_claims", experiments=["dqt"], caption=CLAIMS_CAPTION)
def dqt_claims_figure(dqt):
    """The four claims' numbers and thresholds on the MLP, and the claims table as markdown."""
    r = dqt
    items = dqt_claims.evaluate(r)
    thresholds = _thresholds(r)
    fig = style.new_figure(11.0, 3.4)
    axes = fig.subplots(1, len(items))
    tables = _claim_panels(axes, items, thresholds, "abcd", "")
    return fig, tables, dqt_claims.claims_markdown(items)


@figure("dqt_lm", experiments=["dqt_lm"], caption=LM_CAPTION)
def dqt_lm_figure(dqt_lm):
    """Claims (1) and (2) on the LM: numbers and threshold, and as markdown the claims rows
    and the per-method gap table."""
    items = dqt_lm_claims.lm_claims(dqt_lm)
    thresholds = {1: [], 2: [dqt_lm_claims.lm_threshold(dqt_lm)]}
    fig = style.new_figure(8.0, 3.0)
    axes = fig.subplots(1, len(items))
    tables = _claim_panels(axes, items, thresholds, "ab", ", LM")
    return fig, tables, (dqt_claims.claims_markdown(items) + "\n\n"
                         + dqt_lm_claims.lm_gap_table_markdown(dqt_lm))


def _claim_panels(axes, items, thresholds, letters: str, suffix: str) -> dict:
    """One panel per claim: its points with intervals, its thresholds (dashed) and 0; the
    tables ``points`` and ``verdicts``."""
    pts = {k: [] for k in ("claim", "item", "mean", "lo", "hi")}
    for ax, letter, c in zip(axes, letters, items):
        for j, (label, mean, lo, hi) in enumerate(c.points):
            if math.isfinite(lo):
                ax.errorbar(mean, j, xerr=[[mean - lo], [hi - mean]], fmt="o", capsize=3,
                            color=style.COLORS["blue"], ms=5)
            elif math.isfinite(mean):
                ax.plot(mean, j, "o", color=style.COLORS["blue"], ms=5)
            else:  # no seed pair trained: say so where the point would be
                ax.annotate("no trained pair", (0.02, j), xycoords=("axes fraction", "data"),
                            va="center", fontsize=7, color=style.COLORS["grey"])
            pts["claim"].append(c.number)
            pts["item"].append(label)
            pts["mean"].append(mean)
            pts["lo"].append(lo)
            pts["hi"].append(hi)
        for t in thresholds[c.number]:
            ax.axvline(t, color=style.COLORS["red"], ls="--", lw=1)
        if c.number != 4:
            ax.axvline(0.0, color=style.COLORS["black"], lw=0.8)
        ax.set_yticks(range(len(c.points)), [p[0] for p in c.points], fontsize=7)
        ax.set_ylim(len(c.points) - 0.5, -0.5)
        ax.grid(axis="y", visible=False)
        ax.tick_params(axis="x", labelsize=7)
        style.panel_title(ax, letter, f"({c.number}{suffix}) {c.verdict}")
    return {"points": {"claim": np.array(pts["claim"], np.int64),
                       "item": np.array(pts["item"]),
                       "mean": np.array(pts["mean"], np.float64),
                       "lo": np.array(pts["lo"], np.float64),
                       "hi": np.array(pts["hi"], np.float64)},
            "verdicts": {"claim": np.array([c.number for c in items], np.int64),
                         "name": np.array([c.claim for c in items]),
                         "verdict": np.array([c.verdict for c in items]),
                         "criterion": np.array([c.criterion for c in items])}}


def _thresholds(r) -> dict[int, list[float]]:
    """The dashed lines: each claim's threshold in the units of its points."""
    base = f"dqt_{r.config.states_bits}_sr"
    tol, _ = dqt_claims.competitive_tolerance(r)
    return {1: [], 2: [tol], 3: [dqt_claims.TOL_STATES * dqt_claims.loss_reduction(r, base)],
            4: [tol]}
