"""Figure 1, ``grids``: the number grids, SR's rounding probability, RTN vs SR errors."""
from __future__ import annotations

import math

import numpy as np
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

from . import style
from .base import figure

__all__ = ["grids"]

CAPTION = """
Number grids and rounding. (a) The positive finite values of FP8 E4M3 and E5M2, FP4 E2M1, INT4
and ternary on a log2 axis (light ticks: subnormals; every grid is sign-symmetric and has 0,
INT4 also has -8). (b) The same grids on [-8, 8], linear: floats are dense near zero, integer
grids uniform. (c) Probability that a value between two neighbours of E4M3 (1 and 1.125) rounds
up, against its position p between them: stochastic rounding (SR) with 32 random bits is
exactly linear, with few bits it is a staircase that never exceeds p, round-to-nearest (RTN)
is a step at p = 1/2 (the tie goes to the even code); dots are the measured frequency of
keyed SR from ecosim.quantize. (d) The rounding error in units of the local grid step for x ~
N(0, 1) scaled by absmax onto E4M3: RTN is uniform on [-1/2, 1/2], SR triangular on [-1, 1],
unbiased but with twice the variance (1/6 vs 1/12).
"""


def _pow2_label(v, _pos=None) -> str:
    k = int(round(math.log2(v)))
    return f"$2^{{{k}}}$" if k not in (0, 1) else str(2**k)


def _strips(ax, names, values, which, subnormal, *, positive: bool, xlim):
    """One row of tick marks per format."""
    n = len(names)
    for i, name in enumerate(names):
        row = n - 1 - i  # first format on top
        sel = which == i
        v, sub = values[sel], subnormal[sel]
        keep = (v > 0) if positive else (v >= xlim[0]) & (v <= xlim[1])
        color = style.FORMAT_COLORS.get(name, style.COLORS["black"])
        for mask, alpha in ((keep & ~sub, 1.0), (keep & sub, 0.35)):
            if mask.any():
                ax.vlines(v[mask], row - 0.34, row + 0.34, color=color, alpha=alpha,
                          linewidth=0.9)
    ax.set_ylim(-0.6, n - 0.4)
    ax.set_xlim(*xlim)
    ax.grid(axis="y", visible=False)
    ax.tick_params(axis="y", length=0)
    ax.spines["left"].set_visible(False)


