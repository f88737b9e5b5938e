"""Figure 3, ``beta_factor``: ECO's floor over master's against beta, the 1/(1-beta^2) law."""
from __future__ import annotations

import numpy as np
from matplotlib.lines import Line2D
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator

from . import style
from .base import figure

__all__ = ["beta_factor"]

CAPTION = """
The price of dropping the master copy: ECO's stationary error over master weights' on the
quadratic of figure 2 (each normalised by its own measured quantization-error variance
sigma_emp^2), against the momentum beta (logit axis), at two learning rates. (a) The ratio:
circles, real stochastic rounding on the uniform grid; squares, SR on FP8 E4M3 with a per-tensor
absmax scale (smallest lr only); triangles, the additive-noise model q(y) = y + xi; error bars
+-2 standard errors. Grey dotted: the small-lr limit 1/(1 - beta^2) of the ECO paper; solid
lines: the exact closed-form ratio at each lr. (b) The same divided by 1/(1 - beta^2), which
magnifies the finite-lr correction: at small lr the simulations sit on the limit (within the
closed form's own sub-percent lr correction), and at the larger lr they follow the exact ratio
below it. (c) What a user pays: the absolute floors E||x_hat - x*||^2/d of ECO over master's
at the smallest lr, not normalised. The additive model (equal noise in both schemes) keeps the
factor; with real SR (circles), also with Gaussian gradient noise (diamonds), ECO's smaller
updates near the optimum round with less variance than master's, and the absolute price stays
near 1.
"""

_MARK = {"uniform": ("o", True, "real SR, uniform grid"),
         "uniform_noise": ("D", True, "real SR + gradient noise"),
         "e4m3": ("s", False, "real SR, FP8 E4M3"),
         "additive": ("^", False, "additive model")}
_JITTER = {"additive": -0.06, "uniform": 0.0, "e4m3": 0.06, "uniform_noise": 0.12}  # in logit units


def _logit(b):
    return np.log(b / (1 - b))


def _expit(z):
    return 1.0 / (1.0 + np.exp(-z))


