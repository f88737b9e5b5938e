"""The seed cache: entries copied into the working cache only when they pass an entry's checks,
and the shipped seed holding every unit ``make figures`` asks for (no more), as the code
that trained it computes them.
"""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from ecosim import experiments as E
from ecosim.experiments import seed as S
from ecosim.experiments.shared import SharedUnit
from ecosim.experiments.store import results_bytes
from tests.platform_pins import pinned_platform
from tests.test_experiments import TOY, ToyConfig


def _seed(tmp_path):
    """A seed of TOY's smoke units, and an empty working cache."""
    cfg = ToyConfig().smoke()
    clean = E.run(TOY, cfg, cache=tmp_path / "seed")
    return cfg, clean, tmp_path / "seed", tmp_path / "work"


def _files(root):
    return {p.relative_to(root): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_seed_entry_is_copied_and_served_without_computing(tmp_path, capsys):
    cfg, clean, seed, work = _seed(tmp_path)
    capsys.readouterr()
    cache = E.Cache(work, seed=seed)
    run = E.run(TOY, cfg, cache=cache)
    assert run.stats.computed == 0 and cache.seeded == clean.stats.units
    assert capsys.readouterr().err == ""
    assert _files(work) == _files(seed)  # both files of every entry, byte for byte
    for k in clean.results:
        np.testing.assert_array_equal(run[k], clean[k])
    again = E.Cache(work, seed=seed)  # now from the working cache, not the seed
    assert E.run(TOY, cfg, cache=again).stats.computed == 0 and again.seeded == 0


def test_without_a_seed_every_unit_is_computed(tmp_path):
    cfg, clean, seed, work = _seed(tmp_path)
    run = E.run(TOY, cfg, cache=E.Cache(work))
    assert run.stats.computed == clean.stats.units


def test_a_seed_entry_for_another_key_is_never_asked_for(tmp_path):
    cfg, clean, seed, work = _seed(tmp_path)
    cache = E.Cache(work, seed=seed)
    run = E.run(TOY, cfg.override(["scale=3.0"]), cache=cache)
    assert cache.seeded == 0 and run.stats.computed == run.stats.units


@pytest.mark.parametrize("damage,words", [
    ("npz_of_another_unit", "does not hold the content its record names"),
    ("array_changed", "does not hold the content its record names"),
    ("entry_of_another_unit", "is recorded under another key"),
    ("record_missing", "has no readable record"),
])
def test_a_damaged_seed_entry_is_computed_not_copied(tmp_path, capsys, damage, words):
    cfg, clean, seed, work = _seed(tmp_path)
    shutil.copytree(seed, tmp_path / "seed_clean")
    a, b, *_ = sorted((seed / "toy").glob("*.npz"))
    if damage == "npz_of_another_unit":
        a.write_bytes(b.read_bytes())
    elif damage == "array_changed":
        with np.load(a, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
        arrays["err"] = arrays["err"] + 1.0
        a.write_bytes(results_bytes(arrays))
    elif damage == "entry_of_another_unit":
        a.write_bytes(b.read_bytes())
        a.with_suffix(".json").write_bytes(b.with_suffix(".json").read_bytes())
    else:
        a.with_suffix(".json").unlink()
    capsys.readouterr()
    cache = E.Cache(work, seed=seed)
    run = E.run(TOY, cfg, cache=cache)
    assert run.stats.computed == 1 and cache.seeded == clean.stats.units - 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"ecosim: seed entry {a} {words}")
    assert line.endswith("; computing it")
    for k in clean.results:
        np.testing.assert_array_equal(run[k], clean[k])
    # the working cache holds the clean entries: the computed one and the copied others
    assert _files(work) == _files(tmp_path / "seed_clean")


def test_the_seed_must_be_a_directory(tmp_path):
    with pytest.raises(ValueError, match="seed must be an existing directory"):
        E.Cache(tmp_path / "work", seed=tmp_path / "missing")


# -- the shipped seed -----------------------------------------------------------------------

_ENV = ("packages", "python", "blas", "ufuncs", "torch_cpu")  # where it ran, not what it ran


def _asked(entry) -> dict:
    what, cfg, unit = entry
    doc = what.key_doc() if isinstance(what, SharedUnit) else what.key_doc(cfg, unit)
    return json.loads(json.dumps(doc, sort_keys=True))


def _code_part(doc: dict) -> str:
    """A key less the environment the unit ran in: what it computed, with which code."""
    doc = {k: v for k, v in doc.items() if k not in ("provenance", "content")}
    doc["code"] = {k: v for k, v in doc["code"].items() if k not in _ENV}
    return json.dumps(doc, sort_keys=True)


def test_the_shipped_seed_holds_every_unit_make_figures_asks_for(tmp_path, capsys):
    """Fails after an edit to code a language-model experiment imports (its key changed):
    run ``make seed`` and commit ecosim/data/seed_cache with the edit. Then, in the seed's
    environment (the lock's packages and Python, the pinned kernels), every entry is served."""
    assert S.SEED_DIR.is_dir(), f"{S.SEED_DIR} is missing: run `make seed`"
    records = [json.loads(p.read_text()) for p in sorted(S.SEED_DIR.rglob("*.json"))]
    entries = S.seed_entries()
    shipped = {_code_part(r) for r in records}
    asked = {_code_part(_asked(e)): e for e in entries}
    stale = [e for k, e in asked.items() if k not in shipped]
    names = sorted({e[0].name for e in stale})
    assert not stale, (f"the shipped seed cache has no entry for {len(stale)} of "
                       f"{len(entries)} units ({', '.join(names)}): the code they import "
                       "changed since it was trained; run `make seed` and commit "
                       "ecosim/data/seed_cache")
    unasked = shipped - set(asked)
    assert not unasked, f"the seed holds {len(unasked)} entries nothing asks for: `make seed`"

    def env(doc) -> str:
        return json.dumps({k: doc["code"].get(k) for k in _ENV}, sort_keys=True)

    def folder(doc) -> str:  # an experiment's entries, or a shared unit's
        return doc.get("experiment") or doc["shared"]

    envs: dict[str, set] = {}
    for r in records:  # each experiment imports its own packages: one environment apiece
        envs.setdefault(folder(r), set()).add(env(r))
    several = sorted(f for f, e in envs.items() if len(e) > 1)
    assert not several, f"the seed of {several} was trained in several environments: make seed"
    here_of = {folder(_asked(e)): env(_asked(e)) for e in entries}
    pinned = False
    for f, (seed_env,) in sorted(envs.items()):
        seed_env, here = json.loads(seed_env), json.loads(here_of[f])
        if here["python"] != seed_env["python"] or here["packages"] != seed_env["packages"]:
            pytest.skip(f"not the seed's environment for {f} (Python {here['python']} against "
                        f"{seed_env['python']}, or other package versions): make figures "
                        "computes those units here")
        if not pinned:
            pinned_platform(torch=True)
            pinned = True
        assert here == seed_env, f"the seed's kernels for {f} are {seed_env}, here {here}"
    cache = E.Cache(tmp_path, seed=S.SEED_DIR)
    capsys.readouterr()
    assert all(cache.load(*e) is not None for e in entries)
    assert capsys.readouterr().err == "" and cache.seeded == len(entries)


@pytest.mark.slow
@pytest.mark.parametrize("name", S.SEEDED)
def test_a_seed_unit_retrains_to_the_same_bytes(name, tmp_path):
    """The seed is what this code computes: one unit of each experiment, trained again."""
    pinned_platform(torch=True)
    exp = E.get(name)
    cfg = exp.default_config()
    unit = exp.unit_list(cfg)[-1]
    shared = exp.shared_unit(cfg, unit)
    entry = (shared, None, None) if shared is not None else (exp, cfg, unit)
    seeded = E.Cache(tmp_path / "a", seed=S.SEED_DIR).load(*entry)
    assert seeded is not None, "the seed lacks this unit: run `make seed`"
    if shared is not None:
        fresh = shared.fn(**dict(shared.args))
        fresh = {k: v for k, v in fresh.items() if k in seeded}
    else:
        fresh = exp.compute(cfg, unit)
    assert results_bytes(E.as_results(fresh)) == results_bytes(seeded)


def test_seed_entries_are_the_seeded_experiments_units_once_each():
    entries = S.seed_entries()
    paths = [E.Cache("x").path(*e) for e in entries]
    assert len(paths) == len(set(paths))
    n_units = sum(len(E.get(n).unit_list(E.get(n).default_config())) for n in S.SEEDED)
    assert 0 < len(entries) <= n_units  # units several experiments share counted once


def test_make_seed_replaces_the_directory_only_when_done(tmp_path, monkeypatch):
    out = tmp_path / "seed"
    out.mkdir()
    (out / "old.txt").write_text("old")

    def boom(*a, **k):
        raise RuntimeError("interrupted")

    monkeypatch.setattr(S, "run_many", boom)
    with pytest.raises(RuntimeError, match="interrupted"):
        S.make_seed(out, jobs=1, names=(TOY,))
    assert (out / "old.txt").read_text() == "old"
    monkeypatch.undo()
    n = S.make_seed(out, jobs=1, names=(TOY,))
    assert not (out / "old.txt").exists() and n == len(list(out.rglob("*.npz"))) > 0
    json.loads(next(out.rglob("*.json")).read_text())
    shutil.rmtree(out)
