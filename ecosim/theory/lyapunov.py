"""Every scheme on a quadratic as a linear state-space recursion (docs/theory.md §5.3, §5.4).

On ``f = L x^2 / 2`` (one eigen-direction of a diagonal spectrum) under the additive model of
quantization noise, each scheme's step is ``z_{t+1} = A z_t + B w_t`` driven by white noise
(:func:`linear_system`); its stationary covariance solves a discrete Lyapunov equation
(:func:`lyapunov_covariance`, :func:`lyapunov_stationary`). It reproduces the closed forms of
:mod:`ecosim.theory.closed_forms` and goes beyond them (gradient noise, heavy-ball momentum, frozen-v
Adam preconditioning). :mod:`ecosim.theory` exports every public name of this module.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.linalg import solve_discrete_lyapunov

from .closed_forms import (ALPHA_SCHEMES, SCHEMES, as_float, check_beta, check_nonnegative,
                           check_positive, check_scheme, as_result, eco_alpha, stability_limit)

__all__ = ["LinearSystem", "StationaryMoments", "linear_system", "lyapunov_covariance",
           "lyapunov_stationary"]

# Index of the two white-noise inputs of a LinearSystem.
_XI, _ZETA = 0, 1


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
    check_scheme(scheme, SCHEMES)
    L = float(as_float(L, "L"))
    lr = float(check_positive(lr, "lr"))
    beta = float(check_beta(beta, allow_zero=scheme not in ALPHA_SCHEMES))
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
    sigma2 = float(check_nonnegative(sigma2, "sigma2"))
    grad_noise = float(check_nonnegative(grad_noise, "grad_noise"))
    precond = float(check_positive(precond, "precond"))
    lr_eff = float(check_positive(lr, "lr")) / precond
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
    eigenvalues = as_float(eigenvalues, "eigenvalues")
    precond = np.ones_like(eigenvalues) if precond is None else check_positive(precond,
                                                                               "precond")
    eigenvalues, precond = np.broadcast_arrays(eigenvalues, precond)
    out = np.empty(eigenvalues.shape)
    for index in np.ndindex(eigenvalues.shape):
        out[index] = lyapunov_covariance(
            scheme, eigenvalues[index], lr, beta, sigma2=sigma2, grad_noise=grad_noise,
            heavy_ball=heavy_ball, precond=precond[index],
        ).iterate
    return as_result(out)
