"""Figure ``lm_switches``: the paper's bf16 autocast and FP8 activations on the lm protocol.

Reads the ``lm`` experiment (the protocol with both switches off) and ``lm_switches`` (the same
runs with the switches on, from a shipped results file; :mod:`ecosim.experiments.lm_switches`).
What the numbers mean is decided in :mod:`ecosim.claims.lm_switches` (paired effects, Table 1
with the paper's switches) and :mod:`ecosim.claims.lm` (cells, orderings); this module draws.
A shipped file made under another protocol than today's ``lm`` defaults is not compared: the
figure says why, and how to remake the file.
"""
from __future__ import annotations

import numpy as np
from matplotlib.ticker import MaxNLocator

from .. import claims as _claims
from ..claims import lm_switches as _sw
from ..claims.stats import interval_text
from . import style
from .base import figure
from .lm import (BASE, cell_text, method_label, method_order, run_style, verdict_text)

__all__ = ["lm_switches", "switches_markdown"]

CAPTION = """
The ECO paper's two switches on the lm protocol (preset micro, 650 steps, 20.2 training tokens
per non-embedding parameter, seeds 0-2 paired by seed: the lm experiment's first three of five,
the seeds of the switched runs): BF16 with master weights multiplying in
bf16 (autocast), and the FP8 methods rounding each quantized linear layer's input to E4M3 (RTN,
one absmax scale per token). (a) Each method's validation loss with its switch on minus off,
paired by seed (dot: mean; whiskers: 95% t-interval). (b) Gap to BF16 with master weights
(paired by seed) with both switches off (the lm experiment, as in lm_table) and with the
paper's switches (both sides switched: FP8 methods with E4M3 activations against BF16
autocast). The switched runs come from a results file shipped with ecosim (remade by the
commands in ecosim.experiments.lm_switches); lm_switches.md gives the numbers and which of the
paper's orderings hold under each protocol.
"""


def switches_markdown(effects, methods, cells_off, cells_on, order_off, order_on) -> str:
    """The effect table, then Table 1's gaps under both protocols and the orderings."""
    lines = ["| method | switch | effect on validation loss (on - off) | trained on / off |",
             "|---|---|---|---|"]
    for e in effects:
        sw = " + ".join(_sw.SWITCHES[s] for s in e["switches"])
        lines.append(f"| {method_label(e['method'])} | {sw} | {interval_text(e['effect'])} | "
                     f"{e['outcomes_on']['trained']} / "
                     f"{e['outcomes_off']['trained']} |")
    lines += ["", "Effect: the switched run's final validation loss (nats per byte) minus the "
              "plain run's, per seed (same init, data order and SR keys), mean and "
              f"{_claims.LM_LEVEL:.0%} t-interval over the seeds where both trained.", "",
              "| method | switches off (lm, same seeds) | paper's switches |", "|---|---|---|"]
    for m in methods:
        lines.append(f"| {method_label(m)} | {cell_text(cells_off, 0, m)} | "
                     f"{cell_text(cells_on, 0, m)} |")
    lines += ["", "Final validation loss, mean ± sd over the seeds that trained, in brackets the "
              "gap to BF16 with master weights paired by seed. Paper's switches: BF16 with "
              "master in bf16 autocast, the FP8 methods with E4M3 activations, FP32 plain.", "",
              "| paper's ordering | paper (A - B) | switches off (lm, same seeds) | "
              "paper's switches |",
              "|---|---|---|---|"]
    on = {(o["a"], o["rel"], o["b"]): o for o in order_on}
    for o in order_off:
        k = (o["a"], o["rel"], o["b"])
        rel = "<" if o["rel"] == "<" else "≈"
        lines.append(f"| {method_label(o['a'])} {rel} {method_label(o['b'])} | {o['paper']} | "
                     f"{verdict_text(o)} | {verdict_text(on[k]) if k in on else ''} |")
    return "\n".join(lines)


def _refused(reason: str):
    fig = style.new_figure(8.0, 2.0)
    ax = fig.subplots()
    ax.axis("off")
    ax.text(0.0, 0.5, "not compared: " + reason, wrap=True, fontsize=8, va="center")
    md = (f"Not compared: {reason}\n\nRemake the shipped file with the commands of "
          "ecosim.experiments.lm_switches.")
    return fig, {"refused": {"reason": np.array([reason])}}, md


