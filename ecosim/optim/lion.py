"""Lion over quantized weights: fp, master, naive, exact error feedback and Kahan.

Lion (Chen et al., "Symbolic Discovery of Optimization Algorithms", arXiv 2302.06675) keeps one
momentum and steps by the sign of an interpolation of it with the gradient. With ``g`` the
gradient at the stored weights ``theta_hat`` and ``lr = lr(t)``::

    c = b1 * m + (1 - b1) * g                   the interpolation the sign reads
    theta_tilde = base * (1 - lr * wd) - lr * sign(c)
    theta_hat = q(theta_tilde)                  <- the only rounding of the weights
    m = b2 * m + (1 - b2) * g

with ``base`` the stored weights (``naive``), the master copy (``master``), the weights plus
the last error (``eco_exact``: error feedback) or plus the Kahan compensation (``kahan``).

No memory-free ECO: ECO gives the rounding error back through the momentum, and that needs a
later update that moves by ``gain * k`` when the momentum moves by ``k``. Lion's update
``lr * sign(c)`` has the same size whatever the momentum is, so an offset injected into ``m``
changes no update but where it flips a sign, and then by a whole ``2 lr``, not by the error: the
derivation of docs/theory.md §4.3 does not hold, and the injecting schemes are not offered
(the optimizer catalog says ``injects=False``). Kahan's compensation, in the weight format,
gives the error back at one code per parameter; the exact error feedback ``eco_exact`` does
too, with a full-precision ``e_prev`` (docs/theory.md §4.9).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Callable, NamedTuple

import numpy as np

from ..core.quantizer import Quantizer
from .base import QuantizedOptimizer
from .policies import check_beta

__all__ = ["Lion", "LionState", "lion"]


class LionState(NamedTuple):
    """State of :class:`Lion` (immutable; arrays shaped as the params).

    Attributes:
        step: index of the next update (0 after init).
        m: momentum (on the ``states["m"]`` grid when given).
        master: full-precision weights (scheme ``"master"``), else None.
        e_prev: the last rounding error (scheme ``"eco_exact"``), else None.
        c: the Kahan compensation (scheme ``"kahan"``), else None.
        key: root key of the SR draws.
    """

    step: int
    m: Any
    master: Any
    e_prev: Any
    c: Any
    key: int


@dataclasses.dataclass(frozen=True, eq=False, kw_only=True)
class Lion(QuantizedOptimizer):
    """Lion whose weight write is quantized by a scheme; see :func:`lion`."""

    lr: Callable[[int], float]
    b1: float = 0.9
    b2: float = 0.99
    weight_decay: float = 0.0
    scheme: str = "naive"
    weights: Quantizer | Mapping | None = None
    states: Mapping[str, Quantizer] = dataclasses.field(default_factory=dict)
    init_weights: Quantizer | Mapping | None = None
    prev_scale: bool = False

    name = "lion"
    State = LionState
    buffers = ("m", "master", "e_prev", "c")

    def __post_init__(self):
        self._check_fields(("m",), ())
        for b in ("b1", "b2"):  # [0, 1): no scheme of Lion divides by them
            object.__setattr__(self, b, check_beta(getattr(self, b), b, "fp"))

    def init_param(self, name, p, w, q, ctx) -> dict:
        """Zero momentum and the scheme's buffers."""
        return {"m": np.zeros_like(p), **self.init_scheme_buffers(name, p, w, q, ctx)}

    def step_param(self, name, w, g, b, ctx):
        """Lion's direction ``lr * sign(b1 m + (1 - b1) g)``; the scheme does the rest (it
        injects nothing: see the module docstring)."""
        q, sch = self._of_param(name)
        b1, b2, lr = self.b1, self.b2, ctx.lr
        c = np.multiply(b["m"], b1)
        c += (1.0 - b1) * g
        m = np.multiply(b["m"], b2)
        m += (1.0 - b2) * g
        m = self._qstate("m", m, ctx, name)
        out = {"m": m}
        held = self.carry_buffers(name, w, q, ctx, out, b)
        if held is not None:  # lr == 0: the weights are left as they are
            return held
        base = sch.base_value(w, b.__getitem__, pending=ctx.pending, linear=False)
        if self.weight_decay:
            base = base * (1.0 - lr * self.weight_decay)
        tt = np.sign(c)
        tt *= -lr
        tt += base  # theta_tilde = base (1 - lr wd) - lr sign(c)
        # Lion runs no scheme whose error the momentum takes (module docstring)
        return self.write_weights(sch, name, w, tt, q, ctx, out)[0], out


def lion(lr: float | Callable[[int], float], b1: float = 0.9, b2: float = 0.99,
         weight_decay: float = 0.0, *, scheme: str = "naive",
         weights: Quantizer | Mapping | None = None, states: Mapping | None = None) -> Lion:
    """Lion whose stored weights are quantized, with a weight-update scheme.

    Update of step ``t`` (``lr = lr(t)``, ``g`` the gradient at the stored weights)::

        c = b1 * m + (1 - b1) * g
        theta_tilde = theta_hat * (1 - lr * wd) - lr * sign(c)
            # master: theta instead of theta_hat; eco_exact: theta_hat + e_prev;
            # kahan: theta_hat + c_kahan
        theta_hat = q(theta_tilde)          # the weight write: the only rounding of weights
        m = b2 * m + (1 - b2) * g
        eco_exact: e_prev = theta_tilde - theta_hat

    ``sign(0)`` is 0, as ``numpy.sign`` gives it. There is no ``"eco"``: Lion's update does
    not grow with its momentum, so nothing injected there is given back (module docstring).

    Args:
        lr: learning rate (float > 0) or schedule ``t -> lr``.
        b1: the interpolation the sign reads, in [0, 1).
        b2: the momentum's coefficient, in [0, 1).
        weight_decay: decoupled weight decay ``wd`` (multiplies the weights by ``1 - lr wd``).
        scheme: one of ``"fp"``, ``"master"``, ``"naive"`` (the default), ``"eco_exact"``
            (exact error feedback into the weights), ``"kahan"``.
        weights: a :class:`~ecosim.Quantizer`, or a dict name -> Quantizer or None; None
            exactly for ``"fp"``.
        states: per-buffer quantization points ``{"g": ..., "m": ..., "master": ...}`` (see
            :func:`~ecosim.optim.base.state_quantizer`).

    Returns:
        A :class:`Lion` with pure ``init(params, key)`` and ``step(params, grads, state)``.

    Example:
        >>> import numpy as np
        >>> from ecosim import Quantizer
        >>> q = Quantizer("int8", scale=2.0**-4)          # a fixed grid of step 1/16
        >>> for scheme in ("naive", "eco_exact", "master"):
        ...     opt = lion(0.01, scheme=scheme, weights=q)
        ...     w, state = opt.init(np.array([1.0]), key=0)
        ...     for _ in range(20):                      # every step (0.01) is below half a step
        ...         w, state = opt.step(w, np.array([1.0]), state)
        ...     print(scheme, w)
        naive [1.]
        eco_exact [0.8125]
        master [0.8125]
    """
    return Lion(lr=lr, b1=b1, b2=b2, weight_decay=weight_decay, scheme=scheme, weights=weights,
                states=states or {})
