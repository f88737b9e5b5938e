"""Figure ``horizon_theorem``: the ratio of the average squared gradient norm to FP's against
the horizon, per buffer, at a fixed width and at the theorem's growing width, with the
readings of :mod:`ecosim.claims.horizon` as the markdown table."""
from __future__ import annotations

import numpy as np
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter

from ..claims import horizon as HC
from . import style
from .base import figure

__all__ = ["horizon_theorem", "FIXED_MANTISSA"]

#: The fixed width of the left panels and of the tightness readings.
FIXED_MANTISSA = 6

CAPTION = """
The theorems' own test (Tang, Li and Zou, arXiv 2510.21314): 8x8 matrix regression with a
Cauchy loss log(1 + r^2) and additive gradient noise of std 0.5, W_0 = 0; Adam with b1 = 0.9,
b2 = 1 - 1/T, lr = 0.5/sqrt(T) and Muon (momentum 0.9, Nesterov, ecosim's Newton-Schulz) with
lr = 0.5/sqrt(T), both constant over the run, as the theorems assume. One buffer at a time is
rounded to nearest onto M mantissa bits (custom(11, M), float64's exponent range; weights
stored quantized, no master copy), every M from 1 to 30. Plotted: the mean over the run of
||grad f(W_t)||^2 (noise-free) over the unquantized run's with the same seed and noise,
geometric mean over 5 seeds (dots: the seeds). Left: a fixed width (solid M = 6; dashed
M = 1 for g, m, v). Right: the width ceil(a log2 T) + c with the theorem's order a (solid;
c calibrated at T = 250 to the smallest width with ratio <= 1.1) and, for the weights, also
a = 1/2 (dash-dot) and a = 1 (dotted), where the theorem's order differs; the width is written
at each point. The grey dotted line is the sufficiency bar 1.25.
The readings (sufficiency, tightness) are figures/horizon_theorem.md.
"""

_COLORS = {"weights": style.COLORS["red"], "g": style.COLORS["blue"],
           "m": style.COLORS["green"], "v": style.COLORS["purple"]}
_LABELS = {"weights": "weights W (no master)", "g": "gradient g", "m": "1st moment m",
           "v": "2nd moment v"}
_OPT = {"adam": "Adam", "muon": "Muon"}
_ORDER_STYLES = {0.5: "-.", 1.0: (0, (1, 1))}


def _tick_labels(T):
    return [f"{int(t) // 1000}k" if t % 1000 == 0 else str(int(t)) for t in T]


def _present(r, i, k) -> bool:
    return not np.isnan(r["geo_ratio"][i, :, k]).all()


def widths_markdown(r, bar: float = HC.CALIBRATION_RATIO) -> str:
    """The smallest M from which every wider M keeps the ratio <= ``bar``, per horizon."""
    T = r["horizon"]
    lines = [f"Smallest M from which every wider M keeps the geometric-mean ratio <= {bar:g}:",
             "", "| optimizer | buffer | " + " | ".join(_tick_labels(T)) + " |",
             "|---|---|" + "---|" * T.size]
    for i, o in enumerate(str(x) for x in r["optimizer"]):
        for k, b in enumerate(str(x) for x in r["buffer"]):
            if _present(r, i, k):
                w = HC.smallest_widths(r, o, b, bar)
                lines.append(f"| {_OPT.get(o, o)} | {b} | " + " | ".join(map(str, w)) + " |")
    return "\n".join(lines)


