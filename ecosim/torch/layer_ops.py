"""The autograd functions of the stored layers: the weights are decoded again in backward.

A plain convolution, ``Conv1D`` or attention keeps its weight tensor for backward. For a
stored layer that tensor is the decoded copy, a full-precision weight the layer exists not to
hold, so each stored layer saves its codes instead and decodes them again where backward
needs the weights:

* :class:`StoredConv` (``nn.Conv1d/2d/3d``) and :class:`StoredConv1D` (transformers
  ``Conv1D``) are autograd functions whose backward makes the calls torch's own derivative of
  the op makes (``aten.convolution_backward``; the two ``mm`` of ``addmm``'s derivative, with
  its choice of operand order by memory layout), so their gradients equal the plain layer's
  holding the decoded weights, bit for bit.
* Attention runs ``nn.MultiheadAttention``'s own forward under :func:`decode_in_backward`:
  saved-tensor hooks that keep a reference to the codes in place of each saved view of a
  decoded weight and decode it again when backward unpacks it. Hooks set outside (activation
  checkpointing, offloading) still see every other saved tensor. Under ``torch.func``
  transforms (which disable saved-tensor hooks) and while ``torch.compile`` traces, the decoded
  weights are saved as a plain layer's are; under autocast, attention's projections save
  autocast's low-precision cast of the weights (a new tensor, as for the plain module).

Writing the codes between forward and backward is an error in all three (the codes' version
counter), as it is for a plain layer whose weight is written in place.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

__all__ = ["StoredConv", "StoredConv1D", "decode_in_backward"]

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


def _cast(t, dtype):
    return t if t is None or dtype is None or t.dtype == dtype else t.to(dtype)


def _compute_dtype(x: torch.Tensor) -> torch.dtype | None:
    """The dtype autocast casts the op's floating inputs to, or None (no autocast)."""
    dev = x.device.type
    return torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else None


def _weights(layer, codes, scales, w_dtype, cdt) -> torch.Tensor:
    """The parameter-shaped weights of ``layer`` from its codes, in the module's dtype and then
    the compute dtype: the tensor the plain layer's op receives."""
    w = layer._to_param(layer._decode(codes, scales))
    return _cast(_cast(w, w_dtype), cdt)


def _setup(ctx, x, slot, bias, layer):
    """Record the dtypes and save ``x`` (cast as the op casts it) with the codes and scales."""
    cdt = _compute_dtype(x)
    ctx.layer, ctx.cdt = layer, cdt
    ctx.dtypes = (x.dtype, slot.dtype, None if bias is None else bias.dtype)
    with torch.autocast(x.device.type, enabled=False):
        xc = _cast(x, cdt)  # x itself without a cast: torch.compile refuses an alias
    ctx.save_for_backward(xc, layer.codes, layer.scales)


class StoredConv(torch.autograd.Function):
    """``convNd(x, W, b)`` with ``W`` decoded from ``layer``'s codes; backward decodes again.

    ``padding`` is numeric (``QuantizedConv`` turns ``"same"``/``"valid"`` and other padding
    modes into an explicit pad of ``x`` first, as ``nn.ConvNd`` does).
    """

    generate_vmap_rule = True  # torch.func.vmap: the codes are shared, not batched

    @staticmethod
    def forward(x, slot, bias, layer, padding):
        w = _cast(layer.read(), slot.dtype)
        return _CONV[len(padding)](x, w, bias, layer.stride, padding, layer.dilation,
                                   layer.groups)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, slot, bias, layer, padding = inputs
        _setup(ctx, x, slot, bias, layer)
        ctx.padding = list(padding)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dy):
        xc, codes, scales = ctx.saved_tensors
        layer, cdt, (x_dt, w_dt, b_dt) = ctx.layer, ctx.cdt, ctx.dtypes
        w = _weights(layer, codes, scales, w_dt, cdt)
        need = list(ctx.needs_input_grad[:3])
        dx, dw, db = torch.ops.aten.convolution_backward(
            _cast(dy, cdt), xc, w, [w.shape[0]] if need[2] else None, list(layer.stride),
            ctx.padding, list(layer.dilation), False, [0] * len(ctx.padding), layer.groups,
            need)
        return _cast(dx, x_dt), _cast(dw, w_dt), _cast(db, b_dt), None, None


