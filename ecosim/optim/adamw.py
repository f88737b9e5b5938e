"""AdamW over quantized weights: fp, master, naive, ECO (memory-free, momentum-exact), exact
error feedback and Kahan.

AdamW as in docs/theory.md §4.5 (bias-corrected, eps outside the square root, decoupled weight
decay; Loshchilov and Hutter, arXiv 1711.05101), with ECO's injection (Nikdan et al.,
arXiv 2601.22101). Step ``t`` (0-based; the bias corrections use ``n = t + 1``), ``lr = lr(t)``,
``g`` the gradient at the stored weights ``theta_hat``:

    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g**2
    d = sqrt(v / (1 - b2**n)) + eps
    theta_tilde = base * (1 - lr * wd) - (lr / (1 - b1**n)) * (m / d)
        base: theta_hat (naive, eco); theta (master); theta_hat + e_prev (eco_exact);
              theta_hat + c (kahan)
    theta_hat = q(theta_tilde)                  <- the only rounding of the weights
    e = theta_tilde - theta_hat

    eco:       m += ((1 - b1**n) / lr) * (1 - 1/b1) * d * e   (element-wise; v unchanged),
               times (1 - lr * wd) with wd_corrected_injection; with schedule_guard the
               lr of the coefficient is L(t), the b1-weighted mean of the later lr (below)
    eco_momentum_exact:
               m += ((1 - b1**n) / lr) * (1 - lr * wd) * d * (e_prev - e / b1),  e_prev = e
               (the first positive-lr step adds the initial error e_prev to base instead)
    eco_exact: e_prev = e        (exact error feedback: theta_hat + e_prev is the master)
    kahan:     c = q_c(e)
    master:    theta = theta_tilde

Why ECO's coefficient: with ``d`` and the bias correction frozen, an offset ``k`` added to ``m``
changes every later update by ``-(lr / (1 - b1**n)) * b1**j * k / d`` (``j = 1, 2, ...``), in
total ``-(lr / (1 - b1**n)) * (b1 / (1 - b1)) * k / d``; setting this to ``+e`` (the error the
write lost) gives the coefficient above. With weight decay each later step also shrinks what
was given back by ``(1 - lr wd)``, which the optional correction anticipates by one step.

Exact ECO for AdamW stores ``e_prev`` and adds it back to the weights (exact error
feedback, docs/theory.md §4.4): ``theta_hat + e_prev`` equals the master weights, so the
stored weights equal the master scheme's with the same keys (up to floating-point round-off).
It removes every approximation of ECO at once, so it says nothing about which one costs.

``eco_momentum_exact`` removes only the first: it stores ``e_prev`` and gives the error back
*through the momentum*, as ECO does. Write ``s = lr / ((1 - b1**n) d)`` (the update is
``s * m``) and ``c = 1 - lr wd``. If the momentum holds the offset ``k = -c e / (b1 s)`` at the
end of a step, the next step's momentum update turns it into ``-c e / s`` and its update gives
back exactly ``c e`` (the decay of ``e`` included), provided ``s`` and ``c`` did not change in
between; adding ``+c e_prev / s`` then removes the offset that was consumed. Hence the
injection ``(c / s) (e_prev - e / b1)``. ECO's memory-free rule is this with ``e_prev``
replaced by ``e`` (and ``c`` by 1 unless ``wd_corrected_injection``): ``(1/s) (1 - 1/b1) e``.
With ``lr``, ``d`` and the bias correction ``1 - b1**n`` constant, the stored weights equal the
master scheme's (tests/test_optim.py); where they are not (every real run) the difference
measures ECO's other approximations: ``d`` and ``lr`` at the step the error is consumed, not
the step it was injected. The momentum holds no offset at the start (``state.pending``): the
first step with ``lr > 0`` adds the initial rounding error ``e_prev`` to ``base``.

Schedule guard (``schedule_guard=True``, scheme ``eco``). ECO's offset is consumed over every
later step, the ``j``-th later one with weight ``b1**j lr(t + j)``; the memory-free
coefficient assumes these rates all equal ``lr(t)``. After a few steps at a tiny rate, the
injected ``e / lr(t)`` is consumed at the peak rate, which gives back ``lr_peak / lr(t)``
times the error (docs/theory.md §4.5). The guard sizes the injection with ``L(t) =
sum_j b1**j lr(t + j) / sum_j b1**j`` (``j = 1..H``, ``b1**H <= 1e-6``, ``H <= 2000``), so that
the total given back is ``e`` whatever the schedule (``d`` and the bias correction still
frozen). When every one of those rates equals ``lr(t)``, ``L(t) = lr(t)`` is used as is, so a
constant rate gives ECO's results bit for bit; when all are 0 nothing is injected (no later
step would give it back).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, Callable, NamedTuple

import numpy as np

from ..core.checks import check_bool, check_positive
from ..core.quantizer import Quantizer
from .base import QuantizedOptimizer
from .policies import check_beta
from .schemes import Scheme, injection

__all__ = ["AdamW", "AdamWState", "adamw", "guard_horizon", "schedule_guard_lr"]


class AdamWState(NamedTuple):
    """State of :class:`AdamW` (immutable; arrays shaped as the params).

    Attributes:
        step: index of the next update (0 after init); the bias corrections use ``step + 1``.
        m, v: first and second moments (on the ``states`` grids when given).
        master: full-precision weights of the quantized parameters (scheme ``"master"``; on
            the ``states["master"]`` grid when given).
        e_prev: last rounding error (schemes ``"eco_exact"``, ``"eco_momentum_exact"``).
        c: Kahan compensation on the compensation grid (scheme ``"kahan"``).
        key: root key of the SR draws.
        pending: ``eco_momentum_exact`` only: True while the momentum holds no offset for
            ``e_prev`` (before the first positive-lr step); that step adds ``e_prev`` to the
            weights directly.
    """

    step: int
    m: Any
    v: Any
    master: Any
    e_prev: Any
    c: Any
    key: int
    pending: bool = False


@dataclasses.dataclass(frozen=True, eq=False, kw_only=True)
class AdamW(QuantizedOptimizer):
    """AdamW whose weight write is quantized by a scheme; see :func:`adamw`."""

    lr: Callable[[int], float]
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0
    scheme: str = "eco"
    weights: Quantizer | Mapping | None = None
    states: Mapping[str, Quantizer] = dataclasses.field(default_factory=dict)
    wd_corrected_injection: bool = False
    init_weights: Quantizer | Mapping | None = None
    prev_scale: bool = False
    schedule_guard: bool = False

    name = "adamw"
    State = AdamWState
    buffers = ("m", "v", "master", "e_prev", "c")

    def __post_init__(self):
        set_ = object.__setattr__
        self._check_fields(("m", "v"), ("b1",))
        set_(self, "b2", check_beta(self.b2, "b2", "fp"))
        eps = check_positive(self.eps, "eps")
        set_(self, "eps", eps)
        set_(self, "wd_corrected_injection",
             check_bool(self.wd_corrected_injection, "wd_corrected_injection"))
        set_(self, "schedule_guard", check_bool(self.schedule_guard, "schedule_guard"))
        if self.schedule_guard and self.scheme_record.after != "inject":
            raise ValueError(f"schedule_guard sizes ECO's memory-free injection: it needs an "
                             f"injecting scheme ('eco'), got scheme={self.scheme!r}")

    @property
    def scheme_record(self) -> Scheme:
        """The scheme's record; ``wd_corrected_injection`` makes an injection decay-corrected."""
        sch = super().scheme_record
        if self.wd_corrected_injection and sch.after == "inject":
            return dataclasses.replace(sch, decay_corrected=True)
        return sch

    def init_param(self, name, p, w, q, ctx) -> dict:
        """Zero moments and the scheme's buffers."""
        return {"m": np.zeros_like(p), "v": np.zeros_like(p),
                **self.init_scheme_buffers(name, p, w, q, ctx)}

    def step_param(self, name, w, g, b, ctx):
        """AdamW's direction ``(lr / bc1) m / d``, the scheme's write, and the error moved
        into the momentum: ECO's injection at the rate ``(bc1 / lr) d``, or the exact offset."""
        q, sch = self._of_param(name)  # the weight quantizer and the scheme
        b1, b2, lr = self.b1, self.b2, ctx.lr
        n = ctx.t + 1
        bc1, bc2 = 1.0 - b1**n, 1.0 - b2**n
        m = np.multiply(b["m"], b1)
        m += (1.0 - b1) * g
        m = self._qstate("m", m, ctx, name)
        v = np.multiply(g, g)
        v *= 1.0 - b2
        v += b2 * b["v"]
        v = self._qstate("v", v, ctx, name)
        out = {"m": m, "v": v}
        held = self.carry_buffers(name, w, q, ctx, out, b)
        if held is not None:  # lr == 0: the weights are left as they are
            return held
        d = np.divide(v, bc2)
        np.sqrt(d, out=d)
        d += self.eps
        tt = np.divide(m, d)
        tt *= lr / bc1  # (lr / (1 - b1^n)) * m / d
        base = sch.base_value(w, b.__getitem__, pending=ctx.pending, linear=False)
        decay = 1.0 - lr * self.weight_decay
        if self.weight_decay:
            base = base * decay
        np.subtract(base, tt, out=tt)  # theta_tilde = base (1 - lr wd) - (lr/bc1) m / d
        new_w, e = self.write_weights(sch, name, w, tt, q, ctx, out)
        if e is None:
            return new_w, out
        if sch.exact:  # eco_momentum_exact: the offset (c / s) (e_prev - e / b1)
            k = np.multiply(e, -1.0 / b1)
            if not ctx.pending:
                k += b["e_prev"]
            k *= d * ((bc1 / lr) * decay)
            out["m"] = self._inject(m, k, ctx, name)
            return new_w, out
        lr_inj = lr if ctx.lr_inject is None else ctx.lr_inject
        if lr_inj != 0.0:  # else no later step writes: nothing would give it back
            k = injection(e, sch.coefficient(bc1 / lr_inj, b1, decay), d)
            out["m"] = self._inject(m, k, ctx, name)
        return new_w, out

    # -- eco_momentum_exact's pending error and the schedule guard ------------------------
    def _init_pending(self, lr0: float | None) -> bool:
        return self.scheme_record.exact == "momentum"

    def _next_pending(self, ctx) -> bool:
        return self.scheme_record.exact == "momentum" and ctx.pending and ctx.lr == 0.0

    def _injection_lr(self, t: int, lr: float) -> float | None:
        """The guard's ``L(t)`` (:func:`schedule_guard_lr`), once a step, for ECO's injection."""
        if not self.schedule_guard or lr == 0.0 or self.scheme_record.after != "inject":
            return None
        return schedule_guard_lr(lr, self.lr_at, t, self.b1)


