"""Theory of quantized training without master weights: coefficients, closed forms, bounds.

This module owns the formulas that simulations are checked against (docs/theory.md §4, §5):

- the ECO momentum-injection coefficients (:func:`eco_alpha`, :func:`adam_eco_coefficient`);
- the closed-form stationary second moment of the stored iterate on the scalar quadratic
  ``f = L x^2 / 2`` under additive quantization noise (:func:`quadratic_stationary`);
- a general linear-systems solver: every scheme on a quadratic with a diagonal spectrum is a
  linear state-space recursion driven by white noise, whose stationary covariance solves a
  discrete Lyapunov equation (:func:`linear_system`, :func:`lyapunov_covariance`,
  :func:`lyapunov_stationary`); it reproduces the closed forms and goes beyond them (gradient
  noise, heavy-ball momentum, frozen-v Adam preconditioning);
- the convergence floors of the ECO paper for stochastic rounding and round-to-nearest
  (:func:`sr_floor`, :func:`sr_bound`, :func:`rtn_floor`, ...) and the naive+RTN stall
  threshold (:func:`rtn_stall_threshold`).

Reference: M. Nikdan, A. Zandieh, D. Alistarh, V. Mirrokni, "ECO: Quantized Training without
Full-Precision Master Weights", arXiv 2601.22101 (2026).

Everything is computed in float64. Scalar inputs give Python floats; array inputs broadcast
and give float64 arrays.

Where each part lives: the coefficients and the quadratic's closed forms in
:mod:`ecosim.theory.closed_forms`, the linear-systems solver in :mod:`ecosim.theory.lyapunov`, the
precision-against-horizon error terms of quantized Adam and Muon (Tang, Li, Zou, arXiv
2510.21314) in :mod:`ecosim.theory.horizon`, the floors here; this module exports all of them.
"""

from __future__ import annotations

import numpy as np

from .closed_forms import (QUADRATIC_SCHEMES, SCHEMES, as_float, check_beta,
                           check_nonnegative, check_positive, as_result, adam_eco_coefficient,
                           eco_alpha, quadratic_stationary, stability_limit)
from .lyapunov import (LinearSystem, StationaryMoments, linear_system, lyapunov_covariance,
                       lyapunov_stationary)
from .horizon import (ERROR_ORDERS, error_terms, horizon_bound, moment_condition,
                      relative_error, required_mantissa, theory_slope)

__all__ = [
    "SCHEMES",
    "QUADRATIC_SCHEMES",
    "eco_alpha",
    "adam_eco_coefficient",
    "stability_limit",
    "quadratic_stationary",
    "LinearSystem",
    "StationaryMoments",
    "linear_system",
    "lyapunov_covariance",
    "lyapunov_stationary",
    "sr_floor",
    "sr_floor_limit",
    "sr_bound",
    "rtn_floor",
    "rtn_floor_limit",
    "rtn_stall_threshold",
    # precision against horizon (Tang, Li, Zou; ecosim.theory.horizon)
    "ERROR_ORDERS",
    "relative_error",
    "error_terms",
    "moment_condition",
    "horizon_bound",
    "required_mantissa",
    "theory_slope",
]


# --------------------------------------------------------------------------------------------
# Convergence floors of the ECO paper (docs/theory.md §5.5, §5.6)
# --------------------------------------------------------------------------------------------

def _check_bound_inputs(L, lr, beta):
    L = check_positive(L, "L")
    lr = check_positive(lr, "lr")
    beta = check_beta(beta)
    if np.any(lr > 1.0 / (2.0 * L)):
        raise ValueError(f"the bound holds for lr <= 1/(2L) = {as_result(1.0 / (2.0 * L))!r}, "
                         f"got lr={as_result(lr)!r}")
    return L, lr, beta


def sr_floor(L, G, sigma2, lr, beta):
    """Noise floor of ECO with unbiased (stochastic-rounding) quantization error.

    ECO paper (arXiv 2601.22101): for L-smooth f with ``||grad f|| <= G`` and unbiased error
    with ``E||e||^2 <= sigma2``, ``min_t E||grad f(theta_hat_t)||^2 <= 4(f0 - f*)/(lr T) +
    sigma_q^2`` with::

        sigma_q^2 = 4 lr^2 beta^2 L^2 G^2 / (1-beta)^2 + 4 L^2 sigma2 / (1-beta^2)

    valid for ``lr <= 1/(2L)``.

    Args:
        L: smoothness constant, > 0.
        G: gradient-norm bound, >= 0.
        sigma2: bound on the quantization error's second moment, >= 0.
        lr: learning rate, in (0, 1/(2L)].
        beta: momentum coefficient, in (0, 1).

    Returns:
        sigma_q^2.

    Raises:
        ValueError: invalid input or lr > 1/(2L).
    """
    L, lr, beta = _check_bound_inputs(L, lr, beta)
    G = check_nonnegative(G, "G")
    sigma2 = check_nonnegative(sigma2, "sigma2")
    drift = 4 * lr**2 * beta**2 * L**2 * G**2 / (1 - beta) ** 2
    noise = 4 * L**2 * sigma2 / (1 - beta**2)
    return as_result(drift + noise)


