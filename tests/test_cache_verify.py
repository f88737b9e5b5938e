"""``ecosim cache verify`` and ``clean``: every entry of a cache judged as ``Cache.load``
judges it before serving, without knowing which experiment will ask; damaged, swapped,
orphaned and (with ``--stale``) outdated entries are reported and removed, good ones kept.
"""

import json
import os
import shutil
import time

import pytest

import ecosim.experiments as E
from ecosim.tooling.cli import main


@pytest.fixture()
def cache(tmp_path):
    """A smoke run's cache of rtn_stall (several entries)."""
    root = tmp_path / "c"
    E.run("rtn_stall", smoke=True, cache=root)
    return root


def _entries(root):
    return sorted((root / "rtn_stall").glob("*.npz"))


def test_a_good_cache_verifies(cache, capsys):
    assert main(["cache", "verify", "--cache", str(cache)]) == 0
    out = capsys.readouterr().out
    assert f"{len(_entries(cache))} entries, 0 problem(s)" in out
    assert main(["cache", "verify", "--stale", "--cache", str(cache)]) == 0


def _swap(a, b):  # the whole entry (both files) moved over another's name
    shutil.copy(a, b)
    shutil.copy(a.with_suffix(".json"), b.with_suffix(".json"))


@pytest.mark.parametrize("damage, words", [
    (lambda a, b: b.write_bytes(a.read_bytes()), "does not hold the content"),
    (_swap, "recorded under another key"),
    (lambda a, b: b.with_suffix(".json").unlink(), "no readable record"),
    (lambda a, b: b.write_bytes(b.read_bytes()[:50]), "does not hold the content"),
    (lambda a, b: b.unlink(), "record without results"),
])
def test_damaged_entries_are_reported_and_cleaned(cache, capsys, damage, words):
    a, b = _entries(cache)[:2]
    others = {p.name for p in _entries(cache)} - {b.name}
    damage(a, b)
    problems = E.Cache(cache).verify()
    assert len(problems) == 1 and words in problems[0].problem
    assert problems[0].path.stem == b.stem
    assert main(["cache", "verify", "--cache", str(cache)]) == 1
    assert words in capsys.readouterr().out
    assert main(["cache", "clean", "--cache", str(cache)]) == 0
    assert "removed 1 entry" in capsys.readouterr().out
    assert not b.exists() and not b.with_suffix(".json").exists() and a.exists()
    assert {p.name for p in _entries(cache)} == others
    assert main(["cache", "verify", "--cache", str(cache)]) == 0
    # the removed unit is computed again, the others are served
    run = E.run("rtn_stall", smoke=True, cache=cache)
    assert run.stats.computed == 1


def test_stale_entries_and_old_temporary_files(cache, capsys):
    a = _entries(cache)[0]
    doc = json.loads(a.with_suffix(".json").read_text())
    doc["code"]["source_sha256"] = "0" * 64  # other code; the entry renamed to its key
    a.with_suffix(".json").write_text(json.dumps(doc))
    import hashlib
    key = {k: v for k, v in doc.items() if k not in ("provenance", "content")}
    d = hashlib.sha256(json.dumps(key, sort_keys=True, separators=(",", ":"),
                                  ensure_ascii=True).encode()).hexdigest()[:32]
    os.replace(a, a.with_name(d + ".npz"))
    os.replace(a.with_suffix(".json"), a.with_name(d + ".json"))
    tmp = cache / "rtn_stall" / ".x.npz.1.tmp"
    tmp.write_bytes(b"partial")
    assert E.Cache(cache).verify() == []  # valid entry; a young temp file may be in flight
    old = time.time() - 2 * 3600
    os.utime(tmp, (old, old))
    assert [p.problem for p in E.Cache(cache).verify()] == [
        "is a temporary file of a killed write"]
    stale = E.Cache(cache).verify(stale=True)
    assert {p.path.name for p in stale} == {d + ".npz", tmp.name}
    assert main(["cache", "clean", "--stale", "--cache", str(cache)]) == 0
    assert not tmp.exists() and not (cache / "rtn_stall" / f"{d}.npz").exists()
    assert main(["cache", "verify", "--stale", "--cache", str(cache)]) == 0


def test_cache_that_is_a_file_is_a_usage_error(tmp_path, capsys):
    f = tmp_path / "f"
    f.write_text("")
    assert main(["cache", "verify", "--cache", str(f)]) == 2
    assert "is a file; expected a directory" in capsys.readouterr().err
