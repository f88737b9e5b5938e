"""Quadratic test problems with a chosen spectrum, rotation and gradient noise.

The quadratic is the setting of the ECO paper's tightness example and of the linear
(Lyapunov) analysis in :mod:`ecosim.theory`: every scheme is a linear system on it.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import numpy as np

from .base import (STREAM_BATCH, STREAM_BUILD, STREAM_INIT, Problem, check_batch_size,
                   check_dimension, check_dtype, check_key, check_params, check_positive,
                   check_real, keyed_rng, readonly, set_fields)

__all__ = ["NoiseBatch", "Quadratic", "DEFAULT_OFFSET"]

#: Default shift of the optimum: sqrt(2) - 1 = 0.41421356..., irrational, so no finite
#: binary grid contains it (its float64 rounding is a 53-bit dyadic, far off any 8-bit grid).
DEFAULT_OFFSET = math.sqrt(2.0) - 1.0


class NoiseBatch(NamedTuple):
    """The stochastic part of a noisy quadratic at one step.

    Attributes:
      noise: shape ``(d,)``, the additive gradient noise xi of this step, in the problem's dtype.
    """

    noise: np.ndarray


@dataclasses.dataclass(frozen=True, eq=False)
class Quadratic(Problem):
    """f(x) = 0.5 (x - x*)^T H (x - x*), with H = Q diag(lambda) Q^T.

    Spectrum: ``lambda_i = L * cond**(-(d-1-i)/(d-1))``, i = 0..d-1, i.e. ``d`` values
    spaced log-uniformly (geometrically) from ``L/cond`` up to ``L``; the endpoints are exact,
    so f is L-smooth and (L/cond)-strongly convex. With ``cond == 1`` every eigenvalue is
    exactly ``L``. ``d == 1`` requires ``cond == 1`` (f = L (x - x*)^2 / 2).

    Rotation: ``Q = I`` unless ``rotated``; then Q is Haar-distributed, from the QR
    factorisation of a Gaussian matrix (keyed by ``key``) with the signs of R's diagonal
    moved into Q.

    Optimum: ``x* = offset + u`` with ``u ~ Uniform(-1/2, 1/2)^d`` keyed by ``key``. The
    uniform draw puts each coordinate at a random place between grid points and the
    irrational default offset sqrt(2) - 1 keeps x* away from 0, which lies on every grid, so
    quantized iterates cannot sit exactly at the optimum. ``offset=None`` gives the centred
    quadratic f = 0.5 x^T H x of the theory (x* = 0 exactly).

    Gradient noise: with ``grad_noise = s2 > 0`` a step's batch is a :class:`NoiseBatch`
    holding xi ~ N(0, s2 I), drawn from ``(key, step)``, and the step's objective is the
    linear perturbation

        f_xi(x) = f(x) + xi^T (x - x*),   grad f_xi(x) = H (x - x*) + xi,

    so ``E f_xi = f``, ``E grad f_xi = grad f`` and ``loss``/``grad`` stay consistent (and
    deterministic) given the batch. ``batch=None`` is the exact objective.

    Args:
      d: dimension (>= 1).
      L: largest eigenvalue (smoothness constant), > 0.
      cond: condition number L / lambda_min, >= 1.
      rotated: rotate the eigenbasis by a keyed random orthogonal Q.
      key: non-negative integer; builds Q and x*.
      grad_noise: per-coordinate variance s2 >= 0 of the additive gradient noise.
      offset: shift of x* (see above); ``None`` for x* = 0.
      dtype: floating type of params, losses and gradients (float64 by default). The
        spectrum, Q and x* are built in float64 and rounded once to ``dtype``.

    Attributes:
      eigenvalues: read-only ``(d,)``, ascending.
      rotation: read-only ``(d, d)`` Q, or ``None`` when not rotated.
      optimum: read-only x*; ``f_star`` is 0.0.

    Example:
      >>> q = Quadratic(3, L=2.0, cond=4.0)
      >>> q.eigenvalues.tolist()
      [0.5, 1.0, 2.0]
      >>> x = q.init(0)
      >>> bool(np.allclose(q.grad(x), q.eigenvalues * (x - q.optimum)))
      True
    """

    d: int
    L: float = 1.0
    cond: float = 1.0
    _: dataclasses.KW_ONLY
    rotated: bool = False
    key: int = 0
    grad_noise: float = 0.0
    offset: float | None = DEFAULT_OFFSET
    dtype: Any = np.float64

    eigenvalues: np.ndarray = dataclasses.field(init=False, repr=False)
    rotation: np.ndarray | None = dataclasses.field(init=False, repr=False)
    optimum: np.ndarray = dataclasses.field(init=False, repr=False)
    _hessian: np.ndarray | None = dataclasses.field(init=False, repr=False)

    f_star = 0.0

    def __post_init__(self) -> None:
        d = check_dimension(self.d, 1)
        L = check_positive(self.L, "L")
        cond = check_positive(self.cond, "cond")
        if cond < 1.0:
            raise ValueError(f"cond must be >= 1 (L / lambda_min), got {cond}")
        if d == 1 and cond != 1.0:
            raise ValueError(f"a 1-d quadratic has one eigenvalue, so cond must be 1.0, got {cond}")
        if not isinstance(self.rotated, (bool, np.bool_)):
            raise TypeError(f"rotated must be a bool, got {self.rotated!r}")
        key = check_key(self.key)
        grad_noise = check_positive(self.grad_noise, "grad_noise", allow_zero=True)
        offset = None if self.offset is None else check_real(self.offset, "offset")
        dtype = check_dtype(self.dtype)
        set_fields(self, d=d, L=L, cond=cond, rotated=bool(self.rotated), key=key,
                   grad_noise=grad_noise, offset=offset, dtype=dtype)

        if cond == 1.0:
            lam = np.full(d, L)
        else:
            lam = L * cond ** (-np.arange(d - 1, -1, -1) / (d - 1))
            lam[0], lam[-1] = L / cond, L
        rng = keyed_rng(key, STREAM_BUILD)
        q = None
        if self.rotated:
            g = rng.standard_normal((d, d))
            q, r = np.linalg.qr(g)
            q = q * np.where(np.diag(r) < 0, -1.0, 1.0)  # Haar measure (Mezzadri 2007)
        u = rng.uniform(-0.5, 0.5, size=d)
        xstar = np.zeros(d) if offset is None else offset + u

        set_fields(self, eigenvalues=readonly(lam.astype(dtype)),
                   optimum=readonly(xstar.astype(dtype)))
        if q is None:
            set_fields(self, rotation=None, _hessian=None)
        else:
            h = (q * lam) @ q.T
            h = 0.5 * (h + h.T)  # exactly symmetric
            set_fields(self, rotation=readonly(q.astype(dtype)),
                       _hessian=readonly(h.astype(dtype)))

    @property
    def mu(self) -> float:
        """Strong-convexity constant lambda_min = L / cond."""
        return self.L / self.cond

    @property
    def hessian(self) -> np.ndarray:
        """H = Q diag(lambda) Q^T as a dense ``(d, d)`` array (read-only when rotated)."""
        if self._hessian is None:
            return np.diag(self.eigenvalues)
        return self._hessian

    def _x(self, params: Any) -> np.ndarray:
        return check_params(params, self.d, self.dtype)

    def _noise(self, batch: Any) -> np.ndarray | None:
        if batch is None:
            return None
        if not isinstance(batch, NoiseBatch):
            raise TypeError(
                "batch must be None or a NoiseBatch from Quadratic.batch, "
                f"got {type(batch).__name__}"
            )
        if batch.noise.shape != (self.d,):
            raise ValueError(f"batch.noise must have shape ({self.d},), got {batch.noise.shape}")
        return batch.noise.astype(self.dtype, copy=False)

    def _hz(self, z: np.ndarray) -> np.ndarray:
        if self._hessian is None:
            return self.eigenvalues * z
        return self._hessian @ z

    def init(self, key: int) -> np.ndarray:
        """x0 = x* + z, z ~ N(0, I_d) keyed by ``key`` (E||x0 - x*||^2 = d)."""
        z = keyed_rng(key, STREAM_INIT).standard_normal(self.d)
        return (self.optimum.astype(np.float64) + z).astype(self.dtype)

    def loss(self, params: Any, batch: NoiseBatch | None = None) -> float:
        """f(x) = 0.5 z^T H z with z = x - x*, plus xi^T z when the batch carries noise xi."""
        z = self._x(params) - self.optimum
        value = 0.5 * np.dot(z, self._hz(z))
        xi = self._noise(batch)
        if xi is not None:
            value = value + np.dot(xi, z)
        return float(value)

    def grad(self, params: Any, batch: NoiseBatch | None = None) -> np.ndarray:
        """H (x - x*), plus xi when the batch carries noise xi; shape ``(d,)``, ``dtype``."""
        g = self._hz(self._x(params) - self.optimum)
        xi = self._noise(batch)
        return g if xi is None else g + xi

    def loss_and_grad(self, params: Any,
                      batch: NoiseBatch | None = None) -> tuple[float, np.ndarray]:
        """``(loss(params, batch), grad(params, batch))`` from one ``z = x - x*`` and one
        ``H z``: the same operations as the two calls, so the same bits, at about half the cost
        (the training loop calls it once a step)."""
        z = self._x(params) - self.optimum
        hz = self._hz(z)
        value = 0.5 * np.dot(z, hz)
        xi = self._noise(batch)
        if xi is None:
            return float(value), hz
        return float(value + np.dot(xi, z)), hz + xi

    def batch(self, key: int, step: int, batch_size: int | None = None) -> NoiseBatch | None:
        """The gradient noise of step ``step``: ``None`` when ``grad_noise == 0``.

        Args:
          key: non-negative integer key of the noise sequence.
          step: non-negative step index; xi = sqrt(grad_noise) * N(0, I) from ``(key, step)``.
          batch_size: accepted for protocol uniformity and checked, but ignored: the noise
            variance is ``grad_noise`` whatever its value.
        """
        check_batch_size(batch_size)
        key, step = check_key(key), check_key(step, "step")
        if self.grad_noise == 0.0:
            return None
        xi = math.sqrt(self.grad_noise) * keyed_rng(key, STREAM_BATCH, step).standard_normal(self.d)
        return NoiseBatch(readonly(xi.astype(self.dtype)))
