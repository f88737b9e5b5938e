"""Figure 4, ``naive_decay``: naive removal of the master copy under a decaying learning rate."""
from __future__ import annotations

import numpy as np
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

from . import style
from .base import figure

__all__ = ["naive_decay"]

CAPTION = """
Naive removal of the master copy under the ECO paper's schedule (linear warmup over 10% of the
steps, cosine decay to 0.1x the peak; grey, right axes) on the quadratic of figure 2 (L = 1,
d = 1000, uniform grid of step 2^-6, SGD with momentum beta = 0.9), for master weights (blue),
naive removal (red) and ECO (green). Curves are window means. (a) Exact gradients, stochastic
rounding: the error ||x_hat - x*||^2/d divided by the measured quantization-error variance
sigma_emp^2; dash-dotted lines: the closed forms at the current learning rate (quasi-static);
the box gives the means over the plateau at the peak and over the last 10% of the steps.
Naive's normalised error grows like 1/(2 L eta) as the rate decays; ECO's stays at
1/(1 - beta^2), master's at 1. (b) The same runs in absolute terms, with round-to-nearest (RTN,
dashed): with SR, naive's absolute error does not grow (its sigma_emp^2 shrinks with the
update), but naive+RTN freezes as soon as eta*|m| falls below half a grid step, far from the
optimum. (c) With gradient noise (variance 0.01 per coordinate) naive removal fails in absolute
terms too: as the rate decays its SR error falls much less than master's and ECO's, which
follow the full-precision run (black) down; dotted: the Lyapunov prediction with the measured sigma_emp^2 and the gradient
noise at the current learning rate. (d) Error at the end of the run (last 10% of the steps)
relative to master weights with the same rounding.
"""


def _rows(r, **where):
    mask = np.ones(len(r["unit_scheme"]), bool)
    for k, v in where.items():
        col = r[f"unit_{k}"]
        mask &= np.isclose(col, v) if col.dtype.kind == "f" else (col == v)
    return np.flatnonzero(mask)


def _lr_axis(ax, x, lr, peak):
    tw = ax.twinx()
    tw.fill_between(x, 0, lr, color=style.COLORS["grey"], alpha=0.12, lw=0, zorder=0)
    tw.plot(x, lr, color=style.COLORS["grey"], lw=1.0, zorder=1)
    tw.set_ylim(0, 1.05 * peak)
    tw.set_ylabel("learning rate", color=style.COLORS["grey"])
    tw.tick_params(axis="y", colors=style.COLORS["grey"])
    tw.spines["right"].set_visible(True)
    tw.spines["right"].set_color(style.COLORS["grey"])
    tw.grid(False)
    ax.set_zorder(tw.get_zorder() + 1)  # curves above the schedule's shading
    ax.patch.set_visible(False)
    return tw


