"""Table 1 on a language model: each run's outcome, paired gaps, and the paper's orderings.

Used by the figures ``lm_table`` and ``lm_pareto`` (:mod:`ecosim.figures.lm`), which only draw
what these functions decide. Results are the columns of the ``lm`` experiment
(:func:`ecosim.experiments.lm.records_to_results`): method, seed, diverged, val_loss, steps,
curve_step and curve_val, one row per run.
"""
from __future__ import annotations

import json

import numpy as np

from .stats import LEVEL, sign_verdict, t_interval

__all__ = ["EQUIV_MARGIN", "LM_BASE", "LM_LEVEL", "LM_ORDERINGS", "STALL_FROM", "STALL_MIN_DROP",
           "STALL_RATIO", "check_protocol", "gap_change", "lm_cells", "lm_gaps", "lm_orderings",
           "lm_outcomes", "runs_of_seeds"]

LM_LEVEL = LEVEL         # two-sided level of the t-intervals
LM_BASE = "bf16_master"  # gaps are paired to this method (BF16 weights with an FP32 master)
STALL_FROM = 0.5         # the stall window: the evaluations from this fraction of the steps on
STALL_RATIO = 0.25       # stalled: fell by less than this fraction of the baseline's fall ...
STALL_MIN_DROP = 0.01    # ... over the window, while the baseline fell by more than this (nats)
EQUIV_MARGIN = 0.01      # "A ~ B" holds when the 95% interval of A - B lies within +- this

#: The orderings of the paper's Table 1 (30M-800M, C4) checked on the runs:
#: (method A, relation, method B, what the paper measured). ``<``: A ends below B;
#: ``~``: A and B end within :data:`EQUIV_MARGIN`.
LM_ORDERINGS = (
    ("fp8_master_rtn", "~", "bf16_master", "+0.001 to +0.005"),
    ("fp8_eco_sr", "~", "bf16_master", "+0.008 to +0.009"),
    ("fp8_eco_sr", "<", "fp8_naive_sr", "-0.069 to -0.41"),
    ("fp8_eco_sr", "<", "fp8_eco_rtn", "-0.014 to -0.069"),
    ("fp8_eco_rtn", "<", "fp8_naive_sr", "-0.037 to -0.34"),
    ("fp8_eco_rtn", "<", "fp8_naive_rtn", "naive+RTN diverged at every size"),
    ("fp8_naive_sr", "<", "fp8_naive_rtn", "naive+RTN diverged at every size"),
)


def _groups(r, group) -> np.ndarray:
    n = len(r["method"])
    g = np.zeros(n, dtype=np.int64) if group is None else np.asarray(group)
    if g.shape != (n,):
        raise ValueError(f"group needs one entry per run ({n}), got shape {g.shape}")
    return g


def _window_drop(steps: np.ndarray, val: np.ndarray, total: int) -> float:
    """How far the validation loss fell over the stall window (NaN: under two points)."""
    ok = np.isfinite(steps) & np.isfinite(val) & (steps >= STALL_FROM * total)
    if ok.sum() < 2:
        return float("nan")
    v = val[ok][np.argsort(steps[ok])]
    return float(v[0] - v[-1])


def lm_outcomes(r, group=None, base: str = LM_BASE) -> np.ndarray:
    """Each run's outcome: ``"trained"``, ``"diverged"`` or ``"stalled"``.

    ``diverged``: the run stopped on a non-finite or exploding loss (its ``diverged`` flag) or
    ended with a non-finite validation loss. ``stalled``: over the stall window (the
    evaluations at steps ``>= STALL_FROM * steps``, first to last) the run's validation loss
    fell by less than ``STALL_RATIO`` times what the same seed's ``base`` run (same group)
    fell, while that fell by more than ``STALL_MIN_DROP`` nats: flat while the baseline still
    learns. A run whose seed has no trained ``base`` run, and ``base``'s own runs, are judged
    on divergence only.

    Args:
        r: the ``lm`` experiment's result columns.
        group: comparable groups of runs (one label per row; None: all one group).
        base: the reference method.
    """
    g = _groups(r, group)
    method = np.asarray(r["method"]).astype(str)
    seed = np.asarray(r["seed"]).astype(np.int64)
    div = np.asarray(r["diverged"]).astype(bool) | ~np.isfinite(
        np.asarray(r["val_loss"], dtype=np.float64))
    out = np.where(div, "diverged", "trained").astype(object)
    ref = {(g[j], seed[j]): j for j in np.flatnonzero((method == base) & ~div)}
    for i in np.flatnonzero(~div & (method != base)):
        j = ref.get((g[i], seed[i]))
        if j is None:
            continue
        total = int(r["steps"][i])
        mine = _window_drop(r["curve_step"][i], r["curve_val"][i], total)
        theirs = _window_drop(r["curve_step"][j], r["curve_val"][j], total)
        if theirs > STALL_MIN_DROP and mine < STALL_RATIO * theirs:
            out[i] = "stalled"
    return out.astype(str)