def sr_floor_limit(L, sigma2, beta):
    """``lr -> 0`` limit of :func:`sr_floor`: ``4 L^2 sigma2 / (1 - beta^2)``.

    A constant independent of the learning rate (ECO paper, arXiv 2601.22101).
    """
    L = check_positive(L, "L")
    sigma2 = check_nonnegative(sigma2, "sigma2")
    beta = check_beta(beta)
    return as_result(4 * L**2 * sigma2 / (1 - beta**2))


def sr_bound(f0_minus_fstar, lr, T, *, L, G, sigma2, beta):
    """ECO's SR bound on ``min_{t<T} E||grad f(theta_hat_t)||^2``.

    ``4 (f(theta_0) - f*) / (lr T) + sigma_q^2`` with ``sigma_q^2 = sr_floor(L, G, sigma2, lr,
    beta)`` (ECO paper, arXiv 2601.22101).

    Args:
        f0_minus_fstar: initial suboptimality, >= 0.
        lr: learning rate, in (0, 1/(2L)].
        T: number of steps, >= 1.
        L, G, sigma2, beta: as in :func:`sr_floor`.
    """
    gap = check_nonnegative(f0_minus_fstar, "f0_minus_fstar")
    T = as_float(T, "T")
    if np.any(T < 1):
        raise ValueError(f"T must be >= 1, got {T!r}")
    floor = sr_floor(L, G, sigma2, lr, beta)
    return as_result(4 * gap / (np.asarray(lr, dtype=np.float64) * T) + floor)


def rtn_floor(L, G, delta, lr, beta):
    """Noise floor of ECO with bounded (round-to-nearest) quantization error.

    ECO paper (arXiv 2601.22101): with ``||e|| <= delta``::

        (2 L^2 lr^2 beta^2 / (1-beta)^2) * (G + |alpha| delta / (1-beta))^2

    with ``alpha = eco_alpha(lr, beta)``. Since ``lr*beta*|alpha| = 1 - beta`` this equals
    ``2 L^2 (lr beta G + delta)^2 / (1-beta)^2``, which tends to :func:`rtn_floor_limit` as
    ``lr -> 0``. The step-size condition ``lr <= 1/(2L)`` of the SR analysis is enforced here
    too.

    Args:
        L: smoothness constant, > 0.
        G: gradient-norm bound, >= 0.
        delta: bound on the quantization error norm, >= 0.
        lr: learning rate, in (0, 1/(2L)].
        beta: momentum coefficient, in (0, 1).

    Raises:
        ValueError: invalid input or lr > 1/(2L).
    """
    L, lr, beta = _check_bound_inputs(L, lr, beta)
    G = check_nonnegative(G, "G")
    delta = check_nonnegative(delta, "delta")
    alpha = np.asarray(eco_alpha(lr, beta))
    prefactor = 2 * L**2 * lr**2 * beta**2 / (1 - beta) ** 2
    return as_result(prefactor * (G + np.abs(alpha) * delta / (1 - beta)) ** 2)


def rtn_floor_limit(L, delta, beta):
    """``lr -> 0`` limit of :func:`rtn_floor`: ``2 L^2 delta^2 / (1 - beta)^2``."""
    L = check_positive(L, "L")
    delta = check_nonnegative(delta, "delta")
    beta = check_beta(beta)
    return as_result(2 * L**2 * delta**2 / (1 - beta) ** 2)


def rtn_stall_threshold(step):
    """Update size below which naive+RTN cannot move a weight: half a grid step.

    Naive removal writes ``q(theta_hat - lr*m)`` with round-to-nearest; if
    ``|lr*m| < step/2`` the nearest grid point is ``theta_hat`` itself, so the weight never
    moves however long the momentum points the same way (ECO instead keeps the rounded-off
    part in the momentum, ``m -> m/beta`` per stuck step, until the step crosses the
    threshold). At exactly ``|lr*m| = step/2`` the update is a tie and ties-to-even decides:
    the weight moves iff the neighbour in the update direction has the even code. ``step`` is
    the spacing to that neighbour, which below a power of two is half the spacing above it.

    Args:
        step: grid spacing in the direction of the update, > 0 (array-like).

    Returns:
        ``step / 2``.
    """
    step = check_positive(step, "step")
    return as_result(step / 2)
