"""Executors from a spec (``make_executor``, ``ecosim --executor``), and a Dask cluster that
computes the same bytes as the in-process executor.

The Dask tests start a ``distributed.LocalCluster`` of two single-threaded worker processes
(once for the module) and connect to it by address, as ``ecosim --executor
dask://HOST:PORT`` does with a remote scheduler; they are skipped where the ``cluster`` extra
(``dask[distributed]``) is not installed.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from ecosim import experiments as E
from ecosim.tooling.cli import main
from ecosim.experiments.executors import (DaskExecutor, InlineExecutor, executor_workers,
                                          make_executor, parse_executor)

HAS_DISTRIBUTED = importlib.util.find_spec("distributed") is not None
needs_dask = pytest.mark.skipif(not HAS_DISTRIBUTED, reason="Dask's distributed scheduler "
                                "(the cluster extra, dask[distributed]) is not installed")

# Two cheap registered experiments with several units each (smoke configs, so the cluster's
# start dominates): floor_additive (6 units), relative_error (3 units).
SWEEP = ("floor_additive", "relative_error")


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file()}


def _jobs():
    return [(name, E.get(name).default_config(smoke=True)) for name in SWEEP]


# -- the spec parser ----------------------------------------------------------------------------

@pytest.mark.parametrize("spec, parsed", [
    (1, ("inline", 1)), ("inline", ("inline", 1)), ("local:1", ("inline", 1)),
    (3, ("local", 3)), ("local:2", ("local", 2)), (" local:12 ", ("local", 12)),
    ("dask://127.0.0.1:8786", ("dask", "tcp://127.0.0.1:8786")),
    ("dask://scheduler.example.org:1", ("dask", "tcp://scheduler.example.org:1")),
    ("dask://node-07:65535", ("dask", "tcp://node-07:65535")),
    ("dask://[::1]:8786", ("dask", "tcp://[::1]:8786")),
    ("dask:local:2", ("dask-local", 2)),
])
def test_parse_executor(spec, parsed):
    assert parse_executor(spec) == parsed


@pytest.mark.parametrize("spec", [
    0, -2, "0", "local:0", "local:", "local:two", "local:-1", "local:1.5", "", "pool",
    "dask://", "dask://host", "dask://host:", "dask://host:0", "dask://host:65536",
    "dask://host:port", "dask://a b:8786", "dask://host:8786/x", "tcp://host:8786",
    "dask:local:0", "dask:local:", "dask:local", "DASK://host:8786",
])
def test_parse_executor_rejects_in_one_line(spec):
    with pytest.raises(ValueError) as info:
        parse_executor(spec)
    msg = str(info.value)
    assert "\n" not in msg and repr(spec) in msg
    assert "'inline', 'local:N', 'dask://HOST:PORT' or 'dask:local:N'" in msg


@pytest.mark.parametrize("spec", [True, 2.0, None, ["local:2"]])
def test_parse_executor_rejects_other_types(spec):
    with pytest.raises(ValueError, match=r"must be an int or a str .* got "):
        parse_executor(spec)


def test_make_executor_local_and_inline():
    assert isinstance(make_executor(1), InlineExecutor)
    assert isinstance(make_executor("inline"), InlineExecutor)
    assert isinstance(make_executor("local:1"), InlineExecutor)
    assert executor_workers(InlineExecutor()) == 1
    with make_executor("local:3") as pool:  # no worker starts before the first submit
        assert isinstance(pool, ProcessPoolExecutor)
        assert executor_workers(pool) == 3
    with pytest.raises(ValueError, match="executor spec 'local:0'"):
        make_executor("local:0")


def test_executor_workers_of_other_executors():
    class Named(InlineExecutor):
        max_workers = 5

    class Bare(InlineExecutor):
        _max_workers = None

    assert executor_workers(Named()) == 5
    assert executor_workers(Bare()) >= 1  # the CPU count


def test_dask_spec_without_distributed_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed fails
    with pytest.raises(ImportError, match=r"install the 'cluster' extra \(pip install "
                                          r"'ecosim\[cluster\]'\)"):
        make_executor("dask://127.0.0.1:8786")
    assert main(["run", "grids", "--smoke", "--executor", "dask:local:2"]) == 2


def test_cli_executor_usage_errors(capsys, tmp_path):
    assert main(["run", "grids", "--executor", "pool:2", "--cache", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "ecosim run: error: --executor: executor spec 'pool:2': expected 'inline'" in err
    assert main(["figures", "--executor", "local:2", "--jobs", "2", "--out",
                 str(tmp_path)]) == 2
    assert "give --executor or --jobs, not both" in capsys.readouterr().err
    assert main(["figures", "--help"]) == 0
    assert "dask://HOST:PORT" in capsys.readouterr().out
    assert not list(tmp_path.iterdir())


def test_a_worker_with_other_code_is_not_cached(tmp_path):
    # The worker fingerprints the code it ran; here the cache key claims other sources (what a
    # worker at another revision looks like from the client), so nothing may be cached.
    class OtherKey(E.Experiment):
        def code(self):
            return dict(super().code(), source_sha256="0" * 64)

    exp = E.get("relative_error")
    stale = OtherKey(**{f.name: getattr(exp, f.name) for f in dataclasses.fields(exp)})
    with pytest.raises(RuntimeError, match=r"experiment 'relative_error' unit \{.*\}: worker "
                       r"\S+ computed it with other code or packages than its cache key says "
                       r"\(source_sha256: here '000000000000', worker '[0-9a-f]{12}'\); not "
                       r"cached"):
        E.run(stale, stale.default_config(smoke=True), cache=tmp_path)
    assert not list(tmp_path.rglob("*.npz"))


def _workers_refused(tmp_path, fingerprint, field: str, var: str, value: str, extra=""):
    """Pool workers spawned with ``var=value`` compute other probe bits than this process
    under the same key: the run refuses their results (the mismatch names ``field.probe``,
    then the fields ``extra`` matches) and caches nothing."""
    here = fingerprint()
    exp = E.get("relative_error")
    with make_executor("local:2") as pool:
        probe = pool.submit(fingerprint).result()["probe"]
        if probe == here["probe"]:
            pytest.skip(f"{var}={value} computes the same probe bits here")
        with pytest.raises(RuntimeError, match=rf"worker \S+ computed it with other code or "
                           rf"packages than its cache key says \({field}\.probe: here "
                           rf"'{here['probe'][:12]}', worker '{probe[:12]}'{extra}\); not "
                           rf"cached"):
            E.run(exp, exp.default_config(smoke=True), cache=tmp_path, executor=pool)
    assert not list(tmp_path.rglob("*.npz"))


def test_workers_with_another_blas_kernel_are_refused(tmp_path, monkeypatch):
    # A real case of other bits under the same key: OpenBLAS picks its kernel for the CPU it
    # finds, and OPENBLAS_CORETYPE forces another one in the (spawned) pool workers.
    from ecosim.experiments.provenance import blas_fingerprint

    arch = {lib[2] for lib in blas_fingerprint()["libraries"] or []}
    other = "Sandybridge" if "Sandybridge" not in arch else "Haswell"
    monkeypatch.setenv("OPENBLAS_CORETYPE", other)
    _workers_refused(tmp_path, blas_fingerprint, "blas", "OPENBLAS_CORETYPE", other)


def test_workers_with_another_numpy_kernel_are_refused(tmp_path, monkeypatch):
    # NumPy picks its ufunc kernels at import, and NPY_ENABLE_CPU_FEATURES=X86_V2 (its
    # baseline) leaves the (spawned) pool workers none of the dispatched ones: the same code
    # and versions, other exp/tanh bits.
    from ecosim.experiments.provenance import ufunc_fingerprint

    if not ufunc_fingerprint()["targets"]:
        pytest.skip("NumPy dispatches no kernels beyond its baseline here")
    monkeypatch.delenv("NPY_DISABLE_CPU_FEATURES", raising=False)
    monkeypatch.setenv("NPY_ENABLE_CPU_FEATURES", "X86_V2")
    _workers_refused(tmp_path, ufunc_fingerprint, "ufuncs", "NPY_ENABLE_CPU_FEATURES",
                     "X86_V2", extra=r"; ufuncs\.targets: here \[[^)]*\], worker \[\]")


# -- a Dask cluster -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def scheduler():
    """The address (``HOST:PORT``) of a LocalCluster of two single-threaded worker processes;
    the cluster is closed after the module's tests."""
    if not HAS_DISTRIBUTED:
        pytest.skip("Dask's distributed scheduler (the cluster extra) is not installed")
    import distributed

    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                  dashboard_address=None) as cluster:
        address = cluster.scheduler_address
        assert address.startswith("tcp://")
        yield address[len("tcp://"):]


