"""Figures ``lm_table`` and ``lm_pareto``: Table 1 of the ECO paper on a language model.

Both read the ``lm`` experiment (:mod:`ecosim.experiments.lm`): runs of
``python -m ecosim.torch.lm`` made by ``make figures`` (CPU presets) or read from a results
file (``--set lm.results_file=FILE``). ``lm_table`` also writes its table as markdown
(``lm_table.md``) beside the paper's numbers.

Only comparable runs are aggregated. A run's identity is its preset, method and setting
(:func:`ecosim.experiments.lm.run_setting`: steps, sequence length, global batch, lr and
schedule, AdamW's constants, clipping, validation batches, storage, corpus and split); each
(preset, setting) is one column of the table (one panel of ``lm_pareto``, one group of bars),
so runs of different lengths or batches are never averaged together. A preset with a single
setting is labelled by its name; one with several gets a column per setting, labelled by what
differs (``small (3.2M) · 100 steps``). Within a column a method's seeds are averaged (each
cell states its ``n``) and paired with BF16-with-master's seeds of the same column; a seed
without a finished baseline run is named in the cell. Repeated seeds are resolved when the
results file is read (:func:`ecosim.experiments.lm.unique_runs`).

What a cell says is decided in :mod:`ecosim.claims` (:func:`~ecosim.claims.lm_cells`: each
run's outcome, trained, stalled or diverged, and the 95% t-interval of the paired gap over the
seeds that trained; :func:`~ecosim.claims.lm_orderings`: which of the paper's orderings hold);
this module only draws and writes it.
"""
from __future__ import annotations

import json
import math

import numpy as np

from .. import claims as _claims
from .. import recipes
from ..experiments.lm import METHODS, describe_setting, method_parts
from . import style
from .base import figure
from .mlp_methods import PAPER_SIZES, PAPER_TABLE1, method_style

__all__ = ["lm_table", "lm_pareto", "lm_markdown", "method_label", "run_style", "columns",
           "method_order", "cell_text", "verdict_text", "aligned_curves", "with_budget"]

def method_label(method: str) -> str:
    """The label of a method name of :data:`ecosim.recipes.LM_METHODS` (``fp8_eco_sr -> "FP8
    ECO + SR"``, ``int4_eco_sr -> "INT4 ECO + SR"``, ``dqt8_sr -> "DQT INT8 + SR"``); an
    unknown name is its own label."""
    m = recipes.LM_METHODS.get(method)
    return method if m is None else m.label


def run_style(method: str) -> dict:
    """Colour, line style and marker of a method name of the LM runner (every name
    :func:`ecosim.experiments.lm.method_parts` accepts; FP32 is grey and dotted)."""
    w, scheme, mode = method_parts(method)
    if w == "fp32":
        return {"color": style.COLORS["grey"], "ls": ":", "marker": "."}
    if scheme == "eco_adam":  # ECO's variants for AdamW: one look each (fp8_ecomx_sr, ...)
        color, marker = style.ECO_ADAM_STYLES[method.split("_")[1]]
        return {"color": color, "ls": style.MODE_LINESTYLES[mode], "marker": marker}
    return method_style(w, scheme, mode)


BASE = "bf16_master"  # the paired gaps are to this method

# what a refused shipped file of budget runs asks for
_REMAKE_BUDGET = ("remake the shipped file with the commands of ecosim.experiments.lm_budget "
                  "(benchmarks/lm_protocol.py)")


def with_budget(lm, lm_budget) -> tuple[dict, str]:
    """The ``lm`` experiment's runs and the shipped runs of ``lm_budget`` (other sizes, budgets
    and learning rates) as one set of result columns, and a note ('' when both are shown).

    The shipped runs join only when they are the ``lm`` protocol apart from the model, steps
    and lr (:func:`ecosim.claims.lm.check_protocol`); otherwise the note says which field
    differs and the ``lm`` runs stand alone. Either argument may be a Run (its ``results``)
    or result columns; ``lm_budget`` may be None (no shipped runs)."""
    from ..experiments.lm import combine_runs
    from ..experiments.lm_budget import VARIED

    r = getattr(lm, "results", lm)
    if lm_budget is None:
        return r, ""
    b = getattr(lm_budget, "results", lm_budget)
    try:
        _claims.check_protocol(r, b, VARIED, _REMAKE_BUDGET)
    except ValueError as exc:
        return r, f"The shipped runs at other budgets are not shown: {exc}."
    return combine_runs(None, [], [r, b]), ""


