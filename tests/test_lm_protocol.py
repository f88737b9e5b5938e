"""The Table 1 protocol on a language model: paired statistics, outcomes (trained, stalled,
diverged) and the paper's orderings (ecosim.claims), checked against hand computations, and
a results file with a diverged and a stalled run through the figures."""
import math

import numpy as np
import pytest

from ecosim import claims
from ecosim.experiments.lm import METHODS, LMTableConfig, method_parts, records_to_results
from ecosim.figures.lm import lm_markdown
from lm_records import linear_curve as _curve
from lm_records import run_record as _rec

T975 = {2: 4.302652729749464, 3: 3.182446305284263}  # Student t quantiles (tables), df 2, 3


def test_t_interval_against_hand_computation():
    x = [0.010, 0.030, 0.020, 0.060]
    mean = 0.12 / 4
    sd = math.sqrt((0.02**2 + 0.0 + 0.01**2 + 0.03**2) / 3)
    se = sd / 2
    d = claims.t_interval(x)
    assert d["n"] == 4 and d["mean"] == pytest.approx(mean, rel=1e-14)
    assert d["sd"] == pytest.approx(sd, rel=1e-12) and d["se"] == pytest.approx(se, rel=1e-12)
    assert d["lo"] == pytest.approx(mean - T975[3] * se, rel=1e-12)
    assert d["hi"] == pytest.approx(mean + T975[3] * se, rel=1e-12)
    one = claims.t_interval([0.5])
    assert one["n"] == 1 and one["mean"] == 0.5 and math.isnan(one["lo"])
    assert claims.t_interval([])["n"] == 0
    assert x == [0.010, 0.030, 0.020, 0.060]  # input untouched
    with pytest.raises(ValueError, match="finite values"):
        claims.t_interval([1.0, math.nan])
    with pytest.raises(ValueError, match="1-D"):
        claims.t_interval([[1.0, 2.0]])
    with pytest.raises(ValueError, match=r"level must lie in \(0, 1\)"):
        claims.t_interval([1.0, 2.0], level=1.0)


BASE = [2.00, 2.10, 1.95]                    # bf16_master, seeds 0 1 2
ECO_SR = [2.01, 2.12, 1.94]                  # gaps +0.01 +0.02 -0.01
NAIVE_SR = [2.20, 2.25, 2.18]                # gaps +0.20 +0.15 +0.23


def _protocol_records():
    recs = []
    for s in range(3):
        recs.append(_rec("bf16_master", s, BASE[s]))
        recs.append(_rec("fp8_eco_sr", s, ECO_SR[s]))
        recs.append(_rec("fp8_naive_sr", s, NAIVE_SR[s]))
        # naive+RTN: seed 0 diverges; seeds 1, 2 stall (flat over the second half)
        if s == 0:
            recs.append(_rec("fp8_naive_rtn", s, 0.0, diverged=True))
        else:
            recs.append(_rec("fp8_naive_rtn", s, 2.6, curve=_curve(100, 3.0, 2.6, 2.6)))
        # ECO+RTN: seed 2 falls slowly in the second half but more than STALL_RATIO of
        # BF16's fall (0.3 nats): trained, and averaged
        eco_rtn = [2.05, 2.16, 2.00][s]
        recs.append(_rec("fp8_eco_rtn", s, eco_rtn,
                         curve=_curve(100, 3.0, eco_rtn + 0.1, eco_rtn) if s == 2 else None))
    return recs


def test_outcomes_stalled_and_diverged():
    r = records_to_results(_protocol_records())
    oc = claims.lm_outcomes(r)
    by = {(str(m), int(s)): o for m, s, o in zip(r["method"], r["seed"], oc)}
    assert by["fp8_naive_rtn", 0] == "diverged"
    assert by["fp8_naive_rtn", 1] == by["fp8_naive_rtn", 2] == "stalled"
    assert by["fp8_eco_rtn", 2] == "trained"  # fell 0.1 >= 0.25 * 0.3
    assert all(by[m, s] == "trained" for m in ("bf16_master", "fp8_eco_sr", "fp8_naive_sr")
               for s in range(3))
    # the boundary: a fall just under STALL_RATIO of the baseline's is a stall
    drop = claims.STALL_RATIO * 0.3
    for fall, want in ((drop * 0.99, "stalled"), (drop * 1.01, "trained")):
        recs = [_rec("bf16_master", 0, 2.0),
                _rec("fp8_eco_rtn", 0, 2.5, curve=_curve(100, 3.0, 2.5 + fall, 2.5))]
        assert claims.lm_outcomes(records_to_results(recs)).tolist() == ["trained", want]
    # no stall is called when the baseline itself is flat (nothing left to learn)
    recs = [_rec("bf16_master", 0, 2.0, curve=_curve(100, 3.0, 2.005, 2.0)),
            _rec("fp8_eco_rtn", 0, 2.5, curve=_curve(100, 3.0, 2.5, 2.5))]
    assert claims.lm_outcomes(records_to_results(recs)).tolist() == ["trained", "trained"]


