"""Learning-rate schedules: frozen callables from the step index t to the learning rate.

Convention: ``t = 0, 1, 2, ...`` is the index of the update being applied, so ``sched(0)``
is the learning rate of the first update and a run of ``total_steps`` updates uses
``t = 0 .. total_steps - 1``. A schedule called with an integer returns a Python float;
called with an integer array (e.g. ``np.arange(T)``, for plotting) it returns a float64
array of the same shape. Negative or non-integer steps are errors.

The ECO paper (Nikdan et al., arXiv 2601.22101) trains with a linear warmup over 10% of the
steps followed by a cosine decay to 0.1x the peak: :func:`warmup_cosine` with its defaults.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import numbers
from typing import Any, Callable

import numpy as np

from ..core.checks import check_positive, check_real

__all__ = [
    "Schedule",
    "Constant",
    "WarmupCosine",
    "StepDecay",
    "InverseTime",
    "constant",
    "warmup_cosine",
    "step_decay",
    "inverse_time",
    "as_schedule",
]


def _fraction(value: Any, name: str) -> float:
    value = check_real(value, name)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value!r}")
    return value


def _count(value: Any, name: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be a positive integer, got {type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


#: steps per table of :meth:`Schedule._at`, and how many tables a schedule keeps at most
_TABLE_BLOCK = 1024
_TABLE_BLOCKS = 64
_TABLE_MAX = 2**62  # larger steps take the array path (its int64 conversion)


class Schedule:
    """Base class: ``__call__`` checks the step(s) and evaluates ``_lr`` on float64 steps.

    Subclasses are frozen dataclasses whose fields are the hyperparameters (hence a readable
    ``repr`` and equality by value) and implement ``_lr(t)`` for a float64 array ``t >= 0``,
    element-wise (an element's value must not depend on the others: a single int step is
    read from a table of its block, see :meth:`_at`).
    """

    def __call__(self, step: Any) -> Any:
        """The learning rate at update index ``step`` (int -> float, int array -> array)."""
        if type(step) is int and 0 <= step < _TABLE_MAX:  # a training loop's call: a lookup
            return self._at(step)
        if isinstance(step, (bool, np.bool_)):
            raise TypeError(f"step must be an integer or an integer array, got the bool {step!r}")
        scalar = isinstance(step, numbers.Integral)
        t = np.asarray(step)
        if not np.issubdtype(t.dtype, np.integer):
            raise TypeError(f"step must be an integer or an integer array, got {t.dtype} {step!r}")
        if np.any(t < 0):
            raise ValueError(f"step must be >= 0, got {step!r}")
        # Scalars take the same 1-d array path as arrays, so both round identically (NumPy's
        # scalar and vectorised pow/cos may differ in the last bit).
        lr = self._lr(t.reshape(-1).astype(np.float64)).reshape(t.shape)
        return float(lr) if scalar else lr

    def __getstate__(self):
        """The fields only: the tables are a cache, neither pickled nor copied."""
        return {k: v for k, v in self.__dict__.items() if k != "_tables"}

    @functools.cached_property
    def _tables(self) -> dict:
        """``{block: its learning rates}`` (a cache in the instance, not a dataclass field:
        equality, hashing and ``repr`` skip it; a frozen schedule's fields stay as built)."""
        return {}

    def _at(self, t: int) -> float:
        """``self(t)`` for a Python int ``t >= 0``, from a table of the block of
        :data:`_TABLE_BLOCK` steps around it, evaluated once by the array path.

        Bit for bit the array path's value: every operation of ``_lr`` is element-wise, so an
        element does not depend on its neighbours (tests/test_schedules.py checks arrays
        against single steps). A run reads one block every ``_TABLE_BLOCK`` steps; at most
        :data:`_TABLE_BLOCKS` blocks are kept.
        """
        b, i = divmod(t, _TABLE_BLOCK)
        tables = self._tables
        row = tables.get(b)
        if row is None:
            if len(tables) >= _TABLE_BLOCKS:
                tables.clear()
            t0 = b * _TABLE_BLOCK
            steps = np.arange(t0, t0 + _TABLE_BLOCK, dtype=np.int64).astype(np.float64)
            with np.errstate(all="ignore"):  # the steps asked for warn below, the others not
                row = self._lr(steps).tolist()
            tables[b] = row
        value = row[i]
        if not math.isfinite(value):  # as the array path does it (its warnings included)
            return float(self._lr(np.array([t], np.int64).astype(np.float64))[0])
        return value

    def _lr(self, t: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class Constant(Schedule):
    """lr(t) = lr.

    Args:
      lr: the learning rate, > 0.

    Example:
      >>> Constant(0.1)(7)
      0.1
    """

    lr: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "lr", check_positive(self.lr, "lr"))

    def _lr(self, t: np.ndarray) -> np.ndarray:
        return np.full(t.shape, self.lr)


@dataclasses.dataclass(frozen=True)
class WarmupCosine(Schedule):
    """Linear warmup from ``init_frac * peak``, then cosine decay to ``final_frac * peak``.

    With W = ``warmup_steps`` = round(warmup_frac * total_steps), T = ``total_steps`` and
    o = ``warmup_offset``:

        lr(t) = peak * (init_frac + (1 - init_frac) * (t + o) / W)            for 0 <= t < W,
        lr(t) = f + (peak - f) * (1 + cos(pi * p)) / 2,  p = (t - W) / (T - 1 - W),
                                                          f = final_frac * peak, for t >= W,

    with p clipped to [0, 1] (p = 1 when T - 1 - W <= 0). So lr(0) = init_frac * peak,
    lr(W) = peak, the warmup rises strictly and the cosine falls monotonically, and the last
    update t = T - 1 (and every later one) uses exactly final_frac * peak. The defaults are
    the ECO paper's: 10% warmup from 0.01x peak, cosine to 0.1x peak. With ``warmup_offset=1``
    and ``init_frac=0`` the warmup counts the first update as one of its steps,
    ``peak (t + 1) / W`` (``1/W, 2/W, ..., 1`` times peak): the torch language-model runner's
    schedule (:attr:`ecosim.torch.lm.LMConfig.schedule`, a factor: ``peak=1``).

    The cosine is the C library's (``math.cos``, element by element), not NumPy's vectorised
    one, which some CPUs dispatch to other kernels: a schedule is the same bits wherever it
    runs, and equal to what a scalar loop computes.

    Args:
      peak: the peak learning rate, > 0.
      total_steps: the number of updates T, >= 1.
      warmup_frac: warmup length as a fraction of T, in [0, 1].
      init_frac: first learning rate as a fraction of peak, in [0, 1].
      final_frac: last learning rate as a fraction of peak, in [0, 1].
      warmup_offset: 0 or 1, the steps of the warmup already counted at ``t = 0``.

    Example:
      >>> s = WarmupCosine(1e-3, 1000)
      >>> s.warmup_steps, s(0), s(100), s(999)
      (100, 1e-05, 0.001, 0.0001)
    """

    peak: float
    total_steps: int
    _: dataclasses.KW_ONLY
    warmup_frac: float = 0.1
    init_frac: float = 0.01
    final_frac: float = 0.1
    warmup_offset: int = 0

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "peak", check_positive(self.peak, "peak"))
        set_(self, "total_steps", _count(self.total_steps, "total_steps"))
        for name in ("warmup_frac", "init_frac", "final_frac"):
            set_(self, name, _fraction(getattr(self, name), name))
        if type(self.warmup_offset) is not int or self.warmup_offset not in (0, 1):
            raise ValueError(f"warmup_offset must be 0 or 1, got {self.warmup_offset!r}")

    @property
    def warmup_steps(self) -> int:
        """W = round(warmup_frac * total_steps) (nearest integer)."""
        return round(self.warmup_frac * self.total_steps)

    def _lr(self, t: np.ndarray) -> np.ndarray:
        w, n = self.warmup_steps, self.total_steps - 1 - self.warmup_steps
        final = self.final_frac * self.peak
        p = np.clip((t - w) / n, 0.0, 1.0) if n > 0 else np.ones_like(t)
        cosine = final + (self.peak - final) * 0.5 * (1.0 + _cos(np.pi * p))
        # Exact at both ends, whatever the rounding of cos and of final + (peak - final).
        cosine = np.where(p >= 1.0, final, np.where(p <= 0.0, self.peak, cosine))
        if w == 0:
            return cosine
        ramp = t + self.warmup_offset if self.warmup_offset else t
        warm = self.peak * (self.init_frac + (1.0 - self.init_frac) * ramp / w)
        return np.where(t < w, warm, cosine)


