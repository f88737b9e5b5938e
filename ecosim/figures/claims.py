"""Figure ``claims``: every theoretical claim of docs/theory.md §5 beside the number that tests it.

This figure runs no simulation of its own. It reads the theory experiments behind figures 2-6
(``floor``, ``floor_additive``, ``beta_factor``, ``naive_decay``, ``rtn_stall``,
``error_similarity``) and condenses them into

* a markdown table (``claims.md``, quoted by the README through ``ecosim readme``) with one row
  per claim: what the theory says (with its predicted numbers, computed from
  :mod:`ecosim.theory`), what the runs measured, and whether the claim holds, decided by an
  explicit criterion written in the same cell;
* a compact figure: (a) measured over predicted for every quantitative prediction, on a log
  axis around 1 with +-2 standard errors; (b) the qualitative contrasts (absolute floors,
  error cosines) on their own log scale;
* the data behind both (``claims.points.csv``, ``claims.verdicts.csv``).

Every number in the table is computed here from the runs; nothing is typed in. The criteria
are fixed in this module (``TOL_*`` constants), so a verdict changes only when a run does.
"""
from __future__ import annotations

import dataclasses

import numpy as np
from matplotlib.lines import Line2D

from .. import theory
from . import style
from .base import figure

__all__ = ["claims", "claims_markdown", "evaluate", "Claim", "HEADER", "TOL_CLOSED_FORM",
           "TOL_FP8_PARTLY", "TOL_ETA_LAW", "TOL_GROWTH_NAIVE", "TOL_GROWTH_ECO"]

TOL_CLOSED_FORM = 0.05    # uniform-grid SR floors vs the closed forms (issue 4's 5%)
TOL_FP8_PARTLY = 0.15     # FP8 E4M3: "partly" when beyond 5% but within this
TOL_ETA_LAW = 0.05        # 2 L eta * naive floor vs 1 at the smallest lr
TOL_ADDITIVE = 0.10       # additive model's naive/master absolute floor vs its closed form
MAX_SR_NAIVE_OVER_MASTER = 2.0   # "does not blow up": naive+SR within 2x of master+SR
SLOPE_RANGE = (0.8, 1.2)  # naive's sigma_emp^2 ~ lr: log-log slope
TOL_GROWTH_NAIVE = 0.25   # decaying LR: naive's growth factor vs the quasi-static prediction
TOL_GROWTH_ECO = 0.10     # ... and eco's
MIN_COS_RTN = 0.8         # error similarity: master+RTN cosine "high"
MAX_NORM_DEV = 0.05       # ... norm ratio "near 1"
MAX_COS_SR = 0.1          # ... SR "decorrelates"

HEADER = ("claim", "theory (docs/theory.md §5)", "measured", "holds?")

CAPTION = """
Every theoretical claim of docs/theory.md §5, tested on the runs of figures 2-6 (the same
table, with the numbers and the criteria, is claims.md, quoted in the README). (a) Measured over
predicted for each quantitative prediction, log axis, +-2 standard errors (batch means; none for
counts and growth factors); the shaded band is +-5%. (1) Normalised noise floors
E||x_hat - x*||^2/d / sigma_emp^2 of master weights, naive removal and ECO under real stochastic
rounding on the uniform grid over the closed forms, every beta and learning rate (markers:
beta); (2) ECO over master at the smallest learning rate over 1/(1 - beta^2); (3) naive's
normalised floor times 2 L eta at the smallest learning rate (the 1/eta law: 1); (4) the same
floors (and the eco/master ratio over its exact closed form) on FP8 E4M3 with an absmax scale;
(6) under a warmup + cosine schedule, the growth of each scheme's normalised error from the
plateau at the peak to the last 10% of the steps over the quasi-static closed forms; (7) RTN:
observed over predicted step (+1) of every naive stall and every ECO release. (b) The
contrasts: (5) naive's absolute floor over master's at the smallest learning rate, real SR
(filled, marker: beta) against the additive-noise model (open) and the additive closed form
(bars); (8) the cosine of consecutive quantization errors on the MLP (stars: plateau at the
peak; pentagons: last 10% of the steps): master weights with RTN near 1, SR near 0 (absolute
values; a hollow marker is a negative cosine).
"""

