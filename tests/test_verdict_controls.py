"""Positive and negative controls of every verdict of ecosim.claims outside the theory table
(those are in tests/test_theory_claim_controls.py): each verdict is fed constructed runs,
built through the record types the real code reads, where its claim is true and where it is
false, and where it has a third value ("not resolved", "partly", "mixed") one where that is
the answer; it must say so. This file: the shared statistics, the language-model tables
(Table 1, Figure 3, the paper's switches), the MLP's Table 1 shape, few-bit SR and ECO with
AdamW. DQT and precision against horizon: tests/test_verdict_controls_dqt.py."""
import math

import numpy as np
import pytest

from ecosim.claims import lm_moe, lm_switches, mlp, sr_bits
from ecosim.claims import eco_adam as eco_claims
from ecosim.claims.lm import (EQUIV_MARGIN, gap_change, lm_cells, lm_orderings, lm_outcomes)
from ecosim.claims.stats import sign_verdict, t_interval
from ecosim.claims.table import verdict_of
from ecosim.experiments.lm import records_to_results
from lm_records import linear_curve, run_record

# per-seed wobble shared by the constructed runs: paired differences keep a small spread
WOBBLE = np.array([0.0, 0.1, -0.05])


# -- stats: t_interval, sign_verdict -------------------------------------------------------------

def test_t_interval_covers_zero_only_where_the_differences_straddle_it():
    """The statistic every paired verdict reads: a sample symmetric about 0 gives an
    interval around 0, the same sample shifted by more than its half-width does not."""
    x = np.array([-0.02, -0.01, 0.0, 0.01, 0.02])
    ti = t_interval(x)
    assert ti["lo"] < 0 < ti["hi"] and ti["mean"] == pytest.approx(0.0, abs=1e-15)
    shifted = t_interval(x + 2 * (ti["hi"] - ti["mean"]))
    assert shifted["lo"] > 0
    assert math.isnan(t_interval([0.3])["lo"])  # one value: no interval


@pytest.mark.parametrize("sample, expect, want", [
    ([-0.10, -0.12, -0.09], "<", "holds"),          # positive control
    ([0.10, 0.12, 0.09], "<", "reversed"),          # negative control
    ([-0.10, 0.10, 0.02], "<", "not resolved"),     # interval across 0
    ([-0.10], "<", "not resolved"),                 # one pair: no interval
    ([0.10, 0.12, 0.09], ">", "holds"),
    ([-0.10, -0.12, -0.09], ">", "reversed"),
])
def test_sign_verdict_controls(sample, expect, want):
    assert sign_verdict(t_interval(sample), expect) == want


# -- table: verdict_of ---------------------------------------------------------------------------

def test_verdict_of_controls():
    assert verdict_of([True, True]) == "yes" and verdict_of([True], yes="holds") == "holds"
    assert verdict_of([True, False]) == "partly"
    assert verdict_of([False, False]) == "no"


def test_verdict_of_refuses_no_cases():
    """All of no cases passing is no evidence: an empty judgement is an error, not "yes"."""
    with pytest.raises(ValueError, match="at least one case"):
        verdict_of([])


# -- lm: outcomes, orderings, gap changes --------------------------------------------------------

def _lm(final: dict, *, stalled=(), diverged=(), flat_base=False, steps=100):
    """``lm`` result columns from run records: ``final[method]`` per-seed final losses; a
    (method, seed) in ``stalled`` is flat over the second half, in ``diverged`` diverged.
    Trained runs fall by 0.3 nats over the second half; ``flat_base``: the base methods
    (``bf16_master``, ``fp8_master_sr``) fall by 0.005 there."""
    recs = []
    for m, vals in final.items():
        for s, v in enumerate(vals):
            fall = 0.005 if flat_base and m in ("bf16_master", "fp8_master_sr") else 0.3
            fall = 0.0 if (m, s) in stalled else fall
            recs.append(run_record(m, s, v, steps=steps, diverged=(m, s) in diverged,
                                   curve=linear_curve(steps, 3.5, v + fall, v)))
    return records_to_results(recs)


