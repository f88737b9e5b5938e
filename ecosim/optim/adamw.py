"""AdamW over quantized weights: fp, master, naive, ECO, exact error feedback and Kahan.

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
               times (1 - lr * wd) with wd_corrected_injection
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
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Callable, NamedTuple

import numpy as np

from .._checks import check_bool
from ..quantizer import Quantizer
from .base import (
    QuantizedOptimizer,
    _check_beta,
    _check_real,
    _make_schedule,
    _resolve_weights,
    resolve_states,
)

__all__ = ["AdamW", "AdamWState", "adamw"]


class AdamWState(NamedTuple):
    """State of :class:`AdamW` (immutable; arrays shaped as the params).

    Attributes:
        step: index of the next update (0 after init); the bias corrections use ``step + 1``.
        m, v: first and second moments (on the ``states`` grids when given).
        master: full-precision weights of the quantized parameters (scheme ``"master"``; on
            the ``states["master"]`` grid when given).
        e_prev: last rounding error (scheme ``"eco_exact"``).
        c: Kahan compensation on the compensation grid (scheme ``"kahan"``).
        key: root key of the SR draws.
    """

    step: int
    m: Any
    v: Any
    master: Any
    e_prev: Any
    c: Any
    key: int


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

    name = "adamw"
    State = AdamWState
    buffers = ("m", "v", "master", "e_prev", "c")
    _moment_names = ("m", "v")

    def __post_init__(self):
        set_ = object.__setattr__
        set_(self, "weights", _resolve_weights(self.weights, self.scheme))
        if self.init_weights is not None:
            set_(self, "init_weights", _resolve_weights(self.init_weights, self.scheme))
        set_(self, "lr", _make_schedule(self.lr, self.scheme))
        set_(self, "b1", _check_beta(self.b1, "b1", self.scheme))
        set_(self, "b2", _check_beta(self.b2, "b2", "fp"))
        eps = _check_real(self.eps, "eps")
        if eps <= 0:
            raise ValueError(f"eps must be > 0 (it keeps m / d finite when v == 0), got {eps!r}")
        set_(self, "eps", eps)
        wd = _check_real(self.weight_decay, "weight_decay")
        if wd < 0:
            raise ValueError(f"weight_decay must be >= 0, got {wd!r}")
        set_(self, "weight_decay", wd)
        set_(self, "wd_corrected_injection",
             check_bool(self.wd_corrected_injection, "wd_corrected_injection"))
        set_(self, "prev_scale", check_bool(self.prev_scale, "prev_scale"))
        set_(self, "states", resolve_states(self.states, ("m", "v"), self.scheme))

    def _init_param(self, name, p, w, q, ctx) -> dict:
        out = {"m": np.zeros_like(p), "v": np.zeros_like(p)}
        scheme = self.scheme_of(name)
        if scheme == "master":
            out["master"] = p
        elif scheme == "eco_exact":
            out["e_prev"] = p - w
        elif scheme == "kahan":
            out["c"] = self._qcomp(q, p - w, ctx.key, "init", name, "c")
        return out

    def _step_param(self, name, w, g, b, ctx):
        q = self.weight_quantizer(name)
        scheme = self.scheme_of(name)
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
        for k in ("master", "e_prev", "c"):
            if k in b:
                out[k] = b[k]
        if lr == 0.0:  # no write: no rounding, no error, nothing to inject
            if ctx.diag is not None:
                ctx.diag.add(name, w, w, None, q is not None)
            return w, out
        d = np.divide(v, bc2)
        np.sqrt(d, out=d)
        d += self.eps
        tt = np.divide(m, d)
        tt *= lr / bc1  # (lr / (1 - b1^n)) * m / d
        if scheme == "master":
            base = b["master"]
        elif scheme == "eco_exact":
            base = w + b["e_prev"]
        elif scheme == "kahan":
            base = w + b["c"]
        else:
            base = w
        decay = 1.0 - lr * self.weight_decay
        if self.weight_decay:
            base = base * decay
        np.subtract(base, tt, out=tt)  # theta_tilde = base (1 - lr wd) - (lr/bc1) m / d
        new_w, e = self._write_scheme(scheme, name, w, tt, q, ctx, out)
        if e is None:
            return new_w, out
        if scheme == "eco":
            coef = (bc1 / lr) * (1.0 - 1.0 / b1)
            if self.wd_corrected_injection:
                coef *= decay
            d *= coef
            d *= e
            out["m"] = self._inject(m, d, ctx, name)
        elif scheme == "eco_exact":
            out["e_prev"] = e
        return new_w, out


def adamw(lr: float | Callable[[int], float], b1: float = 0.9, b2: float = 0.999,
          eps: float = 1e-8, weight_decay: float = 0.0, *, scheme: str = "eco",
          weights: Quantizer | Mapping | None = None, states: Mapping | None = None,
          wd_corrected_injection: bool = False) -> AdamW:
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
        scheme: ``"fp"``, ``"master"``, ``"naive"``, ``"eco"``, ``"eco_exact"``, ``"kahan"``.
        weights: a :class:`~ecosim.Quantizer`, or a dict name -> Quantizer or None (None or
            absent: the parameter stays in full precision); None exactly for ``"fp"``.
        states: per-buffer quantization points ``{"g": ..., "m": ..., "v": ...,
            "master": ...}``: Quantizers, format names or ``(format, mode)`` pairs (see
            :func:`~ecosim.optim.base.state_quantizer`).
        wd_corrected_injection: multiply ECO's coefficient by ``(1 - lr wd)``.

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
                 wd_corrected_injection=wd_corrected_injection)
