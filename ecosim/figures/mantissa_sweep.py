"""Figure ``mantissa_sweep``: which buffer breaks first as its mantissa shrinks."""
from __future__ import annotations

import numpy as np
from matplotlib.colors import BoundaryNorm, ListedColormap
from matplotlib.patches import Patch

from . import style
from .base import figure

__all__ = ["mantissa_sweep", "style_column"]


def style_column(col):
    """A table column; a float column with non-finite values (diverged runs) becomes text,
    ``"diverged"`` in their place, so every number in the CSV is finite."""
    col = np.asarray(col)
    if col.dtype.kind != "f" or np.isfinite(col).all():
        return col
    return np.array([repr(float(v)) if np.isfinite(v) else "diverged" for v in col])

CAPTION = """
Mantissa sweeps per buffer (the third reference's relative-error model, realised on real
grids): each cell is one training run in which one buffer is rounded to nearest onto
custom(8, M), float32's exponent range with M mantissa bits (a plain cast), for AdamW and
Muon on the chained Rosenbrock function (16-d; Muon sees a 4x4 matrix) and on a
teacher-student MLP (validation loss, mean of the seeds). Rows: the stored weights without a
master copy (naive), the same with ECO's injection (Muon: the experimental memory-free
variant), the gradient, the first moment m, the second moment v (Muon: only its AdamW
biases), and all of them at once. The number is the final loss over the unquantized run's
(on Rosenbrock both floored at 1e-5, which counts as solved; its optimum, all ones, lies on
every grid, so a coarse weight grid can also land on it exactly); colour: fine (within 20%),
degraded, failed (diverged, or less than half of the reference's progress in log-loss).
Reading across a row gives the width at which that buffer breaks. On the float32 MLP, M = 23
is the identity and its column is the FP32 run itself.
"""

_CLASS_COLORS = ["#E8F4EA", "#F6D8A8", "#E38B6F"]  # fine, degraded, failed
_COMPONENT_LABELS = {"weights": "weights (naive)", "weights_eco": "weights (ECO)",
                     "g": "gradient g", "m": "1st moment m", "v": "2nd moment v",
                     "all": "all buffers"}
_PROBLEM_LABELS = {"rosenbrock": "Rosenbrock", "mlp": "MLP"}
_OPT_LABELS = {"adamw": "AdamW", "muon": "Muon"}


def _cell_text(ratio: float, cls: str) -> str:
    if not np.isfinite(ratio):
        return "div"
    if ratio >= 100:
        return f"{ratio:.0e}".replace("e+0", "e")
    return f"{ratio:.2g}" if ratio < 10 else f"{ratio:.0f}"


@figure("mantissa_sweep", experiments=["mantissa_sweep"], caption=CAPTION)
def mantissa_sweep(mantissa_sweep):
    r = mantissa_sweep
    ms = [int(m) for m in r["mantissas"]]
    problems = list(dict.fromkeys(str(p) for p in r["problem"]))
    optimizers = list(dict.fromkeys(str(o) for o in r["optimizer"]))
    components = list(dict.fromkeys(str(c) for c in r["component"]))
    classes = ["fine", "degraded", "failed"]
    cmap = ListedColormap(_CLASS_COLORS)
    norm = BoundaryNorm([-0.5, 0.5, 1.5, 2.5], cmap.N)

    fig = style.new_figure(3.9 * len(optimizers) + 0.7, 2.4 * len(problems) + 0.7)
    for _, p, j, o, ax, letter in style.panel_grid(fig, problems, optimizers):
        comps = components  # the same rows in every panel; blank where n/a
        grid = np.full((len(comps), len(ms)), np.nan)
        for a, c in enumerate(comps):
            for b, m in enumerate(ms):
                k = np.flatnonzero((r["problem"] == p) & (r["optimizer"] == o)
                                   & (r["component"] == c) & (r["mantissa"] == m))
                if k.size:
                    grid[a, b] = classes.index(str(r["cls"][k[0]]))
                    ax.text(b, a, _cell_text(float(r["ratio"][k[0]]), str(r["cls"][k[0]])),
                            ha="center", va="center", fontsize=7.2)
                elif b == len(ms) // 2:
                    ax.text(b, a, "n/a (no AdamW parameter)", ha="center", va="center",
                            fontsize=7, color=style.COLORS["grey"])
        ax.imshow(grid, cmap=cmap, norm=norm, aspect="auto")
        ax.set_xticks(range(len(ms)))
        ax.set_xticklabels([str(m) for m in ms])
        ax.set_yticks(range(len(comps)))
        ax.set_yticklabels([_COMPONENT_LABELS.get(c, c) for c in comps] if j == 0 else [])
        ax.set_xlabel("mantissa bits M")
        ax.grid(False)
        for side in ("left", "bottom"):
            ax.spines[side].set_visible(False)
        ax.tick_params(length=0)
        ref = float(r["ref_final"][(r["ref_problem"] == p) & (r["ref_optimizer"] == o)][0])
        ax.set_title(f"({letter}) {_OPT_LABELS.get(o, o)}, "
                     f"{_PROBLEM_LABELS.get(p, p)} (FP32: {ref:.2g})", fontsize=9.5)
    handles = [Patch(facecolor=c, edgecolor="#999999", label=lab)
               for c, lab in zip(_CLASS_COLORS, classes)]
    fig.legend(handles=handles, loc="outside lower center", ncol=3, fontsize=8.5)

    tables = {
        "runs": {k: style_column(r[k]) for k in (
            "problem", "optimizer", "component", "mantissa", "final", "final_min", "final_max",
            "reference", "ratio", "cls", "diverged")},
        "summary": {"problem": r["s_problem"], "optimizer": r["s_optimizer"],
                    "component": r["s_component"], "fine_down_to_M": r["s_fine_down_to"],
                    "first_degraded_M": r["s_first_degraded"],
                    "first_failed_M": r["s_first_failed"]},
    }
    return fig, tables
