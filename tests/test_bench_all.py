"""benchmarks/bench_all.py: a torch path that differs from NumPy's stops the run; rows without
a meaningful peer print their rate alone (a tiny matrix, one round: no timing is judged)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_all  # noqa: E402


def test_a_torch_difference_fails_the_run(monkeypatch):
    monkeypatch.setattr(bench_all, "torch_fns", lambda W: ({}, ["SR (key)"]))
    with pytest.raises(SystemExit) as e:
        bench_all.main(["--log2n", "12", "--rounds", "1"])
    assert e.value.code == ("bench_all: ecosim.torch's SR (key) differ from NumPy's bit for bit "
                            "on the benchmark matrix; nothing was timed")


def test_int4_codes_have_no_peer(monkeypatch, capsys):
    monkeypatch.setattr(bench_all, "torch_fns", lambda W: ({}, []))
    bench_all.main(["--log2n", "12", "--rounds", "1"])
    cells = [[c.strip() for c in line.strip("|").split("|")]
             for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    rows = {c[0]: c[2:] for c in cells}  # operation -> [peer, ratio, target]
    for op in ("Quantizer(int4, 32).encode", "Quantizer(int4, 32).decode"):
        assert rows[op] == ["", "", ""]
    assert rows["Quantizer(e4m3, row).encode"][0] == "ml_dtypes cast f32 -> e4m3 (one way)"
