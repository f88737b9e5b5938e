"""The weight-update schemes as objects: one record per scheme, one registry.

Every optimizer of :mod:`ecosim.optim` (and its torch mirror in :mod:`ecosim.torch.optim`)
computes a direction, forms ``theta_tilde = base - step`` and rounds it once onto the weight
grid; a *scheme* says the rest (docs/theory.md §4):

* its extra per-parameter buffers (:attr:`Scheme.buffers`), which the state records, the memory
  accounting (:mod:`ecosim.memory`) and the torch checkpoints read from here;
* the base value of the write (:meth:`Scheme.base_value`): the stored weights, the master copy,
  the weights plus the Kahan compensation, or the weights plus the carried error;
* what follows the write (:attr:`Scheme.after`): keep the master copy, keep the Kahan
  compensation, drop the error, inject it into the momentum, or carry it exactly;
* for an injection, its coefficient (:meth:`Scheme.coefficient`) from the optimizer's gain:
  ECO's ``rate * (1 - 1/beta)``, where ``rate`` is one over the step size a momentum entry
  moves the weights by (SGDM: ``1/lr``; AdamW: ``(1 - b1**n) / lr`` times ``d`` element-wise).

The write is :meth:`Scheme.write`, a function from ``theta_tilde`` and the weights' rounding
to the stored weights and the rounding error, written once for NumPy arrays and torch
tensors; the initial buffers are :meth:`Scheme.initial_buffers`. Where the error goes is the
record's too: into a buffer (:attr:`Scheme.error_buffer`) or into the momentum
(:meth:`Scheme.moves_error`), where the optimizer adds it with its own coefficient (see
:meth:`ecosim.optim.base.QuantizedOptimizer.write_weights`). Adding a scheme is one
:class:`Scheme` in :data:`REGISTRY` (a new kind of follow-up: a name in ``_AFTERS`` and where
its error goes; plus, when it needs a derivation, docs/theory.md); the optimizers of both
backends, the memory formulas and the torch checkpoints follow it.

Example:
    >>> get("kahan").buffers, get("eco").after, get("master").base
    (('c',), 'inject', 'master')
    >>> names_for("sgdm")
    ('fp', 'master', 'naive', 'eco', 'eco_exact', 'kahan')
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple, Optional

from . import catalog as optimizer_catalog
from .catalog import names as optimizer_names

__all__ = ["Scheme", "Written", "REGISTRY", "BUFFER_STORAGE", "get", "names_for",
           "torch_names_for", "all_buffers", "is_eco", "injection"]

#: how each extra buffer is stored: ``"state"`` in the optimizer's ``states[name]`` format
#: (full precision when none is given), ``"full"`` always in full precision, ``"compensation"``
#: in the weights' format with its own scale (:func:`~ecosim.optim.compensation_quantizer`).
BUFFER_STORAGE = {"master": "state", "e_prev": "full", "c": "compensation"}

_BASES = ("weights", "master", "compensated", "error")
_AFTERS = ("none", "drop", "master", "kahan", "inject", "exact")
_EXACT = ("", "momentum", "linear")
_OPTIMIZERS = optimizer_names()


def _eco_rule(rate: float, beta: float, decay: float) -> float:
    """ECO's memory-free coefficient ``rate (1 - 1/beta)`` (docs/theory.md §4.3)."""
    return rate * (1.0 - 1.0 / beta)


def _decayed_rule(rate: float, beta: float, decay: float) -> float:
    """``eco_wd``'s coefficient ``rate (1 - decay/beta)``: with ``s`` and ``decay = 1 - lr wd``
    frozen, the rounding error drops out of the virtual iterate ``theta_hat - K m``, ``K = s
    beta / (decay - beta)``, exactly (docs/theory.md §4.5); ``decay = 1`` is ECO's rule."""
    return rate * (1.0 - decay / beta)


