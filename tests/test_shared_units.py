"""Shared units: one computation asked for by several experiments is computed once per build,
cached under a key that names the computation (not the experiment), and served byte-identical
to every experiment that asks, whichever executor computed it."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from ecosim import experiments as E
from ecosim.experiments.shared import SharedUnit, provided_columns, split_provided
from ecosim.experiments.store import results_bytes

# -- two toy experiments sharing some units (module level: spawned workers import them) -------


@dataclasses.dataclass(frozen=True, kw_only=True)
class PairConfig(E.Config):
    ns: tuple[int, ...] = (3, 4)
    scale: float = 1.0

    SMOKE: ClassVar[dict] = {}


def square_table(n: int, scale: float) -> dict:
    """The shared computation: a pure function of its arguments."""
    x = np.arange(n, dtype=np.float64) * scale
    return {"sq": np.array(float((x * x).sum())), "n": np.array(n)}


def pair_units(cfg: PairConfig) -> list[dict]:
    return [{"n": n} for n in cfg.ns]


def pair_share(cfg: PairConfig, unit: dict) -> SharedUnit | None:
    return SharedUnit(square_table, {"n": unit["n"], "scale": cfg.scale})


def pair_compute(cfg: PairConfig, unit: dict) -> dict:
    return pair_share(cfg, unit).compute()


def own_share(cfg: PairConfig, unit: dict) -> SharedUnit | None:
    """Odd n: the shared computation; even n: the experiment's own unit."""
    return pair_share(cfg, unit) if unit["n"] % 2 else None


def provider_compute(cfg: PairConfig, unit: dict) -> dict:
    """An own unit that computes square_table(n + 1) on the way (and lies when scale < 0)."""
    (s,) = provider_provides(cfg, unit)
    on_the_way = square_table(**s.args)
    if cfg.scale < 0:
        on_the_way = {**on_the_way, "sq": on_the_way["sq"] + 1.0}
    return {"twice": 2 * on_the_way["sq"]} | provided_columns([on_the_way])


def provider_provides(cfg: PairConfig, unit: dict) -> list[SharedUnit]:
    return [SharedUnit(square_table, {"n": unit["n"] + 1, "scale": abs(cfg.scale)})]


A = E.Experiment(name="pair_a", config=PairConfig, compute=pair_compute, version="1",
                 units=pair_units, share=pair_share)
B = E.Experiment(name="pair_b", config=PairConfig, compute=pair_compute, version="1",
                 units=pair_units, share=own_share)
C = E.Experiment(name="pair_c", config=PairConfig, compute=provider_compute, version="1",
                 units=pair_units, provides=provider_provides)


class CountingExecutor(E.InlineExecutor):
    def __init__(self):
        self.submitted = 0

    def submit(self, fn, /, *args, **kwargs):
        self.submitted += 1
        return super().submit(fn, *args, **kwargs)


def _tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_a_shared_unit_is_computed_once_and_served_to_both(tmp_path):
    ca, cb = PairConfig(ns=(3, 4, 5)), PairConfig(ns=(5, 6, 7))
    ex = CountingExecutor()
    a, b = E.run_many([(A, ca), (B, cb)], cache=tmp_path, executor=ex)
    # a: 3, 4, 5 computed (shared units); b: 5 served from a's computation, 6 its own unit,
    # 7 a shared unit nobody else asked for
    assert ex.submitted == 5
    assert (a.stats.units, a.stats.cached, a.stats.computed, a.stats.shared) == (3, 0, 3, 0)
    assert (b.stats.units, b.stats.cached, b.stats.computed, b.stats.shared) == (3, 0, 2, 1)
    assert a["sq"][2] == b["sq"][0] == 30.0  # 0 + 1 + 4 + 9 + 16, the same unit
    entry = E.Cache(tmp_path).path(pair_share(ca, {"n": 5}))
    assert results_bytes(E.load_results(entry)) == results_bytes(square_table(5, 1.0))
    # the entry names the computation and records every experiment that asked, the first of
    # them the one that computed it; the experiments' own folders hold only b's own unit
    shared = sorted(p.name for p in (tmp_path / "shared.test_shared_units.square_table")
                    .glob("*.json"))
    assert len(shared) == 4  # n = 3, 4, 5, 7
    five = json.loads(entry.with_suffix(".json").read_text())
    assert five["provenance"]["asked_by"] == ["pair_a", "pair_b"]
    assert five["args"] == {"n": 5, "scale": 1.0} and "experiment" not in five
    assert not (tmp_path / "pair_a").exists()
    assert len(list((tmp_path / "pair_b").glob("*.npz"))) == 1
    # asked again in the other order: everything from the cache, the same bytes
    b2, a2 = E.run_many([(B, cb), (A, ca)], cache=tmp_path, executor=ex)
    assert ex.submitted == 5 and (a2.stats.cached, b2.stats.cached) == (3, 3)
    assert results_bytes(a2.results) == results_bytes(a.results)
    assert results_bytes(b2.results) == results_bytes(b.results)


