"""Figure ``lm_eco_adam``: what each of ECO's approximations for AdamW costs on the LM.

Reads the ``lm_eco_adam`` experiment (ECO's variants, :mod:`ecosim.experiments.lm_eco_adam`)
with the ``lm`` experiment's ``fp8_master_*`` and ``fp8_eco_*`` runs of the same protocol, and
the MLP's gaps from ``eco_adam_breakdown`` beside them. Outcomes and paired gaps come from
:mod:`ecosim.claims` (:func:`~ecosim.claims.lm_cells`: stalled and diverged runs counted,
never averaged); this module draws.
"""
from __future__ import annotations

import numpy as np
from matplotlib.lines import Line2D

from .. import recipes
from ..claims import lm_cells, runs_of_seeds
from ..claims.eco_adam import paired_gaps
from ..claims.lm_switches import check_comparable
from ..claims.stats import LEVEL, counts_text, interval_text
from ..experiments.lm import combine_runs
from . import style
from .base import figure
from .lm import columns

__all__ = ["lm_eco_adam", "merged_runs", "eco_adam_rows", "eco_adam_markdown"]

CAPTION = """
What each of ECO's approximations for AdamW costs on the language model (the lm protocol:
preset micro, 650 steps, 20.2 training tokens per non-embedding parameter, FP8 E4M3 weights
with one absmax scale per row, 3 seeds paired by seed). Each variant removes or corrects one
approximation of ECO's memory-free injection: momentum-exact stores the last rounding error
(4 bytes per weight) and gives it back through the momentum with the current d, so that only
ECO's e_prev ~ e substitution is gone; wd-corrected multiplies the injection by 1 - lr wd;
guarded sizes it with the b1-weighted mean of the later learning rates (the recipe's warmup
makes that up to ~11 times the first step's rate). (a) Final validation loss minus FP8 with
master weights' of the same rounding, (b) minus plain ECO's, paired by seed (dot: mean;
whiskers: 95% t-interval; open diamond: the same gap on the MLP, eco_adam_breakdown, where it
was measured). By default make figures runs every variant with RTN and the momentum-exact rule
with SR too (12 runs; docs/benchmarks/lm.md gives their cost): RTN is where ECO's gap to master
is largest on this protocol, and the exact rule with SR says whether removing e_prev ~ e moves
ECO+SR; the other two run with --set lm_eco_adam.methods=... The numbers are in lm_eco_adam.md.
"""

#: the MLP scheme (eco_adam_breakdown's approx part) of each LM variant; None: not measured
_MLP_SCHEME = {"ecomx": "eco_momentum_exact", "ecowd": "eco_wd", "ecoguard": None,
               "eco": "eco"}
_REMAKE = "run lm and lm_eco_adam with the same protocol (the same --set values)"
_NONE = {"n": 0, "mean": np.nan, "lo": np.nan, "hi": np.nan}
_COLORS = {"eco": style.METHOD_COLORS["eco"],
           **{v: c for v, (c, _) in style.ECO_ADAM_STYLES.items()}}


def _split(method: str) -> tuple[str, str]:
    """``fp8_ecomx_sr -> ("ecomx", "sr")``."""
    _, variant, mode = method.split("_")
    return variant, mode


def _rows(columns: dict, keep: np.ndarray) -> dict:
    return {k: np.asarray(v)[keep] for k, v in columns.items()}


def merged_runs(lm: dict, variants: dict) -> dict:
    """The variants' result columns (``lm_eco_adam``) and the ``lm`` runs they are paired
    with (FP8 master and ECO, both roundings, of the variants' seeds only: ``lm`` runs 5
    seeds, the variants 3, and a gap over five beside gaps over three would differ by the
    seeds as much as by the method), as one set of columns.

    Raises:
        ValueError: a variant's run is not the protocol of the ``lm`` runs of its preset
            (:func:`ecosim.claims.lm_switches.check_comparable`; the message names the run
            and the field that differs): paired by seed they would give no pair at all.
    """
    lm = runs_of_seeds({k: lm[k] for k in variants}, variants)
    keep = np.isin(np.asarray(lm["method"]).astype(str),
                   [f"fp8_{s}_{m}" for s in ("master", "eco") for m in ("rtn", "sr")])
    sub = _rows(lm, keep)
    for preset in dict.fromkeys(np.asarray(variants["preset"]).astype(str)):
        check_comparable(_rows(sub, np.asarray(sub["preset"]).astype(str) == preset),
                         _rows(variants, np.asarray(variants["preset"]).astype(str) == preset),
                         switched=False, remedy=_REMAKE)
    return combine_runs(None, [], [sub, dict(variants)])


def _mlp_gaps(mlp) -> dict:
    """``{(variant, mode): gap to master}`` on the MLP (eco_adam_breakdown's approx part)."""
    cfg = mlp.config
    if "master" not in cfg.approx_schemes:
        return {}
    return {(v, mode): paired_gaps(mlp, s, mode) for v, s in _MLP_SCHEME.items()
            if s is not None and s in cfg.approx_schemes for mode in cfg.approx_modes}