@figure("horizon_theorem", experiments=["horizon_theorem"], caption=CAPTION)
def horizon_theorem(horizon_theorem):
    r = horizon_theorem
    T = r["horizon"].astype(float)
    x = np.log2(T)
    ms = [int(m) for m in r["mantissa"]]
    fixed = FIXED_MANTISSA if FIXED_MANTISSA in ms else ms[len(ms) // 2]
    opts = [str(o) for o in r["optimizer"]]
    bufs = [str(b) for b in r["buffer"]]
    cols = ["fixed", "growing"]
    fig = style.new_figure(8.0, 3.1 * len(opts) + 0.8)
    rows: dict[str, list] = {k: [] for k in ("optimizer", "horizon", "buffer", "mantissa",
                                             "geo_ratio", "seed_ratios")}
    for i, o in enumerate(opts):
        for k, b in enumerate(bufs):
            if not _present(r, i, k):
                continue
            for j, t in enumerate(r["horizon"]):
                for n, m in enumerate(ms):
                    rows["optimizer"].append(o)
                    rows["horizon"].append(int(t))
                    rows["buffer"].append(b)
                    rows["mantissa"].append(m)
                    rows["geo_ratio"].append(repr(float(r["geo_ratio"][i, j, k, n])))
                    rows["seed_ratios"].append(
                        " ".join(repr(float(v)) for v in r["ratio"][i, j, k, n]))
    for _, o, j, col, ax, letter in style.panel_grid(fig, opts, cols):
        i = opts.index(o)
        for k, b in enumerate(bufs):
            if not _present(r, i, k):
                continue
            c = _COLORS.get(b, style.COLORS["grey"])
            dx = 0.05 * (k - 1.5)
            if col == "fixed":
                series = [(fixed, "-")] + ([(ms[0], "--")] if b != "weights"
                                          and ms[0] != fixed else [])
                for m, ls in series:
                    n = ms.index(m)
                    ax.plot(x + dx, r["geo_ratio"][i, :, k, n], color=c, ls=ls, lw=1.2,
                            marker="o", ms=3)
                    ax.plot(np.repeat(x + dx, r["ratio"].shape[-1]),
                            r["ratio"][i, :, k, n].reshape(-1), ls="none", marker=".",
                            ms=2, color=c, alpha=0.4)
            else:
                a_list = [(None, "-")] + [
                    (a, _ORDER_STYLES[a]) for a in HC.WEIGHT_ORDERS
                    if b == "weights" and a != HC.ERROR_ORDERS[o][b]]
                for a, ls in a_list:
                    v = HC.sufficiency_verdict(r, o, b, a=a)
                    if v["ratios"] is None:
                        continue
                    ax.plot(x + dx, v["ratios"], color=c, ls=ls, lw=1.2, marker="o", ms=3)
                    for xx, yy, w in zip(x + dx, v["ratios"], v["widths"]):
                        ax.annotate(str(int(w)), (xx, yy), textcoords="offset points",
                                    xytext=(0, 3), fontsize=5.5, color=c, ha="center")
        ax.axhline(HC.SUFFICIENT_RATIO, color=style.COLORS["grey"], lw=0.8, ls=(0, (2, 3)))
        ax.axhline(1.0, color=style.COLORS["black"], lw=0.5, alpha=0.5)
        ax.set_yscale("log")
        plain = FuncFormatter(lambda v, _: f"{v:g}")
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(plain)
        ax.tick_params(axis="y", which="both", labelsize=6.5)
        ax.set_xticks(x)
        ax.set_xticklabels(_tick_labels(r["horizon"]), fontsize=7)
        ax.set_xlabel("horizon T (log2 scale)")
        if j == 0:
            ax.set_ylabel("avg ||grad f||^2 / FP's")
        what = (f"fixed M = {fixed}" if col == "fixed" else "M = ceil(a log2 T) + c")
        ax.set_title(f"({letter}) {_OPT.get(o, o)}, {what}", fontsize=9.5)
    handles = [Line2D([], [], color=_COLORS[b], lw=1.2, label=_LABELS[b]) for b in bufs]
    handles += [Line2D([], [], color="#555555", lw=1.0, ls="--", label="M = 1 (g, m, v)"),
                Line2D([], [], color="#555555", lw=1.0, ls="-.", label="a = 1/2 (weights)"),
                Line2D([], [], color="#555555", lw=1.0, ls=(0, (1, 1)),
                       label="a = 1 (weights)")]
    fig.legend(handles=handles, loc="outside lower center", ncol=4, fontsize=7.5)
    tables = {"ratios": {k: np.array(v) for k, v in rows.items()}}
    md = (HC.theorem_markdown_table(r, fixed) + "\n\n" + widths_markdown(r))
    return fig, tables, md
