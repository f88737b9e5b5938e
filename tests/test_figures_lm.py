"""The language-model figures from a results file (no torch needed) and the record reader."""
import json
import math

import numpy as np
import pytest

from ecosim import cli
from ecosim import experiments as E
from ecosim.experiments.lm import METHODS, method_parts, read_records, records_to_results


def _record(preset, method, val, *, nonembed, diverged=False, seed=0, steps=20):
    w, scheme, _ = method_parts(method)
    formula = {"master": 12.0 if w == "e4m3" else 10.0, "naive": 9.0, "eco": 9.0}[scheme]
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


def test_figures_from_a_results_file(tmp_path, capsys):
    f = tmp_path / "runs.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in _records()))
    out = tmp_path / "out"
    rc = cli.main(["figures", "--only", "lm_table", "lm_pareto", "--out", str(out),
                   "--cache", str(tmp_path / "cache"), "--no-progress",
                   "--set", f"lm.results_file={f}"])
    assert rc == 0, capsys.readouterr().err
    md = (out / "lm_table.md").read_text()
    assert "| FP8 naive + RTN | diverged | diverged |" in md
    assert "| FP8 ECO + SR | 2.0600 (+0.0600) | 1.5600 (+0.0600) |" in md
    assert "tiny (100k)" in md and "small (1.0M)" in md
    final = (out / "lm_table.final.csv").read_text().splitlines()
    assert len(final) == 1 + len(_records())
    pts = (out / "lm_pareto.points.csv").read_text()
    assert "fp8_eco_sr,9.01,9.0,2.06,false" in pts
    # the cache follows the file's contents, not its name
    f.write_text("".join(json.dumps(r) + "\n" for r in _records()[:7]))
    assert cli.main(["figures", "--only", "lm_table", "--out", str(out), "--cache",
                     str(tmp_path / "cache"), "--no-progress",
                     "--set", f"lm.results_file={f}"]) == 0
    assert "small" not in (out / "lm_table.md").read_text().split("The paper's")[0]


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
