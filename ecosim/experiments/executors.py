"""Where the units of :func:`~.runner.run_many` run: executors and the specs that build them.

Any :class:`concurrent.futures.Executor` will do. :func:`make_executor` builds one from a spec
(what ``ecosim --executor`` takes): ``inline`` (:class:`InlineExecutor`, in this process),
``local:N`` (a spawn-based process pool), ``dask://HOST:PORT`` (:class:`DaskExecutor` on a
running Dask scheduler) or ``dask:local:N`` (a new local Dask cluster); :func:`executor_workers`
says how many units one runs at once.
"""
from __future__ import annotations

import functools
import os
import re
from concurrent.futures import Executor, Future

__all__ = ["DaskExecutor", "InlineExecutor", "executor_workers", "make_executor",
           "parse_executor"]


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


class DaskExecutor(Executor):
    """Units on a Dask distributed cluster, through the executor of a ``distributed.Client``.

    Owns the client, and the ``LocalCluster`` of ``dask:local:N`` if given one, and closes both
    at :meth:`shutdown`. Build it with :func:`make_executor`. Tasks are submitted impure (each
    submission runs, none is deduplicated by Dask), and their results travel back to this
    process. Workers import ecosim to run a unit: they need it installed at this process's
    revision, in the same locked environment (checked unit by unit by :func:`run_many`).

    Args:
        client: a connected ``distributed.Client``.
        cluster: the cluster the client was started on, closed with it (None: not owned).
        spec: the spec it was built from, for messages.
    """

    def __init__(self, client, cluster=None, spec: str = ""):
        self.client = client
        self.spec = spec
        self._cluster = cluster
        self._executor = client.get_executor(pure=False)
        self._closed = False

    @property
    def max_workers(self) -> int:
        """The cluster's worker threads now (0 while no worker has joined the scheduler)."""
        return int(sum(self.client.nthreads().values()))

    @property
    def workers(self) -> int:
        """The number of worker processes connected to the scheduler now."""
        return len(self.client.nthreads())

    def __repr__(self) -> str:
        return f"DaskExecutor({self.spec or self.client.scheduler.address!r})"

    def submit(self, fn, /, *args, **kwargs) -> Future:
        if kwargs:  # Dask's executor would read them as its own options
            fn = functools.partial(fn, **kwargs)
        return self._executor.submit(fn, *args)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Wait for (or, with ``cancel_futures``, cancel) submitted units, then close the
        client and the cluster it owns. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        try:
            self._executor.shutdown(wait=wait and not cancel_futures)
        finally:
            try:
                self.client.close()
            finally:
                if self._cluster is not None:
                    self._cluster.close()


_SPEC_HELP = ("'inline', 'local:N', 'dask://HOST:PORT' or 'dask:local:N' (N a positive "
              "integer)")
_DASK_ADDRESS = re.compile(r"^dask://(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)"
                           r":(?P<port>[0-9]{1,5})$")


def parse_executor(spec: int | str) -> tuple[str, int | str]:
    """Read an executor spec: what :func:`make_executor` and ``ecosim --executor`` accept.

    Args:
        spec: ``N`` or ``"local:N"`` (N worker processes on this machine; 1: in-process),
            ``"inline"`` (in-process), ``"dask://HOST:PORT"`` (a running Dask scheduler) or
            ``"dask:local:N"`` (a Dask ``LocalCluster`` of N single-threaded worker
            processes, started for the run).

    Returns:
        ``("inline", 1)``, ``("local", N)``, ``("dask", "tcp://HOST:PORT")`` or
        ``("dask-local", N)``; ``local:1`` reads as ``("inline", 1)``.

    Raises:
        ValueError: anything else, in one line that lists the accepted forms.

    Example:
        >>> parse_executor("dask://10.0.0.5:8786")
        ('dask', 'tcp://10.0.0.5:8786')
        >>> parse_executor(4), parse_executor("local:1")
        (('local', 4), ('inline', 1))
    """
    def positive(text: str) -> int | None:
        return int(text) if text.isdigit() and int(text) >= 1 else None

    if isinstance(spec, bool) or not isinstance(spec, (int, str)):
        raise ValueError(f"executor spec must be an int or a str ({_SPEC_HELP}), "
                         f"got {type(spec).__name__} {spec!r}")
    text = str(spec).strip()
    n = positive(text) if isinstance(spec, int) else None
    if n is None and text.startswith("local:"):
        n = positive(text[len("local:"):])
    if n is not None:
        return ("inline", 1) if n == 1 else ("local", n)
    if text == "inline":
        return ("inline", 1)
    if text.startswith("dask:local:"):
        n = positive(text[len("dask:local:"):])
        if n is not None:
            return ("dask-local", n)
    m = _DASK_ADDRESS.match(text)
    if m and 1 <= int(m["port"]) <= 65535:
        return ("dask", f"tcp://{m['host']}:{int(m['port'])}")
    raise ValueError(f"executor spec {spec!r}: expected {_SPEC_HELP}")


