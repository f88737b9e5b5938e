"""Figures: a registry of plotting functions and the build that writes their files.

A figure function only plots. It is registered with :func:`figure`, names the experiments it
reads, and receives their :class:`~ecosim.experiments.Run` objects as keyword arguments named
after the experiments. It returns the matplotlib figure and the data behind it as tables
(``{table name: {column: 1-D array}}``).

:func:`build` runs the experiments (cached, see :mod:`ecosim.experiments`) and writes, for a
figure ``NAME``, into the output directory:

* ``NAME.png`` and ``NAME.pdf`` (no timestamps or software stamps in their metadata, so a
  rerun with the same matplotlib writes the same bytes);
* ``NAME.TABLE.csv`` for each table (shortest round-trip float formatting: byte-identical
  on rerun, exact on reading back);
* ``NAME.md`` when the function also returns markdown (a generated table that the README
  quotes through ``ecosim readme``);
* ``NAME.json``: caption, resolved configs with their cache digests, ecosim, NumPy,
  matplotlib and ml_dtypes versions, the git revision of the source (None outside a git
  checkout), and per experiment the provenance of the cached results it plots (revision, dirty
  flag and source hash of the code that computed them); ``mixed_provenance`` is true when
  those differ between units, or any was computed from a dirty checkout.
* ``NAME.provenance.json``: the part of that record that is the same on every rebuild of the
  same code on the same platform, so it can be committed beside the figure: versions, and per
  experiment its config, digest and code fingerprint (source hash, package versions, Python,
  BLAS and torch kernels) and the source hashes of the code that computed its cached results.
  It names no git revision: a committed file cannot name the commit that holds it, and the
  source hash identifies the code as exactly.

Every file is written to a temporary name and moved into place, and left untouched (mtime
included) when its bytes did not change.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

import numpy as np

from .. import experiments as _exp
from ..experiments.base import atomic_write
from ..experiments.provenance import git_revision
from ..registry import Registry
from . import style

__all__ = ["FigureSpec", "BuildReport", "FigureReport", "figure", "figures", "get", "build",
           "table_csv", "git_revision"]

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


@dataclasses.dataclass(frozen=True)
class FigureSpec:
    """A registered figure: name, the experiments it reads, caption, plotting function."""

    name: str
    experiments: tuple[str, ...]
    caption: str
    fn: Callable[..., tuple[Any, Mapping[str, Mapping[str, Any]]]]


_REGISTRY: Registry[FigureSpec] = Registry("figure")


def figure(name: str, *, experiments: Sequence[str], caption: str):
    """Register a plotting function as figure ``name`` (decorator; returns it unchanged).

    The function is called as ``fn(**{experiment: Run})`` and returns
    ``(matplotlib Figure, {table: {column: 1-D array}})``, or with a third element, a markdown
    string written to ``NAME.md``.

    Example (in a module of ``ecosim/figures/``, imported by its ``__init__``)::

        @figure("sr_line", experiments=["grids"], caption="P(round up) under SR.")
        def sr_line(grids):
            fig = style.new_figure(4, 3)
            fig.add_subplot().plot(grids["sr_p"], grids["sr_exact_up"])
            return fig, {"curve": {"p": grids["sr_p"], "up": grids["sr_exact_up"]}}
    """
    experiments = tuple(experiments)
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"figure name {name!r} must match {_NAME.pattern}")
    for e in experiments:
        if not isinstance(e, str) or not e.isidentifier():
            raise ValueError(f"figure {name!r}: experiment names must be identifiers, got {e!r}")
    if not isinstance(caption, str) or not caption.strip():
        raise ValueError(f"figure {name!r} needs a caption")

    def register(fn):
        _REGISTRY.register(name, FigureSpec(name=name, experiments=experiments,
                                            caption=" ".join(caption.split()), fn=fn))
        return fn
    return register


def figures() -> dict[str, FigureSpec]:
    """The registered figures by name (a copy, in registration order)."""
    return _REGISTRY.as_dict()


def get(name: str) -> FigureSpec:
    """A registered figure by name (KeyError, with the closest name, if there is none)."""
    return _REGISTRY.get(name)


# -- CSV ----------------------------------------------------------------------------------------

def _cell_formatter(arr: np.ndarray) -> Callable[[Any], str]:
    kind = arr.dtype.kind
    if kind == "f":
        if arr.dtype == np.float64:
            return lambda v: repr(float(v))
        return lambda v: str(v)  # numpy's shortest repr of a float32/float16 scalar
    if kind in "iu":
        return lambda v: str(int(v))
    if kind == "b":
        return lambda v: "true" if v else "false"
    if kind in "US":
        return lambda v: v.decode() if isinstance(v, bytes) else str(v)
    raise TypeError(f"unsupported column dtype {arr.dtype}")


def table_csv(table: Mapping[str, Any]) -> bytes:
    """A table (``{column: 1-D array}``, equal lengths) as CSV bytes, deterministically.

    Floats use the shortest representation that reads back exactly (``repr``), so the text is
    a pure function of the values; booleans are ``true``/``false``; ``\\n`` line ends.
    """
    if not table:
        raise ValueError("a table needs at least one column")
    cols = {}
    for name, col in table.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"column names must be non-empty strings, got {name!r}")
        arr = np.asarray(col)
        if arr.ndim != 1:
            raise ValueError(f"column {name!r} must be 1-D, got shape {arr.shape}")
        cols[name] = arr
    lengths = {len(a) for a in cols.values()}
    if len(lengths) != 1:
        raise ValueError(f"columns have different lengths: "
                         f"{ {k: len(a) for k, a in cols.items()} }")
    fmts = [_cell_formatter(a) for a in cols.values()]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(list(cols))
    for row in zip(*cols.values()):
        writer.writerow([f(v) for f, v in zip(fmts, row)])
    return buf.getvalue().encode()


# -- provenance ---------------------------------------------------------------------------------

def _versions() -> dict[str, str | None]:
    import matplotlib

    import ecosim

    try:
        import ml_dtypes
        mld = ml_dtypes.__version__
    except ImportError:  # pragma: no cover - a runtime dependency
        mld = None
    return {"ecosim": ecosim.__version__, "numpy": np.__version__,
            "matplotlib": matplotlib.__version__, "ml_dtypes": mld}


# -- build --------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class FigureReport:
    name: str
    files: tuple[Path, ...]
    seconds: float
    changed: tuple[Path, ...]  # files whose bytes differ from what was there


@dataclasses.dataclass(frozen=True)
class BuildReport:
    runs: dict[str, _exp.Run]
    figures: tuple[FigureReport, ...]
    experiment_s: float  # wall time of running (or loading) the experiments
    seconds: float       # wall time of the whole build

    @property
    def computed(self) -> int:
        return sum(r.stats.computed for r in self.runs.values())

    @property
    def cached(self) -> int:
        return sum(r.stats.cached for r in self.runs.values())


def _resolve(names: Sequence[str] | None) -> list[FigureSpec]:
    if names is None:
        return _REGISTRY.values()
    specs = []
    for n in names:
        spec = get(n)
        if spec not in specs:
            specs.append(spec)
    return specs


def build(names: Sequence[str] | None = None, *, out: str | os.PathLike = "figures",
          smoke: bool = False, cache: _exp.Cache | str | os.PathLike | None = None,
          executor: Executor | None = None, progress: bool | None = False,
          configs: Mapping[str, _exp.Config] | None = None) -> BuildReport:
    """Build figures (all registered ones by default) into ``out``.

    Args:
        names: figure names, or None for all.
        out: output directory (created).
        smoke: shrink every experiment (:meth:`~ecosim.experiments.Config.smoke`).
        cache: result cache (a :class:`~ecosim.experiments.Cache` or directory).
        executor: runs experiment units (None: in-process).
        progress: tqdm bars per experiment (None: on a terminal only).
        configs: explicit configs for some experiments (default: each experiment's default,
            or its smoke variant).
    """
    t0 = time.perf_counter()
    specs = _resolve(names)
    out = Path(out)
    needed: list[str] = []
    for spec in specs:
        needed += [e for e in spec.experiments if e not in needed]
    configs = dict(configs or {})
    jobs = [(e, configs.get(e) or _exp.get(e).default_config(smoke=smoke)) for e in needed]
    runs = {r.name: r for r in _exp.run_many(jobs, cache=cache, executor=executor,
                                             progress=progress)}
    t_exp = time.perf_counter() - t0
    reports = [_build_one(spec, runs, out, smoke) for spec in specs]
    return BuildReport(runs=runs, figures=tuple(reports), experiment_s=t_exp,
                       seconds=time.perf_counter() - t0)


def committed_provenance(sidecar: Mapping, runs: Mapping[str, _exp.Run]) -> dict:
    """The rebuild-stable part of a figure's sidecar (``NAME.provenance.json``, see above)."""
    return {
        "figure": sidecar["figure"],
        "smoke": sidecar["smoke"],
        "versions": sidecar["versions"],
        "experiments": {
            e: {"version": side["version"], "digest": side["digest"],
                "config": side["config"], "code": side["code"],
                "computed_by_source_sha256": sorted({p.get("source_sha256") or ""
                                                     for p in runs[e].provenance}),
                "computed_from_dirty_checkout": any(p.get("git_dirty")
                                                    for p in runs[e].provenance)}
            for e, side in sidecar["experiments"].items()},
        "mixed_provenance": sidecar["mixed_provenance"],
    }