@dataclasses.dataclass(frozen=True)
class Scheme:
    """One weight-update scheme.

    Attributes:
        name: the ``scheme=`` string.
        summary: one line for the docs.
        buffers: extra per-parameter buffers (keys of :data:`BUFFER_STORAGE`).
        base: where ``theta_tilde`` starts: ``"weights"`` (the stored weights),
            ``"master"`` (the master copy), ``"compensated"`` (weights + ``c``) or
            ``"error"`` (weights + ``e_prev`` whenever the error is not carried by the
            momentum; see :meth:`through_momentum`).
        after: what follows the write: ``"none"`` (``fp``: no rounding), ``"drop"`` (the
            error is lost), ``"master"`` (keep ``theta_tilde`` as the master copy),
            ``"kahan"`` (keep ``q_c(e)``), ``"inject"`` (ECO: ``m += gain * e``) or
            ``"exact"`` (carry ``e`` exactly to the next step, in ``e_prev``).
        exact: for ``after == "exact"``: ``"momentum"`` (always through the momentum) or
            ``"linear"`` (through the momentum when the optimizer's update is linear in it,
            SGDM; else error feedback into the weights, AdamW and Muon).
        rule: ``(rate, beta, decay) -> coefficient`` of an injection (None: ECO's
            :func:`_eco_rule`); ``decay = 1 - lr wd`` is the optimizer's decoupled decay.
        decay_corrected: multiply the injection coefficient by ``decay`` (AdamW's
            ``wd_corrected_injection``, one step of decay anticipated).
        optimizers: the NumPy optimizers that run it (names of :mod:`ecosim.optim.catalog`;
            default: all of them).
        torch: whether the torch mirrors (:class:`~ecosim.torch.ECOSGD`,
            :class:`~ecosim.torch.ECOAdamW`) run it, for those of ``optimizers``.
    """

    name: str
    summary: str
    buffers: tuple[str, ...] = ()
    base: str = "weights"
    after: str = "drop"
    exact: str = ""
    rule: Optional[Callable[[float, float, float], float]] = None
    decay_corrected: bool = False
    optimizers: tuple[str, ...] = _OPTIMIZERS
    torch: bool = True

    def __post_init__(self):
        if self.base not in _BASES or self.after not in _AFTERS or self.exact not in _EXACT:
            raise ValueError(f"scheme {self.name!r}: base in {_BASES}, after in {_AFTERS}, "
                             f"exact in {_EXACT} expected")
        if (self.after == "exact") != bool(self.exact):
            raise ValueError(f"scheme {self.name!r}: exact is set exactly for after='exact'")
        unknown = set(self.buffers) - set(BUFFER_STORAGE)
        if unknown or not set(self.optimizers) <= set(_OPTIMIZERS):
            raise ValueError(f"scheme {self.name!r}: buffers among {tuple(BUFFER_STORAGE)} and "
                             f"optimizers among {_OPTIMIZERS} expected")

    @property
    def quantized(self) -> bool:
        """Whether the weights are rounded (every scheme but ``fp``)."""
        return self.after != "none"

    @property
    def eco(self) -> bool:
        """Whether the momentum carries the rounding error: beta in (0, 1) and lr > 0 needed
        (the injection divides by both)."""
        return self.after in ("inject", "exact")

    def coefficient(self, rate: float, beta: float, decay: float = 1.0) -> float:
        """The injection coefficient for the optimizer's ``rate`` (one over the step a
        momentum entry moves the weights by), momentum coefficient ``beta`` and decoupled
        decay ``decay = 1 - lr wd``: ``rate (1 - 1/beta)`` for ECO.

        Example:
            >>> get("eco").coefficient(10.0, 0.5)
            -10.0
        """
        c = (self.rule or _eco_rule)(rate, beta, decay)
        if self.decay_corrected:
            c *= decay
        return c

    def through_momentum(self, linear: bool) -> bool:
        """Whether an exact scheme carries its error in the momentum, for an optimizer whose
        update is (``linear``) or is not linear in the momentum."""
        return self.exact == "momentum" or (self.exact == "linear" and linear)

    def base_value(self, w: Any, load: Callable[[str], Any], *, pending: bool,
                   linear: bool) -> Any:
        """The value the step is subtracted from (NumPy arrays or torch tensors alike).

        Args:
            w: the stored weights.
            load: buffer name -> its values (``"master"``, ``"c"``, ``"e_prev"``).
            pending: the carried error has not been moved into the momentum yet (see
                :class:`~ecosim.optim.SGDMState`).
            linear: the optimizer's update is linear in the momentum.
        """
        if self.base == "master":
            return load("master")
        if self.base == "compensated":
            return w + load("c")
        if self.base == "error" and (pending or not self.through_momentum(linear)):
            return w + load("e_prev")
        return w

    def initial_buffers(self, full: Any, w: Any, compensate: Callable[[Any], Any]) -> dict:
        """The scheme's buffers at initialisation, ``{name: values}`` in :attr:`buffers`'
        order: the master copy ``full``, the error ``e_prev = full - w`` and the Kahan
        compensation ``compensate(full - w)`` (the backend's ``q_c``, which may store it).

        Args:
            full: the full-precision initial weights (on the master grid when it has one).
            w: the stored weights ``q(full)``.
            compensate: ``x -> q_c(x)``, called only for ``"c"``.
        """
        out = {}
        for b in self.buffers:
            if b == "master":
                out[b] = full
            elif b == "e_prev":
                out[b] = full - w
            else:
                out[b] = compensate(full - w)
        return out

    @property
    def error_buffer(self) -> str | None:
        """Where the scheme keeps the rounding error of a write: ``"c"`` (Kahan's
        compensation, stored as ``q_c(e)``), ``"e_prev"`` (an exact scheme's carried error,
        stored as is) or None (dropped, or only moved into the momentum)."""
        return {"kahan": "c", "exact": "e_prev"}.get(self.after)

    def moves_error(self, linear: bool) -> bool:
        """Whether the momentum takes the rounding error of a write: ECO's injection, or an
        exact scheme that carries it there (:meth:`through_momentum`). The optimizer applies
        it; only it knows how a momentum entry moves its weights."""
        return self.after == "inject" or (self.after == "exact" and self.through_momentum(linear))

    def write(self, tt: Any, rounded: Callable[[Any], Any]) -> "Written":
        """The weight write of ``theta_tilde = tt``: ``(stored weights, rounding error)``, on
        NumPy arrays or torch tensors alike.

        ``fp`` keeps ``tt`` as is; every other scheme stores ``rounded(tt)`` (the weight
        quantizer). The error ``e = tt - rounded(tt)`` is computed, in place in ``tt``, for the
        schemes that keep or move it (:attr:`error_buffer`, :meth:`moves_error`); ``naive`` and
        ``master`` forget it (None). A master copy is stored by the backend before the write:
        ``tt`` is then its stored value.

        Args:
            tt: ``theta_tilde`` (overwritten by the error where one is returned).
            rounded: ``x -> q(x)``, the stored weights of ``x`` (the backend's store).
        """
        if not self.quantized:
            return Written(tt, None)
        new_w = rounded(tt)
        if self.after in ("master", "drop"):
            return Written(new_w, None)
        tt -= new_w  # e = theta_tilde - q(theta_tilde): theta_tilde is not needed any more
        return Written(new_w, tt)


