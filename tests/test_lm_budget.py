"""The lm protocol at the paper's budget (experiment lm_budget, figures lm_table, lm_pareto and
lm_scaling): the protocol check that lets shipped runs stand beside the lm experiment's, the
paired gaps, the shipped file's contents, and (slow) one run of each group retrained from its
command, byte for byte."""
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from ecosim import claims
from ecosim.experiments import lm_budget as exp_b
from ecosim.experiments.lm import (_OUTCOME, records_to_results, read_records, run_setting,
                                   unique_runs)
from ecosim.figures.lm import lm_markdown, with_budget
from ecosim.figures.lm_scaling import GAPS, lm_scaling, paper_gaps, scaling_points
from lm_records import RunLike
from lm_records import run_record as _rec

ROOT = Path(__file__).resolve().parents[1]

PROTOCOL = {"seq": 64, "global_batch": 16, "schedule": {"warmup": 0.1, "final_lr": 0.1},
            "betas": [0.9, 0.98], "eps": 1e-9, "weight_decay": 0.1, "clip": 1.0,
            "eval_batches": 16, "storage": "codes", "corpus": {"sha256": "ab"},
            "split": {"block": 4096, "val_every": 20}}


def _run(method, seed, val, *, preset="micro", steps=100, lr=0.003, **over):
    r = _rec(method, seed, val, steps=steps, preset=preset)
    r.update(PROTOCOL, lr=lr, model={"d_model": 32 if preset == "micro" else 64})
    r.update(over)
    return r


def _results(records):
    return records_to_results(records)


def _lm(seeds=3):
    vals = {"bf16_master": 2.00, "fp8_eco_sr": 2.01, "fp8_naive_sr": 2.03, "fp8_eco_rtn": 2.05}
    return _results([_run(m, s, v + 0.01 * s) for s in range(seeds) for m, v in vals.items()])


def _budget(seeds=3, **over):
    """micro at 5x the steps and tiny at the lm steps: naive+SR falls behind by 0.10 and 0.05."""
    recs = []
    for s in range(seeds):
        for preset, steps, gap in (("micro", 500, 0.10), ("tiny", 100, 0.05)):
            base = 1.8 + 0.01 * s
            recs += [_run("bf16_master", s, base, preset=preset, steps=steps, **over),
                     _run("fp8_eco_sr", s, base + 0.005 + 0.001 * s, preset=preset,
                          steps=steps, **over),
                     _run("fp8_naive_sr", s, base + 0.005 + gap + 0.002 * s, preset=preset,
                          steps=steps, **over)]
    return _results(recs)


# -- the protocol check ---------------------------------------------------------------------

def test_runs_of_other_size_steps_and_lr_join_the_table():
    r, note = with_budget(_lm(), _budget(lr=0.009))
    assert note == ""
    assert len(r["method"]) == 12 + 18
    md = lm_markdown(r)
    assert "tiny" in md and "500 steps" in md


@pytest.mark.parametrize("field, value", [("clip", 0.5), ("eval_batches", 4), ("seq", 32),
                                          ("act_fp8", True), ("weight_decay", 0.0)])
def test_runs_of_another_protocol_are_refused_naming_the_field(field, value):
    """Negative control: a field the budget runs may not vary keeps them out of the table."""
    r, note = with_budget(_lm(), _budget(**{field: value}))
    assert len(r["method"]) == 12  # the lm runs alone
    assert f"in {field!r}" in note and "lm_budget" in note
    with pytest.raises(ValueError, match=f"in {field!r}"):
        claims.check_protocol(_lm(), _budget(**{field: value}), exp_b.VARIED, "remake")


def test_check_protocol_refuses_a_reference_of_two_protocols():
    two = _results([_run("bf16_master", 0, 2.0), _run("bf16_master", 1, 2.0, clip=0.5)])
    with pytest.raises(ValueError, match="2 protocols"):
        claims.check_protocol(two, _budget(), exp_b.VARIED, "remake")


# -- paired gaps and the scaling figure ----------------------------------------------------

