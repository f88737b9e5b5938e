"""The language-model figures from a results file (no torch needed) and the record reader."""
import json
import math

import numpy as np
import pytest

from ecosim import recipes
from ecosim.tooling import cli
from ecosim import experiments as E
from ecosim.experiments.lm import (METHODS, method_parts, read_records, records_to_results,
                                   run_setting, unique_runs)
from ecosim.experiments.lm import OTHER_METHODS
from ecosim.figures.lm import lm_markdown, lm_pareto, method_label, run_style


def _record(preset, method, val, *, nonembed, diverged=False, seed=0, steps=20):
    w, scheme, _ = method_parts(method)
    formula = {"master": 12.0 if w == "e4m3" else 10.0, "naive": 9.0, "eco": 9.0, "fp": 12.0,
               "dqt": 9.0 if w == "int8" else 8.25, "bitnet": 12.0}[scheme]
    curve = [[s, 5.0 - s / 10, (5.0 - s / 10) if s % 10 == 0 else None]
             for s in range(0, steps + 1, 5)]
    return {"preset": preset, "method": method, "seed": seed, "steps": steps, "tokens": 640 * steps,
            "val_loss": None if diverged else val, "final_train_loss": None if diverged else val,
            "diverged": diverged, "curve": curve[:2] if diverged else curve,
            "n_params": {"total": nonembed + 65536, "non_embedding": nonembed,
                         "quantized": nonembed - 1000},
            "bytes_per_param": {"formula": formula, "measured": formula + 0.01},
            "peak_memory_bytes": 12345, "tokens_per_s": 1000.0}


def _records():
    out = []
    for preset, n, base in (("tiny", 100_000, 2.0), ("small", 1_000_000, 1.5)):
        for k, m in enumerate(METHODS):
            out.append(_record(preset, m, base + 0.01 * k, nonembed=n,
                               diverged=(m == "fp8_naive_rtn")))
    return out


def test_records_to_results_columns():
    recs = _records()
    r = records_to_results(recs)
    assert r["preset"].tolist() == [x["preset"] for x in recs]
    assert r["diverged"].sum() == 2
    assert np.isnan(r["val_loss"][r["diverged"]]).all()
    assert r["val_loss"][1] == recs[1]["val_loss"]
    assert r["curve_step"].shape == (len(recs), 5)
    # a diverged run's shorter curve is padded with NaN; None (no validation) is NaN too
    assert np.isnan(r["curve_step"][3, 2:]).all() and math.isnan(r["curve_val"][0, 1])
    with pytest.raises(ValueError, match="record 0"):
        records_to_results([{"method": "fp8_eco_sr"}])
    with pytest.raises(ValueError, match="unknown method"):
        method_parts("fp8_eco")


def test_read_records_errors(tmp_path):
    f = tmp_path / "r.jsonl"
    f.write_text("")
    with pytest.raises(ValueError, match="no records"):
        read_records(f)
    f.write_text('{"a": 1}\nnot json\n')
    with pytest.raises(ValueError, match=":2: not a JSON record"):
        read_records(f)


def test_figures_from_a_results_file(lm_figures):
    out = lm_figures(_records())
    md = (out / "lm_table.md").read_text()
    assert "| FP8 naive + RTN | diverged n=1 | diverged n=1 |" in md
    assert "| FP8 ECO + SR | 2.0600 (+0.0600) n=1 | 1.5600 (+0.0600) n=1 |" in md
    assert "tiny (100k)" in md and "small (1.0M)" in md
    final = (out / "lm_table.final.csv").read_text().splitlines()
    assert len(final) == 1 + len(_records())
    pts = (out / "lm_pareto.points.csv").read_text()
    assert "fp8_eco_sr,9.01,9.0,2.06,false" in pts
    # the cache follows the file's contents, not its name
    assert lm_figures(_records()[:7], only=("lm_table",)) == out
    assert "small" not in (out / "lm_table.md").read_text().split("The paper's")[0]