def guard_horizon(b1: float) -> int:
    """The number ``H`` of later steps the schedule guard looks at: the smallest with
    ``b1**H <= 1e-6``, at least 1 and at most 2000.

    Example:
        >>> guard_horizon(0.9), guard_horizon(0.5), guard_horizon(0.9999)
        (132, 20, 2000)
    """
    b1 = float(b1)
    if not 0.0 < b1 < 1.0:
        raise ValueError(f"b1 must be in (0, 1), got {b1!r}")
    return min(2000, max(1, math.ceil(math.log(1e-6) / math.log(b1))))


def schedule_guard_lr(lr: float, lr_at: Callable[[int], float], t: int, b1: float) -> float:
    """The learning rate ``L(t)`` that sizes ECO's injection under ``schedule_guard=True``.

    ``L(t) = sum_j b1**j lr(t + j) / sum_j b1**j`` over ``j = 1 .. H`` (:func:`guard_horizon`),
    in float64: the weighted mean of the rates at which the injected offset is consumed (see
    :mod:`ecosim.optim.adamw`). When every one of those rates equals ``lr`` (this step's),
    ``lr`` itself is returned, so a constant rate gives ECO's coefficient bit for bit. The
    NumPy :class:`AdamW` and the torch :class:`~ecosim.torch.ECOAdamW` both call this.

    Args:
        lr: the learning rate of step ``t`` (a float).
        lr_at: ``step -> learning rate`` of any later step (a float, finite and >= 0).
        t: the step being applied (0-based).
        b1: the momentum coefficient, in (0, 1).

    Example:
        >>> schedule_guard_lr(1e-3, lambda s: 1e-3, 5, 0.9)
        0.001
        >>> round(schedule_guard_lr(1e-6, lambda s: 1e-6 if s < 1 else 1e-3, 0, 0.9), 6)
        0.001
    """
    horizon = guard_horizon(b1)
    rates = [lr_at(t + j) for j in range(1, horizon + 1)]
    if all(r == lr for r in rates):
        return lr
    w = b1 ** np.arange(1, horizon + 1, dtype=np.float64)
    return float(np.dot(w, rates) / w.sum())


