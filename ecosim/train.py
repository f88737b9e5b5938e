"""The training loop: one problem, one optimizer, a history of what happened.

:func:`train` runs ``steps`` updates of an optimizer from :mod:`ecosim.optim` on a problem from
:mod:`ecosim.problems` and returns a :class:`History`: losses, validation loss, distance to the
optimum, gradient norms, and the per-step quantization-error metrics that the ECO theory is
about (the mean squared error of the weight write, and the similarity of consecutive errors,
docs/theory.md §5.8). A run can end early, and says how it ended (:attr:`History.outcome`):
``"stopped"`` when a ``stop`` rule asked for it, ``"diverged"`` when the arithmetic gave up (a
non-finite gradient, which the optimizer refuses to write; optionally a non-finite batch loss;
or non-finite rounding errors at a logged step); what happened up to that point is returned,
nothing is raised. With ``diagnostics=True`` the optimizer's per-step diagnostics (the batch
loss, how much of ECO's injection the momentum kept, ``||m|| / ||g||``...) are kept for every
step. Sweeps over seeds and configurations are experiments (:mod:`ecosim.experiments`): cached
by a hash of the resolved configuration and resumable.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Sequence

import numpy as np

from .core import rng
from .core.checks import NonFiniteError, check_bool
from .metrics import error_similarity

__all__ = ["History", "train", "FIELDS", "DIAGNOSTICS", "OUTCOMES", "initial_point"]

# Logged quantities, one value per logged step (NaN where not defined).
FIELDS = ("step", "lr", "loss", "grad_norm", "val_loss", "dist2", "mean_e2", "cos_e",
          "norm_ratio_e", "rel_diff_e", "changed_frac", "update_norm")
# Per-step quantities of ``diagnostics=True``, one value per completed update.
DIAGNOSTICS = ("step", "loss", "lr", "update_norm", "changed_frac", "inject_kept",
               "inject_lost", "m_over_g")
# How a run ended.
OUTCOMES = ("completed", "stopped", "diverged")


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
        params: the final stored weights (for a diverged run: those the failing update
            started from).
        state: the final optimizer state.
        final_loss: full-objective loss at the final weights (``inf`` for a diverged run,
            which is not evaluated).
        final_val_loss: validation loss at the final weights (None without validation;
            ``inf`` for a diverged run).
        outcome: one of :data:`OUTCOMES`: ``"completed"`` (all ``steps`` updates),
            ``"stopped"`` (the ``stop`` rule asked for it, at a logged step, after that
            step's record) or ``"diverged"`` (see :func:`train`).
        stopped_at: the number of updates done.
        diagnostics: with ``diagnostics=True``, a dict of float64 arrays, keys
            :data:`DIAGNOSTICS`, one entry per completed update: ``step``, ``loss`` (the
            batch loss before it), ``lr``, ``update_norm``, ``changed_frac``,
            ``inject_kept`` and ``inject_lost`` (the optimizer's step diagnostics, see
            :meth:`ecosim.optim.QuantizedOptimizer.step`) and ``m_over_g`` =
            ``||m|| / ||g||`` (the stored momentum after the update over this gradient, all
            parameters; NaN without a momentum or for a zero gradient); else None.
    """

    arrays: dict
    params: Any
    state: Any
    final_loss: float
    final_val_loss: float | None
    outcome: str = "completed"
    stopped_at: int = 0
    diagnostics: dict | None = None

    @property
    def diverged(self) -> bool:
        """Whether the run ended in a divergence."""
        return self.outcome == "diverged"

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
    """Sum over the leaves (sorted) of each one's float64 dot product with itself."""
    total = 0
    for a in _leaves(tree):
        f = a.ravel().astype(np.float64)  # one fresh float64 copy, dotted with itself
        total = total + np.dot(f, f)
    return float(total)


def _dist2(params, optimum) -> float:
    if optimum is None:
        return math.nan
    if isinstance(params, dict):
        return float(sum(_sq_norm(np.asarray(params[k], np.float64) - np.asarray(optimum[k]))
                         for k in params))
    z = (np.asarray(params, np.float64) - np.asarray(optimum, np.float64)).ravel()
    return float(np.dot(z, z))  # z is a fresh float64 array: _sq_norm without its copy


def _error_tree(e, quantized_names):
    """The error restricted to quantized parameters (others have e = 0 by construction)."""
    if e is None:
        return None
    if isinstance(e, dict):
        names = quantized_names if quantized_names is not None else sorted(e)
        return {k: e[k] for k in names if k in e}
    return e


