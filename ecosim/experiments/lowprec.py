"""Shared setup of the full-stack low-precision experiments (``mantissa_sweep``,
``compressed_states``): the two problems, the optimizers (their hyperparameters are fields of
each experiment's config), what a run returns (through :func:`ecosim.train.train`, with how
much of ECO's injection a quantized momentum keeps), and the rule that calls a run fine,
degraded or failed.

Problems:

* ``rosenbrock``: the chained Rosenbrock function in ``d = rows * cols`` dimensions (float64,
  the classic start), full batch. Adam sees the vector; Muon sees it reshaped to a
  ``(rows, cols)`` matrix (:class:`AsMatrix`), an artificial but honest "matrix parameter"
  whose orthogonalised update is a spectral-norm steepest-descent step. The optimum (all
  ones) lies on every binary grid.
* ``mlp``: a teacher-student regression MLP (float32, mini-batches, validation loss), all
  parameters quantized: Muon updates its weight matrices and AdamW its biases.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar, Literal

import numpy as np

from ..core import rng
from ..optim import adamw, muon, warmup_cosine
from ..problems import MLP, Rosenbrock
from ..optim.schemes import is_eco
from ..train import initial_point, train
from .base import (Check, Config, ConfigError, at_least, distinct, interval, non_negative,
                   nonempty, one_of, positive)

__all__ = ["AsMatrix", "PROBLEMS", "OPTIMIZERS", "OptimizerConfig", "SweepConfig",
           "make_problem", "make_optimizer", "run_training", "classify", "CLASSES"]

PROBLEMS = ("rosenbrock", "mlp")
OPTIMIZERS = ("adamw", "muon")
CLASSES = ("fine", "degraded", "failed")


class AsMatrix:
    """A vector problem presented as one ``shape``-d matrix parameter (for Muon)."""

    has_validation = False

    def __init__(self, problem: Any, shape: tuple[int, int]):
        self.problem = problem
        self.shape = tuple(shape)
        opt = problem.optimum
        self.optimum = None if opt is None else opt.reshape(self.shape)
        self.f_star = problem.f_star
        self.dtype = problem.dtype

    def init(self, key: int) -> np.ndarray:
        return self.problem.init(key).reshape(self.shape)

    def batch(self, key: int, step: int, batch_size: int | None = None):
        return self.problem.batch(key, step, batch_size)

    def loss(self, params, batch=None) -> float:
        return self.problem.loss(np.asarray(params).reshape(-1), batch)

    def loss_and_grad(self, params, batch=None):
        x = np.asarray(params).reshape(-1)
        loss, g = self.problem.loss_and_grad(x, batch)
        return loss, g.reshape(self.shape)

    def val_loss(self, params):
        return None


def make_problem(name: str, optimizer: str, *, rosen_shape: tuple[int, int],
                 mlp_sizes: tuple[int, ...], mlp_train: int, key: int):
    """The problem ``name`` as ``optimizer`` sees it (Muon: Rosenbrock as a matrix)."""
    if name == "rosenbrock":
        prob = Rosenbrock(rosen_shape[0] * rosen_shape[1])
        return AsMatrix(prob, rosen_shape) if optimizer == "muon" else prob
    if name == "mlp":
        return MLP(mlp_sizes, n_train=mlp_train, n_val=max(64, mlp_train // 4),
                   key=rng.fold_in(key, "mlp") % 2**63)
    raise ValueError(f"unknown problem {name!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class OptimizerConfig(Config):
    """Hyperparameters the low-precision experiments share (their configs derive from this):
    AdamW's ``b1`` (Muon's AdamW parameters too), Muon's momentum ``muon_beta``, and the
    schedule's last learning rate as a fraction of the peak (warmup over 10% of the steps,
    cosine to ``final_lr_frac``). The peak learning rates and AdamW's ``b2``, tuned on the
    FP32 runs per problem, are fields of each config."""

    b1: float = 0.9
    muon_beta: float = 0.95
    final_lr_frac: float = 1e-3
    CHECKS: ClassVar[dict] = {"b1": interval("[0, 1)"), "muon_beta": interval("[0, 1)"),
                              "final_lr_frac": interval("[0, 1]")}

    def recipe(self, problem: str) -> dict:  # pragma: no cover - defined by each config
        """The keyword arguments of :func:`make_optimizer` for ``problem``."""
        raise NotImplementedError

    def _shared(self) -> dict:
        return {"b1": self.b1, "muon_beta": self.muon_beta, "final_lr_frac": self.final_lr_frac}


@dataclasses.dataclass(frozen=True, kw_only=True)
class SweepConfig(OptimizerConfig):
    """What the mantissa sweeps (``mantissa_sweep``, ``precision_horizon``) share: the problems
    and optimizers run, the rounding mode, Rosenbrock's matrix shape for Muon, the MLP's size
    and batch, the peak learning rates per problem (tuned on the FP32 runs), and
    ``rosen_floor``: a Rosenbrock loss at or below it counts as solved (the optimum has f = 0;
    float64 runs reach 1e-15, Muon about 1e-6, its final step size), so losses there are
    compared above this floor (:func:`classify`)."""

    problems: tuple[str, ...] = PROBLEMS
    optimizers: tuple[str, ...] = OPTIMIZERS
    mode: Literal["rtn", "sr"] = "rtn"
    # Rosenbrock
    rosen_rows: int = 4
    rosen_cols: int = 4
    rosen_adamw_lr: float = 0.1
    rosen_muon_lr: float = 0.03
    rosen_floor: float = 1e-5
    # MLP
    mlp_sizes: tuple[int, ...] = (16, 32, 32, 8)
    mlp_train: int = 2048
    batch_size: int = 64
    mlp_adamw_lr: float = 0.04
    mlp_muon_lr: float = 0.04
    CHECKS: ClassVar[dict] = {
        "problems": (nonempty, distinct, one_of(PROBLEMS)),
        "optimizers": (nonempty, distinct, one_of(OPTIMIZERS)),
        "rosen_rows": at_least(1), "rosen_cols": at_least(1),
        "mlp_sizes": (Check("two or more widths", lambda t: len(t) >= 2, each=False),
                      at_least(1)),
        "mlp_train": at_least(1), "batch_size": at_least(1),
        "rosen_adamw_lr": positive, "rosen_muon_lr": positive,
        "mlp_adamw_lr": positive, "mlp_muon_lr": positive, "rosen_floor": non_negative}

    def __post_init__(self):
        super().__post_init__()
        name = type(self).__name__
        if self.rosen_rows * self.rosen_cols < 2:
            raise ConfigError(f"{name}: Rosenbrock needs d = rows * cols >= 2")
        if self.batch_size > self.mlp_train:
            raise ConfigError(f"{name}.batch_size: expected at most mlp_train "
                              f"({self.mlp_train}), got {self.batch_size}")

    def peak_lrs(self, problem: str) -> dict:
        """``adamw_lr`` and ``muon_lr`` of :func:`make_optimizer` for ``problem``."""
        p = "rosen" if problem == "rosenbrock" else "mlp"
        return {"adamw_lr": getattr(self, f"{p}_adamw_lr"),
                "muon_lr": getattr(self, f"{p}_muon_lr")}

    def loss_floor(self, problem: str) -> float:
        """The ``floor`` of :func:`classify` on ``problem`` (``rosen_floor`` or 0)."""
        return self.rosen_floor if problem == "rosenbrock" else 0.0

    def batch(self, problem: str) -> int | None:
        """The mini-batch size on ``problem`` (None: Rosenbrock is full batch)."""
        return None if problem == "rosenbrock" else self.batch_size

    def problem(self, name: str, optimizer: str, key: int):
        """:func:`make_problem` with this config's Rosenbrock shape and MLP size."""
        return make_problem(name, optimizer, rosen_shape=(self.rosen_rows, self.rosen_cols),
                            mlp_sizes=self.mlp_sizes, mlp_train=self.mlp_train, key=key)


