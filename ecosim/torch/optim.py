"""ECO optimizers as ``torch.optim.Optimizer`` subclasses, mirroring :mod:`ecosim.optim`.

:class:`ECOSGD` mirrors :func:`ecosim.optim.sgdm` (EMA or heavy-ball momentum, Nesterov) and
:class:`ECOAdamW` mirrors :func:`ecosim.optim.adamw`, each with the schemes ``"master"``,
``"naive"``, ``"eco"``, ``"eco_exact"`` and ``"kahan"``, per-parameter weight quantizers and
low-precision states (``states=``). The update rules, the order of the float operations and
the SR keys are the NumPy reference's (see the module docstrings of :mod:`ecosim.optim.sgdm`,
:mod:`ecosim.optim.adamw` and :mod:`ecosim.optim.base`), so on the CPU, in float32, the stored
weights and the states equal the NumPy optimizer's bit for bit:

* a parameter's weights are either a float32/float64 tensor holding the dequantized stored
  weights (the constructor writes ``q(p)`` into it, SR key ``fold_in(key, "init", name)``), or
  real low-precision codes held by a :class:`ecosim.torch.nn.QuantizedLinear` (its
  :class:`~ecosim.torch.nn.GradSlot` is the parameter; the optimizer reads the weights from the
  codes and stores ``encode(theta_tilde)`` back; see :mod:`ecosim.torch.nn` for the protocol of
  the first write). Both give the same trajectory;
* step ``t`` (a global counter, as NumPy's ``state.step``) writes ``q(theta_tilde)`` with SR key
  ``fold_in(key, t, name)``; a low-precision buffer ``b`` (``"g"``, ``"m"``, ``"v"``,
  ``"master"``) is rounded with ``fold_in(key, t, name, b)``, ``m`` again after ECO's injection
  with ``fold_in(key, t, name, "m_inject")``, the Kahan buffer with ``fold_in(key, t, name,
  "c")`` (at construction: ``fold_in(key, "init", name, "c")``, ``fold_in(key, "init", name,
  "master")``, and exact ECO's ``m_0`` with ``fold_in(key, 0, name, "init_m")``); ``name``
  comes from ``model.named_parameters()`` pairs, is ``"0", "1", ...`` (counting over all
  groups) for plain tensors, and is the store's name for stored weights;
* a parameter without a weight quantizer (``weights=None`` or a dict entry None) is updated in
  full precision by the same rule (NumPy's ``"fp"`` for that parameter): the embeddings and
  norms of a model whose linear layers alone are stored;
* scalars are Python floats applied to the tensors exactly where NumPy applies them (a
  ``torch.add(a, b, alpha=c)`` may fuse into one rounding where NumPy rounds twice, so the
  code spells out every product);
* AdamW's square root of a float32 ``v`` is taken in float64 and rounded back on the CPU
  (torch's vectorized CPU ``sqrt`` is not correctly rounded: measured off by one ulp on ~0.7%
  of float32 and float64 inputs with torch 2.13 AVX512; CUDA's ``sqrt`` is IEEE). float64
  parameters therefore follow NumPy within an ulp of ``d`` in AdamW, not bit for bit; SGD is
  bit-exact in both dtypes.

Where rounding happens, per step: the gradient (``states["g"]``, on entry), the moments after
their update (``states["m"]``, ``states["v"]``), the master copy (``states["master"]``), the
weight write ``q(theta_tilde)``, ``m`` after ECO's injection, and Kahan's ``c``. Every other
value is float32 (float64) arithmetic.

Storage: low-precision states are held as codes in their torch dtype (``bfloat16`` for
``"bf16"``, ``float8_e4m3fn`` codes plus row scales in ``state["m_scales"]`` for ``"e4m3"``,
packed uint8 for 4-bit formats), so ``nbytes`` (and :func:`ecosim.torch.nn.measured_memory`)
shows the saving; :meth:`~ECOAdamW.state_values` returns their values. :meth:`state_dict`
exports them as same-size integers (``Optimizer.load_state_dict`` casts floating states to the
parameter's dtype) and :meth:`load_state_dict` restores them, so checkpoints resume bit for
bit.

Sharded parameters (FSDP2): a parameter may be a DTensor sharded on dim 0 (``Shard(0)`` on a
1-D mesh, what ``torch.distributed.fsdp.fully_shard`` makes; other placements are refused).
Each process updates its own rows (``torch.chunk``'s split: ``ceil(n0 / W)`` rows per process,
FSDP's padding never seen) and keeps their states, and the result equals the unsharded
optimizer's bit for bit: the math is element-wise; row-wise and per-group scales see whole
rows (scales whose blocks would span processes, tensor-wise or column-wise or one row of a
1-D tensor, are refused: they would need a reduction across processes; fixed scales are
fine), and SR draws element ``i`` of the whole tensor from counter ``i`` wherever it lives
(the shard's keys carry its global starting element as the counter, ``key=(k, offset)`` of
:func:`ecosim.torch.quantize`). Packed (4-bit and narrower) state formats are refused.
:meth:`~ECOAdamW.state_dict` returns the states of such parameters as DTensors of the same
placement, :meth:`~ECOAdamW.full_state_dict` gathers them into whole tensors (a collective),
and :meth:`~ECOAdamW.load_state_dict` takes either, or this process's rows.
:meth:`~ECOAdamW.encoded` and :meth:`~ECOAdamW.state_values` give this process's rows.

Learning rates are read from ``group["lr"]`` at every step, so torch LR schedulers work.
``eco_exact`` for SGD needs ``lr(t+1)`` at step ``t``: it is ``group["next_lr"]`` when set,
else ``group["lr"]`` (a constant learning rate).

Speed. The cost of a step is the weight write: the bit-exact integer rounding (and, for SR,
the counter-based random bits) of :mod:`ecosim.torch.rounding`. Measured on one CPU thread
(torch 2.13, 16 tensors of 512 x 512 = 4.2M parameters, row-wise E4M3, min of 8 interleaved
steps): ECO and master AdamW steps cost the same (87 ms each with RTN, 132-137 ms with SR,
against 22 ms for ``torch.optim.AdamW`` in float32), of which the weight quantizer alone takes
about 55 ms (RTN) and 105 ms (SR); codes instead of float32 parameters add 5-8% (decode
before, encode after). The optimizer's own work is done per parameter with
in-place operations, which bounds its temporaries to one tensor's size: a ``torch._foreach``
pass over all parameters would materialise the decoded float32 weights (or low-precision
moments) of the whole model at once, the copy that ECO exists to avoid, and on the CPU it is
the same kernels in a C++ loop. The NaN/inf check of the gradients is one ``aminmax`` per
gradient (min and max propagate NaN and show inf) and one device sync per group.
``ECOAdamW(compile=True)`` fuses the element-wise moment math (see :class:`ECOAdamW`).

Not mirrored: scheme ``"fp"`` (use ``torch.optim``), zero learning rates for ``eco_exact``
(NumPy's pending error; refused here), DQT's ``prev_scale``, ``init_weights``; the diagnostics
are :meth:`~ECOAdamW.diagnostics` (``diagnostics=True``), not a step's return value.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Mapping

import torch

from .. import rng
from .._checks import check_bool
from ..optim.base import resolve_states as _np_resolve_states
from ..optim.base import weights_dict
from ..optim.base import compensation_quantizer, state_quantizer
from .dtensor import is_dtensor, local_tensor
from .nn import _Codec, _raw, stored
from .quantizer import Encoded, Quantizer, _div, unpack

__all__ = ["ECOSGD", "ECOAdamW"]

_SCHEMES = ("master", "naive", "eco", "eco_exact", "kahan")
_OWN_ATTRS = ("scheme", "weights", "states", "_meta", "_counter", "_step_count_t",
              "nesterov", "heavy_ball", "wd_corrected_injection", "_math",
              "collect_diagnostics", "_never", "_last_diag")


def _check_lr(lr, scheme):
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) \
            or lr < 0:
        raise ValueError(f"lr must be a finite number >= 0, got {lr!r}")
    if scheme in ("eco", "eco_exact") and lr <= 0:
        raise ValueError(f"scheme {scheme!r} needs lr > 0 (its injection divides by lr), "
                         f"got {lr!r}")


def _sqrt(x: torch.Tensor) -> torch.Tensor:
    """Correctly rounded square root (NumPy's). torch's vectorized float32 ``sqrt`` on CPUs
    (measured on an AVX512 build of torch 2.13) is off by one ulp on ~0.7% of inputs; the
    float64 root of a float32 value rounded back to float32 is correctly rounded (53 >= 2*24+2
    bits, so the double rounding is innocuous). float64 inputs and other devices use torch's
    own root."""
    if x.dtype == torch.float32 and x.device.type == "cpu":
        return x.to(torch.float64).sqrt_().to(torch.float32)
    return x.sqrt()


def _torch_quantizer(q) -> Quantizer:
    """An :class:`ecosim.torch.Quantizer` from a torch or NumPy Quantizer (same fields)."""
    if isinstance(q, Quantizer):
        return q
    return Quantizer(q.fmt, q.mode, q.granularity, q.scale, q.pow2, q.nbits, q.saturate)


def _state_codec(spec) -> _Codec:
    """:func:`ecosim.optim.base.state_quantizer` for torch: a torch Quantizer is used as is."""
    if isinstance(spec, Quantizer):
        return _Codec(spec)
    return _Codec(_torch_quantizer(state_quantizer(spec)))


@dataclasses.dataclass
class _Meta:
    """What the optimizer knows about one parameter."""

    name: str
    q: Quantizer | None        # the weight quantizer (None: full precision, updated as "fp")
    layer: object | None       # the QuantizedLinear holding the codes, for stored weights
    scheme: str
    codec: _Codec | None = None  # the weight quantizer's storage
    comp: _Codec | None = None  # Kahan's compensation buffer
    shard: "_Shard | None" = None  # where this process's rows sit (DTensor parameters)


# -- DTensor (FSDP2) parameters ------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _Shard:
    """The rows ``start .. start + rows - 1`` of a ``shape`` tensor sharded on dim 0
    (``torch.chunk``'s split, which DTensor's and FSDP2's ``Shard(0)`` use: every process
    but the last ones holds ``ceil(n0 / world)`` rows)."""

    shape: tuple
    start: int
    rows: int
    mesh: object
    placements: tuple

    @property
    def offset(self) -> int:
        """The global C-order index of this shard's first element (its SR counter base)."""
        return self.start * math.prod(self.shape[1:])


def _shard_of(name, p) -> _Shard:
    from torch.distributed.tensor import Shard
    mesh, pl = p.device_mesh, tuple(p.placements)
    if mesh.ndim != 1 or len(pl) != 1 or type(pl[0]) is not Shard or pl[0].dim != 0:
        raise ValueError(f"parameter {name!r} is a DTensor with placements {pl} on a "
                         f"{mesh.ndim}-D mesh; ECO optimizers take DTensors sharded on dim 0 "
                         "only (Shard(0) on a 1-D mesh, as FSDP2's fully_shard makes them)")
    world, rank = mesh.size(), mesh.get_local_rank()
    shape = tuple(p.shape)
    chunk = -(-shape[0] // world)
    start = min(rank * chunk, shape[0])
    rows = min(chunk, shape[0] - start)
    local = p.to_local()
    if tuple(local.shape) != (rows,) + shape[1:]:  # pragma: no cover - a layout torch changed
        raise ValueError(f"parameter {name!r}: local shard of shape {tuple(local.shape)}, "
                         f"expected rows {start}..{start + rows} of {shape} (torch.chunk's split)")
    return _Shard(shape, start, rows, mesh, pl)


def _check_sharded_quantizer(name, q: Quantizer, shard: _Shard, what: str):
    """Refuse a quantizer whose blocks would span processes: a scale must come from whole
    rows (row-wise, or groups along the last axis) or be fixed."""
    if q.fixed:
        return
    g, nd = q.granularity, len(shard.shape)
    chunk = -(-shard.shape[0] // shard.mesh.size())
    if nd >= 2 and (g == "row" or isinstance(g, int)):
        return
    if nd == 1 and isinstance(g, int) and chunk % g == 0:
        return
    raise ValueError(
        f"{what} of parameter {name!r} (granularity {g!r}, scale {q.scale!r}) has blocks that "
        f"span the dim-0 shards of its {shard.shape} tensor, so its scales would need a "
        "reduction across processes, which is not implemented: with sharded (DTensor/FSDP2) "
        "parameters use granularity='row' or a group size along the last axis of a matrix, "
        "or a fixed scale")


class _ShardKey(int):
    """A root key that also carries a shard's global element offset: SR keys derived from it
    by :func:`_sr_key` draw element ``i`` of the shard from counter ``offset + i``, the
    counter element ``offset + i`` of the whole tensor would use."""

    def __new__(cls, key, offset):
        obj = int.__new__(cls, key)
        obj.offset = int(offset)
        return obj


def _sr_key(key, *data):
    """``fold_in(key, *data)``, as ``(key, counter)`` for a shard (see :class:`_ShardKey`)."""
    k = rng.fold_in(key, *data)
    off = getattr(key, "offset", 0)
    return (k, off) if off else k


class _ECOBase(torch.optim.Optimizer):
    _moments: tuple = ("m",)

    def __init__(self, params, defaults, scheme, weights, key, states, diagnostics=False):
        self.collect_diagnostics = check_bool(diagnostics, "diagnostics")
        self._never: dict[str, torch.Tensor] = {}  # name -> weights never changed (diagnostics)
        self._last_diag: dict | None = None
        self._diag: _StepDiag | None = None
        if scheme not in _SCHEMES:
            raise ValueError(f"scheme must be one of {_SCHEMES}, got {scheme!r}")
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
                             "parameters stored by ecosim.torch.nn.store_weights")

    @classmethod
    def _resolve_states(cls, states, scheme) -> dict:
        return dict(_np_resolve_states(states, cls._moments, scheme, convert=_state_codec))

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
        shard = _shard_of(name, p) if is_dtensor(p) else None
        if layer is not None:  # W_0 when the layer still has it (see ecosim.torch.nn)
            w0 = layer.pop_initial()
            full = (w0.to(device=layer.codes.device, dtype=layer._value_dtype, copy=True)
                    if w0 is not None
                    and self.scheme in ("master", "eco_exact", "kahan") else layer.read())
        else:
            if p.dtype not in (torch.float32, torch.float64):
                raise TypeError(f"parameter {name!r} must be float32 or float64, got {p.dtype}")
            full = local_tensor(p).detach().clone()  # a DTensor's rows held here
        if not bool(torch.isfinite(full).all()):
            raise ValueError(f"parameter {name!r} has non-finite values")
        q = self._quantizer_for(name, layer)
        if layer is None and q is not None and p.ndim > 2 and not q.fixed \
                and q.granularity != "tensor":
            raise ValueError(
                f"parameter {name!r} has shape {tuple(p.shape)}: granularity "
                f"{q.granularity!r} scales along its last axis (a kernel row), not per output "
                "channel; store it with ecosim.torch.quantize_model/store_weights (one scale "
                "per output channel) or give it weights=None or a tensor-wise quantizer")
        meta = _Meta(name, q, layer, self.scheme if q is not None else "fp",
                     layer._codec if layer is not None else (_Codec(q) if q else None),
                     shard=shard)
        if meta.scheme == "kahan":
            meta.comp = _Codec(compensation_quantizer(q))
        if shard is not None:
            if q is not None:
                _check_sharded_quantizer(name, q, shard, "the weight quantizer")
            for which, codec in self._codecs_of(meta).items():
                _check_sharded_quantizer(name, codec.q, shard, f"the {which!r} state format")
                if codec.packed:
                    raise ValueError(f"the {which!r} state format {codec.q.fmt.name} of "
                                     f"sharded parameter {name!r} packs several codes per "
                                     "byte: not supported with DTensor parameters")
            if "g" in self.states:
                _check_sharded_quantizer(name, self.states["g"].q, shard, "the 'g' format")
        self._meta[name] = meta
        st = self.state[p]
        key = self._key(group, meta)
        if meta.scheme == "master" and "master" in self.states:  # the stored master copy
            full = self._keep(st, "master", full, key, "init", name, "master")
        if q is None:
            w = full
        else:
            w = self._write(meta, p, full, _sr_key(key, "init", name)
                            if q.mode == "sr" else None)
        self._init_state(st, group, meta, full, w)

    @staticmethod
    def _key(group, meta):
        """The group's root key; for a shard, one that offsets its SR counters."""
        if meta.shard is not None and meta.shard.offset:
            return _ShardKey(group["key"], meta.shard.offset)
        return group["key"]

    # -- buffers ----------------------------------------------------------------------------------
    def _keep(self, st, which, x, key, *data, codec=None):
        """Store buffer ``which`` (quantized when it has a format) and return its values."""
        codec = codec or self.states.get(which)
        if codec is None:
            st[which] = x
            return x
        k = _sr_key(key, *data) if codec.q.mode == "sr" else None
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
        return codec.encode(g, _sr_key(key, t, name, "g") if codec.q.mode == "sr"
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

    def _write_scheme(self, meta, p, st, w, tt, key, t):
        """NumPy's ``_write_scheme``: round ``tt`` onto the weight grid per scheme; returns
        ``e = tt - q(tt)`` for eco/eco_exact (``tt`` is overwritten), else None."""
        if meta.scheme == "fp":
            local_tensor(p).copy_(tt)
            return None
        name = meta.name
        if meta.scheme == "master":
            tt = self._keep(st, "master", tt, key, t, name, "master")
        new_w = self._write(meta, p, tt, _sr_key(key, t, name)
                            if meta.q.mode == "sr" else None)
        if meta.scheme in ("master", "naive"):
            return None
        e = tt.sub_(new_w)
        if meta.scheme == "kahan":
            self._keep(st, "c", e, key, t, name, "c", codec=meta.comp)
            return None
        return e

    def _weights_of(self, meta, p):
        return meta.layer.read() if meta.layer is not None else local_tensor(p).detach()

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
        return rtn.encode(local_tensor(p).detach(), scales=self.state[p].get("w_scales"))

    def state_values(self, p, which: str) -> torch.Tensor:
        """The values of state buffer ``which`` (``"m"``, ``"v"``, ``"master"``, ``"e_prev"``,
        ``"c"``) of parameter ``p`` (a tensor or its name), dequantized when it is stored in low
        precision (what the NumPy optimizer's state holds)."""
        if isinstance(p, str):
            p = self._param_of(p)
        name = next(n for g in self.param_groups for n, q in zip(g["names"], g["params"])
                    if q is p)
        meta = self._meta[name]
        dtype = meta.layer._value_dtype if meta.layer is not None else p.dtype
        like = torch.empty(local_tensor(p).shape, dtype=dtype, device="meta")
        return self._load(self.state[p], which, like, self._codecs_of(meta).get(which))

    def __getstate__(self):
        return dict(super().__getstate__(), **{k: v for k, v in self.__dict__.items()
                                              if k in _OWN_ATTRS})

    def _metas_by_index(self) -> list:
        """The parameters' metadata in ``state_dict``'s index order."""
        return [self._meta[n] for g in self.param_groups for n in g["names"]]

    def _row_state(self, meta, k) -> bool:
        """Whether state ``k`` of a parameter is split by rows as the parameter is: the
        buffers of its shape and the scales of row-wise (or per-group) formats."""
        if k.endswith("_scales"):
            base = k[:-len("_scales")]
            codec = meta.codec if base == "w" else self._codecs_of(meta).get(base)
            return codec is not None and not codec.q.fixed
        return k in ("m", "v", "master", "e_prev", "c")

    def state_dict(self):
        """``Optimizer.state_dict`` plus the step counter, low-precision codes as same-size
        integers. The states of a DTensor parameter are DTensors with its placement (their
        ``full_tensor()`` is what one process holding the whole parameter would have)."""
        sd = super().state_dict()
        sd["ecosim_t"] = self._step_count_t
        metas = self._metas_by_index()
        # Low-precision codes as same-size integers: load_state_dict casts floats.
        sd["state"] = {i: {k: self._export(metas[i], k, v) for k, v in s.items()}
                       for i, s in sd["state"].items()}
        return sd

    def full_state_dict(self):
        """:meth:`state_dict` with the states of DTensor parameters gathered into whole
        tensors: what an unsharded optimizer's ``state_dict`` holds. A collective: every
        process of the mesh calls it (in the same order)."""
        sd = self.state_dict()
        sd["state"] = {i: {k: _full_tensor(v) if is_dtensor(v) else v for k, v in s.items()}
                       for i, s in sd["state"].items()}
        return sd

    def _export(self, meta, k, v):
        if not isinstance(v, torch.Tensor):
            return v
        v = _raw(v)
        sh = meta.shard
        if sh is None or not self._row_state(meta, k):
            return v
        from torch.distributed.tensor import DTensor
        shape = (sh.shape[0],) + tuple(v.shape[1:])
        stride = tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))
        return DTensor.from_local(v, sh.mesh, sh.placements, run_check=False, shape=shape,
                                  stride=stride)

    def load_state_dict(self, state_dict):
        """Inverse of :meth:`state_dict`. For a DTensor parameter a state may be a DTensor,
        the whole tensor (a checkpoint of an unsharded run, or a gathered one: this process
        takes its rows) or this process's rows."""
        state_dict = dict(state_dict)
        t = state_dict.pop("ecosim_t", None)
        super().load_state_dict(state_dict)
        if t is not None:
            self._step_count_t = int(t)
        for group in self.param_groups:
            for name, p in zip(group["names"], group["params"]):
                st = self.state[p]
                sh = self._meta[name].shard
                if sh is not None:
                    for k, v in list(st.items()):
                        if isinstance(v, torch.Tensor) and self._row_state(self._meta[name], k):
                            st[k] = _rows_of(v, sh, name, k)
                for which, codec in self._codecs_of(self._meta[name]).items():
                    for k, typed in ((which, codec.typed), (which + "_scales",
                                                            codec.scales_typed)):
                        if k in st:
                            st[k] = _restore(st[k], typed)

    # -- the step ---------------------------------------------------------------------------------
    def _grads(self, group, t):
        gs = []
        for name, p in zip(group["names"], group["params"]):
            if p.grad is None:
                raise ValueError(f"parameter {name!r} has no gradient")
            if p.grad.is_sparse:
                raise ValueError(f"parameter {name!r} has a sparse gradient (not supported)")
            gs.append(local_tensor(p.grad).detach())
        # min and max propagate NaN and show inf: one pass per gradient (isfinite().all() is
        # ~10x slower on the CPU) and one device sync per group; the slow check only names
        # the culprit.
        ends = [e for g in gs if g.numel() for e in torch.aminmax(g)]
        if not ends or bool(torch.isfinite(torch.stack(ends)).all()):
            return gs
        for name, g in zip(group["names"], gs):
            if g.numel() and not bool(torch.isfinite(g).all()):
                raise ValueError(f"gradient of parameter {name!r} at step {t} has "
                                 "non-finite values")
        raise AssertionError("unreachable: aminmax saw a non-finite value")  # pragma: no cover

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        t = self._step_count_t
        diag = self._diag = (_StepDiag() if getattr(self, "collect_diagnostics", False)
                             else None)
        for group in self.param_groups:
            _check_lr(group["lr"], "fp")
            self._check_group(group)
            gs = self._grads(group, t)
            for name, p, g in zip(group["names"], group["params"], gs):
                meta = self._meta[name]
                w = self._weights_of(meta, p)
                g = self._qgrad(g.to(w.dtype), self._key(group, meta), t, name)
                if diag is None or meta.q is None:
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

    def _flat_codes(self, p) -> torch.Tensor:
        """The stored codes of quantized parameter ``p`` (a copy), one integer per weight in
        C order (packed codes unpacked)."""
        enc = self.encoded(p)
        n = math.prod(local_tensor(p).shape) if stored(p) is None else math.prod(enc.shape)
        if enc.packed_bits:
            return unpack(enc.codes, enc.packed_bits, n)
        return _raw(enc.codes).reshape(-1).clone()

    def _diag_param(self, diag, meta, p, codes_old, g):
        """Record the diagnostics of quantized parameter ``meta.name`` after its update."""
        name = meta.name
        changed = self._flat_codes(p) != codes_old
        never = self._never.get(name)
        if never is None or never.shape != changed.shape:
            never = self._never[name] = torch.ones_like(changed)
        never &= ~changed
        like = torch.empty(local_tensor(p).shape, device="meta",
                           dtype=meta.layer._value_dtype if meta.layer is not None else p.dtype)
        m = self._load(self.state[p], "m", like).to(torch.float64)
        g64 = g.to(torch.float64)
        diag.finish(name, torch.stack([
            changed.sum().to(torch.float64), never.sum().to(torch.float64),
            torch.dot(m.ravel(), m.ravel()), torch.dot(g64.ravel(), g64.ravel())]),
            changed.numel())

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

    def diagnostics(self) -> dict | None:
        """The diagnostics of the last step (None before the first step, or when the optimizer
        was built without ``diagnostics=True``).

        Over the quantized parameters of this process (a DTensor parameter: its rows; the
        full-precision ones are left out), aggregated and per parameter (``"params"``: name ->
        the same keys):

        * ``"changed_frac"``: the fraction of stored codes that changed in this step (the codes
          of :meth:`encoded`; a rescaled block whose codes stayed counts as unchanged, where
          NumPy's ``changed_frac`` compares values, all of which a moving row scale changes);
        * ``"never_changed_frac"``: the fraction never changed since diagnostics began (the
          first step taken with them on; :meth:`never_changed` gives the mask): weights
          stalled by round-to-nearest;
        * ``"m_over_g"``: ``|m| / |g|``, the 2-norm of the stored first moment after the
          step over the 2-norm of this step's gradient (after its quantization point, before
          weight decay); NaN for a zero gradient;
        * ``"inject_kept"`` (ECO only, else NaN): NumPy's definition, ``<kept, intended> /
          <intended, intended>`` in float64, ``intended`` the injection added to ``m`` and
          ``kept`` the stored momentum's move (1 with a full-precision momentum; NaN when
          nothing was injected), and ``"inject_lost"``: the fraction of elements with a
          nonzero injection whose stored momentum did not move.

        The aggregate of a ratio is the ratio of the sums (``sqrt(sum |m|^2 / sum |g|^2)``,
        ``sum <kept, intended> / sum <intended, intended>``). Also ``"step"``: the step's
        index. Collecting them costs a copy of each parameter's codes, a read of ``m``, a few
        reductions and one device-to-host transfer per step, and changes no result. The
        codes are compared through :meth:`encoded`: for a stored weight its codes (a copy,
        no sync); for a plain (not stored) parameter an RTN encoding of its values before and
        after the step, whose scale check adds a sync per parameter.
        """
        return self._last_diag

    def never_changed(self, p) -> torch.Tensor:
        """The bool mask of the stored weights of ``p`` (a tensor or its name; a DTensor's
        rows) that no step has changed since diagnostics began (``diagnostics=True``)."""
        name = p if isinstance(p, str) else next(
            n for g in self.param_groups for n, q in zip(g["names"], g["params"]) if q is p)
        if name not in self._never:
            raise KeyError(f"no never-changed mask for {name!r}: it is not quantized, no step "
                           "has run, or the optimizer was built without diagnostics=True")
        return self._never[name]

    def _check_group(self, group):
        pass


class _StepDiag:
    """Collects one step's diagnostics as device tensors, one row per quantized parameter:
    ``[changed, never, |m|^2, |g|^2, <kept, intended>, <intended, intended>, injected,
    lost]`` (float64; the sizes are host ints); :meth:`result` moves them to the host in one
    transfer."""

    _INJ = 4  # the injection's entries, zeros when nothing was injected

    def __init__(self):
        self.rows: dict[str, list] = {}
        self.sizes: dict[str, int] = {}  # elements per parameter (host ints)
        self.injected: set[str] = set()

    def begin(self, name):
        self.rows[name] = [None, None]

    def inject(self, name, intended, kept):
        a = intended.to(torch.float64).ravel()
        b = kept.to(torch.float64).ravel()
        nz = a != 0
        self.rows[name][1] = torch.stack([torch.dot(a, b), torch.dot(a, a),
                                          nz.sum().to(torch.float64),
                                          (nz & (b == 0)).sum().to(torch.float64)])
        self.injected.add(name)

    def finish(self, name, row, n):
        inj = self.rows[name][1]
        self.rows[name][0] = torch.cat([row, inj if inj is not None else
                                        row.new_zeros(self._INJ)])
        self.sizes[name] = n

    @staticmethod
    def _values(n, changed, never, msq, gsq, dot, isq, inj_n, lost, injected):
        return {
            "changed_frac": changed / n if n else 0.0,
            "never_changed_frac": never / n if n else 0.0,
            "m_over_g": math.sqrt(msq / gsq) if gsq > 0 else math.nan,
            "inject_kept": dot / isq if injected and isq > 0 else math.nan,
            "inject_lost": lost / inj_n if injected and inj_n else math.nan,
        }

    def result(self, t) -> dict:
        names = list(self.rows)
        if not names:
            return {"step": t, **self._values(0, 0, 0, 0.0, 0.0, 0.0, 0.0, 0, 0, False),
                    "params": {}}
        dev = self.rows[names[0]][0].device
        table = torch.stack([self.rows[n][0].to(dev) for n in names]).tolist()  # one sync
        per = {n: self._values(self.sizes[n], *row, n in self.injected)
               for n, row in zip(names, table)}
        tot = [math.fsum(col) for col in zip(*table)]
        return {"step": t, **self._values(sum(self.sizes.values()), *tot, bool(self.injected)),
                "params": per}


def _full_tensor(v) -> torch.Tensor:
    """``v.full_tensor()``; 16-bit integer codes travel as int32 (gloo has no int16)."""
    if v.dtype == torch.int16:
        return v.to(torch.int32).full_tensor().to(torch.int16)
    return v.full_tensor()


def _rows_of(v: torch.Tensor, sh: _Shard, name, k) -> torch.Tensor:
    """This process's rows of a loaded state (a DTensor, the whole tensor, or the rows)."""
    if is_dtensor(v):
        return v.to_local()
    if v.shape[0] == sh.shape[0]:
        return v[sh.start:sh.start + sh.rows].clone()
    if v.shape[0] == sh.rows:
        return v
    raise ValueError(f"state {k!r} of parameter {name!r} has {v.shape[0]} rows: neither the "
                     f"parameter's {sh.shape[0]} nor this process's {sh.rows}")


def _restore(v: torch.Tensor, typed: torch.dtype | None) -> torch.Tensor:
    """A state tensor back in its storage dtype after ``load_state_dict`` (which may have cast
    the integer codes to the parameter's float dtype: their values are exact)."""
    if typed is None or v.dtype == typed:
        return v
    raw = torch.uint8 if typed.itemsize == 1 else torch.int16
    return v.to(raw).view(typed)


def _resolve_weights(weights):
    if weights is None or isinstance(weights, Quantizer):
        return weights
    if isinstance(weights, Mapping):
        return weights_dict(weights, Quantizer, "an ecosim.torch.Quantizer")
    raise TypeError(f"weights must be an ecosim.torch.Quantizer, a dict name -> Quantizer | None, "
                    f"or None (stored weights use their store's quantizer); got "
                    f"{type(weights).__name__}")


class ECOSGD(_ECOBase):
    """SGD with momentum over quantized weights (mirror of :func:`ecosim.optim.sgdm`).

    Step ``t`` (``lr = group["lr"]``; ``g`` the gradient at the stored weights ``w``, plus
    ``weight_decay * w``; ``gain = beta``, ``beta**2`` with Nesterov)::

        m = beta * m + (1 - beta) * g        # heavy_ball: m = beta * m + g;    [q_m]
        u = m                                # nesterov: u = beta * m + (1 - beta) * g
        theta_tilde = base - lr * u          # base: w; master: theta; kahan: w + c
        w = q(theta_tilde);  e = theta_tilde - w          <- the weight write
        eco:       m += (1/lr)(1 - 1/beta) e             (Nesterov: / beta once more) [q_m]
        eco_exact: m += e_prev (beta/(gain lr)) - e (1/(gain lr_next));  e_prev = e  [q_m]
        kahan:     c = q_c(e)
        master:    theta = theta_tilde                                              [q_master]

    Args:
        params: tensors, ``named_parameters()`` pairs, or param-group dicts of either; a
            :class:`~ecosim.torch.nn.GradSlot` (a weight stored by
            :func:`~ecosim.torch.nn.store_weights`) is read from and written to its codes.
        lr: learning rate (> 0 for eco/eco_exact).
        momentum: ``beta`` in (0, 1) (eco/eco_exact), [0, 1) otherwise.
        weight_decay: coupled L2.
        scheme: ``"master"``, ``"naive"``, ``"eco"``, ``"eco_exact"``, ``"kahan"``.
        weights: an :class:`ecosim.torch.Quantizer` for every plain parameter, a dict name ->
            Quantizer or None (None or absent: that parameter stays in full precision and is
            updated like ``"fp"``), or None (stored weights only; the rest full precision).
            Stored weights use their store's quantizer (a different one here is an error).
        key: root key of the SR draws.
        nesterov, heavy_ball: as :func:`ecosim.optim.sgdm`.
        states: per-buffer formats ``{"g": ..., "m": ..., "master": ...}``: an
            :class:`ecosim.torch.Quantizer`, a format name or a ``(format, mode)`` pair (as
            :func:`ecosim.optim.base.state_quantizer`).
        diagnostics: collect per-step diagnostics (:meth:`diagnostics`, :meth:`never_changed`):
            the fraction of stored weights changed, never changed, ``|m|/|g|`` and ECO's
            injected energy kept. Off by default (then it costs nothing); on, it changes no
            result.

    Example:
        >>> import torch
        >>> from ecosim.torch import Quantizer
        >>> p = torch.nn.Parameter(torch.ones(1, 4))
        >>> opt = ECOSGD([p], 0.1, 0.9, scheme="eco", weights=Quantizer("int8", scale=2.0**-4))
        >>> for _ in range(20):              # every update is below half a grid step
        ...     p.grad = torch.full((1, 4), 0.2)
        ...     opt.step()
        >>> p.detach()                      # naive rounding would stay at 1.0
        tensor([[0.8750, 0.8750, 0.8750, 0.8750]])
    """

    def __init__(self, params, lr, momentum=0.9, weight_decay=0.0, *, scheme="eco",
                 weights=None, key=0, nesterov=False, heavy_ball=False, states=None,
                 diagnostics=False):
        lo_ok = scheme not in ("eco", "eco_exact")
        if not (0.0 <= momentum < 1.0) or (not lo_ok and momentum == 0.0):
            raise ValueError(f"momentum must be in {'[0, 1)' if lo_ok else '(0, 1)'} for "
                             f"scheme {scheme!r}, got {momentum!r}")
        if weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {weight_decay!r}")
        self.nesterov = check_bool(nesterov, "nesterov")
        self.heavy_ball = check_bool(heavy_ball, "heavy_ball")
        super().__init__(params, dict(lr=lr, momentum=float(momentum),
                                      weight_decay=float(weight_decay), next_lr=None),
                         scheme, weights, key, states, diagnostics)

    def _gain(self, beta):
        return beta * beta if self.nesterov else beta

    def _lr_next(self, group):
        nl = group.get("next_lr")
        return group["lr"] if nl is None else nl

    def _check_group(self, group):
        if self.scheme == "eco_exact" and (group["lr"] == 0.0 or self._lr_next(group) <= 0.0):
            raise ValueError("eco_exact with a zero learning rate (this step's or the next's) "
                             "is not supported here (NumPy keeps the error pending)")

    def _init_state(self, st, group, meta, full, w):
        name, key = meta.name, self._key(group, meta)
        self._zeros(st, "m", full)
        if meta.scheme == "master":
            if "master" not in self.states:
                st["master"] = full
        elif meta.scheme == "eco_exact":
            e0 = full - w
            st["e_prev"] = e0
            m0 = e0 * (-1.0 / (self._gain(group["momentum"]) * group["lr"]))
            self._keep(st, "m", m0, key, 0, name, "init_m")
        elif meta.scheme == "kahan":
            self._keep(st, "c", full - w, key, "init", name, "c", codec=meta.comp)

    def _step_param(self, meta, p, w, g, st, group, t):
        beta, lr, wd = group["momentum"], group["lr"], group["weight_decay"]
        name, key = meta.name, self._key(group, meta)
        if wd:
            g = g + wd * w  # coupled L2 at the stored weights
        m = self._load(st, "m", w)
        m.mul_(beta)
        m += g if self.heavy_ball else (1.0 - beta) * g
        m = self._keep(st, "m", m, key, t, name, "m")
        if self.nesterov:
            u = m * beta
            u += g if self.heavy_ball else (1.0 - beta) * g
        else:
            u = m
        if lr == 0.0:  # no write: no rounding, no error, nothing to inject
            return
        if meta.scheme == "master":
            base = self._load(st, "master", w)
        elif meta.scheme == "kahan":
            base = w + self._load(st, "c", w, meta.comp)
        else:
            base = w
        tt = u * (-lr)
        tt += base  # theta_tilde = base - lr * u
        e = self._write_scheme(meta, p, st, w, tt, key, t)
        if e is None:
            return
        gain = self._gain(beta)
        if meta.scheme == "eco":
            a = (1.0 / lr) * (1.0 - 1.0 / beta)
            e *= a / beta if self.nesterov else a
            self._inject(st, m, e, key, t, name)
        else:  # eco_exact
            m += st["e_prev"] * (beta / (gain * lr))
            m -= e * (1.0 / (gain * self._lr_next(group)))
            self._keep(st, "m", m, key, t, name, "m_inject")
            st["e_prev"] = e


class ECOAdamW(_ECOBase):
    """AdamW over quantized weights (mirror of :func:`ecosim.optim.adamw`).

    Step ``t`` (``n = t + 1``, ``lr = group["lr"]``, ``g`` the gradient at the stored weights
    ``w``)::

        m = b1 m + (1 - b1) g;   v = b2 v + (1 - b2) g^2                    [q_m, q_v]
        d = sqrt(v / (1 - b2^n)) + eps
        theta_tilde = base (1 - lr wd) - (lr / (1 - b1^n)) m / d
            # base: w; master: theta; eco_exact: w + e_prev; kahan: w + c
        w = q(theta_tilde);  e = theta_tilde - w          <- the weight write
        eco:       m += ((1 - b1^n)/lr)(1 - 1/b1) d e     [* (1 - lr wd)]       [q_m]
        eco_exact: e_prev = e
        kahan:     c = q_c(e)
        master:    theta = theta_tilde                                          [q_master]

    Args:
        params, weights, key, states, diagnostics: as :class:`ECOSGD` (``states`` keys ``"g"``,
            ``"m"``, ``"v"``, ``"master"``).
        lr: learning rate (> 0 for eco).
        betas: ``(b1, b2)``; ``b1`` in (0, 1) for eco/eco_exact.
        eps: added to the root of the bias-corrected second moment, > 0.
        weight_decay: decoupled weight decay.
        scheme: ``"master"``, ``"naive"``, ``"eco"``, ``"eco_exact"``, ``"kahan"``.
        wd_corrected_injection: multiply ECO's coefficient by ``(1 - lr wd)``.
        compile: run the element-wise math (the moment updates, and ``d`` and
            ``(lr/bc1) m/d``) through ``torch.compile`` (two graphs, dynamic shapes, no
            recompilation as ``n`` grows); the rounding steps stay eager. If compilation fails
            the optimizer warns once (RuntimeWarning) and runs eager. Measured on the CPU with
            torch 2.13 (inductor's C++ backend): bit-identical with NumPy over 30 steps of
            three 64 x 96 tensors (inductor builds its C++ with ``-ffp-contract=off``, and no
            square-root mismatch showed; ``tests/test_torch_optim.py``, marked slow), and
            10 ms faster per step on 4.2M parameters (82 vs 92 ms RTN, 133 vs 140 ms SR,
            stored FP8) after a first step that compiles for a few seconds. Off by default:
            other backends (Triton on CUDA) may contract ``a*b + c`` into a fused multiply-add,
            which rounds once where NumPy rounds twice, so bit-identity is not guaranteed
            there.

    Constructed like ``ECOAdamW(model.named_parameters(), lr, betas=(0.9, 0.999), eps=1e-8,
    weight_decay=0.0, scheme="eco", weights=Quantizer("e4m3", "sr", granularity="row"),
    key=0)``; with weights stored by :func:`~ecosim.torch.nn.store_weights`, ``weights=`` may
    be omitted (the other parameters then stay in full precision).
    """

    _moments = ("m", "v")

    def __init__(self, params, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, *,
                 scheme="eco", weights=None, key=0, states=None, wd_corrected_injection=False,
                 compile=False, diagnostics=False):
        b1, b2 = (float(b) for b in betas)
        eco = scheme in ("eco", "eco_exact")
        if not (0.0 <= b1 < 1.0) or (eco and b1 == 0.0):
            raise ValueError(f"betas[0] must be in {'(0, 1)' if eco else '[0, 1)'} for scheme "
                             f"{scheme!r}, got {b1!r}")
        if not (0.0 <= b2 < 1.0):
            raise ValueError(f"betas[1] must be in [0, 1), got {b2!r}")
        if not eps > 0:
            raise ValueError(f"eps must be > 0, got {eps!r}")
        if weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {weight_decay!r}")
        self.wd_corrected_injection = check_bool(wd_corrected_injection,
                                                 "wd_corrected_injection")
        self._math = _AdamMath(check_bool(compile, "compile"))
        super().__init__(params, dict(lr=lr, betas=(b1, b2), eps=float(eps),
                                      weight_decay=float(weight_decay)), scheme, weights, key,
                         states, diagnostics)

    def _init_state(self, st, group, meta, full, w):
        self._zeros(st, "m", full)
        self._zeros(st, "v", full)
        if meta.scheme == "master":
            if "master" not in self.states:
                st["master"] = full
        elif meta.scheme == "eco_exact":
            st["e_prev"] = full - w
        elif meta.scheme == "kahan":
            self._keep(st, "c", full - w, self._key(group, meta), "init", meta.name, "c",
                       codec=meta.comp)

    def _step_param(self, meta, p, w, g, st, group, t):
        (b1, b2), lr, eps, wd = group["betas"], group["lr"], group["eps"], group["weight_decay"]
        name, key = meta.name, self._key(group, meta)
        n = t + 1
        bc1, bc2 = 1.0 - b1**n, 1.0 - b2**n
        m, v = self._load(st, "m", w), self._load(st, "v", w)
        self._math.moments(m, v, g, b1, b2)
        m = self._keep(st, "m", m, key, t, name, "m")
        v = self._keep(st, "v", v, key, t, name, "v")
        if lr == 0.0:  # no write: no rounding, no error, nothing to inject
            return
        d, tt = self._math.direction(m, v, bc1, bc2, eps, lr)
        if meta.scheme == "master":
            base = self._load(st, "master", w)
        elif meta.scheme == "eco_exact":
            base = w + st["e_prev"]
        elif meta.scheme == "kahan":
            base = w + self._load(st, "c", w, meta.comp)
        else:
            base = w
        decay = 1.0 - lr * wd
        if wd:
            base = base * decay
        torch.sub(base, tt, out=tt)  # theta_tilde = base (1 - lr wd) - (lr/bc1) m / d
        e = self._write_scheme(meta, p, st, w, tt, key, t)
        if e is None:
            return
        if meta.scheme == "eco":
            coef = (bc1 / lr) * (1.0 - 1.0 / b1)
            if self.wd_corrected_injection:
                coef *= decay
            d *= coef
            d *= e
            self._inject(st, m, d, key, t, name)
        else:  # eco_exact
            st["e_prev"] = e


class _AdamMath:
    """AdamW's element-wise math, eager (NumPy's operation order) or through ``torch.compile``.

    ``moments`` updates ``m`` and ``v`` in place; ``direction`` returns ``d = sqrt(v/bc2) + eps``
    and ``(lr/bc1) m / d`` as new tensors.
    """

    _warned = False

    def __init__(self, compile: bool):
        self.compiled = None
        if compile:
            try:
                self.compiled = (torch.compile(_moments, dynamic=True),
                                 torch.compile(_direction_c, dynamic=True))
            except Exception as err:  # noqa: BLE001 - any failure means eager
                self._fail(err)

    def _fail(self, err):
        self.compiled = None
        if not _AdamMath._warned:
            _AdamMath._warned = True
            warnings.warn(f"ECOAdamW(compile=True): torch.compile failed ({type(err).__name__}: "
                          f"{err}); running eager", RuntimeWarning, stacklevel=4)

    def moments(self, m, v, g, b1, b2):
        if self.compiled is not None:
            try:
                self.compiled[0](m, v, g, b1, b2)
                return
            except Exception as err:  # noqa: BLE001
                self._fail(err)
        _moments(m, v, g, b1, b2)

    def direction(self, m, v, bc1, bc2, eps, lr):
        if self.compiled is not None:
            try:
                return self.compiled[1](m, v, bc1, bc2, eps, lr)
            except Exception as err:  # noqa: BLE001
                self._fail(err)
        d = _sqrt(_div(v, bc2))  # a true division on every device (see _div)
        d += eps
        tt = m / d
        tt *= lr / bc1  # (lr / (1 - b1^n)) * m / d
        return d, tt


def _moments(m, v, g, b1, b2):
    """``m = b1 m + (1 - b1) g``, ``v = b2 v + (1 - b2) g^2`` in place, NumPy's roundings."""
    m.mul_(b1)
    m += (1.0 - b1) * g
    v.mul_(b2)
    v += (g * g) * (1.0 - b2)


def _direction_c(m, v, bc1, bc2, eps, lr):
    d = torch.sqrt(v / bc2) + eps
    return d, (m / d) * (lr / bc1)