_SCHEMES = ("master", "naive", "eco")
_BETA_MARKERS = ("o", "s", "D", "^", "v", "P", "X", "h")
_ADDITIVE_MARKER, _CLOSED_MARKER = "<", "|"          # panel (b), claim 5
_PHASE_MARKERS = {"peak": "*", "end": "p"}            # panel (b), claim 8
_TICKS = (0.1, 0.2, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99, 1.0, 1.01, 1.02, 1.05, 1.1,
          1.25, 1.5, 2.0, 3.0, 5.0, 10.0)


def _ticks(lo: float, hi: float, min_gap: float = 0.09) -> list[float]:
    """Ticks of a log axis around 1 from :data:`_TICKS`, at least ``min_gap`` of the axis's
    log range apart (walking outward from 1, so 1 is always kept)."""
    span = np.log(hi / lo)
    kept = [1.0]
    for side in ([t for t in _TICKS if t > 1], [t for t in reversed(_TICKS) if t < 1]):
        last = 1.0
        for t in side:
            if lo <= t <= hi and abs(np.log(t / last)) >= min_gap * span:
                kept.append(t)
                last = t
    return sorted(kept)


@dataclasses.dataclass
class Claim:
    """One row of the table and the points it contributes to the figure."""

    number: int
    claim: str
    theory: str
    measured: str
    verdict: str          # "yes", "partly" or "no"
    criterion: str
    # (row label, measured, standard error, predicted, marker key)
    points: list = dataclasses.field(default_factory=list)

    def row(self) -> tuple[str, str, str, str]:
        return (f"({self.number}) {self.claim}", self.theory, self.measured,
                f"**{self.verdict}**: {self.criterion}")


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


def _verdict(passed) -> str:
    passed = list(passed)
    if all(passed):
        return "yes"
    return "partly" if any(passed) else "no"