def _seeds(base: float, offset: float, wobble=WOBBLE) -> list[float]:
    return list(base + offset + np.asarray(wobble))


BASE = _seeds(2.0, 0.0)


def test_lm_outcomes_trained_stalled_diverged():
    r = _lm({"bf16_master": BASE, "fp8_eco_rtn": _seeds(2.0, 0.1)},
            stalled={("fp8_eco_rtn", 1)}, diverged={("fp8_eco_rtn", 2)})
    assert lm_outcomes(r).tolist() == ["trained"] * 3 + ["trained", "stalled", "diverged"]


def test_lm_outcomes_no_stall_while_the_baseline_is_flat_too():
    """Negative control of "stalled": a flat run beside a flat baseline has nothing left to
    learn, so it is not called stalled; without a base run of its seed, neither."""
    r = _lm({"bf16_master": BASE, "fp8_eco_rtn": _seeds(2.0, 0.1)}, flat_base=True,
            stalled={("fp8_eco_rtn", s) for s in range(3)})
    assert set(lm_outcomes(r).tolist()) == {"trained"}
    r = _lm({"fp8_eco_rtn": _seeds(2.0, 0.1)}, stalled={("fp8_eco_rtn", 0)})
    assert set(lm_outcomes(r).tolist()) == {"trained"}


def test_lm_outcomes_a_nonfinite_loss_is_diverged():
    r = _lm({"bf16_master": BASE, "fp8_eco_sr": _seeds(2.0, 0.0)})
    r["val_loss"][4] = np.nan  # finished, but the final validation loss is not finite
    assert lm_outcomes(r)[4] == "diverged"


def test_lm_cells_leave_failed_runs_out_of_every_mean():
    r = _lm({"bf16_master": BASE, "fp8_eco_sr": _seeds(2.0, 0.05)},
            stalled={("fp8_eco_sr", 0)})
    c = lm_cells(r)[0, "fp8_eco_sr"]
    assert c["outcomes"] == {"trained": 2, "stalled": 1, "diverged": 0}
    assert c["seeds"] == [1, 2] and c["gap"]["mean"] == pytest.approx(0.05, abs=1e-12)
    assert lm_cells(r)[0, "bf16_master"]["gap"]["n"] == 0  # the base has no gap


LESS = (("fp8_eco_sr", "<", "fp8_naive_sr", ""),)
SAME = (("fp8_eco_sr", "~", "bf16_master", ""),)


def _order(r, orderings) -> tuple[str, str]:
    (o,) = lm_orderings(r, orderings=orderings)
    return o["verdict"], o["how"]


@pytest.mark.parametrize("eco, naive, want", [
    (0.01, 0.10, ("holds", "interval")),        # positive control
    (0.10, 0.01, ("reversed", "interval")),     # negative control
])
def test_lm_orderings_less_by_interval(eco, naive, want):
    r = _lm({"bf16_master": BASE, "fp8_eco_sr": _seeds(2.0, eco),
             "fp8_naive_sr": _seeds(2.0, naive, 1.1 * WOBBLE)})
    assert _order(r, LESS) == want


def test_lm_orderings_less_not_resolved_across_zero():
    r = _lm({"bf16_master": BASE, "fp8_eco_sr": _seeds(2.0, 0.0),
             "fp8_naive_sr": _seeds(2.0, 0.0, [0.02, 0.08, -0.05])})  # A - B: -0.02 +0.02 0
    assert _order(r, LESS) == ("not resolved", "interval")


def test_lm_orderings_less_by_outcome():
    """Every run of B failed and every run of A trained: holds; the other way: reversed."""
    ok, every = _seeds(2.0, 0.05), {0, 1, 2}
    r = _lm({"bf16_master": BASE, "fp8_eco_sr": ok, "fp8_naive_sr": ok},
            stalled={("fp8_naive_sr", s) for s in every})
    assert _order(r, LESS) == ("holds", "outcome")
    r = _lm({"bf16_master": BASE, "fp8_eco_sr": ok, "fp8_naive_sr": ok},
            diverged={("fp8_eco_sr", s) for s in every})
    assert _order(r, LESS) == ("reversed", "outcome")


