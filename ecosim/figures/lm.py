"""Figures ``lm_table`` and ``lm_pareto``: Table 1 of the ECO paper on a language model.

Both read the ``lm`` experiment (:mod:`ecosim.experiments.lm`): runs of
``python -m ecosim.torch.lm`` made by ``make figures`` (CPU presets) or read from a results
file (``--set lm.results_file=FILE``). ``lm_table`` also writes its table as markdown
(``lm_table.md``) beside the paper's numbers.
"""
from __future__ import annotations

import math

import numpy as np

from ..experiments.lm import METHODS, method_parts
from . import style
from .base import figure
from .mlp_methods import PAPER_SIZES, PAPER_TABLE1, method_style

__all__ = ["lm_table", "lm_pareto", "lm_markdown", "method_label"]

_LABELS = dict(zip(METHODS, (row[0] for row in PAPER_TABLE1)))


def method_label(method: str) -> str:
    """Table 1's label of a method name (``fp8_eco_sr -> "FP8 ECO + SR"``)."""
    return _LABELS.get(method, "FP32 (no quantization)" if method == "fp32" else method)


def _style(method: str) -> dict:
    w, scheme, mode = method_parts(method)
    if w == "fp32":
        return {"color": style.COLORS["grey"], "ls": ":", "marker": "."}
    return method_style(w, scheme, mode)


def _presets(r) -> list[str]:
    """Presets ordered by size (non-embedding parameters)."""
    sizes = {}
    for p, n in zip(r["preset"], r["n_nonembed"]):
        sizes[str(p)] = int(n)
    return sorted(sizes, key=lambda p: (sizes[p], p))


def _methods(r) -> list[str]:
    present = {str(m) for m in r["method"]}
    order = [m for m in ("fp32", *METHODS) if m in present]
    return order + sorted(present - set(order))


def _cell(r, preset: str, method: str) -> tuple[float, float, int, int]:
    """(mean val loss over finished seeds, std, seeds, diverged seeds)."""
    rows = np.flatnonzero((r["preset"] == preset) & (r["method"] == method))
    v = r["val_loss"][rows][~r["diverged"][rows]]
    n_div = int(r["diverged"][rows].sum())
    if not v.size:
        return math.nan, math.nan, int(rows.size), n_div
    return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else 0.0, int(rows.size), n_div


def _paired_gap(r, preset: str, method: str, base: str = "bf16_master") -> np.ndarray:
    """Per-seed ``loss(method) - loss(base)`` over the seeds where both finished."""
    def by_seed(m):
        rows = np.flatnonzero((r["preset"] == preset) & (r["method"] == m) & ~r["diverged"])
        return {int(r["seed"][i]): float(r["val_loss"][i]) for i in rows}
    a, b = by_seed(method), by_seed(base)
    return np.array([a[k] - b[k] for k in sorted(a) if k in b])


def _fmt_params(n: int) -> str:
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.0f}k"


def lm_markdown(r) -> str:
    """Final validation loss per method and preset (ours), then the paper's Table 1."""
    presets, methods = _presets(r), _methods(r)
    sizes = {str(p): int(n) for p, n in zip(r["preset"], r["n_nonembed"])}
    head = ["method"] + [f"{p} ({_fmt_params(sizes[p])})" for p in presets]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m in methods:
        cells = []
        for p in presets:
            mean, sd, n, n_div = _cell(r, p, m)
            if n == 0:
                cells.append("")
            elif n_div == n:
                cells.append("diverged")
            else:
                c = f"{mean:.4f}"
                if n > 1:
                    c += f" ± {sd:.4f}"
                gap = _paired_gap(r, p, m) if m != "bf16_master" else np.array([])
                if gap.size:
                    c += f" ({gap.mean():+.4f}"
                    if gap.size > 1:
                        c += f" ± {gap.std(ddof=1) / math.sqrt(gap.size):.4f}"
                    c += ")"
                if n_div:
                    c += f", {n_div}/{n} diverged"
                cells.append(c)
        lines.append(f"| {method_label(m)} | " + " | ".join(cells) + " |")
    steps = sorted({int(s) for s in r["steps"]})
    tokens = sorted({int(t) for t in r["tokens"]})
    lines += ["", f"Validation loss (nats per byte) after {', '.join(map(str, steps))} steps "
              f"({', '.join(f'{t / 1e6:.2f}M' for t in tokens)} training tokens); mean ± standard "
              "deviation over seeds; in brackets the gap to BF16 with master weights, paired by "
              "seed (mean ± standard error).", "",
              "The paper's Table 1 (C4, 30M-800M parameters, 100 tokens per parameter):", "",
              "| method | " + " | ".join(PAPER_SIZES) + " |",
              "|" + "---|" * (len(PAPER_SIZES) + 1)]
    for label, vals in PAPER_TABLE1:
        lines.append(f"| {label} | " + " | ".join(
            "n/a" if v is None else (v if isinstance(v, str) else f"{v:.4f}") for v in vals)
            + " |")
    return "\n".join(lines)