def initial_point(problem, optimizer, key: int, params=None) -> tuple:
    """The stored initial weights and optimizer state of a run with ``key``, as :func:`train`
    starts it: ``problem.init(fold_in(key, "init"))`` (or ``params``) stored by
    ``optimizer.init(..., key=fold_in(key, "opt"))``."""
    key = rng.as_key(key)
    if params is None:
        params = problem.init(rng.fold_in(key, "init"))
    return optimizer.init(params, key=rng.fold_in(key, "opt"))


def train(problem, optimizer, steps: int, *, key: int = 0, batch_size: int | None = None,
          log_every: int | None = 1, eval_every: int | None = None,
          callbacks: Sequence[Callable] = (), stop: Callable | None = None,
          diagnostics: bool | Sequence[str] = False, diverge_on_loss: bool = False,
          progress: bool | None = False, params=None,
          fields: Sequence[str] | None = None) -> History:
    """Train ``problem`` with ``optimizer`` for ``steps`` updates (or until stopped).

    Args:
        problem: an :mod:`ecosim.problems` problem (``init``, ``loss_and_grad``, ``batch``,
            ``optimum``, ``has_validation``, ``val_loss``).
        optimizer: an :mod:`ecosim.optim` optimizer (``init``, ``step``).
        steps: number of updates.
        key: the run's key; the initial point, the optimizer's SR draws and the mini-batches
            use ``rng.fold_in(key, "init" | "opt" | "data")``, so a key fixes the whole run.
        batch_size: mini-batch size (None: the full, exact objective).
        log_every: record every ``log_every``-th update (and the last one); None records no
            step (with ``diagnostics=True``, the per-step record is then all there is).
        eval_every: evaluate the validation loss every ``eval_every`` updates (default: at
            every logged step when the problem has a validation set).
        callbacks: functions ``cb(t, params, state, record)`` called at each logged step with
            the dict of that step's logged values.
        stop: ``stop(t, record) -> bool``, asked at each logged step after the callbacks;
            True ends the run there (outcome ``"stopped"``, the step's record kept).
        diagnostics: keep the optimizer's diagnostics of every update
            (:attr:`History.diagnostics`): True for all of :data:`DIAGNOSTICS`, or a
            sequence of their names: then ``m_over_g`` (two norms a step) is NaN unless
            named, and the optimizer's own five (``lr``, ``update_norm``, ``changed_frac``,
            ``inject_kept``, ``inject_lost``) are NaN unless one of them is named: the
            updates whose diagnostics no logged step reads are then stepped without them
            (the same step, bit for bit, at less cost).
        diverge_on_loss: a non-finite batch loss ends the run as diverged before its update
            (by default only a gradient the optimizer refuses does).
        progress: a tqdm bar (None: only on a terminal).
        params: start from these weights instead of ``problem.init`` (they are quantized by
            ``optimizer.init``).
        fields: the logged quantities to compute, a subset of :data:`FIELDS` (None: all);
            the others are recorded as NaN (``step``, ``lr``, ``loss``, ``changed_frac`` and
            ``update_norm`` cost nothing and are always recorded). Leaving out what a caller
            never reads saves its cost and changes nothing else: the run, its outcome (the
            logged errors are still checked for finiteness) and the fields computed are the
            same bit for bit.

    Returns:
        A :class:`History`. The run *diverges* (outcome ``"diverged"``, nothing raised) when the
        step meets NaN/inf (:class:`~ecosim.core.checks.NonFiniteError`: a non-finite gradient, or a
        moment that overflowed into a data-dependent scale), with
        ``diverge_on_loss`` when a batch loss is, or when the rounding errors compared at a
        logged step (this update's and the previous one's) are non-finite: the update
        overflowed. That update is not recorded.

    Example:
        >>> from ecosim import Quantizer, optim, problems
        >>> prob = problems.Quadratic(8, L=1.0)
        >>> opt = optim.sgdm(0.1, 0.9, scheme="eco", weights=Quantizer("int8", scale=2.0**-6))
        >>> h = train(prob, opt, 200, key=0)
        >>> bool(h["dist2"][-1] < 1e-2 * h["dist2"][0]), h.outcome, h.stopped_at
        (True, 'completed', 200)
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    if log_every is not None and (isinstance(log_every, bool) or not isinstance(log_every, int)
                                  or log_every < 1):
        raise ValueError(f"log_every must be a positive int or None, got {log_every!r}")
    if eval_every is not None and (not isinstance(eval_every, int) or eval_every < 1):
        raise ValueError(f"eval_every must be a positive int or None, got {eval_every!r}")
    diagnostics, ratio, from_step = _check_diagnostics(diagnostics)
    diverge_on_loss = check_bool(diverge_on_loss, "diverge_on_loss")
    want = _check_fields(fields)
    key = rng.as_key(key)
    params, state = initial_point(problem, optimizer, key, params)
    data_key = rng.fold_in(key, "data")
    optimum = getattr(problem, "optimum", None)
    has_val = bool(getattr(problem, "has_validation", False))
    every_val = eval_every if eval_every is not None else log_every
    qnames = _quantized_names(optimizer, params)

    log = {f: [] for f in FIELDS}
    per_step = {f: [] for f in DIAGNOSTICS} if diagnostics else None
    e_prev = None
    outcome, done = "completed", steps
    wanted = (None if per_step is not None and from_step
              else _diagnosed_updates(optimizer, steps, log_every))
    bar = _progress(steps, progress)
    try:
        for t in range(steps):
            batch = problem.batch(data_key, t, batch_size)
            loss, grads = problem.loss_and_grad(params, batch)
            if diverge_on_loss and not math.isfinite(loss):
                outcome, done = "diverged", t
                break
            try:
                if wanted is None or t in wanted:
                    params_new, state_new, diag = optimizer.step(params, grads, state,
                                                                 diagnostics=True)
                else:  # none of the step's diagnostics is read: the same step without them
                    params, state = optimizer.step(params, grads, state)
                    if per_step is not None:
                        _record_step(per_step, t, loss, grads, state, None, ratio)
                    if bar is not None:
                        bar.update(1)
                    continue
            except NonFiniteError:  # a non-finite gradient, or a moment that overflowed
                outcome, done = "diverged", t
                break
            if per_step is not None:
                _record_step(per_step, t, loss, grads, state_new, diag if from_step else None,
                             ratio)
            e = _error_tree(diag["e"], qnames)
            if log_every is not None and (t % log_every == 0 or t == steps - 1):
                metrics = _error_metrics(e_prev, e, want)
                if metrics is None:
                    outcome, done = "diverged", t
                    break
                rec = {"step": t, "lr": diag["lr"], "loss": loss,
                       "grad_norm": (math.sqrt(_sq_norm(grads)) if "grad_norm" in want
                                     else math.nan),
                       "val_loss": (problem.val_loss(params_new)
                                    if has_val and "val_loss" in want
                                    and (t % every_val == 0 or t == steps - 1)
                                    else math.nan),
                       "dist2": _dist2(params_new, optimum) if "dist2" in want else math.nan,
                       "changed_frac": diag["changed_frac"],
                       "update_norm": diag["update_norm"], **metrics}
                for f in FIELDS:
                    log[f].append(rec[f])
                for cb in callbacks:
                    cb(t, params_new, state_new, rec)
                if stop is not None and stop(t, rec):
                    outcome, done = "stopped", t + 1
            # an lr = 0 step writes nothing: it has no error, keep comparing with the last one
            if e is not None and diag["lr"] > 0:
                e_prev = e
            params, state = params_new, state_new
            if bar is not None:
                bar.update(1)
            if outcome == "stopped":
                break
    finally:
        if bar is not None:
            bar.close()
    arrays = {f: np.asarray(v, dtype=np.float64) for f, v in log.items()}
    if outcome == "diverged":
        final_loss, final_val = math.inf, (math.inf if has_val else None)
    else:
        final_val = problem.val_loss(params) if has_val else None
        final_loss = problem.loss(params, None)
    return History(arrays=arrays, params=params, state=state, final_loss=float(final_loss),
                   final_val_loss=None if final_val is None else float(final_val),
                   outcome=outcome, stopped_at=done,
                   diagnostics=None if per_step is None else
                   {f: np.asarray(v, dtype=np.float64) for f, v in per_step.items()})


def _diagnosed_updates(optimizer, steps: int, log_every: int | None) -> set[int] | None:
    """The updates whose diagnostics :func:`train` reads, when it keeps no per-step record.

    A logged update reads its own, and the rounding error of the last earlier update with a
    positive learning rate (the one its error is compared with); the others are stepped
    without diagnostics, which leaves the weights and the state bit for bit as they are (the
    diagnostics only read the step's arrays) and saves their cost. None (every update) for an
    optimizer without ``lr_at``, or one whose schedule raises: the step reports it then.
    """
    if log_every is None:
        return set()
    lr_at = getattr(optimizer, "lr_at", None)
    if lr_at is None:
        return None
    logged = [t for t in range(steps) if t % log_every == 0 or t == steps - 1]
    wanted = set(logged)
    try:
        prev = -1
        for t in logged:  # back to the previous logged update (it, or its own, comes earlier)
            s = t - 1
            while s > prev and not lr_at(s) > 0:
                s -= 1
            if s > prev:
                wanted.add(s)
            prev = t
    except Exception:  # noqa: BLE001 - the step itself raises it, where it always did
        return None
    return wanted


# the per-step diagnostics that come from the optimizer's step(..., diagnostics=True)
_FROM_STEP = ("lr", "update_norm", "changed_frac", "inject_kept", "inject_lost")


def _check_diagnostics(diagnostics) -> tuple[bool, bool, bool]:
    """:func:`train`'s ``diagnostics`` as (keep a per-step record, compute ``m_over_g``, ask
    the optimizer for its step diagnostics)."""
    if isinstance(diagnostics, (bool, np.bool_)):
        return bool(diagnostics), bool(diagnostics), bool(diagnostics)
    if isinstance(diagnostics, str) or not isinstance(diagnostics, (tuple, list, frozenset, set)):
        raise TypeError(f"diagnostics must be a bool or a sequence of names from DIAGNOSTICS, "
                        f"got {diagnostics!r}")
    unknown = sorted(set(diagnostics) - set(DIAGNOSTICS))
    if unknown:
        raise ValueError(f"diagnostics must be names from DIAGNOSTICS {DIAGNOSTICS}, "
                         f"got {unknown}")
    return True, "m_over_g" in diagnostics, not set(diagnostics).isdisjoint(_FROM_STEP)


def _record_step(per_step: dict, t: int, loss, grads, state, diag: dict | None,
                 with_ratio: bool = True) -> None:
    """Append one update's diagnostics (:data:`DIAGNOSTICS`; ``m_over_g`` NaN unless
    ``with_ratio``, the step's own NaN without its ``diag``)."""
    m = getattr(state, "m", None) if with_ratio else None
    gn = _norm_in_order(grads) if m is not None else 0.0
    ratio = _norm_in_order(m) / gn if m is not None and gn > 0 else math.nan
    for f, v in (("step", t), ("loss", loss), ("m_over_g", ratio)):
        per_step[f].append(v)
    for f in _FROM_STEP:
        per_step[f].append(math.nan if diag is None else diag[f])