@figure("naive_decay", experiments=["naive_decay"], caption=CAPTION)
def naive_decay(naive_decay):
    """Figure 4 from the ``naive_decay`` experiment."""
    r = naive_decay
    cfg = {"schemes": [s for s in ("master", "naive", "eco") if s in set(r["unit_scheme"])],
           "modes": [m for m in ("sr", "rtn") if m in set(r["unit_mode"])]}
    noises = sorted({float(g) for g in r["unit_grad_noise"]})
    noisy = max(noises)
    x = 0.5 * (r["step_lo"][0] + r["step_hi"][0])
    lr = r["lr"][0]
    peak = float(lr.max())

    fig = style.new_figure(11.5, 8.6)
    (ax_n, ax_a), (ax_g, ax_b) = fig.subplots(2, 2)
    for s in cfg["schemes"]:
        c = style.METHOD_COLORS[s]
        i = _rows(r, scheme=s, mode="sr", grad_noise=0.0)
        if i.size:
            ax_n.plot(x, r["normalised"][i[0]], color=c, lw=1.8)
            ax_n.plot(x, r["closed_form"][i[0]], color=c, lw=1.1, ls="-.")
        for m in cfg["modes"]:
            for ax, g in ((ax_a, 0.0), (ax_g, noisy)):
                i = _rows(r, scheme=s, mode=m, grad_noise=g)
                if not i.size or (ax is ax_g and noisy == 0.0):
                    continue
                ax.plot(x, r["ex2"][i[0]], color=c, lw=1.8 if m == "sr" else 1.3,
                        ls=style.MODE_LINESTYLES[m])
                if ax is ax_g and m == "sr":
                    ax.plot(x, r["lyapunov"][i[0]], color=c, lw=1.2, ls=":")
    # full precision: the reference under gradient noise (with exact gradients it converges
    # to round-off, off any useful scale)
    i = _rows(r, scheme="fp", grad_noise=noisy)
    if i.size and noisy > 0:
        ax_g.plot(x, r["ex2"][i[0]], color=style.COLORS["black"], lw=1.2)
    for ax in (ax_n, ax_a, ax_g):
        ax.set_yscale("log")
        ax.set_xlim(0, r["step_hi"][0][-1])
        ax.set_xlabel("step")
        _lr_axis(ax, x, lr, peak)
    ax_n.set_ylabel("||$\\hat x - x^*$||$^2$/d  /  $\\sigma^2_{emp}$")
    ax_a.set_ylabel("||$\\hat x - x^*$||$^2$/d")
    ax_g.set_ylabel("||$\\hat x - x^*$||$^2$/d")
    # the transient from the random start dwarfs the floors: show the floors
    quantized = r["unit_scheme"] != "fp"
    for ax, rows in ((ax_n, _rows(r, mode="sr", grad_noise=0.0)),
                     (ax_a, np.flatnonzero(quantized & (r["unit_grad_noise"] == 0.0))),
                     (ax_g, _rows(r, grad_noise=noisy))):
        key = "normalised" if ax is ax_n else "ex2"
        tail = x > 0.12 * x[-1]
        vals = np.concatenate([r[key][i][tail] for i in rows]) if rows.size else np.ones(1)
        vals = vals[np.isfinite(vals) & (vals > 0)]
        if vals.size:
            ax.set_ylim(vals.min() / 1.6, vals.max() * 1.6)
    ax_n.yaxis.set_major_locator(FixedLocator([1, 2, 5, 10, 20, 50, 100, 200, 500]))
    ax_n.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:g}"))
    ax_n.yaxis.set_minor_formatter(NullFormatter())
    lines = []
    for s in cfg["schemes"]:
        i = _rows(r, scheme=s, mode="sr", grad_noise=0.0)
        if i.size:
            a, b = float(r["normalised_peak"][i[0]]), float(r["normalised_end"][i[0]])
            lines.append(f"{s}: {a:.3g} $\\to$ {b:.3g} (\u00d7{b / a:.2g})")
    i = _rows(r, scheme=cfg["schemes"][0], mode="sr", grad_noise=0.0)
    if i.size:
        lp, le = float(r["lr_peak"][i[0]]), float(r["lr_end"][i[0]])
        lines.append(f"(mean lr {lp:.3g} $\\to$ {le:.3g}, \u00d7{le / lp:.2g})")
    ax_n.text(0.2, 0.97, "peak plateau $\\to$ last 10% of the steps:\n" + "\n".join(lines),
              transform=ax_n.transAxes, ha="left", va="top", fontsize=8,
              bbox=dict(facecolor="white", edgecolor="#CCCCCC", boxstyle="round,pad=0.3"))
    style.panel_title(ax_n, "a", "Normalised error, exact gradients, SR")
    style.panel_title(ax_a, "b", "Absolute error, exact gradients")
    style.panel_title(ax_g, "c", f"Absolute error, gradient noise {noisy:g}")

    # (d) end-of-run error relative to master weights with the same rounding
    groups, vals, colors, labels = [], [], [], []
    for g in noises:
        for m in cfg["modes"]:
            base = _rows(r, scheme="master", mode=m, grad_noise=g)
            if not base.size:
                continue
            groups.append(f"{m.upper()}\n{'exact gradients' if g == 0 else f'noise {g:g}'}")
            for s in ("naive", "eco"):
                i = _rows(r, scheme=s, mode=m, grad_noise=g)
                vals.append(float(r["ex2_end"][i[0]] / r["ex2_end"][base[0]]) if i.size
                            else np.nan)
                colors.append(style.METHOD_COLORS[s])
                labels.append(s)
    n = len(groups)
    pos = np.repeat(np.arange(n), 2) + np.tile([-0.19, 0.19], n)
    bars = ax_b.bar(pos, vals, width=0.36, color=colors)
    for rect, v in zip(bars, vals):
        ax_b.annotate(f"{v:.3g}x", (rect.get_x() + rect.get_width() / 2, v), xytext=(0, 2),
                      textcoords="offset points", ha="center", va="bottom", fontsize=8)
    ax_b.axhline(1.0, color=style.METHOD_COLORS["master"], lw=1.2)
    ax_b.set_yscale("log")
    ax_b.set_ylim(min(0.5, np.nanmin(vals) / 1.5), np.nanmax(vals) * 3)
    ax_b.set_xticks(np.arange(n))
    ax_b.set_xticklabels(groups, fontsize=8.5)
    ax_b.set_ylabel("final error / master's final error")
    ax_b.grid(axis="x", visible=False)
    style.panel_title(ax_b, "d", "End of run, relative to master weights")
    ax_b.legend(handles=[Patch(color=style.METHOD_COLORS[s], label=s) for s in ("naive", "eco")]
                + [Line2D([], [], color=style.METHOD_COLORS["master"], label="master = 1")],
                loc="upper right", fontsize=8)

    handles = [Line2D([], [], color=style.METHOD_COLORS[s], lw=2,
                      label={"master": "master weights", "naive": "naive (no master)",
                             "eco": "ECO"}[s]) for s in cfg["schemes"]]
    handles += [Line2D([], [], color="k", lw=1.2, label="full precision"),
                Line2D([], [], color="k", lw=1.8, ls="-", label="SR"),
                Line2D([], [], color="k", lw=1.3, ls="--", label="RTN"),
                Line2D([], [], color="k", lw=1.1, ls="-.",
                       label="closed form at the current lr (a)"),
                Line2D([], [], color="k", lw=1.2, ls=":", label="Lyapunov (c)"),
                Patch(color=style.COLORS["grey"], alpha=0.3, label="learning rate")]
    fig.legend(handles=handles, loc="outside upper center", ncol=5, fontsize=8.5)

    # the data behind the figure (every cell finite: the normalised error is tabulated only
    # where a run wrote errors, i.e. for the quantized SR runs)
    nb = x.size
    rep = {k: np.repeat(r[f"unit_{k}"], nb) for k in ("scheme", "mode", "grad_noise")}
    win = {"step_lo": r["step_lo"].ravel(), "step_hi": r["step_hi"].ravel(),
           "lr": r["lr"].ravel()}
    windows = rep | win | {"ex2": r["ex2"].ravel(), "s2": r["s2"].ravel(),
                           "lyapunov": r["lyapunov"].ravel()}
    sr = np.flatnonzero(r["unit_mode"] == "sr")
    rows = np.concatenate([np.arange(u * nb, (u + 1) * nb) for u in sr])
    normalised = {k: v[rows] for k, v in (rep | win).items()} | {
        "normalised": r["normalised"].ravel()[rows],
        "closed_form": r["closed_form"].ravel()[rows]}
    summary = {k: r[f"unit_{k}"] for k in ("scheme", "mode", "grad_noise")}
    for k in ("lr_peak", "ex2_peak", "s2_peak", "lr_end", "ex2_end", "s2_end", "changed_end"):
        summary[k] = r[k]
    growth = {k: r[f"unit_{k}"][sr] for k in ("scheme", "mode", "grad_noise")}
    growth |= {"normalised_peak": r["normalised_peak"][sr],
               "normalised_end": r["normalised_end"][sr],
               "growth": r["normalised_end"][sr] / r["normalised_peak"][sr]}
    return fig, {"windows": windows, "normalised": normalised, "summary": summary,
                 "normalised_growth": growth}
