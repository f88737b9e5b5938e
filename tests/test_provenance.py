"""The cache key covers the code and the package versions; entries record their provenance;
unreadable entries are recomputed; pool workers do not outlive their parent."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import ecosim
from ecosim import experiments as E
from ecosim.experiments import provenance as P

PKG = Path(ecosim.__file__).resolve().parent


def _copy_package(tmp_path: Path) -> Path:
    """A private copy of the ecosim package (sources only) under ``tmp_path/src``."""
    dst = tmp_path / "src" / "ecosim"
    shutil.copytree(PKG, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dst


# -- the walk over imports ---------------------------------------------------------------------

def test_closure_follows_imports_but_not_sibling_experiments():
    files = P.source_files("ecosim.experiments.grids")
    assert "ecosim.experiments.grids" in files
    assert "ecosim.core.rounding" in files          # imported by what grids uses
    assert "ecosim.experiments" in files       # a parent package: hashed...
    assert "ecosim.experiments.lm" not in files  # ...but its other imports are not followed
    assert not any(name.startswith("ecosim.figures") for name in files)


def test_lazy_imports_inside_functions_are_followed():
    # experiments.lm imports the torch backend inside its compute function only
    files = P.source_files("ecosim.experiments.lm")
    assert "ecosim.torch.lm" in files and "ecosim.torch.quantizer" in files
    assert "torch" in E.get("lm").code()["packages"]
    assert "torch" not in E.get("grids").code()["packages"]


def test_fingerprint_changes_with_the_code_of_an_imported_file(tmp_path):
    root = _copy_package(tmp_path)
    before = P.code_fingerprint("ecosim.experiments.grids", root=str(root))
    assert before == P.code_fingerprint("ecosim.experiments.grids", root=str(root))
    unrelated = root / "figures" / "style.py"
    unrelated.write_text(unrelated.read_text() + "\n_STYLE_EDIT = 1\n")
    P.code_fingerprint.cache_clear()
    assert P.code_fingerprint("ecosim.experiments.grids", root=str(root)) == before
    target = root / "core" / "rounding.py"
    target.write_text(target.read_text() + "\n_ANY_CODE_EDIT = 1\n")
    P.code_fingerprint.cache_clear()
    after = P.code_fingerprint("ecosim.experiments.grids", root=str(root))
    assert after["source_sha256"] != before["source_sha256"]
    P.code_fingerprint.cache_clear()


def test_prose_edits_keep_the_fingerprint_code_edits_do_not(tmp_path):
    """Comments, docstrings and layout cannot change a result: they keep every key; a changed
    constant, a renamed variable or a string that is not a docstring changes it."""
    root = _copy_package(tmp_path)
    target = root / "core" / "rounding.py"
    text = target.read_text()

    def key_with(new_text):
        target.write_text(new_text)
        P.code_fingerprint.cache_clear()
        return P.code_fingerprint("ecosim.experiments.grids", root=str(root))["source_sha256"]

    base = key_with(text)
    assert text.startswith('"""')
    prose = [text.replace('"""', '"""Reworded. ', 1),            # the module docstring
             text + "\n# a comment\n\n\n",                     # comments and blank lines
             text.replace("def _plan(", "def _plan(  ", 1),       # layout
             text.replace(") -> Plan:\n", ") -> Plan:\n    \"\"\"A docstring.\"\"\"\n", 1)]
    for edited in prose:
        assert edited != text
        assert key_with(edited) == base
    code = [text + "\n_X = 1\n", text + "\n_X = 'not a docstring'\n",
            text.replace("    src = _src_for(work)", "    src = _src_for(work)\n    src = src", 1)]
    for edited in code:
        assert edited != text
        assert key_with(edited) != base
    key_with(text)
    P.code_fingerprint.cache_clear()


def test_digest_covers_package_versions(monkeypatch):
    exp = E.get("grids")
    cfg = exp.default_config(smoke=True)
    base = exp.digest(cfg)
    real = P.package_versions

    def bumped(names):
        out = real(names)
        out["numpy"] = "0.0.0-other"
        return out
    P.code_fingerprint.cache_clear()
    monkeypatch.setattr(P, "package_versions", bumped)
    try:
        assert exp.digest(cfg) != base
    finally:
        P.code_fingerprint.cache_clear()


# -- an edited source recomputes, end to end --------------------------------------------------

_RUN = """
import sys
from ecosim import experiments as E
run = E.run("grids", cache=sys.argv[1], smoke=True)
print(run.stats.computed, run.stats.cached, run.mixed_provenance)
"""


def _run_copy(src: Path, cache: Path) -> tuple[int, int]:
    env = dict(os.environ, PYTHONPATH=str(src))
    out = subprocess.run([sys.executable, "-c", _RUN, str(cache)], capture_output=True,
                         text=True, env=env, cwd=src, timeout=300)
    assert out.returncode == 0, out.stderr
    computed, cached, _ = out.stdout.split()
    return int(computed), int(cached)