@pytest.mark.parametrize("gaps, want", [
    ([0.002, 0.003, 0.0025], "holds"),                      # positive control: inside +-0.01
    ([0.05, 0.06, 0.055], "does not hold"),                 # negative control: outside
    ([-0.06, -0.05, -0.055], "does not hold"),              # outside on the other side
    ([-0.01, 0.02, 0.005], "not resolved"),                 # across the margin
])
def test_lm_orderings_equivalence_by_interval(gaps, want):
    r = _lm({"bf16_master": BASE, "fp8_eco_sr": list(np.array(BASE) + gaps)})
    (o,) = lm_orderings(r, orderings=SAME)
    assert (o["verdict"], o["how"]) == (want, "interval")
    assert (o["diff"]["hi"] <= EQUIV_MARGIN and o["diff"]["lo"] >= -EQUIV_MARGIN) == \
        (want == "holds")


def test_lm_orderings_equivalence_fails_by_outcome():
    r = _lm({"bf16_master": BASE, "fp8_eco_sr": BASE},
            diverged={("fp8_eco_sr", s) for s in range(3)})
    assert _order(r, SAME) == ("does not hold", "outcome")


def test_gap_change_controls():
    before = {"n": 5, "mean": 0.01, "se": 0.002}
    assert gap_change(before, {"n": 5, "mean": 0.05, "se": 0.002})["verdict"] == "grows"
    assert gap_change(before, {"n": 5, "mean": -0.03, "se": 0.002})["verdict"] == "shrinks"
    assert gap_change(before, {"n": 5, "mean": 0.012, "se": 0.002})["verdict"] == \
        "not resolved"
    one = gap_change(before, {"n": 1, "mean": 0.5, "se": math.nan})
    assert one["verdict"] == "not resolved" and one["mean"] == pytest.approx(0.49)


# -- lm_moe: Figure 3, paired to FP8 master + SR -------------------------------------------------

MOE_BASE = _seeds(2.0, 0.0)


def _moe(verdicts: list[dict]) -> dict:
    return {(o["a"], o["b"]): (o["verdict"], o["how"]) for o in verdicts}


def test_moe_orderings_hold_on_the_papers_shape():
    r = _lm({"fp8_master_sr": MOE_BASE, "fp8_eco_sr": _seeds(2.0, 0.004),
             "fp8_naive_sr": _seeds(2.0, 0.05), "fp8_naive_rtn": _seeds(2.0, 0.5)},
            stalled={("fp8_naive_rtn", s) for s in range(3)})
    got = _moe(lm_moe.moe_orderings(r))
    assert got == {("fp8_eco_sr", "fp8_master_sr"): ("holds", "interval"),
                   ("fp8_eco_sr", "fp8_naive_sr"): ("holds", "interval"),
                   ("fp8_master_sr", "fp8_naive_sr"): ("holds", "interval"),
                   ("fp8_naive_sr", "fp8_naive_rtn"): ("holds", "outcome")}


