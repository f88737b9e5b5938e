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


def _fmt_params(n: int) -> str:
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.0f}k"


def lm_markdown(r) -> str:
    """Final validation loss per method and preset (ours), then the paper's Table 1."""
    presets, methods = _presets(r), _methods(r)
    sizes = {str(p): int(n) for p, n in zip(r["preset"], r["n_nonembed"])}
    head = ["method"] + [f"{p} ({_fmt_params(sizes[p])})" for p in presets]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    base = {p: _cell(r, p, "bf16_master")[0] for p in presets}
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
                if m != "bf16_master" and math.isfinite(base[p]):
                    c += f" ({mean - base[p]:+.4f})"
                if n_div:
                    c += f", {n_div}/{n} diverged"
                cells.append(c)
        lines.append(f"| {method_label(m)} | " + " | ".join(cells) + " |")
    steps = sorted({int(s) for s in r["steps"]})
    tokens = sorted({int(t) for t in r["tokens"]})
    lines += ["", f"Validation loss (nats per byte) after {', '.join(map(str, steps))} steps "
              f"({', '.join(f'{t / 1e6:.2f}M' for t in tokens)} training tokens); in brackets "
              "the gap to BF16 with master weights.", "",
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
clip 1.0, 10% warmup then cosine to 0.1x. (a) Validation loss during training for the largest
preset; (b) final validation loss against the number of non-embedding parameters (a cross at
the top: diverged). The numbers are in lm_table.md, beside the paper's.
"""


@figure("lm_table", experiments=["lm"], caption=TABLE_CAPTION)
def lm_table(lm):
    r = lm
    presets, methods = _presets(r), _methods(r)
    fig = style.new_figure(11.0, 4.2)
    ax, bx = fig.subplots(1, 2)
    big = presets[-1]
    finals = {k: [] for k in ("preset", "method", "n_nonembed", "val_loss", "std", "seeds",
                              "diverged")}
    curves = {k: [] for k in ("preset", "method", "seed", "step", "train_loss", "val_loss")}
    top = 0.0
    for m in methods:
        st = _style(m)
        lw = 1.9 if m.endswith("sr") or m.startswith("bf16") else 1.5
        xs, ys = [], []
        for p in presets:
            mean, sd, n, n_div = _cell(r, p, m)
            if n == 0:
                continue
            nz = int(r["n_nonembed"][np.flatnonzero(r["preset"] == p)[0]])
            finals["preset"].append(p)
            finals["method"].append(m)
            finals["n_nonembed"].append(nz)
            finals["val_loss"].append(mean)
            finals["std"].append(sd)
            finals["seeds"].append(n)
            finals["diverged"].append(n_div)
            xs.append(nz)
            ys.append(mean)
        bx.plot(xs, ys, color=st["color"], ls=st["ls"], marker=st["marker"], lw=lw,
                label=method_label(m))
        for i in np.flatnonzero((r["preset"] == big) & (r["method"] == m)):
            ok = np.isfinite(r["curve_step"][i]) & np.isfinite(r["curve_val"][i])
            step, val = r["curve_step"][i][ok], r["curve_val"][i][ok]
            ax.plot(step, val, color=st["color"], ls=st["ls"], lw=lw)
            if r["diverged"][i] and step.size:
                ax.plot(step[-1], val[-1], marker="x", color=st["color"], ms=8, mew=2)
            if val.size:
                top = max(top, float(val[0]))
            okt = np.isfinite(r["curve_step"][i])
            n = int(okt.sum())
            curves["preset"] += [big] * n
            curves["method"] += [m] * n
            curves["seed"] += [int(r["seed"][i])] * n
            curves["step"].append(r["curve_step"][i][okt].astype(np.int64))
            curves["train_loss"].append(r["curve_train"][i][okt])
            curves["val_loss"].append(r["curve_val"][i][okt])
    # diverged methods: a cross at the top of panel (b)
    fin = np.array([v for v in finals["val_loss"] if math.isfinite(v)])
    if fin.size:
        lo, hi = float(fin.min()), float(fin.max())
        pad = 0.08 * (hi - lo or 1.0)
        bx.set_ylim(lo - pad, hi + 3 * pad)
        for p, m, v, d, n in zip(finals["preset"], finals["method"], finals["val_loss"],
                                 finals["diverged"], finals["seeds"]):
            if d == n:
                nz = finals["n_nonembed"][finals["preset"].index(p)]
                bx.plot(nz, hi + 2.5 * pad, marker="x", color=_style(m)["color"], ms=8, mew=2)
    bx.set_xscale("log")
    bx.set_xlabel("non-embedding parameters")
    bx.set_ylabel("final validation loss")
    bx.legend(fontsize=7.5, loc="upper right")
    style.panel_title(bx, "b", "final loss by model size")
    ax.set_xlabel("update")
    ax.set_ylabel("validation loss (nats/byte)")
    if fin.size and top:
        ax.set_ylim(float(fin.min()) * 0.97, min(top, 3 * float(fin.max())) * 1.02)
    style.panel_title(ax, "a", f"preset {big!r}")
    tables = {"final": {k: np.array(v) for k, v in finals.items()}}
    if curves["step"]:
        tables["curves"] = {k: (np.concatenate(v) if isinstance(v[0], np.ndarray)
                                else np.array(v)) for k, v in curves.items()}
    return fig, tables, lm_markdown(r)


PARETO_CAPTION = """
Memory against loss for the language-model runs of lm_table: static bytes per parameter of the
quantized linear layers (stored weights, master copy if any, AdamW's two FP32 moments, scales;
measured from the tensors' nbytes) against the final validation loss, one panel per preset.
Removing the master copy moves a method from 12 to 9 bytes per parameter (BF16 weights with a
master copy: 10); what that costs in loss is the vertical distance.
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
    axes[-1].legend(fontsize=7, loc="best")
    return fig, {"points": {k: np.array(v) for k, v in table.items()}}
