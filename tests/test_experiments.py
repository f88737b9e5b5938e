"""Experiments: typed configs and overrides, byte-stable cache, resumable and parallel runs."""
from __future__ import annotations

import dataclasses
import doctest
import math
from concurrent.futures import Future
from pathlib import Path
from typing import ClassVar, Literal

import numpy as np
import pytest

import ecosim.experiments.base as base
from ecosim import experiments as E
from ecosim import rng
from ecosim.experiments.grids import GridsConfig
from ecosim.core.rounding import quantize


# -- a toy experiment with units (module level: a spawned worker must be able to import it) ----

@dataclasses.dataclass(frozen=True, kw_only=True)
class ToyConfig(E.Config):
    n: int = 64
    lrs: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4)
    mode: Literal["rtn", "sr"] = "sr"
    scale: float = 1.0
    flag: bool = False
    tag: str | None = None
    key: int = 7

    SMOKE: ClassVar[dict] = {"n": 8}


def toy_units(cfg: ToyConfig) -> list[dict]:
    return [{"lr": lr} for lr in cfg.lrs]


def toy_compute(cfg: ToyConfig, unit: dict) -> dict:
    x = np.linspace(0.0, 1.0, cfg.n) * unit["lr"] * cfg.scale
    key = (rng.fold_in(cfg.key, "toy", str(unit["lr"])), 0) if cfg.mode == "sr" else None
    q = quantize(x, "e4m3", cfg.mode, key=key)
    return {"q": q, "err": np.abs(q - x).mean(), "label": np.array("toy")}


TOY = E.Experiment(name="toy", config=ToyConfig, compute=toy_compute, version="1",
                   units=toy_units)


def toy_single(cfg: ToyConfig) -> dict:
    return {"x": np.arange(cfg.n) * cfg.scale}


SINGLE = E.Experiment(name="single", config=ToyConfig, compute=toy_single, version="1")


class CountingExecutor(E.InlineExecutor):
    """In-process, counting submissions; optionally 'killed' (KeyboardInterrupt) at one."""

    def __init__(self, kill_at: int | None = None):
        self.submitted = 0
        self.kill_at = kill_at

    def submit(self, fn, /, *args, **kwargs) -> Future:
        if self.kill_at is not None and self.submitted == self.kill_at:
            raise KeyboardInterrupt  # what Ctrl-C (or a kill) does to a run midway
        self.submitted += 1
        return super().submit(fn, *args, **kwargs)


def _tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


# -- configs -------------------------------------------------------------------------------------

def test_defaults_smoke_and_frozen():
    cfg = ToyConfig()
    assert cfg.n == 64 and cfg.smoke().n == 8 and cfg.smoke().lrs == cfg.lrs
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.n = 3  # type: ignore[misc]
    assert cfg.to_dict()["lrs"] == [0.1, 0.2, 0.3, 0.4]


def test_overrides_parse_declared_types():
    cfg = ToyConfig().override(["n=1_000", "lrs=1,0.5", "mode=rtn", "scale=2", "flag=yes",
                                "tag=hello", "key=1e3"])
    assert cfg == ToyConfig(n=1000, lrs=(1.0, 0.5), mode="rtn", scale=2.0, flag=True,
                            tag="hello", key=1000)
    assert isinstance(cfg.scale, float) and isinstance(cfg.n, int)
    assert ToyConfig().override(["lrs=()"]).lrs == ()
    assert ToyConfig().override(["lrs=[0.25]"]).lrs == (0.25,)
    assert ToyConfig(tag="x").override(["tag=none"]).tag is None
    assert ToyConfig().override([]) == ToyConfig()


@pytest.mark.parametrize("item, message", [
    ("steps=3", "has no field 'steps'"),
    ("nn=3", "did you mean 'n'"),
    ("n=1.5", "expected an int"),
    ("n=ten", "expected an int"),
    ("scale=fast", "expected a float"),
    ("flag=maybe", "expected a bool"),
    ("mode=bf16", "expected one of ['rtn', 'sr']"),
    ("lrs=0.1,x", "ToyConfig.lrs[1]: expected a float"),
    ("n", "not of the form key=value"),
    ("=3", "not of the form key=value"),
])
def test_bad_overrides_are_clear_errors(item, message):
    with pytest.raises(E.ConfigError) as info:
        ToyConfig().override([item])
    assert message in str(info.value)


def test_unknown_key_lists_valid_keys():
    with pytest.raises(E.ConfigError, match="valid keys: n, lrs, mode, scale, flag, tag, key"):
        ToyConfig().override(["bogus=1"])
    with pytest.raises(E.ConfigError, match="has no field"):
        ToyConfig().replace(bogus=1)


