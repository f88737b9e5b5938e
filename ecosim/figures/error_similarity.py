"""Figure 6, ``error_similarity``: consecutive quantization errors over an MLP run."""
from __future__ import annotations

import numpy as np
from matplotlib.lines import Line2D
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

from . import style
from .base import figure

__all__ = ["error_similarity"]

CAPTION = """
How similar consecutive weight-quantization errors e_t and e_{t+1} are over training, the
approximation e_prev ~ e that ECO makes. A teacher-student MLP (sizes 16-64-64-4, ReLU, mse) is
trained with AdamW (betas 0.9, 0.98, eps 1e-9, weight decay 0.1, batch 64) under the ECO
paper's schedule (warmup over 10% of the steps, cosine to 0.1x the peak 3e-3; grey, right
axes), every weight matrix stored in FP8 E4M3 with one absmax scale per output row, for master
weights with round-to-nearest (RTN, blue), master weights with stochastic rounding (SR, light
blue) and ECO with SR (green). Thin lines: every step; thick: window means. (a) Cosine
similarity: with master weights and RTN consecutive errors are nearly parallel, and the cosine
dips when the learning rate is high (bigger updates move more weights across rounding
boundaries) and recovers as it decays; SR draws a fresh error at every write, so the cosine
sits at 0. (b) How far the norm ratio ||e_{t+1}||/||e_t|| is from 1 (log axis): about 1e-3
at the peak learning rate and 2e-4 at the end with master+RTN; about 2% (master+SR) and 6%
(ECO+SR) per step with SR, whose ratio is 1 on average. (c) The
relative difference ||e_t - e_{t+1}||/||e_t||, how wrong e_prev ~ e is: about
0.1-0.5 with master+RTN, sqrt(2) for independent SR errors. (d) The window means of (a) against
the learning rate, warmup and decay phases separately: the cosine of master+RTN is a function
of the learning rate.
"""

_COLORS = {"master_rtn": style.METHOD_COLORS["master"], "master_sr": style.COLORS["sky"],
           "eco_sr": style.METHOD_COLORS["eco"], "eco_rtn": style.COLORS["purple"],
           "naive_sr": style.METHOD_COLORS["naive"], "naive_rtn": style.COLORS["orange"]}
_LABELS = {"master_rtn": "master weights + RTN", "master_sr": "master weights + SR",
           "eco_sr": "ECO + SR", "eco_rtn": "ECO + RTN", "naive_sr": "naive + SR",
           "naive_rtn": "naive + RTN"}


def _lr_axis(ax, t, lr):
    tw = ax.twinx()
    tw.fill_between(t, 0, lr, color=style.COLORS["grey"], alpha=0.12, lw=0, zorder=0)
    tw.plot(t, lr, color=style.COLORS["grey"], lw=1.0)
    tw.set_ylim(0, 1.05 * lr.max())
    tw.set_ylabel("learning rate", color=style.COLORS["grey"])
    tw.tick_params(axis="y", colors=style.COLORS["grey"])
    tw.spines["right"].set_visible(True)
    tw.spines["right"].set_color(style.COLORS["grey"])
    tw.grid(False)
    tw.ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))
    ax.set_zorder(tw.get_zorder() + 1)
    ax.patch.set_visible(False)


