"""The lm_eco_adam figure's gaps and table on hand-made runs (no training), and its
experiment's config."""
import numpy as np
import pytest

from ecosim import experiments as E
from ecosim.experiments.lm import records_to_results
from ecosim.experiments.lm_eco_adam import DEFAULT_METHODS, ECO_ADAM_METHODS
from ecosim.figures.lm_eco_adam import eco_adam_markdown, eco_adam_rows, lm_eco_adam, merged_runs

from lm_records import RunLike

# final validation loss per method and seed 0, 1, 2
FINAL = {"fp8_master_rtn": (3.00, 3.02, 3.01), "fp8_eco_rtn": (3.05, 3.06, 3.07),
         "fp8_ecomx_rtn": (3.02, 3.04, 3.03), "fp8_naive_sr": (3.5, 3.5, 3.5),
         "fp8_ecowd_rtn": (3.05, None, 3.08)}


def _record(method, seed, val, steps=20):
    diverged = val is None
    curve = [[s, 5.0 - s / 10, 5.0 - s / 10] for s in range(0, 21, 5)]
    return {"preset": "micro", "method": method, "seed": seed, "steps": steps, "tokens": 20480,
            "val_loss": val, "final_train_loss": val, "diverged": diverged,
            "curve": curve[:2] if diverged else curve,
            "n_params": {"total": 100, "non_embedding": 50, "quantized": 40},
            "bytes_per_param": {"formula": 9.0, "measured": 9.0}, "peak_memory_bytes": 1}


def _runs(methods, **kw):
    return records_to_results([_record(m, s, v, **kw) for m in methods
                               for s, v in enumerate(FINAL[m])])


def test_gaps_to_master_and_to_eco_are_paired_by_seed():
    lm = _runs(["fp8_master_rtn", "fp8_naive_sr", "fp8_eco_rtn"])
    variants = _runs(["fp8_ecomx_rtn", "fp8_ecowd_rtn"])
    r = merged_runs(lm, variants)
    assert sorted(set(r["method"])) == ["fp8_eco_rtn", "fp8_ecomx_rtn", "fp8_ecowd_rtn",
                                        "fp8_master_rtn"]  # naive is not paired with
    mlp = {("ecomx", "rtn"): {"n": 4, "mean": 0.0112, "lo": 0.0036, "hi": 0.0189}}
    rows = eco_adam_rows(r, mlp)
    assert [row["method"] for row in rows] == ["fp8_eco_rtn", "fp8_ecomx_rtn", "fp8_ecowd_rtn"]
    eco, mx, wd = rows
    # momentum-exact minus master per seed: 0.02, 0.02, 0.02 -> +0.02, zero spread
    assert mx["master"]["mean"] == pytest.approx(0.02) and mx["master"]["n"] == 3
    assert mx["master"]["hi"] - mx["master"]["lo"] == pytest.approx(0.0, abs=1e-12)
    # minus plain ECO: -0.03, -0.02, -0.04 -> mean -0.03, sd 0.01, t(0.975, 2) = 4.302653
    assert mx["eco"]["mean"] == pytest.approx(-0.03)
    assert mx["eco"]["hi"] == pytest.approx(-0.03 + 4.302653 * 0.01 / np.sqrt(3), abs=1e-6)
    assert eco["eco"] is None and eco["master"]["mean"] == pytest.approx(0.05)
    # the diverged seed is counted, never averaged: two pairs remain
    assert wd["outcomes"] == {"trained": 2, "stalled": 0, "diverged": 1}
    assert wd["master"]["n"] == 2 and wd["master"]["mean"] == pytest.approx(0.06)
    md = eco_adam_markdown(rows)
    assert ("| FP8 ECO momentum-exact + RTN | 3 trained | +0.0200 [+0.0200, +0.0200] (n=3) | "
            "-0.0300 [-0.0548, -0.0052] (n=3) | +0.0112 [+0.0036, +0.0189] (n=4) |") in md
    assert "| FP8 ECO wd-corrected + RTN | 2 trained, 1 diverged |" in md
    assert "| FP8 ECO + RTN | 3 trained | +0.0500" in md and "(itself)" in md


def test_the_figure_takes_runs_and_refuses_another_protocol():
    """The figure function receives Run objects; variants of another protocol than the lm
    runs' (here 40 steps against 20) would pair with nothing, so it refuses, naming the
    field."""
    lm = RunLike(_runs(["fp8_master_rtn", "fp8_eco_rtn"]))
    mlp = RunLike({}, config=type("Cfg", (), {"approx_schemes": ()})())  # no MLP gaps
    fig, tables, md = lm_eco_adam(lm, RunLike(_runs(["fp8_ecomx_rtn"])), mlp)
    gaps = tables["gaps"]
    i = list(gaps["method"]).index("fp8_ecomx_rtn")
    assert gaps["n_master"][i] == 3 and gaps["to_master"][i] == pytest.approx(0.02)
    with pytest.raises(ValueError, match=r"^run fp8_ecomx_rtn seed 0 differs from the "
                       r"reference protocol in 'steps' \(40 vs 20\): run lm and lm_eco_adam"):
        lm_eco_adam(lm, RunLike(_runs(["fp8_ecomx_rtn"], steps=40)), mlp)
    with pytest.raises(ValueError, match="'steps'"):
        merged_runs(lm.results, _runs(["fp8_ecomx_rtn"], steps=40))


def test_config_takes_only_ecos_variants():
    exp = E.get("lm_eco_adam")
    cfg = exp.config()
    assert cfg.methods == DEFAULT_METHODS and set(DEFAULT_METHODS) <= set(ECO_ADAM_METHODS)
    assert len(ECO_ADAM_METHODS) == 6
    with pytest.raises(E.ConfigError, match="LMEcoAdamConfig.methods: expected names among"):
        cfg.override(["methods=fp8_eco_sr"])
    assert exp.requires == ("torch",)


def test_the_lm_runs_are_cut_to_the_variants_seeds():
    """lm runs 5 seeds, the variants 3: the plain rows use the variants' seeds only, so every
    gap of the table is over the same seeds (and lm's columns are not modified)."""
    lm = records_to_results([_record(m, s, 3.0 + 0.01 * s + (0.05 if "eco" in m else 0.0))
                             for m in ("fp8_master_rtn", "fp8_eco_rtn") for s in range(5)])
    seeds_before = np.array(lm["seed"], copy=True)
    r = merged_runs(lm, _runs(["fp8_ecomx_rtn"]))
    assert np.array_equal(lm["seed"], seeds_before)
    for m in ("fp8_master_rtn", "fp8_eco_rtn", "fp8_ecomx_rtn"):
        rows = np.asarray(r["method"]).astype(str) == m
        assert sorted(np.asarray(r["seed"])[rows].tolist()) == [0, 1, 2]
    eco = eco_adam_rows(r, {})[0]
    assert eco["method"] == "fp8_eco_rtn" and eco["master"]["n"] == 3