def _conditions(conds) -> tuple[str, str]:
    """Verdict and criterion text from named conditions ``[(text, [bool, ...]), ...]``: each
    condition is shown with how many of its cases were met; yes when all are, partly when
    some are, no when none is."""
    flat = [bool(x) for _, oks in conds for x in oks]
    text = "; ".join(f"{t} [{sum(map(bool, oks))}/{len(oks)}]" for t, oks in conds)
    return _verdict(flat), f"{text} (yes: all met; partly: some)"


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
        _verdict(within),
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
        2, "ECO's price: eco/master floor ratio → 1/(1−β²)",
        f"ratio of the normalised floors → 1/(1−β²) as η → 0 (β {'; '.join(lims)}); the exact "
        f"closed-form ratio at η={_g(lr)} is below it by at most "
        f"{100 * float(np.max(1 - exact / lim)):.2f}%",
        f"real SR, uniform grid, η={_g(lr)}: " + "; ".join(per_beta)
        + f". Worst deviation from 1/(1−β²): {_pct(dev[np.argmax(np.abs(dev))])}; from the "
        f"exact ratio: {float(np.max(np.abs(z_exact))):.1f} SE at most",
        _verdict(within),
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
        _verdict(ok),
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

    conds, parts, pts, sr_ok = [], [], [], []
    if "master_rtn" in idx:
        cp, ce = v("master_rtn", "cos_e_peak"), v("master_rtn", "cos_e_end")
        rp, re_ = v("master_rtn", "norm_ratio_e_peak"), v("master_rtn", "norm_ratio_e_end")
        dp, de = v("master_rtn", "rel_diff_e_peak"), v("master_rtn", "rel_diff_e_end")
        parts.append(f"master+RTN: cosine {_g(cp, 3)} (peak) → {_g(ce, 3)} (end), norm ratio "
                     f"− 1: {_sg(rp - 1)} → {_sg(re_ - 1)}, ‖e_t−e_t+1‖/‖e_t‖ {_g(dp, 3)} → "
                     f"{_g(de, 3)}")
        conds += [(f"RTN cosine ≥ {_g(MIN_COS_RTN)} at peak and end",
                   [min(cp, ce) >= MIN_COS_RTN]),
                  ("RTN cosine higher at the end (smaller η)", [ce > cp]),
                  (f"RTN norm ratio within {_g(MAX_NORM_DEV)} of 1",
                   [max(abs(rp - 1), abs(re_ - 1)) <= MAX_NORM_DEV])]
        pts += [("(8) cosine: master+RTN", cp, 0.0, 1.0, "peak"),
                ("(8) cosine: master+RTN", ce, 0.0, 1.0, "end")]
    for m, label in (("master_sr", "master+SR"), ("eco_sr", "ECO+SR")):
        if m in idx:
            cp, ce = v(m, "cos_e_peak"), v(m, "cos_e_end")
            parts.append(f"{label}: cosine {_g(cp, 2)} → {_g(ce, 2)}")
            sr_ok.append(max(abs(cp), abs(ce)) <= MAX_COS_SR)
            pts += [(f"(8) cosine: {label}", cp, 0.0, 0.0, "peak"),
                    (f"(8) cosine: {label}", ce, 0.0, 0.0, "end")]
    if sr_ok:
        conds.append((f"SR cosines within ±{_g(MAX_COS_SR)}", sr_ok))
    if not conds:
        raise ValueError("claims: error_similarity ran none of master_rtn, master_sr, eco_sr")
    verdict, criterion = _conditions(conds)
    cfg = es.config
    return Claim(
        8, "Consecutive errors are similar with RTN, not with SR",
        "master weights + RTN: cos(e_t, e_t+1) high and ‖e_t+1‖/‖e_t‖ ≈ 1, both tracking the LR "
        "schedule; SR decorrelates consecutive errors (cosine ≈ 0)",
        f"MLP {'-'.join(str(s) for s in cfg.sizes)}, AdamW, {cfg.fmt} ({cfg.granularity} "
        "scales), peak plateau → last 10% of the steps: " + "; ".join(parts),
        verdict, criterion, pts)


def evaluate(floor, floor_additive, beta_factor, naive_decay, rtn_stall,
             error_similarity) -> list[Claim]:
    """The eight claims, in the order of docs/theory.md §5.9, evaluated on the runs."""
    return [_claim_floors(floor), _claim_beta_factor(beta_factor), _claim_eta_law(floor),
            _claim_fp8(floor, beta_factor), _claim_absolute(floor, floor_additive),
            _claim_decay(naive_decay), _claim_rtn(rtn_stall),
            _claim_similarity(error_similarity)]


def claims_markdown(items: list[Claim]) -> str:
    """The claims as a GitHub markdown table (no ``|`` inside a cell)."""
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for c in items:
        cells = c.row()
        for cell in cells:
            if "|" in cell or "\n" in cell:
                raise ValueError(f"claim {c.number}: a cell may not hold '|' or a newline: "
                                 f"{cell!r}")
        lines.append("| " + " | ".join(cells) + " |")
    n = {v: sum(c.verdict == v for c in items) for v in ("yes", "partly", "no")}
    lines.append("")
    lines.append(f"{n['yes']} of {len(items)} claims hold, {n['partly']} partly, {n['no']} not "
                 "(criteria in the last column; numbers from the runs behind figures 2-6).")
    return "\n".join(lines)


# -- the figure ---------------------------------------------------------------------------------

def _row_color(label: str):
    """A row's colour: the scheme it is about (``eco/master`` counts as ECO)."""
    tail = label.split(": ", 1)[-1].lower()
    for s in ("eco", "naive", "master"):
        if tail.startswith(s) or f" {s}" in tail:
            return style.METHOD_COLORS[s]
    return style.COLORS["black"]


