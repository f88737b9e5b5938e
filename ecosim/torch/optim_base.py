"""What the ECO optimizers (:class:`~ecosim.torch.optim.ECOSGD`,
:class:`~ecosim.torch.optim.ECOAdamW`) share: naming parameters, the initial weight write,
low-precision buffers (stored as codes, SR keys per buffer), the weight write of every scheme
and the buffers it keeps (``_write_weights``), the gradient checks and the step loop. Each
optimizer adds its state (``_init_state``) and its update (``_step_param``: its direction, and
the rounding error the write hands back added to its momentum); which buffers a scheme keeps,
where its write starts, the write and where its error goes are the scheme records of
:mod:`ecosim.optim.schemes` (``Scheme.write``, ``Scheme.initial_buffers``), the same code NumPy
runs. See :mod:`ecosim.torch.optim` for the rules and the SR keys.
Checkpoints are :mod:`ecosim.torch.optim_state`'s, diagnostics :mod:`ecosim.torch.optim_diag`'s,
shard layouts :mod:`ecosim.torch.dtensor`'s.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping

import torch

from ..core import rng
from ..core.checks import NonFiniteGradient, check_bool
from ..optim import catalog as optimizer_catalog
from ..optim.base import resolve_states as _np_resolve_states
from ..optim.base import weights_dict
from ..optim.base import compensation_quantizer, state_quantizer
from ..optim.schemes import REGISTRY, Scheme, get, is_eco, torch_names_for
from .dtensor import (check_sharded_quantizer, ShardRows, shard_of, ShardKey, sr_key,
                      is_dtensor, local_tensor)
from .nn import cast_to, Codec, stored
from .optim_diag import DiagnosticsMixin, StepDiag
from .optim_state import CheckpointMixin
from .quantizer import Encoded, Quantizer

#: the grid a plain parameter of each half-precision dtype holds (see _own_grid)
_HALF_GRID = {torch.bfloat16: "bfloat16", torch.float16: "float16"}


def _own_grid(name, p, named):
    """The quantizer of a plain bfloat16/float16 parameter: its own dtype's grid, written
    with round-to-nearest (what storing a float32 result into it does), so the optimizer's
    scheme applies to that rounding (ECO injects its error; master keeps a float32 copy).
    ``named``: what ``weights=`` gives the parameter, which must be None or that grid."""
    own = Quantizer(_HALF_GRID[p.dtype], "rtn", scale=1.0)
    if named is not None and named != own:
        raise ValueError(f"parameter {name!r} is {p.dtype}: it holds its own grid, so "
                         f"weights= cannot give it {named}; give it None (or store it as "
                         "codes with ecosim.torch.quantize_model)")
    return own


def _check_lr(lr, scheme):
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) \
            or lr < 0:
        raise ValueError(f"lr must be a finite number >= 0, got {lr!r}")
    if is_eco(scheme) and lr <= 0:
        raise ValueError(f"scheme {scheme!r} needs lr > 0 (its injection divides by lr), "
                         f"got {lr!r}")


def _torch_quantizer(q) -> Quantizer:
    """An :class:`ecosim.torch.Quantizer` from a torch or NumPy Quantizer (same fields)."""
    if isinstance(q, Quantizer):
        return q
    return Quantizer(q.fmt, q.mode, q.granularity, q.scale, q.pow2, q.nbits, q.saturate,
                     q.sr_rule)


def _state_codec(spec) -> Codec:
    """:func:`ecosim.optim.base.state_quantizer` for torch: a torch Quantizer is used as is."""
    if isinstance(spec, Quantizer):
        return Codec(spec)
    return Codec(_torch_quantizer(state_quantizer(spec)))


@dataclasses.dataclass
class _Meta:
    """What the optimizer knows about one parameter."""

    name: str
    q: Quantizer | None        # the weight quantizer (None: full precision, updated as "fp")
    layer: object | None       # the QuantizedLinear holding the codes, for stored weights
    scheme: str
    sch: Scheme                # the scheme's record (fp's when not quantized)
    codec: Codec | None = None  # the weight quantizer's storage
    comp: Codec | None = None  # Kahan's compensation buffer
    shard: "ShardRows | None" = None  # where this process's rows sit (DTensor parameters)
    shape: tuple = ()  # the parameter's (local) shape its states were built for
    dtype: torch.dtype = torch.float32  # what the update is computed in (float32 for bf16)


class ECOBase(DiagnosticsMixin, CheckpointMixin, torch.optim.Optimizer):
    """The optimizer both ECO optimizers are: see the module docstring."""

    _twin: str = "sgdm"  # the NumPy optimizer this one mirrors (its schemes, moments, rules)
    _linear: bool = False  # the update is linear in m (exact ECO through the momentum)

    def __init__(self, params, defaults, scheme, weights, key, states, diagnostics=False):
        self.collect_diagnostics = check_bool(diagnostics, "diagnostics")
        self._never: dict[str, torch.Tensor] = {}  # name -> weights never changed (diagnostics)
        self._last_diag: dict | None = None
        self._diag: StepDiag | None = None
        schemes = torch_names_for(self._twin)
        if scheme not in schemes:
            raise ValueError(f"scheme must be one of {schemes}, got {scheme!r}")
        self.scheme = scheme
        self.weights = _resolve_weights(weights)
        self.states = self._resolve_states(states, scheme)
        _check_lr(defaults["lr"], scheme)
        self._meta: dict[str, _Meta] = {}
        self._counter = 0
        self._step_count_t = 0
        super().__init__(params, dict(defaults, key=rng.as_key(key)))
        if isinstance(self.weights, Mapping):
            extra = set(self.weights) - set(self._meta)
            if extra:
                raise ValueError(f"weights names {sorted(extra)} are not parameters "
                                 f"(parameters: {sorted(self._meta)})")
        if all(m.q is None for m in self._meta.values()):
            raise ValueError(f"scheme {scheme!r} has nothing to quantize: pass weights= (an "
                             "ecosim.torch.Quantizer, or a dict name -> Quantizer | None) or "
                             "parameters stored by ecosim.torch.store_weights")

    def _scheme_record(self) -> Scheme:
        """The record of ``self.scheme`` (:mod:`ecosim.optim.schemes`)."""
        return get(self.scheme)

    @classmethod
    def _resolve_states(cls, states, scheme) -> dict:
        return dict(_np_resolve_states(states, optimizer_catalog.get(cls._twin).moments, scheme,
                                       convert=_state_codec))

    # -- parameters -----------------------------------------------------------------------------
    def add_param_group(self, param_group):
        """Add a group (tensors or ``(name, tensor)`` pairs): names its parameters, makes the
        initial weight write ``q(p)`` and builds their states (as at construction)."""
        group = param_group
        ps = group["params"]
        if isinstance(ps, torch.Tensor):
            ps = [ps]
        elif isinstance(ps, set):
            raise TypeError("parameters must be an ordered collection (a list), not a set")
        names, tensors = [], []
        for p in list(ps):
            if isinstance(p, tuple):
                if len(p) != 2 or not isinstance(p[1], torch.Tensor):
                    raise TypeError(f"a named parameter is a (name, tensor) pair, got {p!r}")
                name, t = str(p[0]), p[1]
            elif isinstance(p, torch.Tensor):
                name, t = str(self._counter), p
            else:
                raise TypeError(f"parameters must be tensors or (name, tensor) pairs, got "
                                f"{type(p).__name__}")
            self._counter += 1
            layer = stored(t)
            names.append(layer.name if layer is not None else name)
            tensors.append(t)
        group["params"], group["names"] = tensors, names
        dup = [n for n in names if n in self._meta] + [n for n in set(names)
                                                       if names.count(n) > 1]
        if dup:
            raise ValueError(f"parameter names must be unique, got {sorted(set(dup))} twice "
                             "(a stored weight is named by its store)")
        super().add_param_group(group)
        group["key"] = rng.as_key(group["key"])
        _check_lr(group["lr"], self.scheme)
        with torch.no_grad():
            for name, p in zip(names, tensors):
                self._init_param(group, name, p)

    def _quantizer_for(self, name, layer) -> Quantizer | None:
        w = self.weights
        named = w.get(name) if isinstance(w, Mapping) else w
        if layer is None:
            return named
        if named is not None and named != layer.quantizer:
            raise ValueError(f"stored weight {name!r} holds codes of {layer.quantizer}, but "
                             f"weights= gives {named} for it")
        return layer.quantizer

    def _init_param(self, group, name, p):
        layer = stored(p)
        shard = shard_of(name, p) if is_dtensor(p) else None
        if layer is not None:  # W_0 when the layer still has it (see ecosim.torch.nn)
            w0 = layer.pop_initial()
            full = (w0.to(device=layer.codes.device, dtype=layer._value_dtype, copy=True)
                    if w0 is not None and get(self.scheme).buffers else layer.read())
        else:
            if p.dtype not in (torch.float32, torch.float64, *_HALF_GRID):
                raise TypeError(f"parameter {name!r} must be float32, float64, bfloat16 or "
                                f"float16, got {p.dtype}")
            full = local_tensor(p).detach().clone()  # a DTensor's rows held here
            if p.dtype in _HALF_GRID:
                full = full.float()
        if not bool(torch.isfinite(full).all()):
            raise ValueError(f"parameter {name!r} has non-finite values")
        q = self._quantizer_for(name, layer)
        if layer is None and p.dtype in _HALF_GRID:
            q = _own_grid(name, p, q)
        if layer is None and q is not None and p.ndim > 2 and not q.fixed \
                and q.granularity != "tensor":
            raise ValueError(
                f"parameter {name!r} has shape {tuple(p.shape)}: granularity "
                f"{q.granularity!r} scales along its last axis (a kernel row), not per output "
                "channel; store it with ecosim.torch.quantize_model/store_weights (one scale "
                "per output channel) or give it weights=None or a tensor-wise quantizer")
        meta = _Meta(name, q, layer, self.scheme if q is not None else "fp",
                     self._scheme_record() if q is not None else REGISTRY["fp"],
                     layer._codec if layer is not None else (Codec(q) if q else None),
                     shard=shard, shape=tuple(local_tensor(p).shape), dtype=full.dtype)
        if "c" in meta.sch.buffers:
            meta.comp = Codec(compensation_quantizer(q))
        if shard is not None:
            if q is not None:
                check_sharded_quantizer(name, q, shard, "the weight quantizer")
            for which, codec in self._codecs_of(meta).items():
                check_sharded_quantizer(name, codec.q, shard, f"the {which!r} state format")
                if codec.packed:
                    raise ValueError(f"the {which!r} state format {codec.q.fmt.name} of "
                                     f"sharded parameter {name!r} packs several codes per "
                                     "byte: not supported with DTensor parameters")
            if "g" in self.states:
                check_sharded_quantizer(name, self.states["g"].q, shard, "the 'g' format")
        self._meta[name] = meta
        st = self.state[p]
        key = self._key(group, meta)
        if meta.sch.after == "master" and "master" in self.states:  # the stored master copy
            full = self._keep(st, "master", full, key, "init", name, "master")
        if q is None:
            w = full
        else:
            w = self._write(meta, p, full, sr_key(key, "init", name)
                            if q.rounding.stochastic else None)
        self._init_state(st, group, meta, full, w)

    @staticmethod
    def _key(group, meta):
        """The group's root key; for a shard, one that offsets its SR counters."""
        if meta.shard is not None and meta.shard.offset:
            return ShardKey(group["key"], meta.shard.offset)
        return group["key"]

    # -- buffers ----------------------------------------------------------------------------------
    def _keep(self, st, which, x, key, *data, codec=None):
        """Store buffer ``which`` (quantized when it has a format) and return its values."""
        codec = codec or self.states.get(which)
        if codec is None:
            st[which] = x
            return x
        k = sr_key(key, *data) if codec.q.rounding.stochastic else None
        values, codes, scales = codec.encode(x, k)
        st[which] = codes
        if scales is not None:
            st[which + "_scales"] = scales
        return values

    def _load(self, st, which, like, codec=None):
        """The values of buffer ``which`` (a new tensor when it is stored in low precision)."""
        codec = codec or self.states.get(which)
        if codec is None:
            return st[which]
        return codec.decode(st[which], st.get(which + "_scales"), like.shape, like.dtype)

    def _zeros(self, st, which, like):
        codec = self.states.get(which)
        if codec is None:
            st[which] = torch.zeros_like(like, memory_format=torch.contiguous_format)
            return
        _, codes, scales = codec.zeros(like)
        st[which] = codes
        if scales is not None:
            st[which + "_scales"] = scales

    def _qgrad(self, g, key, t, name):
        codec = self.states.get("g")
        if codec is None:
            return g
        return codec.encode(g, sr_key(key, t, name, "g") if codec.q.rounding.stochastic
                            else None)[0]

    def _codecs_of(self, meta):
        """``{state key: codec}`` of the low-precision buffers of one parameter."""
        out = {k: c for k, c in self.states.items() if k != "g"}
        if meta.comp is not None:
            out["c"] = meta.comp
        return out

    # -- the weight write -------------------------------------------------------------------------
    def _write(self, meta, p, x, key):
        """Store ``q(x)`` (into the codes, or into ``p``) and return the stored values."""
        if meta.layer is not None:
            return meta.layer.write(x, key=key)
        w, s = meta.codec.values(x, key)
        local_tensor(p).copy_(w)
        self.state[p]["w_scales"] = s if s is not None else meta.q.scales(w)  # see encoded()
        return w

    def _base(self, meta, st, w):
        """Where ``theta_tilde`` starts: the scheme's base (``state["pending"]``: AdamW's
        ``eco_momentum_exact`` before its first write)."""
        codecs = self._codecs_of(meta)
        return meta.sch.base_value(w, lambda k: self._load(st, k, w, codecs.get(k)),
                                   pending=st.get("pending", False), linear=self._linear)

    def _write_weights(self, meta, p, st, w, tt, key, t):
        """NumPy's ``write_weights``: the scheme's write of ``tt``
        (:meth:`~ecosim.optim.schemes.Scheme.write`) and the buffers it keeps, stored into
        ``st`` in place (the master copy first, then the weights, then Kahan's ``c`` or the
        exact schemes' ``e_prev``, replaced: an optimizer that needs the previous one reads it
        first). Returns the rounding error when the momentum is to take it, else None."""
        sch = meta.sch
        if not sch.quantized:
            local_tensor(p).copy_(tt)
            return None
        if sch.after == "master":
            tt = self._keep(st, "master", tt, key, t, meta.name, "master")
        _, e = sch.write(tt, functools.partial(self._round_weights, meta, p, key, t))
        if e is None:
            return None
        if sch.error_buffer == "c":
            self._keep(st, "c", e, key, t, meta.name, "c", codec=meta.comp)
        elif sch.error_buffer == "e_prev":
            st["e_prev"] = e
        return e if sch.moves_error(self._linear) else None

    def _round_weights(self, meta, p, key, t, x):
        """Store ``q(x)`` with the weight write's SR key ``fold_in(key, t, name)``."""
        return self._write(meta, p, x, sr_key(key, t, meta.name)
                           if meta.q.rounding.stochastic else None)

    def _init_scheme_state(self, st, group, meta, full, w):
        """The scheme's initial buffers (:meth:`~ecosim.optim.schemes.Scheme.initial_buffers`,
        as NumPy's ``init_scheme_buffers``); a low-precision buffer's codes are stored as it is
        rounded (the master copy's before the first weight write, Kahan's ``c`` here)."""
        key = self._key(group, meta)
        bufs = meta.sch.initial_buffers(full, w, lambda e: self._keep(
            st, "c", e, key, "init", meta.name, "c", codec=meta.comp))
        for b, x in bufs.items():
            if b not in st:
                st[b] = x

    def _weights_of(self, meta, p):
        if meta.layer is not None:
            return meta.layer.read()
        return cast_to(local_tensor(p).detach(), meta.dtype)

    # -- public -----------------------------------------------------------------------------------
    @property
    def t(self) -> int:
        """Index of the next update (NumPy's ``state.step``)."""
        return self._step_count_t

    def _param_of(self, name):
        for g in self.param_groups:
            for n, q in zip(g["names"], g["params"]):
                if n == name:
                    return q
        raise KeyError(f"no parameter named {name!r}")

    def encoded(self, p) -> Encoded:
        """The stored weights of parameter ``p`` (a tensor or its name) as low-precision codes.

        For a stored weight these are its codes and scales (views, no copy). For a plain
        parameter they are the RTN encoding of the stored values with the scales of the last
        write (``state["w_scales"]``; recomputed from the values for formats off the fast
        path); the tests check that ``decode(encoded(p)) == p`` for row-wise E4M3.
        """
        if isinstance(p, str):
            p = self._param_of(p)
        layer = stored(p)
        if layer is not None:
            return layer.encoded()
        name = next(n for g in self.param_groups for n, q in zip(g["names"], g["params"])
                    if q is p)
        q = self._meta[name].q
        if q is None:
            raise ValueError(f"parameter {name!r} is kept in full precision")
        rtn = dataclasses.replace(q, mode="rtn")
        return rtn.encode(self._weights_of(self._meta[name], p),
                          scales=self.state[p].get("w_scales"))

    def state_values(self, p, which: str) -> torch.Tensor:
        """The values of state buffer ``which`` (``"m"``, ``"v"``, ``"master"``, ``"e_prev"``,
        ``"c"``) of parameter ``p`` (a tensor or its name), dequantized when it is stored in low
        precision (what the NumPy optimizer's state holds)."""
        if isinstance(p, str):
            p = self._param_of(p)
        name = next(n for g in self.param_groups for n, q in zip(g["names"], g["params"])
                    if q is p)
        meta = self._meta[name]
        like = torch.empty(local_tensor(p).shape, dtype=meta.dtype, device="meta")
        return self._load(self.state[p], which, like, self._codecs_of(meta).get(which))

    # -- the step ---------------------------------------------------------------------------------
    def _grads(self, group, t):
        """``(name, parameter, gradient)`` of the parameters of ``group`` that have a gradient
        (``.grad`` None: skipped, as ``torch.optim`` does), their gradients checked."""
        items = []
        for name, p in zip(group["names"], group["params"]):
            if p.grad is None:
                continue
            if p.grad.is_sparse:
                raise ValueError(f"parameter {name!r} has a sparse gradient (not supported)")
            g = local_tensor(p.grad).detach()
            built = self._meta[name].shape
            if tuple(g.shape) != built:  # resized after its states were built for it
                raise ValueError(f"parameter {name!r} has shape {tuple(g.shape)} but its "
                                 f"optimizer states were built for {built}: was it resized "
                                 "after the optimizer was built? Build a new optimizer")
            items.append((name, p, g))
        # min and max propagate NaN and show inf: one pass per gradient (isfinite().all() is
        # ~10x slower on the CPU) and one device sync per group; the slow check only names
        # the culprit.
        ends = [e for _, _, g in items if g.numel() for e in torch.aminmax(g)]
        if not ends or bool(torch.isfinite(torch.stack(ends)).all()):
            return items
        for name, _, g in items:
            if g.numel() and not bool(torch.isfinite(g).all()):
                bad = g.numel() - int(torch.isfinite(g).sum())
                raise NonFiniteGradient(f"gradient of parameter {name!r} has {bad} non-finite "
                                        f"values (NaN/inf) at step {t}; refusing to write "
                                        "them into the weights")
        raise AssertionError("unreachable: aminmax saw a non-finite value")  # pragma: no cover

    def _skipped(self, st):
        """Parameter state ``st`` was left out of this step (no gradient); nothing by default."""

    @torch.no_grad()
    def step(self, closure=None):
        """One update of every parameter that has a gradient. Parameters whose ``.grad`` is
        None are skipped and their states left as they are (``torch.optim``'s rule); when no
        parameter has one, nothing happens (the step counter ``t`` does not advance). Every
        group's gradients are checked before anything is written."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        t = self._step_count_t
        work = []
        for group in self.param_groups:
            _check_lr(group["lr"], "fp")
            self._check_group(group)
            work.append((group, self._grads(group, t)))
        if not any(items for _, items in work):
            return loss
        for group, items in work:
            have = {id(p) for _, p, _ in items}
            for p in group["params"]:
                if id(p) not in have:
                    self._skipped(self.state[p])
        diag = self._diag = (StepDiag() if getattr(self, "collect_diagnostics", False)
                             else None)
        for group, items in work:
            if diag is None:
                self._step_group(group, items, t)
                continue
            for name, p, g in items:
                meta = self._meta[name]
                w, g = self._inputs(group, meta, p, g, t)
                if meta.q is None:
                    self._step_param(meta, p, w, g, self.state[p], group, t)
                    continue
                codes_old = self._flat_codes(p)
                diag.begin(name)
                self._step_param(meta, p, w, g, self.state[p], group, t)
                self._diag_param(diag, meta, p, codes_old, g)
        self._step_count_t = t + 1
        if diag is not None:
            self._diag = None
            self._last_diag = diag.result(t)
        return loss

    def _inputs(self, group, meta, p, g, t):
        """``(w, g)``: the stored weights of ``p`` and its gradient in their dtype, rounded to
        ``states["g"]`` when it has a format."""
        w = self._weights_of(meta, p)
        return w, self._qgrad(g.to(w.dtype), self._key(group, meta), t, meta.name)

    def _step_group(self, group, items, t):
        """Update the parameters ``items`` (``_grads``'s triples) of ``group`` (diagnostics
        off), one ``_step_param`` each; an optimizer may batch the element-wise math of
        several parameters instead."""
        for name, p, g in items:
            meta = self._meta[name]
            w, g = self._inputs(group, meta, p, g, t)
            self._step_param(meta, p, w, g, self.state[p], group, t)

    def _inject(self, st, m, k, key, t, name):
        """ECO's injection: ``m += k`` stored in ``m``'s format (SR tag ``"m_inject"``);
        returns the stored values, and with diagnostics on records what survived (NumPy's
        ``_Diag.inject``: the intended ``k`` against the stored momentum's move)."""
        diag = getattr(self, "_diag", None)
        before = m.clone() if diag is not None else None
        m += k
        new_m = self._keep(st, "m", m, key, t, name, "m_inject")
        if diag is not None:
            diag.inject(name, k, new_m - before)
        return new_m

    def _check_group(self, group):
        pass


def _resolve_weights(weights):
    if weights is None or isinstance(weights, Quantizer):
        return weights
    if isinstance(weights, Mapping):
        return weights_dict(weights, Quantizer, "an ecosim.torch.Quantizer")
    raise TypeError(f"weights must be an ecosim.torch.Quantizer, a dict name -> Quantizer | None, "
                    f"or None (stored weights use their store's quantizer); got "
                    f"{type(weights).__name__}")