@needs_dask
def test_dask_sweep_equals_inline_byte_for_byte(scheduler, tmp_path):
    from distributed import get_task_stream

    inline = E.run_many(_jobs(), cache=tmp_path / "inline")
    with make_executor(f"dask://{scheduler}") as ex:
        assert isinstance(ex, DaskExecutor)
        assert ex.workers == 2 and executor_workers(ex) == 2
        with get_task_stream(ex.client) as stream:
            dask = E.run_many(_jobs(), cache=tmp_path / "dask", executor=ex)
    n_units = [len(E.get(name).unit_list(cfg)) for name, cfg in _jobs()]
    assert [r.stats.computed for r in dask] == n_units == [6, 3]
    # every unit ran on the cluster, as one task each
    tasks = [t["key"] for t in stream.data]
    assert len(tasks) == sum(n_units) and all("_compute_unit" in str(k) for k in tasks)
    # the cache entries (.npz results and .json keys with provenance): the same bytes
    one, two = _tree(tmp_path / "inline"), _tree(tmp_path / "dask")
    assert sorted(one) == sorted(two) and len(one) == 2 * sum(n_units)
    for name, data in one.items():
        assert two[name] == data, name
    for a, b in zip(inline, dask):
        assert list(a.results) == list(b.results)
        for key in a.results:
            np.testing.assert_array_equal(b[key], a[key], strict=True)
        assert a.provenance == b.provenance
    # and a rerun through Dask reads everything from the cache
    with make_executor(f"dask://{scheduler}") as ex:
        again = E.run_many(_jobs(), cache=tmp_path / "dask", executor=ex)
    assert [r.stats.computed for r in again] == [0, 0]