def _col_major(t: torch.Tensor) -> bool:
    return t.stride(0) == 1 and t.stride(1) == t.shape[0]


class StoredConv1D(torch.autograd.Function):
    """transformers' ``Conv1D``, ``addmm(b, x, W)`` over the last axis, with ``W`` (in, out)
    decoded from ``layer``'s codes; backward decodes again."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, slot, bias, layer):
        w = _cast(layer.read(), slot.dtype)
        x2 = x.view(-1, x.size(-1))
        y = torch.mm(x2, w) if bias is None else torch.addmm(bias, x2, w)
        return y.view(x.size()[:-1] + (w.shape[1],))

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, slot, bias, layer = inputs
        _setup(ctx, x, slot, bias, layer)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dy):
        xc, codes, scales = ctx.saved_tensors
        layer, cdt, (x_dt, w_dt, b_dt) = ctx.layer, ctx.cdt, ctx.dtypes
        w = _weights(layer, codes, scales, w_dt, cdt)
        x2 = xc.view(-1, xc.size(-1))
        g = _cast(dy, cdt).reshape(-1, w.shape[1])
        dx = dw = db = None
        # addmm's derivative: each operand's gradient in that operand's memory order
        if ctx.needs_input_grad[0]:
            dx = w.mm(g.t()).t() if _col_major(x2) else g.mm(w.t())
            dx = _cast(dx.reshape(xc.shape), x_dt)
        if ctx.needs_input_grad[1]:
            dw = _cast(g.t().mm(x2).t() if _col_major(w) else x2.t().mm(g), w_dt)
        if ctx.needs_input_grad[2]:
            db = _cast(g.sum(0), b_dt)
        return dx, dw, db, None


class _Ref:
    """A saved view of a decoded weight: the layer's codes and scales (the tensors, held as
    autograd holds saved tensors, with their versions) and the view's geometry."""

    __slots__ = ("layer", "codes", "scales", "versions", "dtype", "geometry")

    def __init__(self, layer, dtype, t):
        self.layer, self.codes, self.scales, self.dtype = layer, layer.codes, layer.scales, dtype
        self.versions = (self.codes._version, self.scales._version)
        self.geometry = (t.size(), t.stride(), t.storage_offset())

    def load(self) -> torch.Tensor:
        if (self.codes._version, self.scales._version) != self.versions:
            raise RuntimeError(f"the codes of {self.layer.name!r} were written between forward "
                               "and backward; backward needs the weights forward used (step "
                               "the optimizer after backward)")
        w = self.layer._to_param(self.layer._decode(self.codes, self.scales))
        return _cast(w, self.dtype).as_strided(*self.geometry)


@contextlib.contextmanager
def decode_in_backward(decoded: list[tuple[object, torch.Tensor]]):
    """Run the block with saved views of each ``(layer, decoded weights)`` replaced by a
    reference to the layer's codes (see the module docstring); the tensors are not kept."""
    if (torch.compiler.is_compiling() or not decoded
            or not torch._C._autograd._saved_tensors_hooks_is_enabled()):
        yield
        return
    by_storage = {(w.device, w.untyped_storage().data_ptr()): (layer, w.dtype)
                  for layer, w in decoded}
    outer = torch._C._autograd._top_saved_tensors_default_hooks(False)
    outer_pack, outer_unpack = outer if outer is not None else (None, None)

    def pack(t):
        hit = (by_storage.get((t.device, t.untyped_storage().data_ptr()))
               if t.layout == torch.strided and not t.is_meta else None)
        if hit is not None and t.dtype == hit[1]:
            return _Ref(hit[0], hit[1], t)
        return (None, outer_pack(t) if outer_pack is not None else t)

    def unpack(x):
        if isinstance(x, _Ref):
            return x.load()
        return outer_unpack(x[1]) if outer_unpack is not None else x[1]

    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            yield
    finally:
        by_storage.clear()
