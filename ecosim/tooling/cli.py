"""The ``ecosim`` command: ``figures``, ``list``, ``run``, ``cache``, ``readme``.

    ecosim figures [--smoke] [--only NAME ...] [--out DIR] [--executor WHERE] [--cache DIR]
    ecosim list
    ecosim run EXPERIMENT [--set key=value ...] [--smoke] [--executor WHERE] [--cache DIR]
               [--save F]
    ecosim cache verify|clean [--cache DIR] [--stale]

``--executor`` runs the experiment units ``inline`` (in-process, the default), on ``local:N``
worker processes (``--jobs N`` is the same), on a Dask cluster whose scheduler listens at
``dask://HOST:PORT`` (the ``cluster`` extra; workers need ecosim at this revision, no shared
file system: results come back here and this process writes the cache), or on ``dask:local:N``,
a Dask cluster of N processes started for the run. The same cache keys give the same bytes
whichever executor computed them.

Also ``python -m ecosim ...``. Exit status: 0 success, 2 usage errors (unknown names, bad
overrides, bad options, an executor that cannot start), 1 ``cache verify`` found entries
that cannot be served, 130 interrupted (finished units stay cached: rerun to resume).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

__all__ = ["main", "build_parser"]


class _UsageError(Exception):
    """A user mistake: reported as ``ecosim: error: ...`` with exit status 2."""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ecosim",
        description="ecosim: quantized training without master weights (ECO), simulated. "
                    "Regenerate the figures, list what exists, run one experiment.")
    from .. import __version__

    parser.add_argument("--version", action="version", version=f"ecosim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--smoke", action="store_true",
                       help="shrunken experiments (seconds, for tests and checks)")
        p.add_argument("--executor", metavar="WHERE", default=None,
                       help="where experiment units run: inline (default), local:N (N worker "
                            "processes), dask://HOST:PORT (a Dask scheduler; needs the cluster "
                            "extra and ecosim at this revision on the workers) or "
                            "dask:local:N (a Dask cluster of N processes on this machine)")
        p.add_argument("--jobs", type=_positive_int, default=None, metavar="N",
                       help="the same as --executor local:N (default 1: in-process)")
        p.add_argument("--cache", metavar="DIR", default=None,
                       help="result cache directory (default $ECOSIM_CACHE or .ecosim_cache)")
        p.add_argument("--no-progress", action="store_true", help="no progress bars")

    p = sub.add_parser("figures", help="build every registered figure (PNG, PDF, CSV, JSON)",
                       description="Build figures: PNG and PDF, the data as CSV, and a JSON "
                                   "sidecar with the resolved configs and versions.")
    p.add_argument("--only", nargs="+", metavar="NAME", default=None,
                   help="build only these figures")
    p.add_argument("--out", metavar="DIR", default=None,
                   help="output directory (default: figures; --smoke needs one: figures/ "
                        "holds the committed figures)")
    p.add_argument("--no-seed", action="store_true",
                   help="train the language-model units the shipped seed cache holds "
                        "instead of copying them from it (see ecosim.experiments.seed)")
    p.add_argument("--set", dest="overrides", action="extend", nargs="+", default=[],
                   metavar="EXP.KEY=VALUE",
                   help="override an experiment's config field, e.g. "
                        "lm.results_file=runs.jsonl (plots a results file of "
                        "python -m ecosim.torch.lm)")
    common(p)
    p.set_defaults(func=_cmd_figures)

    p = sub.add_parser("list", help="list figures and experiments (NAME: one experiment's "
                                    "config fields)")
    p.add_argument("name", nargs="?", metavar="NAME",
                   help="an experiment: list its config fields, defaults and smoke values")
    p.add_argument("--fields", action="store_true",
                   help="list every experiment's config fields too")
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser("run", help="run one experiment (cached) and summarise its results",
                       description="Run one experiment with type-checked overrides.")
    # optional for argparse: `run --set k=v NAME` puts NAME among the overrides (see _cmd_run)
    p.add_argument("experiment", metavar="EXPERIMENT", nargs="?")
    p.add_argument("--set", dest="overrides", action="extend", nargs="+", default=[],
                   metavar="KEY=VALUE",
                   help="override config fields (tuples comma-separated: lrs=0.1,0.01)")
    p.add_argument("--save", metavar="FILE.npz", default=None,
                   help="also write the results to this .npz file")
    common(p)
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser("cache", help="verify a result cache, or clean it",
                       description="verify: check every entry as it would be checked before "
                                   "being served (exit 1 if any cannot be). clean: delete "
                                   "those entries, and with --stale the ones other code "
                                   "computed.")
    p.add_argument("action", choices=("verify", "clean"))
    p.add_argument("--cache", metavar="DIR", default=None,
                   help="result cache directory (default $ECOSIM_CACHE or .ecosim_cache)")
    p.add_argument("--stale", action="store_true",
                   help="also report (verify) or delete (clean) entries computed by other "
                        "code or packages than this ecosim's: never served again")
    p.set_defaults(func=_cmd_cache)

    p = sub.add_parser("readme", help="refresh the README's generated blocks (tables, gallery)",
                       description="Rewrite the <!-- generated: ... --> blocks of README.md "
                                   "from the code and from the tables `ecosim figures` wrote.")
    p.add_argument("--readme", default="README.md", metavar="FILE")
    p.add_argument("--figures", default="figures", metavar="DIR",
                   help="where `ecosim figures` wrote its markdown tables")
    p.add_argument("--check", action="store_true",
                   help="exit 1 if a block is out of date, without writing")
    p.set_defaults(func=_cmd_readme)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``ecosim`` and ``python -m ecosim``; returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2), already printed
        return int(exc.code or 0)
    try:
        return int(args.func(args) or 0)
    except _UsageError as exc:
        print(f"ecosim {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted: finished units are cached; rerun the same command to resume",
              file=sys.stderr)
        return 130


# -- commands -----------------------------------------------------------------------------------

def _executor_spec(args):
    """The executor spec that ``--executor`` / ``--jobs`` give, checked (before any work)."""
    from ..experiments.executors import parse_executor

    if args.executor is not None and args.jobs is not None:
        raise _UsageError("give --executor or --jobs, not both (--jobs N is --executor "
                          "local:N)")
    spec = args.executor if args.executor is not None else (args.jobs or 1)
    try:
        parse_executor(spec)
    except ValueError as exc:
        raise _UsageError(f"--executor: {exc}") from None
    return spec


def _executor(spec):
    """The executor of a checked spec, and a label for messages."""
    from ..experiments.executors import DaskExecutor, make_executor, parse_executor

    try:
        executor = make_executor(spec)
    except (ImportError, OSError) as exc:
        raise _UsageError(f"--executor: {exc}") from None
    kind, arg = parse_executor(spec)
    label = (f"dask://{str(arg).removeprefix('tcp://')}" if kind == "dask" else
             f"dask:local:{arg}" if kind == "dask-local" else f"local:{arg}" if kind == "local"
             else "inline")
    if isinstance(executor, DaskExecutor):
        n = executor.workers
        label += (f" ({n} worker(s), {executor.max_workers} thread(s))" if n
                  else " (no worker yet: units wait for one)")
    return executor, label


def _progress(args) -> bool | None:
    return False if args.no_progress else None  # None: bars on a terminal only


def _cmd_figures(args) -> int:
    spec = _executor_spec(args)
    import matplotlib

    matplotlib.use("Agg")
    from .. import experiments as E
    from .. import figures as F

    registered = F.figures()
    if args.only:
        unknown = [n for n in args.only if n not in registered]
        if unknown:
            from ..registry import did_you_mean

            hint = did_you_mean(unknown[0], registered)
            raise _UsageError(f"unknown figure(s) {', '.join(map(repr, unknown))}{hint}; "
                              f"registered: {', '.join(registered)}")
    names = args.only or list(registered)
    configs = _figure_configs(args, {e for n in names for e in registered[n].experiments})
    skipped = {}
    for n in names:  # figures whose experiments need a package that is not installed
        miss = sorted({m for e in registered[n].experiments if e not in configs
                       for m in E.get(e).missing()})
        if miss:
            skipped[n] = miss
    if skipped and args.only:
        n, miss = next(iter(skipped.items()))
        raise _UsageError(f"figure {n!r} needs {', '.join(miss)}: install it (`make torch` "
                          "for torch) or pass a results file with --set")
    for n, miss in skipped.items():
        print(f"ecosim figures: skipping {n!r}: needs {', '.join(miss)} (`make torch`)",
              file=sys.stderr)
    names = [n for n in names if n not in skipped]
    if args.out is None:
        if args.smoke:
            raise _UsageError("--smoke writes shrunken figures: give --out DIR (the default, "
                              "figures/, holds the committed ones)")
        args.out = "figures"
    _check_dir(args.out, "--out")
    from ..experiments import seed as _seed

    use_seed = not args.no_seed and not args.smoke and _seed.SEED_DIR.is_dir()
    cache = _open_cache(args, {e for n in names for e in registered[n].experiments},
                        seed=_seed.SEED_DIR if use_seed else None)
    n_exp = len({e for n in names for e in registered[n].experiments})
    executor, label = _executor(spec)
    print(f"ecosim figures: {len(names)} figure(s) from {n_exp} experiment(s)"
          f"{' (smoke)' if args.smoke else ''} -> {args.out}/  [executor={label}, "
          f"cache={cache.root}]", flush=True)
    try:
        report = F.build(names, out=args.out, smoke=args.smoke, cache=cache,
                         executor=executor, progress=_progress(args), configs=configs)
    except BaseException:
        executor.shutdown(wait=False, cancel_futures=True)
        raise
    executor.shutdown()

    _print_time_table(report.runs)
    print(f"{'figure':<24} {'files':<44} {'time':>8}")
    n_files = n_changed = 0
    for fr in report.figures:
        n_csv = sum(p.suffix == ".csv" for p in fr.files)
        files = f"{Path(args.out) / fr.name}.{{png,pdf,json}} + {n_csv} csv"
        print(f"{fr.name:<24} {files:<44} {fr.seconds:>7.2f}s")
        n_files += len(fr.files)
        n_changed += len(fr.changed)
    fig_s = sum(fr.seconds for fr in report.figures)
    mixed = [name for name, run in report.runs.items() if run.mixed_provenance]
    if mixed:
        print(f"note: cached results of {', '.join(mixed)} come from several revisions or a "
              "dirty checkout (see each figure's .json, 'computed_by')")
    print(f"done in {report.seconds:.1f} s (experiments {report.experiment_s:.1f} s, figures "
          f"{fig_s:.1f} s): {report.computed} unit(s) computed, {report.cached} cached, "
          f"{sum(r.stats.shared for r in report.runs.values())} shared; "
          f"{n_files} files, {n_changed} changed")
    if cache.seeded:
        print(f"{cache.seeded} unit(s) copied from the shipped seed cache ({_seed.SEED_DIR}): "
              "trained by this code on these packages and kernels; --no-seed trains them")
    return 0


def _print_time_table(runs: dict) -> None:
    """What each experiment cost: units (cached, computed, shared: computed in this build by
    another row's unit, which counts it and its time: the first experiment that asked for the
    same computation, or one whose unit provides it, before or after this row), the CPU
    seconds of the computed units (worker processes, all threads), their summed wall seconds,
    and the wall seconds from the first unit's submission to the last one's completion; then
    the totals (a shared unit is computed in one row and shared in the others)."""
    print(f"{'experiment':<24} {'units':>5} {'cached':>6} {'computed':>8} {'shared':>6} "
          f"{'cpu s':>9} {'unit s':>9} {'wall s':>9}")
    tot = [0, 0, 0, 0, 0.0, 0.0]
    for name, run in runs.items():
        s = run.stats
        print(f"{name:<24} {s.units:>5} {s.cached:>6} {s.computed:>8} {s.shared:>6} "
              f"{s.cpu_s:>9.2f} {s.compute_s:>9.2f} {s.wall_s:>9.2f}")
        for i, v in enumerate((s.units, s.cached, s.computed, s.shared, s.cpu_s, s.compute_s)):
            tot[i] += v
    print(f"{'total':<24} {tot[0]:>5} {tot[1]:>6} {tot[2]:>8} {tot[3]:>6} {tot[4]:>9.2f} "
          f"{tot[5]:>9.2f}")


def _figure_configs(args, needed: set[str]) -> dict:
    """``--set EXP.KEY=VALUE`` overrides as configs of the experiments they name."""
    from .. import experiments as E

    grouped: dict[str, list[str]] = {}
    for item in args.overrides:
        exp, dot, rest = str(item).partition(".")
        if not dot or "=" not in rest:
            raise _UsageError(f"--set {item!r}: expected EXPERIMENT.KEY=VALUE")
        if exp not in needed:
            raise _UsageError(f"--set {item!r}: experiment {exp!r} is not read by the "
                              f"figures being built ({', '.join(sorted(needed))})")
        grouped.setdefault(exp, []).append(rest)
    configs = {}
    for exp, items in grouped.items():
        try:
            configs[exp] = E.get(exp).default_config(smoke=args.smoke).override(items)
        except E.ConfigError as exc:
            raise _UsageError(str(exc)) from None
    return configs


def _check_dir(path, what: str) -> None:
    """A directory the command will write into: absent (it is made) or a writable folder."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise _UsageError(f"{what} {path}: is a file; expected a directory")
    if p.is_dir() and not os.access(p, os.W_OK | os.X_OK):
        raise _UsageError(f"{what} {path}: directory is not writable")


