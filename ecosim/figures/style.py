"""The one plotting style of ecosim's figures: rcParams, colours, display names, sizes.

Figures are plain :class:`matplotlib.figure.Figure` objects rendered by the Agg (PNG) and PDF
backends; nothing here touches pyplot or the global backend, so importing it from a notebook
changes nothing. :func:`context` applies the style for the duration of a build.
"""
from __future__ import annotations

import contextlib

import matplotlib
from matplotlib.figure import Figure

__all__ = ["COLORS", "FORMAT_COLORS", "METHOD_COLORS", "MODE_LINESTYLES", "ECO_ADAM_STYLES", "RC", "DPI",
           "SMOKE_DPI", "context", "new_figure", "format_label", "panel_title"]

# Okabe & Ito's colour-blind-safe palette
COLORS = {
    "black": "#000000", "orange": "#E69F00", "sky": "#56B4E9", "green": "#009E73",
    "yellow": "#F0E442", "blue": "#0072B2", "red": "#D55E00", "purple": "#CC79A7",
    "grey": "#7F7F7F",
}

FORMAT_COLORS = {
    "float8_e4m3fn": COLORS["blue"],
    "float8_e5m2": COLORS["sky"],
    "float4_e2m1fn": COLORS["green"],
    "int4": COLORS["orange"],
    "ternary": COLORS["purple"],
    "bfloat16": COLORS["grey"],
}

# schemes of docs/theory.md §4; later figures use these so that a method has one colour
METHOD_COLORS = {
    "fp": COLORS["black"],
    "master": COLORS["blue"],
    "naive": COLORS["red"],
    "eco": COLORS["green"],
    "eco_exact": COLORS["sky"],
    "kahan": COLORS["purple"],
    "dqt": COLORS["orange"],  # DQT's stored-code training (the language-model figures)
    "bitnet": COLORS["purple"],  # BitNet b1.58 (FP32 master, ternary forward)
    "eco_adam": COLORS["green"],  # ECO's variants for AdamW (the LM runner's fp8_eco*_*)
}
MODE_LINESTYLES = {"sr": "-", "rtn": "--"}
#: ECO's variants for AdamW (the LM runner's fp8_<variant>_<mode>): colour and marker each
ECO_ADAM_STYLES = {"ecomx": (COLORS["sky"], "P"), "ecowd": (COLORS["orange"], "p"),
                   "ecoguard": (COLORS["purple"], "*")}
ROUNDING_COLORS = {"rtn": COLORS["orange"], "sr": COLORS["blue"]}

_FORMAT_LABELS = {
    "float8_e4m3fn": "FP8 E4M3",
    "float8_e5m2": "FP8 E5M2",
    "float4_e2m1fn": "FP4 E2M1",
    "float6_e2m3fn": "FP6 E2M3",
    "float6_e3m2fn": "FP6 E3M2",
    "bfloat16": "BF16",
    "float16": "FP16",
    "int8": "INT8",
    "int4": "INT4",
    "int2": "INT2",
    "ternary": "ternary",
}

DPI = 150        # PNGs of the full build (the README gallery)
SMOKE_DPI = 60   # --smoke: same figure, cheaper raster

RC = {
    "font.family": "DejaVu Sans",  # shipped with matplotlib: the same glyphs everywhere
    "font.size": 9.5,
    "axes.titlesize": 10.5,
    "axes.titleweight": "bold",
    "axes.titlelocation": "left",
    "axes.labelsize": 9.5,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": "#DDDDDD",
    "grid.linewidth": 0.6,
    "axes.axisbelow": True,
    "legend.fontsize": 8.5,
    "legend.frameon": False,
    "lines.linewidth": 1.6,
    "lines.markersize": 5,
    "xtick.labelsize": 8.5,
    "ytick.labelsize": 8.5,
    "figure.facecolor": "white",
    "savefig.facecolor": "white",
    "pdf.fonttype": 42,      # TrueType in PDFs: editable text
    "pdf.compression": 6,
    "svg.hashsalt": "ecosim",
    "axes.prop_cycle": matplotlib.cycler(color=[COLORS[c] for c in (
        "blue", "orange", "green", "red", "purple", "sky", "yellow", "black")]),
}


def context():
    """A context manager applying :data:`RC` (and resetting everything else to defaults)."""
    stack = contextlib.ExitStack()
    stack.enter_context(matplotlib.rc_context())
    matplotlib.rcdefaults()
    stack.enter_context(matplotlib.rc_context(RC))
    return stack


def new_figure(width: float = 7.0, height: float = 4.5) -> Figure:
    """A constrained-layout figure (inches), not attached to pyplot."""
    return Figure(figsize=(width, height), layout="constrained")


def panel_grid(fig: Figure, rows: list, cols: list):
    """The panels of a ``len(rows)`` x ``len(cols)`` grid of ``fig``, row by row, as
    ``(i, row, j, col, ax, letter)``, lettered a, b, c, ... in that order."""
    axes = fig.subplots(len(rows), len(cols), squeeze=False)
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    for i, row in enumerate(rows):
        for j, col in enumerate(cols):
            yield i, row, j, col, axes[i][j], next(letters)


def format_label(name: str) -> str:
    """Display name of a format (``float8_e4m3fn`` -> ``FP8 E4M3``)."""
    return _FORMAT_LABELS.get(name, name)


def panel_title(ax, letter: str, text: str) -> None:
    """``(a) text`` as the axes title, left-aligned."""
    ax.set_title(f"({letter}) {text}")
