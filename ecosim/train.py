"""The training loop: one problem, one optimizer, a history of what happened.

:func:`train` runs ``steps`` updates of an optimizer from :mod:`ecosim.optim` on a problem from
:mod:`ecosim.problems` and returns a :class:`History`: losses, validation loss, distance to the
optimum, gradient norms, and the per-step quantization-error metrics that the ECO theory is
about (the mean squared error of the weight write, and the similarity of consecutive errors,
docs/theory.md §5.8). Sweeps over seeds and configurations are experiments
(:mod:`ecosim.experiments`): cached by a hash of the resolved configuration and resumable.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Sequence

import numpy as np

from . import rng
from .metrics import error_similarity

__all__ = ["History", "train", "FIELDS"]

# Logged quantities, one value per logged step (NaN where not defined).
FIELDS = ("step", "lr", "loss", "grad_norm", "val_loss", "dist2", "mean_e2", "cos_e",
          "norm_ratio_e", "rel_diff_e", "changed_frac", "update_norm")


@dataclasses.dataclass(frozen=True)
class History:
    """What :func:`train` recorded.

    Attributes:
        arrays: dict of float64 arrays, one entry per logged step, keys :data:`FIELDS`:
            ``step`` the update index t (0-based), ``lr`` its learning rate, ``loss`` and
            ``grad_norm`` of the batch at the weights *before* update t, ``val_loss`` (NaN when
            not evaluated at that step or the problem has no validation set), ``dist2`` =
            ``||theta_hat - theta*||^2`` after update t (NaN when the optimum is unknown),
            ``mean_e2`` = mean of e**2 over all quantized weights for this update's error e,
            ``cos_e``/``norm_ratio_e``/``rel_diff_e`` = :func:`ecosim.metrics.error_similarity`
            of the previous update's error and this one's, ``changed_frac`` the fraction of
            stored weights whose value changed, ``update_norm`` = ``||theta_tilde - theta_hat||``.
        params: the final stored weights.
        state: the final optimizer state.
        final_loss: full-objective loss at the final weights.
        final_val_loss: validation loss at the final weights (None without validation).
    """

    arrays: dict
    params: Any
    state: Any
    final_loss: float
    final_val_loss: float | None

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]

    def tail_mean(self, name: str, frac: float = 0.5) -> float:
        """Mean of a logged quantity over the last ``frac`` of the logged steps (NaN-aware)."""
        a = self.arrays[name]
        k = max(1, int(round(len(a) * frac)))
        return float(np.nanmean(a[-k:])) if np.isfinite(a[-k:]).any() else math.nan


def _leaves(tree) -> list[np.ndarray]:
    if isinstance(tree, dict):
        return [np.asarray(tree[k]) for k in sorted(tree)]
    return [np.asarray(tree)]


def _sq_norm(tree) -> float:
    return float(sum(np.dot(a.ravel().astype(np.float64), a.ravel().astype(np.float64))
                     for a in _leaves(tree)))


def _dist2(params, optimum) -> float:
    if optimum is None:
        return math.nan
    if isinstance(params, dict):
        return float(sum(_sq_norm(np.asarray(params[k], np.float64) - np.asarray(optimum[k]))
                         for k in params))
    return _sq_norm(np.asarray(params, np.float64) - np.asarray(optimum, np.float64))


def _error_tree(e, quantized_names):
    """The error restricted to quantized parameters (others have e = 0 by construction)."""
    if e is None:
        return None
    if isinstance(e, dict):
        names = quantized_names if quantized_names is not None else sorted(e)
        return {k: e[k] for k in names if k in e}
    return e


def train(problem, optimizer, steps: int, *, key: int = 0, batch_size: int | None = None,
          log_every: int = 1, eval_every: int | None = None,
          callbacks: Sequence[Callable] = (), progress: bool | None = False,
          params=None) -> History:
    """Train ``problem`` with ``optimizer`` for ``steps`` updates.

    Args:
        problem: an :mod:`ecosim.problems` problem (``init``, ``loss_and_grad``, ``batch``,
            ``optimum``, ``has_validation``, ``val_loss``).
        optimizer: an :mod:`ecosim.optim` optimizer (``init``, ``step``).
        steps: number of updates.
        key: the run's key; the initial point, the optimizer's SR draws and the mini-batches
            use ``rng.fold_in(key, "init" | "opt" | "data")``, so a key fixes the whole run.
        batch_size: mini-batch size (None: the full, exact objective).
        log_every: record every ``log_every``-th update (and the last one).
        eval_every: evaluate the validation loss every ``eval_every`` updates (default: at
            every logged step when the problem has a validation set).
        callbacks: functions ``cb(t, params, state, record)`` called at each logged step with
            the dict of that step's logged values.
        progress: a tqdm bar (None: only on a terminal).
        params: start from these weights instead of ``problem.init`` (they are quantized by
            ``optimizer.init``).

    Returns:
        A :class:`History`.

    Example:
        >>> from ecosim import Quantizer, optim, problems
        >>> prob = problems.Quadratic(8, L=1.0)
        >>> opt = optim.sgdm(0.1, 0.9, scheme="eco", weights=Quantizer("int8", scale=2.0**-6))
        >>> h = train(prob, opt, 200, key=0)
        >>> bool(h["dist2"][-1] < 1e-2 * h["dist2"][0])
        True
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    if isinstance(log_every, bool) or not isinstance(log_every, int) or log_every < 1:
        raise ValueError(f"log_every must be a positive int, got {log_every!r}")
    if eval_every is not None and (not isinstance(eval_every, int) or eval_every < 1):
        raise ValueError(f"eval_every must be a positive int or None, got {eval_every!r}")
    key = rng.as_key(key)
    if params is None:
        params = problem.init(rng.fold_in(key, "init"))
    params, state = optimizer.init(params, key=rng.fold_in(key, "opt"))
    data_key = rng.fold_in(key, "data")
    optimum = getattr(problem, "optimum", None)
    has_val = bool(getattr(problem, "has_validation", False))
    every_val = eval_every if eval_every is not None else log_every
    qnames = _quantized_names(optimizer, params)

    log = {f: [] for f in FIELDS}
    e_prev = None
    bar = _progress(steps, progress)
    try:
        for t in range(steps):
            batch = problem.batch(data_key, t, batch_size)
            loss, grads = problem.loss_and_grad(params, batch)
            params_new, state, diag = optimizer.step(params, grads, state, diagnostics=True)
            e = _error_tree(diag["e"], qnames)
            logged = (t % log_every == 0) or t == steps - 1
            if logged:
                rec = {"step": t, "lr": diag["lr"], "loss": loss,
                       "grad_norm": math.sqrt(_sq_norm(grads)),
                       "val_loss": (problem.val_loss(params_new)
                                    if has_val and (t % every_val == 0 or t == steps - 1)
                                    else math.nan),
                       "dist2": _dist2(params_new, optimum),
                       "changed_frac": diag["changed_frac"],
                       "update_norm": diag["update_norm"]}
                rec.update(_error_metrics(e_prev, e))
                for f in FIELDS:
                    log[f].append(rec[f])
                for cb in callbacks:
                    cb(t, params_new, state, rec)
            # an lr = 0 step writes nothing: it has no error, keep comparing with the last one
            if e is not None and diag["lr"] > 0:
                e_prev = e
            params = params_new
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    arrays = {f: np.asarray(v, dtype=np.float64) for f, v in log.items()}
    final_val = problem.val_loss(params) if has_val else None
    return History(arrays=arrays, params=params, state=state,
                   final_loss=float(problem.loss(params, None)),
                   final_val_loss=None if final_val is None else float(final_val))


def _quantized_names(optimizer, params) -> list[str] | None:
    if not isinstance(params, dict):
        return None
    names = [n for n in sorted(params) if optimizer.weight_quantizer(n) is not None]
    return names


def _error_metrics(e_prev, e) -> dict:
    nan = {"mean_e2": math.nan, "cos_e": math.nan, "norm_ratio_e": math.nan,
           "rel_diff_e": math.nan}
    if e is None or (isinstance(e, dict) and not e):
        return nan
    leaves = _leaves(e)
    n = sum(a.size for a in leaves)
    out = dict(nan)
    out["mean_e2"] = _sq_norm(e) / n if n else math.nan
    if e_prev is not None:
        s = error_similarity(e_prev, e)
        out.update(cos_e=s.cosine, norm_ratio_e=s.norm_ratio, rel_diff_e=s.rel_diff)
    return out


def _progress(total: int, progress: bool | None):
    if progress is False:
        return None
    import sys

    if progress is None and not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc="train", unit="step", leave=False)
