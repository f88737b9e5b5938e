"""The protocol every test problem follows, and the argument checks they share.

A *problem* is a small, immutable object that owns an objective f and, where it has
one, a data set. Parameters (``params``) are either one NumPy array (quadratic,
Rosenbrock) or a dict of named arrays (MLP: ``"W0", "b0", "W1", ...``). Every problem has

* ``init(key) -> params``: a fresh, writable starting point, a pure function of ``key``;
* ``loss(params, batch=None) -> float`` and ``grad(params, batch=None) -> params``,
  ``grad`` returning the same structure, shapes and dtype as ``init`` gives;
* ``loss_and_grad(params, batch=None) -> (float, params)``;
* ``batch(key, step, batch_size=None) -> batch | None``: the stochastic part of the
  objective at training step ``step``, a pure function of ``(key, step, batch_size)``.
  ``None`` always means "the full, exact objective": full-batch problems return ``None``,
  and ``loss(params, None)`` / ``grad(params, None)`` evaluate the full objective;
* ``optimum`` (params or ``None`` when unknown) and ``f_star`` (float or ``None``), both
  for the full objective;
* ``has_validation`` (bool) and ``val_loss(params) -> float | None``: the held-out loss,
  ``None`` exactly when ``has_validation`` is False;
* ``dtype``: the floating type in which params, losses and gradients are computed.

Inputs are never mutated; stored arrays (optimum, data, Hessian) are read-only.

Randomness comes only from explicit non-negative integer keys. ``np.random.default_rng``
pads its seed with zeros (``default_rng(k)``, ``default_rng([k, 0])`` and
``default_rng([k, 0, 0])`` are one and the same stream), so a problem that used
``default_rng(key)`` for its initial point and ``default_rng([key, step])`` for its batches
would hand step 0 the very bits of its initial point. Every draw here therefore goes through
:func:`keyed_rng`, which appends a non-zero *stream* tag: ``default_rng([key, step, stream])``.
"""
from __future__ import annotations

import operator
from typing import Any, ClassVar

import numpy as np

from ..core.checks import check_positive, check_real  # noqa: F401 - the problems' checks, shared

__all__ = ["Problem", "keyed_rng"]

# Stream tags (non-zero, distinct) that separate the uses of one key.
STREAM_BUILD = 1  # problem construction: rotations, optima, teachers, data sets
STREAM_INIT = 2   # init(key)
STREAM_BATCH = 3  # batch(key, step, ...)
STREAM_EPOCH = 4  # per-epoch shuffles of a training set


def check_key(key: Any, name: str = "key") -> int:
    """Returns ``key`` as a Python int, or raises if it is not a non-negative integer."""
    if isinstance(key, (bool, np.bool_)):
        raise TypeError(f"{name} must be a non-negative integer, got the bool {key!r}")
    try:
        value = operator.index(key)
    except TypeError:
        raise TypeError(
            f"{name} must be a non-negative integer, got {type(key).__name__} {key!r}"
        ) from None
    if value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value}")
    return value


def check_dimension(d: Any, minimum: int, why: str = "") -> int:
    """Returns the dimension ``d`` as a Python int, or raises if it is not an integer
    ``>= minimum`` (``why``: the reason for the minimum, quoted in the message)."""
    value = check_key(d, "d")
    if value < minimum:
        kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ValueError(f"d must be {kind}{why}, got {value}")
    return value


def keyed_rng(key: int, stream: int, step: int = 0) -> np.random.Generator:
    """The generator for draw ``step`` of ``stream`` under ``key``.

    Args:
      key: non-negative integer key chosen by the caller.
      stream: one of the ``STREAM_*`` tags of this module (non-zero).
      step: non-negative counter (training step, epoch, ...).

    Returns:
      ``np.random.default_rng([key, step, stream])``: a pure function of its arguments; the
      non-zero final word keeps the streams of one key apart (see the module docstring).
    """
    return np.random.default_rng(
        [check_key(key), check_key(step, "step"), check_key(stream, "stream")]
    )


def check_dtype(dtype: Any) -> np.dtype:
    """Returns ``np.dtype(dtype)`` if it is a floating type, else raises TypeError."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype must be a NumPy floating dtype, got {dtype!r}") from None
    if not np.issubdtype(dt, np.floating):
        raise TypeError(f"dtype must be a NumPy floating dtype (e.g. float64), got {dt}")
    return dt


def check_params(params: Any, d: int, dtype: np.dtype) -> np.ndarray:
    """Returns ``params`` as a ``(d,)`` array of ``dtype`` (no copy when it already is one);
    raises ValueError for another shape, TypeError for a non-real dtype."""
    x = np.asarray(params)
    if x.shape != (d,):
        raise ValueError(f"params must have shape ({d},), got {x.shape}")
    if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)):
        raise TypeError(f"params must be a real array, got dtype {x.dtype}")
    return x.astype(dtype, copy=False)


def check_batch_size(batch_size: Any) -> int | None:
    """Returns ``batch_size`` (None or a positive int), or raises."""
    if batch_size is None:
        return None
    value = check_key(batch_size, "batch_size")
    if value == 0:
        raise ValueError("batch_size must be a positive integer or None (full batch), got 0")
    return value


def set_fields(problem: Any, **values: Any) -> None:
    """Writes checked ``values`` onto the frozen dataclass ``problem`` (in its
    ``__post_init__``, which is where a frozen dataclass may set its own fields)."""
    for name, value in values.items():
        object.__setattr__(problem, name, value)


def readonly(array: np.ndarray) -> np.ndarray:
    """Marks ``array`` (owned by the caller) read-only and returns it."""
    array.setflags(write=False)
    return array


class Problem:
    """Base class of the test problems; see the module docstring for the protocol.

    Subclasses implement ``init``, ``loss`` and ``grad`` and set ``dtype``; they may override
    ``loss_and_grad`` (to share a forward pass), ``batch``, ``val_loss``, ``optimum`` and
    ``f_star``.
    """

    has_validation: ClassVar[bool] = False
    optimum: Any = None
    f_star: float | None = None
    dtype: np.dtype

    def init(self, key: int) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def loss(self, params: Any, batch: Any = None) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def grad(self, params: Any, batch: Any = None) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def loss_and_grad(self, params: Any, batch: Any = None) -> tuple[float, Any]:
        """Returns ``(loss(params, batch), grad(params, batch))``."""
        return self.loss(params, batch), self.grad(params, batch)

    def batch(self, key: int, step: int, batch_size: int | None = None) -> Any:
        """Full-batch problems: checks the arguments and returns ``None``."""
        check_key(key)
        check_key(step, "step")
        check_batch_size(batch_size)
        return None

    def val_loss(self, params: Any) -> float | None:
        """``None``: this problem has no validation set (``has_validation`` is False)."""
        return None
