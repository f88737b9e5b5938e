"""Shared setup of the full-stack low-precision experiments (``mantissa_sweep``,
``compressed_states``): the two problems, the optimizers' hyperparameters, a lean training
loop that also records how much of ECO's injection a quantized momentum keeps, and the rule
that calls a run fine, degraded or failed.

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

import math
from typing import Any

import numpy as np

from .. import rng
from ..optim import adamw, muon, warmup_cosine
from ..problems import MLP, Rosenbrock

__all__ = ["AsMatrix", "PROBLEMS", "make_problem", "make_optimizer", "run_training",
           "classify", "CLASSES"]

PROBLEMS = ("rosenbrock", "mlp")
CLASSES = ("fine", "degraded", "failed")

# Rosenbrock: loss at or below this counts as solved (the optimum has f = 0; float64 runs
# reach 1e-15, Muon about 1e-6, its final step size): losses are compared above this floor.
ROSEN_FLOOR = 1e-5


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


# Peak learning rates (warmup 10%, cosine to 0.1% of the peak), tuned on the FP32 runs.
LRS = {("rosenbrock", "adamw"): 0.1, ("rosenbrock", "muon"): 0.03,
       ("mlp", "adamw"): 0.04, ("mlp", "muon"): 0.04}
ADAM_B2 = {"rosenbrock": 0.99, "mlp": 0.999}


def make_optimizer(problem: str, optimizer: str, steps: int, *, scheme: str, weights=None,
                   states=None, eco_gain: float = 1.0):
    """AdamW or Muon with the experiments' hyperparameters."""
    sched = warmup_cosine(LRS[problem, optimizer], steps, final_frac=1e-3)
    if optimizer == "adamw":
        return adamw(sched, 0.9, ADAM_B2[problem], scheme=scheme, weights=weights,
                     states=states)
    if optimizer == "muon":
        adam_sched = warmup_cosine(LRS[problem, "adamw"], steps, final_frac=1e-3)
        return muon(sched, 0.95, scheme=scheme, weights=weights, states=states,
                    adam_lr=adam_sched, b2=ADAM_B2[problem], eco_gain=eco_gain)
    raise ValueError(f"unknown optimizer {optimizer!r}")


def _norm(tree) -> float:
    leaves = tree.values() if isinstance(tree, dict) else [tree]
    return math.sqrt(sum(float(np.dot(a.ravel().astype(np.float64), a.ravel().astype(np.float64)))
                         for a in leaves))


def run_training(problem, opt, steps: int, *, key: int, batch_size: int | None,
                 points: int, track_momentum: bool = False) -> dict[str, np.ndarray]:
    """Train; return the final loss, a loss curve and ECO's mean kept injection fraction.

    The keys follow :func:`ecosim.train.train` (``fold_in(key, "init" | "opt" | "data")``).
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
    params = problem.init(rng.fold_in(key, "init"))
    params, state = opt.init(params, key=rng.fold_in(key, "opt"))
    data_key = rng.fold_in(key, "data")
    has_val = bool(getattr(problem, "has_validation", False))

    def evaluate(p):
        return float(problem.val_loss(p) if has_val else problem.loss(p, None))

    initial = evaluate(params)
    losses = np.full(steps, np.inf)
    kept_sum, kept_n, lost_sum = 0.0, 0, 0.0
    ratios = []
    diverged = False
    # A diverging run overflows on its way to inf: that is a result here, not a bug.
    with np.errstate(over="ignore", invalid="ignore"):
        for t in range(steps):
            batch = problem.batch(data_key, t, batch_size)
            loss, grads = problem.loss_and_grad(params, batch)
            if not math.isfinite(loss):
                diverged = True
                break
            try:
                params, state, diag = opt.step(params, grads, state, diagnostics=True)
            except ValueError as exc:  # non-finite gradients are refused by the optimizer
                if "non-finite" not in str(exc):
                    raise
                diverged = True
                break
            losses[t] = loss
            if track_momentum and 2 * t >= steps:
                gn = _norm(grads)
                ratios.append(_norm(state.m) / gn if gn > 0 else math.nan)
            k = diag["inject_kept"]
            if math.isfinite(k):
                kept_sum += k
                lost_sum += diag["inject_lost"]
                kept_n += 1
        final = math.inf if diverged else evaluate(params)
    if not math.isfinite(final):
        final, diverged = math.inf, True
    edges = np.linspace(0, steps, points + 1).round().astype(int)
    with np.errstate(invalid="ignore", over="ignore"):
        curve = np.array([losses[a:b].mean() for a, b in zip(edges[:-1], edges[1:])])
    return {"final": np.float64(final), "initial": np.float64(initial), "curve": curve,
            "diverged": np.bool_(diverged),
            "inject_kept": np.float64(kept_sum / kept_n if kept_n else math.nan),
            "inject_lost": np.float64(lost_sum / kept_n if kept_n else math.nan),
            **({"m_over_g": np.float64(np.nanmean(ratios) if ratios and not diverged
                                       else math.nan)} if track_momentum else {})}


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
