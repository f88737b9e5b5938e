"""``eco_adam_breakdown``: where ECO with AdamW breaks, and what each approximation costs.

Outcome counts and paired gaps come from :mod:`ecosim.claims.eco_adam`; this module draws them.
"""
from __future__ import annotations

import numpy as np

from ..claims.eco_adam import LEVEL as _LEVEL
from ..claims.eco_adam import outcome_counts, paired_gaps
from ..claims.eco_adam import select as _select
from ..experiments.eco_adam import APPROX_SCHEMES, OUTCOMES, VARIANTS
from . import style
from .base import figure

__all__ = ["eco_adam_breakdown"]

CAPTION = """
Where ECO with AdamW breaks on the teacher-student MLP (8-32-32-2, AdamW b = (0.9, 0.98),
eps = 1e-9, peak lr 3e-3 with 10% warmup and cosine decay, batch 8; the three weight matrices
stored in low precision). (a-c) INT4 with one absmax scale per tensor and round-to-nearest
(RTN), 1500 steps, seed 0, one line per variant that changes one thing: the largest |m/d| over
the stored matrices after each update (d = sqrt(v_hat) + eps), the largest tensor scale over its
initial value, and the batch loss (running mean over 25 steps; a cross: the run diverged).
ECO's momentum carries the rounding error divided by b1 lr; for a unit whose ReLU is dead the
gradient vanishes, v decays, d shrinks and m/d grows by orders of magnitude, so that weight
drifts several grid steps with no gradient behind it. With an absmax scale it becomes the
tensor's largest entry, the scale grows, every element is re-rounded on the coarser grid and
that error is injected too: the loop ends in divergence. A fixed scale breaks the loop (m/d
still grows, but the drifting weight saturates and the grid stays put), SGDM has no d, a slower
second moment (b2 0.999, 0.9999) keeps d from collapsing, and tanh has no dead units (per
tensor it trains poorly; with per-row scales one row's outlier no longer coarsens the others).
FP8 E4M3 with per-row scales has a large m/d too but finer steps and row-local scales. Master
weights with RTN train on the INT4 grid: neither the coarse grid nor RTN alone is the cause.
(d) Outcome of each variant over the seeds (counted, not averaged): trained, stalled (final
validation loss above half the initial) or diverged (non-finite, or 10x the initial validation
loss). (e) What each approximation of ECO costs (FP8 E4M3 per row, weight decay 0.1, 600 steps):
final validation loss minus master weights', paired by seed, mean and 95% t-interval over the
seeds where both trained; eco_exact feeds the error back into the weights (no approximation),
eco_momentum_exact gives it back through the momentum with the current d (only ECO's
e_prev ~ e approximation removed), eco_wd is ECO's memory-free rule with the (1 - lr wd) factor,
eco the plain rule. The numbers are in eco_adam_breakdown.md.
"""

_TRACE_VARIANTS = ("eco_rtn", "fixed_scale", "b2_0.9999", "tanh_row", "fp8_row", "master_rtn",
                   "sgdm")
_VARIANT_LABELS = {
    "eco_rtn": "ECO+RTN (INT4/tensor, ReLU, b2 0.98)", "fixed_scale": "fixed scale",
    "sgdm": "SGDM (no d)", "b2_0.999": "b2 = 0.999", "b2_0.9999": "b2 = 0.9999",
    "tanh": "tanh (per tensor)", "tanh_row": "tanh, per-row scales",
    "master_rtn": "master weights + RTN", "fp8_row": "FP8 E4M3 per row",
}
_VARIANT_COLORS = {
    "eco_rtn": style.COLORS["red"], "fixed_scale": style.COLORS["orange"],
    "sgdm": style.COLORS["purple"], "b2_0.999": style.COLORS["sky"],
    "b2_0.9999": style.COLORS["sky"], "tanh": style.COLORS["yellow"],
    "tanh_row": style.COLORS["green"], "master_rtn": style.COLORS["blue"],
    "fp8_row": style.COLORS["grey"],
}
_OUTCOME_COLORS = {"trained": style.COLORS["green"], "stalled": style.COLORS["orange"],
                   "diverged": style.COLORS["red"]}