def make_optimizer(optimizer: str, steps: int, *, adamw_lr: float, muon_lr: float, b1: float,
                   b2: float, muon_beta: float, final_lr_frac: float, scheme: str,
                   weights=None, states=None, eco_gain: float = 1.0):
    """AdamW or Muon with the hyperparameters of an experiment's config (``config.recipe()``):
    peak learning rates (warmup over 10% of the steps, cosine to ``final_lr_frac`` of the
    peak), AdamW's ``(b1, b2)`` (Muon's AdamW parameters too), Muon's momentum ``muon_beta``."""
    sched = warmup_cosine(adamw_lr if optimizer == "adamw" else muon_lr, steps,
                          final_frac=final_lr_frac)
    if optimizer == "adamw":
        return adamw(sched, b1, b2, scheme=scheme, weights=weights, states=states)
    if optimizer == "muon":
        adam_sched = warmup_cosine(adamw_lr, steps, final_frac=final_lr_frac)
        return muon(sched, muon_beta, scheme=scheme, weights=weights, states=states,
                    adam_lr=adam_sched, b2=b2, eco_gain=eco_gain)
    raise ValueError(f"unknown optimizer {optimizer!r}")


def _diagnostics(opt, track_momentum: bool) -> tuple[str, ...]:
    """The per-step diagnostics :func:`run_training` reads: the batch loss; the injection's
    kept and lost fractions only where the scheme injects (an ECO scheme: otherwise they are
    NaN at every step, and the optimizer's step diagnostics, 15-20% of a step here, are not
    computed at all); ``m_over_g`` (two norms a step) with ``track_momentum``."""
    names = ("step", "loss")
    if is_eco(opt.scheme):
        names += ("inject_kept", "inject_lost")
    return names + (("m_over_g",) if track_momentum else ())