def _settings(r) -> np.ndarray:
    """Each row's setting (a column without one, from older caches, counts as one setting)."""
    return r["setting"] if "setting" in r else np.full(len(r["preset"]), "{}")


def columns(r) -> tuple[list[dict], np.ndarray]:
    """The comparable groups of runs: one per (preset, setting), ordered by size, then steps.

    Returns ``(columns, col)``: each column a dict (``preset``, ``setting``, ``label``,
    ``n_nonembed``, ``steps``) and ``col[i]`` the column of row ``i``.

    Raises:
        ValueError: a seed occurs twice in one column and method (the results file reader
            resolves repeats: this guards against anything that bypasses it).
    """
    settings = _settings(r)
    keys = sorted({(str(p), str(s)) for p, s in zip(r["preset"], settings)})
    first = {k: next(i for i, (p, s) in enumerate(zip(r["preset"], settings))
                     if (str(p), str(s)) == k) for k in keys}
    keys.sort(key=lambda k: (int(r["n_nonembed"][first[k]]), k[0],
                             int(r["steps"][first[k]]), k[1]))
    index = {k: j for j, k in enumerate(keys)}
    col = np.array([index[(str(p), str(s))] for p, s in zip(r["preset"], settings)],
                   dtype=np.int64)
    cols = []
    for p, s in keys:
        i = first[(p, s)]
        siblings = [json.loads(ss) for pp, ss in keys if pp == p]
        label = f"{p} ({_fmt_params(int(r['n_nonembed'][i]))})"
        if len(siblings) > 1:
            differ = [k for k in sorted({k for d in siblings for k in d})
                      if any(d.get(k) != siblings[0].get(k) for d in siblings)]
            label += " · " + describe_setting(s, differ)
        cols.append({"preset": p, "setting": s, "label": label,
                     "n_nonembed": int(r["n_nonembed"][i]), "steps": int(r["steps"][i])})
    seen = set()
    for i, (c, m, seed) in enumerate(zip(col, r["method"], r["seed"])):
        if (int(c), str(m), int(seed)) in seen:
            raise ValueError(f"seed {int(seed)} of {cols[c]['label']} {m} occurs twice; "
                             "one run per seed and setting (see ecosim.experiments.lm."
                             "unique_runs)")
        seen.add((int(c), str(m), int(seed)))
    return cols, col


def method_order(r) -> list[str]:
    """The methods present in results ``r``: FP32 and Table 1's in the paper's order, then any
    other (DQT, BitNet, INT4 ...) by name."""
    present = {str(m) for m in r["method"]}
    order = [m for m in ("fp32", *METHODS) if m in present]
    return order + sorted(present - set(order))


def _cells(r, col: np.ndarray) -> dict:
    """:func:`ecosim.claims.lm_cells` per column: ``{(column, method): cell}``."""
    return _claims.lm_cells(r, col, BASE)


def _unpaired_text(seeds: list[int], base: str = BASE) -> str:
    return (f"no finished {method_label(base)} run for seed{'s' * (len(seeds) > 1)} "
            + ", ".join(map(str, seeds)))


def _fmt_params(n: int) -> str:
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.0f}k"


def _interval_text(d: dict) -> str:
    """``+0.0123 [-0.0040, +0.0286]`` (a mean alone below two values)."""
    if d["n"] < 2:
        return f"{d['mean']:+.4f}"
    return f"{d['mean']:+.4f} [{d['lo']:+.4f}, {d['hi']:+.4f}]"


def _failed_text(cell: dict) -> str:
    """``stalled 3`` / ``diverged 1, stalled 2`` of a cell's failed runs ('' if none)."""
    oc = cell["outcomes"]
    return ", ".join(f"{k} {oc[k]}" for k in ("diverged", "stalled") if oc[k])


