"""Closed forms of ecosim's theory (docs/theory.md §4, §5.2), with the input checks they share
with :mod:`ecosim.theory.lyapunov` and the bounds of :mod:`ecosim.theory`: the ECO momentum-injection
coefficients (:func:`eco_alpha`, :func:`adam_eco_coefficient`), the stability limit of SGD with
momentum and the stationary second moment of the stored iterate on the scalar quadratic
``f = L x^2 / 2`` (:func:`stability_limit`, :func:`quadratic_stationary`).

Everything is computed in float64. Scalar inputs give Python floats; array inputs broadcast
and give float64 arrays. :mod:`ecosim.theory` exports every public name of this module.
"""

from __future__ import annotations

import numpy as np

__all__ = ["SCHEMES", "QUADRATIC_SCHEMES", "eco_alpha", "adam_eco_coefficient",
           "stability_limit", "quadratic_stationary"]

#: Schemes of docs/theory.md §4 that the linear analysis covers (kahan is not linear-additive).
SCHEMES = ("fp", "master", "naive", "eco", "eco_exact")
#: Schemes with a closed form on the scalar quadratic (docs/theory.md §5.2).
QUADRATIC_SCHEMES = ("master", "naive", "eco")
# Schemes whose update uses the ECO coefficient alpha, undefined at beta = 0.
ALPHA_SCHEMES = ("eco", "eco_exact")


# --------------------------------------------------------------------------------------------
# Validation helpers
# --------------------------------------------------------------------------------------------

def as_float(x, name):
    """Return ``x`` as a float64 array (never a view that we write to); reject NaN and inf."""
    arr = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite, got {x!r}")
    return arr


def as_result(arr):
    """Python float for 0-d results, float64 array otherwise."""
    arr = np.asarray(arr, dtype=np.float64)
    return float(arr) if arr.ndim == 0 else arr


def check_positive(x, name):
    arr = as_float(x, name)
    if np.any(arr <= 0):
        raise ValueError(f"{name} must be > 0, got {x!r}")
    return arr


def check_nonnegative(x, name):
    arr = as_float(x, name)
    if np.any(arr < 0):
        raise ValueError(f"{name} must be >= 0, got {x!r}")
    return arr


def check_beta(beta, name="beta", *, allow_zero=False):
    """beta must lie in (0, 1) (or [0, 1) where alpha is not involved)."""
    arr = as_float(beta, name)
    low_ok = arr >= 0 if allow_zero else arr > 0
    if not np.all(low_ok & (arr < 1)):
        interval = "[0, 1)" if allow_zero else "(0, 1)"
        raise ValueError(f"{name} must lie in {interval}, got {beta!r}")
    return arr


def check_scheme(scheme, allowed):
    if scheme not in allowed:
        raise ValueError(f"unknown scheme {scheme!r}; expected one of {allowed}")


# --------------------------------------------------------------------------------------------
# ECO coefficients (docs/theory.md §4.3, §4.5)
# --------------------------------------------------------------------------------------------

def eco_alpha(lr, beta):
    """ECO momentum-injection coefficient for SGD with momentum.

    After the quantized write ``theta_hat <- q(theta_tilde)`` with error
    ``e = theta_tilde - q(theta_tilde)``, ECO sets ``m <- m + alpha * e`` with::

        alpha = (1/lr) * (1 - 1/beta) = -(1 - beta) / (lr * beta)

    (ECO paper, arXiv 2601.22101). It is computed in the second form, which has no
    cancellation. It is what makes the virtual sequence
    ``theta_hat - (lr*beta/(1-beta)) * m`` follow plain gradient descent exactly.

    Args:
        lr: learning rate of the step, > 0.
        beta: momentum coefficient, in (0, 1).

    Returns:
        alpha (negative), a float for scalar inputs.

    Raises:
        ValueError: lr <= 0 or beta outside (0, 1): alpha is undefined there.

    Example:
        >>> eco_alpha(0.1, 0.5)
        -10.0
    """
    lr = check_positive(lr, "lr")
    beta = check_beta(beta)
    return as_result(-(1.0 - beta) / (lr * beta))


def adam_eco_coefficient(lr, b1, step, d, *, weight_decay=0.0, wd_corrected=False):
    """Element-wise ECO coefficient for bias-corrected AdamW.

    With ``d = sqrt(v / (1 - b2**t)) + eps`` (the denominator of the Adam step at step ``t``),
    ECO injects ``m <- m + c * e`` with::

        c = ((1 - b1**t) / lr) * (1 - 1/b1) * d                 (plain rule)
        c = ((1 - b1**t) / lr) * (1 - 1/b1) * d * (1 - lr*wd)   (wd_corrected=True)

    (ECO paper, arXiv 2601.22101; docs/theory.md §4.5). ``v`` is not changed by ECO.

    Args:
        lr: learning rate of this step, > 0.
        b1: first-moment coefficient, in (0, 1).
        step: the step count t >= 1 used in the bias corrections.
        d: the Adam denominator, array-like (not modified).
        weight_decay: decoupled weight decay, >= 0; used only when ``wd_corrected``.
        wd_corrected: multiply by ``(1 - lr*weight_decay)``.

    Returns:
        float64 array of d's shape (a float for scalar d).

    Raises:
        ValueError: lr <= 0, b1 outside (0, 1), step < 1, weight_decay < 0.
    """
    lr = check_positive(lr, "lr")
    b1 = check_beta(b1, "b1")
    if isinstance(step, bool) or not float(step).is_integer() or step < 1:
        raise ValueError(f"step must be an integer >= 1, got {step!r}")
    weight_decay = check_nonnegative(weight_decay, "weight_decay")
    d = np.asarray(d, dtype=np.float64)
    coefficient = ((1.0 - b1 ** int(step)) / lr) * (-(1.0 - b1) / b1) * d
    if wd_corrected:
        coefficient = coefficient * (1.0 - lr * weight_decay)
    return as_result(coefficient)


