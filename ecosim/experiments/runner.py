"""Running experiments: executors, :class:`Run` and :func:`run` / :func:`run_many`.

Units are cached one by one, so a killed run resumes where it stopped, and run through any
:class:`concurrent.futures.Executor` (a process pool for ``--jobs N``, :class:`InlineExecutor`
in-process); :func:`stack_units` is the default way to combine them.
"""
from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from typing import Any

import numpy as np

from .config import Config
from .registry import Experiment, _canonical, get
from .store import Cache, Results, as_results

__all__ = ["InlineExecutor", "Run", "RunStats", "make_executor", "run", "run_many",
           "stack_units"]


class InlineExecutor(Executor):
    """A :class:`concurrent.futures.Executor` that runs each call in-process, at submit."""

    _max_workers = 1

    def submit(self, fn, /, *args, **kwargs) -> Future:
        fut: Future = Future()
        fut.set_running_or_notify_cancel()
        try:
            fut.set_result(fn(*args, **kwargs))
        except Exception as exc:  # handed to the caller through the future, as pools do
            fut.set_exception(exc)
        return fut


def make_executor(jobs: int) -> Executor:
    """``jobs == 1``: :class:`InlineExecutor`; more: a spawn-based process pool."""
    if not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be a positive int, got {jobs!r}")
    if jobs == 1:
        return InlineExecutor()
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # Workers are separate processes already: a BLAS thread pool in each of them fights for
    # the same cores (measured: small MLP matmuls 5x slower under load). Spawned workers read
    # these variables when they import NumPy; a user's own setting wins.
    for var in _BLAS_THREAD_VARS:
        os.environ.setdefault(var, "1")
    # spawn: the same behaviour on every platform, and safe with threads in the parent.
    # Each worker watches its parent and exits when it dies (SIGTERM, SIGKILL, a crash): an
    # idle worker would otherwise wait on its task queue for minutes.
    return ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_exit_with_parent)


def _exit_with_parent() -> None:
    """Worker initializer: a daemon thread that ends this process when its parent is gone."""
    import multiprocessing
    import threading
    from multiprocessing.connection import wait as wait_for

    parent = multiprocessing.parent_process()
    if parent is None:  # pragma: no cover - not a multiprocessing child
        return

    def watch():
        wait_for([parent.sentinel])
        os._exit(1)
    threading.Thread(target=watch, name="ecosim-parent-watch", daemon=True).start()


_BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _compute_unit(compute, cfg, unit):
    """Worker side: one unit, timed. Module-level so that process pools can pickle it."""
    t0 = time.perf_counter()
    raw = compute(cfg) if unit is None else compute(cfg, dict(unit))
    return as_results(raw), time.perf_counter() - t0


@dataclasses.dataclass(frozen=True)
class RunStats:
    """How one experiment's results were obtained."""

    units: int
    cached: int
    computed: int
    compute_s: float  # summed compute time of the computed units (worker time)


@dataclasses.dataclass(frozen=True)
class Run:
    """An experiment's results with the config that produced them.

    Indexing reads the results: ``run["x"] is run.results["x"]``.
    """

    experiment: Experiment
    config: Config
    results: Results
    stats: RunStats
    provenance: tuple[dict[str, Any], ...] = ()
    """The distinct ``{"git_revision", "git_dirty", "source_sha256"}`` of the code that
    computed the units (one entry when all units came from the same checkout)."""

    @property
    def mixed_provenance(self) -> bool:
        """True when units were computed from different revisions or a dirty checkout."""
        return len(self.provenance) > 1 or any(p.get("git_dirty") for p in self.provenance)

    def __getitem__(self, key: str) -> np.ndarray:
        return self.results[key]

    def __repr__(self) -> str:
        names = ", ".join(self.results)
        return f"Run({self.experiment.name!r}, {self.config!r}, results=[{names}], {self.stats})"

    def __contains__(self, key: str) -> bool:
        return key in self.results

    @property
    def name(self) -> str:
        return self.experiment.name


def stack_units(cfg, units: list[dict], unit_results: list[Results]) -> Results:
    """Default ``combine``: stack each result along a new first axis (one row per unit) and add
    each unit field as a column ``unit_<field>``."""
    keys = set(unit_results[0])
    for r in unit_results[1:]:
        if set(r) != keys:
            raise ValueError("units returned different result names: "
                             f"{sorted(keys)} vs {sorted(r)}")
    out = {k: np.stack([r[k] for r in unit_results]) for k in sorted(keys)}
    for field in sorted({f for u in units for f in u}):
        name = f"unit_{field}"
        if name in out:
            raise ValueError(f"result name {name!r} collides with a unit field column")
        out[name] = np.array([u.get(field) for u in units])
    return out


