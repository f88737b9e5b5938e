"""The ECO paper's Table 1 methods on a small MLP: training curves and a width sweep (figures 7-9).

The problem is the teacher-student regression of :class:`~ecosim.problems.MLP`: 8 inputs, two
hidden ReLU layers of width ``w``, 2 outputs, a *linear* teacher with label noise 0.3 (so the
irreducible validation loss is ``2 * 0.3**2 / 2 = 0.09``), 2048 training and 512 validation
examples built once from ``data_key``. Training follows the paper's recipe at small scale:
AdamW with ``b = (0.9, 0.98)``, ``eps = 1e-9``, linear warmup over 10% of the steps from 0.01x
then cosine decay to 0.1x the peak (:func:`ecosim.recipes.schedule`), mini-batches of 8.
The three weight matrices are stored in the weight format; the biases stay in float32 (the
paper quantizes only the linear layers).

The seven methods of the paper's Table 1 (docs/theory.md §7; defined in :mod:`ecosim.recipes`),
as ``(weights, scheme, mode)``:

* ``bf16 / master / rtn``: "BF16 w/ master": an FP32 master copy, the model's weights its
  bfloat16 cast (RTN with scale 1, as in mixed-precision training);
* ``W / master / {rtn, sr}``: "W w/ master + RTN/SR";
* ``W / naive / {rtn, sr}``: "W w/o master", the rounding error dropped;
* ``W / eco / {rtn, sr}``: ECO, the error injected into AdamW's first moment;

with ``W`` the low-precision weight format: ``fp8`` (FP8 E4M3 with one absmax scale per output
row, the paper's pre-training format) or ``int4`` (INT4 with one absmax scale per tensor, the
paper's fine-tuning format).

Units (cached one by one): ``{weights, scheme, mode, width, seed}``. The FP8 runs cover every
width of ``widths`` (the scaling sweep of figure 8); ``curve_formats`` (FP8 and INT4) cover
``curve_width`` (the curves of figure 7). One seed fixes the initial weights, the order of the
mini-batches and the SR draws (:func:`ecosim.train.train`), so that methods are compared on the
same seeds (paired).

Each unit records the validation loss every ``log_every`` updates (and at the start), its final
value, whether the run *diverged* (a non-finite loss or gradient, a validation loss above
``stop_factor`` times its initial value, at which point the run is stopped, or a final
validation loss above the initial one), and the static memory of the optimizer from
:mod:`ecosim.memory`: the formula for the real shapes (:func:`~ecosim.memory.static_bytes`,
codes, scales and the full-precision biases included), the bytes that the arrays of the state
really hold (:func:`~ecosim.memory.measured_bytes`; static memory does not change during
training, so it is read from the initial state, which diverged runs have too), and the
paper's headline per-parameter figure (:func:`~ecosim.memory.bytes_per_param`: every parameter
in the weight format, scales left out: 12 with master weights, 9 for FP8 without).
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
from typing import ClassVar, Literal

import numpy as np

from .. import memory, recipes
from ..core import rng
from ..optim import adamw
from ..problems import MLP
from ..recipes import WEIGHT_FORMATS, method_label, weight_quantizer
from ..train import initial_point, train
from .base import at_least, distinct, experiment, non_negative, nonempty, one_of, positive
from .mlp_recipe import MLPRecipe

__all__ = ["MLPMethodsConfig", "METHODS", "WEIGHT_FORMATS", "MEMORY_BUFFERS", "method_label",
           "weight_quantizer", "make_problem", "run_training", "single_thread_blas"]

#: Table 1's rows, in its order, as (weights, scheme, mode); "W" is the low-precision format
METHODS = tuple((m.weights, m.scheme, m.mode) for m in recipes.TABLE1)
#: the fields of :class:`ecosim.memory.Memory`, the order of the ``mem_*`` result columns
MEMORY_BUFFERS = memory.Memory._fields


def make_problem(cfg, width: int) -> MLP:
    """The teacher-student MLP of a config (fields ``depth``, ``n_train``, ``n_val``,
    ``noise``, ``data_key``) with hidden width ``width``."""
    return MLP((8, *([width] * cfg.depth), 2), n_train=cfg.n_train, n_val=cfg.n_val,
               key=cfg.data_key, noise=cfg.noise, teacher=())


def single_thread_blas():
    """A context limiting BLAS to one thread, where threadpoolctl is installed.

    The MLP's products are tiny (batch 8): a multi-threaded OpenBLAS spends more time
    synchronising than computing (about 8x slower than one thread at width 128 on two cores),
    and with ``--jobs N`` the worker processes would also oversubscribe the cores. Without
    threadpoolctl this is a no-op (same results, only slower).
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - depends on the environment
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def run_training(problem: MLP, opt, steps: int, *, key: int, batch_size: int,
                 log_every: int, stop_factor: float) -> dict:
    """Train once with :func:`ecosim.train.train`; return the curve, the final loss, the
    divergence flag and the memory.

    Returns a dict of NumPy values: ``step`` (updates done at each point of the curve: 0, then
    after every ``log_every``-th update and the last), ``lr`` (the learning rate of that
    update; 0 at the start), ``val_loss`` (of the stored weights; NaN after a stopped run),
    ``final_val_loss`` (NaN when stopped), ``init_val_loss`` (of the stored initial weights),
    ``diverged``, ``stopped_at`` (the updates done at the last point of the curve when the run
    was stopped, by its validation loss exceeding ``stop_factor`` times the initial one or by
    a divergence of :func:`~ecosim.train.train`; else ``steps``), ``n_params``,
    ``mem_formula`` and ``mem_measured`` (total bytes per buffer of :data:`MEMORY_BUFFERS`).
    """
    # the stored initial weights and state train() starts from
    p_init, s_init = initial_point(problem, opt, key)
    shapes = {k: v.shape for k, v in p_init.items()}
    init_val = problem.val_loss(p_init)
    logged = [t for t in range(steps) if t % log_every == 0 or t == steps - 1]
    step = np.array([0] + [t + 1 for t in logged], np.int64)
    lr = np.array([0.0] + [opt.lr_at(t) for t in logged])
    val = np.full(step.size, np.nan)
    val[0] = init_val
    cap = stop_factor * init_val

    def too_high(t, rec):
        return not (math.isfinite(rec["val_loss"]) and rec["val_loss"] <= cap)

    # Overflow on the way to a divergence is an outcome here, recorded, not a warning.
    with np.errstate(over="ignore", invalid="ignore"), single_thread_blas():
        h = train(problem, opt, steps, key=key, batch_size=batch_size, log_every=log_every,
                  stop=too_high)
    done = h["val_loss"].size
    val[1:1 + done] = h["val_loss"]
    stopped = None if h.outcome == "completed" else int(step[done])
    final = h.final_val_loss if stopped is None else math.nan
    diverged = stopped is not None or not (math.isfinite(final) and final <= init_val)
    return {"step": step, "lr": lr, "val_loss": val, "final_val_loss": np.float64(final),
            "init_val_loss": np.float64(init_val), "diverged": np.bool_(diverged),
            "stopped_at": np.int64(steps if stopped is None else stopped),
            "n_params": np.int64(sum(math.prod(s) for s in shapes.values())),
            "mem_formula": np.array(memory.static_bytes(opt, shapes), np.float64),
            "mem_measured": np.array(memory.measured_bytes(opt, p_init, s_init), np.float64)}


