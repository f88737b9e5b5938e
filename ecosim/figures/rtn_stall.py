"""Figure 5, ``rtn_stall``: naive+RTN freezes below half a grid step, ECO accumulates."""
from __future__ import annotations

import numpy as np

from . import style
from .base import figure

__all__ = ["rtn_stall"]

CAPTION = """
The round-to-nearest (RTN) stall. SGD with momentum (eta = 0.05, beta = 0.9) on
f = (L/2)||x - x*||^2 (L = 1) with weights stored by RTN on a fixed uniform grid of step
h = 2^-4. (a) One coordinate started 1.3 from its optimum, as the distance to the optimum in
grid steps (faint lines: the grid). Naive removal (red) stops for good at the predicted step
(dashed) inside the dead zone |x - x*| < h/(2 eta L) (shaded) where even the full gradient step
rounds away; ECO (green) keeps moving in bursts and reaches the grid point next to x* like
master weights (blue) and full precision (black); ECO's virtual iterate x_hat -
(eta beta/(1-beta)) m (green dotted) moves by exactly -eta g(x_hat) every step, stuck or
not. (b) The update eta*|m'| of
each step against the threshold h/2 (theory.rtn_stall_threshold): naive's decays to the frozen
gradient's eta*|g| (red dotted) below the threshold; ECO's momentum absorbs every rounded-off
update (m -> m + (1-beta) g/beta per stuck step) and grows linearly until it crosses h/2, then
the weight moves and the momentum drops (filled dots: observed releases; open circles:
releases predicted from the state at the start of each stuck phase). (c) The same predictions
over an ensemble of coordinates with N(0, 1) initial offsets: naive's predicted stall step
(first step with both eta*|m'| and eta*|g| below h/2) and every ECO release, against what the
simulation did. (d) Where the ensemble ends: naive removal anywhere inside the dead zone, ECO
and master weights within about one grid step of the optimum.
"""


