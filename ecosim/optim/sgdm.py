"""SGD with momentum over quantized weights: fp, master, naive, ECO, exact ECO and Kahan.

The update rules (docs/theory.md §4.2; ECO: Nikdan et al., arXiv 2601.22101). With ``g`` the
gradient at the stored weights ``theta_hat`` (plus ``weight_decay * theta_hat``, coupled L2 as
in ``torch.optim.SGD``), ``lr = lr(t)``:

    m       = beta * m + (1 - beta) * g          (EMA form; heavy_ball: beta * m + g)
    u       = m                                  (nesterov: beta * m + (1 - beta) * g,
                                                  heavy_ball nesterov: beta * m + g)
    theta_tilde = base - lr * u                  base: theta_hat; master: theta;
                                                  kahan: theta_hat + c
    theta_hat   = q(theta_tilde)                 <- the only rounding of the weights
    e           = theta_tilde - theta_hat        (exact: the two are close, Sterbenz)

and then, per scheme, ``master``: ``theta = theta_tilde`` (kept in full precision);
``eco``: ``m += alpha * e`` with ``alpha = (1/lr)(1 - 1/beta)`` (divided once more by ``beta``
with Nesterov); ``eco_exact``: ``m += e_prev / lr(t) - e / (beta * lr(t+1))`` (Nesterov:
``e_prev / (beta lr(t)) - e / (beta^2 lr(t+1))``), ``e_prev = e``; ``kahan``:
``c = q_c(e)``.

Why these coefficients: ``theta_tilde = theta_hat - lr * u``, so a momentum offset ``k`` added
at the end of step ``t`` changes the later updates by ``-lr * gain * beta**j * k``
(``j = 0, 1, ...``), with ``gain = beta`` (one momentum update) or ``beta**2`` (Nesterov's
look-ahead multiplies once more). With a constant ``lr`` the total is
``-lr * gain / (1 - beta) * k``. The write lost ``e`` (``theta_hat = theta_tilde - e``); ECO
gives it back in full by choosing ``k = alpha * e`` with ``alpha = -(1 - beta) / (lr * gain)``,
which is ``(1/lr)(1 - 1/beta)`` without Nesterov. Equivalently the virtual sequence

    x_t = theta_hat_t - (lr * gain / (1 - beta)) * m_t

follows plain gradient descent exactly: ``x_{t+1} = x_t - lr * grad f(theta_hat_t)``
(``lr / (1 - beta)`` in the heavy-ball form); see :meth:`SGDM.virtual`.

Exact ECO (derivation). Let ``theta_t`` and ``m^M_t`` be the master scheme's weights and
momentum (its gradients are taken at its stored weights ``q(theta_t)``). Keep the invariant

    theta_hat_t = q(theta_t),   e_t = theta_t - theta_hat_t,   m_t = m^M_t - e_t / (gain lr(t)).

The momentum update multiplies the offset by ``beta`` (and Nesterov's look-ahead by ``beta``
again), so ``u_t = u^M_t - e_t / lr(t)`` and ``theta_hat_t - lr(t) u_t = theta_t - lr(t) u^M_t
= theta_{t+1}``: the master's next weight. Rounding it with the same SR key gives the same
``theta_hat_{t+1}`` and ``e_{t+1}``. Restoring the invariant moves the offset of ``m`` from
``-beta e_t / (gain lr(t))`` to ``-e_{t+1} / (gain lr(t+1))``, which is the injection
``m += (beta / gain) e_t / lr(t) - e_{t+1} / (gain lr(t+1))``. The new error is divided by the
*next* step's learning rate because that is the step whose update must give it back; with a
constant rate: ``m + e_prev/lr - e/(lr beta)`` (docs/theory.md §4.4). Initialisation:
``e_0 = theta_0 - q(theta_0)``, ``m_0 = -e_0 / (gain lr(0))``. The identity holds in exact
arithmetic. In floating point ``theta_tilde`` differs from the master's by round-off, so a code
could flip where a value sits on a rounding boundary; ``tests/test_optim.py`` measures it: on
fixed-scale grids the stored weights were bit-identical over 1000 steps, and with absmax scales
the codes were identical while ``max|theta_tilde| / rho`` differed in its last bit.

Zero learning rates: when ``lr(t+1) == 0`` the offset ``-e/(gain * 0)`` does not exist. The
error is then kept *pending* (``state.pending``): the momentum carries no offset (it equals the
master's), and the first later step with ``lr > 0`` adds ``e_prev`` directly to
``theta_tilde``. This keeps the identity with master weights under warmup-from-zero schedules.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Callable, NamedTuple

import numpy as np

from ..core.checks import check_bool
from ..core.quantizer import Quantizer
from .base import QuantizedOptimizer, StepContext
from .schemes import Scheme, get, injection

__all__ = ["SGDM", "SGDMState", "sgdm"]


class SGDMState(NamedTuple):
    """State of :class:`SGDM` (immutable; arrays shaped as the params).

    Attributes:
        step: index of the next update (0 after init).
        m: momentum, params-shaped (on the ``states["m"]`` grid when given).
        master: full-precision weights of the quantized parameters (scheme ``"master"``; on
            the ``states["master"]`` grid when given), else None. Parameters left in full
            precision are their own master.
        e_prev: the last rounding error ``e`` (scheme ``"eco_exact"``), else None.
        c: the Kahan compensation, on the compensation grid (scheme ``"kahan"``), else None.
        pending: ``eco_exact`` only: True when ``e_prev`` has not been moved into ``m`` (the
            next positive-lr step adds it to the weights directly); see the module docstring.
        key: root key of the SR draws.
    """

    step: int
    m: Any
    master: Any
    e_prev: Any
    c: Any
    pending: bool
    key: int


@dataclasses.dataclass(frozen=True, eq=False, kw_only=True)
class SGDM(QuantizedOptimizer):
    """SGD with momentum whose weight write is quantized by a scheme; see :func:`sgdm`."""

    lr: Callable[[int], float]
    beta: float = 0.9
    scheme: str = "eco"
    weights: Quantizer | Mapping | None = None
    weight_decay: float = 0.0
    nesterov: bool = False
    heavy_ball: bool = False
    states: Mapping[str, Quantizer] = dataclasses.field(default_factory=dict)
    init_weights: Quantizer | Mapping | None = None
    prev_scale: bool = False

    name = "sgdm"
    State = SGDMState
    buffers = ("m", "master", "e_prev", "c")
    linear = True  # the update is linear in m: exact ECO carries its error in the momentum

    def __post_init__(self):
        self._check_fields(("m",), ("beta",))
        object.__setattr__(self, "nesterov", check_bool(self.nesterov, "nesterov"))
        object.__setattr__(self, "heavy_ball", check_bool(self.heavy_ball, "heavy_ball"))

    # -- coefficients ------------------------------------------------------------------------
    @property
    def gain(self) -> float:
        """How much of a momentum offset reaches the next update: beta (beta**2 Nesterov)."""
        return self.beta * self.beta if self.nesterov else self.beta

    def alpha(self, lr: float, scheme: Scheme | None = None) -> float:
        """ECO's injection coefficient ``(1/lr)(1 - 1/beta)`` (over beta again with Nesterov):
        ``scheme``'s coefficient (default ``eco``'s) at the rate ``1/lr``."""
        a = (scheme or get("eco")).coefficient(1.0 / lr, self.beta)
        return a / self.beta if self.nesterov else a

    def virtual_coefficient(self, lr: float) -> float:
        """``c`` of the virtual sequence ``x = theta_hat - c m``: ``lr * gain / (1 - beta)``."""
        return lr * self.gain / (1.0 - self.beta)

    def virtual(self, params: Any, state: SGDMState) -> Any:
        """The virtual iterate ``theta_hat - c * m`` with ``c`` at the learning rate of step
        ``state.step`` (exactly gradient descent for ``eco`` with a constant lr)."""
        c = self.virtual_coefficient(self.lr_at(state.step))
        if isinstance(params, Mapping):
            return {k: params[k] - c * state.m[k] for k in params}
        return params - c * state.m

    @property
    def _needs_next_lr(self) -> bool:
        return bool(self.scheme_record.exact)

    def _next_pending(self, ctx: StepContext) -> bool:
        if not self.scheme_record.exact:
            return False
        if ctx.lr == 0.0:
            return ctx.pending
        return ctx.lr_next == 0.0

    # -- per-parameter numerics --------------------------------------------------------------
    def init_param(self, name, p, w, q, ctx) -> dict:
        """Zero momentum and the scheme's buffers; exact ECO's ``m_0 = -e_0 / (gain lr_0)``."""
        out = {"m": np.zeros_like(p), **self.init_scheme_buffers(name, p, w, q, ctx)}
        if self.scheme_object(name).exact and not ctx.pending:  # m_0 = -e_0 / (gain lr_0)
            m0 = out["e_prev"] * (-1.0 / (self.gain * ctx.lr))
            out["m"] = self._qstate("m", m0, ctx, name, "init_m")
        return out

    def step_param(self, name, w, g, b, ctx):
        """SGDM's direction ``u`` and ECO gain ``alpha(lr)``; the scheme does the rest."""
        q, sch = self._of_param(name)  # the weight quantizer and the scheme
        beta, lr = self.beta, ctx.lr
        if self.weight_decay:
            g = g + self.weight_decay * w  # coupled L2 at the stored weights
        m, u, out, held = momentum_step(self, name, w, g, b, q, ctx, beta,
                                        nesterov=self.nesterov, heavy_ball=self.heavy_ball)
        if held is not None:  # lr == 0: the weights are left as they are
            return held
        base = sch.base_value(w, b.__getitem__, pending=ctx.pending, linear=True)
        tt = np.multiply(u, -lr)
        tt += base  # theta_tilde = base - lr * u
        new_w, e = self.write_weights(sch, name, w, tt, q, ctx, out)
        if e is not None:  # the momentum takes the error: exactly, or by ECO's injection
            out["m"] = (self._exact_injection(m, b["e_prev"], e, ctx, name) if sch.exact
                        else self._inject(m, injection(e, self.alpha(lr, sch)), ctx, name))
        return new_w, out

    def _exact_injection(self, m, e_prev, e, ctx, name):
        """Exact ECO: ``m += e_prev beta / (gain lr(t)) - e / (gain lr(t+1))`` (module
        docstring), the first term only when the error is not pending, the second only when
        ``lr(t+1) > 0``."""
        if not ctx.pending:
            m += e_prev * (self.beta / (self.gain * ctx.lr))
        if ctx.lr_next > 0.0:
            m -= e * (1.0 / (self.gain * ctx.lr_next))
        return self._qstate("m", m, ctx, name, "m_inject")