def test_lm_gaps_pair_by_seed_against_hand_computation():
    r, _ = with_budget(_lm(), _budget())
    points = scaling_points(r)
    assert len(points) == 3  # every column with both methods of a gap is a point
    micro_long = next(p for p in points if p["preset"] == "micro" and p["steps"] == 500)
    g = micro_long["naive+SR − ECO+SR"]
    diffs = [0.10 + 0.001 * s for s in range(3)]  # naive - eco per seed
    assert g["n"] == 3 and g["mean"] == pytest.approx(np.mean(diffs), abs=1e-12)
    assert g["lo"] > 0  # naive+SR behind, resolved


def test_a_stalled_run_enters_no_gap():
    """Negative control of the pairing: a naive+SR run that stalls is not averaged in."""
    recs = [_run("bf16_master", s, 2.0 + 0.01 * s) for s in range(3)]
    recs += [_run("fp8_eco_sr", s, 2.01 + 0.01 * s) for s in range(3)]
    flat = [[x, 2.9, 2.9] for x in range(0, 101, 10)]  # no fall in the second half
    recs += [_run("fp8_naive_sr", 0, 2.9, curve=flat)]
    recs += [_run("fp8_naive_sr", s, 2.05 + 0.01 * s) for s in (1, 2)]
    gaps = claims.lm_gaps(_results(recs), "fp8_naive_sr", "fp8_eco_sr")
    assert gaps[0]["seeds"] == [1, 2] and gaps[0]["n"] == 2


def test_paper_gaps_are_table_1s_differences():
    p = paper_gaps()
    naive = dict(p["naive+SR − ECO+SR"])
    assert naive["30M"] == pytest.approx(3.4008 - 3.3317, abs=1e-12)
    assert naive["800M"] == pytest.approx(2.9471 - 2.5399, abs=1e-12)
    eco = dict(p["ECO+SR − BF16 w/ master"])
    assert eco["800M"] == pytest.approx(2.5399 - 2.5306, abs=1e-12)
    assert set(GAPS) == set(p)


def test_lm_scaling_figure_and_its_markdown():
    fig, tables, md = lm_scaling(RunLike(_lm()), RunLike(_budget()))
    t = tables["gaps"]
    assert set(t["gap"]) == set(GAPS)
    assert len(t["mean"]) == 2 * 3  # three columns, two gaps each
    assert "| 800M | 7.5e-05 |" in md and "+0.4072" in md
    fig2, _, md2 = lm_scaling(RunLike(_lm()), RunLike(_budget(clip=0.5)))
    assert "not shown" in md2 and "'clip'" in md2


# -- the new ordering: ECO+RTN < naive+SR --------------------------------------------------

def _order(results, a, b):
    found = claims.lm_orderings(results)
    return next(o for o in found if (o["a"], o["b"]) == (a, b))


def test_eco_rtn_below_naive_sr_is_judged_both_ways():
    def runs(eco_rtn_minus_naive):
        recs = []
        for s in range(4):
            recs += [_run("bf16_master", s, 2.0 + 0.01 * s),
                     _run("fp8_naive_sr", s, 2.05 + 0.01 * s),
                     _run("fp8_eco_rtn", s, 2.05 + eco_rtn_minus_naive + 0.011 * s)]
        return _results(recs)
    assert _order(runs(-0.05), "fp8_eco_rtn", "fp8_naive_sr")["verdict"] == "holds"
    assert _order(runs(+0.05), "fp8_eco_rtn", "fp8_naive_sr")["verdict"] == "reversed"


# -- the shipped file ----------------------------------------------------------------------

def _shipped():
    path = exp_b.shipped_file()
    if not path.is_file():
        pytest.fail(f"{path} is missing: make it with the commands of "
                    "ecosim.experiments.lm_budget")
    return read_records(path)


def _protocol_module():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import lm_protocol
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return lm_protocol


def _group_of(rec):
    for g in exp_b.GROUPS:
        lr_ok = rec["lr"] == (g["lr"] if g["lr"] is not None else 0.003)
        if rec["preset"] == g["preset"] and lr_ok and round(
                rec["tokens"] / rec["n_params"]["non_embedding"]) == g["tokens_per_param"]:
            return g
    return None


