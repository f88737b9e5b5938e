"""Shared machinery of the quantized-weight optimizers: schemes, policies, keys, guards.

An optimizer here is a frozen object with two pure functions (optax's ``init``/``update`` with
an immutable ``NamedTuple`` state), except that :meth:`QuantizedOptimizer.step` returns the new
*stored* (quantized) weights, because the rounding of the weight write is the experiment:

    params, state = opt.init(params, key=0)
    params, state = opt.step(params, grads, state)

``params`` and ``grads`` are one floating array (the parameter named ``""``) or a dict of named
arrays. The weight-update schemes (docs/theory.md §4; Nikdan et al., "ECO: Quantized Training
without Full-Precision Master Weights", arXiv 2601.22101) are the records of
:mod:`ecosim.optim.schemes`: ``"fp"`` (no quantization), ``"master"`` (a full-precision master
copy ``theta``; the stored weights are ``q(theta)``), ``"naive"`` (``theta_hat <-
q(theta_tilde)``, the error dropped), ``"eco"`` (the error ``e = theta_tilde - q(theta_tilde)``
injected into the momentum), ``"eco_exact"`` (``e_prev`` kept and carried exactly),
``"eco_momentum_exact"`` (AdamW: ``e_prev`` moved through the momentum, see
:mod:`ecosim.optim.adamw`) and ``"kahan"`` (a compensation ``c`` in the weight format; Zamirai
et al., "Revisiting BFloat16 Training", arXiv 2010.06192). Each says its buffers, the base of
the write and what follows it; the optimizers here supply the direction and the gain.

Conventions shared by every optimizer (the update rules themselves are in ``sgdm.py`` and
``adamw.py``):

* Step index ``t = state.step = 0, 1, ...`` is the index of the update being applied; the
  learning rate of that update is ``lr(t)`` (see :mod:`ecosim.optim.schedules`).
* Randomness: the SR draw of the weight write of parameter ``name`` at step ``t`` uses key
  ``rng.fold_in(state.key, t, name)``; other SR draws append a tag (``"g"``, ``"m"``, ``"v"``,
  ``"master"``, ``"c"``, ``"m_inject"``); :meth:`~QuantizedOptimizer.init` uses
  ``fold_in(key, "init", name)`` (and ``fold_in(key, "init", name, "master")`` for a
  low-precision master copy). So the same key gives a bit-identical trajectory.
* Quantization points (``states=``): besides the weight write, every buffer of a step may be
  stored in its own format with its own rounding: ``"g"`` (the gradient, rounded once on entry
  to the step, before weight decay or anything else touches it), the moments (``"m"``, and
  ``"v"`` for AdamW), and ``"master"`` (the master copy of scheme ``"master"``; the stored
  weights are then ``q(q_master(theta_tilde))``, the model's weights derived from the stored
  master). See :func:`state_quantizer` for how a format name becomes a quantizer.
* Dtypes: every buffer has its parameter's dtype (float32 or float64); gradients are cast to
  it. Learning rates and coefficients are Python floats, so float32 stays float32 (NEP 50).
* Inputs are never mutated. Arrays may be shared between successive states (a weight that an
  update does not rewrite is returned as the same object): treat them as immutable.
* Zero learning rate: a step with ``lr(t) == 0`` does not write the weights (no rounding, no
  new error, no injection; the master copy does not move); moments still accumulate the
  gradient. ``eco_exact`` keeps its error *pending* across such steps (see ``SGDMState``) and
  stays exact. ``lr(t) < 0`` or non-finite raises ValueError. A constant ``lr <= 0`` is refused
  when the optimizer is built.
* Non-finite gradients raise ValueError naming the parameter and the step; nothing is written.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from typing import Any, Callable

import numpy as np

from ..core import rng
from ..core.checks import NonFiniteGradient, check_bool, check_positive, native
from ..core.quantizer import Quantizer
from ..core.rounding import quantize
from . import catalog as optimizer_catalog
from .diagnostics import StepDiagnostics
from .policies import (ADAMW_SCHEMES, SCHEMES, check_beta, make_schedule, resolve_weights,
                       compensation_quantizer, on_grid, resolve_states, state_quantizer,
                       weights_dict)
from .schemes import BUFFER_STORAGE, REGISTRY, Scheme, get, names_for

__all__ = [
    "ADAMW_SCHEMES",
    "SCHEMES",
    "NonFiniteGradient",
    "QuantizedOptimizer",
    "StepContext",
    "on_grid",
    "state_quantizer",
    "compensation_quantizer",
    "resolve_states",
    "weights_dict",
]

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


# -- trees ------------------------------------------------------------------------------------

def _as_dict(tree: Any, what: str) -> tuple[dict[str, Any], bool]:
    """A dict of named arrays and whether the tree was one bare array (named "").

    A list or tuple is refused (TypeError): several parameters are passed as a dict of named
    arrays, and NumPy would silently stack a list of same-shaped arrays into one.
    """
    if isinstance(tree, Mapping):
        for k in tree:
            if not isinstance(k, str):
                raise TypeError(f"{what} keys must be str parameter names, got {k!r}")
        return dict(tree), False
    if isinstance(tree, (list, tuple)):
        raise TypeError(f"{what} must be one float array or a dict of named arrays "
                        f"(e.g. {{'w0': array, 'w1': array}}), got a {type(tree).__name__}")
    return {"": tree}, True


def _from_dict(d: dict[str, Any] | None, bare: bool) -> Any:
    if d is None:
        return None
    return d.get("") if bare else d


def _entry(tree: Any, bare: bool) -> Any:
    """A state buffer's tree (None when absent), checked to have the params' structure."""
    if tree is not None and isinstance(tree, Mapping) == bare:
        built, given = (("a dict of params", "one bare array") if bare
                        else ("one bare array", "a dict"))
        raise ValueError(f"state was built for {built} but params here are {given}: pass "
                         "params with the structure given to init")
    return tree


@dataclasses.dataclass(frozen=True)
class StepContext:
    """What one step's per-parameter updates share (handed to
    :meth:`QuantizedOptimizer.step_param`): the step ``t``, its learning rate ``lr`` (and
    ``lr_next`` when the optimizer needs it), the root ``key``, whether the carried error is
    ``pending``, the step's diagnostics (None when off) and ``lr_inject``, the learning rate
    ECO's injection is sized by where it is not ``lr`` (AdamW's schedule guard; None: ``lr``).
    Built once a step, never changed; ``keys`` only caches the folded keys."""

    t: int
    lr: float
    lr_next: float | None
    key: int
    pending: bool
    diag: StepDiagnostics | None
    lr_inject: float | None = None
    keys: dict = dataclasses.field(default_factory=dict)  # name -> fold_in(key, t, name)

    def key_of(self, name: str, *tags: str) -> int:
        """``rng.fold_in(key, t, name, *tags)``, ``fold_in(key, t)`` and ``fold_in(key, t, name)``
        folded once a step (``fold_in`` folds item by item: the same keys)."""
        k = self.keys.get(name)
        if k is None:
            key_t = self.keys.get(None)
            if key_t is None:
                key_t = self.keys[None] = rng.fold_in(self.key, self.t)
            k = self.keys[name] = rng.fold_in(key_t, name)
        return rng.fold_in(k, *tags) if tags else k


# -- the optimizer base -----------------------------------------------------------------------

class QuantizedOptimizer:
    """Base of :class:`~ecosim.optim.SGDM` and :class:`~ecosim.optim.AdamW`.

    Subclasses are frozen dataclasses with the fields ``lr`` (a schedule), ``scheme``,
    ``weights``, ``states``, ``init_weights`` and ``prev_scale`` plus their hyperparameters,
    and implement :meth:`init_param` and :meth:`step_param`. The scheme's part of a step (its
    buffers, the base of the write, what follows it) is the :class:`~ecosim.optim.schemes.Scheme`
    record's: a subclass computes its direction, hands ``theta_tilde`` to :meth:`write_weights`
    and adds the error it returns to its momentum itself (ECO's injection, or the exact offset).

    Attributes:
        name: its name in :mod:`ecosim.optim.catalog` (``"sgdm"``, ``"adamw"``, ``"muon"``).
        State: the state record class.
        buffers: the per-parameter buffers this optimizer's state may hold.
        linear: whether the update is linear in the momentum (SGDM), so that an exact scheme
            can carry its error there (see :meth:`~ecosim.optim.schemes.Scheme.through_momentum`).
    """

    name: str = ""
    State: type = tuple
    buffers: tuple[str, ...] = ()
    linear: bool = False

    # fields provided by the dataclass subclasses
    lr: Callable[[int], float]
    scheme: str
    weights: Quantizer | Mapping | None
    states: Mapping[str, Quantizer]
    init_weights: Quantizer | Mapping | None
    prev_scale: bool

    # -- policy lookups ---------------------------------------------------------------------
    def weight_quantizer(self, name: str) -> Quantizer | None:
        """The quantizer of parameter ``name``'s stored weights (None: full precision)."""
        return self._of_param(name)[0]

    def __getstate__(self):
        """The fields only: the per-parameter lookups are a cache, neither pickled nor copied."""
        return {k: v for k, v in self.__dict__.items() if k != "_param_memo"}

    @functools.cached_property
    def _param_memo(self) -> dict:
        """The per-parameter lookups (a cache in the instance, not a dataclass field): by
        name, the weight quantizer and scheme; by ``(name, shape)``, the state buffers."""
        return {}

    def _of_param(self, name: str) -> tuple[Quantizer | None, Scheme]:
        """``(weight quantizer, scheme record)`` of parameter ``name``, looked up once: the
        optimizer is frozen and its policies read-only, and a step asks several times."""
        memo = self._param_memo
        hit = memo.get(name)
        if hit is None:
            q = self._lookup(self.weights, name)
            hit = memo[name] = (q, self.scheme_record if q is not None else REGISTRY["fp"])
        return hit

    def _init_quantizer(self, name: str) -> Quantizer | None:
        policy = self.init_weights if self.init_weights is not None else self.weights
        return self._lookup(policy, name)

    @staticmethod
    def _lookup(policy, name: str) -> Quantizer | None:
        if policy is None:
            return None
        if isinstance(policy, Quantizer):
            return policy
        return policy.get(name)

    def scheme_of(self, name: str) -> str:
        """The scheme parameter ``name`` follows: ``"fp"`` when it is not quantized."""
        return self.scheme if self.weight_quantizer(name) is not None else "fp"

    @property
    def schemes(self) -> tuple[str, ...]:
        """The schemes this optimizer runs (:func:`ecosim.optim.schemes.names_for`)."""
        return names_for(self.name)

    @property
    def scheme_record(self) -> Scheme:
        """The :class:`~ecosim.optim.schemes.Scheme` of ``self.scheme``."""
        return get(self.scheme)

    def scheme_object(self, name: str) -> Scheme:
        """The :class:`~ecosim.optim.schemes.Scheme` parameter ``name`` follows."""
        return self._of_param(name)[1]

    def state_buffers(self, name: str, shape: tuple[int, ...] | None = None) -> tuple[str, ...]:
        """Names of the state buffers kept for parameter ``name`` (e.g. ``("m", "v", "c")``).

        ``shape`` is the parameter's shape; optimizers whose buffers depend on it (Muon keeps
        ``v`` only for the parameters it updates with AdamW) need it.
        """
        return self._moment_names + self.scheme_object(name).buffers

    def _buffers_of(self, name: str, shape: tuple[int, ...]) -> tuple[str, ...]:
        """:meth:`state_buffers` of ``(name, shape)``, looked up once (the optimizer is frozen)."""
        memo = self._param_memo
        hit = memo.get((name, shape))
        if hit is None:
            hit = memo[(name, shape)] = self.state_buffers(name, shape)
        return hit

    @property
    def _moment_names(self) -> tuple[str, ...]:
        """The moments this optimizer keeps (for Muon, of the matrices it takes): its row of
        :mod:`ecosim.optim.catalog`."""
        return optimizer_catalog.get(self.name).moments

    # -- learning rate ----------------------------------------------------------------------
    def lr_at(self, t: int) -> float:
        """The learning rate of update ``t``, checked: finite and >= 0 (else ValueError)."""
        raw = self.lr(t)
        try:
            value = float(raw)
        except TypeError:
            raise TypeError(f"the lr schedule returned {raw!r} at step {t}, not a number") from None
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"the learning rate at step {t} is {value!r}; it must be finite and "
                             ">= 0 (a step with lr == 0 leaves the weights unchanged)")
        return value

    @property
    def _needs_next_lr(self) -> bool:
        return False

    # -- keys and writes --------------------------------------------------------------------
    def _round_weights(self, q: Quantizer, prev: np.ndarray, ctx: StepContext, name: str,
                       x: np.ndarray) -> np.ndarray:
        """The stored weights ``q(x)`` (SR key ``fold_in(key, t, name)``; DQT: previous grid)."""
        key = ctx.key_of(name) if q.rounding.stochastic else None
        if self.prev_scale:
            return q(x, key=key, scales=q.scales(prev))
        return _apply(q, x, key)

    def carry_buffers(self, name: str, w: np.ndarray, q: Quantizer | None, ctx: StepContext,
                      out: dict, prev: dict) -> tuple[np.ndarray, dict] | None:
        """Copies the scheme's buffers (``master``, ``e_prev``, ``c``) from ``prev`` into
        ``out``; when the step's rate is 0 (no write: no rounding, no error, nothing to inject)
        records the diagnostics and returns ``(w, out)``, the step's result, else None."""
        for k in BUFFER_STORAGE:
            if k in prev:
                out[k] = prev[k]
        if ctx.lr != 0.0:
            return None
        if ctx.diag is not None:
            ctx.diag.add(name, w, w, None, q is not None)
        return w, out

    def write_weights(self, sch: Scheme, name: str, w: np.ndarray, tt: np.ndarray,
                      q: Quantizer | None, ctx: StepContext, out: dict
                      ) -> tuple[np.ndarray, np.ndarray | None]:
        """The scheme's write of ``theta_tilde = tt`` (:meth:`Scheme.write`) and the buffers it
        keeps: the master copy first (in its format), then the weights, then Kahan's
        compensation ``q_c(e)`` or the exact schemes' ``e_prev = e``, put into ``out``.

        Returns:
            ``(new stored weights, e)``, ``e`` the rounding error when the momentum is to take
            it (:meth:`Scheme.moves_error`; None otherwise): the optimizer adds it, with its
            own coefficient (ECO's injection) or its exact offset.

        Args:
            sch: the parameter's scheme.
            name, w, q, ctx: the parameter, its stored weights, its quantizer, the step.
            tt: ``theta_tilde`` (overwritten).
            out: the new buffers of the step so far.
        """
        if sch.after == "master":
            tt = out["master"] = self._qstate("master", tt, ctx, name)
        seen = tt.copy() if ctx.diag is not None else tt  # what the diagnostics compare
        new_w, e = sch.write(tt, functools.partial(self._round_weights, q, w, ctx, name))
        if ctx.diag is not None:
            ctx.diag.add(name, w, new_w, seen, sch.quantized)
        if e is None:
            return new_w, None
        if sch.error_buffer == "c":
            out["c"] = self._qcomp(q, e, ctx.key_of(name), "c")
        elif sch.error_buffer == "e_prev":
            out["e_prev"] = e
        return new_w, (e if sch.moves_error(self.linear) else None)

    def init_scheme_buffers(self, name: str, p: np.ndarray, w: np.ndarray,
                            q: Quantizer | None, ctx: StepContext) -> dict:
        """The scheme's initial buffers (:meth:`Scheme.initial_buffers`: the master copy
        ``p``, the error ``e_prev = p - w``, the Kahan compensation ``q_c(p - w)``)."""
        return self.scheme_object(name).initial_buffers(
            p, w, lambda e: self._qcomp(q, e, ctx.key, "init", name, "c"))

    def _check_fields(self, moments: tuple[str, ...], betas: tuple[str, ...]) -> None:
        """The checks every optimizer's ``__post_init__`` shares: scheme and weights,
        ``init_weights``, the schedule, the momentum coefficients ``betas`` (ECO's in (0, 1)),
        ``weight_decay >= 0``, ``prev_scale`` and the state formats of ``moments``."""
        set_ = object.__setattr__
        set_(self, "weights", resolve_weights(self.weights, self.scheme, self.schemes))
        if self.init_weights is not None:
            set_(self, "init_weights",
                 resolve_weights(self.init_weights, self.scheme, self.schemes))
        set_(self, "lr", make_schedule(self.lr, self.scheme))
        for b in betas:
            set_(self, b, check_beta(getattr(self, b), b, self.scheme))
        set_(self, "weight_decay", check_positive(self.weight_decay, "weight_decay",
                                                  allow_zero=True))
        set_(self, "prev_scale", check_bool(self.prev_scale, "prev_scale"))
        set_(self, "states", resolve_states(self.states, moments, self.scheme))

    @staticmethod
    def _quantize_buffer(q: Quantizer, x: np.ndarray, key: int, *data) -> np.ndarray:
        return _apply(q, x, rng.fold_in(key, *data) if q.rounding.stochastic else None)

    def _qstate(self, which: str, x: np.ndarray, ctx: StepContext, name: str,
                tag: str | None = None) -> np.ndarray:
        qs = self.states.get(which)
        if qs is None:
            return x
        return _apply(qs, x, ctx.key_of(name, tag or which) if qs.rounding.stochastic else None)

    def _inject(self, m: np.ndarray, k: np.ndarray, ctx: StepContext, name: str) -> np.ndarray:
        """``m + k`` stored in ``m``'s format (SR tag ``"m_inject"``); records what survived."""
        new_m = self._qstate("m", m + k, ctx, name, "m_inject")
        if ctx.diag is not None:
            ctx.diag.inject(k, new_m - m)
        return new_m

    def _qcomp(self, q: Quantizer, e: np.ndarray, key: int, *data) -> np.ndarray:
        return self._quantize_buffer(compensation_quantizer(q), e, key, *data)

    # -- init / step ------------------------------------------------------------------------
    def init(self, params: Any, key: int = 0) -> tuple[Any, tuple]:
        """Quantize the given weights and build the initial state.

        Args:
            params: one float32/float64 array or a dict of them (not modified; any byte
                order, the stored weights and buffers are native). A list is refused.
            key: non-negative int; the root of every SR draw of the run.

        Returns:
            ``(stored_params, state)``: the weights the model uses (``q(params)`` for quantized
            parameters, a copy otherwise) and the state record at ``step = 0``.
        """
        key = rng.as_key(key)
        P, bare = _as_dict(params, "params")
        self._check_policy_names(P, bare)
        lr0 = self.lr_at(0) if self.scheme_record.exact == "linear" else None
        ctx = StepContext(0, lr0 if lr0 is not None else 0.0, None, key,
                   pending=self._init_pending(lr0), diag=None)
        out_p: dict[str, np.ndarray] = {}
        bufs: dict[str, dict[str, np.ndarray]] = {b: {} for b in self.buffers}
        for name, p in P.items():
            p = native(np.asarray(p), copy=True)
            if p.dtype not in _FLOATS:
                raise TypeError(f"parameter {name!r} must be float32 or float64, got {p.dtype}")
            bad = p.size - int(np.count_nonzero(np.isfinite(p)))
            if bad:
                raise ValueError(f"parameter {name!r} has {bad} non-finite values")
            q = self.weight_quantizer(name)
            qm = self.states.get("master")
            if qm is not None and self.scheme_of(name) == "master":  # the stored master copy
                p = self._quantize_buffer(qm, p, key, "init", name, "master")
            if q is None:
                w = p
            else:
                qi = self._init_quantizer(name)
                w = self._quantize_buffer(qi, p, key, "init", name)
            out_p[name] = w
            for b, arr in self.init_param(name, p, w, q, ctx).items():
                bufs[b][name] = arr
        return _from_dict(out_p, bare), self._make_state(0, key, bufs, bare, ctx.pending)

    def step(self, params: Any, grads: Any, state: tuple, *,
             diagnostics: bool = False) -> tuple:
        """One update: ``(params, state) -> (new stored params, new state)``.

        Args:
            params: the stored weights (as returned by :meth:`init` or the previous step).
            grads: gradients at ``params``, same structure and shapes (cast to each
                parameter's dtype).
            state: the state record of the previous call.
            diagnostics: also return a dict with ``"e"`` (this step's rounding error
                ``theta_tilde - theta_hat_new``, params-shaped, zeros for full-precision
                parameters; None for scheme ``"fp"``), ``"update_norm"`` (the 2-norm of
                ``theta_tilde - theta_hat_old`` over all parameters, ``theta_tilde`` being the
                value handed to the quantizer: for master/eco_exact/kahan it includes the
                carried error), ``"changed_frac"`` (fraction of stored weights whose value
                changed), ``"lr"``, and ``"inject_kept"``: for ``"eco"``, how much of the
                momentum injection the stored momentum kept, ``<kept, intended> /
                <intended, intended>`` over all parameters (1 with a full-precision momentum;
                below 1 when rounding a low-precision momentum swallows part of it; NaN when
                nothing was injected), and ``"inject_lost"``: the fraction of the elements
                with a nonzero injection whose stored momentum did not change at all (the
                injection rounded away entirely; an energy ratio near 1 can hide many small
                injections lost this way).

        Returns:
            ``(params, state)``, or ``(params, state, diagnostics)``.

        Raises:
            NonFiniteGradient: a gradient has NaN/inf (the message names the parameter).
            ValueError: the learning rate of this step is negative or not finite, the
                structures differ, or a gradient or state buffer has another shape than its
                parameter (the message names the parameter and both shapes).
        """
        if not isinstance(state, self.State):
            raise TypeError(f"state must be a {self.State.__name__}, got {type(state).__name__}")
        diagnostics = check_bool(diagnostics, "diagnostics")
        P, bare = _as_dict(params, "params")
        G, gbare = _as_dict(grads, "grads")
        if gbare != bare or G.keys() != P.keys():
            raise ValueError(f"grads must have the structure of params: {sorted(P)} vs "
                             f"{sorted(G)}")
        t = state.step
        P = {name: native(np.asarray(w)) for name, w in P.items()}
        G = {name: _check_grad(name, w, G[name], t) for name, w in P.items()}
        lr = self.lr_at(t)
        lr_next = self.lr_at(t + 1) if self._needs_next_lr else None
        pending = bool(getattr(state, "pending", False))
        quantized = self.scheme != "fp"
        ctx = StepContext(t, lr, lr_next, state.key, pending,
                          StepDiagnostics(quantized) if diagnostics else None,
                          self._injection_lr(t, lr))
        out_p: dict[str, np.ndarray] = {}
        bufs: dict[str, dict[str, np.ndarray]] = {b: {} for b in self.buffers}
        trees = {}  # each buffer's tree, its structure checked once per step
        qg = self.states.get("g")  # the gradient's quantization point
        for name, w in P.items():
            b = {}
            complete = True
            for k in self._buffers_of(name, w.shape):
                tree = trees.get(k, trees)  # trees itself: not read yet
                if tree is trees:
                    tree = trees[k] = _entry(getattr(state, k), bare)
                v = b[k] = tree if bare or tree is None else tree.get(name)
                complete = complete and v is not None
            _check_state_shapes(name, w.shape, b)
            if not complete:
                missing = [k for k, v in b.items() if v is None]
                raise ValueError(f"state has no {missing} for parameter {name!r}: was it built "
                                 "by this optimizer's init?")
            g = G[name]
            if qg is not None:
                g = _apply(qg, g, ctx.key_of(name, "g") if qg.rounding.stochastic else None)
            new_w, new_b = self.step_param(name, w, g, b, ctx)
            out_p[name] = new_w
            for k, arr in new_b.items():
                bufs[k][name] = arr
        new_pending = self._next_pending(ctx)
        new_state = self._make_state(t + 1, state.key, bufs, bare, new_pending)
        new_params = _from_dict(out_p, bare)
        if diagnostics:
            diag = ctx.diag.result(lr)
            diag["e"] = _from_dict(diag["e"], bare)
            return new_params, new_state, diag
        return new_params, new_state

    def _injection_lr(self, t: int, lr: float) -> float | None:
        """The learning rate ECO's injection of step ``t`` is sized by when it is not
        ``lr`` (None: it is; AdamW's schedule guard)."""
        return None

    def _init_pending(self, lr0: float | None) -> bool:
        """Whether the initial state's error is pending (kept out of the momentum)."""
        return self.scheme_record.exact == "linear" and lr0 == 0.0

    def _next_pending(self, ctx: StepContext) -> bool:
        return False

    def _make_state(self, step: int, key: int, bufs: dict, bare: bool, pending: bool) -> tuple:
        fields = {"step": step, "key": key}
        for b in self.buffers:
            d = bufs[b]
            if b in self._moment_names:
                fields[b] = _from_dict(d, bare)
            else:
                fields[b] = _from_dict(d, bare) if d else None
        if "pending" in self.State._fields:
            fields["pending"] = pending
        return self.State(**fields)

    def _check_policy_names(self, P: dict, bare: bool) -> None:
        for policy in (self.weights, self.init_weights):
            if isinstance(policy, Mapping):
                if bare:
                    raise ValueError("a dict of per-parameter quantizers needs dict params")
                extra = set(policy) - set(P)
                if extra:
                    raise ValueError(f"weights names {sorted(extra)} are not parameters "
                                     f"(parameters: {sorted(P)})")

    # -- subclass hooks ---------------------------------------------------------------------
    def init_param(self, name: str, p: np.ndarray, w: np.ndarray, q: Quantizer | None,
                   ctx: StepContext) -> dict:  # pragma: no cover - abstract
        """The initial buffers of parameter ``name`` (full values ``p``, stored ``w``)."""
        raise NotImplementedError

    def step_param(self, name: str, w: np.ndarray, g: np.ndarray, b: dict,
                   ctx: StepContext) -> tuple:  # pragma: no cover - abstract
        """One update of parameter ``name``: ``(new stored weights, new buffers)`` from the
        stored weights ``w``, the gradient ``g`` and the buffers ``b``."""
        raise NotImplementedError


