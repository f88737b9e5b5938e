"""DQT's claims (1) and (2) on the language model: the ``dqt_lm`` runs beside the MLP's rows.

The ``dqt_lm`` experiment (:mod:`ecosim.experiments.dqt_lm`) trains the ``lm`` experiment's
protocol (preset ``micro``, 650 steps, 3 seeds paired by seed) with FP32 AdamW, BitNet b1.58,
DQT INT8 and DQT ternary. Outcomes are the LM's (:func:`ecosim.claims.lm.lm_outcomes` with
FP32 as the baseline: diverged, stalled, trained); gaps are paired by seed over the seeds where
both runs trained, with 95% Student-t intervals (:func:`ecosim.claims.stats.t_interval`). The
criteria are those of the MLP rows (:mod:`ecosim.claims.dqt`): (1) holds when every seed of
every DQT grid trained; (2) holds when the upper end of the interval of DQT INT8 minus BitNet
lies within :data:`~ecosim.claims.dqt.TOL_COMPETITIVE` of BitNet's loss.
"""
from __future__ import annotations

import math

import numpy as np

from .dqt import TOL_COMPETITIVE, competitive_verdict
from .lm import lm_cells, lm_orderings
from .table import Claim, verdict_of

__all__ = ["LM_BASE", "LM_GRIDS", "LM_LABELS", "lm_claims", "lm_gap_table_markdown",
           "lm_summary", "lm_threshold"]

LM_BASE = "fp32"  # the reference of every gap and of the stall test
#: DQT's grids on the LM: method name -> grid label
LM_GRIDS = {"dqt_ternary_sr": "ternary", "dqt8_sr": "INT8"}
LM_LABELS = {"fp32": "AdamW FP32", "bitnet_b158": "BitNet b1.58 (FP32 master, STE)",
             "dqt8_sr": "DQT INT8 SR", "dqt_ternary_sr": "DQT ternary SR"}


def _ci(d: dict) -> str:
    if d["n"] < 2:
        return f"n={d['n']} (no interval)"
    return f"{d['mean']:+.4f} [{d['lo']:+.4f}, {d['hi']:+.4f}] (n={d['n']})"


def _counts(cell: dict) -> str:
    return ", ".join(f"{v} {k}" for k, v in cell["outcomes"].items() if v)


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
        parts.append(f"{grid}: {_counts(c)}; gap to FP32 {_ci(c['gap'])}")
        pts.append((f"LM {grid}", c["gap"]["mean"], c["gap"]["lo"], c["gap"]["hi"]))
    if not flags:
        raise ValueError("the dqt_lm run has no DQT method (dqt8_sr, dqt_ternary_sr)")
    return Claim(
        1, "… on the language model",
        "(as above)",
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
    bn = cells["bitnet_b158"]["loss"]["mean"]
    tol = TOL_COMPETITIVE * bn if math.isfinite(bn) else math.nan
    verdict = competitive_verdict(diff, tol)
    return Claim(
        2, "… on the language model",
        "(as above)",
        f"DQT INT8 SR minus BitNet b1.58 on the micro LM: {_ci(diff)}; BitNet minus FP32: "
        f"{_ci(cells['bitnet_b158']['gap'])}; BitNet {_counts(cells['bitnet_b158'])}, DQT "
        f"{_counts(cells['dqt8_sr'])}",
        verdict,
        f"upper end of the interval ≤ {100 * TOL_COMPETITIVE:g}% of BitNet's loss "
        f"(= {tol:.4f}) (holds); the mean within it (partly)",
        [("LM INT8 − BitNet", diff["mean"], diff["lo"], diff["hi"])])


def lm_claims(r) -> list[Claim]:
    """Claims (1) and (2) judged on a ``dqt_lm`` run (rows to set beside the MLP's)."""
    return [_claim_converges(r), _claim_bitnet(r)]


def lm_threshold(r) -> float:
    """Claim (2)'s threshold on the LM: :data:`TOL_COMPETITIVE` of BitNet's mean loss."""
    loss = _cells(r).get("bitnet_b158", {}).get("loss", {}).get("mean", math.nan)
    return TOL_COMPETITIVE * loss


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
