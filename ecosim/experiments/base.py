"""Experiments: frozen configs, a registry, an on-disk result cache and a resumable runner.

This module gathers the public names of the parts, each in its own module:

* :mod:`.config`: the :class:`Config` base of experiment configs (frozen, keyword-only dataclasses
  whose defaults are the full-size run; field types checked and ``int`` widened to ``float``
  when built; ``--set key=value`` parsing by :meth:`Config.override`), :class:`ConfigError`, and
  the declarative range checks of :attr:`Config.CHECKS` (:func:`interval`, :func:`at_least`,
  :func:`one_of`, :data:`positive`, :data:`non_negative`, :data:`rng_key`, :data:`finite`, :data:`nonempty`,
  :data:`distinct`);
* :mod:`.registry`: the :class:`Experiment` type (config, a pure deterministic compute function
  ``config -> results``, optional independent units and their ``combine``), its cache key
  (:meth:`Experiment.digest`, which covers the code through
  :func:`~ecosim.experiments.provenance.code_fingerprint`) and the registry
  (:func:`experiment`, :func:`experiments`, :func:`get`);
* :mod:`.store`: results validation, byte-deterministic ``.npz`` files (:func:`save_results`,
  :func:`load_results`), :func:`atomic_write`, and the on-disk :class:`Cache`;
* :mod:`.runner`: executors (:class:`InlineExecutor`, :func:`make_executor`), :class:`Run`,
  :class:`RunStats`, :func:`run`, :func:`run_many` (cached and resumed unit by unit) and
  :func:`stack_units`.
"""
from __future__ import annotations

# dataclasses and ClassVar: the names Config's docstring example uses, for running it here
import dataclasses  # noqa: F401
from typing import ClassVar  # noqa: F401

from .config import (Check, Config, ConfigError, at_least, distinct, finite, interval,
                     non_negative, nonempty, one_of, positive, rng_key)
from .registry import CACHE_FORMAT, Experiment, experiment, experiments, get
from .executors import InlineExecutor, make_executor
from .runner import Run, RunStats, run, run_many, stack_units
from .store import (CACHE_ENV, DEFAULT_CACHE, Cache, Results, as_results, atomic_write,
                    load_results, results_bytes, save_results)

__all__ = [
    "CACHE_ENV",
    "CACHE_FORMAT",
    "DEFAULT_CACHE",
    "Cache",
    "Check",
    "Config",
    "ConfigError",
    "Experiment",
    "InlineExecutor",
    "Results",
    "Run",
    "RunStats",
    "as_results",
    "at_least",
    "atomic_write",
    "distinct",
    "experiment",
    "experiments",
    "finite",
    "get",
    "interval",
    "load_results",
    "make_executor",
    "non_negative",
    "nonempty",
    "one_of",
    "positive",
    "rng_key",
    "results_bytes",
    "run",
    "run_many",
    "save_results",
    "stack_units",
]
