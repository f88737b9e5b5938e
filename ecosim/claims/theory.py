"""The theory claims of docs/theory.md §5 judged on the runs: one :class:`Claim` per claim, with
what the theory predicts (computed from :mod:`ecosim.theory`), what the runs measured, and a
verdict decided by an explicit criterion.

:func:`evaluate` reads the theory experiments behind figures 2-6 (``floor``,
``floor_additive``, ``beta_factor``, ``naive_decay``, ``rtn_stall``, ``error_similarity``);
:func:`claims_markdown` renders the verdicts as the table the README quotes. Every number is
computed here from the runs; nothing is typed in. The criteria are fixed in this module
(``TOL_*`` and ``MAX_*``/``MIN_*`` constants), so a verdict changes only when a run does. The
figure :mod:`ecosim.figures.claims` draws the claims' points (each claim's ``points``:
``(row label, measured, standard error, predicted, marker key)``); it decides nothing.
"""
from __future__ import annotations

import numpy as np

from .. import theory
from .table import Claim, markdown, verdict_of

__all__ = ["HEADER", "TOL_CLOSED_FORM", "TOL_ETA_LAW", "TOL_FP8_PARTLY", "TOL_GROWTH_ECO",
           "TOL_GROWTH_NAIVE", "Claim", "claims_markdown", "evaluate"]

TOL_CLOSED_FORM = 0.05    # uniform-grid SR floors vs the closed forms (issue 4's 5%)
TOL_FP8_PARTLY = 0.15     # FP8 E4M3: "partly" when beyond 5% but within this
TOL_ETA_LAW = 0.05        # 2 L eta * naive floor vs 1 at the smallest lr
TOL_ADDITIVE = 0.10       # additive model's naive/master absolute floor vs its closed form
MAX_SR_NAIVE_OVER_MASTER = 2.0   # "does not blow up": naive+SR within 2x of master+SR
SLOPE_RANGE = (0.8, 1.2)  # naive's sigma_emp^2 ~ lr: log-log slope
TOL_GROWTH_NAIVE = 0.25   # decaying LR: naive's growth factor vs the quasi-static prediction
TOL_GROWTH_ECO = 0.10     # ... and eco's
MAX_REL_DIFF_RTN = 0.5    # error similarity: ECO's substitution of e_t for e_t+1 at most half wrong
MAX_REL_DIFF_USEFUL = 1.0  # ... below this, injecting e_t beats injecting nothing
MAX_COS_SR = 0.1          # ... SR "decorrelates"

#: the kinds of noise on which claim 9 compares absolute floors, with their labels
_PRICE_KINDS = {"additive": "additive model", "uniform": "real SR",
                "uniform_noise": "real SR + gradient noise"}

HEADER = ("claim", "theory (docs/theory.md §5)", "measured", "holds?")

_SCHEMES = ("master", "naive", "eco")


# -- helpers ------------------------------------------------------------------------------------

def _g(x, sig: int = 4) -> str:
    """A number with ``sig`` significant digits (no exponent for everyday magnitudes)."""
    x = float(x)
    if not np.isfinite(x):
        raise ValueError(f"non-finite value {x!r} in the claims table")
    s = f"{x:.{sig}g}"
    return s.replace("e-0", "e-").replace("e+0", "e+")


def _sg(x, sig: int = 2) -> str:
    """:func:`_g` with an explicit sign."""
    return ("+" if float(x) >= 0 else "") + _g(x, sig)


def _decimals(se) -> int:
    """Decimal places that show a standard error to two significant digits."""
    se = float(se)
    return max(0, 1 - int(np.floor(np.log10(se)))) if se > 0 and np.isfinite(se) else 4


def _fix(x, d: int) -> str:
    x = float(x)
    if not np.isfinite(x):
        raise ValueError(f"non-finite value {x!r} in the claims table")
    return f"{x:.{d}f}"


def _pm(v, se) -> str:
    """``v ± se``, both to the decimal place of the error's second significant digit."""
    d = _decimals(se)
    return f"{_fix(v, d)} ± {_fix(se, d)}"