def cell_text(cells: dict, c: int, m: str, base: str = BASE) -> str:
    """A table cell: mean ± sd over the seeds that trained, the paired gap to ``base`` with its
    95% interval in brackets, ``n``, and the runs that stalled or diverged (never averaged)."""
    cell = cells.get((c, m))
    if cell is None:
        return ""
    n, oc, loss = cell["n"], cell["outcomes"], cell["loss"]
    failed = _failed_text(cell)
    if oc["trained"] == 0:
        return f"{failed} of n={n}" if len(failed.split(",")) > 1 else \
            f"{failed.split()[0]} n={n}"
    text = f"{loss['mean']:.4f}" + (f" ± {loss['sd']:.4f}" if loss["n"] > 1 else "")
    if m != base:
        parts = []
        if cell["gap"]["n"]:
            g = _interval_text(cell["gap"])
            if cell["unpaired"]:
                g += f" over n={cell['gap']['n']}"
            parts.append(g)
        if cell["unpaired"]:
            parts.append(_unpaired_text(cell["unpaired"], base))
        text += f" ({'; '.join(parts)})"
    text += f" n={oc['trained']}"
    if failed:
        text += f"; {failed} of {n}"
    return text


_VERDICT = {"holds": "holds", "reversed": "**reversed**", "does not hold": "**does not hold**",
            "not resolved": "not resolved"}


def _orderings_md(r, cols, col) -> list[str]:
    """The paper's orderings judged per column (:func:`ecosim.claims.lm_orderings`)."""
    found = _claims.lm_orderings(r, col, base=BASE)
    if not found:
        return []
    head = ["paper's ordering", "paper (A - B)"] + [c["label"] for c in cols]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    keys = list(dict.fromkeys((o["a"], o["rel"], o["b"], o["paper"]) for o in found))
    by = {(o["group"], o["a"], o["rel"], o["b"]): o for o in found}
    for a, rel, b, paper in keys:
        row = [f"{method_label(a)} {'<' if rel == '<' else '≈'} {method_label(b)}", paper]
        for c in range(len(cols)):
            o = by.get((c, a, rel, b))
            if o is None:
                row.append("")
                continue
            row.append(verdict_text(o))
        lines.append("| " + " | ".join(row) + " |")
    return lines


def verdict_text(o: dict) -> str:
    """A table cell of an ordering's verdict (:func:`ecosim.claims.lm_orderings`' dict):
    the verdict and how it was reached (the interval, or which side failed)."""
    v = _VERDICT[o["verdict"]]
    if o["how"] == "outcome":
        return v + f" (by outcome: {o['failed'].upper()} stalled or diverged)"
    if o["diff"]["n"]:
        return v + f": {_interval_text(o['diff'])} n={o['diff']['n']}"
    return v


def _protocol_text(r, cols, col) -> str:
    """Per column: parameters, steps, tokens, tokens per parameter and seeds."""
    out = []
    for c, cc in enumerate(cols):
        rows = np.flatnonzero(col == c)
        tokens = int(np.max(r["tokens"][rows]))
        seeds = len({int(x) for x in r["seed"][rows]})
        out.append(f"{cc['label']}: {cc['n_nonembed']:,} non-embedding parameters, "
                   f"{cc['steps']} steps, {tokens:,} training tokens = "
                   f"{tokens / cc['n_nonembed']:.1f} per non-embedding parameter, "
                   f"{seeds} seed{'s' * (seeds > 1)}")
    return "; ".join(out)