def _build_one(spec: FigureSpec, runs: Mapping[str, _exp.Run], out: Path,
               smoke: bool) -> FigureReport:
    t0 = time.perf_counter()
    blobs: dict[str, bytes] = {}
    with style.context():
        result = spec.fn(**{e: runs[e] for e in spec.experiments})
        if not (isinstance(result, tuple) and len(result) in (2, 3)):
            raise TypeError(f"figure {spec.name!r} must return (Figure, tables[, markdown])")
        fig, tables = result[:2]
        if len(result) == 3:  # a generated markdown table (the README quotes it)
            if not isinstance(result[2], str):
                raise TypeError(f"figure {spec.name!r}: markdown must be a str")
            blobs[f"{spec.name}.md"] = (result[2].rstrip() + "\n").encode()
        dpi = style.SMOKE_DPI if smoke else style.DPI
        for ext, kwargs in (("png", {"dpi": dpi, "metadata": {"Software": None}}),
                            ("pdf", {"metadata": {"CreationDate": None}})):
            buf = io.BytesIO()
            fig.savefig(buf, format=ext, **kwargs)
            blobs[f"{spec.name}.{ext}"] = buf.getvalue()
    if not isinstance(tables, Mapping) or not tables:
        raise TypeError(f"figure {spec.name!r} must return at least one table of its data")
    for tname, table in tables.items():
        if not isinstance(tname, str) or not _NAME.match(tname):
            raise ValueError(f"figure {spec.name!r}: table name {tname!r} must match "
                             f"{_NAME.pattern}")
        try:
            blobs[f"{spec.name}.{tname}.csv"] = table_csv(table)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"figure {spec.name!r}, table {tname!r}: {exc}") from None
    rev, dirty = git_revision()
    sidecar = {
        "figure": spec.name,
        "caption": spec.caption,
        "smoke": bool(smoke),
        "versions": _versions(),
        "ecosim_version": _versions()["ecosim"],
        "git_revision": rev,
        "git_dirty": dirty,
        "experiments": {
            e: {"version": runs[e].experiment.version,
                "digest": runs[e].experiment.digest(runs[e].config),
                "units": runs[e].stats.units,
                "config": runs[e].config.to_dict(),
                "code": runs[e].experiment.code(),
                "computed_by": list(runs[e].provenance)}
            for e in spec.experiments},
        "mixed_provenance": any(runs[e].mixed_provenance for e in spec.experiments),
        "files": sorted(blobs) + [f"{spec.name}.json", f"{spec.name}.provenance.json"],
    }
    blobs[f"{spec.name}.json"] = (json.dumps(sidecar, indent=2, sort_keys=True) + "\n").encode()
    blobs[f"{spec.name}.provenance.json"] = (json.dumps(
        committed_provenance(sidecar, {e: runs[e] for e in spec.experiments}), indent=2,
        sort_keys=True) + "\n").encode()
    written, changed = [], []
    for fname, data in blobs.items():
        path = out / fname
        if atomic_write(path, data):
            changed.append(path)
        written.append(path)
    return FigureReport(name=spec.name, files=tuple(written),
                        seconds=time.perf_counter() - t0, changed=tuple(changed))