def runs_of_seeds(r, other) -> dict[str, np.ndarray]:
    """The rows of result columns ``r`` whose seed ``other`` has runs of (``r`` is not
    modified): a table that sets runs of two experiments side by side compares the same
    seeds, since a mean over five seeds beside one over three (the ``lm`` experiment runs
    seeds 0-4; ``lm_eco_adam`` and the shipped switched runs 0-2) differs by the seeds as
    much as by the method."""
    keep = np.isin(np.asarray(r["seed"]).astype(np.int64),
                   np.unique(np.asarray(other["seed"]).astype(np.int64)))
    return {k: np.asarray(v)[keep] for k, v in r.items()}


def _paired(r, g, oc, c, a: str, b: str) -> tuple[np.ndarray, list[int]]:
    """Per-seed ``val_loss(a) - val_loss(b)`` in group ``c`` over seeds where both trained."""
    def trained(m):
        rows = np.flatnonzero((g == c) & (np.asarray(r["method"]).astype(str) == m)
                              & (oc == "trained"))
        return {int(r["seed"][i]): float(r["val_loss"][i]) for i in rows}
    x, y = trained(a), trained(b)
    seeds = sorted(set(x) & set(y))
    return np.array([x[s] - y[s] for s in seeds]), seeds


def lm_gaps(r, a: str, b: str, group=None, base: str = LM_BASE) -> dict:
    """Per group, the paired gap ``val_loss(a) - val_loss(b)``: :func:`t_interval` of the
    per-seed differences over the seeds where both trained (stalled and diverged runs, judged
    against ``base`` as in :func:`lm_outcomes`, enter no difference), with its ``seeds``.

    Returns:
        ``{group: interval}`` for every group that has runs of both methods.
    """
    g = _groups(r, group)
    oc = lm_outcomes(r, g, base)
    method = np.asarray(r["method"]).astype(str)
    out = {}
    for c in sorted(set(g.tolist())):
        if not ((method[g == c] == a).any() and (method[g == c] == b).any()):
            continue
        diff, seeds = _paired(r, g, oc, c, a, b)
        out[c] = {**t_interval(diff), "seeds": seeds}
    return out


def gap_change(before: dict, after: dict, level: float = LM_LEVEL) -> dict:
    """How a paired gap changes from one column to another (different runs, so independent):
    ``after - before`` of the two means with a Welch interval, and a verdict: ``"grows"``
    when the interval lies above 0, ``"shrinks"`` below 0, else ``"not resolved"`` (also
    when either gap has fewer than two seeds).

    Args:
        before, after: :func:`lm_gaps` intervals (``n``, ``mean``, ``se``).

    Example:
        >>> a = {"n": 5, "mean": 0.00, "se": 0.005}
        >>> gap_change(a, {"n": 5, "mean": 0.03, "se": 0.005})["verdict"]
        'grows'
        >>> gap_change(a, {"n": 5, "mean": 0.005, "se": 0.005})["verdict"]
        'not resolved'
    """
    from scipy import stats

    nan = float("nan")
    d = after["mean"] - before["mean"] if min(before["n"], after["n"]) >= 1 else nan
    if min(before["n"], after["n"]) < 2:
        return {"mean": d, "lo": nan, "hi": nan, "verdict": "not resolved"}
    va, vb = before["se"] ** 2, after["se"] ** 2
    se = float(np.sqrt(va + vb))
    dof = (va + vb) ** 2 / (va**2 / (before["n"] - 1) + vb**2 / (after["n"] - 1)) \
        if se > 0 else float(min(before["n"], after["n"]) - 1)
    h = float(stats.t.ppf(0.5 + level / 2, dof)) * se
    lo, hi = d - h, d + h
    verdict = "grows" if lo > 0 else "shrinks" if hi < 0 else "not resolved"
    return {"mean": d, "lo": lo, "hi": hi, "verdict": verdict}


def check_protocol(ref, runs, vary: tuple[str, ...], remedy: str) -> None:
    """Refuse (ValueError naming the run and the field, ending with ``remedy``) unless every
    run of ``runs`` is the protocol of ``ref``'s runs apart from the fields ``vary`` of their
    :func:`~ecosim.experiments.lm.run_setting` (and the preset, whose model is the field
    ``model``): the one check that lets runs of two experiments stand side by side as
    columns of one table.

    Raises:
        ValueError: ``ref`` holds no runs or more than one protocol (once ``vary`` is set
            aside), or a run of ``runs`` differs from it in another field.
    """
    def rest(setting) -> dict:
        d = json.loads(str(setting))
        return {k: v for k, v in d.items() if k not in vary}

    base = {json.dumps(rest(s), sort_keys=True) for s in ref["setting"]}
    if len(base) != 1:
        raise ValueError(f"the reference runs hold {len(base)} protocols apart from "
                         f"{list(vary)}; expected one")
    want = json.loads(base.pop())
    for i in range(len(runs["method"])):
        got = rest(runs["setting"][i])
        key = next((k for k in sorted(set(got) | set(want)) if got.get(k) != want.get(k)), None)
        if key is not None:
            raise ValueError(f"run {runs['method'][i]} seed {int(runs['seed'][i])} "
                             f"({runs['preset'][i]}) differs from the reference protocol in "
                             f"{key!r} ({got.get(key)!r:.60} vs {want.get(key)!r:.60}): "
                             f"{remedy}")