def _smooth(x: np.ndarray, k: int = 25) -> np.ndarray:
    ok = np.isfinite(x)
    c = np.convolve(np.where(ok, x, 0.0), np.ones(k), "valid")
    n = np.convolve(ok.astype(float), np.ones(k), "valid")
    out = np.full(x.shape, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        out[k - 1:] = np.where(n == k, c / np.maximum(n, 1), np.nan)
    return out


@figure("eco_adam_breakdown", experiments=["eco_adam_breakdown"], caption=CAPTION)
def eco_adam_breakdown(eco_adam_breakdown):
    """Where ECO+AdamW breaks (traces, outcomes) and the cost of its approximations."""
    r = eco_adam_breakdown
    cfg = r.config
    variants = [v for v in VARIANTS if v in cfg.variants]
    fig = style.new_figure(13.0, 9.0)
    gs = fig.add_gridspec(2, 6)
    ax_md, ax_sc, ax_lo = (fig.add_subplot(gs[0, 2 * i:2 * i + 2]) for i in range(3))
    ax_out = fig.add_subplot(gs[1, :3])
    ax_gap = fig.add_subplot(gs[1, 3:])
    seed0 = min(int(s) for s in r["unit_seed"])
    steps = np.arange(1, r["loss"].shape[1] + 1)
    tables = {}
    for v in (v for v in _TRACE_VARIANTS if v in variants):
        i = int(np.flatnonzero(_select(r, "breakdown", v) & (r["unit_seed"] == seed0))[0])
        ls = "--" if v == "b2_0.9999" else "-"
        kw = {"color": _VARIANT_COLORS[v], "lw": 1.1, "ls": ls, "label": _VARIANT_LABELS[v]}
        ax_md.plot(steps, r["m_over_d"][i], **kw)
        ax_sc.plot(steps, r["scale_growth"][i], **kw)
        lo = _smooth(r["loss"][i])
        ax_lo.plot(steps, lo, **kw)
        if str(r["outcome"][i]) == "diverged":
            last = int(r["stopped_at"][i])
            ok = np.flatnonzero(np.isfinite(lo[:last]))
            if ok.size:
                ax_lo.plot(steps[ok[-1]], lo[ok[-1]], "x", color=kw["color"], ms=8, mew=2)
        tables[f"trace_{v.replace('.', '')}"] = {
            "step": steps, "max_m_over_d": r["m_over_d"][i],
            "scale_growth": r["scale_growth"][i], "batch_loss": r["loss"][i]}
    ax_md.set_yscale("log")
    ax_md.set_ylabel("max |m / d| over the stored matrices")
    style.panel_title(ax_md, "a", "ECO's momentum over d")
    ax_sc.set_yscale("log", base=2)
    ax_sc.set_ylabel("largest scale / its initial value")
    style.panel_title(ax_sc, "b", "The tensor scale")
    ax_lo.set_yscale("log")
    ax_lo.set_ylabel("batch loss (running mean of 25)")
    style.panel_title(ax_lo, "c", "Loss")
    for ax in (ax_md, ax_sc, ax_lo):
        ax.set_xlabel("step")
    ax_md.legend(fontsize=7, loc="upper left")

    # (d) outcomes counted
    counts = outcome_counts(r, "breakdown", variants)
    y = np.arange(len(variants))[::-1]
    left = np.zeros(len(variants))
    for o in OUTCOMES:
        c = np.array([counts[v][o] for v in variants], float)
        ax_out.barh(y, c, left=left, color=_OUTCOME_COLORS[o], label=o, height=0.7)
        left += c
    for yi, v in zip(y, variants):
        sel = _select(r, "breakdown", v) & (r["outcome"] == "trained")
        f = r["final_val_loss"][sel]
        txt = f"median final val {np.median(f):.3f}" if f.size else ""
        ax_out.text(cfg.seeds + 0.1, yi, txt, va="center", fontsize=7.5)
    ax_out.set_yticks(y, [_VARIANT_LABELS[v] for v in variants], fontsize=8)
    ax_out.set_xlim(0, cfg.seeds * 1.6)
    ax_out.set_xlabel(f"seeds (of {cfg.seeds})")
    ax_out.legend(fontsize=8, loc="lower right")
    style.panel_title(ax_out, "d", "Outcomes: INT4 per tensor, ECO+RTN and one change each")
    tables["outcomes"] = {"variant": np.array(variants),
                          **{o: np.array([counts[v][o] for v in variants]) for o in OUTCOMES}}

    # (e) the cost of each approximation
    schemes = [s for s in APPROX_SCHEMES if s in cfg.approx_schemes and s != "master"]
    modes = list(cfg.approx_modes)
    rows = {"scheme": [], "mode": [], "n": [], "mean": [], "lo": [], "hi": [], "diverged": [],
            "stalled": []}
    ac = outcome_counts(r, "approx", [f"{s}:{m}" for s in cfg.approx_schemes for m in modes])
    for j, m in enumerate(modes):
        for k, s in enumerate(schemes):
            g = paired_gaps(r, s, m) if "master" in cfg.approx_schemes else \
                {"n": 0, "mean": np.nan, "lo": np.nan, "hi": np.nan}
            x = k + (j - (len(modes) - 1) / 2) * 0.3
            if np.isfinite(g["mean"]):
                err = None if not np.isfinite(g["lo"]) else \
                    [[g["mean"] - g["lo"]], [g["hi"] - g["mean"]]]
                ax_gap.errorbar(x, g["mean"], yerr=err, fmt="o" if m == "sr" else "s",
                                color=style.ROUNDING_COLORS[m], capsize=3,
                                label=m.upper() if k == 0 else None)
            bad = ac[f"{s}:{m}"]["diverged"] + ac[f"{s}:{m}"]["stalled"]
            if bad:
                ax_gap.annotate(f"{bad} failed", (x, 0), xytext=(0, 8), fontsize=7,
                                textcoords="offset points", ha="center")
            rows["scheme"].append(s)
            rows["mode"].append(m)
            for key in ("n", "mean", "lo", "hi"):
                rows[key].append(g[key])
            rows["diverged"].append(ac[f"{s}:{m}"]["diverged"])
            rows["stalled"].append(ac[f"{s}:{m}"]["stalled"])
    ax_gap.axhline(0, color="k", lw=0.8)
    ax_gap.set_xticks(range(len(schemes)), schemes, fontsize=8)
    ax_gap.set_ylabel("final val loss - master's (paired, 95% t-interval)")
    ax_gap.set_xlabel("FP8 E4M3 per row, weight decay "
                      f"{cfg.approx_weight_decay:g}, {cfg.approx_steps} steps")
    if ax_gap.get_legend_handles_labels()[0]:  # (a smoke run may have no trained pair)
        ax_gap.legend(fontsize=8)
    style.panel_title(ax_gap, "e", f"Cost of each approximation ({cfg.seeds} seeds)")
    tables["approx_gaps"] = {k: np.array(v) for k, v in rows.items()}
    return fig, tables, _markdown(cfg, variants, counts, rows, r)


def _markdown(cfg, variants, counts, rows, r) -> str:
    lines = [f"Where ECO with AdamW breaks: INT4 per tensor, RTN, {cfg.steps} steps, "
             f"{cfg.seeds} seeds (outcomes counted).", "",
             "| variant | trained | stalled | diverged | median final val (trained) |",
             "|---|---|---|---|---|"]
    for v in variants:
        sel = _select(r, "breakdown", v) & (r["outcome"] == "trained")
        f = r["final_val_loss"][sel]
        med = f"{np.median(f):.4f}" if f.size else "-"
        c = counts[v]
        lines.append(f"| {_VARIANT_LABELS[v]} | {c['trained']} | {c['stalled']} | "
                     f"{c['diverged']} | {med} |")
    lines += ["", f"Cost of each approximation: FP8 E4M3 per row, weight decay "
              f"{cfg.approx_weight_decay:g}, {cfg.approx_steps} steps; final validation loss "
              f"minus master weights', paired by seed, mean and {int(_LEVEL * 100)}% "
              "t-interval over the seeds where both trained.", "",
              "| scheme | rounding | n | gap to master | 95% interval | failed |",
              "|---|---|---|---|---|---|"]
    for i in range(len(rows["scheme"])):
        lo, hi = rows["lo"][i], rows["hi"][i]
        iv = f"[{lo:+.4f}, {hi:+.4f}]" if np.isfinite(lo) else "-"
        mean = f"{rows['mean'][i]:+.4f}" if np.isfinite(rows["mean"][i]) else "-"
        failed = rows["diverged"][i] + rows["stalled"][i]
        lines.append(f"| {rows['scheme'][i]} | {rows['mode'][i].upper()} | {rows['n'][i]} | "
                     f"{mean} | {iv} | {failed} |")
    return "\n".join(lines)