def _pct(dev) -> str:
    """A relative deviation in percent: one decimal, two significant digits below 1%."""
    p = 100 * float(dev)
    return f"{p:+.1f}%" if abs(p) >= 1 else f"{p:+.2g}%"


def _conditions(conds) -> tuple[str, str]:
    """Verdict and criterion text from named conditions ``[(text, [bool, ...]), ...]``: each
    condition is shown with how many of its cases were met; yes when all are, partly when
    some are, no when none is."""
    flat = [bool(x) for _, oks in conds for x in oks]
    text = "; ".join(f"{t} [{sum(map(bool, oks))}/{len(oks)}]" for t, oks in conds)
    return verdict_of(flat), f"{text} (yes: all met; partly: some)"


def _sel(run, **where) -> np.ndarray:
    """Indices of the stacked units with ``unit_<field> == value``, sorted by lr if present."""
    first = next(iter(where))
    mask = np.ones(len(run[f"unit_{first}"]), bool)
    for k, v in where.items():
        col = run[f"unit_{k}"]
        mask &= np.isclose(col, v) if col.dtype.kind == "f" else (col == v)
    idx = np.flatnonzero(mask)
    if "unit_lr" in run:
        idx = idx[np.argsort(run["unit_lr"][idx], kind="stable")]
    return idx


def _L(run) -> float:
    return float(getattr(run.config, "L", 1.0))


# -- the claims ---------------------------------------------------------------------------------

def _claim_floors(floor) -> Claim:
    rows = [i for s in _SCHEMES for i in _sel(floor, grid="uniform", mode="sr", scheme=s)]
    rows = np.array(rows, int)
    ratio, se, cf = floor["ratio"][rows], floor["ratio_se"][rows], floor["closed_form"][rows]
    dev = ratio / cf - 1.0
    betas = np.unique(floor["unit_beta"][rows])
    lrs = np.unique(floor["unit_lr"][rows])
    b, lr = float(betas.max()), float(lrs.min())
    show_m, show_t = [], []
    for s in _SCHEMES:
        (i,) = _sel(floor, grid="uniform", mode="sr", scheme=s, beta=b, lr=lr)
        show_m.append(f"{s} {_pm(floor['ratio'][i], floor['ratio_se'][i])}")
        show_t.append(f"{s} {_fix(floor['closed_form'][i], _decimals(floor['ratio_se'][i]))}")
    w = int(np.argmax(np.abs(dev)))
    wi = rows[w]
    zs = (ratio - cf) / np.where(se > 0, se, np.inf)
    z = float(zs[w])
    means = [f"{s} {_pct(np.mean(dev[floor['unit_scheme'][rows] == s]))}" for s in _SCHEMES]
    within = np.abs(dev) <= TOL_CLOSED_FORM
    pts = [(f"(1) uniform SR: {floor['unit_scheme'][i]}", floor["ratio"][i],
            floor["ratio_se"][i], floor["closed_form"][i], float(floor["unit_beta"][i]))
           for i in rows]
    return Claim(
        1, "Normalised noise floors, real SR, uniform grid",
        "E‖x̂−x*‖²/d ÷ σ²_emp follows the additive-noise closed forms: master → 1, "
        f"naive ≈ 1/(2Lη), ECO → 1/(1−β²). At β={_g(b)}, η={_g(lr)}: " + ", ".join(show_t),
        f"β={_g(b)}, η={_g(lr)}: " + ", ".join(show_m)
        + f". Worst deviation over all {rows.size} runs "
        f"(β ∈ {{{', '.join(_g(x) for x in betas)}}}, "
        f"η {_g(lrs.min())}–{_g(lrs.max())}): {_pct(dev[w])} "
        f"({floor['unit_scheme'][wi]}, β={_g(floor['unit_beta'][wi])}, "
        f"η={_g(floor['unit_lr'][wi])}; {z:+.1f} SE); {int(np.sum(np.abs(zs) <= 2))}/{rows.size} "
        "within 2 SE. Mean deviation: " + ", ".join(means),
        verdict_of(within),
        f"{int(within.sum())}/{rows.size} runs within {100 * TOL_CLOSED_FORM:g}% of their "
        "closed form (yes: all; partly: some)",
        pts)


