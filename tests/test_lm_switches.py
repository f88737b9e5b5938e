"""The paper's two switches on the lm protocol (ecosim.claims.lm_switches, figure lm_switches):
paired effects and Table 1 with the switches against hand computations, refusal of a results
file of another protocol, and the shipped file (the lm protocol with the switches on)."""
import json
import math

import numpy as np
import pytest

from ecosim.claims import lm_switches as sw
from ecosim.claims import runs_of_seeds
from ecosim.experiments import lm_switches as exp_sw
from ecosim.experiments.lm import LMTableConfig, read_records, records_to_results, run_setting
from ecosim.figures.lm_switches import lm_switches as figure_fn

from lm_records import RunLike
from lm_records import run_record as _rec

T975_2 = 4.302652729749464  # Student t quantile 0.975, df 2 (tables)

OFF = {"bf16_master": [2.00, 2.10, 1.95], "fp8_eco_sr": [2.01, 2.12, 1.94],
       "fp8_eco_rtn": [2.05, 2.16, 2.00]}
ON = {"bf16_master": [2.02, 2.11, 1.96], "fp8_eco_sr": [2.03, 2.15, 1.95],
      "fp8_eco_rtn": [2.04, 2.14, 2.01]}


def _switched(rec, *flags):
    return dict(rec, **{f: True for f in flags})


def _off():
    return records_to_results([_rec(m, s, v[s]) for m, v in OFF.items() for s in range(3)])


def _on(diverged_seed=None, **kw):
    recs = []
    for m, v in ON.items():
        flag = "autocast" if m == "bf16_master" else "act_fp8"
        for s in range(3):
            bad = m == "fp8_eco_rtn" and s == diverged_seed
            recs.append(_switched(_rec(m, s, v[s], diverged=bad, **kw), flag))
    return records_to_results(recs)


def test_switch_effects_are_the_paired_differences():
    eff = {e["method"]: e for e in sw.switch_effects(_off(), _on())}
    assert eff["bf16_master"]["switches"] == ("autocast",)
    assert eff["fp8_eco_sr"]["switches"] == ("act_fp8",)
    for m in ON:
        d = np.array(ON[m]) - np.array(OFF[m])
        mean, se = d.mean(), d.std(ddof=1) / math.sqrt(3)
        e = eff[m]["effect"]
        assert e["n"] == 3 and eff[m]["seeds"] == [0, 1, 2]
        assert e["mean"] == pytest.approx(mean, abs=1e-14)
        assert e["lo"] == pytest.approx(mean - T975_2 * se, abs=1e-12)
        assert e["hi"] == pytest.approx(mean + T975_2 * se, abs=1e-12)


def test_a_diverged_switched_run_is_counted_not_averaged():
    eff = {e["method"]: e for e in sw.switch_effects(_off(), _on(diverged_seed=1))}
    e = eff["fp8_eco_rtn"]
    assert e["outcomes_on"] == {"trained": 2, "stalled": 0, "diverged": 1}
    assert e["outcomes_off"] == {"trained": 3, "stalled": 0, "diverged": 0}
    assert e["seeds"] == [0, 2]
    d = np.array(ON["fp8_eco_rtn"])[[0, 2]] - np.array(OFF["fp8_eco_rtn"])[[0, 2]]
    assert e["effect"]["mean"] == pytest.approx(d.mean(), abs=1e-14)


def test_paper_protocol_replaces_each_switched_method_and_pairs_with_bf16_autocast():
    off = _off()
    extra = records_to_results([_rec("fp32", s, 1.99 + 0.01 * s) for s in range(3)])
    off = {k: np.concatenate([off[k], extra[k]]) for k in off}
    on = _on()
    paper = sw.paper_protocol(off, on)
    methods = list(paper["method"])
    assert sorted(methods) == sorted(["fp32"] * 3 + [m for m in ON for _ in range(3)])
    assert set(paper["switches"][np.array(methods) == "fp32"]) == {""}
    assert set(paper["switches"][np.array(methods) == "bf16_master"]) == {"autocast"}
    assert len(set(paper["setting"])) == 1  # one comparable group
    from ecosim import claims
    cells = claims.lm_cells(paper)
    gap = np.array(ON["fp8_eco_sr"]) - np.array(ON["bf16_master"])
    assert cells[0, "fp8_eco_sr"]["gap"]["mean"] == pytest.approx(gap.mean(), abs=1e-14)
    assert off["method"].size == 12  # inputs untouched
    assert "switches" not in off and "switches" not in on


