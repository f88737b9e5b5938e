"""Weights held as real low-precision codes during training: :class:`QuantizedLinear`.

This module owns the *storage* side of training without master weights in torch: a linear
layer whose weight exists between optimizer steps only as codes (``torch.float8_e4m3fn`` bits,
packed int4 bytes, ...) plus one scale per block (:func:`ecosim.torch.memory.measured_memory`
counts the bytes a model and its optimizer then hold). :func:`~ecosim.torch.layers.store_weights`
puts such layers in place of a model's chosen modules.

How the pieces fit (``ecosim.torch.optim`` does the updates)::

    model = MyModel()
    names = store_weights(model, Quantizer("e4m3", "sr", granularity="row"), key=0,
                          predicate=lambda name, mod: name.startswith("blocks."))
    opt = ECOAdamW(model.named_parameters(), 1e-3, scheme="eco", key=0)
    loss(model(x)).backward();  opt.step();  opt.zero_grad()

* :class:`QuantizedLinear` keeps the buffers ``codes`` (uint8: the codes' raw bytes, one per
  weight for 8-bit formats, two int4 codes per byte, ...; :meth:`~QuantizedLinear.encoded`
  views them in their torch dtype, e.g. ``torch.float8_e4m3fn``) and ``scales`` (float32, one
  per block). Its forward dequantizes ``W = fl(s * code)`` (the values
  :class:`ecosim.torch.Quantizer` returns, bit for bit) inside a custom autograd function that
  saves the codes, not ``W``, and dequantizes again in backward. Static memory: 1 byte per
  weight for FP8 plus 4 bytes per row.
* Its ``weight`` attribute is a :class:`GradSlot`: an ``nn.Parameter`` of the weight's shape
  whose storage is one zero broadcast to that shape (4 bytes). Reading it reads the stored
  values (differentiably), writing into it in place is refused (:mod:`ecosim.torch.slot`); it
  exists so that autograd, ``clip_grad_norm_``, DDP's gradient all-reduce and
  optimizers see a parameter of the right shape, and its ``.grad`` (full size, transient)
  receives the weight gradient. :func:`stored` maps a slot back to its layer; the ECO
  optimizers read the weights from the codes and write ``encode(theta_tilde)`` back.
* Names and keys: a layer replaced under the module path ``"a.b"`` stores the parameter named
  ``"a.b.weight"``; its first write is the optimizers' initial write, ``q(W)`` with SR key
  ``fold_in(key, "init", "a.b.weight")``. The optimizers name a stored parameter by this name
  (whatever name it is passed under), so their SR keys ``fold_in(key, t, name)`` match a run
  on full-precision parameters from ``model.named_parameters()`` of the unwrapped model, also
  when the model is later wrapped in DDP (``"module.a.b.weight"``) or compiled.
* Protocol of the first step: an optimizer takes a stored weight as already written (the
  codes are ``q(W_0)``): for ``"naive"``/``"eco"`` the trajectory equals the run on a float32
  parameter initialised with ``W_0`` and the same key, bit for bit. The schemes whose state
  needs ``W_0`` itself (``"master"``: the master copy; ``"eco_exact"``: ``e_0``; ``"kahan"``:
  ``c_0``) take it from the layer: :func:`~ecosim.torch.layers.store_weights` keeps a
  reference to the replaced ``nn.Linear``'s weight (:meth:`QuantizedLinear.pop_initial`,
  released by the first optimizer built over the layer), so they too equal that run. Without
  it (a layer loaded from a checkpoint) they start from ``q(W_0)`` (master copy ``q(W_0)``,
  ``e_0 = 0``), which matters: a master copy started on the grid puts every weight at the
  centre of RTN's dead zone at once (``small`` LM preset, 100 steps, master + RTN: validation
  loss 2.40 against 2.29 from ``W_0``).

Checkpoints: ``model.state_dict()`` holds ``codes``, ``scales`` and ``bias`` (not the slot),
so it is a real low-precision checkpoint; ``load_state_dict`` restores it bit for bit.
Conversions (``model.to(device)``, ``.half()``) move the codes and scales without changing
them. DDP: wrap with :func:`data_parallel` (``DistributedDataParallel(model,
init_sync=False)`` plus the initial broadcast done here, since DDP's own broadcast cannot write
into a broadcast-shaped slot); the codes travel as uint8, which gloo and NCCL both carry (gloo
refuses float8 tensors). Every rank applies the same update with the same keys, so the codes
stay equal without DDP's buffer broadcast (``forward_sync_buffers=False`` saves it).

Other layers (convolutions, transformers ``Conv1D``, ``nn.MultiheadAttention``, ``nn.Linear``
subclasses) are stored by :mod:`ecosim.torch.layers`, whole models by
:func:`ecosim.torch.quantize_model` (:func:`ecosim.torch.unstore_weights` goes back).

Not supported: FSDP (it would shard and materialise the slot), tied weights (refused: the
tie would silently break), double backward, in-place writes into the slot (``nn.init.*_``,
``torch.optim``, ``AveragedModel``: a TypeError names :meth:`QuantizedLinear.write`, the ECO
optimizers and :func:`ecosim.torch.ema_update`).
"""