def test_every_runner_method_has_a_style_and_a_label():
    """Every name method_parts accepts (Table 1's with FP8 or INT4 weights, FP32, DQT, BitNet)
    gets a style of its own (no two methods drawn alike) and a label of its own."""
    names = list(recipes.LM_METHODS)
    assert set(names) == {"fp32", *METHODS, *(m.replace("fp8_", "int4_") for m in METHODS
                                              if m.startswith("fp8_")), *OTHER_METHODS,
                          *recipes.lm_methods(kind="eco_adam")}
    looks = {m: tuple(sorted(run_style(m).items())) for m in names}
    int4 = {m for m in names if m.startswith("int4_")}  # INT4 looks like FP8: one per figure
    assert len(set(looks[m] for m in names if m not in int4)) == len(names) - len(int4)
    assert all(looks[m] == looks[m.replace("int4_", "fp8_")] for m in int4)
    labels = [method_label(m) for m in names]
    assert len(set(labels)) == len(names)
    assert method_label("dqt8_sr") == "DQT INT8 + SR"
    assert method_label("int4_eco_sr") == "INT4 ECO + SR"


def test_figures_with_dqt_and_bitnet_runs(lm_figures):
    """A results file with DQT and BitNet runs beside Table 1's builds lm_table and lm_pareto
    (the runner accepts them; the figures once had no style for them)."""
    methods = ("fp32", "bf16_master", "fp8_eco_sr", "dqt8_sr", "dqt_ternary_sr", "bitnet_b158")
    recs = [_record("tiny", m, 2.0 + 0.01 * k, nonembed=100_000, seed=s)
            for k, m in enumerate(methods) for s in (0, 1)]
    out = lm_figures(recs)
    table = _table((out / "lm_table.md").read_text())
    # bf16_master is 2.01 on both seeds: DQT INT8 (2.03) is 0.02 above it, sd 0
    assert table["DQT INT8 + SR"] == ["2.0300 ± 0.0000 (+0.0200 [+0.0200, +0.0200]) n=2"]
    assert table["BitNet b1.58"][0].startswith("2.0500 ± 0.0000 (+0.0400")
    assert "DQT ternary + SR" in table
    pts = (out / "lm_pareto.points.csv").read_text()
    assert "dqt_ternary_sr,8.26,8.25,2.04," in pts and "bitnet_b158,12.01,12.0,2.05," in pts


def test_figures_set_is_checked(tmp_path, capsys):
    assert cli.main(["figures", "--only", "grids", "--set", "lm.steps=3"]) == 2
    assert "not read by the figures" in capsys.readouterr().err
    assert cli.main(["figures", "--only", "lm_table", "--set", "lm.steps"]) == 2
    assert "EXPERIMENT.KEY=VALUE" in capsys.readouterr().err
    assert cli.main(["figures", "--only", "lm_table", "--set",
                     f"lm.results_file={tmp_path / 'missing'}"]) == 2
    assert "is not a file" in capsys.readouterr().err


def test_lm_experiment_declares_torch():
    assert E.get("lm").requires == ("torch",)
    assert E.get("grids").requires == () and E.get("grids").missing() == []


def _table(md: str) -> dict:
    """{method label: [cells]} and the header of the first markdown table."""
    rows = [[c.strip() for c in line.strip("|").split("|")]
            for line in md.split("\n\n")[0].splitlines()]
    return {row[0]: row[1:] for row in rows[:1] + rows[2:]}


def _write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_repeated_identical_seed_is_counted_once(tmp_path, capsys):
    recs = _records()
    again = {**recs[6], "wall_s": 99.0, "device_name": "another machine"}  # same outcome
    both = recs + [again]
    kept, notices = unique_runs(both, source="runs.jsonl")
    assert len(both) == len(recs) + 1 and kept == recs  # input untouched, the repeat dropped
    assert len(notices) == 1 and "\n" not in notices[0]
    assert "seed 0 of tiny fp8_eco_sr (20 steps)" in notices[0]
    assert "records 6, 14" in notices[0] and "counted once" in notices[0]
    f = _write(tmp_path / "runs.jsonl", both)
    assert cli.main(["run", "lm", "--set", f"results_file={f}", "--cache",
                     str(tmp_path / "cache"), "--no-progress"]) == 0
    assert "counted once" in capsys.readouterr().err
    md = _table(lm_markdown(records_to_results(kept)))
    assert md["FP8 ECO + SR"][0] == "2.0600 (+0.0600) n=1"  # not a mean of two copies