def _claim_beta_factor(beta_factor) -> Claim:
    bf = beta_factor
    uni = np.flatnonzero(bf["tab_kind"] == "uniform")
    lr = float(bf["tab_lr"][uni].min())
    sel = uni[np.isclose(bf["tab_lr"][uni], lr)]
    sel = sel[np.argsort(bf["tab_beta"][sel])]
    r, se = bf["tab_ratio"][sel], bf["tab_ratio_se"][sel]
    lim, exact = bf["tab_limit"][sel], bf["tab_exact"][sel]
    dev = r / lim - 1.0
    z_exact = (r - exact) / np.where(se > 0, se, np.inf)
    within = np.abs(dev) <= TOL_CLOSED_FORM
    per_beta = [f"β={_g(b)}: {_pm(v, s)}" for b, v, s in zip(bf["tab_beta"][sel], r, se)]
    lims = [f"{_g(b)}: {_g(x)}" for b, x in zip(bf["tab_beta"][sel], lim)]
    pts = [("(2) eco/master ÷ 1/(1−β²)", v, s, x, float(b))
           for b, v, s, x in zip(bf["tab_beta"][sel], r, se, lim)]
    return Claim(
        2, "ECO's price in normalised floors: eco/master → 1/(1−β²)",
        f"ratio of the normalised floors → 1/(1−β²) as η → 0 (β {'; '.join(lims)}); the exact "
        f"closed-form ratio at η={_g(lr)} is below it by at most "
        f"{100 * float(np.max(1 - exact / lim)):.2f}%",
        f"real SR, uniform grid, η={_g(lr)}: " + "; ".join(per_beta)
        + f". Worst deviation from 1/(1−β²): {_pct(dev[np.argmax(np.abs(dev))])}; from the "
        f"exact ratio: {float(np.max(np.abs(z_exact))):.1f} SE at most",
        verdict_of(within),
        f"{int(within.sum())}/{sel.size} betas within {100 * TOL_CLOSED_FORM:g}% of 1/(1−β²) "
        "(yes: all; partly: some)",
        pts)


def _claim_eta_law(floor) -> Claim:
    L = _L(floor)
    lr = float(np.unique(floor["unit_lr"]).min())
    betas = np.unique(floor["unit_beta"])
    meas, theo, pts, ok = [], [], [], []
    for b in betas:
        (i,) = _sel(floor, grid="uniform", mode="sr", scheme="naive", beta=b, lr=lr)
        k = 2.0 * L * lr
        v, s, cf = k * floor["ratio"][i], k * floor["ratio_se"][i], k * floor["closed_form"][i]
        meas.append(f"β={_g(b)}: {_pm(v, s)}")
        theo.append(f"β={_g(b)}: {_fix(cf, _decimals(s))}")
        pts.append(("(3) 2Lη × naive floor", v, s, 1.0, float(b)))
        ok.append(abs(v - 1.0) <= TOL_ETA_LAW)
    return Claim(
        3, "Naive removal's 1/η law",
        "naive's normalised floor ≈ 1/(2Lη), so 2Lη × floor → 1 as η → 0 "
        f"(closed form at η={_g(lr)}: {'; '.join(theo)})",
        f"real SR, uniform grid, η={_g(lr)}: 2Lη × floor = " + "; ".join(meas),
        verdict_of(ok),
        f"{sum(ok)}/{len(ok)} betas within {100 * TOL_ETA_LAW:g}% of 1 (yes: all; partly: some)",
        pts)


