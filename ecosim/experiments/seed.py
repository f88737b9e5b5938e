"""The seed cache shipped with ecosim: the costliest experiments' units, computed once.

``make figures`` trains no language model (and runs no other experiment of :data:`SEEDED`)
when this directory holds an entry for every unit it asks for: :class:`~.store.Cache` (with
``seed=SEED_DIR``) copies a seed entry into the working cache and serves it, with the checks
of an ordinary entry (the key recorded beside it must be the key asked for, the ``.npz`` must
hold the bytes and arrays its record names). The key holds the SHA-256 of the code of every
ecosim source file the experiment imports (docstrings and comments aside), the package
versions, the Python version and the platform's BLAS and torch kernels, so a seed entry is
served only to the very code, environment and kernels that computed it; any other asks for a
key the seed does not hold, and the unit is trained. ``ecosim figures --no-seed`` trains
every unit.

:func:`make_seed` rebuilds the directory (``make seed``): it trains the default configuration
of each experiment in :data:`SEEDED` into an empty cache and replaces :data:`SEED_DIR` by it.
``tests/test_seed_cache.py`` fails when an edit leaves the seed without an entry that ``make
figures`` will ask for, and a slow test retrains one unit of each experiment and compares bytes.

This module is read by the command line only; the experiments do not import it, so editing
:data:`SEEDED` does not change their keys.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from . import registry
from .executors import make_executor
from .runner import run_many
from .shared import SharedUnit
from .store import Cache

__all__ = ["SEEDED", "SEED_DIR", "make_seed", "seed_entries"]

SEED_DIR = Path(__file__).resolve().parent.parent / "data" / "seed_cache"
"""Where the shipped seed lives (package data)."""

SEEDED = ("lm", "dqt_lm", "lm_moe", "lm_eco_adam", "lm_finetune", "horizon_theorem")
"""The experiments whose default units the seed holds: those that train language models, and
``horizon_theorem`` (every mantissa width at seven horizons: the costliest NumPy experiment),
so that ``make figures`` fits its time on two cores."""


def seed_entries(names=SEEDED) -> list[tuple]:
    """The cache entries (``(experiment, config, unit)`` or ``(SharedUnit, None, None)``) of
    the default configuration of each of ``names``: what ``make figures`` asks the cache for."""
    out = []
    for name in names:
        exp = registry.get(name)
        cfg = exp.default_config()
        for u in exp.unit_list(cfg):
            s = exp.shared_unit(cfg, u)
            out.append((exp, cfg, u) if s is None else (s, None, None))
    return list({_entry_id(e): e for e in out}.values())


def _entry_id(entry) -> tuple:
    what, cfg, unit = entry
    if isinstance(what, SharedUnit):
        return ("shared", what.name, what.digest())
    return (what.name, what.digest(cfg, unit))


def make_seed(out: str | Path = SEED_DIR, *, jobs: int = 2, names=SEEDED,
              progress: bool | None = None) -> int:
    """Train the default units of ``names`` into an empty cache and make ``out`` a copy of it.

    Returns the number of entries written. ``out`` is replaced only once every unit has
    trained, so an interrupted run leaves the old seed as it was."""
    out = Path(out)
    # trained outside the package: a folder under ecosim/ would mark the checkout dirty in
    # the entries' provenance
    with tempfile.TemporaryDirectory(prefix="ecosim-seed.") as tmp:
        cache = Cache(Path(tmp) / "cache")
        executor = make_executor(jobs)
        try:
            run_many([(n, registry.get(n).default_config()) for n in names], cache=cache,
                     executor=executor, progress=progress)
        finally:
            executor.shutdown()
        n = sum(1 for _ in cache.root.rglob("*.npz"))
        staging = out.with_name(f".{out.name}.new")
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copytree(cache.root, staging)
        shutil.rmtree(out, ignore_errors=True)
        staging.rename(out)
    return n

def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m ecosim.experiments.seed",
                                     description="Retrain the shipped seed cache.")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--out", default=str(SEED_DIR), help=f"directory (default {SEED_DIR})")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be a positive int, got {args.jobs}")
    n = make_seed(args.out, jobs=args.jobs)
    print(f"{n} entries in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