def _plot_quantitative(ax, items, betas):
    """Panel (a): measured/predicted, one row per label, +-2 SE, log axis."""
    labels, ys = [], {}
    for c in items:
        if c.number in (5, 8):
            continue
        for p in c.points:
            if p[0] not in ys:
                ys[p[0]] = len(labels)
                labels.append(p[0])
    rng_ = np.random.default_rng(0)  # vertical jitter only (display), fixed
    lo, hi = 0.95, 1.05
    for label, y in ys.items():
        pts = [p for c in items for p in c.points if p[0] == label]
        color = _row_color(label)
        q = np.array([p[1] / p[3] for p in pts])
        e = np.array([2 * p[2] / p[3] for p in pts])
        lo, hi = min(lo, float(np.min(q - e))), max(hi, float(np.max(q + e)))
        marks = np.array([_BETA_MARKERS[betas.index(p[4]) % len(_BETA_MARKERS)]
                          if isinstance(p[4], float) and p[4] in betas else "o" for p in pts])
        jit = rng_.uniform(-0.22, 0.22, len(pts)) if len(pts) > 1 else np.zeros(1)
        for mk in dict.fromkeys(marks):  # one call per marker (hundreds of RTN points)
            k = marks == mk
            ax.errorbar(q[k], y + jit[k], xerr=e[k] if np.any(e[k] > 0) else None, fmt=mk,
                        color=color, markerfacecolor="white" if "FP8" in label else color,
                        markeredgecolor=color, ms=4.5, capsize=1.5, elinewidth=0.9,
                        alpha=0.85, zorder=4)
    ax.axvspan(1 - TOL_CLOSED_FORM, 1 + TOL_CLOSED_FORM, color=style.COLORS["green"],
               alpha=0.10, lw=0, zorder=0)
    ax.axvline(1.0, color=style.COLORS["grey"], lw=1, zorder=1)
    ax.set_xscale("log")
    pad = 1.25
    ax.set_xlim(max(lo, 1e-3) / pad ** 0.3, hi * pad ** 0.3)
    ticks = _ticks(*ax.get_xlim())
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.minorticks_off()
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylim(len(labels) - 0.5, -0.5)
    ax.grid(axis="y", visible=False)
    ax.set_xlabel("measured / predicted")
    style.panel_title(ax, "a", "Quantitative predictions")
    return labels


def _plot_contrasts(ax, items, betas):
    """Panel (b): absolute floors (claim 5) and error cosines (claim 8), log axis."""
    rows = []
    for c in items:
        if c.number in (5, 8):
            for p in c.points:
                if p[0] not in rows:
                    rows.append(p[0])
    for c in items:
        for label, m, _se, pred, key in c.points:
            if c.number not in (5, 8):
                continue
            y = rows.index(label)
            if c.number == 5:
                b = betas.index(key) if key in betas else 0  # the figure-wide β marker
                row = sorted({p[4] for p in c.points if p[0] == label})  # this row's betas
                y += (row.index(key) - (len(row) - 1) / 2) * 0.25
                additive = "additive" in label
                color = style.METHOD_COLORS["naive"]
                ax.plot(m, y, _BETA_MARKERS[b % len(_BETA_MARKERS)] if not additive
                        else _ADDITIVE_MARKER, color=color, ms=6,
                        markerfacecolor="white" if additive else color, zorder=4)
                ax.plot(pred, y, _CLOSED_MARKER, color=style.COLORS["black"], ms=11, mew=1.6,
                        zorder=5)
            else:
                color = (style.METHOD_COLORS["master"] if "master" in label
                         else style.METHOD_COLORS["eco"])
                dy = -0.12 if key == "peak" else 0.12
                ax.plot(max(abs(m), 1e-6), y + dy, _PHASE_MARKERS[key], color=color,
                        ms=8 if key == "peak" else 6.5,
                        markerfacecolor=color if m >= 0 else "white", zorder=4)
    ax.axvline(1.0, color=style.COLORS["grey"], lw=1)
    ax.set_xscale("log")
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.grid(axis="y", visible=False)
    ax.set_xlabel("value (log scale)")
    style.panel_title(ax, "b", "Contrasts")
    handles = [Line2D([], [], color=style.METHOD_COLORS["naive"], ls="none", marker="o",
                      label="(5) real SR (marker: β)"),
               Line2D([], [], color=style.METHOD_COLORS["naive"], ls="none",
                      marker=_ADDITIVE_MARKER, markerfacecolor="white",
                      label="(5) additive model"),
               Line2D([], [], color="k", ls="none", marker=_CLOSED_MARKER, ms=11, mew=1.6,
                      label="(5) additive closed form"),
               Line2D([], [], color="k", ls="none", marker=_PHASE_MARKERS["peak"], ms=8,
                      label="(8) peak plateau"),
               Line2D([], [], color="k", ls="none", marker=_PHASE_MARKERS["end"],
                      label="(8) last 10% of the steps")]
    ax.legend(handles=handles, loc="lower right", fontsize=7.5)