def _norm_in_order(tree) -> float:
    """2-norm of all leaves, summed in the tree's own (insertion) order."""
    leaves = tree.values() if isinstance(tree, dict) else [tree]
    return math.sqrt(sum(float(np.dot(a.ravel().astype(np.float64), a.ravel().astype(np.float64)))
                         for a in leaves))


def _quantized_names(optimizer, params) -> list[str] | None:
    if not isinstance(params, dict):
        return None
    names = [n for n in sorted(params) if optimizer.weight_quantizer(n) is not None]
    return names


def _check_fields(fields) -> frozenset[str]:
    """:func:`train`'s ``fields`` as a set (None: all of :data:`FIELDS`)."""
    if fields is None:
        return frozenset(FIELDS)
    if isinstance(fields, str) or not all(isinstance(f, str) for f in fields):
        raise TypeError(f"fields must be a sequence of names from FIELDS, got {fields!r}")
    unknown = sorted(set(fields) - set(FIELDS))
    if unknown:
        raise ValueError(f"fields must be names from FIELDS {FIELDS}, got {unknown}")
    return frozenset(fields)


_SIMILARITY = ("cos_e", "norm_ratio_e", "rel_diff_e")


def _error_metrics(e_prev, e, want=frozenset(FIELDS)) -> dict | None:
    """The logged error metrics named in ``want`` (the others NaN); None when the errors
    compared are non-finite (checked whatever ``want`` is: it is the divergence rule)."""
    nan = {"mean_e2": math.nan, "cos_e": math.nan, "norm_ratio_e": math.nan,
           "rel_diff_e": math.nan}
    if e is None or (isinstance(e, dict) and not e):
        return nan
    leaves = _leaves(e)
    n = sum(a.size for a in leaves)
    out = dict(nan)
    sq = math.nan
    if "mean_e2" in want:
        sq = _sq_norm(e)
        out["mean_e2"] = sq / n if n else math.nan
    if e_prev is not None:
        # a finite sum of squares has no NaN or inf term: then e needs no check of its own
        check = _leaves(e_prev) + ([] if math.isfinite(sq) else leaves)
        if not all(np.isfinite(a).all() for a in check):
            return None
        if not want.isdisjoint(_SIMILARITY):
            s = error_similarity(e_prev, e)
            out.update((k, v) for k, v in zip(_SIMILARITY, (s.cosine, s.norm_ratio, s.rel_diff))
                       if k in want)
    return out


def _progress(total: int, progress: bool | None):
    if progress is False:
        return None
    import sys

    if progress is None and not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc="train", unit="step", leave=False)