def _claim_fp8(floor, beta_factor) -> Claim:
    bf = beta_factor
    rows = np.array([i for s in _SCHEMES for i in _sel(floor, grid="e4m3", mode="sr", scheme=s)],
                    int)
    e4 = np.flatnonzero(bf["tab_kind"] == "e4m3")
    devs, pts, parts = [], [], []
    if rows.size:
        dev = floor["ratio"][rows] / floor["closed_form"][rows] - 1.0
        w = int(np.argmax(np.abs(dev)))
        wi = rows[w]
        devs.append(dev)
        parts.append(f"normalised floors, {rows.size} runs (master, naive, ECO; every β and η): "
                     f"worst deviation {_pct(dev[w])} ({floor['unit_scheme'][wi]}, "
                     f"β={_g(floor['unit_beta'][wi])}, η={_g(floor['unit_lr'][wi])})")
        pts += [(f"(4) FP8 E4M3: {floor['unit_scheme'][i]}", floor["ratio"][i],
                 floor["ratio_se"][i], floor["closed_form"][i], float(floor["unit_beta"][i]))
                for i in rows]
    if e4.size:
        dev = bf["tab_ratio"][e4] / bf["tab_exact"][e4] - 1.0
        w = int(np.argmax(np.abs(dev)))
        devs.append(dev)
        parts.append(f"eco/master ratio at η={_g(bf['tab_lr'][e4].min())}, {e4.size} betas: "
                     f"worst deviation from the exact ratio {_pct(dev[w])} "
                     f"(β={_g(bf['tab_beta'][e4][w])})")
        pts += [("(4) FP8 E4M3: eco/master", bf["tab_ratio"][i], bf["tab_ratio_se"][i],
                 bf["tab_exact"][i], float(bf["tab_beta"][i])) for i in e4]
    if not devs:
        raise ValueError("claims: no FP8 E4M3 runs in floor or beta_factor")
    worst = float(np.max(np.abs(np.concatenate(devs))))
    verdict = ("yes" if worst <= TOL_CLOSED_FORM else
               "partly" if worst <= TOL_FP8_PARTLY else "no")
    return Claim(
        4, "The same closed forms on FP8 E4M3",
        "not covered by the theory (non-uniform grid, absmax scale recomputed every write); "
        "normalising by each scheme's measured σ²_emp should absorb the grid's local step",
        "; ".join(parts),
        verdict,
        f"worst deviation {100 * worst:.1f}% (yes: within {100 * TOL_CLOSED_FORM:g}% like the "
        f"uniform grid; partly: within {100 * TOL_FP8_PARTLY:g}%; no: beyond)",
        pts)


def _claim_absolute(floor, floor_additive) -> Claim:
    add = floor_additive
    L = _L(add)
    lr = float(np.unique(floor["unit_lr"]).min())
    meas, theo, pts = [], [], []
    ok_sr, ok_slope, ok_add = [], [], []
    for b in np.unique(floor["unit_beta"]):
        ex = {s: float(floor["ex2"][_sel(floor, grid="uniform", mode="sr", scheme=s, beta=b,
                                           lr=lr)[0]]) for s in ("master", "naive")}
        sr = ex["naive"] / ex["master"]
        nv = _sel(floor, grid="uniform", mode="sr", scheme="naive", beta=b)
        slope = float(np.polyfit(np.log(floor["unit_lr"][nv]), np.log(floor["s2"][nv]), 1)[0])
        cf = (theory.quadratic_stationary("naive", L, lr, b, 1.0)
              / theory.quadratic_stationary("master", L, lr, b, 1.0))
        ia = {s: _sel(add, scheme=s, beta=b, lr=lr) for s in ("master", "naive")}
        has_add = all(i.size for i in ia.values())
        txt = f"β={_g(b)}: real SR {_g(sr, 3)}×"
        pts.append(("(5) naive/master absolute floor", sr, 0.0, cf, float(b)))
        ok_sr.append(sr <= MAX_SR_NAIVE_OVER_MASTER)
        ok_slope.append(SLOPE_RANGE[0] <= slope <= SLOPE_RANGE[1])
        if has_add:
            am = float(add["ex2"][ia["naive"][0]] / add["ex2"][ia["master"][0]])
            txt += f", additive model {_g(am, 3)}×"
            pts.append(("(5) additive model", am, 0.0, cf, float(b)))
            ok_add.append(abs(am / cf - 1.0) <= TOL_ADDITIVE)
        txt += f"; naive's σ²_emp ∝ η^{slope:.2f} (fit over η {_g(floor['unit_lr'][nv].min())}–" \
               f"{_g(floor['unit_lr'][nv].max())})"
        meas.append(txt)
        theo.append(f"β={_g(b)}: {_g(cf, 3)}×")
    conds = [(f"real SR ratio ≤ {_g(MAX_SR_NAIVE_OVER_MASTER)}×", ok_sr),
             (f"σ²_emp slope in [{_g(SLOPE_RANGE[0])}, {_g(SLOPE_RANGE[1])}]", ok_slope)]
    if ok_add:
        conds.append((f"additive model within {100 * TOL_ADDITIVE:g}% of its closed form",
                      ok_add))
    verdict, criterion = _conditions(conds)
    return Claim(
        5, "Absolute floor: naive+SR does not blow up with exact gradients",
        "additive model (fixed σ²): naive's absolute floor over master's is the closed-form "
        f"ratio ≈ 1/(2Lη), at η={_g(lr)} " + ", ".join(theo) + "; real SR: naive's σ²_emp "
        "shrinks ∝ η, which cancels the 1/η",
        f"naive/master absolute floor E‖x̂−x*‖²/d at η={_g(lr)}: " + "; ".join(meas),
        verdict, "for every β: " + criterion, pts)