def lm_cells(r, group=None, base: str = LM_BASE) -> dict:
    """Table 1's cells: per (group, method), the outcomes and the paired gap to ``base``.

    Returns:
        ``{(group, method): cell}``, each cell a dict: ``n`` (runs), ``outcomes`` (count per
        outcome), ``loss`` (:func:`t_interval` of the trained runs' validation losses),
        ``gap`` (:func:`t_interval` of the per-seed gaps ``val_loss - base's`` over the seeds
        where both trained; empty for ``base``), ``seeds`` (those seeds) and ``unpaired``
        (trained seeds without a trained ``base`` run). Diverged and stalled runs enter no
        mean.
    """
    g = _groups(r, group)
    oc = lm_outcomes(r, g, base)
    method = np.asarray(r["method"]).astype(str)
    out = {}
    for c in sorted(set(g.tolist())):
        for m in dict.fromkeys(method[g == c]):
            rows = np.flatnonzero((g == c) & (method == m))
            ok = rows[oc[rows] == "trained"]
            counts = {k: int((oc[rows] == k).sum()) for k in ("trained", "stalled", "diverged")}
            gap, seeds = (_paired(r, g, oc, c, m, base) if m != base else (np.zeros(0), []))
            trained_seeds = {int(r["seed"][i]) for i in ok}
            out[c, m] = {"n": int(rows.size), "outcomes": counts,
                         "loss": t_interval(np.asarray(r["val_loss"], dtype=np.float64)[ok]),
                         "gap": t_interval(gap), "seeds": seeds,
                         "unpaired": sorted(trained_seeds - set(seeds)) if m != base else []}
    return out


def lm_orderings(r, group=None, orderings=LM_ORDERINGS, base: str = LM_BASE) -> list[dict]:
    """The paper's orderings judged on the runs of each group.

    ``A < B`` holds when the 95% t-interval of the per-seed ``val_loss(A) - val_loss(B)`` (seeds
    where both trained) lies below 0 and is ``reversed`` when it lies above; with every run of
    A trained and every run of B stalled or diverged it holds by outcome (and the other way
    round is reversed). ``A ~ B`` holds when the interval lies within +-:data:`EQUIV_MARGIN`
    and ``does not hold`` when it lies outside, or when every run of one of them failed and
    every run of the other trained. Anything else (an interval across the bound,
    fewer than two pairs) is ``not resolved``.

    Returns:
        One dict per (group, ordering): ``group``, ``a``, ``rel``, ``b``, ``paper``,
        ``verdict``, ``how`` (``"interval"`` or ``"outcome"``), ``failed`` (by outcome: which
        of ``"a"``, ``"b"`` failed on every seed; else ``""``) and ``diff``
        (:func:`t_interval` of the paired differences).
    """
    g = _groups(r, group)
    oc = lm_outcomes(r, g, base)
    method = np.asarray(r["method"]).astype(str)
    out = []
    for c in sorted(set(g.tolist())):
        for a, rel, b, paper in orderings:
            ra = np.flatnonzero((g == c) & (method == a))
            rb = np.flatnonzero((g == c) & (method == b))
            if not (ra.size and rb.size):
                continue
            if rel not in ("<", "~"):
                raise ValueError(f"ordering relation must be '<' or '~', got {rel!r}")
            diff = t_interval(_paired(r, g, oc, c, a, b)[0])
            fa, fb = (oc[ra] != "trained"), (oc[rb] != "trained")
            how, verdict = "interval", "not resolved"
            if rel == "<" and not fa.any() and fb.all():
                how, verdict = "outcome", "holds"
            elif rel == "<" and fa.all() and not fb.any():
                how, verdict = "outcome", "reversed"
            elif rel == "~" and fa.all() != fb.all() and not (fa.any() and fb.any()):
                how, verdict = "outcome", "does not hold"  # one failed on every seed
            elif diff["n"] >= 2 and rel == "<":
                verdict = sign_verdict(diff, "<")
            elif diff["n"] >= 2:
                inside = -EQUIV_MARGIN <= diff["lo"] and diff["hi"] <= EQUIV_MARGIN
                outside = diff["lo"] > EQUIV_MARGIN or diff["hi"] < -EQUIV_MARGIN
                verdict = "holds" if inside else "does not hold" if outside else "not resolved"
            failed = ("a" if fa.all() else "b" if fb.all() else "") if how == "outcome" else ""
            out.append({"group": c, "a": a, "rel": rel, "b": b, "paper": paper,
                        "verdict": verdict, "how": how, "failed": failed, "diff": diff})
    return out
