"""Figure ``relative_error``: the relative-error model checked on real grids."""
from __future__ import annotations

import matplotlib
import numpy as np

from . import style
from .base import figure

__all__ = ["relative_error"]

CAPTION = """
The relative-error model |Q(x) - x| <= 2^-M |x| of the third reference, checked on the grids
(x log-uniform over the subnormals, every normal binade and beyond max, float64, random signs;
errors in units of 2^-M). (a) The largest error per binade against the binade's distance from
the smallest normal 2^emin: in the normal range round-to-nearest (solid) stays at or below 1/2
(half a step) and stochastic rounding (dashed) below 1 (one step), for every format; one binade
below, where the step stops shrinking, both exceed it, and the error grows to 1 (flush to
zero). (b) The same near the top, against the distance from max: saturation breaks the bound
as soon as x passes max. (c) Distribution of the error over the normal range: RTN spreads over
[0, 1/2], SR over [0, 1).
"""

_LABELS = {"bfloat16": "BF16", "float16": "FP16", "float8_e4m3fn": "FP8 E4M3",
           "float8_e5m2": "FP8 E5M2"}


def _name(f: str) -> str:
    return _LABELS.get(f, f)


@figure("relative_error", experiments=["relative_error"], caption=CAPTION)
def relative_error(relative_error):
    r = relative_error
    names = [str(f) for f in r["format"]]
    fig = style.new_figure(12.0, 4.2)
    ax_lo, ax_hi, ax_h = fig.subplots(1, 3, width_ratios=[1.2, 0.9, 1.0])
    named = {"bfloat16": style.COLORS["grey"], "float16": style.COLORS["purple"],
             "float8_e4m3fn": style.COLORS["red"], "float8_e5m2": style.COLORS["orange"]}
    cmap = matplotlib.colormaps["viridis"]
    for i, f in enumerate(names):
        # custom(8, M): a shade per width (dark: many bits); named formats: their own colour
        c = named.get(f, cmap(0.85 * (1 - float(r["mantissa"][i]) / 23)))
        sel = r["binade_format"] == i
        b = r["binade"][sel]
        emin = int(np.round(np.log2(r["smallest_normal"][i])))
        emax = int(np.floor(np.log2(r["max"][i])))
        for mode, ls in (("rtn", "-"), ("sr", "--")):
            v = r[f"{mode}_binade_max"][sel]
            ok = np.isfinite(v)
            ax_lo.plot(b[ok] - emin, v[ok], ls, color=c, linewidth=1.1,
                       label=_name(f) if mode == "rtn" else None)
            ax_hi.plot(b[ok] - emax, v[ok], ls, color=c, linewidth=1.1)
    for ax in (ax_lo, ax_hi):
        ax.axhline(0.5, color="black", linewidth=0.7, linestyle=":")
        ax.axhline(1.0, color="black", linewidth=0.7, linestyle=":")
        ax.axvline(0, color=style.COLORS["grey"], linewidth=0.8)
        ax.set_yscale("log")
        ax.set_ylabel("max |Q(x)-x| / |x|  in units of 2$^{-M}$")
    ax_lo.set_ylim(0.2, 2.0**13)
    ax_hi.set_ylim(0.2, 2.0**25)
    ax_lo.set_xlim(-10.5, 6.5)
    ax_lo.set_xlabel("binade of |x| minus emin (0: the smallest normal binade)")
    ax_hi.set_xlim(-4.5, 3.5)
    ax_hi.set_xlabel("binade of |x| minus emax (0: the binade of max)")
    ax_lo.legend(loc="upper right", fontsize=7, ncol=2, title="solid RTN, dashed SR",
                 title_fontsize=7)
    style.panel_title(ax_lo, "a", "Below the normal range")
    style.panel_title(ax_hi, "b", "Above max (saturation)")
    edges = r["hist_edges"]
    width = edges[1] - edges[0]
    for mode, color in (("rtn", style.ROUNDING_COLORS["rtn"]), ("sr", style.ROUNDING_COLORS["sr"])):
        h = r[f"{mode}_hist"].sum(axis=0).astype(np.float64)
        dens = h / (h.sum() * width)
        ax_h.stairs(dens, edges, color=color, fill=True, alpha=0.25)
        ax_h.stairs(dens, edges, color=color, linewidth=1.3,
                    label=f"{mode.upper()}: max {float(np.max(r[f'{mode}_max_normal'])):.3f}")
    ax_h.axvline(0.5, color="black", linewidth=0.7, linestyle=":")
    ax_h.set_xlabel("|Q(x)-x| / |x| in units of 2$^{-M}$ (all formats)")
    ax_h.set_ylabel("density")
    ax_h.legend(loc="upper right", fontsize=7.5)
    style.panel_title(ax_h, "c", "Normal range: the bound holds")
    summary = {"format": np.array(names), "M": r["mantissa"]}
    for mode in ("rtn", "sr"):
        summary[f"{mode}_max_normal"] = r[f"{mode}_max_normal"]
        for region in ("subnormal", "normal", "overflow"):
            summary[f"{mode}_violate_{region}"] = r[f"{mode}_violate_{region}"]
    binades = {"format": np.array(names)[r["binade_format"]], "binade": r["binade"],
               "rtn_max": r["rtn_binade_max"], "sr_max": r["sr_binade_max"]}
    ok = np.isfinite(binades["rtn_max"]) & np.isfinite(binades["sr_max"])
    binades = {k: np.asarray(v)[ok] for k, v in binades.items()}
    return fig, {"summary": summary, "binades": binades}