def test_moe_orderings_fail_on_the_reversed_shape():
    """ECO 0.05 behind master, naive ahead of ECO and of master, naive+RTN ahead of naive+SR.
    The stall test is against FP8 master + SR: there are no BF16 runs, yet a flat naive+SR
    is called stalled and loses its ordering with naive+RTN by outcome."""
    r = _lm({"fp8_master_sr": MOE_BASE, "fp8_eco_sr": _seeds(2.0, 0.05),
             "fp8_naive_sr": _seeds(2.0, -0.02), "fp8_naive_rtn": _seeds(2.0, -0.02)},
            stalled={("fp8_naive_sr", s) for s in range(3)})
    assert _moe(lm_moe.moe_orderings(r)) == {
        ("fp8_eco_sr", "fp8_master_sr"): ("does not hold", "interval"),
        ("fp8_eco_sr", "fp8_naive_sr"): ("holds", "outcome"),
        ("fp8_master_sr", "fp8_naive_sr"): ("holds", "outcome"),
        ("fp8_naive_sr", "fp8_naive_rtn"): ("reversed", "outcome")}
    r = _lm({"fp8_master_sr": MOE_BASE, "fp8_eco_sr": _seeds(2.0, 0.05),
             "fp8_naive_sr": _seeds(2.0, -0.02), "fp8_naive_rtn": _seeds(2.0, 0.5)})
    got = _moe(lm_moe.moe_orderings(r))
    assert got["fp8_eco_sr", "fp8_naive_sr"] == ("reversed", "interval")
    assert got["fp8_master_sr", "fp8_naive_sr"] == ("reversed", "interval")


# -- lm_switches: the switches' paired effects, Table 1 under the paper's protocol ---------------

def _switch_runs(cost: dict, *, diverged_on=()):
    """Plain runs (BF16 with master, ECO+SR) and the same with the paper's switch on, whose
    final loss is the plain one plus ``cost[method]`` per seed."""
    off = {"bf16_master": BASE, "fp8_eco_sr": _seeds(2.0, 0.003)}
    recs_off = [run_record(m, s, v) for m, vs in off.items() for s, v in enumerate(vs)]
    recs_on = []
    for m, vs in off.items():
        flag = "autocast" if m == "bf16_master" else "act_fp8"
        for s, v in enumerate(vs):
            c = np.asarray(cost.get(m, 0.0)) * np.ones(3)
            recs_on.append(dict(run_record(m, s, v + c[s], diverged=(m, s) in diverged_on),
                                **{flag: True}))
    return records_to_results(recs_off), records_to_results(recs_on)


def test_switch_effects_a_costless_switch_is_not_resolved_a_costly_one_is_resolved():
    off, on = _switch_runs({"fp8_eco_sr": [0.001, -0.001, 0.0005]})
    eff = {e["method"]: e["effect"] for e in lm_switches.switch_effects(off, on)}
    assert eff["bf16_master"]["mean"] == 0.0                       # no cost: exactly 0
    assert sign_verdict(eff["fp8_eco_sr"], ">") == "not resolved"  # negative control
    off, on = _switch_runs({"fp8_eco_sr": [0.05, 0.06, 0.055]})
    eff = {e["method"]: e for e in lm_switches.switch_effects(off, on)}
    assert sign_verdict(eff["fp8_eco_sr"]["effect"], ">") == "holds"  # positive control
    off, on = _switch_runs({}, diverged_on={("fp8_eco_sr", 1)})
    e = {e["method"]: e for e in lm_switches.switch_effects(off, on)}["fp8_eco_sr"]
    assert e["outcomes_on"]["diverged"] == 1 and e["seeds"] == [0, 2]


def test_paper_protocol_orderings_follow_the_switched_runs():
    """ECO+SR ~ BF16 holds without the switches; with E4M3 activations costing ECO+SR 0.05
    (and bf16 autocast nothing) it does not hold under the paper's protocol."""
    off, on = _switch_runs({"fp8_eco_sr": [0.05, 0.06, 0.055]})
    assert _order(off, SAME) == ("holds", "interval")
    assert _order(lm_switches.paper_protocol(off, on), SAME) == ("does not hold", "interval")
    off, on = _switch_runs({})
    assert _order(lm_switches.paper_protocol(off, on), SAME) == ("holds", "interval")


# -- mlp: the shape of Table 1 -------------------------------------------------------------------

def _shape(**over):
    """Gaps to BF16 at three sizes with the paper's shape; ``over`` replaces methods."""
    t = {"w/ master + SR": [0.001, 0.001, 0.001], "ECO + SR": [0.002, 0.003, 0.002],
         "naive + SR": [0.05, 0.10, 0.20], "ECO + RTN": [0.02, 0.04, 0.06],
         "naive + RTN": [None, None, None]}
    return {f"FP8 {k}": v for k, v in (t | over).items()}