def run_training(problem, opt, steps: int, *, key: int, batch_size: int | None,
                 points: int, track_momentum: bool = False) -> dict[str, np.ndarray]:
    """Train with :func:`ecosim.train.train`; return the final loss, a loss curve and ECO's
    mean kept injection fraction.

    A non-finite loss or gradient ends the run as diverged (final loss ``inf``).

    Returns:
        ``final`` (validation loss for problems with a validation set, else the full loss),
        ``initial`` (the same at the initial stored weights), ``curve`` (the batch loss
        averaged over ``points`` equal windows of steps; ``inf`` after a divergence),
        ``diverged`` (bool), ``inject_kept`` and ``inject_lost`` (time-averages of the step
        diagnostics, NaN without injections), and with ``track_momentum`` ``m_over_g``: the
        mean over the second half of the steps of ``||m|| / ||g||`` (all parameters): how
        much larger the stored momentum is than the gradient it averages (ECO's injections
        inflate it; NaN for a diverged run).
    """
    has_val = bool(getattr(problem, "has_validation", False))
    params, _ = initial_point(problem, opt, key)
    initial = float(problem.val_loss(params) if has_val else problem.loss(params, None))
    # A diverging run overflows on its way to inf: that is a result here, not a bug.
    with np.errstate(over="ignore", invalid="ignore"):
        h = train(problem, opt, steps, key=key, batch_size=batch_size, log_every=None,
                  diagnostics=_diagnostics(opt, track_momentum), diverge_on_loss=True)
    d = h.diagnostics
    final = h.final_val_loss if has_val else h.final_loss
    diverged = h.diverged
    if not math.isfinite(final):
        final, diverged = math.inf, True
    losses = np.full(steps, np.inf)
    losses[:d["loss"].size] = d["loss"]
    kept_sum, kept_n, lost_sum = 0.0, 0, 0.0
    for k, lost in zip(d["inject_kept"].tolist(), d["inject_lost"].tolist()):
        if math.isfinite(k):
            kept_sum += k
            lost_sum += lost
            kept_n += 1
    edges = np.linspace(0, steps, points + 1).round().astype(int)
    with np.errstate(invalid="ignore", over="ignore"):
        curve = np.array([losses[a:b].mean() for a, b in zip(edges[:-1], edges[1:])])
    out = {"final": np.float64(final), "initial": np.float64(initial), "curve": curve,
           "diverged": np.bool_(diverged),
           "inject_kept": np.float64(kept_sum / kept_n if kept_n else math.nan),
           "inject_lost": np.float64(lost_sum / kept_n if kept_n else math.nan)}
    if track_momentum:
        ratios = d["m_over_g"][2 * d["step"] >= steps].tolist()
        out["m_over_g"] = np.float64(np.nanmean(ratios) if ratios and not diverged
                                     else math.nan)
    return out


def classify(final: float, reference: float, initial: float, floor: float = 0.0) -> str:
    """``"fine"``, ``"degraded"`` or ``"failed"`` for a final loss against the FP32 run.

    With ``L~ = max(L, floor)``: fine when ``L~ <= 1.2 * L~_ref`` (within 20% of the
    unquantized run); failed when the run diverged or made less than half of the reference's
    progress on a log scale, ``log(L_0 / L~) < 0.5 * log(L_0 / L~_ref)``; degraded in between.
    """
    if not math.isfinite(final):
        return "failed"
    lm, lr = max(final, floor), max(reference, floor)
    if lm <= 1.2 * lr:
        return "fine"
    if initial <= lr or math.log(initial / lm) < 0.5 * math.log(initial / lr):
        return "failed"
    return "degraded"
