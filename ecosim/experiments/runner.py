"""Running experiments: :class:`Run` and :func:`run` / :func:`run_many`.

Units are cached one by one, so a killed run resumes where it stopped, and run through any
:class:`concurrent.futures.Executor` (:mod:`.executors` builds one from a spec: ``inline``,
``local:N`` for a process pool, ``dask://HOST:PORT`` for a Dask cluster, ``dask:local:N``);
:func:`stack_units` is the default way to combine units.

Whatever the executor, the results come back to the process that called :func:`run_many`, which
alone writes the cache: workers need no shared file system. Each worker also returns the code
fingerprint (:func:`~.provenance.code_fingerprint`) of the modules that computed the unit, and a
unit whose fingerprint differs from this process's (the one in its cache key) is an error, never
cached: another ecosim revision, another package version or another BLAS kernel on a worker
would otherwise file different bits under this key.

A unit that several experiments ask for (a :class:`~.shared.SharedUnit`: the same function and
arguments, whose key names that computation and not the experiment) is submitted once per
:func:`run_many`, for the first experiment in job order that asks; its result is served to
the others (counted as ``shared`` in their :class:`RunStats`), and its cache entry records
every experiment that asked. A unit that provides shared units (``provides=``) serves them
in the same way, computed once with it.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import socket
import threading
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from typing import Any

import numpy as np

from . import provenance as _provenance
from . import shared as _shared
from .config import Config
from .executors import InlineExecutor, executor_workers
from .registry import Experiment, canonical_json, get
from .shared import SharedUnit
from .store import Cache, Results, as_results, results_bytes

__all__ = ["Run", "RunStats", "run", "run_many", "stack_units"]


def _code_modules(exp: Experiment) -> tuple[str, ...]:
    """The modules whose fingerprint is the code part of ``exp``'s key (as ``exp.code()``)."""
    return tuple(sorted({f.__module__ for f in (exp.compute, exp.units, exp.combine)
                         if f is not None}))


def _compute_unit(compute, cfg, unit, modules=()):
    """Worker side: one unit, timed (wall and this process's CPU seconds), with this process's
    code fingerprint of ``modules`` and its host name. Module-level so that process pools and
    Dask can pickle it."""
    if unit is None:
        return _timed(modules, compute, cfg)
    return _timed(modules, compute, cfg, dict(unit))


def _compute_shared(fn, args, modules=()):
    """Worker side: one shared unit (:class:`~.shared.SharedUnit`), ``fn(**args)``, as
    :func:`_compute_unit` returns it."""
    return _timed(modules, functools.partial(fn, **args))


def _timed(modules, call, *args):
    code = _provenance.code_fingerprint(*modules)
    t0, c0 = time.perf_counter(), time.process_time()
    results = as_results(call(*args))
    return (results, time.perf_counter() - t0, time.process_time() - c0, code,
            socket.gethostname())


# Which BLAS libraries a process has loaded depends on what it imported before it first took
# its fingerprint, not on the bits it computes (the probe says those): not compared.
_NOT_COMPARED = {("blas", "libraries")}


def _code_mismatch(here: dict, there: dict, path: tuple = ()) -> list[str]:
    """The fields in which two code fingerprints differ, as ``"field: here X, worker Y"``."""
    out = []
    for key in sorted(set(here) | set(there), key=str):
        field = path + (key,)
        if field in _NOT_COMPARED:
            continue
        a, b = here.get(key), there.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += _code_mismatch(a, b, field)
        elif a != b:
            def short(v):
                return v[:12] if isinstance(v, str) and len(v) > 12 else v
            out.append(f"{'.'.join(map(str, field))}: here {short(a)!r}, worker {short(b)!r}")
    return out