@figure("rtn_stall", experiments=["rtn_stall"], caption=CAPTION)
def rtn_stall(rtn_stall):
    """Figure 5 from the ``rtn_stall`` experiment."""
    r = rtn_stall
    idx = {str(s): i for i, s in enumerate(r["unit_scheme"])}
    thr = float(r["threshold"])
    h = 2.0 * thr
    dead = float(r["dead_zone"])
    xs = r["xstar"][idx["naive"]]
    T = r["u"].shape[1]
    t_x = np.arange(T + 1) + 1.0   # weights before step t (t = 0..T), plotted at t + 1
    t_u = np.arange(T) + 1.0
    pred_n, obs_n = r["naive_predicted"], r["naive_observed"]
    colors = {s: style.METHOD_COLORS[s] for s in ("fp", "master", "naive", "eco")}

    fig = style.new_figure(11.5, 8.8)
    (ax_x, ax_u), (ax_c, ax_d) = fig.subplots(2, 2)

    # (a) the showcase coordinate
    dist = {s: (r["x"][i][:, 0] - xs[0]) / h for s, i in idx.items()}
    lo = min(-1.5, min(d.min() for d in dist.values()) - 0.5)
    hi = max(d.max() for d in dist.values()) + 0.8
    off = -xs[0] / h - np.floor(-xs[0] / h)   # grid points sit at j + off steps from x*
    for j in np.arange(np.floor(lo), np.ceil(hi) + 1):
        ax_x.axhline(j + off, color="#E8E8E8", lw=0.6, zorder=0)
    ax_x.axhspan(-dead / h, dead / h, color=colors["naive"], alpha=0.07, lw=0, zorder=0)
    ax_x.axhline(0, color="k", lw=0.8)
    ax_x.plot(t_x, dist["fp"], color=colors["fp"], lw=1.0, label="full precision")
    ax_x.plot(t_x, dist["master"], color=colors["master"], lw=1.2, drawstyle="steps-post",
              label="master weights + RTN")
    ax_x.plot(t_x, dist["naive"], color=colors["naive"], lw=1.8, drawstyle="steps-post",
              label="naive + RTN")
    ax_x.plot(t_x, dist["eco"], color=colors["eco"], lw=1.8, drawstyle="steps-post",
              label="ECO + RTN")
    ax_x.plot(t_x, (r["virtual"][idx["eco"]] - xs[0]) / h, color=colors["eco"], lw=1.2,
              ls=":", label="ECO's virtual iterate")
    p0, o0 = int(pred_n[0]), int(obs_n[0])
    ax_x.axvline(p0 + 1, color=colors["naive"], lw=1.0, ls="--")
    ax_x.annotate(f"naive stalls: predicted step {p0},\nobserved {o0}", (p0 + 1, hi),
                  xytext=(4, -4), textcoords="offset points", va="top", fontsize=8,
                  color=colors["naive"])
    ax_x.annotate(f"dead zone |x - x*| < h/(2$\\eta$L) = {dead / h:g} steps", (1.1, -dead / h),
                  xytext=(0, 3), textcoords="offset points", fontsize=8,
                  color=colors["naive"])
    ax_x.set_xscale("log")
    ax_x.set_xlim(1, T + 1)
    ax_x.set_ylim(max(lo, -dead / h - 1), hi)
    ax_x.set_xlabel("step + 1")
    ax_x.set_ylabel("($\\hat x$ - x*) / h   (grid steps)")
    ax_x.legend(loc="center left", fontsize=8)
    style.panel_title(ax_x, "a", "One coordinate: naive freezes, ECO keeps going")

    # (b) the update against the threshold, showcase coordinate
    un = np.abs(r["u"][idx["naive"]][:, 0])
    ue = np.abs(r["u"][idx["eco"]][:, 0])
    lr_g = float(r["lr"]) * np.abs(r["grad"][idx["naive"]][:, 0])
    ax_u.plot(t_u, un, color=colors["naive"], lw=1.6, label="naive: $\\eta$|m'|")
    ax_u.plot(t_u, lr_g, color=colors["naive"], lw=1.0, ls=":",
              label="naive: $\\eta$|g| at its stored weight")
    ax_u.plot(t_u, ue, color=colors["eco"], lw=1.4, label="ECO: $\\eta$|m'|")
    ax_u.axhline(thr, color="k", lw=1.0, ls="--",
                 label=f"threshold h/2 = {thr:g} (rtn_stall_threshold)")
    sel = r["eco_coord"] == 0
    rel_o, rel_p = r["eco_observed"][sel], r["eco_predicted"][sel]
    ax_u.plot(rel_o + 1, ue[rel_o], "o", color=colors["eco"], ms=5, zorder=5,
              label="ECO release, observed")
    ax_u.plot(rel_p + 1, ue[np.minimum(rel_p, T - 1)], "o", mfc="none", mec="k", ms=8,
              zorder=6, label="ECO release, predicted")
    ax_u.axvline(p0 + 1, color=colors["naive"], lw=1.0, ls="--")
    ax_u.set_xscale("log")
    ax_u.set_yscale("log")
    ax_u.set_xlim(1, T + 1)
    # ECO's m' changes sign when the weight overshoots (the log axis dips there): show the
    # decade around the threshold, where the accumulation happens
    ax_u.set_ylim(min(thr / 30, lr_g[-1] / 2), max(un.max(), ue.max(), thr) * 2.5)
    ax_u.set_xlabel("step + 1")
    ax_u.set_ylabel("update $\\eta$|m'| of the step")
    ax_u.legend(loc="lower left", fontsize=7.8)
    style.panel_title(ax_u, "b", "The update against half a grid step")

    # (c) predicted vs observed over the ensemble
    ep, eo = r["eco_predicted"], r["eco_observed"]
    n_ok, e_ok = int(np.sum(pred_n == obs_n)), int(np.sum(ep == eo))
    top = max(ep.max(initial=1), eo.max(initial=1), pred_n.max(), obs_n.max()) + 2
    ax_c.plot([1, top], [1, top], color=style.COLORS["grey"], lw=1)
    ax_c.plot(ep + 1, eo + 1, "o", color=colors["eco"], ms=3.5, alpha=0.6,
              label=f"ECO releases: {e_ok}/{ep.size} exact")
    ax_c.plot(pred_n + 1, obs_n + 1, "s", color=colors["naive"], mfc="none", ms=6,
              label=f"naive stall steps: {n_ok}/{pred_n.size} exact")
    ax_c.set_xscale("log")
    ax_c.set_yscale("log")
    ax_c.set_xlim(0.8, top * 1.3)
    ax_c.set_ylim(0.8, top * 1.3)
    ax_c.set_xlabel("predicted step + 1")
    ax_c.set_ylabel("observed step + 1")
    cens, cens_ok = int(r["eco_censored"]), int(r["eco_censored_ok"])
    ax_c.legend(loc="upper left", fontsize=8, title=f"{pred_n.size} coordinates; "
                f"{cens_ok}/{cens} ECO phases still\nstuck at the end are predicted past it",
                title_fontsize=8)
    style.panel_title(ax_c, "c", "Predicted vs observed, every coordinate")

    # (d) final distances
    final = {s: np.abs(r["x"][i][-1] - r["xstar"][i]) / h for s, i in idx.items()}
    edges = np.arange(0, np.ceil(max(dead / h, final["naive"].max())) + 1.0, 0.5)
    ax_d.hist(final["master"], bins=edges, color=colors["master"], alpha=0.3, lw=0,
              label="master weights + RTN")
    ax_d.hist(final["eco"], bins=edges, histtype="step", lw=2.0, color=colors["eco"],
              label="ECO + RTN")
    ax_d.hist(final["naive"], bins=edges, histtype="step", lw=2.0, color=colors["naive"],
              label="naive + RTN")
    ax_d.axvline(dead / h, color=colors["naive"], lw=1, ls="--")
    ax_d.annotate("dead-zone radius h/(2$\\eta$L)", (dead / h, 0.62),
                  xycoords=("data", "axes fraction"), xytext=(-4, 0),
                  textcoords="offset points", ha="right", va="bottom", fontsize=8,
                  color=colors["naive"])
    ax_d.set_xlabel(f"final |$\\hat x$ - x*| / h after {T} steps")
    ax_d.set_ylabel("coordinates")
    ax_d.legend(loc="upper right", fontsize=8)
    style.panel_title(ax_d, "d", "Where each coordinate ends")

    tables = {
        "showcase": {"step": np.arange(T + 1)} | {f"x_{s}": r["x"][i][:, 0]
                                                  for s, i in idx.items()}
        | {"x_eco_virtual": r["virtual"][idx["eco"]], "xstar": np.full(T + 1, xs[0])},
        "updates": {"step": np.arange(T), "naive_lr_m": r["u"][idx["naive"]][:, 0],
                    "eco_lr_m": r["u"][idx["eco"]][:, 0]},
        "naive_stall": {"coordinate": np.arange(pred_n.size), "predicted": pred_n,
                        "observed": obs_n, "final_distance_steps": final["naive"]},
        "eco_releases": {"coordinate": r["eco_coord"], "onset": r["eco_onset"],
                         "predicted": ep, "observed": eo},
        "final": {"coordinate": np.arange(pred_n.size)}
        | {f"{s}_distance_steps": final[s] for s in idx},
    }
    return fig, tables
