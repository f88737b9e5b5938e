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
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.linalg import solve_discrete_lyapunov

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
]

#: Schemes of docs/theory.md §4 that the linear analysis covers (kahan is not linear-additive).
SCHEMES = ("fp", "master", "naive", "eco", "eco_exact")
#: Schemes with a closed form on the scalar quadratic (docs/theory.md §5.2).
QUADRATIC_SCHEMES = ("master", "naive", "eco")
# Schemes whose update uses the ECO coefficient alpha, undefined at beta = 0.
_ALPHA_SCHEMES = ("eco", "eco_exact")

# Index of the two white-noise inputs of a LinearSystem.
_XI, _ZETA = 0, 1


# --------------------------------------------------------------------------------------------
# Validation helpers
# --------------------------------------------------------------------------------------------

def _as_float(x, name):
    """Return ``x`` as a float64 array (never a view that we write to); reject NaN and inf."""
    arr = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite, got {x!r}")
    return arr


def _out(arr):
    """Python float for 0-d results, float64 array otherwise."""
    arr = np.asarray(arr, dtype=np.float64)
    return float(arr) if arr.ndim == 0 else arr


def _check_positive(x, name):
    arr = _as_float(x, name)
    if np.any(arr <= 0):
        raise ValueError(f"{name} must be > 0, got {x!r}")
    return arr


def _check_nonnegative(x, name):
    arr = _as_float(x, name)
    if np.any(arr < 0):
        raise ValueError(f"{name} must be >= 0, got {x!r}")
    return arr


def _check_beta(beta, name="beta", *, allow_zero=False):
    """beta must lie in (0, 1) (or [0, 1) where alpha is not involved)."""
    arr = _as_float(beta, name)
    low_ok = arr >= 0 if allow_zero else arr > 0
    if not np.all(low_ok & (arr < 1)):
        interval = "[0, 1)" if allow_zero else "(0, 1)"
        raise ValueError(f"{name} must lie in {interval}, got {beta!r}")
    return arr


def _check_scheme(scheme, allowed):
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
    lr = _check_positive(lr, "lr")
    beta = _check_beta(beta)
    return _out(-(1.0 - beta) / (lr * beta))


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
    lr = _check_positive(lr, "lr")
    b1 = _check_beta(b1, "b1")
    if isinstance(step, bool) or not float(step).is_integer() or step < 1:
        raise ValueError(f"step must be an integer >= 1, got {step!r}")
    weight_decay = _check_nonnegative(weight_decay, "weight_decay")
    d = np.asarray(d, dtype=np.float64)
    coefficient = ((1.0 - b1 ** int(step)) / lr) * (-(1.0 - b1) / b1) * d
    if wd_corrected:
        coefficient = coefficient * (1.0 - lr * weight_decay)
    return _out(coefficient)


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
    L = _check_positive(L, "L")
    beta = _check_beta(beta, allow_zero=True)
    gain = 1.0 if heavy_ball else 1.0 - beta
    return _out(2.0 * (1.0 + beta) / (gain * L))


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
    _check_scheme(scheme, QUADRATIC_SCHEMES)
    L = _check_positive(L, "L")
    lr = _check_positive(lr, "lr")
    beta = _check_beta(beta, allow_zero=scheme not in _ALPHA_SCHEMES)
    sigma2 = _check_nonnegative(sigma2, "sigma2")
    limit = 2.0 * (1.0 + beta) / ((1.0 - beta) * L)
    if np.any(lr >= limit):
        raise ValueError(
            f"lr={_out(lr)!r} is outside the stability region: EMA momentum on f = L x^2/2 needs "
            f"lr < 2(1+beta)/((1-beta)L) = {_out(limit)!r}"
        )
    h = L * lr
    if scheme == "master":
        value = sigma2 + h * sigma2 * (1 + beta) / (2 * (1 + beta) - h * (1 - beta))
    elif scheme == "naive":
        value = (sigma2 * ((1 - beta**2) + 2 * beta * h)
                 / (h * (2 * (1 - beta**2) - h * (1 - beta) ** 2)))
    else:
        value = 2 * sigma2 / (2 * (1 - beta**2) - h * (1 - beta) ** 2)
    return _out(value)


# --------------------------------------------------------------------------------------------
# Linear state-space analysis
# --------------------------------------------------------------------------------------------