@dataclasses.dataclass(frozen=True)
class RunStats:
    """How one experiment's results were obtained, and what computing them cost.

    A shared unit computed in this call counts as computed once: in the experiment whose
    unit computed it (the one whose unit provides it, ``provides=``, else the first in job
    order that asked for it); the others count it in ``shared``.

    The timings are measurements, not part of what a run is: equality ignores ``cpu_s`` and
    ``wall_s``.
    """

    units: int
    cached: int
    computed: int
    compute_s: float  # summed compute time of the computed units (worker wall time)
    #: summed CPU seconds of the worker processes over the computed units (all their threads)
    cpu_s: float = dataclasses.field(default=0.0, compare=False)
    #: wall seconds from the first computed unit's submission to the last one's completion
    #: (0 when every unit was cached); experiments sharing an executor overlap
    wall_s: float = dataclasses.field(default=0.0, compare=False)
    #: shared units (:mod:`.shared`) that another experiment of the same :func:`run_many`
    #: computed (counted, with their time, in its ``computed``) and this one was served:
    #: ``units == cached + computed + shared``
    shared: int = 0


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
    ``max_pending`` at a time (default: :func:`executor_workers`), and saved by this process as
    soon as it completes, so a run killed midway loses only the units in flight. Results are
    identical whatever the executor, because each unit is a pure function of (config, unit);
    a unit whose worker reports another code fingerprint than this process's is an error
    (see the module docstring), never cached. A shared unit is computed once, whichever
    experiments (and how many of their units) ask for it. Builds sharing one cache do not
    compute a unit twice: each claims a unit before computing it (:meth:`Cache.claim`), and a
    unit another live build has claimed is served from the entry that build writes (counted
    as cached), or computed here if that build stops without writing it.

    Args:
        jobs: ``(experiment or name, config)`` pairs.
        cache: a :class:`Cache`, a directory, or None for the default directory.
        executor: any :class:`concurrent.futures.Executor`; None runs in-process.
        progress: a tqdm bar per experiment (None: only on a terminal).
        max_pending: how many units may be submitted and unfinished at once (None: as many
            as the executor runs at once, read again as units complete).

    Returns:
        One :class:`Run` per job, in order.

    Raises:
        RuntimeError: a unit failed, or came from a worker with another code fingerprint
            (the units still in flight are cancelled; finished ones stay cached).
    """
    cache = cache if isinstance(cache, Cache) else Cache(cache)
    executor = executor if executor is not None else InlineExecutor()
    if max_pending is not None and (isinstance(max_pending, bool)
                                    or not isinstance(max_pending, int) or max_pending < 1):
        raise ValueError(f"max_pending must be a positive int or None, got {max_pending!r}")

    plans = []  # (exp, cfg, units, results list, stats dict)
    todo = []   # (plan index, unit index)
    for exp, cfg in jobs:
        exp = get(exp)
        if not isinstance(cfg, exp.config):
            raise TypeError(f"experiment {exp.name!r} takes a {exp.config.__name__}, "
                            f"got {type(cfg).__name__}")
        units = exp.unit_list(cfg)
        # a cache entry: (experiment, config, unit), or (SharedUnit, None, None)
        entries = [(exp, cfg, u) if s is None else (s, None, None)
                   for u, s in ((u, exp.shared_unit(cfg, u)) for u in units)]
        found = [cache.load(*e) for e in entries]
        prov = [cache.provenance(*e) if r is not None else None for e, r in zip(entries, found)]
        p = len(plans)
        plans.append((exp, cfg, units, found, {"compute_s": 0.0, "cpu_s": 0.0, "start": None,
                                                "end": None, "provenance": prov,
                                                "entries": entries}))
        todo += [(p, i) for i, r in enumerate(found) if r is None]
    served = _shared.schedule([((p, i), _shared_of(plans[p][4]["entries"][i][0]),
                                plans[p][0].provided(plans[p][1], plans[p][2][i]))
                               for p, i in todo])

    bars = _bars(plans, todo, progress)

    def askers_of(p, i):
        return [(p, i)] + served[(p, i)]

    def deliver(p, i, by: dict) -> None:
        """Hand the results of the entries of ``(p, i)`` and the units it serves over."""
        for q, j in askers_of(p, i):
            what = plans[q][4]["entries"][j][0]
            plans[q][3][j] = by[what]
            plans[q][4]["provenance"][j] = cache.provenance(*plans[q][4]["entries"][j])
            if bars.get(q) is not None:
                bars[q].update(1)

    def from_peer(p, i, notice=True) -> bool:
        """Serve ``(p, i)`` from the entries another build computed, if all are there."""
        by = {}
        for q, j in askers_of(p, i):
            entry = plans[q][4]["entries"][j]
            if entry[0] not in by:
                r = (cache.load(*entry, notice=notice)
                     if cache.path(*entry).with_suffix(".json").exists() else None)
                if r is None:
                    return False
                by[entry[0]] = r
        deliver(p, i, by)
        peer_served.add((p, i))
        return True

    peer_served: set = set()  # units another build on this cache computed meanwhile
    waiting: list = []  # units whose claim another build holds
    heartbeat = _ClaimHeartbeat(cache)
    try:
        pending: dict[Future, tuple[int, int]] = {}
        queue = list(reversed(list(served)))
        while queue or pending or waiting:
            limit = max_pending if max_pending is not None else executor_workers(executor)
            while queue and len(pending) < limit:
                p, i = queue.pop()
                exp, cfg, units = plans[p][:3]
                entry = plans[p][4]["entries"][i]
                if not cache.claim(*entry):  # another build computes it: wait for its entry
                    waiting.append((p, i))
                    continue
                if from_peer(p, i, notice=False):  # finished between our look and claim
                    cache.release(*entry)
                    continue
                if plans[p][4]["start"] is None:
                    plans[p][4]["start"] = time.perf_counter()
                what = plans[p][4]["entries"][i][0]
                if what is exp:
                    fut = executor.submit(_compute_unit, exp.compute, cfg, units[i],
                                          _code_modules(exp))
                else:
                    fut = executor.submit(_compute_shared, what.fn, dict(what.args),
                                          (what.fn.__module__,))
                pending[fut] = (p, i)
            if waiting:  # a claim released: served from its entry, or computed here
                still = []
                for p, i in waiting:
                    if cache.claimed(*plans[p][4]["entries"][i]):
                        still.append((p, i))
                    elif not from_peer(p, i):  # that build stopped without it
                        queue.append((p, i))
                waiting = still
                if not pending:
                    if waiting and not queue:
                        time.sleep(CLAIM_POLL_S)
                    continue
            done, _ = wait(list(pending), return_when=FIRST_COMPLETED,
                           timeout=CLAIM_POLL_S if waiting else None)
            for fut in sorted(done, key=lambda f: pending[f]):
                p, i = pending.pop(fut)
                exp, cfg, units, found, acc = plans[p]
                entry = acc["entries"][i]
                unit = "" if units[i] is None else f" unit {units[i]}"
                try:
                    results, seconds, cpu, code, host = fut.result()
                except Exception as exc:
                    for other in pending:
                        other.cancel()
                    hint = ""
                    if isinstance(exc, ModuleNotFoundError) and str(exc.name).startswith(
                            "ecosim"):
                        hint = " (the workers need ecosim installed, at this revision)"
                    raise RuntimeError(f"experiment {exp.name!r}{unit} failed: {exc}"
                                       f"{hint}") from exc
                diff = _code_mismatch(entry[0].code(), code)
                if diff:
                    for other in pending:
                        other.cancel()
                    raise RuntimeError(
                        f"experiment {exp.name!r}{unit}: worker {host} computed it with other "
                        f"code or packages than its cache key says ({'; '.join(diff)}); not "
                        "cached: run workers on this ecosim revision in the same locked "
                        "environment")
                where = f"experiment {exp.name!r}{unit}"
                own, provided = _shared.split_provided(results, exp.provided(cfg, units[i]))
                own = as_results(own, where)
                by = {entry[0]: own} | {s: as_results(r, where) for s, r in provided.items()}
                askers = [(p, i)] + served[(p, i)]
                # nothing is cached when one of them conflicts with a readable entry
                held = {what: _check_entry(cache, what, res, where) for what, res in by.items()}
                for what, res in by.items():  # an entry records every experiment that asked
                    names = (exp.name,) + tuple(plans[q][0].name for q, j in askers
                                                if plans[q][4]["entries"][j][0] == what)
                    if not held[what]:
                        _save(cache, what, cfg, units[i], res, tuple(dict.fromkeys(names)))
                deliver(p, i, by)
                cache.release(*entry)
                acc["compute_s"] += seconds
                acc["cpu_s"] += cpu
                acc["end"] = time.perf_counter()
    finally:
        heartbeat.stop()
        cache.release_all()
        for bar in bars.values():
            bar.close()

    out = []
    computed, shared = {}, {}
    for (p, i), waiters in served.items():
        if (p, i) in peer_served:  # cached: another build computed it
            continue
        computed[p] = computed.get(p, 0) + 1
        for q, _ in waiters:
            shared[q] = shared.get(q, 0) + 1
    for p, (exp, cfg, units, found, acc) in enumerate(plans):
        if exp.units is None:
            results = found[0]
        else:
            combine = exp.combine or stack_units
            results = as_results(combine(cfg, units, found), f"experiment {exp.name!r}")
        n_new, n_shared = computed.get(p, 0), shared.get(p, 0)
        wall = acc["end"] - acc["start"] if acc["end"] is not None else 0.0
        stats = RunStats(units=len(units), cached=len(units) - n_new - n_shared,
                         computed=n_new, compute_s=acc["compute_s"], cpu_s=acc["cpu_s"],
                         wall_s=wall, shared=n_shared)
        distinct = {canonical_json(d): d for d in acc["provenance"]}
        out.append(Run(experiment=exp, config=cfg, results=results, stats=stats,
                       provenance=tuple(distinct[k] for k in sorted(distinct))))
    return out


#: how often (seconds) a build waiting for another's claimed units looks for their entries
CLAIM_POLL_S = 0.5


class _ClaimHeartbeat:
    """Refreshes the claims a build holds while it runs (a daemon thread), so other builds
    on the same cache wait for its units instead of taking them over."""

    def __init__(self, cache: Cache, every: float = 30.0):
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, args=(cache, every), daemon=True)
        self._thread.start()

    def _beat(self, cache: Cache, every: float) -> None:
        while not self._stop.wait(every):
            cache.refresh_claims()

    def stop(self) -> None:
        self._stop.set()


def _shared_of(what):
    return what if isinstance(what, SharedUnit) else None


def _check_entry(cache: Cache, what, results: Results, where: str) -> bool:
    """Whether the cache holds a readable entry of a shared unit already (False for an
    experiment's own unit); that entry must hold the same bytes as ``results``."""
    old = cache.load(what) if isinstance(what, SharedUnit) else None
    if old is not None and results_bytes(old) != results_bytes(results):
        raise RuntimeError(f"{where}: its results of {what!r} differ from the cache's entry "
                           f"{cache.path(what)}; not cached")
    return old is not None


def _save(cache: Cache, what, cfg, unit, results: Results, asked_by: tuple) -> None:
    """File a computed unit's results under its experiment's key or a shared unit's (the
    caller keeps a readable entry the cache holds already, with the provenance of the unit
    that computed it; an unreadable one is rewritten)."""
    if not isinstance(what, SharedUnit):
        cache.save(what, cfg, unit, results)
    else:
        cache.save(what, None, None, results, asked_by=asked_by)


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
