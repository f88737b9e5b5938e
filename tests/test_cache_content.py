"""A cache entry is served only when it holds what its record names, for the key asked.

Each damage below leaves a well-formed ``.npz`` that an unchecked cache would serve: another
unit's entry copied over this one, an array changed, removed or reshaped, the record copied
from another entry, or no record at all. Every one must be recomputed (with a notice naming
the entry and why), giving the very bytes a clean run gives.
"""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from ecosim import experiments as E
from ecosim.experiments.store import results_bytes
from tests.test_experiments import SINGLE, TOY, ToyConfig


def _entries(root):
    return sorted((root / "toy").glob("*.npz"))


def _clean(tmp_path):
    cfg = ToyConfig().smoke()
    run = E.run(TOY, cfg, cache=tmp_path)
    return cfg, run, _entries(tmp_path)


def _rewrite_npz(path, change):
    with np.load(path, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    change(arrays)
    path.write_bytes(results_bytes(arrays))


def _served_and_notice(tmp_path, cfg, capsys):
    capsys.readouterr()
    run = E.run(TOY, cfg, cache=tmp_path)
    return run, capsys.readouterr().err


def _same_results(a, b):
    assert a.results.keys() == b.results.keys()
    for k in a.results:
        np.testing.assert_array_equal(a[k], b[k])


def test_a_clean_rerun_is_served_without_notice(tmp_path, capsys):
    cfg, _, _ = _clean(tmp_path)
    run, err = _served_and_notice(tmp_path, cfg, capsys)
    assert run.stats.computed == 0 and "ecosim: cache entry" not in err


@pytest.mark.parametrize("damage,words", [
    ("other_unit_npz", "does not hold the content its record names"),
    ("array_changed", "does not hold the content its record names"),
    ("array_removed", "does not hold the content its record names"),
    ("array_reshaped", "does not hold the content its record names"),
    ("other_unit_npz_and_json", "is recorded under another key"),
    ("record_missing", "has no readable record"),
    ("record_without_content", "has no content record"),
    ("record_garbage", "has no readable record"),
])
def test_a_damaged_entry_is_recomputed_not_served(tmp_path, capsys, damage, words):
    cfg, clean, (a, b, *_) = _clean(tmp_path)
    good = {p: p.read_bytes() for p in _entries(tmp_path)}
    if damage == "other_unit_npz":
        a.write_bytes(b.read_bytes())
    elif damage == "array_changed":
        _rewrite_npz(a, lambda d: d.__setitem__("err", d["err"] + 1.0))
    elif damage == "array_removed":
        _rewrite_npz(a, lambda d: d.pop("err"))
    elif damage == "array_reshaped":
        _rewrite_npz(a, lambda d: d.__setitem__("q", d["q"][:3]))
    elif damage == "other_unit_npz_and_json":
        a.write_bytes(b.read_bytes())
        a.with_suffix(".json").write_bytes(b.with_suffix(".json").read_bytes())
    elif damage == "record_missing":
        a.with_suffix(".json").unlink()
    elif damage == "record_without_content":
        doc = json.loads(a.with_suffix(".json").read_text())
        del doc["content"]
        a.with_suffix(".json").write_text(json.dumps(doc))
    else:
        a.with_suffix(".json").write_text("[1, 2")
    run, err = _served_and_notice(tmp_path, cfg, capsys)
    assert run.stats.computed == 1
    (line,) = err.splitlines()
    assert line.startswith(f"ecosim: cache entry {a} {words}")
    assert line.endswith("; recomputing it")
    _same_results(run, clean)
    assert {p: p.read_bytes() for p in _entries(tmp_path)} == good


def test_the_record_is_written_after_the_entry_and_names_its_content(tmp_path):
    cfg = ToyConfig().smoke()
    E.run(SINGLE, cfg, cache=tmp_path)
    path = E.Cache(tmp_path).path(SINGLE, cfg)
    doc = json.loads(path.with_suffix(".json").read_text())

    assert doc["content"]["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert doc["content"]["arrays"] == {"x": [[8], np.dtype(np.float64).str]}
    assert path.with_suffix(".json").stat().st_mtime_ns >= path.stat().st_mtime_ns


def test_an_empty_cache_root_is_refused():
    with pytest.raises(ValueError, match="Cache: root must be a non-empty path, got ''"):
        E.Cache("")


# -- a fuzz of tampering: nothing changed is ever served ----------------------------------------

TAMPER = ("swap_npz", "swap_both", "truncate", "flip_byte", "edit_array", "drop_array",
          "change_dtype")


def _tamper(kind, a, b, data):
    from hypothesis import strategies as st

    if kind == "swap_npz":
        a.write_bytes(b.read_bytes())
    elif kind == "swap_both":
        a.write_bytes(b.read_bytes())
        a.with_suffix(".json").write_bytes(b.with_suffix(".json").read_bytes())
    elif kind == "truncate":
        raw = a.read_bytes()
        a.write_bytes(raw[:data.draw(st.integers(0, len(raw) - 1), label="keep")])
    elif kind == "flip_byte":
        raw = bytearray(a.read_bytes())
        i = data.draw(st.integers(0, len(raw) - 1), label="byte")
        raw[i] ^= data.draw(st.integers(1, 255), label="mask")
        a.write_bytes(bytes(raw))
    else:
        with np.load(a, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
        name = data.draw(st.sampled_from(sorted(arrays)), label="array")
        if kind == "edit_array":
            x = arrays[name].copy().reshape(-1)
            if x.size == 0:
                arrays[name] = np.zeros(1, x.dtype)
            else:
                i = data.draw(st.integers(0, x.size - 1), label="element")
                x[i] = x[i] + 1 if x.dtype.kind in "fiu" else not x[i]
                arrays[name] = x.reshape(arrays[name].shape)
        elif kind == "drop_array":
            del arrays[name]
        else:
            x = arrays[name]
            if x.dtype.kind == "U":  # a wider string dtype
                arrays[name] = x.astype(f"<U{x.dtype.itemsize // 4 + 1}")
            elif x.dtype.kind == "b":
                arrays[name] = x.astype(np.int8)
            else:
                arrays[name] = x.astype(np.float32 if x.dtype != np.float32 else np.float64)
        a.write_bytes(results_bytes(arrays))


def test_fuzz_tampered_entries_are_never_served(tmp_path_factory):
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    cfg = ToyConfig().smoke()
    clean_root = tmp_path_factory.mktemp("clean")
    clean = E.run(TOY, cfg, cache=clean_root)
    n = len(_entries(clean_root))

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(kind=st.sampled_from(TAMPER), pair=st.permutations(range(n)), data=st.data())
    def check(kind, pair, data):
        root = tmp_path_factory.mktemp("fuzz")
        for p in clean_root.rglob("*"):
            if p.is_file():
                dst = root / p.relative_to(clean_root)
                dst.parent.mkdir(parents=True, exist_ok=True)
                dst.write_bytes(p.read_bytes())
        entries = _entries(root)
        a, b = entries[pair[0]], entries[pair[1]]
        before = a.read_bytes()
        _tamper(kind, a, b, data)
        changed = a.read_bytes() != before or kind == "swap_both"
        assert E.Cache(root).verify() != [] or not changed
        run = E.run(TOY, cfg, cache=root)
        assert run.stats.computed == (1 if changed else 0)
        assert results_bytes(run.results) == results_bytes(clean.results)
        assert E.Cache(root).verify() == []

    check()
