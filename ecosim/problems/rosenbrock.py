"""The chained d-dimensional Rosenbrock function: a smooth, non-convex, badly scaled valley."""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .base import (STREAM_INIT, Problem, check_dimension, check_dtype, check_key, check_params,
                   check_positive, check_real, keyed_rng, readonly, set_fields)

__all__ = ["Rosenbrock"]


@dataclasses.dataclass(frozen=True, eq=False)
class Rosenbrock(Problem):
    """f(x) = sum_{i=0}^{d-2} [ b (x_{i+1} - x_i^2)^2 + (a - x_i)^2 ]  (full batch).

    Gradient (exact), with r_i = x_{i+1} - x_i^2 for i = 0..d-2:

        df/dx_i = -4 b x_i r_i - 2 (a - x_i)   [i <= d-2]   + 2 b r_{i-1}   [i >= 1].

    Optimum: f >= 0 with equality iff x_i = a for i <= d-2 and x_{i+1} = x_i^2, so for d = 2
    it is (a, a^2), and for d >= 3 it exists in closed form only when a^2 = a: all ones for
    a = 1 (the classic case) and all zeros for a = 0; then ``f_star = 0``. Otherwise
    ``optimum`` and ``f_star`` are ``None``.

    Args:
      d: dimension, >= 2.
      a: the valley's target, a finite real (1 is classic).
      b: the valley's steepness, > 0 (100 is classic).
      init_scale: ``init(key)`` returns the classic start (-1.2, 1, -1.2, 1, ...) plus
        ``init_scale * N(0, I)`` keyed by ``key``; 0 (default) ignores the key.
      dtype: floating type of params, losses and gradients (float64 by default).

    Example:
      >>> r = Rosenbrock()
      >>> r.init(0).tolist(), r.loss(r.init(0))
      ([-1.2, 1.0], 24.199999999999996)
      >>> r.loss(r.optimum), float(np.abs(r.grad(r.optimum)).max())
      (0.0, 0.0)
    """

    d: int = 2
    a: float = 1.0
    b: float = 100.0
    _: dataclasses.KW_ONLY
    init_scale: float = 0.0
    dtype: Any = np.float64

    optimum: np.ndarray | None = dataclasses.field(init=False, repr=False)
    f_star: float | None = dataclasses.field(init=False, repr=False)

    def __post_init__(self) -> None:
        d = check_dimension(self.d, 2, " (the chain couples neighbours)")
        a = check_real(self.a, "a")
        b = check_positive(self.b, "b")
        init_scale = check_positive(self.init_scale, "init_scale", allow_zero=True)
        dtype = check_dtype(self.dtype)
        set_fields(self, d=d, a=a, b=b, init_scale=init_scale, dtype=dtype)
        if d == 2:
            xstar = np.array([a, a * a])
        elif a * a == a:
            xstar = np.full(d, a)
        else:
            xstar = None
        set_fields(self, optimum=None if xstar is None else readonly(xstar.astype(dtype)),
                   f_star=None if xstar is None else 0.0)

    def _x(self, params: Any, batch: Any) -> np.ndarray:
        if batch is not None:
            raise TypeError(
                f"Rosenbrock is full-batch: batch must be None, got {type(batch).__name__}")
        return check_params(params, self.d, self.dtype)

    def init(self, key: int) -> np.ndarray:
        """The classic start (-1.2, 1, -1.2, 1, ...) + ``init_scale`` * N(0, I) from ``key``."""
        key = check_key(key)
        x0 = np.where(np.arange(self.d) % 2 == 0, -1.2, 1.0)
        if self.init_scale > 0:
            x0 = x0 + self.init_scale * keyed_rng(key, STREAM_INIT).standard_normal(self.d)
        return x0.astype(self.dtype)

    def loss(self, params: Any, batch: None = None) -> float:
        """f(x) as defined in the class docstring."""
        x = self._x(params, batch)
        r = x[1:] - x[:-1] ** 2
        return float(np.sum(self.b * r**2 + (self.a - x[:-1]) ** 2))

    def grad(self, params: Any, batch: None = None) -> np.ndarray:
        """The exact gradient (class docstring), shape ``(d,)``, in ``dtype``."""
        x = self._x(params, batch)
        return self._grad(x, x[1:] - x[:-1] ** 2)

    def loss_and_grad(self, params: Any, batch: None = None) -> tuple[float, np.ndarray]:
        """``(loss(params), grad(params))`` from one check of ``params`` and one residual
        ``r``: the same operations as the two calls, so the same bits, at about half the
        per-call overhead (the optimizers' step loop calls it once a step)."""
        x = self._x(params, batch)
        xh = x[:-1]
        r = x[1:] - xh**2
        loss = float((self.b * r**2 + (self.a - xh) ** 2).sum())
        return loss, self._grad(x, r)

    def _grad(self, x: np.ndarray, r: np.ndarray) -> np.ndarray:
        g = np.zeros_like(x)
        g[:-1] = -4.0 * self.b * x[:-1] * r - 2.0 * (self.a - x[:-1])
        g[1:] += 2.0 * self.b * r
        return g