def lm_markdown(r, note: str = "") -> str:
    """Final validation loss per method and column (preset, or preset and setting) with each
    cell's number of seeds, then the paper's Table 1 (``note``: a paragraph after the
    table, e.g. why shipped runs are not shown)."""
    cols, col = columns(r)
    methods = method_order(r)
    cells = _cells(r, col)
    head = ["method"] + [c["label"] for c in cols]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m in methods:
        row = [cell_text(cells, c, m) for c in range(len(cols))]
        lines.append(f"| {method_label(m)} | " + " | ".join(row) + " |")
    lines += ["", f"Validation loss (nats per byte) at the end ({_protocol_text(r, cols, col)}): "
              "mean ± standard deviation over the n seeds that trained; in brackets the gap to "
              "BF16 with master weights paired by seed (same init, data order and SR keys), "
              f"mean and {_claims.LM_LEVEL:.0%} t-interval. A run that diverged (non-finite or "
              "exploding loss) or stalled (over the second half of the run its validation loss "
              f"fell by less than {_claims.STALL_RATIO:g}x what the same seed's BF16-with-master "
              f"run fell, which fell by more than {_claims.STALL_MIN_DROP:g}) is counted as "
              "such and enters no mean. Runs are averaged only within a column: one preset and "
              "setting (steps, sequence length, batch, lr, storage, corpus, ...)."]
    if note:
        lines += ["", note]
    order = _orderings_md(r, cols, col)
    if order:
        lines += ["", "The paper's orderings on these runs (A - B per seed, seeds where both "
                  f"trained, mean and {_claims.LM_LEVEL:.0%} t-interval; < holds when the "
                  "interval lies below 0, reversed when above; ≈ holds when it lies within "
                  f"±{_claims.EQUIV_MARGIN:g}, does not hold when outside; otherwise not "
                  "resolved):", "", *order]
    lines += ["",
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
validation loss minus that of BF16 weights with a master copy, paired by seed (same init, data
order and SR keys) over the seeds where both trained (bars: mean; whiskers: 95% t-interval;
hatched: RTN; at the top, a cross where every seed diverged and a triangle where every seed
stalled: loss flat over the second half while BF16-with-master's still fell; "k✗" over a
bar: k seeds failed and are left out of it). make figures runs preset micro (32,928
non-embedding parameters) for 650 steps of 16 x 64 bytes: 20.2 training tokens per
non-embedding parameter, 5 seeds. The numbers, and which of the paper's orderings hold, are
in lm_table.md beside the paper's Table 1.
"""


@figure("lm_table", experiments=["lm", "lm_budget"], caption=TABLE_CAPTION)
def lm_table(lm, lm_budget=None):
    r, note = with_budget(lm, lm_budget)
    cols, col = columns(r)
    methods = method_order(r)
    fig = style.new_figure(11.0, 4.2)
    ax, bx = fig.subplots(1, 2)
    big = len(cols) - 1  # the largest preset (its longest setting) gets the curves
    cells = _cells(r, col)
    finals = {k: [] for k in ("preset", "method", "n_nonembed", "val_loss", "std", "seeds",
                              "trained", "stalled", "diverged", "gap", "gap_lo", "gap_hi",
                              "setting", "steps", "gap_seeds", "unpaired")}
    curves = {k: [] for k in ("preset", "method", "seed", "step", "train_loss", "val_loss")}
    where = {}  # (column, method) -> row of finals
    top = 0.0
    for m in methods:
        st = run_style(m)
        lw = 1.9 if m.endswith("sr") or m.startswith("bf16") else 1.5
        for c, cc in enumerate(cols):
            cell = cells.get((c, m))
            if cell is None:
                continue
            gap, oc = cell["gap"], cell["outcomes"]
            where[c, m] = len(finals["preset"])
            finals["preset"].append(cc["preset"])
            finals["setting"].append(cc["label"])
            finals["method"].append(m)
            finals["n_nonembed"].append(cc["n_nonembed"])
            finals["steps"].append(cc["steps"])
            finals["val_loss"].append(cell["loss"]["mean"])
            finals["std"].append(cell["loss"]["sd"])
            finals["seeds"].append(cell["n"])
            for k in ("trained", "stalled", "diverged"):
                finals[k].append(oc[k])
            finals["gap"].append(gap["mean"])
            finals["gap_lo"].append(gap["lo"])
            finals["gap_hi"].append(gap["hi"])
            finals["gap_seeds"].append(gap["n"])
            finals["unpaired"].append(" ".join(map(str, cell["unpaired"])))
        rows = np.flatnonzero((col == big) & (r["method"] == m))
        for i in rows:
            okt = np.isfinite(r["curve_step"][i])
            n = int(okt.sum())
            curves["preset"] += [cols[big]["preset"]] * n
            curves["method"] += [m] * n
            curves["seed"] += [int(r["seed"][i])] * n
            curves["step"].append(r["curve_step"][i][okt].astype(np.int64))
            curves["train_loss"].append(r["curve_train"][i][okt])
            curves["val_loss"].append(r["curve_val"][i][okt])
        if rows.size:  # mean over seeds of the training loss, validation points on top
            step, train_all, val_all = aligned_curves(r, rows)
            ok = np.all(np.isfinite(train_all), axis=0)
            train = train_all.mean(axis=0)
            ax.plot(step[ok], train[ok], color=st["color"], ls=st["ls"], lw=lw * 0.8)
            val = val_all.mean(axis=0)
            okv = np.isfinite(val)
            ax.plot(step[okv], val[okv], color=st["color"], marker=st["marker"], ls="none",
                    ms=5)
            if r["diverged"][rows].any() and ok.any():
                last = np.flatnonzero(ok)[-1]
                ax.plot(step[last], train[last], marker="x", color=st["color"], ms=8, mew=2)
            if ok.any():
                top = max(top, float(train[ok][0]))
    _gap_bars(bx, r, cols, col, methods, finals, where)
    fin = np.array([v for v in finals["val_loss"] if math.isfinite(v)])
    ax.set_xlabel("update")
    ax.set_ylabel("loss (nats/byte)")
    if fin.size and top:
        ax.set_ylim(float(fin.min()) * 0.97, min(top, 3 * float(fin.max())) * 1.02)
    nseeds = len({int(x) for x in r["seed"][col == big]})
    style.panel_title(ax, "a", f"{_name(cols[big])}: train loss, val. (markers)"
                      + (f", mean of {nseeds} seeds" if nseeds > 1 else ""))
    tables = {"final": {k: np.array(v) for k, v in finals.items()}}
    if curves["step"]:
        tables["curves"] = {k: (np.concatenate(v) if isinstance(v[0], np.ndarray)
                                else np.array(v)) for k, v in curves.items()}
    return fig, tables, lm_markdown(r, note)


def _name(cc: dict) -> str:
    """A column's preset (quoted) and, if the preset has several settings, what differs."""
    extra = cc["label"].split(" · ", 1)[1] if " · " in cc["label"] else ""
    return repr(cc["preset"]) + (f" · {extra}" if extra else "")


def aligned_curves(r, rows) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The curves of these runs on the union of their logged steps (NaN where a run has no
    point, e.g. after it diverged): ``(step, train[rows, steps], val[rows, steps])``."""
    steps = np.unique(np.concatenate([r["curve_step"][i][np.isfinite(r["curve_step"][i])]
                                      for i in rows]))
    train = np.full((len(rows), steps.size), np.nan)
    val = np.full((len(rows), steps.size), np.nan)
    for k, i in enumerate(rows):
        ok = np.isfinite(r["curve_step"][i])
        at = np.searchsorted(steps, r["curve_step"][i][ok])
        train[k, at] = r["curve_train"][i][ok]
        val[k, at] = r["curve_val"][i][ok]
    return steps, train, val


def _gap_bars(bx, r, cols, col, methods, finals, where) -> None:
    """Panel (b): each method's final validation loss minus BF16-with-master's, paired by seed
    (bars: mean over the seeds that trained; whiskers: 95% t-interval; at the top, a cross
    where no seed trained because runs diverged, a triangle where they stalled, and the count
    of failed seeds over a bar), one group of bars per column of the table."""
    others = [m for m in methods if m != BASE]
    width = 0.8 / max(len(others), 1)
    gaps = [g for g in finals["gap"] + finals["gap_hi"] if math.isfinite(g)]
    top = max([0.0] + gaps) * 1.15 + 0.005
    for j, m in enumerate(others):
        st = run_style(m)
        labelled = False
        for k in range(len(cols)):
            i = where.get((k, m))
            if i is None:
                continue
            x = k + (j - (len(others) - 1) / 2) * width
            failed = finals["seeds"][i] - finals["trained"][i]
            if finals["trained"][i] == 0:
                stalled = finals["stalled"][i] >= finals["diverged"][i]
                bx.plot(x, top, marker="v" if stalled else "x", color=st["color"], ms=8,
                        mew=2, label=None if labelled else
                        f"{method_label(m)} ({'stalled' if stalled else 'diverged'})")
                labelled = True
                continue
            g, lo, hi = finals["gap"][i], finals["gap_lo"][i], finals["gap_hi"][i]
            if not math.isfinite(g):
                continue
            rtn = m.endswith("rtn")
            bx.bar(x, g, width * 0.9, color="white" if rtn else st["color"],
                   edgecolor=st["color"], hatch="///" if rtn else None, lw=1.2,
                   label=None if labelled else method_label(m))
            labelled = True
            if math.isfinite(lo):
                bx.errorbar(x, g, yerr=[[g - lo], [hi - g]], color="black", lw=1, capsize=2)
            if failed:
                bx.annotate(f"{failed}✗", (x, max(g, hi if math.isfinite(hi) else g)),
                            ha="center", va="bottom", fontsize=6.5, color=st["color"])
    bx.axhline(0, color=style.COLORS["black"], lw=0.8)
    labels = []
    for c, cc in enumerate(cols):
        n = len({int(x) for x in r["seed"][col == c]})
        steps = f"{cc['steps']} steps"
        labels.append(cc["label"].replace(" · ", "\n") + "\n"
                      + (f"{steps}, " if steps not in cc["label"] else "")
                      + f"{n} seed{'s' * (n > 1)}")
    bx.set_xticks(range(len(cols)), labels)
    bx.set_ylabel("val. loss − BF16 w/ master")
    if bx.get_legend_handles_labels()[0]:
        bx.legend(fontsize=7, loc="upper left", ncol=2)
    style.panel_title(bx, "b", "gap to BF16 with master weights")


PARETO_CAPTION = """
Memory against loss for the language-model runs of lm_table: static bytes per parameter of the
quantized linear layers (as in the paper: the stored weights with their row scales, AdamW's two
FP32 moments, and the FP32 master copy if any, whose low-precision working copy is not counted;
measured from the tensors' nbytes, equal to ecosim.memory's formula) against the final
validation loss (mean over the seeds that trained; runs that diverged or stalled are named, not
averaged), one panel per preset. Removing the master copy moves a
method from 12 to 9 bytes per parameter (plus 4 bytes per row of scales); what that costs in
loss is the vertical distance.
"""


@figure("lm_pareto", experiments=["lm", "lm_budget"], caption=PARETO_CAPTION)
def lm_pareto(lm, lm_budget=None):
    r, _ = with_budget(lm, lm_budget)
    cols, col = columns(r)
    methods = method_order(r)
    cells = _cells(r, col)
    ncol = min(len(cols), 3)
    nrow = -(-len(cols) // ncol)
    fig = style.new_figure(3.6 * ncol + 0.6, 3.4 * nrow)
    axes = np.atleast_1d(fig.subplots(nrow, ncol)).ravel()
    for ax in axes[len(cols):]:
        ax.axis("off")
    table = {k: [] for k in ("preset", "method", "bytes_measured", "bytes_formula",
                             "val_loss", "diverged", "stalled", "setting", "seeds")}
    for c, (ax, cc) in enumerate(zip(axes, cols)):
        gone = []
        for m in methods:
            rows = np.flatnonzero((col == c) & (r["method"] == m))
            if not rows.size:
                continue
            cell = cells[c, m]
            mean, n, n_ok = cell["loss"]["mean"], cell["n"], cell["outcomes"]["trained"]
            b = float(r["bytes_measured"][rows[0]])
            table["preset"].append(cc["preset"])
            table["setting"].append(cc["label"])
            table["method"].append(m)
            table["bytes_measured"].append(b)
            table["bytes_formula"].append(float(r["bytes_formula"][rows[0]]))
            table["val_loss"].append(mean)
            table["seeds"].append(n_ok)
            table["diverged"].append(cell["outcomes"]["diverged"] == n)
            table["stalled"].append(cell["outcomes"]["stalled"])
            if n_ok == 0:
                gone.append(method_label(m))
            st = run_style(m)
            if math.isfinite(mean):
                ax.plot(b, mean, marker=st["marker"], color=st["color"], ls="none", ms=7,
                        mfc="none" if m.endswith("rtn") else st["color"],
                        label=method_label(m))
        if gone:
            ax.annotate("diverged or stalled: " + ", ".join(gone), (0.02, 0.02), xycoords="axes fraction",
                        fontsize=7.5, color=style.COLORS["grey"])
        ax.set_xlabel("static bytes / parameter")
        ax.set_ylabel("final validation loss")
        style.panel_title(ax, "abcdefghijklmnop"[c % 16], f"preset {_name(cc)}")
    if axes[len(cols) - 1].get_legend_handles_labels()[0]:
        axes[len(cols) - 1].legend(fontsize=7, loc="best")
    return fig, {"points": {k: np.array(v) for k, v in table.items()}}
