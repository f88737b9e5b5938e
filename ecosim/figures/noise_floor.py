"""Figure 2, ``noise_floor``: the quadratic noise floor against the learning rate."""
from __future__ import annotations

import numpy as np
from matplotlib.lines import Line2D
from matplotlib.ticker import NullFormatter

from . import style
from .base import figure

__all__ = ["noise_floor", "select"]

CAPTION = """
Noise floor of SGD with momentum on the quadratic f = (L/2)||x - x*||^2 (L = 1, d = 1000
coordinates, exact gradients, optimum off the grid), against the learning rate eta, for master
weights (blue), naive removal of the master copy (red) and ECO (green); one column per momentum
beta. Row 1: the stationary error E||x_hat - x*||^2/d of the stored weights divided by each
scheme's own measured quantization-error variance sigma_emp^2 (the time average of mean(e^2)
per write). Filled circles: real stochastic rounding (SR) on a fixed uniform grid (step 2^-6);
open squares: SR on FP8 E4M3 with a per-tensor absmax scale; open triangles: the additive-noise
model q(y) = y + xi simulated directly; error bars are +-2 batch-means standard errors (mostly
smaller than the markers). Thick lines: the closed forms of docs/theory.md §5.2; thin dashed
lines: the discrete Lyapunov solution of the same linear systems (they coincide). Master sits
at sigma^2, ECO at sigma^2/(1 - beta^2) (dotted level) and naive removal grows like
1/(2 L eta). Row 2: the same error in absolute terms. Real SR (filled) against the additive
model with a fixed sigma^2 = step^2/6 (triangles; thin lines: closed forms times sigma^2) and
round-to-nearest (RTN, open diamonds). Dotted lines: the Lyapunov prediction with each SR run's
measured sigma_emp^2. Under the additive model naive removal diverges like 1/eta; under real
SR it does not, because naive's sigma_emp^2 shrinks with the update (row 3), while naive+RTN
stops moving once eta*|m| falls below half a grid step and stays far from the optimum. Row 3:
the measured sigma_emp^2 (grey lines: step^2/6 and step^2/12, the SR and RTN variances of a
value at a uniformly random position).
"""

_KINDS = {  # marker styles of the simulated point sets
    "uniform": dict(marker="o", ms=5.5, filled=True, label="real SR, uniform grid"),
    "e4m3": dict(marker="s", ms=5.5, filled=False, label="real SR, FP8 E4M3 (absmax)"),
    "additive": dict(marker="^", ms=6.0, filled=False, label="additive model q(y) = y + xi"),
    "rtn": dict(marker="D", ms=4.5, filled=False, label="RTN, uniform grid"),
}
_OFFSET = {"additive": 0.90, "uniform": 1.0, "e4m3": 1.11, "rtn": 1.0}  # x jitter (log axis)
_SCHEME_OFFSET = {"master": 0.95, "naive": 1.0, "eco": 1.05}  # absolute panels: overlapping
_SCHEME_LABELS = {"master": "master weights", "naive": "naive (no master)", "eco": "ECO"}


def select(run, **where) -> np.ndarray:
    """Indices of the units of a stacked run whose ``unit_<field>`` equal the given values,
    sorted by learning rate."""
    mask = np.ones(len(run["unit_lr"]), bool)
    for field, value in where.items():
        col = run[f"unit_{field}"]
        mask &= np.isclose(col, value) if col.dtype.kind == "f" else (col == value)
    idx = np.flatnonzero(mask)
    return idx[np.argsort(run["unit_lr"][idx])]


def _points(ax, x, y, yerr, color, kind, jitter=1.0, **kw):
    spec = _KINDS[kind]
    face = color if spec["filled"] else "white"
    ax.errorbar(x * _OFFSET[kind] * jitter, y, yerr=yerr, fmt=spec["marker"], color=color,
                markerfacecolor=face, markeredgecolor=color, markersize=spec["ms"],
                capsize=2, elinewidth=1, linewidth=1, zorder=4, **kw)