@dataclasses.dataclass(frozen=True, kw_only=True)
class MLPMethodsConfig(MLPRecipe):
    """Table 1's seven methods on the teacher-student MLP (see the module docstring)."""

    widths: tuple[int, ...] = (32, 64, 128, 256)   # FP8 scaling sweep (hidden widths)
    scaling_format: Literal["fp8", "int4"] = "fp8"
    curve_width: int = 32                         # width of the curves of every format
    curve_formats: tuple[str, ...] = ("fp8", "int4")
    depth: int = 2                                 # hidden layers
    seeds: int = 8
    lr: float = 3e-3                               # peak of warmup + cosine
    weight_decay: float = 0.0
    log_every: int = 25
    SMOKE: ClassVar[dict] = {**MLPRecipe.SMOKE, "widths": (8, 16), "curve_width": 8,
                             "log_every": 5, "lr": 1e-2}
    CHECKS: ClassVar[dict] = {
        "widths": (nonempty, distinct, at_least(1)), "curve_width": at_least(1),
        "curve_formats": (distinct, one_of(sorted(WEIGHT_FORMATS))), "depth": at_least(1),
        "lr": positive, "weight_decay": non_negative, "log_every": at_least(1)}

    def blocks(self) -> list[tuple[str, int]]:
        """The (low-precision format, width) pairs that are run, in order, without repeats."""
        out = [(self.scaling_format, w) for w in self.widths]
        out += [(f, self.curve_width) for f in self.curve_formats]
        return list(dict.fromkeys(out))


def _units(cfg: MLPMethodsConfig) -> list[dict]:
    units = []
    done_bf16 = set()
    for fmt, width in cfg.blocks():
        for weights, scheme, mode in METHODS:
            if weights == "bf16":  # one reference per width, whatever the low format
                if width in done_bf16:
                    continue
                done_bf16.add(width)
            else:
                weights = fmt
            units += [{"weights": weights, "scheme": scheme, "mode": mode, "width": width,
                       "seed": s} for s in range(cfg.seeds)]
    return units


@experiment("mlp_methods", MLPMethodsConfig, version="1", units=_units)
def mlp_methods(cfg: MLPMethodsConfig, unit: dict) -> dict:
    """Table 1's methods on a teacher-student MLP: curves, final losses, static memory."""
    problem = make_problem(cfg, unit["width"])
    q = weight_quantizer(unit["weights"], unit["mode"])
    policy = {n: q for n in problem.quantized_names("matrices")}
    opt = adamw(recipes.schedule(cfg.lr, cfg.steps), cfg.b1, cfg.b2, cfg.eps, cfg.weight_decay,
                scheme=unit["scheme"], weights=policy)
    out = run_training(problem, opt, cfg.steps, key=rng.fold_in(cfg.key, "mlp", unit["seed"]),
                       batch_size=cfg.batch_size, log_every=cfg.log_every,
                       stop_factor=cfg.stop_factor)
    headline = memory.bytes_per_param("adamw", unit["scheme"], weights=q)
    out["mem_headline"] = np.array(headline, np.float64)
    return out