def _claim_decay(naive_decay) -> Claim:
    nd = naive_decay
    cfg = nd.config
    L, beta = float(cfg.L), float(cfg.beta)
    g = {}
    for s in _SCHEMES:
        (i,) = _sel(nd, scheme=s, mode="sr", grad_noise=0.0)
        lp, le = float(nd["lr_peak"][i]), float(nd["lr_end"][i])
        meas = float(nd["normalised_end"][i] / nd["normalised_peak"][i])
        pred = float(theory.quadratic_stationary(s, L, le, beta, 1.0)
                     / theory.quadratic_stationary(s, L, lp, beta, 1.0))
        g[s] = (meas, pred, lp, le)
    lp, le = g["naive"][2], g["naive"][3]
    verdict, criterion = _conditions([
        (f"naive's growth within {100 * TOL_GROWTH_NAIVE:g}% of the prediction",
         [abs(g["naive"][0] / g["naive"][1] - 1.0) <= TOL_GROWTH_NAIVE]),
        (f"ECO's within {100 * TOL_GROWTH_ECO:g}%",
         [abs(g["eco"][0] / g["eco"][1] - 1.0) <= TOL_GROWTH_ECO])])
    return Claim(
        6, "Decaying LR: naive's normalised error grows, ECO's stays bounded",
        f"quasi-static closed forms, mean η {_g(lp, 3)} (peak plateau) → {_g(le, 3)} (last 10%), "
        f"β={_g(beta)}: naive ×{_g(g['naive'][1], 3)}, ECO ×{_g(g['eco'][1], 3)}, "
        f"master ×{_g(g['master'][1], 3)}",
        "warmup + cosine, exact gradients, SR: normalised error grows naive "
        f"×{_g(g['naive'][0], 3)}, ECO ×{_g(g['eco'][0], 3)}, master ×{_g(g['master'][0], 3)}",
        verdict, criterion,
        [(f"(6) growth factor: {s}", g[s][0], 0.0, g[s][1], None) for s in _SCHEMES])


def _claim_rtn(rtn_stall) -> Claim:
    r = rtn_stall
    idx = {str(s): i for i, s in enumerate(r["unit_scheme"])}
    h = 2.0 * float(r["threshold"])
    pn, on = r["naive_predicted"], r["naive_observed"]
    ep, eo = r["eco_predicted"], r["eco_observed"]
    cens, cens_ok = int(r["eco_censored"]), int(r["eco_censored_ok"])
    n_ok, e_ok = int(np.sum(pn == on)), int(np.sum(ep == eo))
    final = {s: np.abs(r["x"][i][-1] - r["xstar"][i]) / h for s, i in idx.items()}
    T = r["u"].shape[1]
    fr = [n_ok / max(pn.size, 1), e_ok / max(ep.size, 1), cens_ok / cens if cens else 1.0]
    verdict = "yes" if all(f == 1.0 for f in fr) else (
        "partly" if all(f >= 0.9 for f in fr) else "no")
    pts = ([("(7) RTN: naive stall step", (o + 1) / (p + 1), 0.0, 1.0, None)
            for p, o in zip(pn, on)]
           + [("(7) RTN: ECO release step", (o + 1) / (p + 1), 0.0, 1.0, None)
              for p, o in zip(ep, eo)])
    return Claim(
        7, "RTN stall and ECO's release",
        "naive+RTN freezes at the first step with η‖m'‖ and η‖g‖ both below h/2; ECO's momentum "
        "accumulates (m → m + (1−β)g/β per stuck step) and releases at a predicted step",
        f"naive stall step exact for {n_ok}/{pn.size} coordinates (median step "
        f"{_g(np.median(on), 4)}); ECO release step exact for {e_ok}/{ep.size} stuck phases, "
        f"{cens_ok}/{cens} phases still stuck at step {T} predicted past it. Final distance to "
        f"x* in grid steps h (median, max): naive {_g(np.median(final['naive']), 3)}, "
        f"{_g(final['naive'].max(), 3)}; ECO {_g(np.median(final['eco']), 3)}, "
        f"{_g(final['eco'].max(), 3)}; master {_g(np.median(final['master']), 3)}, "
        f"{_g(final['master'].max(), 3)} (dead zone {_g(float(r['dead_zone']) / h, 3)})",
        verdict,
        "every predicted step equals the observed one (yes), at least 90% of each (partly)",
        pts)


