"""Experiments: frozen configs, a registry, cached and resumable runs (see :mod:`.base`).

Importing this package registers every experiment of ecosim (one module per topic). Add one
with :func:`experiment`; run it with :func:`run` or ``ecosim run NAME --set key=value``.
"""
from .base import (Cache, Config, ConfigError, Experiment, InlineExecutor, Results, Run, RunStats,
                   experiment, experiments, get, load_results, make_executor, run, run_many,
                   save_results, stack_units)

# the registered experiments (importing a module registers what it defines)
from . import floor, grids  # noqa: F401  isort: skip
from . import floor_additive, beta_factor, naive_decay  # noqa: F401  isort: skip
from . import rtn_stall, error_similarity  # noqa: F401  isort: skip
from . import mlp_methods, mlp_states  # noqa: F401  isort: skip
from . import mantissa_sweep, compressed_states, relative_error  # noqa: F401  isort: skip
from . import lm  # noqa: F401  isort: skip
from . import lm_moe  # noqa: F401  isort: skip
from . import eco_adam  # noqa: F401  isort: skip
from . import precision_horizon, horizon_theorem  # noqa: F401  isort: skip
from . import dqt  # noqa: F401  isort: skip
from . import dqt_lm  # noqa: F401  isort: skip
from . import sr_bits  # noqa: F401  isort: skip
from . import lm_finetune  # noqa: F401  isort: skip
from . import lm_eco_adam  # noqa: F401  isort: skip
from . import lm_switches  # noqa: F401  isort: skip
from . import lm_budget  # noqa: F401  isort: skip

__all__ = ["Cache", "Config", "ConfigError", "Experiment", "InlineExecutor", "Results", "Run",
           "RunStats", "experiment", "experiments", "get", "load_results", "make_executor", "run",
           "run_many", "save_results", "stack_units"]