@figure("grids", experiments=["grids"], caption=CAPTION)
def grids(grids):
    """Figure 1 from the ``grids`` experiment."""
    r = grids
    names = [str(s) for s in r["format_names"]]
    counts, vmax = r["format_count"], r["format_max"]
    values, which, sub = r["values"], r["values_format"], r["values_subnormal"]

    fig = style.new_figure(11.0, 9.2)
    gs = fig.add_gridspec(3, 2, height_ratios=[1.05, 0.95, 1.45])
    ax_log = fig.add_subplot(gs[0, :])
    ax_lin = fig.add_subplot(gs[1, :])
    ax_sr = fig.add_subplot(gs[2, 0])
    ax_err = fig.add_subplot(gs[2, 1])

    # (a) positive values, log2 axis
    pos = values[values > 0]
    lo_exp = math.floor(math.log2(pos.min())) - 1
    hi_exp = math.ceil(math.log2(pos.max())) + 1
    _strips(ax_log, names, values, which, sub, positive=True, xlim=(2.0**lo_exp, 2.0**hi_exp))
    ax_log.set_xscale("log", base=2)
    major = [2.0**k for k in range(4 * math.ceil(lo_exp / 4), hi_exp + 1, 4)]
    ax_log.xaxis.set_major_locator(FixedLocator(major))
    ax_log.xaxis.set_major_formatter(FuncFormatter(_pow2_label))
    ax_log.xaxis.set_minor_locator(FixedLocator([2.0**k for k in range(lo_exp, hi_exp + 1)]))
    ax_log.xaxis.set_minor_formatter(NullFormatter())
    ax_log.grid(axis="x", which="minor", color="#F0F0F0", linewidth=0.5)
    labels = []
    for name, c, m in zip(names, counts, vmax):
        labels.append(f"{style.format_label(name)}\n{int(c)} finite values, max {m:g}")
    ax_log.set_yticks(range(len(names)))
    ax_log.set_yticklabels(labels[::-1])
    ax_log.set_xlabel("positive finite values (log$_2$ scale; light ticks: subnormals)")
    style.panel_title(ax_log, "a", "Number grids: every positive value of each format")

    # (b) linear axis near zero
    _strips(ax_lin, names, values, which, sub, positive=False, xlim=(-8.4, 8.4))
    ax_lin.set_yticks(range(len(names)))
    ax_lin.set_yticklabels([style.format_label(n) for n in names][::-1])
    ax_lin.set_xticks(np.arange(-8, 9, 1))
    ax_lin.set_xlabel("value (linear scale)")
    style.panel_title(ax_lin, "b", "The same grids on [-8, 8]")

    # (c) P(round up) between two neighbours
    lo, hi = float(r["sr_lo"]), float(r["sr_hi"])
    p = r["sr_p"]
    nb = int(r["sr_nbits"])
    fmt_label = style.format_label(str(r["sr_format"]))
    c_sr, c_rtn = style.ROUNDING_COLORS["sr"], style.ROUNDING_COLORS["rtn"]
    ax_sr.plot(p, r["sr_exact_up"], color=c_sr, label="SR, 32 random bits: p")
    ax_sr.step(p, r["sr_fewbits_up"], where="post", color=c_sr, linestyle=":", linewidth=1.3,
               label=f"SR, {nb} random bits (all {2**nb} patterns): "
                     f"$\\lfloor {2**nb}p \\rfloor / {2**nb}$")
    ax_sr.step(p, r["sr_rtn_up"], where="post", color=c_rtn, linestyle="--",
               label="RTN: a step at 1/2 (tie to even)")
    tie = np.flatnonzero(p == 0.5)
    if tie.size:
        ax_sr.plot([0.5], r["sr_rtn_up"][tie], "o", color=c_rtn, markersize=4)
    ep, ef, se = r["emp_p"], r["emp_freq"], r["emp_se"]
    n = int(r["emp_n"][0])
    ax_sr.errorbar(ep, ef, yerr=2 * se, fmt="o", color=style.COLORS["black"], markersize=4.5,
                   capsize=2, linewidth=1, zorder=5,
                   label=f"keyed SR, measured\n({n:,} draws each, $\\pm$2 s.e.)")
    ax_sr.set_xlim(-0.02, 1.02)
    ax_sr.set_ylim(-0.04, 1.48)  # headroom for the legend
    ax_sr.set_yticks(np.linspace(0, 1, 6))
    ax_sr.set_xlabel("position p = (x - lo) / (hi - lo)")
    ax_sr.set_ylabel("P(x rounds up to hi)")
    top = ax_sr.secondary_xaxis("top", functions=(lambda t: lo + t * (hi - lo),
                                                  lambda x: (x - lo) / (hi - lo)))
    top.set_xticks(np.linspace(lo, hi, 5))
    top.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    top.set_xlabel(f"x between neighbours {lo:g} and {hi:g} of {fmt_label}", fontsize=8.5)
    top.tick_params(labelsize=8)
    ax_sr.legend(loc="upper left", fontsize=7.8)
    style.panel_title(ax_sr, "c", "Rounding probability between two neighbours")

    # (d) error histograms
    edges = r["err_edges"]
    efmt = style.format_label(str(r["err_format"]))
    nerr = int(r["err_samples"])
    for mode, name, theory in (("rtn", "RTN", "uniform on [-1/2, 1/2], std 1/$\\sqrt{12}$"),
                               ("sr", "SR", "triangular on [-1, 1], std 1/$\\sqrt{6}$")):
        color = style.ROUNDING_COLORS[mode]
        dens = r[f"err_{mode}_density"]
        mean, std = float(r[f"err_{mode}_mean"]), float(r[f"err_{mode}_std"])
        ax_err.stairs(dens, edges, color=color, fill=True, alpha=0.18)
        ax_err.stairs(dens, edges, color=color, linewidth=1.4,
                      label=f"{name}, measured: mean {mean:+.4f}, std {std:.3f}")
        ax_err.plot(r["err_theory_x"], r[f"err_theory_{mode}"], color=color, linestyle="--",
                    linewidth=1.0, label=f"{name}, law for uniform p: {theory}")
    ax_err.set_xlim(-1.05, 1.05)
    ax_err.set_ylim(0, 1.5)
    ax_err.set_xlabel(f"rounding error q(x) - x in units of the local step\n({nerr:,} samples)")
    ax_err.set_ylabel("density")
    ax_err.legend(loc="upper left", fontsize=7.8)
    style.panel_title(ax_err, "d", f"RTN vs SR error, N(0, 1) scaled onto {efmt}")

    # the data behind the figure
    x_line = lo + p * (hi - lo)
    tables = {
        "values": {"format": np.array(names)[which], "value": values, "subnormal": sub},
        "sr_probability": {"p": p, "x": x_line, "rtn_up": r["sr_rtn_up"],
                           "sr_exact_up": r["sr_exact_up"],
                           f"sr_{nb}bit_up": r["sr_fewbits_up"]},
        "sr_measured": {"p": ep, "x": lo + ep * (hi - lo), "frequency": ef,
                        "draws": r["emp_n"], "std_error": se},
        "errors": {"bin_left": edges[:-1], "bin_right": edges[1:],
                   "rtn_density": r["err_rtn_density"], "sr_density": r["err_sr_density"]},
    }
    return fig, tables
