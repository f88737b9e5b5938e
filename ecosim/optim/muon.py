"""Muon over quantized weights: fp, master, naive, exact error feedback, Kahan, and an
experimental memory-free ECO variant.

Muon (K. Jordan et al., "Muon: An optimizer for hidden layers in neural networks", 2024,
kellerjordan.github.io/posts/muon) updates each weight *matrix* with the orthogonalised
momentum: with ``g`` the gradient at the stored weights ``theta_hat``, ``lr = lr(t)``,

    m = beta * m + (1 - beta) * g                    (EMA momentum, as the reference code)
    n = beta * m + (1 - beta) * g                    (nesterov; else n = m)
    o = NS5(n)                                        Newton-Schulz, approximately U V^T
    u = s * o,   s = sqrt(max(1, rows / cols))       ("jordan"; "moonlight": 0.2 sqrt(max))
    theta_tilde = base * (1 - lr * wd) - lr * u       base: theta_hat; master: theta;
                                                      eco_exact: theta_hat + e_prev;
                                                      kahan: theta_hat + c
    theta_hat = q(theta_tilde)                        <- the only rounding of the weights
    e = theta_tilde - theta_hat

Every other parameter (biases, gains: ``ndim < 2``) is updated by AdamW with ``adam_lr`` and
the same scheme (:mod:`ecosim.optim.adamw`, ECO's AdamW injection included).

``NS5`` is the quintic Newton-Schulz iteration of the reference implementation
(:func:`newton_schulz`): ``X = n / (||n||_F + 1e-7)``, then five times
``A = X X^T; X = a X + (b A + c A A) X`` with ``(a, b, c) = (3.4445, -4.7750, 2.0315)`` (on the
wide orientation, ``rows <= cols``). It is an odd matrix polynomial of ``n``, so it keeps
``n``'s singular vectors exactly and maps each singular value ``sigma`` to ``p(sigma /
||n||_F)`` with a polynomial ``p`` that sends (0, 1] into roughly [0.7, 1.2]: not ``U V^T``
exactly, by design.

Error compensation. ECO's injection rests on the update being linear in the momentum: an
offset ``k`` added to ``m`` reappears, scaled by a known gain, in every later update. Muon's
update is not linear in ``m`` (``NS5`` is scale-invariant, and to first order it passes only
the part of a perturbation that rotates the singular vectors), so there is no exact
memory-free coefficient. This module offers

``"eco_exact"``
    exact error feedback (the reference): ``e_prev`` is stored (4 bytes/param) and added to
    the next ``theta_tilde``, so ``theta_hat + e_prev`` is the master-weight trajectory up to
    round-off, whatever the update rule.
``"eco"`` (EXPERIMENTAL)
    memory-free: the coefficient that would be exact if the orthogonalisation were the
    *linear* map ``n -> n / nu`` with its normalisation frozen at this step's value
    ``nu = ||n||_F / ||o||_F``. Then Muon is SGD-momentum with learning rate
    ``lr * s / nu``, and SGDM's ECO gives ``m += eco_gain * (nu / (lr s)) (1 - 1/beta) e``
    (divided once more by ``beta`` with Nesterov). The real map passes only part of the
    injection on, so this under-compensates; ``eco_gain`` scales it for experiments. How close
    it gets to master weights is measured by the ``compressed_states`` experiment, not
    promised. Caution: ``NS5`` is scale-invariant, so nothing returns the injected part of
    ``m`` through the update, and ``||m||`` can grow without bound (in those runs
    ``||m|| / ||g||`` reached about 8, and 3e8 with ``eco_gain=2``, against 0.12 for master
    weights).

The SR key of the weight write of ``name`` at step ``t`` is ``fold_in(key, t, name)``, as for
every optimizer (see :mod:`ecosim.optim.base`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Callable, NamedTuple

import numpy as np

from ..core.checks import check_bool, check_positive
from ..core.quantizer import Quantizer
from .adamw import AdamW, AdamWState
from .base import QuantizedOptimizer
from .sgdm import momentum_step
from .schemes import Scheme, get, injection

__all__ = ["Muon", "MuonState", "muon", "newton_schulz", "NS_COEFFICIENTS"]

#: The quintic Newton-Schulz coefficients of the reference Muon implementation.
NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
_SCALES = ("jordan", "moonlight", "none")


def newton_schulz(g: np.ndarray, steps: int = 5, *, eps: float = 1e-7,
                  coefficients: tuple[float, float, float] = NS_COEFFICIENTS) -> np.ndarray:
    """Approximate orthogonalisation ``U V^T`` of a matrix by the quintic Newton-Schulz map.

    ``X = g / (||g||_F + eps)`` (Frobenius normalisation, so every singular value is at most
    1), transposed to the wide orientation (``rows <= cols``), then ``steps`` times
    ``A = X X^T;  X = a X + (b A + c A A) X``. The result has ``g``'s singular vectors and
    singular values ``p(sigma_i / (||g||_F + eps))`` for a degree-``5**steps`` odd polynomial
    ``p``; with the default coefficients and 5 steps, values above about ``2e-3`` land in
    roughly [0.7, 1.2]. Computed in ``g``'s dtype (float32 or float64).

    Args:
        g: a 2-D array (more dimensions are flattened after the first).
        steps: number of iterations (the reference uses 5).
        eps: added to the Frobenius norm (a zero matrix maps to zero).
        coefficients: ``(a, b, c)``.

    Example:
        >>> g = np.array([[3.0, 0.0], [0.0, 0.5]])
        >>> o = newton_schulz(g)
        >>> bool(np.all(o[[0, 1], [1, 0]] == 0)), bool(0.6 < o[1, 1] < 1.3 and 0.6 < o[0, 0] < 1.3)
        (True, True)
    """
    g = np.asarray(g)
    shape = g.shape
    x = g.reshape(shape[0], -1) if g.ndim != 2 else g
    a, b, c = coefficients
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.T
    x = x / (np.linalg.norm(x) + eps)
    for _ in range(steps):
        A = x @ x.T
        B = b * A + c * (A @ A)
        x = a * x + B @ x
    if tall:
        x = x.T
    return x.reshape(shape)


# AdamW's record without ``pending``: Muon runs AdamW's step on its non-matrix parameters and
# carries no error through its momentum, so it keeps AdamW's buffers and nothing else.
MuonState = NamedTuple("MuonState", [(f, AdamWState.__annotations__[f])
                                     for f in AdamWState._fields if f != "pending"])
MuonState.__doc__ = """State of :class:`Muon` (immutable; arrays shaped as the params).

    The fields of :class:`~ecosim.optim.AdamWState` but ``pending``, in its order.

    Attributes:
        step: index of the next update (0 after init).
        m: momentum of every parameter (on the ``states["m"]`` grid when given).
        v: second moments of the parameters updated by AdamW (``ndim < 2``), a dict of those
            only; None when every parameter is a matrix.
        master: master weights of the quantized parameters (scheme ``"master"``).
        e_prev: last rounding error (scheme ``"eco_exact"``).
        c: Kahan compensation (scheme ``"kahan"``).
        key: root key of the SR draws.
    """


@dataclasses.dataclass(frozen=True, eq=False, kw_only=True)
class Muon(QuantizedOptimizer):
    """Muon (AdamW for non-matrix parameters) whose weight write is quantized; see :func:`muon`."""

    lr: Callable[[int], float]
    beta: float = 0.95
    nesterov: bool = True
    ns_steps: int = 5
    scale: str = "jordan"
    weight_decay: float = 0.0
    adam_lr: Any = None
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-8
    scheme: str = "eco_exact"
    weights: Quantizer | Mapping | None = None
    states: Mapping[str, Quantizer] = dataclasses.field(default_factory=dict)
    eco_gain: float = 1.0
    init_weights: Quantizer | Mapping | None = None
    prev_scale: bool = False

    name = "muon"
    State = MuonState
    buffers = ("m", "v", "master", "e_prev", "c")

    def __post_init__(self):
        set_ = object.__setattr__
        self._check_fields(("m", "v"), ("beta",))
        set_(self, "nesterov", check_bool(self.nesterov, "nesterov"))
        if isinstance(self.ns_steps, bool) or not isinstance(self.ns_steps, int) \
                or self.ns_steps < 0:
            raise ValueError(f"ns_steps must be an int >= 0, got {self.ns_steps!r}")
        if self.scale not in _SCALES:
            raise ValueError(f"scale must be one of {_SCALES}, got {self.scale!r}")
        set_(self, "eco_gain", check_positive(self.eco_gain, "eco_gain", allow_zero=True))
        adam = AdamW(lr=self.lr if self.adam_lr is None else self.adam_lr, b1=self.b1,
                     b2=self.b2, eps=self.eps, weight_decay=self.weight_decay,
                     scheme=self.scheme,
                     weights=self.weights, states=self.states,
                     init_weights=self.init_weights, prev_scale=self.prev_scale)
        set_(self, "_adam", adam)
        set_(self, "adam_lr", adam.lr)
        set_(self, "b1", adam.b1)
        set_(self, "b2", adam.b2)
        set_(self, "eps", adam.eps)

    # -- structure ---------------------------------------------------------------------------
    @staticmethod
    def is_matrix(shape: tuple[int, ...]) -> bool:
        """Whether a parameter of this shape gets Muon's update (``ndim >= 2``)."""
        return len(shape) >= 2

    def state_buffers(self, name: str, shape: tuple[int, ...] | None = None) -> tuple[str, ...]:
        """``("m",)`` for matrices, ``("m", "v")`` for AdamW parameters, plus the scheme's."""
        if shape is None:
            raise ValueError("Muon's buffers depend on the parameter's shape: pass shape=")
        moments = ("m",) if self.is_matrix(tuple(shape)) else ("m", "v")
        return moments + self.scheme_object(name).buffers

    def shape_scale(self, shape: tuple[int, ...]) -> float:
        """``s`` of the update ``lr * s * NS5(n)`` for a ``(rows, cols...)`` matrix."""
        rows = shape[0]
        cols = int(np.prod(shape[1:]))
        if self.scale == "jordan":
            return max(1.0, rows / cols) ** 0.5
        if self.scale == "moonlight":
            return 0.2 * max(rows, cols) ** 0.5
        return 1.0

    # -- per-parameter numerics --------------------------------------------------------------
    def init_param(self, name, p, w, q, ctx) -> dict:
        """A matrix: zero momentum and the scheme's buffers; any other parameter: AdamW's."""
        if not self.is_matrix(p.shape):
            return self._adam.init_param(name, p, w, q, ctx)
        return {"m": np.zeros_like(p), **self.init_scheme_buffers(name, p, w, q, ctx)}

    def step_param(self, name, w, g, b, ctx):
        """A matrix: Muon's direction ``s NS5(n)``, the scheme's write and the experimental
        ECO injection; any other parameter: AdamW's step at ``adam_lr``."""
        if not self.is_matrix(w.shape):
            actx = dataclasses.replace(ctx, lr=self._adam.lr_at(ctx.t))
            return self._adam.step_param(name, w, g, b, actx)
        q, sch = self._of_param(name)  # the weight quantizer and the scheme
        beta, lr = self.beta, ctx.lr
        m, n, out, held = momentum_step(self, name, w, g, b, q, ctx, beta, nesterov=self.nesterov)
        if held is not None:  # lr == 0: the weights are left as they are
            return held
        o = newton_schulz(n, self.ns_steps)
        s = self.shape_scale(w.shape)
        base = sch.base_value(w, b.__getitem__, pending=ctx.pending, linear=False)
        decay = 1.0 - lr * self.weight_decay
        if self.weight_decay:
            base = base * decay
        tt = np.multiply(o, -lr * s)
        tt += base  # theta_tilde = base (1 - lr wd) - lr s NS5(n)
        new_w, e = self.write_weights(sch, name, w, tt, q, ctx, out)
        if e is not None:  # ECO's injection (an exact scheme feeds its error back instead)
            k = injection(e, self.eco_coefficient(lr, n, o, s, sch, decay))
            out["m"] = self._inject(m, k, ctx, name)
        return new_w, out

    def eco_coefficient(self, lr: float, n: np.ndarray, o: np.ndarray, s: float,
                        scheme: Scheme | None = None, decay: float = 1.0) -> float:
        """The experimental injection coefficient (module docstring): SGDM's ECO coefficient
        (``scheme``'s, default ``eco``'s) at the effective learning rate ``lr * s / nu``,
        ``nu = ||n||_F / ||o||_F``, times ``eco_gain``; 0 when the momentum is zero (nothing
        to scale by)."""
        on = float(np.linalg.norm(o))
        if on == 0.0:
            return 0.0
        nu = float(np.linalg.norm(n)) / on
        coef = (scheme or get("eco")).coefficient(nu / (lr * s), self.beta, decay)
        if self.nesterov:
            coef /= self.beta
        return self.eco_gain * coef