def _open_cache(args, experiments: set[str], seed=None):
    """The cache the command writes, its folder (and those of ``experiments`` in it) checked
    before any work."""
    from .. import experiments as E
    from ..experiments.store import CACHE_ENV

    what = "--cache" if args.cache is not None else (
        f"${CACHE_ENV}" if os.environ.get(CACHE_ENV) else "the cache")
    try:
        cache = E.Cache(args.cache, seed=seed)
    except ValueError as exc:
        raise _UsageError(f"{what}: {exc}") from None
    _check_dir(cache.root, what)
    for name in sorted(experiments):
        _check_dir(cache.root / name, f"{what} (folder of {name!r})")
    return cache


def _cmd_cache(args) -> int:
    from .. import experiments as E

    what = "--cache" if args.cache is not None else "the cache"
    try:
        cache = E.Cache(args.cache)
    except ValueError as exc:
        raise _UsageError(f"{what}: {exc}") from None
    if cache.root.exists() and not cache.root.is_dir():
        raise _UsageError(f"{what} {cache.root}: is a file; expected a directory")
    problems = cache.verify(stale=args.stale)
    if args.action == "verify":
        for path, problem in problems:
            print(f"{path} {problem}")
        n = sum(1 for f in cache.root.glob("*/*.npz")) if cache.root.is_dir() else 0
        print(f"{cache.root}: {n} entries, {len(problems)} problem(s)")
        return 1 if problems else 0
    freed = cache.clean(problems)
    print(f"{cache.root}: removed {len(problems)} entr{'y' if len(problems) == 1 else 'ies'}"
          f" ({freed / 1e6:.1f} MB)")
    return 0


