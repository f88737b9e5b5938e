"""DQT's four claims judged on the ``dqt`` experiment: outcomes, paired gaps, verdicts.

The experiment (:mod:`ecosim.experiments.dqt`) trains every method on the same seeds. Here:

* :func:`outcomes` classifies each run: ``"diverged"`` (stopped or ended above its initial
  validation loss, as :func:`~ecosim.experiments.mlp_methods.run_training` flags it),
  ``"stalled"`` (finished, but covered less than :data:`STALL_FRACTION` of the way from its
  own initial validation loss down to FP32 AdamW's final loss on the same seed), else
  ``"trained"``. Only trained runs enter a mean;
  the others are counted.
* :func:`paired_gap` is the mean over seeds of ``final(method) - final(base)`` on the seeds
  where both trained, with a two-sided 95% Student-t interval (n - 1 degrees of freedom).
* :func:`evaluate` states each claim of Zhao et al. (arXiv 2412.04787) with the number that
  tests it and a verdict ``"holds"``, ``"partly"`` or ``"no"`` by a criterion fixed in the
  constants below; :func:`claims_markdown` and :func:`gap_table_markdown` render them.

The figures :mod:`ecosim.figures.dqt` only draw these numbers.
"""
from __future__ import annotations

import math

import numpy as np

from .stats import LEVEL, counts_text, interval_text, t_interval
from .table import Claim, markdown, verdict_of

__all__ = ["STALL_FRACTION", "TOL_COMPETITIVE", "TOL_STATES",
           "OUTCOMES", "outcomes", "paired_gap", "method_label", "summary", "evaluate",
           "claims_markdown", "gap_table_markdown", "competitive_tolerance", "loss_reduction",
           "competitive_verdict"]

STALL_FRACTION = 0.5      # "stalled": less than half the way from its start to FP32's final
TOL_COMPETITIVE = 0.25    # (2), (4) "on par": within a quarter of BitNet's own gap to FP32
TOL_STATES = 0.05         # (3) "degrades slightly": within 5% of the FP32 run's loss reduction
OUTCOMES = ("trained", "stalled", "diverged")

_BITS_LABEL = {"ternary": "ternary", "int2": "INT2", "int4": "INT4", "int8": "INT8"}


def method_label(method: str) -> str:
    """A readable label of a method name of :func:`ecosim.experiments.dqt.methods`."""
    if method == "fp32":
        return "AdamW FP32"
    if method == "bitnet":
        return "BitNet b1.58 (FP32 master, STE)"
    parts = method.split("_")
    if len(parts) < 3 or parts[0] not in ("dqt", "eco") or parts[1] not in _BITS_LABEL:
        raise ValueError(f"unknown DQT experiment method {method!r}")
    name = "DQT" if parts[0] == "dqt" else "ECO"
    text = f"{name} {_BITS_LABEL[parts[1]]} {parts[2].upper()}"
    rest = parts[3:]
    if rest == ["ternary", "inference"]:
        return text + ", run ternary"
    if len(rest) == 1 and rest[0].startswith("act"):
        return text + f", INT{rest[0][3:]} activations"
    if len(rest) == 2 and rest[0] == "env":
        return text + f", {rest[1].upper()} environment"
    if rest == ["absmax"]:
        return text + ", absmax scale"
    if rest:
        return text + f", m,v {rest[0].upper()}"
    return text


def _rows(run, method: str) -> np.ndarray:
    rows = np.flatnonzero(run["unit_method"] == method)
    if rows.size == 0:
        raise KeyError(f"the dqt run has no method {method!r}")
    return rows[np.argsort(run["unit_seed"][rows], kind="stable")]


def outcomes(run) -> np.ndarray:
    """The outcome (:data:`OUTCOMES`) of every unit of the run, in unit order."""
    final, init = run["final_val_loss"], run["init_val_loss"]
    ref = {int(run["unit_seed"][i]): i for i in _rows(run, "fp32")}
    out = []
    for i in range(len(final)):
        if bool(run["diverged"][i]) or not math.isfinite(float(final[i])):
            out.append("diverged")
            continue
        j = ref.get(int(run["unit_seed"][i]))
        if j is None or bool(run["diverged"][j]):
            raise ValueError(f"seed {int(run['unit_seed'][i])}: no trained FP32 reference run")
        need = STALL_FRACTION * (float(init[i]) - float(final[j]))
        out.append("trained" if float(init[i]) - float(final[i]) >= need else "stalled")
    return np.array(out)