from __future__ import annotations

import copy
import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import nn

from . import rng
from .quantizer import E8M0_DTYPE, STORAGE_DTYPES, Encoded, Quantizer, decode_bits
from .rounding import quantize
from .slot import GradSlot, _rebuild_slot, raw_slots, stored  # noqa: F401 (old pickles)

__all__ = ["GradSlot", "QuantizedLinear", "stored", "data_parallel"]

_FAST_NAN = ("fn", "ieee")  # NaN conventions whose torch casts agree with ecosim on the grid


# -- codes: one quantizer's storage --------------------------------------------------------------

class Codec:
    """How tensors quantized by ``q`` are held: codes (+ scales) and back, bit for bit.

    ``encode`` returns ``(values, codes, scales)`` with ``values == q(x, key=key)`` (what the
    NumPy optimizer keeps), ``codes`` in the torch dtype of the format (``float8_e4m3fn``,
    ``bfloat16``, packed ``uint8``, ...) and ``scales`` one per block (None for a plain cast:
    a fixed scale 1 onto ``bfloat16``/``float16``, stored as that dtype). Fast paths: the
    codes of on-grid finite values are exact torch casts (``fn``/``ieee`` formats with a torch
    dtype), which skips the integer encoder; anything else goes through
    :meth:`Quantizer.encode`/:meth:`Quantizer.decode`.
    """

    def __init__(self, q: Quantizer):
        fmt = q.fmt
        self.q = q
        self.packed = 0 if fmt.bits > 4 else (4 if fmt.bits > 2 else 2)
        self.typed = (STORAGE_DTYPES.get(fmt.dtype_name) if fmt.is_float and not self.packed
                      else None)
        self.fast = self.typed is not None and fmt.nan in _FAST_NAN and not q._may_nan
        self.plain = q.fixed and q.scale == 1.0  # NumPy's _apply shortcut: quantize directly
        self.cast = self.plain and self.typed in (torch.bfloat16, torch.float16)
        self.scales_typed = E8M0_DTYPE if (q.scale == "absmax_pow2" and E8M0_DTYPE is not None) else None
        # The CPU decode tables of one-byte codes, built here, eagerly: nothing is cached
        # while a forward runs, so torch.compile traces no writes to shared state.
        self.luts = ({dt: decode_bits(torch.arange(256), fmt, dt)
                      for dt in (torch.float32, torch.float64)}
                     if self.fast and self.typed.itemsize == 1 else {})

    def encode(self, x: torch.Tensor, key):
        q = self.q
        if self.cast:
            v = quantize(x, q.fmt, q.rounding, key=key)
            return v, v.to(self.typed), None
        if self.fast:
            x, c, s = q._codes(x, key, None)
            return (c * s).reshape(x.shape), c.to(self.typed), s
        enc = q.encode(x, key=key)
        return q.decode(enc), enc.codes, enc.scales

    def values(self, x: torch.Tensor, key):
        """``(q(x, key=key), scales)`` without the codes (scales None off the fast path)."""
        if self.fast:
            x, c, s = self.q._codes(x, key, None)
            return (c * s).reshape(x.shape), s
        return self.q(x, key=key), None

    def decode(self, codes, scales, shape, dtype) -> torch.Tensor:
        if self.cast:
            return codes.to(dtype)
        if self.fast and scales.dtype == dtype:
            lut = self.luts.get(dtype)
            if lut is not None and codes.element_size() == 1 and codes.device.type == "cpu":
                # torch's CPU float8 -> float32 cast is scalar code (~5x slower than this
                # gather from the 256 values, which are ecosim's decode_bits, exact).
                idx = codes.view(torch.uint8).reshape(-1).to(torch.int32)
                c = lut.index_select(0, idx).reshape(codes.shape)
            else:
                c = codes.to(dtype)
            return (c * scales).reshape(shape)
        return self.q.decode(Encoded(codes=codes, scales=scales, shape=tuple(shape), dtype=dtype,
                                     packed_bits=self.packed))

    def zeros(self, like: torch.Tensor):
        """``(values, codes, scales)`` of a zero tensor shaped as ``like`` (no random bits)."""
        z = torch.zeros_like(like, memory_format=torch.contiguous_format)
        if self.cast:
            return z, z.to(self.typed), None
        rtn = Codec(dataclasses.replace(self.q, mode="rtn"))
        return rtn.encode(z, None)