class LinearSystem(NamedTuple):
    """One eigen-direction of a scheme as a linear state-space recursion.

    ``z_{t+1} = A z_t + B w_t`` and stored iterate ``x_hat_t = C z_t + D w_t``, with
    ``w_t = (xi, zeta)`` white, zero-mean, covariance ``diag(sigma2, grad_noise)`` and
    independent of ``z_t``. Which step's quantization noise ``xi`` is in ``w_t`` depends on the
    scheme (see :func:`linear_system`); ``zeta`` is the noise of the gradient at ``x_hat_t``.

    Attributes:
        A: (n, n) transition matrix.
        B: (n, 2) noise input matrix, columns (quantization noise, gradient noise).
        C: (n,) output row selecting the stored iterate.
        D: (2,) feed-through of the noise into the stored iterate.
        state: names of the n state components.
        scale: (n,) size of one unit of each state component in weight units (1 for weights
            and errors, the effective learning rate for the momentum); the solver works in
            these units because the momentum of ECO variants carries ``e/lr`` terms that would
            otherwise make the Lyapunov equation badly scaled at small lr.
    """

    A: np.ndarray
    B: np.ndarray
    C: np.ndarray
    D: np.ndarray
    state: tuple[str, ...]
    scale: np.ndarray


class StationaryMoments(NamedTuple):
    """Stationary second moments of one eigen-direction (optimum at 0).

    Attributes:
        state: names of the state components (as in :class:`LinearSystem`).
        covariance: (n, n) stationary covariance of the state.
        iterate: stationary ``E[x_hat^2]`` of the stored iterate.
    """

    state: tuple[str, ...]
    covariance: np.ndarray
    iterate: float


def linear_system(scheme, L, lr, beta, *, heavy_ball=False):
    """Build the linear recursion of one scheme on ``f = L x^2 / 2`` (one eigen-direction).

    Quantization is the additive model ``q(y) = y + xi`` (so the error is ``e = -xi``), the
    gradient is ``g_t = L*x_hat_t + zeta_t``, and the momentum is ``m = beta*m + c*g`` with
    ``c = 1 - beta`` (EMA) or ``c = 1`` (heavy ball). ``alpha = eco_alpha(lr, beta)`` for both
    momentum forms (docs/theory.md §4.3). Recursions, one step (``m' = beta*m_t + c*g_t``):

    - ``fp``: ``x_{t+1} = x_t - lr*m'``, ``m_{t+1} = m'``; no quantization.
      State ``(x_hat, m)``.
    - ``master``: ``theta_{t+1} = theta_t - lr*m'`` with ``x_hat_t = theta_t + xi_t``.
      State ``(theta, m)``, ``w_t = (xi_t, zeta_t)``, output ``theta_t + xi_t`` (feed-through).
    - ``naive``: ``x_hat_{t+1} = x_hat_t - lr*m' + xi_{t+1}``, ``m_{t+1} = m'``.
      State ``(x_hat, m)``, ``w_t = (xi_{t+1}, zeta_t)``.
    - ``eco``: as naive, then ``m_{t+1} = m' + alpha*e_{t+1} = m' - alpha*xi_{t+1}``: the same
      noise enters the weight and the momentum in the same step.
    - ``eco_exact``: as naive, then ``m_{t+1} = m' + e_t/lr - e_{t+1}/(lr*beta)`` with
      ``e_{t+1} = -xi_{t+1}``; the previous error is state. State ``(x_hat, m, e)``.
      Mathematically it equals master (implicit master ``x_hat + e``).

    Args:
        scheme: one of :data:`SCHEMES`.
        L: curvature of this direction (any real; stability is checked by the solver).
        lr: effective learning rate of this direction, > 0 (``lr/d`` for a frozen Adam
            denominator ``d``).
        beta: momentum coefficient, in (0, 1) for eco/eco_exact, [0, 1) otherwise.
        heavy_ball: use ``m = beta*m + g``.

    Returns:
        A :class:`LinearSystem`.
    """
    _check_scheme(scheme, SCHEMES)
    L = float(_as_float(L, "L"))
    lr = float(_check_positive(lr, "lr"))
    beta = float(_check_beta(beta, allow_zero=scheme not in _ALPHA_SCHEMES))
    c = 1.0 if heavy_ball else 1.0 - beta

    # Shared (weight, momentum) block: m' = beta m + c L x;  x' = x - lr m'.
    A = np.array([[1.0 - lr * c * L, -lr * beta],
                  [c * L, beta]])
    # Gradient noise enters m' with gain c, hence the weight with -lr*c.
    B = np.array([[0.0, -lr * c],
                  [0.0, c]])
    C = np.array([1.0, 0.0])
    D = np.zeros(2)
    state = ("x_hat", "m")
    scale = np.array([1.0, lr])

    if scheme == "master":
        # g is taken at x_hat_t = theta_t + xi_t: xi_t enters like the weight does.
        B[:, _XI] = [-lr * c * L, c * L]
        D[_XI] = 1.0
        state = ("theta", "m")
    elif scheme == "naive":
        B[:, _XI] = [1.0, 0.0]
    elif scheme == "eco":
        B[:, _XI] = [1.0, -eco_alpha(lr, beta)]
    elif scheme == "eco_exact":
        A = np.block([[A, np.array([[0.0], [1.0 / lr]])],
                      [np.zeros((1, 3))]])
        B = np.vstack([B, np.zeros((1, 2))])
        B[:, _XI] = [1.0, 1.0 / (lr * beta), -1.0]
        C = np.array([1.0, 0.0, 0.0])
        state = ("x_hat", "m", "e")
        scale = np.array([1.0, lr, 1.0])
    return LinearSystem(A=A, B=B, C=C, D=D, state=state, scale=scale)