@needs_dask
def test_dask_computes_a_shared_unit_once_and_the_same_bytes(scheduler, tmp_path):
    # two experiments asking for one computation (tests/test_shared_units.py): n = 5 is
    # submitted once, on the cluster, and every cache entry has the inline run's bytes
    from test_shared_units import A, B, PairConfig

    jobs = [(A, PairConfig(ns=(3, 5))), (B, PairConfig(ns=(5, 6)))]
    inline = E.run_many(jobs, cache=tmp_path / "inline")
    with make_executor(f"dask://{scheduler}") as ex:
        dask = E.run_many(jobs, cache=tmp_path / "dask", executor=ex)
    for runs in (inline, dask):
        assert [(r.stats.computed, r.stats.shared) for r in runs] == [(2, 0), (1, 1)]
    assert _tree(tmp_path / "inline") == _tree(tmp_path / "dask")


@needs_dask
def test_cli_dask_executor_same_bytes(scheduler, tmp_path, capsys):
    base = ["run", "floor_additive", "--smoke", "--no-progress"]
    assert main(base + ["--cache", str(tmp_path / "c1"), "--save", str(tmp_path / "1.npz")]) == 0
    assert "[executor=inline]" in capsys.readouterr().out
    assert main(base + ["--executor", f"dask://{scheduler}", "--cache", str(tmp_path / "c2"),
                        "--save", str(tmp_path / "2.npz")]) == 0
    out = capsys.readouterr().out
    assert f"[executor=dask://{scheduler} (2 worker(s), 2 thread(s))]" in out
    assert "6 unit(s): 0 cached, 6 computed" in out
    assert (tmp_path / "1.npz").read_bytes() == (tmp_path / "2.npz").read_bytes()
    assert _tree(tmp_path / "c1") == _tree(tmp_path / "c2")


@needs_dask
def test_unreachable_scheduler_is_one_line(tmp_path, capsys):
    import socket

    import dask

    with socket.socket() as s:  # a port that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        with pytest.raises(OSError, match=rf"no Dask scheduler answered at "
                                          rf"tcp://127.0.0.1:{port}: "):
            make_executor(f"dask://127.0.0.1:{port}")
        assert main(["run", "grids", "--executor", f"dask://127.0.0.1:{port}",
                     "--cache", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no Dask scheduler answered" in err