def _claim_similarity(error_similarity) -> Claim:
    es = error_similarity
    idx = {str(m): i for i, m in enumerate(es["unit_method"])}

    def v(m, k):
        return float(es[k][idx[m]])

    conds, parts, pts = [], [], []
    if "master_rtn" in idx:
        cp, ce = v("master_rtn", "cos_e_peak"), v("master_rtn", "cos_e_end")
        rp, re_ = v("master_rtn", "norm_ratio_e_peak"), v("master_rtn", "norm_ratio_e_end")
        dp, de = v("master_rtn", "rel_diff_e_peak"), v("master_rtn", "rel_diff_e_end")
        parts.append(f"master+RTN: ‖e_t−e_t+1‖/‖e_t‖ {_g(dp, 3)} (peak) → {_g(de, 3)} (end); "
                     f"cosine {_g(cp, 3)} → {_g(ce, 3)}; norm ratio − 1 {_sg(rp - 1)} → "
                     f"{_sg(re_ - 1)} (reported: equal norms do not make errors similar)")
        conds += [(f"RTN ‖e_t−e_t+1‖/‖e_t‖ ≤ {_g(MAX_REL_DIFF_RTN)} at peak and end "
                   f"(partly: below {_g(MAX_REL_DIFF_USEFUL)})",
                   [max(dp, de) <= MAX_REL_DIFF_RTN]),
                  ("RTN difference smaller at the end (smaller η)", [de < dp])]
        useful = max(dp, de) < MAX_REL_DIFF_USEFUL
        pts += [("(8) ‖e_t−e_t+1‖/‖e_t‖: master+RTN", dp, 0.0, 0.0, "peak"),
                ("(8) ‖e_t−e_t+1‖/‖e_t‖: master+RTN", de, 0.0, 0.0, "end"),
                ("(8) cosine: master+RTN", cp, 0.0, 1.0, "peak"),
                ("(8) cosine: master+RTN", ce, 0.0, 1.0, "end")]
    else:
        useful = False
    sr_ok = []
    for m, label in (("master_sr", "master+SR"), ("eco_sr", "ECO+SR")):
        if m in idx:
            cp, ce = v(m, "cos_e_peak"), v(m, "cos_e_end")
            dp, de = v(m, "rel_diff_e_peak"), v(m, "rel_diff_e_end")
            parts.append(f"{label}: cosine {_g(cp, 2)} → {_g(ce, 2)}, ‖e_t−e_t+1‖/‖e_t‖ "
                         f"{_g(dp, 3)} → {_g(de, 3)}")
            sr_ok.append(max(abs(cp), abs(ce)) <= MAX_COS_SR
                         and min(dp, de) >= MAX_REL_DIFF_USEFUL)
            pts += [(f"(8) cosine: {label}", cp, 0.0, 0.0, "peak"),
                    (f"(8) cosine: {label}", ce, 0.0, 0.0, "end")]
    if sr_ok:
        conds.append((f"SR: cosines within ±{_g(MAX_COS_SR)} and ‖e_t−e_t+1‖/‖e_t‖ ≥ "
                      f"{_g(MAX_REL_DIFF_USEFUL)}", sr_ok))
    if not conds:
        raise ValueError("claims: error_similarity ran none of master_rtn, master_sr, eco_sr")
    verdict, criterion = _conditions(conds)
    if verdict == "no" and useful:  # RTN's errors help ECO, though less than the bar asks
        verdict = "partly"
    cfg = es.config
    return Claim(
        8, "Consecutive errors are similar with RTN, not with SR",
        "ECO injects e_t where the exact rule needs e_t+1 (§4.3), so its error is "
        "‖e_t−e_t+1‖/‖e_t‖: 0 when consecutive errors are equal, 1 when injecting nothing "
        "would do as well, √2 for independent errors of equal norm. Master+RTN: small and "
        "falling with the LR schedule; SR decorrelates consecutive errors (cosine ≈ 0)",
        f"MLP {'-'.join(str(s) for s in cfg.sizes)}, AdamW, {cfg.fmt} ({cfg.granularity} "
        "scales), peak plateau → last 10% of the steps: " + "; ".join(parts),
        verdict, criterion, pts)