TABLE_CAPTION = """
Table 1 of the ECO paper on a byte-level Llama-style decoder (RMSNorm, RoPE, SwiGLU) trained on
the Python standard library's sources with ecosim.torch: FP8 E4M3 weights with one absmax scale
per row in the block-internal linear layers, AdamW (0.9, 0.98), eps 1e-9, weight decay 0.1,
clip 1.0, 10% warmup then cosine to 0.1x. (a) Training loss (mean over the seeds of each
logging window) and validation loss (markers) for the largest preset; (b) each method's final
validation loss minus that of BF16 weights with a master copy, paired by seed (bars: mean;
whiskers: standard error over seeds; hatched: RTN; a cross: diverged). The numbers are in
lm_table.md beside the paper's.
"""


@figure("lm_table", experiments=["lm"], caption=TABLE_CAPTION)
def lm_table(lm):
    r = lm
    presets, methods = _presets(r), _methods(r)
    fig = style.new_figure(11.0, 4.2)
    ax, bx = fig.subplots(1, 2)
    big = presets[-1]
    finals = {k: [] for k in ("preset", "method", "n_nonembed", "val_loss", "std", "seeds",
                              "diverged", "gap", "gap_se")}
    curves = {k: [] for k in ("preset", "method", "seed", "step", "train_loss", "val_loss")}
    top = 0.0
    for m in methods:
        st = _style(m)
        lw = 1.9 if m.endswith("sr") or m.startswith("bf16") else 1.5
        for p in presets:
            mean, sd, n, n_div = _cell(r, p, m)
            if n == 0:
                continue
            gap = _paired_gap(r, p, m) if m != "bf16_master" else np.zeros(0)
            finals["preset"].append(p)
            finals["method"].append(m)
            finals["n_nonembed"].append(int(r["n_nonembed"][np.flatnonzero(r["preset"] == p)[0]]))
            finals["val_loss"].append(mean)
            finals["std"].append(sd)
            finals["seeds"].append(n)
            finals["diverged"].append(n_div)
            finals["gap"].append(float(gap.mean()) if gap.size else math.nan)
            finals["gap_se"].append(float(gap.std(ddof=1) / math.sqrt(gap.size))
                                    if gap.size > 1 else math.nan)
        rows = np.flatnonzero((r["preset"] == big) & (r["method"] == m))
        for i in rows:
            okt = np.isfinite(r["curve_step"][i])
            n = int(okt.sum())
            curves["preset"] += [big] * n
            curves["method"] += [m] * n
            curves["seed"] += [int(r["seed"][i])] * n
            curves["step"].append(r["curve_step"][i][okt].astype(np.int64))
            curves["train_loss"].append(r["curve_train"][i][okt])
            curves["val_loss"].append(r["curve_val"][i][okt])
        if rows.size:  # mean over seeds of the training loss, validation points on top
            step = r["curve_step"][rows[0]]
            ok = np.isfinite(step) & np.all(np.isfinite(r["curve_train"][rows]), axis=0)
            train = r["curve_train"][rows].mean(axis=0)
            ax.plot(step[ok], train[ok], color=st["color"], ls=st["ls"], lw=lw * 0.8)
            val = r["curve_val"][rows].mean(axis=0)
            okv = np.isfinite(step) & np.isfinite(val)
            ax.plot(step[okv], val[okv], color=st["color"], marker=st["marker"], ls="none",
                    ms=5)
            if r["diverged"][rows].any() and ok.any():
                last = np.flatnonzero(ok)[-1]
                ax.plot(step[last], train[last], marker="x", color=st["color"], ms=8, mew=2)
            if ok.any():
                top = max(top, float(train[ok][0]))
    _gap_bars(bx, r, presets, methods, finals)
    fin = np.array([v for v in finals["val_loss"] if math.isfinite(v)])
    ax.set_xlabel("update")
    ax.set_ylabel("loss (nats/byte)")
    if fin.size and top:
        ax.set_ylim(float(fin.min()) * 0.97, min(top, 3 * float(fin.max())) * 1.02)
    nseeds = len({int(x) for x in r["seed"][r["preset"] == big]})
    style.panel_title(ax, "a", f"preset {big!r}: training loss, validation (markers)"
                      + (f", mean of {nseeds} seeds" if nseeds > 1 else ""))
    tables = {"final": {k: np.array(v) for k, v in finals.items()}}
    if curves["step"]:
        tables["curves"] = {k: (np.concatenate(v) if isinstance(v[0], np.ndarray)
                                else np.array(v)) for k, v in curves.items()}
    return fig, tables, lm_markdown(r)