def as_raw_bits(t: torch.Tensor) -> torch.Tensor:
    """A floating low-precision tensor as same-size integers (same bits); others unchanged.

    Integers survive what floats do not: ``Module.half()``/``.to(dtype)`` conversions,
    ``Optimizer.load_state_dict``'s cast to the parameter's dtype, and gloo collectives
    (which refuse float8).
    """
    if t.is_floating_point() and t.element_size() <= 2:
        return t.view(torch.uint8 if t.element_size() == 1 else torch.int16)
    return t


def _typed(raw: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    """Inverse of :func:`as_raw_bits` (``dtype`` None: the tensor is already in its storage dtype)."""
    if dtype is None or raw.dtype == dtype:
        return raw
    return raw.view(dtype)


_HALF = (torch.bfloat16, torch.float16)


def start_weight(w: torch.Tensor, name: str) -> torch.Tensor:
    """``w`` detached, checked to be finite and floating (what a stored layer starts from);
    bfloat16/float16 weights are converted (exactly) to float32, the dtype the layer decodes
    in, so they are rounded from their own values."""
    w = w.detach()
    if w.is_meta:
        raise ValueError(f"{name!r} is on the meta device (no values to store); materialise "
                         "the model first (model.to_empty(device=...) and initialise or load "
                         "its weights), then quantize it")
    if w.dtype in _HALF:
        w = w.float()
    if w.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"{name!r} is {w.dtype}; stored weights start from float32, float64, "
                        "bfloat16 or float16 weights")
    if not bool(torch.isfinite(w).all()):
        raise ValueError(f"{name!r} has non-finite values")
    return w


# -- plain twins -------------------------------------------------------------------------------

def skeleton(mod: nn.Module) -> nn.Module:
    """A copy of ``mod`` (and its submodules) without parameters: what :meth:`to_plain` fills."""
    out = copy.copy(mod)
    out._parameters = {k: None for k in mod._parameters}
    out._buffers = dict(mod._buffers)
    out._modules = {k: skeleton(m) if m is not None else None for k, m in mod._modules.items()}
    return out


def param(value: torch.Tensor, like: torch.Tensor | None) -> nn.Parameter:
    """A new parameter holding ``value`` in ``like``'s dtype (a stored weight's slot: the
    module's dtype, e.g. bfloat16 after ``.to(torch.bfloat16)``) and requires_grad."""
    if like is not None:
        value = cast_to(value.detach(), like.dtype)
    return nn.Parameter(value.detach().clone(),
                        requires_grad=like.requires_grad if like is not None else True)


# -- the layer -----------------------------------------------------------------------------------