BROKEN = {  # one table per statement on which that statement is false
    "eco_sr_close": {"ECO + SR": [0.002, 0.04, 0.002]},
    "naive_sr_worse": {"naive + SR": [0.05, 0.002, 0.20]},
    "naive_sr_grows": {"naive + SR": [0.20, 0.10, 0.05]},
    "naive_rtn_fails": {"naive + RTN": [None, 0.01, None]},
    "naive_rtn_diverges": {"naive + RTN": [0.5, 0.6, 0.7]},
    "eco_rtn_between": {"ECO + RTN": [0.02, 0.001, 0.06]},
    "eco_rtn_below_naive_sr": {"ECO + RTN": [0.06, 0.12, 0.25]},
}


def test_shape_checks_positive_control():
    _, v = mlp.shape_checks(_shape(), "FP8")
    assert set(v) == set(BROKEN) and all(v.values())


@pytest.mark.parametrize("key", sorted(BROKEN))
def test_shape_checks_negative_control(key):
    _, v = mlp.shape_checks(_shape(**BROKEN[key]), "FP8")
    assert v[key] is False


def test_shape_checks_refuse_a_table_without_sizes_or_with_ragged_columns():
    """"At every size" over no sizes would hold whatever the runs did."""
    with pytest.raises(ValueError, match=r"got lengths \[0\]"):
        mlp.shape_checks(_shape(**{k: [] for k in ("w/ master + SR", "ECO + SR", "naive + SR",
                                                   "ECO + RTN", "naive + RTN")}), "FP8")
    with pytest.raises(ValueError, match=r"got lengths \[1, 3\]"):
        mlp.shape_checks(_shape(**{"naive + RTN": [None]}), "FP8")


def test_shape_verdict_controls():
    paper = dict.fromkeys(mlp.SHAPE_NAMES, True) | {"naive_rtn_diverges": True}
    assert "Not reproduced" not in mlp.shape_verdict(paper, paper)
    ours = paper | {"naive_sr_grows": False, "naive_rtn_diverges": False}
    text = mlp.shape_verdict(ours, paper)
    assert "Not reproduced: naive+SR's penalty growing with size." in text
    assert "fails by stalling rather than diverging" in text
    # a statement the paper's own table does not make is neither reproduced nor missed
    text = mlp.shape_verdict(dict.fromkeys(mlp.SHAPE_NAMES, False),
                             dict.fromkeys(mlp.SHAPE_NAMES, False))
    assert text == "Reproduced at this scale: none."


@pytest.mark.parametrize("values, want", [
    ([0.1, 0.2, 0.4], "grows with size"), ([0.4, 0.2, 0.1], "shrinks with size"),
    ([0.1, 0.3, 0.2], "no monotone trend"), ([0.1, 0.1, 0.2], "no monotone trend"),
    ([0.1], "one size only")])
def test_trend_controls(values, want):
    assert mlp.trend(values) == want


# -- sr_bits: the fewest random bits, and ECO below naive --------------------------------------

def _sr_bits(quad, mlp_rows):
    rows = [dict(part="quadratic", scheme=s, lr=0.1, nbits=n, rule="floor", seed=0, ex2=e,
                 final_val_loss=np.nan, diverged=False) for s, n, e in quad]
    rows += [dict(part="mlp", scheme=s, lr=3e-3, nbits=2, rule="floor", seed=k, ex2=np.nan,
                  final_val_loss=v, diverged=not np.isfinite(v)) for s, k, v in mlp_rows]
    r = {f"unit_{k}": np.array([row[k] for row in rows])
         for k in ("part", "scheme", "lr", "nbits", "rule", "seed")}
    return r | {k: np.array([row[k] for row in rows])
                for k in ("ex2", "final_val_loss", "diverged")}