def _spectral_radius(A):
    return float(np.max(np.abs(np.linalg.eigvals(A))))


def _instability_message(scheme, L, lr_eff, beta, heavy_ball, rho):
    head = (f"scheme {scheme!r} is unstable for L={L!r}, lr/precond={lr_eff!r}, beta={beta!r}: "
            f"spectral radius of the transition matrix is {rho!r} >= 1; ")
    if L <= 0:
        return head + "no learning rate is stable when L <= 0"
    momentum, formula = (("heavy-ball", "2(1+beta)/L") if heavy_ball
                         else ("EMA", "2(1+beta)/((1-beta)L)"))
    limit = float(stability_limit(L, beta, heavy_ball=heavy_ball))
    return head + f"{momentum} momentum needs 0 < lr/precond < {formula} = {limit!r}"


def lyapunov_covariance(scheme, L, lr, beta, *, sigma2=1.0, grad_noise=0.0,
                        heavy_ball=False, precond=1.0):
    """Stationary covariance of one eigen-direction by a discrete Lyapunov equation.

    Solves ``Sigma = A Sigma A^T + B Q B^T`` with ``Q = diag(sigma2, grad_noise)`` for the
    system of :func:`linear_system` (``scipy.linalg.solve_discrete_lyapunov``, in the units of
    ``LinearSystem.scale``), then ``E[x_hat^2] = C Sigma C^T + D Q D^T``.

    A frozen Adam denominator ``precond = d`` turns the step into ``lr*m/d`` and the ECO
    coefficient into ``alpha*d`` (:func:`adam_eco_coefficient` at ``t -> inf`` without weight
    decay), which is SGD with momentum at the effective learning rate ``lr/d``.

    Numerical note: the eco_exact recursion carries ``e/(lr*beta)`` in its momentum, whose
    effect on the weights cancels one step later; the Lyapunov equation of that literal
    recursion is ill-conditioned when ``lr*L`` is small and beta is close to 1 (agreement with
    master to about 1e-10 needs roughly ``lr*L >= 1e-4`` at beta = 0.9 and ``>= 1e-2`` at
    beta = 0.99). The other schemes stay accurate to about 1e-11 down to ``lr*L = 1e-5``.

    Args:
        scheme: one of :data:`SCHEMES`.
        L: curvature of the direction.
        lr: learning rate, > 0.
        beta: momentum coefficient.
        sigma2: quantization-noise variance, >= 0.
        grad_noise: variance of additive gradient noise, >= 0.
        heavy_ball: use ``m = beta*m + g``.
        precond: frozen diagonal preconditioner entry d > 0 (step ``lr*m/d``).

    Returns:
        A :class:`StationaryMoments`.

    Raises:
        ValueError: invalid parameters, or spectral radius of ``A`` >= 1 (the message gives
            the stable learning-rate range).
    """
    sigma2 = float(_check_nonnegative(sigma2, "sigma2"))
    grad_noise = float(_check_nonnegative(grad_noise, "grad_noise"))
    precond = float(_check_positive(precond, "precond"))
    lr_eff = float(_check_positive(lr, "lr")) / precond
    system = linear_system(scheme, L, lr_eff, beta, heavy_ball=heavy_ball)
    rho = _spectral_radius(system.A)
    if not rho < 1.0:
        raise ValueError(_instability_message(scheme, float(L), lr_eff, float(beta),
                                              heavy_ball, rho))
    Q = np.diag([sigma2, grad_noise])
    s = system.scale
    # Solve for u = s * z (every component in weight units), then scale back.
    A_u = system.A * (s[:, None] / s[None, :])
    B_u = system.B * s[:, None]
    cov_u = solve_discrete_lyapunov(A_u, B_u @ Q @ B_u.T)
    cov = cov_u / (s[:, None] * s[None, :])
    cov = 0.5 * (cov + cov.T)
    iterate = float(system.C @ cov @ system.C + system.D @ Q @ system.D)
    return StationaryMoments(state=system.state, covariance=cov, iterate=iterate)