def test_the_shipped_file_holds_the_groups_runs_and_nothing_else():
    recs, notices = unique_runs(_shipped(), source="shipped")
    assert not notices
    from ecosim.experiments.lm import LMTableConfig
    every = LMTableConfig().methods
    want = set()
    proto = _protocol_module()
    for g in exp_b.GROUPS:
        steps = proto.steps_for(g["preset"], g["tokens_per_param"], 16, 64)
        for m in g["methods"] or every:
            for s in range(g["seeds"]):
                want.add((g["preset"], steps, g["lr"] or 0.003, m, s))
    got = {(r["preset"], r["steps"], r["lr"], r["method"], r["seed"]) for r in recs}
    assert got <= want, f"runs of no group: {sorted(got - want)[:3]}"
    missing = want - got
    assert not missing, f"{len(missing)} runs missing, e.g. {sorted(missing)[:3]}"


def test_the_shipped_runs_are_the_lm_protocol_apart_from_size_budget_and_lr():
    """The switched runs' file is the lm protocol with switches: the budget runs must equal
    its setting once the switches and the varied fields are set aside."""
    from ecosim.claims.lm_switches import setting_without_switches
    from ecosim.experiments import lm_switches as exp_sw
    ref = [setting_without_switches(run_setting(r)) for r in read_records(exp_sw.shipped_file())]
    ref_cols = {"setting": np.array(ref[:1]), "method": np.array(["x"]),
                "seed": np.array([0]), "preset": np.array(["micro"])}
    budget = records_to_results(_shipped())
    claims.check_protocol(ref_cols, budget, exp_b.VARIED, "remake")


# -- slow: the shipped file cannot drift from the code --------------------------------------

def _first_run_of_each_group():
    out = []
    for g in exp_b.GROUPS:
        method = "fp8_eco_sr"
        out.append(pytest.param(g, method, id=f"{g['preset']}-{g['tokens_per_param']}-"
                                              f"lr{g['lr']}"))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("group, method", _first_run_of_each_group())
def test_a_run_of_each_group_retrains_byte_for_byte(group, method, tmp_path):
    """Seed 0 of ECO+SR of each group, retrained from the group's command, gives the shipped
    record's outcome (curve, losses, counts) byte for byte on the pinned platform."""
    from platform_pins import pinned_platform

    from ecosim.torch import lm as tlm
    pinned_platform(torch=True)
    proto = _protocol_module()
    runs = proto.protocol(group["preset"], None, [method], 1, group["tokens_per_param"],
                          group["lr"])
    (_, seed, argv), = runs
    out = tmp_path / "r.jsonl"
    assert tlm.main([*argv, "--results", str(out)]) == 0
    new = read_records(out)[0]
    old = next(r for r in _shipped() if r["method"] == method and r["seed"] == seed
               and _group_of(r) is group)
    for f in _OUTCOME:
        assert json.dumps(new.get(f)) == json.dumps(old.get(f)), f


# -- what moves the gap: changes between columns ----------------------------------------------

def test_gap_change_grows_shrinks_and_is_not_resolved():
    a = {"n": 5, "mean": 0.02, "se": 0.004}
    assert claims.gap_change(a, {"n": 5, "mean": 0.06, "se": 0.004})["verdict"] == "grows"
    assert claims.gap_change(a, {"n": 5, "mean": -0.02, "se": 0.004})["verdict"] == "shrinks"
    assert claims.gap_change(a, {"n": 5, "mean": 0.025, "se": 0.004})["verdict"] == \
        "not resolved"
    one = claims.gap_change(a, {"n": 1, "mean": 0.5, "se": float("nan")})
    assert one["verdict"] == "not resolved" and one["mean"] == pytest.approx(0.48)


def test_readings_name_what_changed_and_whether_the_gap_moved():
    from ecosim.figures.lm_scaling import readings
    r, _ = with_budget(_lm(), _budget())
    lines = readings(scaling_points(r))
    # micro at 100 steps (lm: naive - eco = +0.02) and at 500 (+0.10..): grows with tokens
    tpp = [ln for ln in lines if ln.startswith("- naive+SR − ECO+SR, tokens per parameter")
           and "micro" in ln]
    assert len(tpp) == 1 and tpp[0].endswith(": grows")
    # micro -> tiny at the lm's steps: a change of size only
    size = [ln for ln in lines if ln.startswith("- naive+SR − ECO+SR, size micro")]
    assert len(size) == 1
