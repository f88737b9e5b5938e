"""Figure ``sr_bits``: how few random bits stochastic rounding can use, per scheme and rule.

The tables and verdicts come from :func:`ecosim.claims.sr_bits.summarise`; this module draws
them and writes them as markdown.
"""
from __future__ import annotations

import numpy as np

from ..claims.sr_bits import FLOOR_TOLERANCE, summarise
from . import style
from .base import figure

__all__ = ["sr_bits"]

CAPTION = f"""
Few-bit stochastic rounding. SR with n random bits counts floor(p 2^n) rounding-up words
(rule "floor", biased toward zero by about 2^-(n+1) of a grid step) or p 2^n rounded to nearest
(rule "nearest"). (a, b) SGD-momentum (beta 0.9) on the quadratic with its optimum off a
uniform grid: stationary error E|x_hat - x*|^2 relative to the same scheme with 32-bit SR, at
two learning rates (batch-means standard errors below 1%). Master weights and ECO feed the
rounding error back, so the time average of the stored weight stays at the optimum whatever
the rounding: their floor is no higher with 1 bit than with 32 under either rule (lower at the
larger lr: fewer random bits, less dither), and the rules coincide. Naive removal has no
feedback: each write's bias accumulates into a drift, so it needs many bits, and more under
the floor rule. (c) AdamW on the MLP with INT4 weights (one scale per tensor), where Table 1's
SR ordering is widest at 32 bits: final validation loss, mean and 95% t-interval over seeds
paired by seed (diverged runs left out and counted in the table); dotted: each scheme at 32
bits. Here ECO is not immune: Adam divides the injected error by sqrt(v), so a coarser
rounding error becomes a larger step, and the floor rule's bias toward zero is injected too.
The table (sr_bits.md) gives the fewest bits within {FLOOR_TOLERANCE:.2f}x of the 32-bit floor
and whether ECO+SR stays below naive+SR at each width and rule.
"""

_RULE_STYLE = {"floor": "-", "nearest": "--"}


def _markdown(s: dict, n_seeds: int) -> str:
    # no headings of its own: the README quotes this file inside its rounding section
    md = ["**Quadratic: stationary error relative to 32-bit SR.** "
          "SGD-momentum, beta 0.9, optimum off a uniform grid; E|x_hat - x*|^2 at n random "
          "bits over the same at 32 bits. Fewest bits: the smallest n from which every larger "
          f"n stays within {FLOOR_TOLERANCE:.2f}x.", ""]
    bits = sorted({b for row in s["quadratic"] for b in row["nbits"]})
    md.append("| lr | scheme | rule | " + " | ".join(f"n={b}" for b in bits)
              + " | fewest bits |")
    md.append("|---" * (len(bits) + 4) + "|")
    for row in s["quadratic"]:
        cells = dict(zip(row["nbits"], row["ratio"]))
        fewest = row["fewest_bits"]
        md.append(f"| {row['lr']:g} | {row['scheme']} | {row['rule']} | "
                  + " | ".join(f"{cells[b]:.3g}" if b in cells else "" for b in bits)
                  + f" | {fewest if fewest is not None else '> ' + str(max(bits))} |")
    md += ["", "**MLP, AdamW, INT4 weights (one scale per tensor): ECO+SR below naive+SR?** "
           f"Final validation loss, mean [95% t-interval] over {n_seeds} seeds (diverged runs "
           "counted, not averaged); naive - ECO paired by seed.", "",
           "| n bits | rule | ECO+SR | naive+SR | naive - ECO | ordering |", "|---|---|---|---|---|---|"]
    cell = {(row["scheme"], row["nbits"], row["rule"]): row for row in s["mlp"]}

    def fmt(row):
        if row is None:
            return ""
        txt = (f"{row['mean']:.4f} [{row['lo']:.4f}, {row['hi']:.4f}]" if row["n"] > 1
               else "n/a")
        return txt + (f", diverged {row['diverged']}" if row["diverged"] else "")

    for o in sorted(s["order"], key=lambda o: (-o["nbits"], o["rule"])):
        n, rule = o["nbits"], o["rule"]
        gap = f"{o['mean']:+.4f} [{o['lo']:+.4f}, {o['hi']:+.4f}]" if o["n"] > 1 else "n/a"
        label = "32 (reference)" if n == 32 else str(n)
        md.append(f"| {label} | {'either' if n == 32 else rule} | {fmt(cell.get(('eco', n, rule)))} "
                  f"| {fmt(cell.get(('naive', n, rule)))} | {gap} | {o['verdict']} |")
    return "\n".join(md)


@figure("sr_bits", experiments=["sr_bits"], caption=CAPTION)
def sr_bits(sr_bits):
    r = sr_bits
    s = summarise(r)
    lrs = sorted({row["lr"] for row in s["quadratic"]}, reverse=True)
    fig = style.new_figure(11.0, 3.6)
    axes = fig.subplots(1, len(lrs) + 1)
    for ax, lr, letter in zip(axes, lrs, "abc"):
        for row in (x for x in s["quadratic"] if x["lr"] == lr):
            ax.plot(row["nbits"], row["ratio"], marker="o", markersize=3,
                    linestyle=_RULE_STYLE[row["rule"]],
                    color=style.METHOD_COLORS.get(row["scheme"], "black"),
                    label=f"{row['scheme']}, {row['rule']}")
        ax.axhline(1.0, color="black", linewidth=0.8, linestyle=":")
        ax.axhline(FLOOR_TOLERANCE, color="grey", linewidth=0.6, linestyle=":")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("random bits n")
        ax.set_ylabel("floor / floor at 32 bits")
        style.panel_title(ax, letter, f"quadratic, lr {lr:g}")
    axes[0].legend(fontsize=6.5, ncol=1)
    ax = axes[-1]
    n_seeds = int(r["unit_seed"][r["unit_part"] == "mlp"].max()) + 1 if (
        r["unit_part"] == "mlp").any() else 0
    for scheme in ("eco", "naive"):
        ref = [row for row in s["mlp"] if row["scheme"] == scheme and row["nbits"] == 32]
        color = style.METHOD_COLORS[scheme]
        if ref:
            ax.axhline(ref[0]["mean"], color=color, linestyle=":", linewidth=0.9)
        for k, rule in enumerate(("floor", "nearest")):
            rows = sorted((row for row in s["mlp"] if row["scheme"] == scheme
                           and row["rule"] == rule and row["nbits"] != 32),
                          key=lambda row: row["nbits"])
            if not rows:
                continue
            x = np.array([row["nbits"] for row in rows], float) * (1.0 + 0.06 * (k - 0.5))
            y = np.array([row["mean"] for row in rows])
            err = np.array([[row["mean"] - row["lo"], row["hi"] - row["mean"]] for row in rows]).T
            ax.errorbar(x, y, yerr=np.nan_to_num(err), color=color, marker="o", markersize=3,
                        linestyle=_RULE_STYLE[rule], capsize=2,
                        label=f"{scheme.upper() if scheme == 'eco' else scheme}+SR, {rule}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("random bits n")
    ax.set_ylabel("final validation loss")
    ax.legend(fontsize=6.5)
    style.panel_title(ax, "c", "MLP: AdamW, INT4 weights")
    table = {k: np.array([row[k] for row in s["order"]]) for k in
             ("nbits", "rule", "verdict", "n", "mean", "lo", "hi")}
    return fig, {"order": table}, _markdown(s, n_seeds)