def test_constructor_checks_types_and_widens_ints():
    for bad in ({"n": "5"}, {"n": 5.0}, {"n": True}, {"scale": "1"}, {"flag": 1},
                {"lrs": 0.1}, {"lrs": ("a",)}, {"mode": "RTN"}, {"tag": 3}):
        with pytest.raises(E.ConfigError):
            ToyConfig(**bad)
    # ConfigError is both a TypeError and a ValueError
    with pytest.raises(TypeError):
        ToyConfig(n="5")
    a, b = ToyConfig(scale=1, lrs=[1, 2]), ToyConfig(scale=1.0, lrs=(1.0, 2.0))
    assert a == b and type(a.scale) is float and type(a.lrs) is tuple
    assert TOY.digest(a) == TOY.digest(b)
    assert ToyConfig(n=np.int64(3)).n == 3 and type(ToyConfig(n=np.int64(3)).n) is int


@pytest.mark.parametrize("name,item,message", [
    ("mlp_states", "variants=bogus", "MLPStatesConfig.variants: variant 'bogus': expected"),
    ("compressed_states", "muon_specs=fp,bogus", "CompressedStatesConfig.muon_specs: 'bogus': "),
    ("lm_finetune", "methods=bogus", "LMFinetuneConfig.methods: unknown method 'bogus'")])
def test_parsed_entries_keep_the_parsers_message(name, item, message):
    """Config.parse_entries: the parser's ValueError, prefixed with the config and field."""
    with pytest.raises(E.ConfigError, match="^" + message):
        E.get(name).config().override([item])


def test_config_docstring_example():
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in finder.find(E.Config, "Config", globs=vars(base).copy()):
        runner.run(test)
    assert runner.failures == 0 and runner.tries > 0


def test_experiment_definition_is_validated():
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class NoDefault(E.Config):
        n: int

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class BadType(E.Config):
        xs: list = dataclasses.field(default_factory=list)

    with pytest.raises(TypeError, match="needs a default"):
        E.Experiment(name="x", config=NoDefault, compute=toy_single, version="1")
    with pytest.raises(E.ConfigError, match="unsupported config field type"):
        E.Experiment(name="x", config=BadType, compute=toy_single, version="1")
    with pytest.raises(ValueError, match="must match"):
        E.Experiment(name="Bad-Name", config=ToyConfig, compute=toy_single, version="1")
    with pytest.raises(ValueError, match="version"):
        E.Experiment(name="x", config=ToyConfig, compute=toy_single, version="")
    with pytest.raises(TypeError, match="frozen dataclass"):
        E.Experiment(name="x", config=dict, compute=toy_single, version="1")
    with pytest.raises(ValueError, match="registered twice"):
        E.experiment("grids", GridsConfig, version="1")(toy_single)


def test_digest_depends_on_name_version_config_and_unit():
    cfg = ToyConfig()
    d = TOY.digest(cfg)
    assert len(d) == 64 and d == TOY.digest(ToyConfig())
    assert d != TOY.digest(cfg.replace(key=8))
    assert d != dataclasses.replace(TOY, version="2").digest(cfg)
    assert d != dataclasses.replace(TOY, name="toy2").digest(cfg)
    assert d != TOY.digest(cfg, {"lr": 0.1}) != TOY.digest(cfg, {"lr": 0.2})
    with pytest.raises(TypeError, match="takes a ToyConfig"):
        TOY.digest(GridsConfig())


# -- storage --------------------------------------------------------------------------------------

def test_results_are_byte_stable_and_round_trip(tmp_path):
    res = {"a": np.arange(5, dtype=np.int32), "b": np.float64(0.1), "c": np.array(["x", "yz"]),
           "d": np.ones((2, 3), np.float32), "e": np.array([True, False])}
    p1 = E.save_results(tmp_path / "one.npz", res)
    p2 = E.save_results(tmp_path / "two.npz", dict(reversed(list(res.items()))))
    assert p1.read_bytes() == p2.read_bytes()
    back = E.load_results(p1)
    assert list(back) == sorted(res)
    for k, v in res.items():
        np.testing.assert_array_equal(back[k], v)
        assert back[k].dtype == np.asarray(v).dtype and back[k].shape == np.shape(v)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.npz", "two.npz"]  # no temp files


def test_bad_results_are_rejected_before_writing(tmp_path):
    with pytest.raises(TypeError, match="dtype object"):
        E.save_results(tmp_path / "x.npz", {"a": np.array([{}, 1], dtype=object)})
    with pytest.raises(ValueError, match="result name"):
        E.save_results(tmp_path / "x.npz", {"a/b": np.zeros(2)})
    with pytest.raises(TypeError, match="dict of arrays"):
        base.as_results([1, 2])
    assert list(tmp_path.iterdir()) == []