def _cmd_list(args) -> int:
    from .. import experiments as E
    from .. import figures as F

    def fields(exp) -> None:
        smoke = dict(exp.config.SMOKE)
        for field, tp, default in exp.config.field_help():
            note = f"   (smoke: {smoke[field]!r})" if field in smoke else ""
            print(f"      {field} : {tp} = {default!r}{note}")

    if args.name is not None:
        try:
            exp = E.get(args.name)
        except KeyError as exc:
            raise _UsageError(exc.args[0]) from None
        print(f"{exp.name} (version {exp.version}): {exp.description}")
        print("  config fields (ecosim run NAME --set field=value):")
        fields(exp)
        return 0
    print("figures (ecosim figures --only NAME):")
    for name, spec in F.figures().items():
        print(f"  {name:<20} {_first_sentence(spec.caption)}")
    print("\nexperiments (ecosim run NAME; ecosim list NAME: its config fields):")
    for name, exp in E.experiments().items():
        print(f"  {name:<20} {_first_sentence(exp.description)}")
        if args.fields:
            fields(exp)
    return 0


def _first_sentence(text: str, width: int = 76) -> str:
    """The first sentence of ``text`` on one line, cut at ``width`` characters."""
    first = " ".join(text.split()).split(". ")[0].rstrip(".")
    return first if len(first) <= width else first[:width - 3].rstrip() + "..."