class Written(NamedTuple):
    """What :meth:`Scheme.write` leaves: the stored ``weights`` and the rounding ``error``
    ``theta_tilde - weights`` (None where the scheme forgets it)."""

    weights: Any
    error: Any


#: every scheme, in the order of ``SCHEMES`` then the optimizer-specific ones
REGISTRY: dict[str, Scheme] = {s.name: s for s in (
    Scheme("fp", "no quantization (the reference)", after="none", torch=False),
    Scheme("master", "a full-precision master copy theta; the stored weights are q(theta)",
           buffers=("master",), base="master", after="master"),
    Scheme("naive", "no master: theta_hat <- q(theta_tilde); the rounding error is dropped"),
    Scheme("eco", "as naive, then e = theta_tilde - q(theta_tilde) is injected into the "
                  "momentum (no extra buffer)", after="inject"),
    Scheme("eco_exact", "keeps e_prev and carries it exactly (SGDM: through the momentum; "
                        "AdamW, Muon: error feedback into the weights)",
           buffers=("e_prev",), base="error", after="exact", exact="linear"),
    Scheme("kahan", "Kahan-compensated write with a compensation c in the weight format",
           buffers=("c",), base="compensated", after="kahan"),
    Scheme("eco_momentum_exact", "AdamW: keeps e_prev and moves it through the momentum "
                                 "sized with the current d (isolates ECO's e_prev ~ e)",
           buffers=("e_prev",), base="error", after="exact", exact="momentum",
           optimizers=("adamw",)),
    Scheme("eco_wd", "ECO with the injection sized for decoupled weight decay: "
                     "rate (1 - (1 - lr wd)/beta); equals eco at wd = 0",
           after="inject", rule=_decayed_rule, optimizers=("adamw",)),
)}


def get(name: str) -> Scheme:
    """The scheme called ``name`` (ValueError naming the known ones otherwise)."""
    try:
        return REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"scheme must be one of {tuple(REGISTRY)}, got {name!r}") from None


def is_eco(name: Any) -> bool:
    """Whether ``name`` is a known scheme whose momentum carries the error (False otherwise)."""
    s = REGISTRY.get(name) if isinstance(name, str) else None
    return s is not None and s.eco


def _offered(s: Scheme, optimizer: str) -> bool:
    """Whether ``optimizer`` runs scheme ``s``: the scheme names it, and a scheme that moves
    its error through the momentum needs an optimizer whose later updates give it back."""
    if optimizer not in s.optimizers:
        return False
    through_momentum = s.after == "inject" or s.exact == "momentum"
    return not through_momentum or optimizer_catalog.get(optimizer).injects


def names_for(optimizer: str) -> tuple[str, ...]:
    """The schemes a NumPy optimizer (a name of :mod:`ecosim.optim.catalog`) runs."""
    return tuple(n for n, s in REGISTRY.items() if _offered(s, optimizer))


def torch_names_for(optimizer: str) -> tuple[str, ...]:
    """The schemes the torch twin of a NumPy optimizer (``"sgdm"``, ``"adamw"``) runs."""
    return tuple(n for n, s in REGISTRY.items() if s.torch and _offered(s, optimizer))


def all_buffers() -> tuple[str, ...]:
    """Every extra buffer some scheme keeps (the keys of :data:`BUFFER_STORAGE` in use)."""
    return tuple(b for b in BUFFER_STORAGE if any(b in s.buffers for s in REGISTRY.values()))


def injection(e: Any, coef: float, scale: Any = None) -> Any:
    """ECO's injection ``k = scale * coef * e`` (``scale`` element-wise, e.g. AdamW's ``d``;
    None: ``coef * e``), in this order of roundings, on NumPy arrays or torch tensors alike;
    ``e`` (or ``scale``) is overwritten and returned."""
    if scale is None:
        e *= coef
        return e
    scale *= coef
    scale *= e
    return scale