# -- running: cache, resume, executors -----------------------------------------------------------

def test_run_stats_time_the_computed_units_only(tmp_path):
    cfg = ToyConfig().smoke()
    first = E.run(TOY, cfg, cache=tmp_path / "c")
    s = first.stats
    # in-process units run inside the span from the first submission to the last completion
    assert s.computed == 4 and s.cpu_s > 0 and s.wall_s >= s.compute_s > 0
    cached = E.run(TOY, cfg, cache=tmp_path / "c").stats
    assert (cached.computed, cached.compute_s, cached.cpu_s, cached.wall_s) == (0, 0.0, 0.0, 0.0)
    # timings are measurements, not identity: equal stats whatever they measured
    assert s == dataclasses.replace(s, cpu_s=0.0, wall_s=0.0)


def test_run_caches_per_unit_and_reruns_byte_identically(tmp_path):
    cfg = ToyConfig().smoke()
    first = E.run_many([(TOY, cfg)], cache=tmp_path / "c")[0]
    assert first.stats == E.RunStats(units=4, cached=0, computed=4, compute_s=first.stats.compute_s)
    assert first["q"].shape == (4, 8) and list(first["unit_lr"]) == [0.1, 0.2, 0.3, 0.4]
    files = _tree_bytes(tmp_path / "c")
    assert len([f for f in files if f.endswith(".npz")]) == 4

    again = E.run(TOY, cfg, cache=tmp_path / "c")
    assert (again.stats.cached, again.stats.computed) == (4, 0)
    assert _tree_bytes(tmp_path / "c") == files
    for k in first.results:
        np.testing.assert_array_equal(again[k], first[k])

    # recomputing from scratch writes the very same bytes
    fresh = E.run(TOY, cfg, cache=tmp_path / "d")
    assert fresh.stats.computed == 4
    assert _tree_bytes(tmp_path / "d") == files


def test_interrupted_run_resumes_with_identical_results(tmp_path):
    cfg = ToyConfig().smoke()
    killed = CountingExecutor(kill_at=2)
    with pytest.raises(KeyboardInterrupt):
        E.run(TOY, cfg, cache=tmp_path / "c", executor=killed)
    assert killed.submitted == 2
    assert len(list((tmp_path / "c" / "toy").glob("*.npz"))) == 2  # the finished units

    resume = CountingExecutor()
    run = E.run(TOY, cfg, cache=tmp_path / "c", executor=resume)
    assert resume.submitted == 2  # only the rest
    assert (run.stats.cached, run.stats.computed) == (2, 2)

    clean = E.run(TOY, cfg, cache=tmp_path / "clean")
    assert _tree_bytes(tmp_path / "c") == _tree_bytes(tmp_path / "clean")
    for k in clean.results:
        np.testing.assert_array_equal(run[k], clean[k])


def test_unit_failure_keeps_finished_units(tmp_path):
    def flaky(cfg, unit):
        if unit["lr"] == 0.3:
            raise FloatingPointError("boom")
        return toy_compute(cfg, unit)

    exp = dataclasses.replace(TOY, compute=flaky)
    with pytest.raises(RuntimeError, match=r"experiment 'toy' unit \{'lr': 0.3\} failed: boom"):
        E.run(exp, ToyConfig().smoke(), cache=tmp_path)
    assert len(list((tmp_path / "toy").glob("*.npz"))) == 2


def test_corrupt_cache_file_is_recomputed(tmp_path):
    cfg = ToyConfig().smoke()
    E.run(SINGLE, cfg, cache=tmp_path)
    path = E.Cache(tmp_path).path(SINGLE, cfg)
    good = path.read_bytes()
    path.write_bytes(b"not a zip")
    run = E.run(SINGLE, cfg, cache=tmp_path)
    assert run.stats.computed == 1 and path.read_bytes() == good


def test_process_pool_gives_the_same_bytes(tmp_path):
    cfg = ToyConfig().smoke()
    E.run(TOY, cfg, cache=tmp_path / "one")
    with E.make_executor(2) as pool:
        run = E.run_many([(TOY, cfg), (SINGLE, cfg)], cache=tmp_path / "two", executor=pool)
    assert [r.stats.computed for r in run] == [4, 1]
    two = _tree_bytes(tmp_path / "two")
    assert {k: v for k, v in two.items() if k.startswith("toy")} == _tree_bytes(tmp_path / "one")