# --------------------------------------------------------------------------------------------
# Closed forms on the scalar quadratic (docs/theory.md §5.2)
# --------------------------------------------------------------------------------------------

def stability_limit(L, beta, *, heavy_ball=False):
    """Largest stable learning rate of SGD with momentum on ``f = L x^2 / 2``.

    The transition matrix of ``(x, m)`` has determinant ``beta`` and trace
    ``1 + beta - lr*c*L`` (``c = 1 - beta`` for EMA momentum, ``c = 1`` for heavy ball);
    Jury's criterion gives stability iff ``0 < lr*c*L < 2*(1 + beta)``::

        EMA:        lr < 2 (1 + beta) / ((1 - beta) L)
        heavy ball: lr < 2 (1 + beta) / L

    The same limit holds for every scheme of docs/theory.md §4 (quantization only adds noise).

    Args:
        L: curvature, > 0.
        beta: momentum coefficient, in [0, 1).
        heavy_ball: momentum ``m = beta*m + g`` instead of the EMA form.

    Returns:
        The supremum of the stable learning rates.
    """
    L = check_positive(L, "L")
    beta = check_beta(beta, allow_zero=True)
    gain = 1.0 if heavy_ball else 1.0 - beta
    return as_result(2.0 * (1.0 + beta) / (gain * L))


def quadratic_stationary(scheme, L, lr, beta, sigma2):
    """Closed-form stationary ``E[x_hat^2]`` on ``f = L x^2 / 2`` under additive noise.

    Model (docs/theory.md §5.2, ECO paper's tightness example): optimum 0, EMA momentum
    ``m = beta*m + (1-beta)*g`` with ``g = L*x_hat``, and every quantized write is
    ``q(y) = y + xi`` with i.i.d. zero-mean ``xi`` of variance ``sigma2``. With ``h = L*lr``::

        master: sigma2 + h*sigma2*(1+beta) / (2(1+beta) - h(1-beta))           -> sigma2
        naive:  sigma2 * ((1-beta^2) + 2 beta h) / (h (2(1-beta^2) - h(1-beta)^2))
                                                        ~ sigma2 / (2 L lr)  as lr -> 0
        eco:    2 sigma2 / (2(1-beta^2) - h(1-beta)^2)                 -> sigma2/(1-beta^2)

    valid for ``0 < lr < 2(1+beta)/((1-beta)L)`` (:func:`stability_limit`). ECO's floor is
    worse than master weights by the factor ``1/(1-beta^2)`` and no more; naive removal
    grows like ``1/lr``. :func:`lyapunov_stationary` reproduces these values.

    Args:
        scheme: "master", "naive" or "eco".
        L: curvature, > 0.
        lr: learning rate, inside the stability region.
        beta: momentum coefficient, in (0, 1) for "eco", [0, 1) otherwise.
        sigma2: quantization-noise variance, >= 0.

    Returns:
        The stationary second moment of the stored iterate (broadcast over array inputs).

    Raises:
        ValueError: unknown scheme, invalid parameter, or lr outside the stability region
            (the message states the limit).
    """
    check_scheme(scheme, QUADRATIC_SCHEMES)
    L = check_positive(L, "L")
    lr = check_positive(lr, "lr")
    beta = check_beta(beta, allow_zero=scheme not in ALPHA_SCHEMES)
    sigma2 = check_nonnegative(sigma2, "sigma2")
    limit = 2.0 * (1.0 + beta) / ((1.0 - beta) * L)
    if np.any(lr >= limit):
        raise ValueError(
            f"lr={as_result(lr)!r} is outside the stability region: EMA momentum on f = L x^2/2 needs "
            f"lr < 2(1+beta)/((1-beta)L) = {as_result(limit)!r}"
        )
    h = L * lr
    if scheme == "master":
        value = sigma2 + h * sigma2 * (1 + beta) / (2 * (1 + beta) - h * (1 - beta))
    elif scheme == "naive":
        value = (sigma2 * ((1 - beta**2) + 2 * beta * h)
                 / (h * (2 * (1 - beta**2) - h * (1 - beta) ** 2)))
    else:
        value = 2 * sigma2 / (2 * (1 - beta**2) - h * (1 - beta) ** 2)
    return as_result(value)