def run(exp: str | Experiment, cfg: Config | None = None, *, cache: Cache | str | os.PathLike
        | None = None, executor: Executor | None = None, progress: bool | None = False,
        smoke: bool = False) -> Run:
    """Run one experiment (cached); see :func:`run_many`."""
    exp = get(exp)
    return run_many([(exp, cfg if cfg is not None else exp.default_config(smoke=smoke))],
                    cache=cache, executor=executor, progress=progress)[0]


def run_many(jobs: Sequence[tuple[str | Experiment, Config]], *, cache: Cache | str | os.PathLike
             | None = None, executor: Executor | None = None, progress: bool | None = False,
             max_pending: int | None = None) -> list[Run]:
    """Run several experiments, sharing one executor, caching and resuming unit by unit.

    Every unit not in the cache is submitted to ``executor`` (default: in-process), at most
    ``max_pending`` at a time (default: the executor's worker count), and saved as soon as it
    completes, so a run killed midway loses only the units in flight. Results are identical
    whatever the executor, because each unit is a pure function of (config, unit).

    Args:
        jobs: ``(experiment or name, config)`` pairs.
        cache: a :class:`Cache`, a directory, or None for the default directory.
        executor: any :class:`concurrent.futures.Executor`; None runs in-process.
        progress: a tqdm bar per experiment (None: only on a terminal).
        max_pending: how many units may be submitted and unfinished at once.

    Returns:
        One :class:`Run` per job, in order.
    """
    cache = cache if isinstance(cache, Cache) else Cache(cache)
    executor = executor if executor is not None else InlineExecutor()
    if max_pending is None:
        max_pending = max(1, int(getattr(executor, "_max_workers", None) or os.cpu_count() or 1))

    plans = []  # (exp, cfg, units, results list, stats dict)
    todo = []   # (plan index, unit index)
    for exp, cfg in jobs:
        exp = get(exp)
        if not isinstance(cfg, exp.config):
            raise TypeError(f"experiment {exp.name!r} takes a {exp.config.__name__}, "
                            f"got {type(cfg).__name__}")
        units = exp.unit_list(cfg)
        found = [cache.load(exp, cfg, u) for u in units]
        prov = [cache.provenance(exp, cfg, u) if r is not None else None
                for u, r in zip(units, found)]
        p = len(plans)
        plans.append((exp, cfg, units, found, {"compute_s": 0.0, "provenance": prov}))
        todo += [(p, i) for i, r in enumerate(found) if r is None]

    bars = _bars(plans, todo, progress)
    try:
        pending: dict[Future, tuple[int, int]] = {}
        queue = list(reversed(todo))
        while queue or pending:
            while queue and len(pending) < max_pending:
                p, i = queue.pop()
                exp, cfg, units = plans[p][:3]
                pending[executor.submit(_compute_unit, exp.compute, cfg, units[i])] = (p, i)
            done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
            for fut in sorted(done, key=lambda f: pending[f]):
                p, i = pending.pop(fut)
                exp, cfg, units, found, acc = plans[p]
                try:
                    results, seconds = fut.result()
                except Exception as exc:
                    for other in pending:
                        other.cancel()
                    unit = "" if units[i] is None else f" unit {units[i]}"
                    raise RuntimeError(f"experiment {exp.name!r}{unit} failed: {exc}") from exc
                cache.save(exp, cfg, units[i], results)
                found[i] = results
                acc["provenance"][i] = cache.provenance(exp, cfg, units[i])
                acc["compute_s"] += seconds
                if bars.get(p) is not None:
                    bars[p].update(1)
    finally:
        for bar in bars.values():
            bar.close()

    out = []
    computed = {}
    for p, _ in todo:
        computed[p] = computed.get(p, 0) + 1
    for p, (exp, cfg, units, found, acc) in enumerate(plans):
        if exp.units is None:
            results = found[0]
        else:
            combine = exp.combine or stack_units
            results = as_results(combine(cfg, units, found), f"experiment {exp.name!r}")
        n_new = computed.get(p, 0)
        stats = RunStats(units=len(units), cached=len(units) - n_new, computed=n_new,
                         compute_s=acc["compute_s"])
        distinct = {_canonical(d): d for d in acc["provenance"]}
        out.append(Run(experiment=exp, config=cfg, results=results, stats=stats,
                       provenance=tuple(distinct[k] for k in sorted(distinct))))
    return out


def _bars(plans, todo, progress) -> dict:
    if progress is False or not todo:
        return {}
    from tqdm import tqdm

    counts: dict[int, int] = {}
    for p, _ in todo:
        counts[p] = counts.get(p, 0) + 1
    bars = {}
    for pos, p in enumerate(sorted(counts)):
        exp = plans[p][0]
        n = len(plans[p][2])
        bars[p] = tqdm(total=n, initial=n - counts[p], desc=exp.name, unit="unit",
                       position=pos, leave=True, disable=None if progress is None else False,
                       dynamic_ncols=True)
    return bars