@figure("beta_factor", experiments=["beta_factor"], caption=CAPTION)
def beta_factor(beta_factor):
    """Figure 3 from the ``beta_factor`` experiment."""
    r = beta_factor
    normalised = [k for k in ("uniform", "e4m3", "additive") if k in set(r["tab_kind"])]
    absolute = [k for k in ("uniform", "uniform_noise", "additive") if k in set(r["tab_kind"])]
    lrs = [float(v) for v in r["curve_lr"]]
    lr_colors = dict(zip(lrs, [style.COLORS["green"], style.COLORS["purple"],
                               style.COLORS["orange"], style.COLORS["sky"]]))
    cb = r["curve_beta"]
    betas = np.unique(r["tab_beta"])

    fig = style.new_figure(15.0, 4.9)
    ax_r, ax_n, ax_a = fig.subplots(1, 3)
    for ax in (ax_r, ax_n):
        ax.plot(cb, np.ones_like(cb) if ax is ax_n else r["curve_limit"],
                color=style.COLORS["grey"], lw=1.6, ls=":", zorder=2)
        for j, lr in enumerate(lrs):
            exact = r["curve_exact"][j]
            ax.plot(cb, exact * (1 - cb**2) if ax is ax_n else exact, color=lr_colors[lr],
                    lw=1.3, zorder=3)
        for kind in normalised:
            marker, filled, _ = _MARK[kind]
            for lr in lrs:
                sel = np.flatnonzero((r["tab_kind"] == kind) & np.isclose(r["tab_lr"], lr))
                if not sel.size:
                    continue
                sel = sel[np.argsort(r["tab_beta"][sel])]
                b = r["tab_beta"][sel]
                scale = (1 - b**2) if ax is ax_n else 1.0
                c = lr_colors[lr]
                ax.errorbar(_expit(_logit(b) + _JITTER[kind]), r["tab_ratio"][sel] * scale,
                            yerr=2 * r["tab_ratio_se"][sel] * scale, fmt=marker, color=c,
                            markerfacecolor=c if filled else "white", markeredgecolor=c,
                            markersize=6, capsize=2, elinewidth=1, zorder=4)
        ax.set_xscale("logit")
        ax.set_xlim(cb[0], cb[-1])
        ax.xaxis.set_major_locator(FixedLocator(list(betas)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:g}"))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("momentum $\\beta$ (logit scale)")
    small = min(lrs)
    ax_a.plot(cb, r["curve_limit"], color=style.COLORS["grey"], lw=1.6, ls=":", zorder=2)
    ax_a.plot(cb, r["curve_exact"][lrs.index(small)], color=lr_colors[small], lw=1.3, zorder=3)
    ax_a.axhline(1.0, color=style.COLORS["black"], lw=0.8, zorder=1)
    for kind in absolute:
        marker, filled, _ = _MARK[kind]
        sel = np.flatnonzero((r["tab_kind"] == kind) & np.isclose(r["tab_lr"], small))
        sel = sel[np.argsort(r["tab_beta"][sel])]
        b, c = r["tab_beta"][sel], lr_colors[small]
        ax_a.errorbar(_expit(_logit(b) + _JITTER[kind]), r["tab_abs_ratio"][sel],
                      yerr=2 * r["tab_abs_ratio_se"][sel], fmt=marker, color=c,
                      markerfacecolor=c if filled else "white", markeredgecolor=c,
                      markersize=6, capsize=2, elinewidth=1, zorder=4)
    ax_a.set_xscale("logit")
    ax_a.set_xlim(cb[0], cb[-1])
    ax_a.xaxis.set_major_locator(FixedLocator(list(betas)))
    ax_a.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:g}"))
    ax_a.xaxis.set_minor_locator(NullLocator())
    ax_a.xaxis.set_minor_formatter(NullFormatter())
    ax_a.set_xlabel("momentum $\\beta$ (logit scale)")
    ax_a.set_yscale("log")
    ax_a.yaxis.set_major_locator(FixedLocator([0.5, 1, 2, 5, 10, 20, 50]))
    ax_a.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:g}"))
    ax_a.yaxis.set_minor_formatter(NullFormatter())
    ax_a.set_ylabel("ECO floor / master floor (absolute)")
    style.panel_title(ax_a, "c", f"What a user pays (lr = {small:g})")
    ax_r.set_yscale("log")
    ax_r.yaxis.set_major_locator(FixedLocator([1, 2, 5, 10, 20, 50]))
    ax_r.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:g}"))
    ax_r.yaxis.set_minor_formatter(NullFormatter())
    ax_r.set_ylabel("ECO floor / master floor (each / $\\sigma^2_{emp}$)")
    ax_n.set_ylabel("(ECO / master) $\\times$ (1 - $\\beta^2$)")
    style.panel_title(ax_r, "a", "ECO over master weights")
    style.panel_title(ax_n, "b", "Relative to the limit 1/(1-$\\beta^2$)")

    handles = [Line2D([], [], color=style.COLORS["grey"], lw=1.6, ls=":",
                      label="1/(1-$\\beta^2$) (lr $\\to$ 0)")]
    handles += [Line2D([], [], color=lr_colors[lr], lw=1.3,
                       label=f"exact closed-form ratio, lr = {lr:g}") for lr in lrs]
    for kind in dict.fromkeys(normalised + absolute):
        marker, filled, label = _MARK[kind]
        handles.append(Line2D([], [], color="k", ls="none", marker=marker, markersize=6,
                              markerfacecolor="k" if filled else "white", label=label))
    ax_r.legend(handles=handles, loc="upper left", fontsize=8)

    tables = {
        "ratios": {"kind": r["tab_kind"], "lr": r["tab_lr"], "beta": r["tab_beta"],
                   "eco_over_master": r["tab_ratio"], "std_error": r["tab_ratio_se"],
                   "absolute_eco_over_master": r["tab_abs_ratio"],
                   "absolute_std_error": r["tab_abs_ratio_se"],
                   "exact_closed_form": r["tab_exact"], "limit": r["tab_limit"]},
        "runs": {"kind": r["unit_kind"], "scheme": r["unit_scheme"], "lr": r["unit_lr"],
                 "beta": r["unit_beta"], "steps": r["steps"], "ex2": r["ex2"],
                 "s2": r["s2"], "normalised": r["ratio"], "std_error": r["ratio_se"],
                 "closed_form": r["closed_form"]},
        "theory": {"beta": cb, "limit": r["curve_limit"]}
        | {f"exact_lr_{lr:g}": r["curve_exact"][j] for j, lr in enumerate(lrs)},
    }
    return fig, tables