def eco_adam_rows(r, mlp_gaps: dict | None = None) -> list[dict]:
    """One row per (column, variant or plain ECO, rounding) of :func:`merged_runs`'s columns:
    outcomes (judged against FP8 master of the same rounding), the paired gap to FP8 master
    and to plain FP8 ECO (:func:`ecosim.claims.lm_cells`), and ``mlp_gaps``' entry."""
    cols, col = columns(r)
    methods = sorted({str(m) for m in r["method"]} - {f"fp8_master_{m}" for m in ("rtn", "sr")},
                     key=lambda m: (_split(m)[1], list(_COLORS).index(_split(m)[0])))
    out = []
    for mode in ("rtn", "sr"):
        to_master = lm_cells(r, col, f"fp8_master_{mode}")
        to_eco = lm_cells(r, col, f"fp8_eco_{mode}")
        for m in (m for m in methods if _split(m)[1] == mode):
            variant = _split(m)[0]
            mg = (mlp_gaps or {}).get((variant, mode), _NONE)
            for c, cc in enumerate(cols):
                cell = to_master.get((c, m))
                if cell is None:
                    continue
                eco_cell = to_eco.get((c, m))
                out.append({"column": cc["label"], "method": m, "variant": variant,
                            "mode": mode, "outcomes": cell["outcomes"], "master": cell["gap"],
                            "eco": eco_cell["gap"] if variant != "eco" else None,
                            "mlp": mg})
    return out


def eco_adam_markdown(rows: list[dict]) -> str:
    """The gaps as a markdown table (one row per variant and rounding)."""
    lines = ["| method | outcomes | gap to FP8 master (same rounding) | gap to FP8 ECO | "
             "MLP gap to master (eco_adam_breakdown) |", "|---|---|---|---|---|"]
    for row in rows:
        mlp = interval_text(row["mlp"]) if row["mlp"]["n"] else "-"
        eco = interval_text(row["eco"]) if row["eco"] is not None else "(itself)"
        label = recipes.LM_METHODS[row["method"]].label
        lines.append(f"| {label} | {counts_text(row['outcomes'])} | "
                     f"{interval_text(row['master'])} | {eco} | {mlp} |")
    lines += ["", f"Gaps: final validation loss (nats per byte) minus the other method's, per "
              f"seed (same init, data order and SR keys), mean and {LEVEL:.0%} t-interval over "
              "the seeds where both trained; stalled or diverged runs are counted, never "
              "averaged. MLP: FP8 E4M3 per row, weight decay 0.1 (the eco_adam_breakdown "
              "experiment; its wd-corrected rule is named eco_wd there; no guard was run)."]
    return "\n".join(lines)


@figure("lm_eco_adam", experiments=["lm", "lm_eco_adam", "eco_adam_breakdown"],
        caption=CAPTION)
def lm_eco_adam(lm, lm_eco_adam, eco_adam_breakdown):
    """ECO's variants' paired gaps to FP8 master and to plain ECO, LM and MLP."""
    rows = eco_adam_rows(merged_runs(lm.results, lm_eco_adam.results),
                         _mlp_gaps(eco_adam_breakdown))
    fig = style.new_figure(10.0, 4.0)
    axes = fig.subplots(1, 2)
    table = {k: [] for k in ("column", "method", "mode", "trained", "stalled", "diverged",
                             "n_master", "to_master", "to_master_lo", "to_master_hi", "n_eco",
                             "to_eco", "to_eco_lo", "to_eco_hi", "mlp_to_master",
                             "mlp_lo", "mlp_hi")}
    none = _NONE
    for x, row in enumerate(rows):
        st = {"color": _COLORS[row["variant"]], "marker": "o" if row["mode"] == "sr" else "s"}
        for ax, gap, mlp in ((axes[0], row["master"], row["mlp"]),
                             (axes[1], row["eco"] or none, none)):
            if np.isfinite(gap["mean"]):
                err = ([[gap["mean"] - gap["lo"]], [gap["hi"] - gap["mean"]]]
                       if np.isfinite(gap["lo"]) else None)
                ax.errorbar(x, gap["mean"], yerr=err, capsize=3, ls="none", **st)
            if np.isfinite(mlp["mean"]):
                ax.plot(x + 0.25, mlp["mean"], "D", mfc="none", color=st["color"])
        table["column"].append(row["column"])
        table["method"].append(row["method"])
        table["mode"].append(row["mode"])
        for k in ("trained", "stalled", "diverged"):
            table[k].append(row["outcomes"][k])
        for key, gap in (("master", row["master"]), ("eco", row["eco"] or none)):
            table[f"n_{key}"].append(gap["n"])
            table[f"to_{key}"].append(gap["mean"])
            table[f"to_{key}_lo"].append(gap["lo"])
            table[f"to_{key}_hi"].append(gap["hi"])
        table["mlp_to_master"].append(row["mlp"]["mean"])
        table["mlp_lo"].append(row["mlp"]["lo"])
        table["mlp_hi"].append(row["mlp"]["hi"])
    grey = style.COLORS["grey"]
    axes[0].legend(handles=[Line2D([], [], color=grey, marker="s", ls="none", label="LM, RTN"),
                            Line2D([], [], color=grey, marker="o", ls="none", label="LM, SR"),
                            Line2D([], [], color=grey, marker="D", mfc="none", ls="none",
                                   label="MLP (eco_adam_breakdown)")], fontsize=7)
    labels = [recipes.LM_METHODS[row["method"]].label.replace("FP8 ", "") for row in rows]
    for ax, (panel, title) in zip(axes, (("a", "Gap to FP8 master (same rounding)"),
                                         ("b", "Gap to plain FP8 ECO"))):
        ax.axhline(0, color="k", lw=0.8)
        ax.set_xticks(range(len(rows)), labels, rotation=35, ha="right", fontsize=7)
        ax.set_ylabel("final val loss difference (nats/byte)")
        style.panel_title(ax, panel, title)
    return fig, {"gaps": {k: np.array(v) for k, v in table.items()}}, eco_adam_markdown(rows)