def test_editing_a_source_the_experiment_runs_recomputes(tmp_path):
    root = _copy_package(tmp_path)
    cache = tmp_path / "cache"
    computed, cached = _run_copy(root.parent, cache)
    assert computed > 0 and cached == 0
    assert _run_copy(root.parent, cache) == (0, computed)   # unchanged code: all cached
    rounding = root / "core" / "rounding.py"
    rounding.write_text(rounding.read_text() + "\n# reworded\n")
    assert _run_copy(root.parent, cache) == (0, computed)   # a comment: still cached
    rounding.write_text(rounding.read_text() + "\n_CHANGED = 1\n")
    assert _run_copy(root.parent, cache) == (computed, 0)   # the kernel changed: recomputed


# -- provenance and unreadable entries ---------------------------------------------------------

def test_entries_record_provenance_and_figures_flag_mixed(tmp_path):
    cache = E.Cache(tmp_path)
    exp = E.get("relative_error")  # three units in smoke
    cfg = exp.default_config(smoke=True)
    run = E.run(exp, cfg, cache=cache)
    rev, dirty = P.git_revision()
    units = exp.unit_list(cfg)
    doc = json.loads(cache.path(exp, cfg, units[0]).with_suffix(".json").read_text())
    assert doc["provenance"] == {"git_revision": rev, "git_dirty": dirty,
                                 "source_sha256": exp.code()["source_sha256"]}
    assert run.provenance == ({"git_revision": rev, "git_dirty": dirty,
                               "source_sha256": exp.code()["source_sha256"]},)
    assert run.mixed_provenance == bool(dirty)
    # one entry from another revision (same code): reported as mixed
    side = cache.path(exp, cfg, units[-1]).with_suffix(".json")
    doc = json.loads(side.read_text())
    doc["provenance"]["git_revision"] = "0" * 40
    doc["provenance"]["git_dirty"] = False
    side.write_text(json.dumps(doc))
    again = E.run(exp, cfg, cache=cache)
    assert again.stats.computed == 0
    assert len(again.provenance) == 2 and again.mixed_provenance


def test_unreadable_entry_is_recomputed_with_a_notice(tmp_path, capsys):
    cache = E.Cache(tmp_path)
    exp = E.get("grids")
    cfg = exp.default_config(smoke=True)
    first = E.run(exp, cfg, cache=cache)
    path = cache.path(exp, cfg, exp.unit_list(cfg)[0])
    good = path.read_bytes()
    path.write_bytes(good[: len(good) // 2])  # truncated
    capsys.readouterr()
    again = E.run(exp, cfg, cache=cache)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unreadable" in err[0] and "recomputing" in err[0]
    assert again.stats.computed == 1
    assert path.read_bytes() == good
    for key in first.results:
        assert (again[key] == first[key]).all()


# -- the process pool goes down with its parent ------------------------------------------------

def _children(pid: int) -> set[int]:
    kids = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rpartition(")")[2].split()[1]) == pid:
            kids.add(int(entry.name))
    return kids


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_killed_figures_run_leaves_no_worker(tmp_path, sig):
    cmd = [sys.executable, "-m", "ecosim", "figures", "--only", "noise_floor", "--jobs", "2",
           "--out", str(tmp_path / "out"), "--cache", str(tmp_path / "cache")]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers: set[int] = set()
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            # the pool's workers: spawned children (one resource tracker aside)
            workers = {k for k in _children(proc.pid)
                       if b"spawn_main" in Path(f"/proc/{k}/cmdline").read_bytes()}
            if len(workers) >= 2 or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert proc.poll() is None and len(workers) >= 2, "the pool never started"
        time.sleep(1.0)  # let them pick up work, or sit idle on their queue
        proc.send_signal(sig)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(_alive(w) for w in workers):
            time.sleep(0.1)
        assert not any(_alive(w) for w in workers), "pool workers outlived their parent"
    finally:
        if proc.poll() is None:
            proc.kill()
        for w in workers | _children(proc.pid):  # never leave a worker behind, pass or fail
            try:
                os.kill(w, signal.SIGKILL)
            except OSError:
                pass


@pytest.mark.parametrize("fingerprint, field", [("blas_fingerprint", "blas"),
                                                ("ufunc_fingerprint", "ufuncs")])
def test_digest_covers_the_kernels(monkeypatch, fingerprint, field):
    """Another OpenBLAS kernel sums float32 products in another order, and NumPy's AVX-512
    exp/tanh/log round some results otherwise than its AVX2 ones: another key."""
    exp = E.get("mlp_methods")
    cfg = exp.default_config(smoke=True)
    assert exp.code()[field]["probe"]
    base = exp.digest(cfg)
    P.code_fingerprint.cache_clear()
    monkeypatch.setattr(P, fingerprint, lambda: {"probe": "other"})
    try:
        assert exp.digest(cfg) != base
    finally:
        P.code_fingerprint.cache_clear()