def _apply(q: Quantizer, x: np.ndarray, key: int | None) -> np.ndarray:
    """``q(x, key=key)``; a plain cast (fixed scale 1) goes straight to :func:`quantize`.

    Bit for bit the same values and random bits as ``q(x)`` (dividing and multiplying by a
    scale of 1 is exact), without the scale bookkeeping, which dominates on small tensors.
    """
    if q.fixed and q.scale == 1.0 and x.dtype in _FLOATS:
        return quantize(x, q.fmt, q.rounding, key=key)
    return q(x, key=key)


def _check_state_shapes(name: str, shape: tuple, buffers: dict) -> None:
    """Refuse (ValueError naming the parameter and both shapes) a state buffer whose shape is
    not the parameter's: NumPy would broadcast it (an ``(n, 1)`` parameter against an
    ``(n, m)`` momentum gives ``(n, m)`` weights) or fail with a message naming no parameter."""
    for k, v in buffers.items():
        have = None if v is None else np.shape(v)  # None: missing, refused by the caller
        if have is not None and have != shape:
            raise ValueError(f"state buffer {k!r} of parameter {name!r} has shape {have}, the "
                             f"parameter and its gradient {shape}: pass the state that init "
                             "built for parameters of these shapes")


def _check_grad(name: str, w: np.ndarray, g: Any, t: int) -> np.ndarray:
    """The gradient of ``name`` (stored weights ``w``, native) checked: its shape, a dtype
    cast to ``w``'s, every value finite (else :class:`NonFiniteGradient`)."""
    g = native(np.asarray(g))
    if g.shape != w.shape:
        raise ValueError(f"gradient of parameter {name!r} has shape {g.shape}, the parameter "
                         f"{w.shape}")
    if g.dtype != w.dtype:
        if g.dtype.kind not in "fiu":
            raise TypeError(f"gradient of parameter {name!r} has dtype {g.dtype}")
        g = g.astype(w.dtype)
    # <g, g> is finite when every value is (one BLAS call, no warning); when it is not, a value
    # is NaN/inf or the sum overflowed: count the non-finite values to tell
    if g.size and not math.isfinite(np.vdot(g, g)):
        bad = g.size - int(np.count_nonzero(np.isfinite(g)))
        if bad:
            raise NonFiniteGradient(f"gradient of parameter {name!r} has {bad} non-finite "
                                    f"values (NaN/inf) at step {t}; refusing to write them "
                                    "into the weights")
    return g