def test_an_unreadable_shared_entry_is_recomputed_and_rewritten(tmp_path, capsys):
    """As an experiment's own entry: a shared entry that cannot be read is recomputed, and
    rewritten, so the next build reads it instead of computing it again."""
    cfg = PairConfig(ns=(3,))
    E.run(A, cfg, cache=tmp_path)
    entry = E.Cache(tmp_path).path(pair_share(cfg, {"n": 3}))
    good = entry.read_bytes()
    entry.write_bytes(b"not an npz")
    assert E.run(A, cfg, cache=tmp_path).stats.computed == 1
    assert entry.read_bytes() == good
    assert E.run(A, cfg, cache=tmp_path).stats.cached == 1
    capsys.readouterr()


def test_the_key_does_not_depend_on_who_asks(tmp_path):
    ua, ub = A.shared_unit(PairConfig(), {"n": 3}), B.shared_unit(PairConfig(ns=(3,)), {"n": 3})
    assert ua == ub and ua.digest() == ub.digest() and hash(ua) == hash(ub)
    cache = E.Cache(tmp_path)
    assert cache.path(ua) == cache.path(ub)
    assert ua.digest() != A.shared_unit(PairConfig(scale=2.0), {"n": 3}).digest()
    # argument order is not part of the key; a computed B entry is found by A
    assert SharedUnit(square_table, {"scale": 1.0, "n": 3}).digest() == ua.digest()
    E.run(B, PairConfig(ns=(3,)), cache=tmp_path)
    assert E.run(A, PairConfig(ns=(3, 4)), cache=tmp_path).stats.cached == 1


def test_the_same_shared_unit_twice_in_one_experiment_is_computed_once(tmp_path):
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Twice(PairConfig):
        pass

    def twice_units(cfg):
        return [{"n": 3, "tag": "x"}, {"n": 3, "tag": "y"}]

    exp = E.Experiment(name="twice", config=Twice, compute=pair_compute, version="1",
                       units=twice_units, share=pair_share)
    ex = CountingExecutor()
    run = E.run(exp, Twice(), cache=tmp_path, executor=ex)
    assert ex.submitted == 1 and (run.stats.computed, run.stats.shared) == (1, 1)
    assert run["sq"].tolist() == [5.0, 5.0]


def test_a_unit_provides_shared_units_computed_on_the_way(tmp_path):
    # C's unit n computes square_table(n + 1) on the way: A's units 4 and 5 are served by C's
    # units 3 and 4 although A comes first in job order; A's 3 is computed for A
    ex = CountingExecutor()
    a, c = E.run_many([(A, PairConfig(ns=(3, 4, 5))), (C, PairConfig(ns=(3, 4)))],
                      cache=tmp_path, executor=ex)
    assert ex.submitted == 3
    assert (a.stats.computed, a.stats.shared, c.stats.computed, c.stats.shared) == (1, 2, 2, 0)
    assert a["sq"].tolist() == [5.0, 14.0, 30.0] and c["twice"].tolist() == [28.0, 60.0]
    assert sorted(c.results) == ["twice", "unit_n"]  # the provided columns are filed apart
    entry = E.Cache(tmp_path).path(pair_share(PairConfig(), {"n": 5}))
    assert entry.read_bytes() == results_bytes(square_table(5, 1.0))
    doc = json.loads(entry.with_suffix(".json").read_text())
    assert doc["provenance"]["asked_by"] == ["pair_c", "pair_a"]  # the computing one first
    # a provider whose results differ from the cache's entry is refused, and caches nothing
    before = _tree_bytes(tmp_path)
    with pytest.raises(RuntimeError, match=r"experiment 'pair_c' unit \{'n': 4\}: its results "
                       r"of SharedUnit\(.*square_table\(n=5, scale=1.0\)\) differ from the "
                       r"cache's entry .*; not cached"):
        E.run(C, PairConfig(ns=(4,), scale=-1.0), cache=tmp_path)
    assert _tree_bytes(tmp_path) == before


def test_split_provided():
    own, parts = split_provided({"x": 1, "provides.0.sq": 2, "provides.1.sq": 3},
                                provider_provides(PairConfig(), {"n": 1}) * 2)
    assert own == {"x": 1} and list(parts.values()) == [{"sq": 3}]  # equal units: one entry
    with pytest.raises(ValueError, match=r"expected provides.<k>.<column> results for k in "
                       r"0..0, got indices \[\]"):
        split_provided({"x": 1}, provider_provides(PairConfig(), {"n": 1}))


def test_process_pool_gives_the_same_bytes(tmp_path):
    jobs = [(A, PairConfig(ns=(3, 4, 5))), (B, PairConfig(ns=(5, 6, 7)))]
    one = E.run_many(jobs, cache=tmp_path / "one")
    with E.make_executor(2) as pool:
        two = E.run_many(jobs, cache=tmp_path / "two", executor=pool)
    def counts(runs):
        return [(r.stats.units, r.stats.cached, r.stats.computed, r.stats.shared) for r in runs]
    assert counts(one) == counts(two) == [(3, 0, 3, 0), (3, 0, 2, 1)]
    assert _tree_bytes(tmp_path / "one") == _tree_bytes(tmp_path / "two")