def paired_gap(run, method: str, base: str, *, value: str = "final_val_loss",
               base_value: str | None = None, accept: tuple[str, ...] = ("trained",)) -> dict:
    """``value(method) - base_value(base)`` over the seeds where both runs trained.

    ``accept`` widens the outcomes of ``method``'s runs that are paired (e.g. ``("trained",
    "stalled")`` for a model evaluated differently from how it trained); ``base``'s runs must
    have trained.

    Returns:
        ``{"n", "mean", "se", "lo", "hi", "gaps", "seeds"}``: n pairs, their mean, standard
        error and 95% t-interval ``[lo, hi]`` (NaN below 2 pairs), and the pairs' gaps.
    """
    oc = outcomes(run)
    rows, brows = _rows(run, method), _rows(run, base)
    bmap = {int(run["unit_seed"][j]): j for j in brows}
    base_value = base_value or value
    gaps, seeds = [], []
    for i in rows:
        s = int(run["unit_seed"][i])
        j = bmap.get(s)
        if j is not None and oc[i] in accept and oc[j] == "trained":
            gaps.append(float(run[value][i]) - float(run[base_value][j]))
            seeds.append(s)
    gaps = np.array(gaps)
    return {**t_interval(gaps, LEVEL), "gaps": gaps, "seeds": np.array(seeds, np.int64)}


def summary(run) -> list[dict]:
    """Per method, in run order: label, outcome counts, mean final loss of the trained runs,
    the paired gap to FP32 (:func:`paired_gap`) and the static bytes per parameter."""
    oc = outcomes(run)
    out = []
    for m in dict.fromkeys(run["unit_method"].tolist()):
        rows = _rows(run, m)
        trained = rows[oc[rows] == "trained"]
        f = run["final_val_loss"][trained]
        out.append({"method": m, "label": method_label(m), "n": int(rows.size),
                    **{k: int(np.sum(oc[rows] == k)) for k in OUTCOMES},
                    "mean": float(f.mean()) if f.size else math.nan,
                    "gap": paired_gap(run, m, "fp32"),
                    "bytes": float(run["bytes_per_param"][rows[0]])})
    return out


# -- the claims ----------------------------------------------------------------------------------

def _counts(run, method: str) -> str:
    oc = outcomes(run)[_rows(run, method)]
    return counts_text({k: int(np.sum(oc == k)) for k in OUTCOMES})


def _claim_converges(run, cfg) -> Claim:
    oc = outcomes(run)
    parts, flags, pts = [], [], []
    for b in cfg.bits:
        m = f"dqt_{b}_sr"
        rows = _rows(run, m)
        ok = bool(np.all(oc[rows] == "trained"))
        flags.append(ok)
        gap = paired_gap(run, m, "fp32")
        parts.append(f"{_BITS_LABEL[b]}: {_counts(run, m)}; "
                     f"gap to FP32 {interval_text(gap)}")
        pts.append((method_label(m), gap["mean"], gap["lo"], gap["hi"]))
    return Claim(
        1, "Training directly on ternary or n-bit weights with SR converges",
        "DQT (no master copy, SR onto the previous step's grid) trains LLaMA-style models even "
        "with ternary weights",
        "final validation loss of DQT+SR minus FP32 AdamW, paired by seed, mean [95% "
        "t-interval]: " + "; ".join(parts),
        verdict_of(flags, "holds"),
        f"every seed of every grid trained (did not diverge, and covered at least "
        f"{100 * STALL_FRACTION:g}% of the way from its initial loss to FP32's final loss): "
        f"{sum(flags)}/{len(flags)} grids "
        "(holds: all; partly: some)",
        pts)


def competitive_verdict(gap: dict, tol: float) -> str:
    """Claim (2)'s verdict on a paired gap (DQT minus BitNet, a :func:`t_interval` dict):
    ``"holds"`` when the interval's upper end is within ``tol``, ``"partly"`` when the mean
    is, else ``"no"``; ``"no"`` when ``tol`` is not a positive number (nothing to be on par
    within)."""
    if not (math.isfinite(tol) and tol > 0):
        return "no"
    if gap["n"] >= 2 and gap["hi"] <= tol:
        return "holds"
    if gap["n"] >= 1 and gap["mean"] <= tol:
        return "partly"
    return "no"


