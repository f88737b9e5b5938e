"""Figure 3's verdicts (ecosim.claims.lm_moe) on hand-made runs: gaps paired to FP8 master + SR,
a stalled run counted and left out, and the paper's observations judged."""

import math

import numpy as np
import pytest

from ecosim.claims import lm_moe as V
from ecosim.claims import t_interval


def _runs(final: dict, stalled=()):
    """Three seeds per method; validation every 10 of 40 steps, falling to ``final[m][s]``
    (by 0.5 over the second half), or flat over the second half for ``stalled`` methods."""
    cols = {k: [] for k in ("method", "seed", "diverged", "val_loss", "steps")}
    steps, vals = [], []
    for m, losses in final.items():
        for s, v in enumerate(losses):
            cols["method"].append(m)
            cols["seed"].append(s)
            cols["diverged"].append(False)
            cols["val_loss"].append(v)
            cols["steps"].append(40)
            steps.append([10.0, 20.0, 30.0, 40.0])
            vals.append([v + 2, v, v, v] if m in stalled else [v + 2, v + 1, v + 0.5, v])
    r = {k: np.array(v) for k, v in cols.items()}
    r["curve_step"], r["curve_val"] = np.array(steps), np.array(vals)
    return r


FINAL = {"fp8_master_sr": [2.00, 2.10, 2.05], "fp8_eco_sr": [2.004, 2.103, 2.056],
         "fp8_naive_sr": [2.05, 2.16, 2.09], "fp8_naive_rtn": [2.5, 2.6, 2.55]}


def test_gaps_are_paired_to_master_sr_by_seed():
    cells = V.moe_cells(_runs(FINAL))
    gap = cells[0, "fp8_eco_sr"]["gap"]
    hand = [0.004, 0.003, 0.006]  # per-seed ECO - master
    assert gap["n"] == 3 and gap["mean"] == pytest.approx(sum(hand) / 3, abs=1e-12)
    assert gap["hi"] == pytest.approx(t_interval(np.array(FINAL["fp8_eco_sr"])
                                                 - np.array(FINAL["fp8_master_sr"]))["hi"])
    assert cells[0, "fp8_master_sr"]["gap"]["n"] == 0  # the base has no gap


def test_observations_and_a_stalled_run():
    r = _runs(FINAL, stalled=("fp8_naive_rtn",))
    cells = V.moe_cells(r)
    assert cells[0, "fp8_naive_rtn"]["outcomes"] == {"trained": 0, "stalled": 3, "diverged": 0}
    assert math.isnan(cells[0, "fp8_naive_rtn"]["loss"]["mean"])  # never averaged
    got = {(o["a"], o["b"]): (o["verdict"], o["how"]) for o in V.moe_orderings(r)}
    # ECO - master: 0.0043 [~0.0005, ~0.0081] inside +-0.01: holds
    assert got["fp8_eco_sr", "fp8_master_sr"] == ("holds", "interval")
    assert got["fp8_eco_sr", "fp8_naive_sr"] == ("holds", "interval")
    assert got["fp8_master_sr", "fp8_naive_sr"] == ("holds", "interval")
    assert got["fp8_naive_sr", "fp8_naive_rtn"] == ("holds", "outcome")


def test_paper_numbers():
    assert V.paper_gap("SMoE", "fp8_eco_sr") == pytest.approx(0.0055, abs=1e-12)
    assert V.paper_gap("Gemma", "fp8_naive_sr") == pytest.approx(0.0117, abs=1e-12)
    assert math.isnan(V.paper_loss("SMoE", "fp8_naive_sr"))  # its naive bars are unlabelled
    assert sorted(v for m, _, v, _ in V.PAPER_FIG3 if m.startswith("SMoE")) == \
        [2.9144, 2.9177, 2.9232, 3.0997]


def test_no_ordering_quotes_the_unlabelled_naive_values():
    """The SMoE's two naive values come without their rounding: no ordering or label may
    present either as one rounding's, and no runner method is given one."""
    unlabelled = {v for m, _, v, name in V.PAPER_FIG3 if m.startswith("SMoE") and name is None}
    assert unlabelled == {2.9144, 3.0997}
    for *_, paper in V.MOE_ORDERINGS:
        assert "2.9144" not in paper and "3.0997" not in paper
    for model, label, _, name in V.PAPER_FIG3:
        if model.startswith("SMoE") and name is None:
            assert "not stated" in label and "SR" not in label and "RTN" not in label