def make_executor(spec: int | str = 1) -> Executor:
    """An executor for :func:`run_many` from a spec (see :func:`parse_executor`).

    ``inline`` (or ``1``, ``local:1``): :class:`InlineExecutor`; ``local:N`` (or ``N``): a
    spawn-based process pool of N workers; ``dask://HOST:PORT``: a :class:`DaskExecutor`
    connected to that scheduler; ``dask:local:N``: a :class:`DaskExecutor` on a new
    ``LocalCluster`` of N worker processes with one thread each. Shut it down after use (or
    use it as a context manager).

    Raises:
        ValueError: a spec that is none of these.
        ImportError: a Dask spec without Dask's distributed scheduler installed (the
            ``cluster`` extra: ``pip install 'ecosim[cluster]'``).
        OSError: no scheduler answered at ``HOST:PORT`` (within Dask's connect timeout,
            ``distributed.comm.timeouts.connect``).
    """
    kind, arg = parse_executor(spec)
    if kind == "inline":
        return InlineExecutor()
    # Workers are separate processes already: a BLAS thread pool in each of them fights for
    # the same cores (small MLP matmuls run about 5x slower than with one thread each when
    # the workers keep every core busy). Spawned workers read
    # these variables when they import NumPy; a user's own setting wins.
    if kind in ("local", "dask-local"):
        for var in _BLAS_THREAD_VARS:
            os.environ.setdefault(var, "1")
    if kind == "local":
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        # spawn: the same behaviour on every platform, and safe with threads in the parent.
        # Each worker watches its parent and exits when it dies (SIGTERM, SIGKILL, a crash):
        # an idle worker would otherwise wait on its task queue for minutes.
        return ProcessPoolExecutor(max_workers=arg,
                                   mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_exit_with_parent)
    try:
        import distributed
    except ImportError as exc:
        raise ImportError(f"executor {spec!r} needs Dask's distributed scheduler: install "
                          "the 'cluster' extra (pip install 'ecosim[cluster]')") from exc
    if kind == "dask-local":
        # no dashboard: it needs bokeh and a free port, and a sweep does not need it
        cluster = distributed.LocalCluster(n_workers=arg, threads_per_worker=1,
                                           processes=True, dashboard_address=None)
        try:
            client = distributed.Client(cluster)
        except BaseException:
            cluster.close()
            raise
        return DaskExecutor(client, cluster, str(spec))
    try:
        client = distributed.Client(arg)
    except OSError as exc:
        raise OSError(f"no Dask scheduler answered at {arg}: "
                      f"{' '.join(str(exc).split())}") from exc
    return DaskExecutor(client, None, str(spec))


def executor_workers(executor: Executor) -> int:
    """How many units ``executor`` runs at once: what :func:`run_many` keeps in flight.

    :class:`InlineExecutor`: 1; a process or thread pool: its worker count;
    :class:`DaskExecutor`: the cluster's worker threads at the time of the call (read again
    by :func:`run_many` as units complete, so workers that join later are used); any other
    executor: its ``max_workers`` or ``_max_workers`` attribute, else the CPU count. Never
    less than 1 (with no Dask worker yet, one unit waits for the first to join).
    """
    n = getattr(executor, "max_workers", None)
    if n is None:
        n = getattr(executor, "_max_workers", None)  # the standard library's pools
    if n is None:
        n = os.cpu_count()
    return max(1, int(n or 1))


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