def competitive_tolerance(run) -> tuple[float, dict]:
    """Claims (2) and (4)'s tolerance, :data:`TOL_COMPETITIVE` times BitNet's paired gap to
    FP32 (NaN when that gap is not positive: BitNet loses nothing to be on par with), and
    the gap."""
    fp = paired_gap(run, "bitnet", "fp32")
    tol = TOL_COMPETITIVE * fp["mean"] if fp["n"] >= 1 and fp["mean"] > 0 else math.nan
    return tol, fp


def _tol_text(tol: float, fp: dict) -> str:
    share = f"{TOL_COMPETITIVE:g} x BitNet's gap to FP32"
    return f"{share} (= {tol:.4f})" if math.isfinite(tol) else f"{share} (not positive: none)"


def _claim_bitnet(run, cfg) -> Claim:
    m = f"dqt_{cfg.states_bits}_sr_act{cfg.act_bits}"
    unmatched = f"dqt_{cfg.states_bits}_sr"
    gap = paired_gap(run, m, "bitnet")
    tol, fp = competitive_tolerance(run)
    verdict = competitive_verdict(gap, tol)
    raw = paired_gap(run, unmatched, "bitnet")
    bits = _BITS_LABEL[cfg.states_bits]
    return Claim(
        2, f"{bits} DQT is competitive with BitNet b1.58",
        "8-bit DQT reaches BitNet b1.58's loss",
        f"DQT {bits} SR with INT{cfg.act_bits} activations (as BitNet's) minus BitNet b1.58: "
        f"{interval_text(gap)}; BitNet minus FP32: {interval_text(fp)}; with FP32 "
        f"activations (not matched): {interval_text(raw)}; BitNet {_counts(run, 'bitnet')}, "
        f"DQT {_counts(run, m)}",
        verdict,
        f"matched activations; upper end of the interval ≤ {_tol_text(tol, fp)} (holds); the "
        "mean within it (partly)",
        [(f"{method_label(m)} − BitNet", gap["mean"], gap["lo"], gap["hi"]),
         (f"{method_label(unmatched)} − BitNet", raw["mean"], raw["lo"], raw["hi"])])


def loss_reduction(run, method: str) -> float:
    """Mean over trained seeds of ``init - final`` validation loss of ``method``."""
    rows = _rows(run, method)
    ok = rows[outcomes(run)[rows] == "trained"]
    if not ok.size:
        return math.nan
    return float(np.mean(run["init_val_loss"][ok] - run["final_val_loss"][ok]))


def _claim_states(run, cfg) -> Claim:
    from ..experiments.dqt import ENVIRONMENTS

    base = f"dqt_{cfg.states_bits}_sr"
    oc = outcomes(run)
    tol = TOL_STATES * loss_reduction(run, base)
    parts, flags, pts = [], [], []
    for env in ENVIRONMENTS:
        m = f"{base}_env_{env}"
        gap = paired_gap(run, m, base)
        rows = _rows(run, m)
        ok = (rows.size > 0 and bool(np.all(oc[rows] == "trained")) and gap["n"] >= 2
              and math.isfinite(tol) and gap["hi"] <= tol)
        flags.append(ok)
        parts.append(f"{env.upper()} environment: {interval_text(gap)}, {_counts(run, m)}")
        pts.append((f"{env.upper()} environment − FP32", gap["mean"], gap["lo"], gap["hi"]))
    for f in cfg.state_formats:  # reported: the moments alone, the forward in FP32
        gap = paired_gap(run, f"{base}_{f}", base)
        parts.append(f"m,v {f.upper()} only: {interval_text(gap)}")
        pts.append((f"m,v {f.upper()} − FP32 states", gap["mean"], gap["lo"], gap["hi"]))
    return Claim(
        3, "Training in BF16/FP8 environments instead of FP32 costs little",
        "moving DQT from FP32 to BF16 or FP8 environments degrades the loss only slightly",
        f"DQT {_BITS_LABEL[cfg.states_bits]} SR in the environment (BF16: weights and "
        "activations in BF16 in the forward, m,v BF16; FP8: activations E4M3 per row, m,v "
        "E4M3) minus the same in FP32: " + "; ".join(parts),
        verdict_of(flags, "holds"),
        f"all seeds trained and the interval's upper end ≤ {100 * TOL_STATES:g}% of the FP32 "
        f"run's loss reduction (= {tol:.4f}): {sum(flags)}/{len(flags)} environments (holds: "
        "all; partly: some)",
        pts)