@figure("error_similarity", experiments=["error_similarity"], caption=CAPTION)
def error_similarity(error_similarity):
    """Figure 6 from the ``error_similarity`` experiment."""
    r = error_similarity
    methods = [str(m) for m in r["unit_method"]]
    steps = r["lr"].shape[1]
    t = np.arange(1, steps)            # step 0 has no previous error
    lr = r["lr"][0]
    tw_mid = 0.5 * (r["win_lo"][0] + r["win_hi"][0])

    fig = style.new_figure(11.5, 8.4)
    (ax_c, ax_n), (ax_d, ax_l) = fig.subplots(2, 2)
    panels = ((ax_c, "cos_e"), (ax_n, "norm_dev_e"), (ax_d, "rel_diff_e"))
    for i, m in enumerate(methods):
        c = _COLORS[m]
        for ax, k in panels:
            ax.plot(t, r[k][i][1:], color=c, lw=0.5, alpha=0.35)
            ax.plot(tw_mid, r[f"win_{k}"][i], color=c, lw=2.0)
    for ax, _ in panels:
        ax.set_xlim(0, steps)
        ax.set_xlabel("step")
        _lr_axis(ax, np.arange(steps), lr)
    ax_c.axhline(0, color="k", lw=0.6)
    ax_c.set_ylim(-0.25, 1.05)
    ax_c.set_ylabel("cos($e_t$, $e_{t+1}$)")
    # the norm ratio's deviation from 1 spans decades between RTN and SR: log axis
    ax_n.set_yscale("log")
    dev = r["win_norm_dev_e"]
    ax_n.set_ylim(max(dev[dev > 0].min() / 30, 1e-7), 1.0)
    ax_n.set_ylabel("| ||$e_{t+1}$|| / ||$e_t$|| - 1 |")
    ax_d.axhline(np.sqrt(2), color="k", lw=0.8, ls=":")
    ax_d.annotate("dotted: $\\sqrt{2}$, independent errors", (steps, 1.2), xytext=(-4, 0),
                  textcoords="offset points", ha="right", va="center", fontsize=8)
    ax_d.set_ylim(0, 1.75)
    ax_d.set_ylabel("||$e_t - e_{t+1}$|| / ||$e_t$||")
    style.panel_title(ax_c, "a", "Cosine of consecutive errors")
    style.panel_title(ax_n, "b", "Norm ratio: deviation from 1")
    style.panel_title(ax_d, "c", "Relative difference: how wrong e$_{prev}$ ~ e is")

    # (d) window means against the learning rate, warmup vs decay
    wl = r["win_lr"][0]
    up = np.r_[True, np.diff(wl) > 0]   # windows where the rate still rises
    for i, m in enumerate(methods):
        c = _COLORS[m]
        cos = r["win_cos_e"][i]
        ax_l.plot(wl[up], cos[up], "^", color=c, mfc="white", ms=5)
        ax_l.plot(wl[~up], cos[~up], "o", color=c, ms=4)
    ax_l.axhline(0, color="k", lw=0.6)
    ax_l.set_xscale("log")
    ax_l.xaxis.set_major_locator(FixedLocator([1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2]))
    ax_l.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:g}"))
    ax_l.xaxis.set_minor_formatter(NullFormatter())
    ax_l.set_ylim(-0.25, 1.05)
    ax_l.set_xlabel("learning rate (window mean)")
    ax_l.set_ylabel("cos($e_t$, $e_{t+1}$), window mean")
    ax_l.legend(handles=[Line2D([], [], color="k", ls="none", marker="^", mfc="white",
                                label="warmup"),
                         Line2D([], [], color="k", ls="none", marker="o", label="cosine decay")],
                loc="center right", fontsize=8)
    style.panel_title(ax_l, "d", "Cosine against the learning rate")

    handles = [Line2D([], [], color=_COLORS[m], lw=2, label=_LABELS[m]) for m in methods]
    handles.append(Line2D([], [], color=style.COLORS["grey"], lw=6, alpha=0.3,
                          label="learning rate (right axes)"))
    fig.legend(handles=handles, loc="outside upper center", ncol=len(handles))

    nw = tw_mid.size
    windows = {"method": np.repeat(np.array(methods), nw),
               "step_lo": r["win_lo"].ravel(), "step_hi": r["win_hi"].ravel(),
               "lr": r["win_lr"].ravel(), "loss": r["win_loss"].ravel(),
               "cosine": r["win_cos_e"].ravel(), "norm_ratio": r["win_norm_ratio_e"].ravel(),
               "norm_ratio_abs_dev": r["win_norm_dev_e"].ravel(),
               "rel_diff": r["win_rel_diff_e"].ravel()}
    per_step = {"step": np.tile(t, len(methods)),
                "method": np.repeat(np.array(methods), t.size),
                "lr": r["lr"][:, 1:].ravel(), "cosine": r["cos_e"][:, 1:].ravel(),
                "norm_ratio": r["norm_ratio_e"][:, 1:].ravel(),
                "rel_diff": r["rel_diff_e"][:, 1:].ravel()}
    summary = {"method": np.array(methods)}
    for k, name in (("cos_e", "cosine"), ("norm_ratio_e", "norm_ratio"),
                    ("rel_diff_e", "rel_diff")):
        for w in ("peak", "end"):
            summary[f"{name}_{w}"] = r[f"{k}_{w}"]
    summary["final_val_loss"] = r["final_val_loss"]
    summary["quantized_weights"] = r["n_quantized"]
    return fig, {"windows": windows, "steps": per_step, "summary": summary}
