"""The ``ecosim`` command, in-process through ``ecosim.tooling.cli.main`` and once as a subprocess."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import ecosim
import ecosim.experiments as E
import ecosim.figures as F
from ecosim.tooling.cli import main


def _bytes(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file()}


def test_list(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "figures" in out and "experiments" in out and "grids" in out
    assert "sr_samples" not in out and max(map(len, out.splitlines())) <= 100
    assert len(out.splitlines()) < 3 + len(F.figures()) + len(E.experiments()) + 2
    assert main(["list", "grids"]) == 0
    assert "sr_samples : int = 100000   (smoke: 2000)" in capsys.readouterr().out
    assert main(["list", "--fields"]) == 0
    assert "sr_samples : int = 100000   (smoke: 2000)" in capsys.readouterr().out
    assert main(["list", "grid"]) == 2
    assert "did you mean 'grids'" in capsys.readouterr().err


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"ecosim {ecosim.__version__}"


def test_run_summary_lines_are_short(capsys, tmp_path):
    assert main(["run", "rtn_stall", "--smoke", "--cache", str(tmp_path / "c"),
                 "--no-progress"]) == 0
    lines = capsys.readouterr().out.splitlines()
    table = [line for line in lines if line.startswith("  ")]
    assert table and max(map(len, table)) <= 110, max(table, key=len)
    assert any("min " in line and "mean " in line for line in table)


def test_usage_errors_exit_2(capsys, tmp_path):
    assert main([]) == 2
    assert main(["nonsense"]) == 2
    assert main(["figures", "--jobs", "0"]) == 2
    assert "positive integer" in capsys.readouterr().err
    assert main(["figures", "--only", "nope", "--out", str(tmp_path)]) == 2
    assert "unknown figure(s) 'nope'; registered: grids" in capsys.readouterr().err
    assert main(["run", "nope"]) == 2
    assert "unknown experiment 'nope'" in capsys.readouterr().err
    assert main(["run", "grids", "--set", "sr_sample=3"]) == 2
    assert "did you mean 'sr_samples'" in capsys.readouterr().err
    assert main(["run", "grids", "--set", "sr_samples=lots"]) == 2
    assert "GridsConfig.sr_samples: expected an int, got 'lots'" in capsys.readouterr().err
    assert main(["run", "grids", "--set", "sr_samples"]) == 2
    assert "key=value" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
    assert main(["--help"]) == 0


def test_run_with_overrides(capsys, tmp_path):
    argv = ["run", "grids", "--smoke", "--set", "sr_samples=100", "error_samples=1e3",
            "--set", "key=5", "--cache", str(tmp_path / "c"), "--no-progress",
            "--save", str(tmp_path / "r.npz")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "sr_samples=100" in out and "error_samples=1000" in out and "key=5" in out
    assert "1 unit(s): 0 cached, 1 computed" in out and "format_count" in out
    assert (tmp_path / "r.npz").exists()
    assert main(argv) == 0
    assert "1 unit(s): 1 cached, 0 computed" in capsys.readouterr().out


def test_figures_smoke_jobs_1_and_2_same_bytes(capsys, tmp_path):
    # one figure is enough here (every figure is built by test_figures.py)
    base = ["figures", "--smoke", "--no-progress", "--only", "grids"]
    assert main(base + ["--out", str(tmp_path / "o1"), "--cache", str(tmp_path / "c1")]) == 0
    out = capsys.readouterr().out
    assert "1 unit(s) computed, 0 cached" in out and "done in" in out
    assert (tmp_path / "o1" / "grids.png").exists()
    # the time table: one row per experiment (units, cached, computed, shared, CPU, unit and
    # wall seconds) and the totals
    rows = _time_table(out)
    assert rows["experiment"] == ["units", "cached", "computed", "shared", "cpu", "s", "unit",
                                  "s", "wall", "s"]
    assert rows["grids"][:4] == ["1", "0", "1", "0"] and len(rows["grids"]) == 7
    assert float(rows["grids"][6]) >= float(rows["grids"][5])  # the span holds the unit
    assert rows["total"] == rows["grids"][:6]
    assert main(base + ["--jobs", "2", "--out", str(tmp_path / "o2"),
                        "--cache", str(tmp_path / "c2")]) == 0
    capsys.readouterr()
    one, two = _bytes(tmp_path / "o1"), _bytes(tmp_path / "o2")
    assert set(one) == set(two) and len(one) >= 4
    for name, data in two.items():
        assert one[name] == data, name  # CSV, JSON, PNG and PDF alike
    assert _bytes(tmp_path / "c2") == _bytes(tmp_path / "c1")
    # a rerun reads everything from the cache and changes no file
    assert main(base + ["--out", str(tmp_path / "o1"), "--cache", str(tmp_path / "c1")]) == 0
    out = capsys.readouterr().out
    assert " 0 unit(s) computed" in out and " 0 changed" in out
    assert _time_table(out)["grids"] == ["1", "1", "0", "0", "0.00", "0.00", "0.00"]


def _time_table(out: str) -> dict[str, list[str]]:
    """The rows of ``ecosim figures``' time table (header, experiments, total) by first word
    (the figure table after it has rows named like experiments)."""
    table = out.split("\nexperiment ", 1)[1].split("\nfigure ", 1)[0]
    return {w[0]: w[1:] for w in map(str.split, ("experiment " + table).splitlines())}


def test_python_m_ecosim_and_console_script(tmp_path):
    env = dict(os.environ, ECOSIM_CACHE=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-m", "ecosim", "list"], capture_output=True,
                          text=True, cwd=tmp_path, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "grids" in proc.stdout
    script = Path(sys.executable).with_name("ecosim")
    if not script.exists():
        pytest.skip("the console script is not installed next to this interpreter")
    proc = subprocess.run([str(script), "run", "grids", "--set", "bogus=1"],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert proc.returncode == 2 and "has no field 'bogus'" in proc.stderr