@figure("claims", experiments=["floor", "floor_additive", "beta_factor", "naive_decay",
                                 "rtn_stall", "error_similarity"], caption=CAPTION)
def claims(floor, floor_additive, beta_factor, naive_decay, rtn_stall, error_similarity):
    """The theory claims of docs/theory.md §5 against the runs: figure, data, markdown."""
    items = evaluate(floor, floor_additive, beta_factor, naive_decay, rtn_stall,
                     error_similarity)
    betas = sorted({float(b) for b in floor["unit_beta"]}
                   | {float(b) for b in beta_factor["tab_beta"]})

    n_a = len({p[0] for c in items if c.number not in (5, 8) for p in c.points})
    n_b = len({p[0] for c in items if c.number in (5, 8) for p in c.points})
    fig = style.new_figure(12.0, 0.32 * max(n_a, n_b) + 2.2)
    ax_a, ax_b = fig.subplots(1, 2, width_ratios=[1.35, 1.0])
    _plot_quantitative(ax_a, items, betas)
    _plot_contrasts(ax_b, items, betas)
    handles = [Line2D([], [], color=style.METHOD_COLORS[s], lw=3, label=lab)
               for s, lab in (("master", "master weights"), ("naive", "naive (no master)"),
                              ("eco", "ECO"))]
    handles += [Line2D([], [], color="k", ls="none", marker=_BETA_MARKERS[i % 8], ms=5,
                       label=f"β = {b:g}") for i, b in enumerate(betas)]
    handles += [Line2D([], [], color="k", ls="none", marker="o", markerfacecolor="white",
                       label="FP8 E4M3 (open)")]
    fig.legend(handles=handles, loc="outside upper center", ncol=min(len(handles), 7),
               fontsize=8)

    pts = [(c.number,) + p for c in items for p in c.points]
    tables = {
        "points": {
            "claim": np.array([p[0] for p in pts], np.int64),
            "item": np.array([p[1] for p in pts]),
            "tag": np.array(["" if p[5] is None else (f"beta={p[5]:g}" if isinstance(p[5], float)
                                                       else str(p[5])) for p in pts]),
            "measured": np.array([p[2] for p in pts], np.float64),
            "std_error": np.array([p[3] for p in pts], np.float64),
            "predicted": np.array([p[4] for p in pts], np.float64),
        },
        "verdicts": {
            "claim": np.array([c.number for c in items], np.int64),
            "name": np.array([c.claim for c in items]),
            "holds": np.array([c.verdict for c in items]),
            "criterion": np.array([c.criterion for c in items]),
        },
    }
    return fig, tables, claims_markdown(items)