def _floors(ratios: dict) -> list:
    return [("eco", 32, 1.0)] + [("eco", n, x) for n, x in ratios.items()]


def test_sr_bits_fewest_bits_controls():
    """The fewest bits from which every wider one stays within FLOOR_TOLERANCE (1.10) of the
    32-bit floor: 2 here; none where the widest measured width is outside."""
    tol = sr_bits.FLOOR_TOLERANCE
    (q,) = sr_bits.summarise(_sr_bits(_floors({1: 1.5, 2: tol, 4: 1.0}), []))["quadratic"]
    assert q["fewest_bits"] == 2
    (q,) = sr_bits.summarise(_sr_bits(_floors({1: 1.0, 2: 1.0, 4: 1.2}), []))["quadratic"]
    assert q["fewest_bits"] is None


@pytest.mark.parametrize("naive, want", [
    ([0.15, 0.17, 0.16], "holds"),           # positive control: naive above ECO
    ([0.05, 0.06, 0.04], "reversed"),        # negative control: naive below ECO
    ([0.12, 0.09, 0.11], "not resolved"),    # gaps +0.02 -0.02 -0.01
])
def test_sr_bits_eco_below_naive_controls(naive, want):
    eco = [0.10, 0.11, 0.12]
    rows = [("eco", k, v) for k, v in enumerate(eco)] + [("naive", k, v)
                                                         for k, v in enumerate(naive)]
    (o,) = sr_bits.summarise(_sr_bits([], rows))["order"]
    assert o["verdict"] == want and o["n"] == 3


# -- eco_adam: outcome counts and the approximations' paired gaps -------------------------------

def _eco_adam(final: dict, outcome: dict | None = None):
    """Part ``approx`` results: ``final["scheme:mode"]`` per-seed final losses; ``outcome``
    the same shape of outcome names (default all trained)."""
    rows = [(name, s, v, (outcome or {}).get(name, ["trained"] * len(vs))[s])
            for name, vs in final.items() for s, v in enumerate(vs)]
    return {"unit_part": np.array(["approx"] * len(rows)),
            "unit_variant": np.array([n.split(":")[0] for n, *_ in rows]),
            "unit_mode": np.array([n.split(":")[1] for n, *_ in rows]),
            "unit_seed": np.array([s for _, s, _, _ in rows]),
            "final_val_loss": np.array([v for _, _, v, _ in rows]),
            "outcome": np.array([o for *_, o in rows])}


def test_eco_adam_paired_gaps_resolve_a_cost_and_not_a_null():
    master = [0.30, 0.35, 0.32, 0.31]
    costly = _eco_adam({"master:sr": master, "eco:sr": [v + 0.05 + 0.002 * i
                                                        for i, v in enumerate(master)]})
    g = eco_claims.paired_gaps(costly, "eco", "sr")
    assert g["n"] == 4 and g["lo"] > 0                                   # positive control
    null = _eco_adam({"master:sr": master,
                      "eco:sr": list(np.array(master) + [0.01, -0.01, 0.005, -0.005])})
    g = eco_claims.paired_gaps(null, "eco", "sr")
    assert g["lo"] < 0 < g["hi"] and g["mean"] == pytest.approx(0.0, abs=1e-12)  # negative


def test_eco_adam_failed_seeds_are_counted_not_paired():
    r = _eco_adam({"master:rtn": [0.3, 0.3, 0.3], "eco:rtn": [0.3, 2.0, np.nan]},
                  {"eco:rtn": ["trained", "stalled", "diverged"]})
    assert eco_claims.outcome_counts(r, "approx", ["eco:rtn", "master:rtn"]) == {
        "eco:rtn": {"trained": 1, "stalled": 1, "diverged": 1},
        "master:rtn": {"trained": 3, "stalled": 0, "diverged": 0}}
    g = eco_claims.paired_gaps(r, "eco", "rtn")
    assert g["n"] == 1 and g["mean"] == 0.0 and math.isnan(g["lo"])