@figure("lm_switches", experiments=["lm", "lm_switches"], caption=CAPTION)
def lm_switches(lm, lm_switches):
    # the experiments' result columns (a Run's, or plain column dicts as in the tests)
    off, on = (getattr(x, "results", x) for x in (lm, lm_switches))
    off = _claims.runs_of_seeds(off, on)  # the same seeds on both sides
    try:
        _sw.check_comparable(off, on)
        effects = _sw.switch_effects(off, on, checked=True)
        paper = _sw.paper_protocol(off, on, checked=True)
    except ValueError as exc:
        return _refused(str(exc))
    cells_off = _claims.lm_cells(off, None, BASE)
    cells_on = _claims.lm_cells(paper, None, BASE)
    order_off = _claims.lm_orderings(off, None, base=BASE)
    order_on = _claims.lm_orderings(paper, None, base=BASE)

    fig = style.new_figure(11.0, 4.0)
    ax, bx = fig.subplots(1, 2)
    tab = {k: [] for k in ("method", "switches", "effect", "lo", "hi", "n")}
    for y, e in enumerate(effects):
        d, st = e["effect"], run_style(e["method"])
        if d["n"]:
            ax.errorbar(d["mean"], y, xerr=[[d["mean"] - d["lo"]], [d["hi"] - d["mean"]]]
                        if d["n"] > 1 else None, color=st["color"], marker="o", capsize=3)
        tab["method"].append(e["method"])
        tab["switches"].append("+".join(e["switches"]))
        for k, v in (("effect", d["mean"]), ("lo", d["lo"]), ("hi", d["hi"]), ("n", d["n"])):
            tab[k].append(v)
    ax.axvline(0.0, color=style.COLORS["grey"], lw=0.8)
    ax.set_yticks(range(len(effects)))
    ax.set_yticklabels([method_label(e["method"]) for e in effects])
    ax.invert_yaxis()
    ax.xaxis.set_major_locator(MaxNLocator(5))
    ax.set_xlabel("validation loss, switch on - off (nats/byte)")
    style.panel_title(ax, "a", "effect of the switch, paired by seed")

    methods = [m for m in method_order(paper) if m != BASE]
    gaps = {k: [] for k in ("method", "protocol", "gap", "lo", "hi", "n")}
    for j, (cells, name, hatch) in enumerate(((cells_off, "off", ""),
                                              (cells_on, "paper", "//"))):
        for i, m in enumerate(methods):
            g = cells[(0, m)]["gap"] if (0, m) in cells else {"n": 0}
            if not g["n"]:
                continue
            x = i + (j - 0.5) * 0.38
            bx.bar(x, g["mean"], 0.36, color=run_style(m)["color"], alpha=0.55 + 0.35 * j,
                   hatch=hatch, edgecolor="white")
            if g["n"] > 1:
                bx.errorbar(x, g["mean"], yerr=[[g["mean"] - g["lo"]], [g["hi"] - g["mean"]]],
                            color="black", capsize=2, lw=0.8)
            for k, v in (("method", m), ("protocol", name), ("gap", g["mean"]),
                         ("lo", g.get("lo")), ("hi", g.get("hi")), ("n", g["n"])):
                gaps[k].append(v)
    bx.axhline(0.0, color=style.COLORS["grey"], lw=0.8)
    bx.set_xticks(range(len(methods)))
    bx.set_xticklabels([method_label(m) for m in methods], rotation=35, ha="right", fontsize=7)
    bx.set_ylabel("gap to BF16 w/ master (nats/byte)")
    style.panel_title(bx, "b", "switches off (light) vs the paper's (hatched)")
    md = switches_markdown(effects, method_order(paper), cells_off, cells_on, order_off, order_on)
    return fig, {"effects": {k: np.array(v) for k, v in tab.items()},
                 "gaps": {k: np.array(v, dtype=float if k in ("gap", "lo", "hi") else None)
                          for k, v in gaps.items()}}, md