class _StoredLinear(torch.autograd.Function):
    """``y = x W^T + b`` with ``W`` dequantized from the codes; backward dequantizes again.

    Saves ``x`` and the codes and scales (not ``W``). The gradients are computed with the
    same BLAS calls as autograd's ``F.linear`` (``dx = dy W``, ``dW = dy^T x``,
    ``db = sum dy``), so on the CPU they equal those of ``nn.Linear`` holding ``W`` bit for
    bit. Under autocast, ``x``, ``W`` and ``b`` are cast to the autocast dtype, as for
    ``F.linear``.
    """

    # forward without ctx plus setup_context: what torch.func (grad, vmap) requires; the
    # ops are per-example safe (the codes are shared), so vmap's rule is generated
    generate_vmap_rule = True

    @staticmethod
    def forward(x, slot, bias, layer):
        dev = x.device.type
        codes, scales = layer.codes, layer.scales
        if torch.is_autocast_enabled(dev):
            cdt = torch.get_autocast_dtype(dev)
            with torch.autocast(dev, enabled=False):
                w = layer._decode(codes, scales).to(cdt)
                return F.linear(x.to(cdt), w, bias.to(cdt) if bias is not None else None)
        # no autocast: the same F.linear, without a context or casts (cheaper on small layers)
        return F.linear(x, cast_to(layer._decode(codes, scales), x.dtype), cast_to(bias, x.dtype))

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, slot, bias, layer = inputs
        dev = x.device.type
        cdt = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else x.dtype
        ctx.layer, ctx.cdt, ctx.x_dtype = layer, cdt, x.dtype
        # the gradients' dtypes (slot.dtype in backward would go through __torch_function__)
        ctx.w_dtype, ctx.b_dtype = slot.dtype, None if bias is None else bias.dtype
        # x itself when no cast happens: torch.compile refuses saving an alias of an input
        with torch.autocast(dev, enabled=False):
            xc = x if cdt == x.dtype else x.to(cdt)
        ctx.save_for_backward(xc, layer.codes, layer.scales)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dy):
        xc, codes, scales = ctx.saved_tensors
        layer, cdt = ctx.layer, ctx.cdt
        n_out, n_in = layer.out_features, layer.in_features
        g = cast_to(dy, cdt).reshape(-1, n_out)
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            w = cast_to(layer._decode(codes, scales), cdt)
            dx = cast_to(g.mm(w).reshape(xc.shape), ctx.x_dtype)
        if ctx.needs_input_grad[1]:
            dw = cast_to(g.t().mm(xc.reshape(-1, n_in)), ctx.w_dtype)
        if ctx.needs_input_grad[2]:
            db = cast_to(g.sum(0), ctx.b_dtype)
        return dx, dw, db, None


def holds_slot(layer, w) -> bool:
    """Whether ``w`` is ``layer``'s own slot (or a detached alias of it), also as torch.func
    wraps it; anything else is a weight substituted for the slot (``functional_call``)."""
    if torch.compiler.is_compiling():  # traced code: a slot's link to its layer is opaque
        return isinstance(w, GradSlot)
    fx = torch._C._functorch
    while fx.is_functorch_wrapped_tensor(w):
        w = fx.get_unwrapped(w)
    return stored(w) is layer


def cast_to(t, dtype):
    """``t.to(dtype)``, skipping the call where ``t`` has that dtype (or is None)."""
    return t if t is None or t.dtype == dtype else t.to(dtype)