def test_paired_gaps_against_hand_computation():
    r = records_to_results(_protocol_records())
    cells = claims.lm_cells(r)
    eco = cells[0, "fp8_eco_sr"]
    gaps = [a - b for a, b in zip(ECO_SR, BASE)]
    mean = sum(gaps) / 3
    sd = math.sqrt(sum((g - mean) ** 2 for g in gaps) / 2)
    assert eco["gap"]["n"] == 3 and eco["seeds"] == [0, 1, 2]
    assert eco["gap"]["mean"] == pytest.approx(mean, abs=1e-12)
    assert eco["gap"]["lo"] == pytest.approx(mean - T975[2] * sd / math.sqrt(3), abs=1e-12)
    assert eco["gap"]["hi"] == pytest.approx(mean + T975[2] * sd / math.sqrt(3), abs=1e-12)
    # pairing matters: the unpaired spread of the losses is ~6x the paired one
    assert np.std(ECO_SR, ddof=1) > 5 * sd
    nrtn = cells[0, "fp8_naive_rtn"]
    assert nrtn["outcomes"] == {"trained": 0, "stalled": 2, "diverged": 1}
    assert nrtn["gap"]["n"] == 0 and math.isnan(nrtn["loss"]["mean"])  # nothing averaged
    ertn = cells[0, "fp8_eco_rtn"]
    assert ertn["gap"]["mean"] == pytest.approx((0.05 + 0.06 + 0.05) / 3, abs=1e-12)


def test_orderings_verdicts():
    r = records_to_results(_protocol_records())
    got = {(o["a"], o["rel"], o["b"]): o for o in claims.lm_orderings(r)}
    # ECO+SR ~ BF16: gaps +0.01 +0.02 -0.01, interval about [-0.03, +0.05]: not within +-0.01
    eco = got["fp8_eco_sr", "~", "bf16_master"]
    assert eco["verdict"] == "not resolved" and eco["diff"]["n"] == 3
    # ECO+SR < naive+SR: -0.19 -0.13 -0.24, the interval lies below 0
    d = [a - b for a, b in zip(ECO_SR, NAIVE_SR)]
    o = got["fp8_eco_sr", "<", "fp8_naive_sr"]
    assert o["verdict"] == "holds" and o["how"] == "interval"
    assert o["diff"]["mean"] == pytest.approx(sum(d) / 3, abs=1e-12) and o["diff"]["hi"] < 0
    # ECO+SR < ECO+RTN: -0.04 -0.04 -0.06: holds
    assert got["fp8_eco_sr", "<", "fp8_eco_rtn"]["verdict"] == "holds"
    # every naive+RTN run failed, every ECO+RTN and naive+SR run trained: holds by outcome
    for a in ("fp8_eco_rtn", "fp8_naive_sr"):
        o = got[a, "<", "fp8_naive_rtn"]
        assert (o["verdict"], o["how"], o["failed"], o["diff"]["n"]) == ("holds", "outcome",
                                                                          "b", 0)
    assert ("fp8_master_rtn", "~", "bf16_master") not in got  # no master+RTN runs
    # "~" with every run of A failed and every run of B trained: does not hold, by outcome
    failed = [_rec("fp8_master_rtn", s, 0.0, diverged=True) for s in range(3)]
    o = [o for o in claims.lm_orderings(records_to_results(_protocol_records() + failed))
         if o["a"] == "fp8_master_rtn"]
    assert [(x["verdict"], x["how"], x["failed"]) for x in o] == [
        ("does not hold", "outcome", "a")]
    # reversed and "does not hold"
    recs = [_rec(m, s, v) for s in range(3) for m, v in (
        ("bf16_master", 2.0 + 0.1 * s), ("fp8_eco_sr", 2.3 + 0.1 * s + 0.001 * s * s),
        ("fp8_naive_sr", 2.1 + 0.1 * s))]
    got = {(o["a"], o["b"]): o["verdict"] for o in claims.lm_orderings(records_to_results(recs))}
    assert got["fp8_eco_sr", "fp8_naive_sr"] == "reversed"
    assert got["fp8_eco_sr", "bf16_master"] == "does not hold"


def test_results_file_with_a_diverged_and_a_stalled_run(lm_figures):
    out = lm_figures(_protocol_records())
    md = (out / "lm_table.md").read_text()
    assert "| FP8 naive + RTN | diverged 1, stalled 2 of n=3 |" in md
    assert "32,928 non-embedding parameters, 100 steps, 102,400 training tokens = 3.1 per " \
           "non-embedding parameter, 3 seeds" in md
    row = next(line for line in md.splitlines() if line.startswith("| FP8 ECO + SR ≈"))
    assert "not resolved: +0.0067 [" in row and "n=3" in row
    row = next(line for line in md.splitlines()
               if line.startswith("| FP8 ECO + RTN < FP8 naive + RTN"))
    assert "holds (by outcome: B stalled or diverged)" in row
    final = (out / "lm_table.final.csv").read_text().splitlines()
    head = final[0].split(",")
    nrtn = dict(zip(head, next(x for x in final if ",fp8_naive_rtn," in x).split(",")))
    assert (nrtn["trained"], nrtn["stalled"], nrtn["diverged"]) == ("0", "2", "1")
    pts = (out / "lm_pareto.points.csv").read_text()
    assert "fp8_naive_rtn" in pts


def test_default_protocol_carries_a_claim():
    """make figures' default: >= 20 tokens per non-embedding parameter (counted as
    ecosim.torch.model.param_counts does), >= 3 seeds, every Table 1 method and FP32."""
    pytest.importorskip("torch")
    from ecosim.torch.model import param_counts

    cfg = LMTableConfig()
    assert set(cfg.methods) == {"fp32", *METHODS}
    for preset, steps, seeds in zip(cfg.presets, cfg.steps, cfg.seeds):
        tokens = steps * cfg.batch * cfg.seq
        assert tokens / param_counts(preset)["non_embedding"] >= 20
        assert seeds >= 3
        assert steps % cfg.eval_every == 0 and steps // cfg.eval_every >= 4  # stall window