def muon(lr: float | Callable[[int], float], beta: float = 0.95, *, scheme: str = "eco_exact",
         weights: Quantizer | Mapping | None = None, nesterov: bool = True,
         ns_steps: int = 5, scale: str = "jordan", weight_decay: float = 0.0,
         adam_lr: float | Callable[[int], float] | None = None, b1: float = 0.9,
         b2: float = 0.999, eps: float = 1e-8, states: Mapping | None = None,
         eco_gain: float = 1.0) -> Muon:
    """Muon whose stored weights are quantized, with a weight-update scheme.

    Update of step ``t`` for a matrix parameter (``lr = lr(t)``, ``g`` the gradient at the
    stored weights ``theta_hat``)::

        m = beta * m + (1 - beta) * g
        n = beta * m + (1 - beta) * g          # nesterov=False: n = m
        o = newton_schulz(n, ns_steps)         # ~ U V^T of n
        theta_tilde = base * (1 - lr * wd) - lr * s * o
            # base: theta_hat; master: theta; eco_exact: theta_hat + e_prev; kahan: + c
        theta_hat = q(theta_tilde)             # the weight write: the only rounding of weights
        e = theta_tilde - theta_hat
        eco (EXPERIMENTAL): m += eco_gain * (nu / (lr s)) * (1 - 1/beta) [/ beta] * e,
                            nu = ||n||_F / ||o||_F (the normalisation frozen at this step)
        eco_exact: e_prev = e      (exact error feedback)
        kahan:     c = q_c(e)
        master:    theta = theta_tilde

    Parameters with ``ndim < 2`` follow :func:`~ecosim.optim.adamw` (``adam_lr``, ``b1``,
    ``b2``, ``eps``, the same ``weight_decay`` and scheme). ``s`` is ``sqrt(max(1, rows /
    cols))`` (``scale="jordan"``, the reference code), ``0.2 sqrt(max(rows, cols))``
    (``"moonlight"``, RMS-matched to AdamW) or 1 (``"none"``). ``states`` as for the other
    optimizers: ``{"g": ..., "m": ..., "v": ..., "master": ...}``. See :mod:`ecosim.optim.muon`
    for why ECO's injection does not carry over to Muon exactly.

    Args:
        lr: learning rate of the matrix updates (float > 0) or schedule.
        beta: momentum coefficient in [0, 1) ((0, 1) for ``eco``/``eco_exact``).
        scheme: ``"fp"``, ``"master"``, ``"naive"``, ``"eco"`` (experimental), ``"eco_exact"``
            (the default: the reference error feedback), ``"kahan"``.
        weights: a Quantizer or a dict name -> Quantizer | None; None exactly for ``"fp"``.
        nesterov, ns_steps, scale: as above.
        weight_decay: decoupled weight decay (``1 - lr wd``).
        adam_lr: learning rate (or schedule) of the AdamW parameters; None: ``lr``.
        b1, b2, eps: AdamW's.
        states: per-buffer quantization points.
        eco_gain: multiplier of the experimental injection coefficient.

    Example:
        >>> import numpy as np
        >>> from ecosim import Quantizer
        >>> q = Quantizer("e4m3", granularity="row")
        >>> w0 = {"W": np.eye(4, dtype=np.float32), "b": np.zeros(4, np.float32)}
        >>> g = {"W": np.ones((4, 4), np.float32), "b": np.ones(4, np.float32)}
        >>> opt = muon(0.02, scheme="master", weights=q, adam_lr=1e-3)
        >>> w, state = opt.init(w0, key=0)
        >>> w, state = opt.step(w, g, state)
        >>> sorted(state.v)                   # only the vector has a second moment
        ['b']
    """
    return Muon(lr=lr, beta=beta, scheme=scheme, weights=weights, nesterov=nesterov,
                ns_steps=ns_steps, scale=scale, weight_decay=weight_decay, adam_lr=adam_lr,
                b1=b1, b2=b2, eps=eps, states=states or {}, eco_gain=eco_gain)