def test_default_cache_dir_and_env(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ECOSIM_CACHE", raising=False)
    assert E.Cache().root == Path(".ecosim_cache")
    E.run(SINGLE, ToyConfig().smoke())
    assert list((tmp_path / ".ecosim_cache" / "single").glob("*.npz"))
    monkeypatch.setenv("ECOSIM_CACHE", str(tmp_path / "env"))
    assert E.Cache().root == tmp_path / "env"


def test_units_are_validated(tmp_path):
    dup = dataclasses.replace(TOY, units=lambda cfg: [{"lr": 1.0}, {"lr": 1.0}])
    with pytest.raises(ValueError, match="duplicate unit"):
        E.run(dup, ToyConfig(), cache=tmp_path)
    bad = dataclasses.replace(TOY, units=lambda cfg: [{"lr": [1.0]}])
    with pytest.raises(TypeError, match="must map str to"):
        E.run(bad, ToyConfig(), cache=tmp_path)
    with pytest.raises(ValueError, match="no units"):
        E.run(dataclasses.replace(TOY, units=lambda cfg: []), ToyConfig(), cache=tmp_path)
    with pytest.raises(TypeError, match="takes a ToyConfig"):
        E.run(TOY, GridsConfig(), cache=tmp_path)


def test_inline_executor_reports_errors_through_the_future():
    fut = E.InlineExecutor().submit(math.sqrt, -1.0)
    assert isinstance(fut.exception(), ValueError)


# -- the registered experiments -------------------------------------------------------------------

def test_registered_experiments_have_valid_configs():
    exps = E.experiments()
    assert "grids" in exps
    for name, exp in exps.items():
        assert exp.name == name and E.get(name) is exp and exp.description
        full, smoke = exp.default_config(), exp.default_config(smoke=True)
        assert isinstance(full, exp.config) and isinstance(smoke, exp.config)
        assert exp.digest(full) != exp.digest(smoke) or full == smoke
    with pytest.raises(KeyError, match="registered: "):
        E.get("no_such_experiment")


def test_grids_experiment_is_pure_and_correct(tmp_path):
    cfg = GridsConfig().smoke()
    saved = np.random.get_state()
    try:  # the global random state must neither matter nor change
        np.random.seed(123)
        a = E.run("grids", cfg, cache=tmp_path / "a")
        after = np.random.get_state()[1].copy()
        np.random.seed(123)
        np.testing.assert_array_equal(after, np.random.get_state()[1])
        np.random.seed(456)
        E.run("grids", cfg, cache=tmp_path / "b")
    finally:
        np.random.set_state(saved)
    assert _tree_bytes(tmp_path / "a") == _tree_bytes(tmp_path / "b")

    r = a.results
    assert list(r["format_count"]) == [253, 247, 15, 16, 3]
    p = r["sr_p"]
    np.testing.assert_array_equal(r["sr_exact_up"], p)  # dyadic p: exactly linear
    inner = p < 1
    np.testing.assert_array_equal(r["sr_fewbits_up"][inner], np.floor(4 * p[inner]) / 4)
    np.testing.assert_array_equal(r["sr_rtn_up"], (p > 0.5).astype(float))  # tie 1/2 -> even lo
    # keyed SR: within 5 standard errors at every position (false alarm < 1e-5 per point)
    assert np.all(np.abs(r["emp_freq"] - r["emp_p"]) <= 5 * r["emp_se"])
    # error laws: RTN within half a step, SR within one; std 1/sqrt(12), 1/sqrt(6) to 3%
    # (n = 20000 samples: relative s.e. of a std is ~ 1/sqrt(2n) = 0.5%)
    assert float(r["err_rtn_absmax"]) <= 0.5 and float(r["err_sr_absmax"]) < 1
    assert abs(float(r["err_rtn_std"]) * math.sqrt(12) - 1) < 0.03
    assert abs(float(r["err_sr_std"]) * math.sqrt(6) - 1) < 0.03
    width = np.diff(r["err_edges"])
    for mode in ("rtn", "sr"):
        assert abs(np.sum(r[f"err_{mode}_density"] * width) - 1) < 1e-12


def test_grids_config_canonicalises_and_validates():
    cfg = GridsConfig().override(["formats=e4m3,fp4", "sr_format=fp8"])
    assert cfg.formats == ("float8_e4m3fn", "float4_e2m1fn") and cfg.sr_format == "float8_e4m3fn"
    for bad in (["formats=nope"], ["formats=float32"], ["error_bins=30"], ["sr_lo=1.1"],
                ["sr_samples=0"], ["sr_nbits=20"], ["formats="]):
        with pytest.raises(E.ConfigError):
            GridsConfig().override(bad)