def test_another_protocol_is_refused_naming_what_differs():
    with pytest.raises(ValueError, match=r"differs from the reference protocol in 'steps'"):
        sw.switch_effects(_off(), _on(steps=200))
    with pytest.raises(ValueError, match="preset 'tiny'"):
        sw.paper_protocol(_off(), _on(preset="tiny"))
    fig, tables, md = figure_fn(lm=_off(), lm_switches=_on(steps=200))
    assert md.startswith("Not compared: switched run") and "'steps'" in md
    assert list(tables) == ["refused"]


def test_figure_tables_and_markdown():
    fig, tables, md = figure_fn(lm=RunLike(_off()), lm_switches=RunLike(_on()))
    eff = tables["effects"]
    i = list(eff["method"]).index("fp8_eco_sr")
    d = np.array(ON["fp8_eco_sr"]) - np.array(OFF["fp8_eco_sr"])
    assert eff["effect"][i] == pytest.approx(d.mean(), abs=1e-14) and eff["n"][i] == 3
    assert "| FP8 ECO + SR | E4M3 activations |" in md
    assert "| BF16 w/ master | bf16 autocast |" in md
    gaps = tables["gaps"]
    rows = [j for j, (m, p) in enumerate(zip(gaps["method"], gaps["protocol"]))
            if m == "fp8_eco_sr"]
    assert [gaps["protocol"][j] for j in rows] == ["off", "paper"]


def test_the_shipped_file_is_the_lm_protocol_with_the_papers_switches():
    """The file ecosim ships: every run of the lm experiment's default protocol except FP32
    for the seeds it names (exp_sw.SEEDS, the lm experiment's first three of five), each
    method with the paper's switch (bf16 autocast for BF16 with master, E4M3
    activations for the FP8 methods), and otherwise the protocol's own settings."""
    cfg = LMTableConfig()
    records = read_records(exp_sw.shipped_file())
    got = {(r["method"], r["seed"]) for r in records}
    assert set(exp_sw.SEEDS) <= set(range(cfg.seeds[0]))
    want = {(m, s) for m in cfg.methods if m != "fp32" for s in exp_sw.SEEDS}
    assert got == want and len(records) == len(want)
    for r in records:
        s = json.loads(run_setting(r))
        assert sw.switches_of(run_setting(r)) == (
            ("autocast",) if r["method"] == "bf16_master" else ("act_fp8",))
        assert (r["preset"], s["steps"], s["seq"], s["global_batch"], s["eval_batches"]) == (
            cfg.presets[0], cfg.steps[0], cfg.seq, cfg.batch, cfg.eval_batches)
        assert not r["diverged"] and math.isfinite(r["val_loss"])


def test_the_plain_runs_are_cut_to_the_switched_runs_seeds():
    """lm runs seeds 0-4, the shipped switched runs 0-2: the figure compares the same seeds on
    both sides (its tables read 3 / 3 trained, not 3 / 5), and the input is not modified."""
    five = records_to_results([_rec(m, s, v[s % 3] + 0.01 * s) for m, v in OFF.items()
                               for s in range(5)])
    before = {k: np.array(v, copy=True) for k, v in five.items()}
    cut = runs_of_seeds(five, _on())
    assert sorted(set(cut["seed"].tolist())) == [0, 1, 2]
    assert len(cut["seed"]) == 3 * len(OFF)
    keep = np.asarray(five["seed"]) < 3

    def same(a, b):  # byte for byte (NaN-padded curves included)
        a, b = np.asarray(a), np.asarray(b)
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    for k, v in five.items():
        assert same(v, before[k])  # not modified
        assert same(cut[k], np.asarray(v)[keep])
    eff = {e["method"]: e for e in sw.switch_effects(cut, _on())}
    assert all(e["outcomes_off"]["trained"] == 3 and e["seeds"] == [0, 1, 2]
               for e in eff.values())