def _cmd_run(args) -> int:
    spec = _executor_spec(args)
    import numpy as np

    from .. import experiments as E

    names = [o for o in args.overrides if "=" not in o]
    if args.experiment is None:  # `--set` took everything after it: the name is among them
        if len(names) != 1:
            raise _UsageError("name one EXPERIMENT (ecosim run EXPERIMENT --set key=value; "
                              "`ecosim list` shows them)")
        args.experiment = names[0]
        args.overrides = [o for o in args.overrides if o != names[0]]
    try:
        exp = E.get(args.experiment)
    except KeyError as exc:
        raise _UsageError(exc.args[0]) from None
    try:
        cfg = exp.default_config(smoke=args.smoke).override(args.overrides)
    except E.ConfigError as exc:
        raise _UsageError(str(exc)) from None
    cache = _open_cache(args, {exp.name})
    if args.save:
        save = Path(args.save)
        if save.is_dir():
            raise _UsageError(f"--save {args.save}: is a directory; give a file name ending "
                              "in .npz")
        if not save.parent.is_dir():
            raise _UsageError(f"--save {args.save}: directory {save.parent} does not exist")
    t0 = time.perf_counter()
    executor, label = _executor(spec)
    print(f"ecosim run {exp.name} (version {exp.version}) [executor={label}]: {cfg!r}",
          flush=True)
    try:
        run = E.run(exp, cfg, cache=cache, executor=executor, progress=_progress(args))
    except BaseException:
        executor.shutdown(wait=False, cancel_futures=True)
        raise
    executor.shutdown()
    s = run.stats
    print(f"{s.units} unit(s): {s.cached} cached, {s.computed} computed "
          f"(compute {s.compute_s:.2f} s, cpu {s.cpu_s:.2f} s, total "
          f"{time.perf_counter() - t0:.2f} s); "
          f"cache {cache.root / exp.name}"
          + (f" (shared units: {cache.root}/shared.*)" if exp.share is not None else ""))
    for key, arr in run.results.items():
        shape = "x".join(map(str, arr.shape)) or "scalar"
        print(f"  {key:<22} {str(arr.dtype):<8} {shape:<10} {_summary(arr)}")
    if args.save:
        path = E.save_results(args.save, run.results)
        print(f"results written to {path}")
    return 0