def _gap_bars(bx, r, presets, methods, finals) -> None:
    """Panel (b): each method's final validation loss minus BF16-with-master's, paired by seed
    (bars; standard errors over seeds; a cross at the top where every seed diverged)."""
    others = [m for m in methods if m != "bf16_master"]
    width = 0.8 / max(len(others), 1)
    gaps = [g for g in finals["gap"] if math.isfinite(g)]
    top = max([0.0] + gaps) * 1.15 + 0.005
    for j, m in enumerate(others):
        st = _style(m)
        for k, p in enumerate(presets):
            i = next((i for i, (pp, mm) in enumerate(zip(finals["preset"], finals["method"]))
                      if pp == p and mm == m), None)
            if i is None:
                continue
            x = k + (j - (len(others) - 1) / 2) * width
            if finals["diverged"][i] == finals["seeds"][i]:
                bx.plot(x, top, marker="x", color=st["color"], ms=8, mew=2)
                continue
            g, se = finals["gap"][i], finals["gap_se"][i]
            if not math.isfinite(g):
                continue
            rtn = m.endswith("rtn")
            bx.bar(x, g, width * 0.9, color="white" if rtn else st["color"],
                   edgecolor=st["color"], hatch="///" if rtn else None, lw=1.2,
                   label=method_label(m) if k == 0 else None)
            if math.isfinite(se):
                bx.errorbar(x, g, yerr=se, color="black", lw=1, capsize=2)
    bx.axhline(0, color=style.COLORS["black"], lw=0.8)
    labels = []
    for p in presets:
        rows = np.flatnonzero(r["preset"] == p)
        n = len({int(x) for x in r["seed"][rows]})
        labels.append(f"{p} ({_fmt_params(int(r['n_nonembed'][rows[0]]))})\n"
                      f"{int(r['steps'][rows[0]])} steps, {n} seed{'s' * (n > 1)}")
    bx.set_xticks(range(len(presets)), labels)
    bx.set_ylabel("val. loss − BF16 w/ master")
    if bx.get_legend_handles_labels()[0]:
        bx.legend(fontsize=7, loc="upper left", ncol=2)
    style.panel_title(bx, "b", "gap to BF16 with master weights")


PARETO_CAPTION = """
Memory against loss for the language-model runs of lm_table: static bytes per parameter of the
quantized linear layers (as in the paper: the stored weights with their row scales, AdamW's two
FP32 moments, and the FP32 master copy if any, whose low-precision working copy is not counted;
measured from the tensors' nbytes, equal to ecosim.memory's formula) against the final
validation loss (mean over seeds), one panel per preset. Removing the master copy moves a
method from 12 to 9 bytes per parameter (plus 4 bytes per row of scales); what that costs in
loss is the vertical distance.
"""


@figure("lm_pareto", experiments=["lm"], caption=PARETO_CAPTION)
def lm_pareto(lm):
    r = lm
    presets, methods = _presets(r), _methods(r)
    fig = style.new_figure(3.6 * len(presets) + 0.6, 3.6)
    axes = np.atleast_1d(fig.subplots(1, len(presets)))
    table = {k: [] for k in ("preset", "method", "bytes_measured", "bytes_formula",
                             "val_loss", "diverged")}
    for ax, p in zip(axes, presets):
        for m in methods:
            rows = np.flatnonzero((r["preset"] == p) & (r["method"] == m))
            if not rows.size:
                continue
            mean, _, n, n_div = _cell(r, p, m)
            b = float(r["bytes_measured"][rows[0]])
            table["preset"].append(p)
            table["method"].append(m)
            table["bytes_measured"].append(b)
            table["bytes_formula"].append(float(r["bytes_formula"][rows[0]]))
            table["val_loss"].append(mean)
            table["diverged"].append(n_div == n)
            st = _style(m)
            if math.isfinite(mean):
                ax.plot(b, mean, marker=st["marker"], color=st["color"], ls="none", ms=7,
                        mfc="none" if m.endswith("rtn") else st["color"],
                        label=method_label(m))
        gone = [method_label(m) for m, d, pp in zip(table["method"], table["diverged"],
                                                    table["preset"]) if d and pp == p]
        if gone:
            ax.annotate("diverged: " + ", ".join(gone), (0.02, 0.02), xycoords="axes fraction",
                        fontsize=7.5, color=style.COLORS["grey"])
        ax.set_xlabel("static bytes / parameter")
        ax.set_ylabel("final validation loss")
        style.panel_title(ax, "abcdefgh"[list(presets).index(p)], f"preset {p!r}")
    if axes[-1].get_legend_handles_labels()[0]:
        axes[-1].legend(fontsize=7, loc="best")
    return fig, {"points": {k: np.array(v) for k, v in table.items()}}