class QuantizedLinear(nn.Module):
    """``nn.Linear`` whose weight is held as low-precision codes plus scales.

    Args:
        in_features, out_features: as ``nn.Linear``.
        quantizer: the :class:`ecosim.torch.Quantizer` of the stored weights (e.g.
            ``Quantizer("e4m3", "sr", granularity="row")``; its mode is the mode of the initial
            write and of the optimizers' writes).
        bias: keep a full-precision bias (as ``nn.Linear``).
        name: the parameter name of the stored weight (SR keys;
            :func:`~ecosim.torch.store_weights` sets ``"<module path>.weight"``).
        dtype: float32 or float64, the dtype of the dequantized weights and of the gradient
            (``.to(torch.float64)``/``.double()`` and back convert it and the float scales).
        device: where the codes live.
        shape, transposed: the parameter's shape when it is not ``(out_features,
            in_features)``: the codes always hold that (out, fan-in) matrix, so a row scale is
            one per output feature; a parameter of shape ``(out, a, b, ...)`` is the matrix
            reshaped (a convolution's ``(out, in/groups, *kernel)``), and ``transposed=True``
            holds an ``(in, out)`` parameter (a transformers ``Conv1D``, ``y = x W + b``).

    The codes start at zero (all-zero weights); :meth:`write` or :meth:`from_linear` fill them.

    Attributes:
        codes: uint8 buffer, the codes' raw bytes (blocked shape as
            :meth:`Quantizer.encode` returns it; 1-D for packed formats).
        scales: buffer, one scale per block (float32/float64; E8M0 bytes for power-of-two
            scales).
        weight: the :class:`GradSlot` (its ``.grad`` is the weight gradient).
        bias: ``nn.Parameter`` or None.

    Example:
        >>> import torch
        >>> from ecosim.torch import Quantizer
        >>> lin = torch.nn.Linear(64, 32)
        >>> q = QuantizedLinear.from_linear(lin, Quantizer("e4m3", granularity="row"))
        >>> q.codes.nbytes, q.scales.nbytes, q.encoded().codes.dtype
        (2048, 128, torch.float8_e4m3fn)
        >>> bool((q.read() == Quantizer("e4m3", granularity="row")(lin.weight.detach())).all())
        True
    """

    def __init__(self, in_features: int, out_features: int, quantizer: Quantizer, *,
                 bias: bool = True, name: str = "weight", dtype=torch.float32, device=None,
                 shape: tuple | None = None, transposed: bool = False):
        super().__init__()
        if not isinstance(quantizer, Quantizer):
            raise TypeError(f"quantizer must be an ecosim.torch.Quantizer, got "
                            f"{type(quantizer).__name__}")
        if dtype not in (torch.float32, torch.float64):
            raise TypeError(f"QuantizedLinear holds float32 or float64 weights, got {dtype}")
        self.in_features, self.out_features = int(in_features), int(out_features)
        self.quantizer, self.name = quantizer, str(name)
        self._codec = Codec(quantizer)
        # The codes hold the (out, fan-in) matrix, scaled per row; the parameter may be that
        # matrix reshaped (a convolution) or transposed (a transformers Conv1D).
        self._mshape = (self.out_features, self.in_features)
        self._transposed = bool(transposed)
        self._shape = tuple(int(d) for d in shape) if shape is not None else (
            self._mshape[::-1] if self._transposed else self._mshape)
        if (self._shape[::-1] if self._transposed else (self._shape[0], math.prod(
                self._shape[1:]))) != self._mshape:
            raise ValueError(f"shape {self._shape} does not hold an ({out_features}, "
                             f"{in_features}) matrix" + (" transposed" if transposed else ""))
        self._value_dtype = dtype
        _, codes, scales = self._codec.zeros(torch.zeros(self._mshape, dtype=dtype,
                                                         device=device))
        self.register_buffer("codes", as_raw_bits(codes))
        # a plain cast (fixed scale 1 onto bfloat16/float16) has no scales: an empty buffer
        self.register_buffer("scales", as_raw_bits(scales) if scales is not None
                             else torch.empty(0, dtype=dtype, device=device))
        self.weight = GradSlot(self._shape, dtype, device)
        self.weight._ecosim_store = self
        self.bias = (nn.Parameter(torch.zeros(self.out_features, dtype=dtype, device=device))
                     if bias else None)

    @classmethod
    def from_linear(cls, linear: nn.Linear, quantizer: Quantizer, *, key=0,
                    name: str = "weight") -> "QuantizedLinear":
        """A layer holding ``q(linear.weight)`` (SR key ``fold_in(key, "init", name)``) and a
        copy of its bias (``linear``: an ``nn.Linear`` or a subclass; other layers:
        :func:`ecosim.torch.store_module`)."""
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"from_linear takes an nn.Linear, got {type(linear).__name__}; "
                            "for other layers use ecosim.torch.store_module(module, quantizer)")
        w = start_weight(linear.weight, name)
        out = cls(linear.in_features, linear.out_features, quantizer,
                  bias=linear.bias is not None, name=name, dtype=w.dtype, device=w.device)
        return out._take(linear.weight, linear.bias, key)

    def _take(self, weight, bias, key) -> "QuantizedLinear":
        """Store ``q(weight)`` (the optimizers' initial write), keep ``weight`` as ``W_0`` and
        copy ``bias``; returns self."""
        w = weight.detach()
        if w.dtype in _HALF:  # decoded in float32; the module keeps its dtype (below)
            w = w.float()
        self.write(w, key=rng.fold_in(rng.as_key(key), "init", self.name)
                   if self.quantizer.rounding.stochastic else None)
        self._initial = w  # W_0 for a master copy, e_0 or c_0 (see pop_initial); not copied
        if bias is not None:
            with torch.no_grad():
                self.bias.copy_(bias)
            self.bias.requires_grad_(bias.requires_grad)
        self.weight.requires_grad_(weight.requires_grad)
        if weight.dtype in _HALF:  # a bf16/fp16 module: as model.to(dtype) after quantizing
            self.to(weight.dtype)
        return self

    # -- storage ----------------------------------------------------------------------------
    def _decode(self, codes, scales) -> torch.Tensor:
        return self._codec.decode(_typed(codes, self._codec.typed),
                                  _typed(scales, self._codec.scales_typed), self._mshape,
                                  self._value_dtype)

    def _to_param(self, m: torch.Tensor) -> torch.Tensor:
        """The (out, fan-in) matrix ``m`` in the parameter's shape."""
        return m.t().contiguous() if self._transposed else m.reshape(self._shape)

    def _to_matrix(self, x: torch.Tensor) -> torch.Tensor:
        """A parameter-shaped ``x`` as the (out, fan-in) matrix the codes hold."""
        return x.t() if self._transposed else x.reshape(self._mshape)

    def to_plain(self) -> nn.Module:
        """The original module (an ``nn.Linear`` when the layer was not made from one) with the
        current weights, dequantized, as plain parameters."""
        sk = self.__dict__.get("_ecosim_skeleton")
        plain = copy.deepcopy(sk) if sk is not None else nn.Linear(
            self.in_features, self.out_features, bias=self.bias is not None,
            device=self.codes.device, dtype=self._value_dtype)
        plain.weight = param(self.read(), self.weight)
        if self.bias is not None:
            plain.bias = param(self.bias, self.bias)
        return plain

    def pop_initial(self) -> torch.Tensor | None:
        """The full-precision weights this layer was made from (``from_linear``), once: the
        optimizer's initial state (master copy, first error) needs them; None afterwards, and
        after any write, store or ``load_state_dict`` of the codes (then not ``q(W_0)``)."""
        w, self._initial = getattr(self, "_initial", None), None
        return w

    def read(self) -> torch.Tensor:
        """The stored weights, dequantized: ``fl(s * code)`` (a new tensor of the parameter's
        shape and dtype)."""
        return self._to_param(self._decode(self.codes, self.scales))

    @torch.no_grad()
    def write(self, x: torch.Tensor, *, key=None) -> torch.Tensor:
        """Store ``q(x)`` (SR with ``key``) in place and return its dequantized values."""
        if tuple(x.shape) != self._shape:
            raise ValueError(f"{self.name!r} holds shape {self._shape}, got {tuple(x.shape)}")
        values, codes, scales = self._codec.encode(self._to_matrix(cast_to(x, self._value_dtype)),
                                                   key)
        self.codes.copy_(as_raw_bits(codes))
        self._initial = None  # the codes are no longer q(W_0)
        if scales is not None:
            self.scales.copy_(as_raw_bits(scales))
        return self._to_param(values)

    @torch.no_grad()
    def store(self, enc: Encoded) -> None:
        """Hold these codes and scales (the inverse of :meth:`encoded`): ``enc`` as this layer's
        quantizer encodes the (out, fan-in) matrix, e.g. with other scales (DQT's write onto
        the previous step's grid, :mod:`ecosim.torch.dqt`) or another rounding."""
        mine = self.encoded()
        if not isinstance(enc, Encoded):
            raise TypeError(f"store takes an ecosim.torch.Encoded, got {type(enc).__name__}")
        if (tuple(enc.shape) != tuple(mine.shape) or enc.packed_bits != mine.packed_bits
                or enc.codes.dtype != mine.codes.dtype or enc.codes.shape != mine.codes.shape
                or enc.scales.shape != mine.scales.shape or self._codec.cast):
            raise ValueError(f"{self.name!r} holds {mine.codes.dtype} codes "
                             f"{tuple(mine.codes.shape)} of a {tuple(mine.shape)} matrix, "
                             f"scales {tuple(mine.scales.shape)}; got {enc.codes.dtype} codes "
                             f"{tuple(enc.codes.shape)} of {tuple(enc.shape)}, scales "
                             f"{tuple(enc.scales.shape)}")
        self.codes.copy_(as_raw_bits(enc.codes))
        self._initial = None
        self.scales.copy_(as_raw_bits(enc.scales))

    def encoded(self) -> Encoded:
        """The stored weights as :class:`ecosim.torch.Encoded` (views of the buffers: codes in
        their torch dtype, e.g. ``float8_e4m3fn``), of the (out, fan-in) matrix the codes
        hold (the parameter's shape for a linear layer)."""
        scales = _typed(self.scales, self._codec.scales_typed)
        if self._codec.cast:  # the unit scale of a plain cast, as Quantizer.encode gives it
            scales = torch.ones((1, 1), dtype=self._value_dtype, device=self.codes.device)
        return Encoded(codes=_typed(self.codes, self._codec.typed), scales=scales,
                       shape=self._mshape, dtype=self._value_dtype,
                       packed_bits=self._codec.packed)

    # -- nn.Module --------------------------------------------------------------------------
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        if not holds_slot(self, w):  # torch.func.functional_call substituted the weight: use it
            return F.linear(x, w, self.bias)
        return _StoredLinear.apply(x, w, self.bias, self)

    def extra_repr(self) -> str:
        q = self.quantizer
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, fmt={q.fmt.name}, mode={q.mode}, "
                f"granularity={q.granularity}, name={self.name!r}")

    def _apply(self, fn, recurse=True):
        # Conversions move the codes and scales but never change them (``.half()`` would
        # round float32 scales); the slot is shrunk to its one element for the conversion
        # (a plain ``.to()`` of a broadcast tensor materialises it) and broadcast again.
        scales = self.scales
        with raw_slots():
            slot = self.weight
            slot.data = torch.zeros((), dtype=slot.dtype, device=slot.device)
            try:
                out = super()._apply(fn, recurse)
            finally:
                new = self._parameters["weight"]
                if new is not slot:  # a conversion that replaced the Parameter object
                    slot.data = new.data
                    self._parameters["weight"] = slot
                slot.data = slot.data.reshape(()).expand(self._shape)
        # float32 <-> float64 changes the dtype of the weights (read(), gradients) and of
        # float scales with them; half types leave both (the layer holds float32/float64).
        if slot.dtype in (torch.float32, torch.float64) and slot.dtype != self._value_dtype:
            self._value_dtype = slot.dtype
            if scales.dtype in (torch.float32, torch.float64):
                scales = scales.to(slot.dtype)
        if self.scales.dtype != scales.dtype:
            self.scales = scales.to(self.scales.device)
        return out

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        with raw_slots():
            super()._save_to_state_dict(destination, prefix, keep_vars)
        destination.pop(prefix + "weight", None)  # the slot holds no values

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs):
        state_dict.pop(prefix + "weight", None)
        if prefix + "codes" in state_dict:  # loaded codes are not q(W_0): no W_0 to start from
            self.pop_initial()
        params = self._parameters
        kept = list(params.items())
        params.pop("weight")
        try:
            super()._load_from_state_dict(state_dict, prefix, local_metadata, strict,
                                          missing_keys, unexpected_keys, error_msgs)
        finally:
            params.clear()
            params.update(kept)


# -- distributed ---------------------------------------------------------------------------------

def data_parallel(model: nn.Module, **kwargs) -> nn.Module:
    """``DistributedDataParallel(model, init_sync=False, **kwargs)`` after broadcasting the
    model's state from rank 0.

    DDP's own initial broadcast copies into every parameter, which a :class:`GradSlot` (one
    element broadcast to a shape) cannot take; this function broadcasts everything else
    (codes and scales as their raw bytes, other parameters, buffers) with
    ``torch.distributed.broadcast`` and then builds DDP without its sync. Gradients are
    averaged by DDP as usual (sum of ``g / world_size``: with a power-of-two world size the
    division is exact).
    """
    import torch.distributed as dist

    if kwargs.get("init_sync", False):
        raise ValueError("data_parallel does the initial sync itself; init_sync must be False")
    kwargs["init_sync"] = False
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        group = kwargs.get("process_group")
        with torch.no_grad():
            for p in model.parameters():
                if not isinstance(p, GradSlot):
                    dist.broadcast(p.data, 0, group=group)
            for b in model.buffers():
                dist.broadcast(as_raw_bits(b), 0, group=group)
    return nn.parallel.DistributedDataParallel(model, **kwargs)
