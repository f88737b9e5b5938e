"""Figures 9 and 10, ``memory_pareto`` and ``adam_vs_sgdm``: static memory against loss.

Memory is :mod:`ecosim.memory`'s: the bytes that the arrays of the optimizer state really hold
(codes, scales, float32 biases and moments; the experiments record the formula for the same
shapes beside it, and the two agree), and the paper's headline per-parameter figure (every
parameter in the weight format, scales left out) for the labels.
"""
from __future__ import annotations

import math

import numpy as np
from matplotlib.lines import Line2D

from ..experiments.mlp_methods import MEMORY_BUFFERS, METHODS, method_label
from ..experiments.mlp_states import parse_variant
from . import style
from .base import figure
from .mlp_methods import (
    fmt_name,
    irreducible_loss,
    method_rows,
    unit_rows,
    method_style,
    summarise,
)

__all__ = ["memory_pareto", "adam_vs_sgdm"]


def _per_param(r, i: int, key: str = "mem_measured") -> float:
    return float(r[key][i].sum() / r["n_params"][i])


def _pareto(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The lower-left frontier of (memory, loss) points, sorted by memory."""
    front, best = [], math.inf
    for x, y in sorted(points):
        if y < best:
            front.append((x, y))
            best = y
    return front


def _frontier_line(ax, front, xmax):
    xs = [p[0] for p in front] + [xmax]
    ys = [p[1] for p in front] + [front[-1][1]]
    ax.step(xs, ys, where="post", color=style.COLORS["grey"], lw=1.0, ls="-", zorder=0,
            alpha=0.8)


# -- figure 9 ------------------------------------------------------------------------------------

PARETO_CAPTION = """
Static memory against validation loss (the ECO paper's Pareto view). Memory is ecosim.memory's:
the bytes that the arrays of the weights and optimizer state really hold (1-byte FP8 or packed
INT4 codes plus float32 scales, float32 biases, master copy, moments), equal to the formula for
the same shapes. (a) The width sweep of figure 8 (FP8 E4M3 row-wise weights, AdamW): total
static memory against the final validation loss above the irreducible 0.09 (mean over 8 seeds,
faint bars min-max); the legend gives the paper's bytes per parameter (every parameter in the
weight format, scales left out). Dropping the master copy takes a quarter of the memory away
(12 -> 9 bytes per parameter): ECO+SR reaches the loss of master weights with that much less
memory at every width and lies on the lower-left frontier (grey); naive+SR pays for the same
saving with a higher loss, ECO+RTN with a higher and more variable one; naive+RTN is off the
scale (figure 8). (b) Configurations at width 32 (AdamW): Table 1's methods with FP8 (filled)
and INT4 (open) weights, and FP8 ECO+SR with its moments stored in fewer bits (plus signs;
dotted line). ECO+SR's loss stays nearly flat from 9.3 down to 3.7 measured bytes per parameter
(BF16 moments, then an FP8 E4M3 first moment, then an FP8 E5M2 second moment); with the second
moment in FP8 E4M3 it diverges (crosses), as does INT4 ECO+RTN. With INT4 weights ECO+SR
matches master+SR and beats naive+SR, at 8.6 bytes per parameter.
"""


def _state_groups(r, variants=None):
    out = []
    for v in dict.fromkeys(r["unit_variant"]):
        if variants is not None and v not in variants:
            continue
        out.append((str(v), unit_rows(r, variant=v)))
    return out


def _headline(r, rows) -> float:
    return float(r["mem_headline"][rows[0]].sum())


#: the methods of panel (a): Table 1's, less master+RTN (on top of master+SR) and naive+RTN
#: (far above; its numbers are in the table)
_SWEEP_METHODS = (("bf16", "master", "rtn"), ("W", "master", "sr"), ("W", "naive", "sr"),
                  ("W", "eco", "rtn"), ("W", "eco", "sr"))
#: the state variants of panel (b): ECO+SR with ever smaller AdamW moments
_PARETO_STATES = ("adamw:eco_sr:bf16_rtn:bf16_rtn", "adamw:eco_sr:e4m3_rtn:bf16_rtn",
                  "adamw:eco_sr:e4m3_rtn:e5m2_rtn", "adamw:eco_sr:bf16_rtn:e4m3_rtn",
                  "adamw:eco_sr:e4m3_rtn:e4m3_rtn")


@figure("memory_pareto", experiments=["mlp_methods", "mlp_states"], caption=PARETO_CAPTION)
def memory_pareto(mlp_methods, mlp_states):
    """Figure 9 from the ``mlp_methods`` and ``mlp_states`` experiments."""
    r, s = mlp_methods, mlp_states
    cfg = r.config
    floor = irreducible_loss(cfg)
    fig = style.new_figure(12.5, 5.0)
    ax_a, ax_b = fig.subplots(1, 2)

    # (a) the width sweep: total bytes vs excess loss, every Table 1 method in the table
    sweep = {k: [] for k in ("method", "width", "params", "bytes_measured", "bytes_formula",
                             "bytes_per_param", "headline_per_param", "mean", "min", "max",
                             "n_diverged")}
    pts, handles = [], []
    shown = {(w, sc, mo) for w, sc, mo in _SWEEP_METHODS}
    for weights, scheme, mode in METHODS:
        w_ = "bf16" if weights == "bf16" else cfg.scaling_format
        label = method_label(w_, scheme, mode)
        st = method_style(w_, scheme, mode)
        xs, ys, lo, up = [], [], [], []
        for width in cfg.widths:
            rows = unit_rows(r, weights=w_, scheme=scheme, mode=mode, width=width)
            if not rows.size:
                continue
            stt = summarise(r, rows)
            i = rows[0]
            total = float(r["mem_measured"][i].sum())
            sweep["method"].append(label)
            sweep["width"].append(width)
            sweep["params"].append(int(r["n_params"][i]))
            sweep["bytes_measured"].append(total)
            sweep["bytes_formula"].append(float(r["mem_formula"][i].sum()))
            sweep["bytes_per_param"].append(_per_param(r, i))
            sweep["headline_per_param"].append(_headline(r, rows))
            for k in ("mean", "min", "max"):
                sweep[k].append(stt[k] if math.isfinite(stt[k]) else 0.0)
            sweep["n_diverged"].append(stt["n_diverged"])
            if math.isfinite(stt["mean"]):
                xs.append(total / 1024)
                ys.append(stt["mean"] - floor)
                lo.append(stt["mean"] - stt["min"])
                up.append(stt["max"] - stt["mean"])
        if xs and (weights, scheme, mode) in shown:
            bars = ax_a.errorbar(xs, ys, yerr=[lo, up], color=st["color"], ls=st["ls"],
                                 marker=st["marker"], ms=5, lw=1.5, capsize=2, elinewidth=0.8)
            for part in bars[1] + bars[2]:
                part.set_alpha(0.45)
            pts += list(zip(xs, ys))
            handles.append(Line2D([], [], color=st["color"], ls=st["ls"],
                                  marker=st["marker"],
                                  label=f"{label} ({_headline_label(r, w_, scheme, mode)})"))
    if pts:
        _frontier_line(ax_a, _pareto(pts), max(p[0] for p in pts) * 1.25)
        handles.append(Line2D([], [], color=style.COLORS["grey"], lw=1.0,
                              label="lower-left frontier"))
    for width in cfg.widths:  # which width each column of points is
        rows = unit_rows(r, width=width, scheme="eco")
        if rows.size:
            x = float(r["mem_measured"][rows[0]].sum()) / 1024
            ax_a.annotate(f"w={width}", (x, 1.0), xycoords=("data", "axes fraction"),
                          xytext=(0, -2), textcoords="offset points", ha="center", va="top",
                          fontsize=7.5, color=style.COLORS["grey"])
    ax_a.set_xscale("log")
    ax_a.set_yscale("log")
    ax_a.set_xlabel("static memory of weights + optimizer state (KiB, measured)")
    ax_a.set_ylabel(f"final validation loss - {floor:g} (irreducible)")
    ax_a.legend(handles=handles, loc="lower left", fontsize=7.4)
    fmt_label = style.format_label(fmt_name(cfg.scaling_format))
    style.panel_title(ax_a, "a", f"Width sweep, {fmt_label} weights, AdamW")

    # (b) configurations at the curve width: bytes/param vs excess loss
    width = cfg.curve_width
    conf = {k: [] for k in ("configuration", "optimizer", "bytes_per_param",
                            "formula_per_param", "headline_per_param", "mean", "std",
                            "n_diverged", "seeds")}
    points, crosses = [], []

    def add(label, res, rows, st, filled=True, tag=True):
        stt = summarise(res, rows)
        x = _per_param(res, rows[0])
        conf["configuration"].append(label)
        conf["optimizer"].append("adamw")
        conf["bytes_per_param"].append(x)
        conf["formula_per_param"].append(_per_param(res, rows[0], "mem_formula"))
        conf["headline_per_param"].append(_headline(res, rows))
        conf["mean"].append(stt["mean"] if math.isfinite(stt["mean"]) else 0.0)
        conf["std"].append(stt["std"])
        conf["n_diverged"].append(stt["n_diverged"])
        conf["seeds"].append(stt["n"])
        if stt["n_diverged"] > stt["n"] / 2 or not math.isfinite(stt["mean"]):
            crosses.append((x, label, st["color"]))
            return None
        ax_b.errorbar([x], [stt["mean"] - floor], yerr=[[stt["mean"] - stt["min"]],
                                                        [stt["max"] - stt["mean"]]],
                      color=st["color"], marker=st["marker"], ms=7, ls="none", mew=1.5,
                      mfc=st["color"] if filled else "white", elinewidth=0.9, capsize=2,
                      zorder=3)
        if tag:
            points.append((x, stt["mean"] - floor, label, st["color"]))
        return x, stt["mean"] - floor

    for fmt in cfg.curve_formats:
        for key, label, rows in method_rows(r, fmt, width):
            if key[2] == "rtn" and key[0] != "bf16" and key[1] != "eco":
                continue  # master+RTN sits on master+SR; naive+RTN fails (figures 7, 8)
            if key[0] == "bf16" and fmt != cfg.curve_formats[0]:
                continue
            add(label, r, rows, method_style(*key), filled=(fmt != "int4"))
    eco_line = []
    first = unit_rows(r, weights=cfg.curve_formats[0], scheme="eco", mode="sr", width=width)
    if first.size and math.isfinite(summarise(r, first)["mean"]):
        stt = summarise(r, first)
        eco_line.append((_per_param(r, first[0]), stt["mean"] - floor))
    ok_states = s.config.width == width
    legend = []
    for v in (_PARETO_STATES if ok_states else ()):
        rows = unit_rows(s, variant=v)
        if not rows.size:
            continue
        st = {"color": _state_color(parse_variant(v)[3]), "marker": "P"}
        label = f"FP8 ECO + SR, {_states_text(parse_variant(v)[3])}"
        xy = add(label, s, rows, st, tag=False)
        if xy:
            eco_line.append(xy)
            legend.append(Line2D([], [], color=st["color"], marker="P", ls="none", ms=7,
                                 label=f"{label} ({_headline(s, rows):g} B/param)"))
    if len(eco_line) > 1:
        eco_line.sort()
        ax_b.plot(*zip(*eco_line), color=style.METHOD_COLORS["eco"], lw=1.0, ls=":", zorder=1)
    ys = [p[1] for p in points] or [floor]
    top = max(ys) * 2.2
    for x, label, color in crosses:
        ax_b.plot([x], [top], marker="x", color=color, ms=8, mew=2, ls="none")
    if crosses:
        ax_b.axhspan(top / 1.15, top * 1.15, color="k", alpha=0.05, lw=0)
        ax_b.annotate("diverged: " + "; ".join(c[1].replace("FP8 ECO + SR, ", "ECO+SR ")
                                             for c in crosses),
                      (0.99, top), xycoords=("axes fraction", "data"), xytext=(0, 10),
                      textcoords="offset points", ha="right", va="bottom", fontsize=7)
    _place_labels(ax_b, points)
    if legend:
        legend.append(Line2D([], [], color=style.METHOD_COLORS["eco"], ls=":", lw=1.0,
                             label="FP8 ECO + SR as its states shrink"))
        ax_b.legend(handles=legend, loc="upper right", bbox_to_anchor=(1.0, 0.86),
                    fontsize=7.2)
    if points:
        front = _pareto([(p[0], p[1]) for p in points if p[1] < top])
        _frontier_line(ax_b, front, max(p[0] for p in points) + 0.6)
    ax_b.set_yscale("log")
    ax_b.set_ylim(min(ys) / 1.4, top * 1.5)
    xs_all = [p[0] for p in points] + [p[0] for p in eco_line] + [c[0] for c in crosses]
    if xs_all:
        ax_b.set_xlim(min(xs_all) - 0.5, max(xs_all) + 4.2)
    ax_b.set_xlabel(f"static bytes per parameter (measured, width {width})")
    ax_b.set_ylabel(f"final validation loss - {floor:g} (irreducible)")
    style.panel_title(ax_b, "b", f"Configurations at width {width} (AdamW)")
    tables = {"width_sweep": {k: np.array(v) for k, v in sweep.items()},
              "configurations": {k: np.array(v) for k, v in conf.items()}}
    return fig, tables


def _place_labels(ax, points, min_sep: float = 0.055):
    """Labels to the right of points (x, y, text, colour) on a log-y axis, pushed apart
    vertically (at least ``min_sep`` decades) where points share an x; a thin line joins a
    label that moved to its point."""
    cols: list[list] = []
    for p in sorted(points, key=lambda p: p[0]):
        if cols and abs(p[0] - cols[-1][0][0]) < 0.35:
            cols[-1].append(p)
        else:
            cols.append([p])
    for col in cols:
        col.sort(key=lambda p: p[1])
        ys = [math.log10(p[1]) for p in col]
        for i in range(1, len(ys)):
            ys[i] = max(ys[i], ys[i - 1] + min_sep)
        shift = (sum(math.log10(p[1]) for p in col) - sum(ys)) / len(ys)
        shift = max(shift, math.log10(col[0][1]) - ys[0] - 0.0)  # never below the lowest
        for p, y in zip(col, ys):
            x_text = max(q[0] for q in col) + 0.25
            ax.annotate(p[2], (p[0], p[1]), xytext=(x_text, 10 ** (y + shift)),
                        textcoords="data", fontsize=7, color=p[3], va="center", ha="left",
                        arrowprops=dict(arrowstyle="-", color=p[3], lw=0.5, alpha=0.6,
                                        shrinkA=0, shrinkB=4))


def _headline_label(r, weights, scheme, mode) -> str:
    rows = unit_rows(r, weights=weights, scheme=scheme, mode=mode)
    return f"{_headline(r, rows):g} B/param"


# -- figure 10 -----------------------------------------------------------------------------------

SGDM_CAPTION = """
AdamW against SGD with momentum under ECO, and how far the optimizer state can shrink. The MLP
of figure 7 (width 32, FP8 E4M3 row-wise weights, 1500 steps, warmup + cosine; AdamW peak lr
3e-3; SGDM peak lr 0.1 with beta = 0.9, chosen so that both reach about the same
full-precision loss), 8 seeds, bars min-max. (a) Final validation loss of each method with
float32 states; numbers: bytes per parameter in the paper's accounting. With either optimizer
ECO+SR is close to master weights and better than naive+SR; SGDM keeps one moment, so ECO needs
5 bytes per parameter with SGDM against 9 with AdamW. (b) ECO+SR with its moments stored in
fewer bits: final loss against the measured static bytes per parameter, the best state format
at each memory level joined by a line; colours: the narrowest moment format. (c) Every state
configuration (labels: storage of m and v, RTN unless marked SR; FP8 formats with one absmax
scale per row; right: measured bytes per parameter). SGDM's momentum survives FP8 E4M3 (2.5
bytes per parameter) and so does AdamW's first moment, but AdamW's second moment breaks in FP8
E4M3: its entries span the square of the gradients' range, the small ones flush to zero, and
m / (sqrt(v) + eps) with eps = 1e-9 explodes, on most seeds at the first update; in FP8 E5M2,
whose range is wider, it trains (3.7 bytes per parameter).
"""


@figure("adam_vs_sgdm", experiments=["mlp_states"], caption=SGDM_CAPTION)
def adam_vs_sgdm(mlp_states):
    """Figure 10 from the ``mlp_states`` experiment."""
    s = mlp_states
    cfg = s.config
    floor = irreducible_loss(cfg)
    groups = _state_groups(s)
    parsed = {v: parse_variant(v) for v, _ in groups}
    fig = style.new_figure(14.0, 5.2)
    ax_a, ax_b, ax_c = fig.subplots(1, 3, width_ratios=[1.0, 1.15, 1.05])

    summary = {k: [] for k in ("variant", "optimizer", "scheme", "mode", "m", "v",
                               "bytes_per_param", "formula_per_param", "headline_per_param",
                               *(f"bytes_{b}" for b in MEMORY_BUFFERS), "mean", "std", "min",
                               "max", "n_diverged", "seeds", "mean_stopped_at")}
    stats = {}
    for v, rows in groups:
        opt, scheme, mode, states = parsed[v]
        stt = summarise(s, rows)
        stats[v] = stt
        i = rows[0]
        summary["variant"].append(v)
        summary["optimizer"].append(opt)
        summary["scheme"].append(scheme)
        summary["mode"].append(mode)
        summary["m"].append(states["m"])
        summary["v"].append(states.get("v", "none"))
        summary["bytes_per_param"].append(_per_param(s, i))
        summary["formula_per_param"].append(_per_param(s, i, "mem_formula"))
        summary["headline_per_param"].append(_headline(s, rows))
        for b, val in zip(MEMORY_BUFFERS, s["mem_measured"][i]):
            summary[f"bytes_{b}"].append(float(val) / float(s["n_params"][i]))
        for k in ("mean", "std", "min", "max"):
            summary[k].append(stt[k] if math.isfinite(stt[k]) else 0.0)
        summary["n_diverged"].append(stt["n_diverged"])
        summary["seeds"].append(stt["n"])
        summary["mean_stopped_at"].append(float(s["stopped_at"][rows].mean()))

    def broken(v):
        return stats[v]["n_diverged"] > stats[v]["n"] / 2 or not math.isfinite(stats[v]["mean"])

    # (a) methods x optimizers, FP32 states
    methods = [("fp", "none"), ("master", "sr"), ("naive", "sr"), ("eco", "rtn"), ("eco", "sr")]
    names = {"fp": "FP32", "master": "master", "naive": "naive", "eco": "ECO"}
    xt, xl = [], []
    for j, (scheme, mode) in enumerate(methods):
        for off, opt in ((-0.15, "adamw"), (0.15, "sgdm")):
            v = next((v for v, p in parsed.items() if p[0] == opt and p[1] == scheme
                      and p[2] == mode and all(x == "fp32" for x in p[3].values())), None)
            if v is None or broken(v):
                continue
            st = method_style("fp8", scheme, mode) if scheme != "fp" else method_style(
                "bf16", "fp", "none")
            stt = stats[v]
            ax_a.errorbar([j + off], [stt["mean"]], yerr=[[stt["mean"] - stt["min"]],
                                                          [stt["max"] - stt["mean"]]],
                          color=st["color"], marker="o" if opt == "adamw" else "s",
                          mfc=st["color"] if opt == "adamw" else "white", mew=1.5, ms=7,
                          capsize=2, elinewidth=0.9, ls="none")
            rows = unit_rows(s, variant=v)
            ax_a.annotate(f"{_headline(s, rows):g}", (j + off, stt["max"]), xytext=(0, 3),
                          textcoords="offset points", ha="center", fontsize=7,
                          color=style.COLORS["grey"])
        xt.append(j)
        xl.append(names[scheme] + ("" if scheme == "fp" else f"+{mode.upper()}"))
    ax_a.set_xticks(xt)
    ax_a.set_xticklabels(xl, fontsize=8)
    ax_a.set_xlim(-0.5, len(methods) - 0.5)
    ax_a.grid(axis="x", visible=False)
    ax_a.set_ylabel("final validation loss")
    ax_a.legend(handles=[Line2D([], [], color="k", marker="o", ls="none", label="AdamW"),
                         Line2D([], [], color="k", marker="s", mfc="white", ls="none",
                                label="SGDM"),
                         Line2D([], [], color=style.COLORS["grey"], ls="none",
                                marker="$9$", label="bytes/param (paper's accounting)")],
                loc="upper left", fontsize=7.5)
    style.panel_title(ax_a, "a", "Methods, FP32 states")

    # (b) ECO+SR with low-precision states: bytes/param vs loss, the best state format per
    # memory level joined by a line; configurations that break as crosses on the top band
    eco = [v for v, p in parsed.items() if p[1] == "eco" and p[2] == "sr"]
    ok_vals = [stats[v]["min"] for v in eco if not broken(v)]
    ok_max = [stats[v]["max"] for v in eco if not broken(v)]
    best, broken_x = {}, {}
    for opt in ("adamw", "sgdm"):
        level = {}
        for v in (v for v in eco if parsed[v][0] == opt):
            x = round(_per_param(s, unit_rows(s, variant=v)[0]), 6)
            if broken(v):
                broken_x.setdefault(opt, set()).add(x)
            else:
                level.setdefault(x, []).append(v)
        best[opt] = [(x, min(vs, key=lambda v: stats[v]["mean"]))
                     for x, vs in sorted(level.items(), reverse=True)]
    shown = [v for opt in best for _, v in best[opt]]
    y0 = min([stats[v]["min"] for v in shown] + [math.inf]) - 0.004
    y1 = max([stats[v]["max"] for v in shown] + [-math.inf]) + 0.004
    top = y1 + 0.25 * (y1 - y0)
    for opt, marker in (("adamw", "o"), ("sgdm", "s")):
        for x in sorted(broken_x.get(opt, ())):
            ax_b.plot([x], [top], marker="x", color="k", ms=8, mew=2, ls="none")
        for k, (x, v) in enumerate(best[opt]):
            stt = stats[v]
            col = _state_color(parsed[v][3])
            mfc = col if opt == "adamw" else "white"
            ax_b.errorbar([x], [stt["mean"]], yerr=[[stt["mean"] - stt["min"]],
                                                    [stt["max"] - stt["mean"]]],
                          marker=marker, color=col, mfc=mfc, mew=1.5, ms=7, capsize=2,
                          elinewidth=0.9, ls="none", zorder=3)
        if best[opt]:
            ax_b.plot([x for x, _ in best[opt]], [stats[v]["mean"] for _, v in best[opt]],
                      color=style.COLORS["grey"], lw=1.0, zorder=0,
                      ls="-" if opt == "adamw" else "--")
    top_band = 0.06 * (top - y0)
    if broken_x:
        ax_b.axhspan(top - top_band, top + top_band, color="k", alpha=0.05, lw=0)
        ax_b.annotate("diverged: AdamW with v in FP8 E4M3", (0.99, top),
                      xycoords=("axes fraction", "data"), xytext=(0, -1.2 * 7.5),
                      textcoords="offset points", ha="right", va="top", fontsize=7.5)
    ax_b.set_ylim(y0 - 0.03 * (top - y0), top + 1.5 * top_band)
    ax_b.invert_xaxis()
    ax_b.set_xlabel("static bytes per parameter (measured), fewer to the right")
    ax_b.set_ylabel("final validation loss")
    colours = [(style.METHOD_COLORS["eco"], "FP32 states"), (style.COLORS["sky"], "BF16 states"),
               (style.COLORS["purple"], "m in FP8 E4M3 (v BF16)"),
               (style.COLORS["orange"], "m E4M3, v in FP8 E5M2")]
    ax_b.legend(handles=[Line2D([], [], color="k", marker="o", ls="-", lw=1.0,
                                label="AdamW ECO+SR (m, v)"),
                         Line2D([], [], color="k", marker="s", mfc="white", ls="--", lw=1.0,
                                label="SGDM ECO+SR (m)")]
                + [Line2D([], [], color=c, marker="o", ls="none", label=t) for c, t in colours],
                loc="upper left", fontsize=7.3, ncol=1, framealpha=0.9)
    style.panel_title(ax_b, "b", "ECO+SR: memory against loss")

    # (c) every state configuration, one row each
    order = sorted(eco, key=lambda v: (parsed[v][0] != "adamw", -summary["bytes_per_param"][
        summary["variant"].index(v)], stats[v]["n_diverged"], v))
    ys = np.arange(len(order))[::-1]
    xmax = max(ok_max) + 0.012 if ok_max else 1.0
    xmin = min(ok_vals) - 0.004 if ok_vals else 0.0
    ylabels = []
    for y, v in zip(ys, order):
        opt, _, _, states = parsed[v]
        stt = stats[v]
        col = _state_color(states)
        per = summary["bytes_per_param"][summary["variant"].index(v)]
        ylabels.append(f"{'AdamW' if opt == 'adamw' else 'SGDM'}: {_states_text(states)}")
        if broken(v):
            stop = float(np.median(s["stopped_at"][unit_rows(s, variant=v)]))
            ax_c.annotate(f"diverged ({stt['n_diverged']}/{stt['n']}), median update "
                          f"{stop:g}", (xmin, y), xytext=(3, 0), textcoords="offset points",
                          va="center", fontsize=7.2, color="k")
        else:
            ax_c.errorbar([stt["mean"]], [y], xerr=[[stt["mean"] - stt["min"]],
                                                    [stt["max"] - stt["mean"]]],
                          marker="o" if opt == "adamw" else "s", color=col,
                          mfc=col if opt == "adamw" else "white", mew=1.5, ms=6, capsize=2,
                          elinewidth=0.9, ls="none")
        ax_c.annotate(f"{per:.2f}", (1.0, y), xycoords=("axes fraction", "data"),
                      xytext=(4, 0), textcoords="offset points", va="center", fontsize=7.2,
                      color=style.COLORS["grey"])
    ax_c.annotate("B/param", (1.0, ys[0] + 0.9), xycoords=("axes fraction", "data"),
                  xytext=(2, 0), textcoords="offset points", va="center", fontsize=7.2,
                  color=style.COLORS["grey"])
    split = sum(parsed[v][0] == "adamw" for v in order)
    if 0 < split < len(order):
        ax_c.axhline(ys[split - 1] - 0.5, color=style.COLORS["grey"], lw=0.8)
    ax_c.set_yticks(ys)
    ax_c.set_yticklabels(ylabels, fontsize=7.4)
    ax_c.set_ylim(-0.7, len(order) - 0.3)
    ax_c.set_xlim(xmin, xmax)
    ax_c.grid(axis="y", visible=False)
    ax_c.set_xlabel("final validation loss (mean, min-max over seeds)")
    style.panel_title(ax_c, "c", "ECO+SR, every state format")
    tables = {"summary": {k: np.array(v) for k, v in summary.items()}}
    return fig, tables


_STATE_SHORT = {"fp32": "FP32", "bf16_rtn": "BF16", "bf16_sr": "BF16 SR", "e4m3_rtn": "E4M3",
                "e4m3_sr": "E4M3 SR", "e5m2_rtn": "E5M2", "e5m2_sr": "E5M2 SR"}


def _states_text(states: dict) -> str:
    return ", ".join(f"{k} {_STATE_SHORT[v]}" for k, v in states.items())


def _state_color(states: dict) -> str:
    """Colour by the narrowest moment format: FP32 green (ECO's colour), BF16 sky blue, FP8
    E4M3 first moment purple, FP8 E5M2 second moment orange, FP8 E4M3 second moment black (the
    configurations that break)."""
    fmts = list(states.values())
    if states.get("v", "").startswith("e4m3"):
        return style.COLORS["black"]
    if any(f.startswith("e5m2") for f in fmts):
        return style.COLORS["orange"]
    if any(f.startswith("e4m3") for f in fmts):
        return style.COLORS["purple"]
    if any(f.startswith("bf16") for f in fmts):
        return style.COLORS["sky"]
    return style.METHOD_COLORS["eco"]