def _summary(arr, width: int = 60) -> str:
    """A one-line view of a result array: its values when few, else its range and mean."""
    import numpy as np

    if arr.ndim == 0:
        text = repr(arr.item())
    elif arr.size <= 6 and arr.ndim == 1:
        with np.printoptions(precision=6):
            text = " ".join(np.array2string(arr, separator=", ").split())
    elif arr.dtype.kind in "fiu":
        x = arr.astype(np.float64)
        ok = np.isfinite(x)
        n_bad = int(x.size - ok.sum())
        if ok.any():
            text = (f"min {x[ok].min():.6g}, mean {x[ok].mean():.6g}, max {x[ok].max():.6g}"
                    + (f", {n_bad} non-finite" if n_bad else ""))
        else:
            text = "all non-finite" if x.size else "empty"
    elif arr.dtype.kind == "b":
        text = f"{int(arr.sum())} of {arr.size} true"
    else:
        values = list(dict.fromkeys(map(str, arr.reshape(-1))))
        text = ", ".join(values[:4]) + (f", ... ({len(values)} distinct)" if len(values) > 4
                                         else "")
    return text if len(text) <= width else text[:width - 3] + "..."


def _cmd_readme(args) -> int:
    from .readme import refresh

    try:
        changed = refresh(args.readme, args.figures, check=args.check)
    except (OSError, ValueError) as exc:
        raise _UsageError(str(exc)) from exc
    verb = "out of date" if args.check else "refreshed"
    print(f"{args.readme}: {len(changed)} block(s) {verb}" + (f": {', '.join(changed)}"
                                                               if changed else ""))
    return 1 if (args.check and changed) else 0