def momentum_step(opt: QuantizedOptimizer, name: str, w: np.ndarray, g: np.ndarray, b: dict,
                  q: Quantizer | None, ctx: StepContext, beta: float, *, nesterov: bool,
                  heavy_ball: bool = False) -> tuple:
    """The momentum part of an SGDM or Muon step on parameter ``name``.

    ``m = beta m + (1 - beta) g`` (heavy ball: ``+ g``) stored in ``m``'s format (SR tag
    ``"m"``), the direction ``n = beta m + (1 - beta) g`` (Nesterov; heavy ball ``+ g``) or
    ``m``, and the scheme's carried buffers (:meth:`QuantizedOptimizer.carry_buffers`).

    Returns:
        ``(m, n, out, held)``: ``out`` the new buffers so far, ``held`` the step's result when
        its rate is 0 (the weights left as they are), else None.
    """
    m = np.multiply(b["m"], beta)
    m += g if heavy_ball else (1.0 - beta) * g
    m = opt._qstate("m", m, ctx, name)
    if nesterov:
        n = np.multiply(m, beta)
        n += g if heavy_ball else (1.0 - beta) * g
    else:
        n = m
    out = {"m": m}
    return m, n, out, opt.carry_buffers(name, w, q, ctx, out, b)


def sgdm(lr: float | Callable[[int], float], beta: float = 0.9, *, scheme: str = "eco",
         weights: Quantizer | Mapping | None = None, weight_decay: float = 0.0,
         nesterov: bool = False, heavy_ball: bool = False,
         states: Mapping | None = None) -> SGDM:
    """SGD with momentum whose stored weights are quantized, with a weight-update scheme.

    Update of step ``t`` (``lr = lr(t)``, ``g`` the gradient at the stored weights
    ``theta_hat``, plus ``weight_decay * theta_hat``)::

        m = beta * m + (1 - beta) * g        # heavy_ball=True: m = beta * m + g
        u = m                                # nesterov=True: u = beta * m + (1 - beta) * g
        theta_tilde = theta_hat - lr * u     # master: theta - lr * u;  kahan: theta_hat + c - lr u
        theta_hat = q(theta_tilde)           # the weight write: the only rounding of the weights
        e = theta_tilde - theta_hat
        eco:        m += (1/lr) * (1 - 1/beta) * e           (Nesterov: one more 1/beta)
        eco_exact:  m += e_prev/lr(t) - e/(beta*lr(t+1));  e_prev = e
        kahan:      c = q_c(e)
        master:     theta = theta_tilde

    ``q`` is ``weights`` (RTN or SR as the Quantizer says; SR key
    ``fold_in(state.key, t, name)``). With ``states={"m": ...}`` the momentum is stored in low
    precision: it is rounded when written after the momentum update and again after ECO's
    injection. ``states={"g": ...}`` rounds the gradient on entry (before weight decay), and
    ``states={"master": ...}`` (scheme ``"master"``) stores the master copy in that format.
    The derivation of the coefficients and of exact ECO is in the module docstring of
    :mod:`ecosim.optim.sgdm`.

    Args:
        lr: learning rate (float > 0) or schedule ``t -> lr`` (see :func:`as_schedule`).
        beta: momentum coefficient, in [0, 1); (0, 1) for ``eco``/``eco_exact``.
        scheme: one of ``"fp"``, ``"master"``, ``"naive"``, ``"eco"``, ``"eco_exact"``,
            ``"kahan"``.
        weights: a :class:`~ecosim.Quantizer` for every parameter, or a dict name -> Quantizer
            or None (None, or a name not in the dict: that parameter stays in full precision and
            is updated like ``"fp"``); must be None exactly when ``scheme == "fp"``.
        weight_decay: coupled L2 coefficient (added to the gradient at ``theta_hat``).
        nesterov: Nesterov look-ahead.
        heavy_ball: undamped momentum ``m = beta m + g`` (ECO keeps the same alpha).
        states: per-buffer quantization points ``{"g": ..., "m": ..., "master": ...}``, each
            a Quantizer, a format name or a ``(format, mode)`` pair (see
            :func:`~ecosim.optim.base.state_quantizer`).

    Returns:
        An :class:`SGDM` with pure ``init(params, key)`` and ``step(params, grads, state)``.

    Raises:
        ValueError: ECO with ``lr <= 0`` (constant) or ``beta`` outside (0, 1); an unknown
            scheme; weights given with ``"fp"`` or missing otherwise.

    Example:
        >>> import numpy as np
        >>> from ecosim import Quantizer
        >>> q = Quantizer("int8", scale=2.0**-4)          # a fixed grid of step 1/16
        >>> opt = sgdm(0.1, 0.9, scheme="eco", weights=q)
        >>> w, state = opt.init(np.array([1.0]), key=0)
        >>> for _ in range(20):                          # every update is below half a step
        ...     w, state = opt.step(w, np.array([0.2]), state)
        >>> w                                            # naive rounding stays at 1.0
        array([0.875])
    """
    return SGDM(lr=lr, beta=beta, scheme=scheme, weights=weights, weight_decay=weight_decay,
                nesterov=nesterov, heavy_ball=heavy_ball, states=states or {})
