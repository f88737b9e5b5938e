"""Figures: ``@figure``-registered plotting functions, one style, a reproducible build.

Importing this package registers every figure of ecosim. Build them with :func:`build` or
``ecosim figures``; see :mod:`.base` for what a build writes.
"""
from . import style
from .base import (
    BuildReport,
    FigureReport,
    FigureSpec,
    build,
    figure,
    figures,
    get,
    git_revision,
    table_csv,
)

# the registered figures, in gallery order (importing a module registers what it defines)
from . import grids  # noqa: F401  isort: skip
from . import noise_floor, beta_factor, naive_decay  # noqa: F401  isort: skip
from . import rtn_stall, error_similarity  # noqa: F401  isort: skip
from . import mlp_methods, mlp_states  # noqa: F401  isort: skip
from . import mantissa_sweep, compressed_states, relative_error  # noqa: F401  isort: skip
from . import lm  # noqa: F401  isort: skip  (needs the torch backend or a results file)
from . import lm_moe  # noqa: F401  isort: skip
from . import eco_adam  # noqa: F401  isort: skip
from . import precision_horizon, horizon_theorem  # noqa: F401  isort: skip
from . import dqt  # noqa: F401  isort: skip
from . import sr_bits  # noqa: F401  isort: skip
from . import lm_finetune  # noqa: F401  isort: skip  (needs the torch backend)
from . import lm_eco_adam  # noqa: F401  isort: skip  (needs the torch backend)
from . import lm_switches  # noqa: F401  isort: skip
from . import lm_scaling  # noqa: F401  isort: skip
from . import claims  # noqa: F401  isort: skip  (last: it summarises the others)

__all__ = ["BuildReport", "FigureReport", "FigureSpec", "build", "figure", "figures", "get",
           "git_revision", "style", "table_csv"]