def test_repeated_differing_seed_is_refused(tmp_path, capsys):
    recs = _records()
    both = recs + [{**recs[6], "val_loss": 2.07}]
    with pytest.raises(ValueError, match=r"seed 0 of tiny fp8_eco_sr \(20 steps\) appears in "
                       r"records 6 and 14 with different val_loss \(2.06 vs 2.07\).*separate "
                       r"results files"):
        unique_runs(both, source="runs.jsonl")
    f = _write(tmp_path / "runs.jsonl", both)
    assert cli.main(["figures", "--only", "lm_table", "--out", str(tmp_path / "out"),
                     "--no-progress", "--set", f"lm.results_file={f}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "different val_loss" in err and "--out" in err
    # the same seed in another setting is another run, not a repeat
    assert len(unique_runs(recs + [{**recs[6], "val_loss": 2.07, "steps": 30}])[0]) == 15


def _mixed():
    """tiny: BF16 and ECO+SR; seeds 0 and 1 at 40 steps (BF16 only seed 0), seed 0 at 60."""
    return [_record("tiny", "bf16_master", 2.00, nonembed=100_000, steps=40),
            _record("tiny", "fp8_eco_sr", 2.10, nonembed=100_000, steps=40),
            _record("tiny", "fp8_eco_sr", 2.20, nonembed=100_000, steps=40, seed=1),
            _record("tiny", "bf16_master", 1.50, nonembed=100_000, steps=60),
            _record("tiny", "fp8_eco_sr", 1.56, nonembed=100_000, steps=60)]


def test_mixed_lengths_are_separate_columns():
    md = _table(lm_markdown(records_to_results(_mixed())))
    assert md["method"] == ["tiny (100k) · 40 steps", "tiny (100k) · 60 steps"]
    assert md["BF16 w/ master"] == ["2.0000 n=1", "1.5000 n=1"]
    # 40 steps: the mean of seeds 0 and 1 only; seed 1 has no baseline and is named
    assert md["FP8 ECO + SR"][0] == ("2.1500 ± 0.0707 (+0.1000 over n=1; no finished BF16 "
                                     "w/ master run for seed 1) n=2")
    assert md["FP8 ECO + SR"][1] == "1.5600 (+0.0600) n=1"
    _, tables = lm_pareto(records_to_results(_mixed()))
    pts = tables["points"]
    assert pts["setting"].tolist() == ["tiny (100k) · 40 steps"] * 2 + [
        "tiny (100k) · 60 steps"] * 2
    assert pts["val_loss"].tolist() == pytest.approx([2.0, 2.15, 1.5, 1.56])
    assert pts["seeds"].tolist() == [1, 2, 1, 1]


def test_every_cell_states_its_seeds():
    recs = [_record("tiny", m, 2.0 + 0.01 * k + 0.001 * s, nonembed=100_000, seed=s,
                    diverged=(m == "fp8_naive_rtn" and s == 1))
            for k, m in enumerate(METHODS) for s in range(3)]
    md = _table(lm_markdown(records_to_results(recs)))
    assert md["method"] == ["tiny (100k)"]  # one setting: the preset's name alone
    assert md["BF16 w/ master"] == ["2.0010 ± 0.0010 n=3"]
    assert md["FP8 naive + RTN"] == ["2.0310 ± 0.0014 (+0.0300 [+0.0300, +0.0300]) n=2; "
                                     "diverged 1 of 3"]
    assert all(row[0].endswith("n=3") for label, row in md.items()
               if label not in ("method", "FP8 naive + RTN"))


def test_run_setting_is_the_run_identity():
    base = {**_record("tiny", "fp8_eco_sr", 2.0, nonembed=100_000), "seq": 64, "batch": 8,
            "grad_accum": 2, "world_size": 1, "global_batch": 16, "lr": 0.003,
            "storage": "codes", "corpus": {"source": "/a", "sha256": "ab" * 32},
            "device": "cpu", "fsdp": False}
    same = [{**base, "batch": 16, "grad_accum": 1}, {**base, "device": "cuda:1"},
            {**base, "corpus": {"source": "/b", "sha256": "ab" * 32}}, {**base, "seed": 3},
            {**base, "method": "bf16_master"}]
    other = [{**base, k: v} for k, v in (("steps", 40), ("seq", 128), ("global_batch", 32),
                                         ("lr", 0.002), ("storage", "param"),
                                         ("corpus", {"source": "/a", "sha256": "cd" * 32}),
                                         ("clip", 0.5), ("eval_batches", 4))]
    assert all(run_setting(r) == run_setting(base) for r in same)
    assert len({run_setting(r) for r in other + [base]}) == len(other) + 1
    r = records_to_results([base, other[4]])
    assert r["storage"].tolist() == ["codes", "param"] and r["global_batch"].tolist() == [16, 16]
    md = _table(lm_markdown(r))
    assert md["method"] == ["tiny (100k) · storage codes", "tiny (100k) · storage param"]
