"""Precision against horizon: the relative-error theory of quantized Adam and Muon.

Tang, Li and Zou (arXiv 2510.21314) model every quantized buffer ``X`` of an optimizer step
(the weights ``W``, the gradient ``g``, the first moment ``m``, the second moment ``v``) by a
relative error, ``Q(x) = x (1 + delta)`` with ``|delta| <= q_X = 2**-M_X`` for a format with
``M_X`` mantissa bits and a wide exponent, and bound the gradient norm of smooth non-convex
training after ``T`` steps. Their result, as this module uses it:

* both optimizers keep the full-precision rate ``~O(T**-1/4)`` if every ``q_X`` shrinks fast
  enough with the horizon ``T``;
* Adam needs ``q_g, q_m = O(1/T)`` and ``q_W, q_v = O(1/T**2)``, and its weight and
  second-moment terms grow as ``b2 -> 1``; the moments must also satisfy
  ``b1**2 (1 + q_m)**2 < b2 (1 - q_v)``;
* Muon needs only ``q_X = O(1/sqrt(T))`` for its buffers (weights, gradient, momentum).

So the mantissa a buffer needs grows like ``a_X log2 T``: ``a = 2`` for Adam's weights and
``v``, ``1`` for Adam's ``g`` and ``m``, ``1/2`` for Muon (:data:`ERROR_ORDERS`).

What is the paper's and what is this module's. The orders ``a_X``, the rate and the moment
condition are the paper's statements. Its constants (which depend on smoothness, gradient
bounds, noise and the dimension) were not available to this project, so the bound below has
the stated *structure* with constants of order one: it is meant for slopes and shapes (how the
required M moves with ``T`` and ``b2``), not for absolute numbers. Concretely,

    bound(T) = base(T) * (1 + sum_X s_X * T**a_X * 2**-M_X)

    base(T)  = D / (lr T) + 2 L lr / (1 - b1) + 2 sigma sqrt(1 - b1) + 2 sigma / ((1 - b1) T)

``base`` is the standard bound of normalised momentum methods (an update of size about ``lr``
per step, momentum ``b1``; with ``lr ~ T**-3/4`` and ``1 - b1 ~ T**-1/2`` it is
``O(T**-1/4)``, the rate the paper states for both optimizers); ``s_X`` is the sensitivity of
buffer ``X``: ``1 / (1 - b2)`` for Adam's weights and ``v`` (this module's way of carrying the
paper's "sensitive as b2 -> 1"; the exact dependence is the paper's constant, not this), ``1``
otherwise. Each error term is ``O(1)``, so the rate is kept, exactly when ``q_X`` meets its
order; :func:`required_mantissa` is the smallest ``M`` that makes a term at most ``tol``.

Assumptions (the paper's): ``f`` is ``L``-smooth and bounded below (``D = f(x_0) - inf f``),
stochastic gradients are unbiased with variance at most ``sigma**2``, the quantizers have a
wide enough exponent that no value overflows or underflows (a relative error holds for every
value), rounding errors are arbitrary within the bound (no unbiasedness, no error feedback).

Everything is float64. Scalars give Python floats; arrays broadcast to float64 arrays.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from .closed_forms import as_float, check_beta, check_positive, as_result

__all__ = ["ERROR_ORDERS", "OPTIMIZERS", "relative_error", "error_terms", "horizon_bound",
           "required_mantissa", "theory_slope", "moment_condition"]

#: The exponent ``a`` in "buffer X needs ``q_X = O(T**-a)``", per optimizer and buffer.
ERROR_ORDERS: dict[str, dict[str, float]] = {
    "adam": {"weights": 2.0, "g": 1.0, "m": 1.0, "v": 2.0},
    "muon": {"weights": 0.5, "g": 0.5, "m": 0.5},
}
OPTIMIZERS = tuple(ERROR_ORDERS)
_B2_SENSITIVE = {"adam": ("weights", "v"), "muon": ()}


def _check_optimizer(optimizer):
    if optimizer not in ERROR_ORDERS:
        raise ValueError(f"optimizer: expected one of {OPTIMIZERS}, got {optimizer!r}")
    return optimizer


def _check_buffer(optimizer, buffer):
    if buffer not in ERROR_ORDERS[optimizer]:
        raise ValueError(f"buffer: expected one of {tuple(ERROR_ORDERS[optimizer])} for "
                         f"{optimizer}, got {buffer!r}")
    return buffer


def _check_horizon(T):
    T = as_float(T, "T")
    if np.any(T < 1):
        raise ValueError(f"T: expected a horizon of at least 1 step, got {as_result(T)!r}")
    return T


def _check_mantissa(M, name="M"):
    M = np.asarray(M, dtype=np.float64)
    if np.any(np.isnan(M)) or np.any(M < 0):
        raise ValueError(f"{name}: expected mantissa bits >= 0 (inf: exact), got {as_result(M)!r}")
    return M


def relative_error(M):
    """The relative error bound ``q = 2**-M`` of a format with ``M`` mantissa bits.

    The paper's convention (one unit in the last place; round-to-nearest halves it). ``M =
    inf`` is exact arithmetic (``q = 0``).

    Args:
        M: mantissa bits, ``>= 0`` (scalar or array; non-integers allowed for curves).

    Returns:
        ``2**-M`` as float or float64 array.
    """
    return as_result(np.exp2(-_check_mantissa(M)))


def _sensitivity(optimizer, buffer, b2):
    if buffer in _B2_SENSITIVE[optimizer]:
        return 1.0 / (1.0 - b2)
    return np.ones_like(b2)


def error_terms(optimizer, T, mantissas, *, b2=0.999):
    """The relative size of each quantized buffer's error term, ``s_X T**a_X 2**-M_X``.

    A term of order one or less keeps the full-precision rate; a term that grows with ``T``
    dominates it. See the module docstring for the form and which parts are the paper's.

    Args:
        optimizer: ``"adam"`` or ``"muon"``.
        T: horizon in steps, ``>= 1``.
        mantissas: ``{buffer: M}`` for the quantized buffers (others are exact); buffers of
            :data:`ERROR_ORDERS` for ``optimizer``.
        b2: Adam's second-moment coefficient in ``[0, 1)`` (Muon: unused).

    Returns:
        ``{buffer: term}`` (float or float64 array, broadcast over ``T`` and the ``M``).

    Raises:
        ValueError: unknown optimizer or buffer, ``T < 1``, ``M < 0``, ``b2`` outside [0, 1).
    """
    _check_optimizer(optimizer)
    if not isinstance(mantissas, Mapping):
        raise TypeError(f"mantissas: expected a mapping {{buffer: M}}, got "
                        f"{type(mantissas).__name__}")
    T = _check_horizon(T)
    b2 = check_beta(b2, "b2", allow_zero=True)
    out = {}
    for buf, M in mantissas.items():
        _check_buffer(optimizer, buf)
        q = np.exp2(-_check_mantissa(M, f"mantissas[{buf!r}]"))
        out[buf] = as_result(_sensitivity(optimizer, buf, b2) * T ** ERROR_ORDERS[optimizer][buf]
                        * q)
    return out


def moment_condition(b1, b2, M_m=math.inf, M_v=math.inf):
    """The paper's condition on Adam's quantized moments: ``b1**2 (1+q_m)**2 < b2 (1-q_v)``.

    Args:
        b1, b2: Adam's moment coefficients in [0, 1).
        M_m, M_v: mantissa bits of ``m`` and ``v`` (``inf``: exact).

    Returns:
        bool (or bool array): whether the condition holds.
    """
    b1 = check_beta(b1, "b1", allow_zero=True)
    b2 = check_beta(b2, "b2", allow_zero=True)
    qm = np.exp2(-_check_mantissa(M_m, "M_m"))
    qv = np.exp2(-_check_mantissa(M_v, "M_v"))
    ok = b1 ** 2 * (1.0 + qm) ** 2 < b2 * (1.0 - qv)
    return bool(ok) if np.ndim(ok) == 0 else ok


def horizon_bound(optimizer, T, mantissas=None, *, lr, b1=0.9, b2=0.999, D=1.0, L=1.0,
                  sigma=1.0):
    """Bound on the average gradient norm after ``T`` steps with quantized buffers.

    ``base(T) * (1 + sum_X s_X T**a_X 2**-M_X)`` with the normalised-momentum ``base`` of the
    module docstring; for Adam, ``inf`` where :func:`moment_condition` fails (the paper's
    analysis does not apply there). Constants are of order one (not the paper's): use it for
    how the bound moves with ``T``, ``M``, ``b1``, ``b2`` and ``lr``.

    Args:
        optimizer: ``"adam"`` or ``"muon"``.
        T: horizon in steps, ``>= 1``.
        mantissas: ``{buffer: M}``; missing buffers are exact (None: all exact).
        lr: learning rate, ``> 0`` (the paper's choice scales it as ``T**-3/4``).
        b1: momentum coefficient in [0, 1) (Muon: its momentum).
        b2: Adam's second-moment coefficient in [0, 1).
        D: initial suboptimality ``f(x_0) - inf f``, ``> 0``.
        L: smoothness constant, ``> 0``.
        sigma: gradient-noise standard deviation, ``>= 0``.

    Returns:
        The bound (float or float64 array).

    Raises:
        ValueError: as :func:`error_terms`, or a non-positive ``lr``, ``D``, ``L``, negative
            ``sigma``.
    """
    mantissas = {} if mantissas is None else mantissas
    terms = error_terms(optimizer, T, mantissas, b2=b2)
    T = _check_horizon(T)
    lr = check_positive(lr, "lr")
    b1 = check_beta(b1, "b1", allow_zero=True)
    D = check_positive(D, "D")
    L = check_positive(L, "L")
    sigma = as_float(sigma, "sigma")
    if np.any(sigma < 0):
        raise ValueError(f"sigma: expected >= 0, got {as_result(sigma)!r}")
    base = (D / (lr * T) + 2.0 * L * lr / (1.0 - b1) + 2.0 * sigma * np.sqrt(1.0 - b1)
            + 2.0 * sigma / ((1.0 - b1) * T))
    total = base * (1.0 + sum((np.asarray(v, np.float64) for v in terms.values()),
                              np.float64(0.0)))
    if optimizer == "adam":
        ok = moment_condition(b1, b2, mantissas.get("m", math.inf), mantissas.get("v", math.inf))
        total = np.where(ok, total, np.inf)
    return as_result(total)


def required_mantissa(optimizer, buffer, T, *, b2=0.999, tol=1.0):
    """The smallest integer ``M`` whose error term is at most ``tol``:
    ``ceil(a_X log2 T + log2 s_X - log2 tol)``, at least 0.

    The slope in ``log2 T`` is the paper's order ``a_X`` (:func:`theory_slope`); the offset
    carries this module's order-one constants and is not a prediction of absolute widths.

    Args:
        optimizer: ``"adam"`` or ``"muon"``.
        buffer: one of :data:`ERROR_ORDERS` ``[optimizer]``.
        T: horizon in steps, ``>= 1``.
        b2: Adam's second-moment coefficient in [0, 1).
        tol: allowed size of the error term relative to the base rate, ``> 0``.

    Returns:
        int (or int64 array).
    """
    _check_optimizer(optimizer)
    _check_buffer(optimizer, buffer)
    T = _check_horizon(T)
    b2 = check_beta(b2, "b2", allow_zero=True)
    tol = check_positive(tol, "tol")
    x = (ERROR_ORDERS[optimizer][buffer] * np.log2(T)
         + np.log2(_sensitivity(optimizer, buffer, b2)) - np.log2(tol))
    # a hair below an integer is that integer (log2 of exact powers of two)
    M = np.maximum(np.ceil(np.round(x, 9)), 0).astype(np.int64)
    return int(M) if M.ndim == 0 else M


def theory_slope(optimizer, buffer):
    """Mantissa bits a buffer needs per doubling of the horizon: the order ``a_X``.

    Args:
        optimizer: ``"adam"`` or ``"muon"``.
        buffer: one of :data:`ERROR_ORDERS` ``[optimizer]``.

    Returns:
        float (2 for Adam's weights and v, 1 for Adam's g and m, 1/2 for Muon's buffers).
    """
    _check_optimizer(optimizer)
    return ERROR_ORDERS[optimizer][_check_buffer(optimizer, buffer)]