def test_a_worker_with_other_code_is_not_cached(tmp_path):
    class Stale(SharedUnit):
        def code(self):
            return dict(super().code(), source_sha256="0" * 64)

    def stale_share(cfg, unit):
        return Stale(square_table, {"n": unit["n"], "scale": cfg.scale})

    exp = dataclasses.replace(A, name="stale", share=stale_share)
    with pytest.raises(RuntimeError, match=r"experiment 'stale' unit \{'n': 3\}: worker \S+ "
                       r"computed it with other code"):
        E.run(exp, PairConfig(ns=(3,)), cache=tmp_path)
    assert not list(tmp_path.rglob("*.npz"))


def test_shared_unit_validation():
    with pytest.raises(TypeError, match="expected a module-level function"):
        SharedUnit(lambda n: {}, {"n": 1})
    with pytest.raises(TypeError, match=r"expected str keys and bool/int/float/str values, "
                       r"got 'n': \[1\]"):
        SharedUnit(square_table, {"n": [1]})
    args = {"scale": 1.0, "n": 3}
    SharedUnit(square_table, args)
    assert list(args) == ["scale", "n"]  # the caller's dict is not reordered
    bad = dataclasses.replace(A, name="bad", share=lambda cfg, unit: {"n": 1})
    with pytest.raises(TypeError, match="share\\(\\) must return a SharedUnit or None, got "
                       "dict"):
        bad.shared_unit(PairConfig(), {"n": 1})
    with pytest.raises(ValueError, match="share= needs units="):
        E.Experiment(name="nounits", config=PairConfig, compute=pair_compute, version="1",
                     share=pair_share)


@pytest.mark.torch
def test_lm_and_dqt_lm_train_their_common_fp32_run_once(tmp_path):
    pytest.importorskip("torch")
    from ecosim.experiments.store import as_results

    lm, dqt = E.get("lm"), E.get("dqt_lm")
    c_lm = lm.config(**{**lm.config.SMOKE, "methods": ("fp32",)})
    c_dqt = dqt.config(**{**dqt.config.SMOKE, "methods": ("fp32", "bitnet_b158"),
                          "seeds": (1,)})
    ex = CountingExecutor()
    a, b = E.run_many([(lm, c_lm), (dqt, c_dqt)], cache=tmp_path, executor=ex)
    assert ex.submitted == 2  # fp32 and bitnet_b158: fp32 trained once
    assert (a.stats.computed, a.stats.shared, b.stats.computed, b.stats.shared) == (1, 0, 1, 1)
    assert a["method"].tolist() == ["fp32"]
    assert b["method"].tolist() == ["fp32", "bitnet_b158"]
    for key in a.results:  # the same run in both: every column of its row, bit for bit
        np.testing.assert_array_equal(b[key][0], a[key][0], strict=True)
    u_lm, u_dqt = lm.unit_list(c_lm)[0], dqt.unit_list(c_dqt)[0]
    shared = lm.shared_unit(c_lm, u_lm)
    assert shared == dqt.shared_unit(c_dqt, u_dqt)  # one key, whoever asks
    # the entry holds what the experiment's own compute function returns, byte for byte
    entry = E.Cache(tmp_path).path(shared)
    assert entry.read_bytes() == results_bytes(as_results(dqt.compute(c_dqt, u_dqt)))
    doc = json.loads(entry.with_suffix(".json").read_text())
    assert doc["provenance"]["asked_by"] == ["lm", "dqt_lm"]
    assert doc["shared"] == "shared.ecosim.experiments.lm.train_run"


@pytest.mark.torch
def test_lm_finetune_provides_the_lm_pretraining_run(tmp_path):
    pytest.importorskip("torch")
    from ecosim.experiments.store import as_results

    lm, ft = E.get("lm"), E.get("lm_finetune")
    c_ft = ft.default_config(smoke=True)
    c_lm = lm.config(presets=(c_ft.preset,), methods=("bf16_master",), seeds=(1,),
                     steps=(c_ft.pretrain_steps,), batch=c_ft.batch, seq=c_ft.seq,
                     eval_every=c_ft.pretrain_eval_every, eval_batches=c_ft.eval_batches)
    ex = CountingExecutor()
    a, b = E.run_many([(lm, c_lm), (ft, c_ft)], cache=tmp_path, executor=ex)
    assert ex.submitted == 1  # lm_finetune's unit; lm's run is its pretraining
    assert (a.stats.computed, a.stats.shared, b.stats.computed) == (0, 1, 1)
    assert a["val_loss"][0] == b["pretrain_val_loss"][0]
    u = lm.unit_list(c_lm)[0]
    assert lm.shared_unit(c_lm, u) == ft.provided(c_ft, ft.unit_list(c_ft)[0])[0]
    # what the pretraining provided is what lm's own compute function returns, byte for byte
    assert E.Cache(tmp_path).path(lm.shared_unit(c_lm, u)).read_bytes() == results_bytes(
        as_results(lm.compute(c_lm, u)))