def _claim_ternary_inference(run, cfg) -> Claim:
    base = f"dqt_{cfg.states_bits}_sr"
    m = f"{base}_ternary_inference"
    oc = outcomes(run)
    rows, brows = _rows(run, m), _rows(run, base)
    bmap = {int(run["unit_seed"][j]): j for j in brows}
    kept = []
    for i in rows:
        j = bmap.get(int(run["unit_seed"][i]))
        if j is None or oc[j] != "trained" or not math.isfinite(run["final_val_loss"][i]):
            continue
        init, fin = float(run["init_val_loss"][j]), float(run["final_val_loss"][j])
        kept.append((init - float(run["final_val_loss"][i])) / (init - fin))
    k = t_interval(np.array(kept), LEVEL)
    # the re-quantized model is judged by its loss, whatever its outcome label, against
    # BitNet b1.58's ternary model of the same size, data and steps (the paper's comparison)
    vsb = paired_gap(run, m, "bitnet", accept=("trained", "stalled"))
    tol, fp = competitive_tolerance(run)
    verdict = competitive_verdict(vsb, tol)
    vs8 = paired_gap(run, m, base, accept=("trained", "stalled"))
    kept_txt = (f"{k['mean']:.3f} [{k['lo']:.3f}, {k['hi']:.3f}] (n={k['n']})" if k["n"] >= 2
                else f"n={k['n']}")
    bits = _BITS_LABEL[cfg.states_bits]
    return Claim(
        4, f"A model trained at {bits} runs ternary at inference",
        "the 8-bit DQT model re-quantized to ternary is competitive with BitNet b1.58's "
        "ternary model",
        f"DQT {bits} re-quantized to absmean ternary minus BitNet b1.58: {interval_text(vsb)}; "
        f"BitNet minus FP32: {interval_text(fp)}; gap to the {bits} model "
        f"{interval_text(vs8)}; fraction of its loss reduction kept: {kept_txt}",
        verdict,
        f"upper end of the interval ≤ {_tol_text(tol, fp)} (holds); the mean within it "
        "(partly)",
        [("ternary inference − BitNet", vsb["mean"], vsb["lo"], vsb["hi"])])


def evaluate(run) -> list[Claim]:
    """The four claims of the DQT paper, in its order, judged on a ``dqt`` run."""
    cfg = run.config
    return [_claim_converges(run, cfg), _claim_bitnet(run, cfg), _claim_states(run, cfg),
            _claim_ternary_inference(run, cfg)]


def claims_markdown(items: list[Claim]) -> str:
    """The claims as a markdown table (the README quotes it)."""
    return markdown(items, ("claim (Zhao et al., arXiv 2412.04787)", "paper", "measured here",
                            "verdict"), "holds")


def gap_table_markdown(run) -> str:
    """Per method: outcomes, mean final loss, paired gap to FP32 with its interval, bytes."""
    cfg = run.config
    lines = [f"| method | trained / stalled / diverged | final val loss (trained) | "
             f"gap to FP32, mean [95% t-interval] | bytes/param |", "|---|---|---|---|---|"]
    for r in summary(run):
        g = r["gap"]
        gap = (f"{g['mean']:+.4f} [{g['lo']:+.4f}, {g['hi']:+.4f}]" if g["n"] >= 2 else
               ("—" if r["method"] == "fp32" else f"n={g['n']}"))
        if r["method"] == "fp32":
            gap = "0 (reference)"
        mean = f"{r['mean']:.4f}" if math.isfinite(r["mean"]) else "—"
        lines.append(f"| {r['label']} | {r['trained']} / {r['stalled']} / {r['diverged']} | "
                     f"{mean} | {gap} | {r['bytes']:g} |")
    lines += ["", f"MLP 8-{cfg.width}x{cfg.depth}-2, {cfg.steps} steps, {cfg.seeds} seeds "
              "paired by seed (initial weights, batch order, SR draws); a gap averages only "
              "the seeds where both runs trained. Bytes/param: static memory of weights and "
              "AdamW moments, every parameter in the weight format, scales left out."]
    return "\n".join(lines)