@figure("noise_floor", experiments=["floor", "floor_additive"], caption=CAPTION)
def noise_floor(floor, floor_additive):
    """Figure 2 from the ``floor`` (real rounding) and ``floor_additive`` experiments."""
    add = floor_additive
    betas = [float(b) for b in np.unique(floor["unit_beta"])]
    schemes = [s for s in ("master", "naive", "eco") if s in set(floor["unit_scheme"])]
    grids = set(floor["unit_grid"])
    modes = set(floor["unit_mode"])
    sigma2, step = float(add["sigma2"]), float(add["step"])
    curve_lr = add["curve_lr"]
    curve_beta = add["curve_beta"]

    fig = style.new_figure(5.2 * len(betas) + 0.6, 12.6)
    axes = fig.subplots(3, len(betas), squeeze=False, sharex=True)
    for col, beta in enumerate(betas):
        ax_n, ax_a, ax_s = axes[:, col]
        bi = int(np.flatnonzero(np.isclose(curve_beta, beta))[0]) if np.isclose(
            curve_beta, beta).any() else None
        for s in schemes:
            c = style.METHOD_COLORS[s]
            jit = _SCHEME_OFFSET[s]
            # theory curves
            if bi is not None:
                ax_n.plot(curve_lr, add[f"curve_closed_{s}"][bi], color=c, lw=3.2, alpha=0.35,
                          solid_capstyle="butt")
                ax_n.plot(curve_lr, add[f"curve_lyapunov_{s}"][bi], color=c, lw=1.0, ls="--")
                ax_a.plot(curve_lr, sigma2 * add[f"curve_closed_{s}"][bi], color=c, lw=1.0,
                          alpha=0.6)
            # additive-noise simulation
            i = select(add, scheme=s, beta=beta)
            if i.size:
                lr = add["unit_lr"][i]
                _points(ax_n, lr, add["ratio"][i], 2 * add["ratio_se"][i], c, "additive")
                _points(ax_a, lr, add["ex2"][i], 2 * add["ex2_se"][i], c, "additive", jit)
            # real SR on the grids
            for g in ("uniform", "e4m3"):
                if g not in grids or "sr" not in modes:
                    continue
                i = select(floor, scheme=s, beta=beta, grid=g, mode="sr")
                lr = floor["unit_lr"][i]
                _points(ax_n, lr, floor["ratio"][i], 2 * floor["ratio_se"][i], c, g)
                if g == "uniform":
                    _points(ax_a, lr, floor["ex2"][i], 2 * floor["ex2_se"][i], c, g, jit)
                    ax_a.plot(lr * jit, floor["lyapunov"][i] * floor["s2"][i], color=c, lw=1.1,
                              ls=":")
                    ax_s.plot(lr, floor["s2"][i], color=c, lw=1.0, marker="o", ms=5,
                              markerfacecolor=c)
            # RTN on the uniform grid: absolute error and sigma_emp^2 only (not additive noise)
            if "rtn" in modes and "uniform" in grids:
                i = select(floor, scheme=s, beta=beta, grid="uniform", mode="rtn")
                lr = floor["unit_lr"][i]
                _points(ax_a, lr, floor["ex2"][i], 2 * floor["ex2_se"][i], c, "rtn", jit)
                ax_a.plot(lr * jit, floor["ex2"][i], color=c, lw=0.8, ls="--", alpha=0.7)
                s2 = floor["s2"][i]
                pos = s2 > 0  # a stalled naive+RTN run writes no error at all
                ax_s.plot(lr[pos], s2[pos], color=c, lw=0.8, ls="--", marker="D", ms=4.5,
                          markerfacecolor="white")
        # reference levels
        lo, hi = curve_lr[0], curve_lr[-1]
        ax_n.axhline(1.0 / (1.0 - beta**2), color=style.COLORS["grey"], lw=1, ls=":")
        ax_n.annotate(f"1/(1-$\\beta^2$) = {1.0 / (1.0 - beta**2):.3g}",
                      (lo, 1.0 / (1.0 - beta**2)), xytext=(4, 3), textcoords="offset points",
                      ha="left", va="bottom", fontsize=8, color=style.COLORS["grey"])
        ax_n.plot(curve_lr, 1.0 / (2.0 * curve_lr), color=style.COLORS["grey"], lw=1, ls=":")
        ax_n.annotate("1/(2L$\\eta$)", (lo * 1.15, 1.0 / (2.0 * lo * 1.15)), xytext=(6, 0),
                      textcoords="offset points", fontsize=8, color=style.COLORS["grey"],
                      va="center")
        ax_s.axhline(step**2 / 6, color=style.COLORS["grey"], lw=1,
                     label="step$^2$/6: SR at a uniformly random position\n(= the additive "
                           "model's $\\sigma^2$)")
        ax_s.axhline(step**2 / 12, color=style.COLORS["grey"], lw=1, ls="--",
                     label="step$^2$/12: RTN at a uniformly random position")
        ax_s.legend(loc="lower right", fontsize=8)
        for ax in (ax_n, ax_a, ax_s):
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlim(lo, hi)
            ax.xaxis.set_minor_formatter(NullFormatter())  # short ranges (smoke): no clutter
            ax.yaxis.set_minor_formatter(NullFormatter())
        ax_s.set_xlabel("learning rate $\\eta$")
        if col == 0:
            ax_n.set_ylabel("E||$\\hat x - x^*$||$^2$/d  /  $\\sigma^2_{emp}$")
            ax_a.set_ylabel("E||$\\hat x - x^*$||$^2$/d")
            ax_s.set_ylabel("$\\sigma^2_{emp}$ = mean $e^2$ per write")
        b = f"$\\beta$ = {beta:g}"
        n = len(betas)
        style.panel_title(ax_n, "abcdefghi"[col], f"Normalised floor, {b}")
        style.panel_title(ax_a, "abcdefghi"[n + col], f"Absolute floor, {b}")
        style.panel_title(ax_s, "abcdefghi"[2 * n + col], f"Measured error variance, {b}")
    # one legend for the whole figure: colours are schemes, markers are simulations
    handles = [Line2D([], [], color=style.METHOD_COLORS[s], lw=3, label=_SCHEME_LABELS[s])
               for s in schemes]
    for kind, spec in _KINDS.items():
        if (kind in grids or kind == "additive" or (kind == "rtn" and "rtn" in modes)):
            handles.append(Line2D([], [], color="k", ls="none", marker=spec["marker"],
                                  markersize=spec["ms"],
                                  markerfacecolor="k" if spec["filled"] else "white",
                                  label=spec["label"]))
    handles += [Line2D([], [], color="k", lw=3.2, alpha=0.35, label="closed form"),
                Line2D([], [], color="k", lw=1.0, ls="--", label="Lyapunov solution"),
                Line2D([], [], color="k", lw=1.1, ls=":",
                       label="Lyapunov with measured $\\sigma^2_{emp}$")]
    fig.legend(handles=handles, loc="outside upper center", ncol=2 if len(betas) == 1 else 4,
               fontsize=8.5)

    # the data behind the figure
    tables = {
        "simulated": {k: floor[f"unit_{k}"] for k in ("grid", "mode", "scheme", "beta", "lr")}
        | {k: floor[k] for k in ("steps", "ex2", "ex2_se", "s2", "ratio", "ratio_se",
                                 "closed_form", "lyapunov")},
        "additive": {k: add[f"unit_{k}"] for k in ("scheme", "beta", "lr")}
        | {k: add[k] for k in ("steps", "ex2", "ex2_se", "s2", "ratio", "ratio_se",
                               "closed_form", "lyapunov")},
    }
    nb, nl = len(curve_beta), curve_lr.size
    curves = {"beta": np.repeat(curve_beta, nl), "lr": np.tile(curve_lr, nb)}
    for s in schemes:
        curves[f"closed_form_{s}"] = add[f"curve_closed_{s}"].ravel()
        curves[f"lyapunov_{s}"] = add[f"curve_lyapunov_{s}"].ravel()
    tables["theory"] = curves
    return fig, tables