def _cos(x: np.ndarray) -> np.ndarray:
    """``math.cos`` of every element (the C library's cosine; see :class:`WarmupCosine`)."""
    return np.fromiter(map(math.cos, x.ravel().tolist()), np.float64, x.size).reshape(x.shape)


@dataclasses.dataclass(frozen=True)
class StepDecay(Schedule):
    """lr(t) = lr * factor ** floor(t / every).

    Args:
      lr: initial learning rate, > 0.
      every: steps between decays, a positive integer.
      factor: multiplier per decay, in (0, 1].

    Example:
      >>> s = StepDecay(1.0, every=10, factor=0.5)
      >>> s(9), s(10), s(25)
      (1.0, 0.5, 0.25)
    """

    lr: float
    every: int
    factor: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "lr", check_positive(self.lr, "lr"))
        object.__setattr__(self, "every", _count(self.every, "every"))
        factor = check_positive(self.factor, "factor")
        if factor > 1:
            raise ValueError(f"factor must be in (0, 1], got {factor!r}")
        object.__setattr__(self, "factor", factor)

    def _lr(self, t: np.ndarray) -> np.ndarray:
        return self.lr * self.factor ** np.floor(t / self.every)


@dataclasses.dataclass(frozen=True)
class InverseTime(Schedule):
    """lr(t) = lr / (1 + t / t0).

    Args:
      lr: initial learning rate, > 0.
      t0: the step at which the rate has halved, > 0.

    Example:
      >>> InverseTime(1.0, t0=10)(10)
      0.5
    """

    lr: float
    t0: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "lr", check_positive(self.lr, "lr"))
        object.__setattr__(self, "t0", check_positive(self.t0, "t0"))

    def _lr(self, t: np.ndarray) -> np.ndarray:
        return self.lr / (1.0 + t / self.t0)


# Lowercase factory spellings (as used in configs); they are the classes themselves.
constant = Constant
warmup_cosine = WarmupCosine
step_decay = StepDecay
inverse_time = InverseTime


def as_schedule(lr: Any) -> Callable[[Any], Any]:
    """A schedule from a learning rate or a schedule.

    Args:
      lr: a real number (-> ``Constant(lr)``) or any callable ``step -> lr`` (returned as is).

    Raises:
      TypeError: ``lr`` is neither a real number nor callable (bools are rejected).
      ValueError: ``lr`` is a number but not finite and > 0.

    Example:
      >>> as_schedule(0.5)
      Constant(lr=0.5)
    """
    if callable(lr):
        return lr
    if isinstance(lr, (bool, np.bool_)) or not isinstance(lr, numbers.Real):
        raise TypeError(
            f"lr must be a positive real number or a callable schedule step -> lr, "
            f"got {type(lr).__name__} {lr!r}"
        )
    return Constant(lr)
