"""DQT's claims (1) and (2) on the language model, judged on the ``dqt_lm`` runs.

The ``dqt_lm`` experiment (:mod:`ecosim.experiments.dqt_lm`) trains the ``lm`` experiment's
protocol (preset ``micro``, 650 steps, 3 seeds paired by seed) with FP32 AdamW, BitNet b1.58,
DQT INT8 and DQT ternary. Outcomes are the LM's (:func:`ecosim.claims.lm.lm_outcomes` with
FP32 as the baseline: diverged, stalled, trained); gaps are paired by seed over the seeds where
both runs trained, with 95% Student-t intervals (:func:`ecosim.claims.stats.t_interval`). The
criteria are those of the MLP rows (:mod:`ecosim.claims.dqt`): (1) holds when every seed of
every DQT grid trained; (2) holds when the upper end of the interval of DQT INT8 minus BitNet
lies within :data:`~ecosim.claims.dqt.TOL_COMPETITIVE` times BitNet's own paired gap to FP32
(a tolerance tied to the gap being compared). On the LM DQT keeps FP32 activations while
BitNet quantizes its own to INT8; the row says so.
"""
from __future__ import annotations

import math

import numpy as np

from .dqt import TOL_COMPETITIVE, competitive_verdict
from .lm import lm_cells, lm_orderings
from .stats import counts_text, interval_text
from .table import Claim, verdict_of

__all__ = ["LM_BASE", "LM_GRIDS", "LM_LABELS", "lm_claims",
           "lm_gap_table_markdown", "lm_summary", "lm_threshold"]

LM_BASE = "fp32"  # the reference of every gap and of the stall test
#: DQT's grids on the LM: method name -> grid label
LM_GRIDS = {"dqt_ternary_sr": "ternary", "dqt8_sr": "INT8"}
LM_LABELS = {"fp32": "AdamW FP32", "bitnet_b158": "BitNet b1.58 (FP32 master, STE)",
             "dqt8_sr": "DQT INT8 SR", "dqt_ternary_sr": "DQT ternary SR"}


def lm_summary(r) -> list[dict]:
    """Per method of a ``dqt_lm`` run, in run order: label, outcome counts, the trained runs'
    mean validation loss and the paired gap to FP32 (a t-interval dict; empty for FP32)."""
    cells = lm_cells(r, base=LM_BASE)
    out = []
    for (_, m), c in cells.items():
        out.append({"method": m, "label": LM_LABELS.get(m, m), **c["outcomes"],
                    "mean": c["loss"]["mean"], "gap": c["gap"]})
    return out


def _cells(r) -> dict:
    return {m: c for (_, m), c in lm_cells(r, base=LM_BASE).items()}


def _claim_converges(r) -> Claim:
    cells = _cells(r)
    parts, flags, pts = [], [], []
    for m, grid in LM_GRIDS.items():
        if m not in cells:
            continue
        c = cells[m]
        flags.append(c["outcomes"]["trained"] == c["n"])
        parts.append(f"{grid}: {counts_text(c['outcomes'])}; "
                     f"gap to FP32 {interval_text(c['gap'])}")
        pts.append((f"LM {grid}", c["gap"]["mean"], c["gap"]["lo"], c["gap"]["hi"]))
    if not flags:
        raise ValueError("the dqt_lm run has no DQT method (dqt8_sr, dqt_ternary_sr)")
    return Claim(
        1, "Training directly on ternary or n-bit weights with SR converges (micro LM)",
        "DQT (no master copy, SR onto the previous step's grid) trains LLaMA-style models even "
        "with ternary weights",
        "final validation loss (nats per byte) of DQT+SR minus FP32 AdamW on the micro LM, "
        f"paired by seed, mean [95% t-interval]: " + "; ".join(parts),
        verdict_of(flags, "holds"),
        f"every seed of every grid trained (no divergence, no stall against FP32): "
        f"{sum(flags)}/{len(flags)} grids (holds: all; partly: some)",
        pts)


def _claim_bitnet(r) -> Claim:
    cells = _cells(r)
    for m in ("dqt8_sr", "bitnet_b158"):
        if m not in cells:
            raise ValueError(f"the dqt_lm run has no method {m!r}")
    diff = lm_orderings(r, orderings=(("dqt8_sr", "~", "bitnet_b158", ""),),
                        base=LM_BASE)[0]["diff"]
    bn_cell, dqt_cell = cells["bitnet_b158"], cells["dqt8_sr"]
    tol = lm_threshold(r)
    return Claim(
        2, "INT8 DQT is competitive with BitNet b1.58 (micro LM)",
        "8-bit DQT reaches BitNet b1.58's loss",
        f"DQT INT8 SR (FP32 activations; BitNet's are INT8, so the sides are not matched "
        f"here, as they are on the MLP) minus BitNet b1.58 on the micro LM: "
        f"{interval_text(diff)}; BitNet minus "
        f"FP32: {interval_text(bn_cell['gap'])}; BitNet {counts_text(bn_cell['outcomes'])}, "
        f"DQT {counts_text(dqt_cell['outcomes'])}",
        competitive_verdict(diff, tol),
        f"upper end of the interval ≤ {TOL_COMPETITIVE:g} x BitNet's gap to FP32 "
        f"(= {tol:.4f}) (holds); the mean within it (partly)",
        [("LM INT8 − BitNet", diff["mean"], diff["lo"], diff["hi"])])


def lm_claims(r) -> list[Claim]:
    """Claims (1) and (2) judged on a ``dqt_lm`` run (the MLP rows' claims, on the LM)."""
    return [_claim_converges(r), _claim_bitnet(r)]


def lm_threshold(r) -> float:
    """Claim (2)'s threshold on the LM: :data:`TOL_COMPETITIVE` times BitNet's paired gap to
    FP32 (NaN when that gap is not positive)."""
    gap = _cells(r).get("bitnet_b158", {}).get("gap", {}).get("mean", math.nan)
    return TOL_COMPETITIVE * gap if math.isfinite(gap) and gap > 0 else math.nan


def lm_gap_table_markdown(r) -> str:
    """Per method of a ``dqt_lm`` run: outcomes, mean validation loss, gap to FP32."""
    lines = ["| method (micro LM) | trained / stalled / diverged | val loss (trained) | "
             "gap to FP32, mean [95% t-interval] |", "|---|---|---|---|"]
    for s in lm_summary(r):
        g = s["gap"]
        gap = ("0 (reference)" if s["method"] == LM_BASE else
               f"{g['mean']:+.4f} [{g['lo']:+.4f}, {g['hi']:+.4f}]" if g["n"] >= 2
               else f"n={g['n']}")
        mean = f"{s['mean']:.4f}" if math.isfinite(s["mean"]) else "—"
        lines.append(f"| {s['label']} | {s['trained']} / {s['stalled']} / {s['diverged']} | "
                     f"{mean} | {gap} |")
    steps = int(np.max(r["steps"]))
    seeds = len(set(np.asarray(r["seed"]).tolist()))
    lines += ["", f"Preset {r['preset'][0]}, {steps} steps, {seeds} seeds paired by seed "
              "(initial weights, data order, SR draws); validation loss in nats per byte; a "
              "gap averages only the seeds where both runs trained."]
    return "\n".join(lines)