def _claim_price(beta_factor) -> Claim:
    bf = beta_factor
    kinds = [k for k in _PRICE_KINDS if k in set(bf["tab_kind"])]
    lr = float(bf["tab_lr"].min())
    at = np.flatnonzero(np.isclose(bf["tab_lr"], lr))
    exact = {float(b): float(x) for b, x in zip(bf["tab_beta"][at], bf["tab_exact"][at])}
    conds, parts, pts = [], [], []
    for k in kinds:
        sel = np.flatnonzero((bf["tab_kind"] == k) & np.isclose(bf["tab_lr"], lr))
        sel = sel[np.argsort(bf["tab_beta"][sel])]
        a, se, ex = bf["tab_abs_ratio"][sel], bf["tab_abs_ratio_se"][sel], bf["tab_exact"][sel]
        ok = np.abs(a / ex - 1.0) <= TOL_CLOSED_FORM
        conds.append((f"{_PRICE_KINDS[k]} within {100 * TOL_CLOSED_FORM:g}%", list(ok)))
        b = bf["tab_beta"][sel]
        parts.append(f"{_PRICE_KINDS[k]}: " + ", ".join(
            f"β={_g(x)} {_pm(v, s)}" for x, v, s in zip(b, a, se)))
        pts += [(f"(9) absolute eco/master: {k}", v, s, x, float(bb))
                for bb, v, s, x in zip(b, a, se, ex)]
    if not conds:
        raise ValueError("claims: beta_factor ran none of " + ", ".join(_PRICE_KINDS))
    verdict, criterion = _conditions(conds)
    return Claim(
        9, "What a user pays: ECO's absolute floor over master's is 1/(1−β²)",
        "the additive model's absolute floors (equal noise in both schemes) give the exact "
        f"closed-form ratio, → 1/(1−β²) as η → 0; at η={_g(lr)}: " + ", ".join(
            f"β={_g(x)} {_g(y, 3)}" for x, y in sorted(exact.items())),
        f"E‖x̂−x*‖²/d of ECO over master's at η={_g(lr)}: " + "; ".join(parts),
        verdict, "for each kind of noise and every β: " + criterion, pts)


def evaluate(floor, floor_additive, beta_factor, naive_decay, rtn_stall,
             error_similarity) -> list[Claim]:
    """The nine claims, in the order of docs/theory.md §5.9, evaluated on the runs."""
    return [_claim_floors(floor), _claim_beta_factor(beta_factor), _claim_eta_law(floor),
            _claim_fp8(floor, beta_factor), _claim_absolute(floor, floor_additive),
            _claim_decay(naive_decay), _claim_rtn(rtn_stall),
            _claim_similarity(error_similarity), _claim_price(beta_factor)]


def claims_markdown(items: list[Claim]) -> str:
    """The claims as a GitHub markdown table (no ``|`` inside a cell)."""
    return markdown(items, HEADER, "yes", "; numbers from the runs behind figures 2-6")