def adamw(lr: float | Callable[[int], float], b1: float = 0.9, b2: float = 0.999,
          eps: float = 1e-8, weight_decay: float = 0.0, *, scheme: str = "eco",
          weights: Quantizer | Mapping | None = None, states: Mapping | None = None,
          wd_corrected_injection: bool = False, schedule_guard: bool = False) -> AdamW:
    """AdamW whose stored weights are quantized, with a weight-update scheme.

    Update of step ``t`` (``n = t + 1``, ``lr = lr(t)``, ``g`` the gradient at the stored
    weights ``theta_hat``)::

        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g**2
        d = sqrt(v / (1 - b2**n)) + eps
        theta_tilde = theta_hat * (1 - lr * wd) - (lr / (1 - b1**n)) * m / d
            # master: theta instead of theta_hat; eco_exact: theta_hat + e_prev;
            # kahan: theta_hat + c
        theta_hat = q(theta_tilde)           # the weight write: the only rounding of weights
        e = theta_tilde - theta_hat
        eco:       m += ((1 - b1**n) / lr) * (1 - 1/b1) * d * e    # [* (1 - lr wd)]
        eco_momentum_exact: m += ((1 - b1**n) / lr) (1 - lr wd) d (e_prev - e / b1); e_prev = e
        eco_exact: e_prev = e
        kahan:     c = q_c(e)
        master:    theta = theta_tilde

    ``q`` is ``weights`` (RTN or SR as the Quantizer says; SR key
    ``fold_in(state.key, t, name)``). With ``states={"m": ..., "v": ...}`` the moments are
    stored in low precision: rounded when written after the moment updates, and ``m`` again
    after ECO's injection. ``states={"g": ...}`` rounds the gradient on entry, and
    ``states={"master": ...}`` (scheme ``"master"``) stores the master copy in that format.
    Derivations in :mod:`ecosim.optim.adamw`.

    Args:
        lr: learning rate (float > 0) or schedule ``t -> lr``.
        b1, b2: moment coefficients in [0, 1); ``b1`` in (0, 1) for ``eco``/``eco_exact``.
        eps: added to the root of the second moment, > 0.
        weight_decay: decoupled weight decay ``wd`` (multiplies the weights by ``1 - lr wd``).
        scheme: one of ``ADAMW_SCHEMES``, the records of :mod:`ecosim.optim.schemes` that
            AdamW runs: ``"fp"``, ``"master"``, ``"naive"``, ``"eco"``, ``"eco_exact"``,
            ``"kahan"``, and the AdamW-only ones (``"eco_momentum_exact"``, see
            :mod:`ecosim.optim.adamw`).
        weights: a :class:`~ecosim.Quantizer`, or a dict name -> Quantizer or None (None or
            absent: the parameter stays in full precision); None exactly for ``"fp"``.
        states: per-buffer quantization points ``{"g": ..., "m": ..., "v": ...,
            "master": ...}``: Quantizers, format names or ``(format, mode)`` pairs (see
            :func:`~ecosim.optim.base.state_quantizer`).
        wd_corrected_injection: multiply ECO's coefficient by ``(1 - lr wd)``.
        schedule_guard: size ECO's injection with the ``b1``-weighted mean of the later
            learning rates instead of ``lr(t)`` (scheme ``"eco"``; identical results at a
            constant rate; protects warm-ups that start from a tiny rate).

    Returns:
        An :class:`AdamW` with pure ``init(params, key)`` and ``step(params, grads, state)``.

    Example:
        >>> import numpy as np
        >>> from ecosim import Quantizer
        >>> q = Quantizer("e4m3", granularity="row")     # FP8, one absmax scale per row
        >>> g = np.array([[0.0, 1.0, 1.0]], np.float32)
        >>> for scheme in ("naive", "eco", "master"):
        ...     opt = adamw(1e-3, scheme=scheme, weights=q)
        ...     w, state = opt.init(np.array([[1.0, 0.3, -0.2]], np.float32), key=0)
        ...     for _ in range(200):        # every update (~1e-3) is below half a grid step
        ...         w, state = opt.step(w, g, state)
        ...     print(scheme, w)
        naive [[ 1.          0.2857143  -0.19642858]]
        eco [[ 1.         0.1607143 -0.2857143]]
        master [[ 1.          0.09821429 -0.39285716]]
    """
    return AdamW(lr=lr, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay, scheme=scheme,
                 weights=weights, states=states or {},
                 wd_corrected_injection=wd_corrected_injection, schedule_guard=schedule_guard)