def lyapunov_stationary(scheme, eigenvalues, lr, beta, *, sigma2=1.0, grad_noise=0.0,
                        heavy_ball=False, precond=None):
    """Stationary ``E[(x_hat - x*)^2]`` per eigen-direction of a quadratic.

    For ``f = sum_i eigenvalues[i] * x_i^2 / 2`` with quantization noise i.i.d. across
    coordinates (variance ``sigma2``) and gradient noise i.i.d. across coordinates (variance
    ``grad_noise``), the directions decouple; each is solved by :func:`lyapunov_covariance`.
    ``precond`` (frozen-v Adam, step ``lr*m/d``) is diagonal in the same basis. Agrees with
    :func:`quadratic_stationary` (EMA momentum, no gradient noise, no preconditioner).

    Args:
        scheme: one of :data:`SCHEMES`.
        eigenvalues: curvatures, array-like.
        lr: learning rate, > 0.
        beta: momentum coefficient.
        sigma2: quantization-noise variance, >= 0.
        grad_noise: gradient-noise variance per coordinate, >= 0.
        heavy_ball: use ``m = beta*m + g``.
        precond: None or the positive denominators d, broadcastable to ``eigenvalues``.

    Returns:
        float64 array shaped like ``eigenvalues`` (a float for a scalar).

    Raises:
        ValueError: as :func:`lyapunov_covariance`, for the first unstable direction.
    """
    eigenvalues = _as_float(eigenvalues, "eigenvalues")
    precond = np.ones_like(eigenvalues) if precond is None else _check_positive(precond,
                                                                               "precond")
    eigenvalues, precond = np.broadcast_arrays(eigenvalues, precond)
    out = np.empty(eigenvalues.shape)
    for index in np.ndindex(eigenvalues.shape):
        out[index] = lyapunov_covariance(
            scheme, eigenvalues[index], lr, beta, sigma2=sigma2, grad_noise=grad_noise,
            heavy_ball=heavy_ball, precond=precond[index],
        ).iterate
    return _out(out)


# --------------------------------------------------------------------------------------------
# Convergence floors of the ECO paper (docs/theory.md §5.5, §5.6)
# --------------------------------------------------------------------------------------------

def _check_bound_inputs(L, lr, beta):
    L = _check_positive(L, "L")
    lr = _check_positive(lr, "lr")
    beta = _check_beta(beta)
    if np.any(lr > 1.0 / (2.0 * L)):
        raise ValueError(f"the bound holds for lr <= 1/(2L) = {_out(1.0 / (2.0 * L))!r}, "
                         f"got lr={_out(lr)!r}")
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
    G = _check_nonnegative(G, "G")
    sigma2 = _check_nonnegative(sigma2, "sigma2")
    drift = 4 * lr**2 * beta**2 * L**2 * G**2 / (1 - beta) ** 2
    noise = 4 * L**2 * sigma2 / (1 - beta**2)
    return _out(drift + noise)


def sr_floor_limit(L, sigma2, beta):
    """``lr -> 0`` limit of :func:`sr_floor`: ``4 L^2 sigma2 / (1 - beta^2)``.

    A constant independent of the learning rate (ECO paper, arXiv 2601.22101).
    """
    L = _check_positive(L, "L")
    sigma2 = _check_nonnegative(sigma2, "sigma2")
    beta = _check_beta(beta)
    return _out(4 * L**2 * sigma2 / (1 - beta**2))


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
    gap = _check_nonnegative(f0_minus_fstar, "f0_minus_fstar")
    T = _as_float(T, "T")
    if np.any(T < 1):
        raise ValueError(f"T must be >= 1, got {T!r}")
    floor = sr_floor(L, G, sigma2, lr, beta)
    return _out(4 * gap / (np.asarray(lr, dtype=np.float64) * T) + floor)


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
    G = _check_nonnegative(G, "G")
    delta = _check_nonnegative(delta, "delta")
    alpha = np.asarray(eco_alpha(lr, beta))
    prefactor = 2 * L**2 * lr**2 * beta**2 / (1 - beta) ** 2
    return _out(prefactor * (G + np.abs(alpha) * delta / (1 - beta)) ** 2)


def rtn_floor_limit(L, delta, beta):
    """``lr -> 0`` limit of :func:`rtn_floor`: ``2 L^2 delta^2 / (1 - beta)^2``."""
    L = _check_positive(L, "L")
    delta = _check_nonnegative(delta, "delta")
    beta = _check_beta(beta)
    return _out(2 * L**2 * delta**2 / (1 - beta) ** 2)


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
    step = _check_positive(step, "step")
    return _out(step / 2)
