"""The parameter a stored layer exposes as its ``weight``: :class:`GradSlot`.

A stored layer (:class:`ecosim.torch.QuantizedLinear` and the layers of
:mod:`ecosim.torch.layers`) holds its weights as codes plus scales. Autograd, DDP's gradient
all-reduce, ``clip_grad_norm_`` and optimizers still need a parameter of the weight's shape to
hang the gradient on: the slot. Its storage is one zero broadcast to the weight's shape
(4 bytes for float32); its ``.grad`` is full size.

What code outside ecosim sees when it touches the slot:

* **Reads give the stored values.** Any operation that reads the slot's values (``w.norm()``,
  ``w.detach().clone()``, ``w @ x``, ``torch.equal(w, v)``, ...) runs on the dequantized
  weights ``layer.read()`` instead of the placeholder, and is differentiable into the slot's
  ``.grad`` (``(w ** 2).sum().backward()`` adds ``2 W`` to ``w.grad``), so weight-norm logging
  and an L2 penalty written by hand are right.
* **In-place writes are refused** with a :class:`TypeError` that says what to use instead
  (``nn.init.*_``, ``torch.optim`` optimizers, ``AveragedModel``/``lerp_``, ``copy_``):
  the stored values change only through :meth:`~ecosim.torch.QuantizedLinear.write`, the ECO
  optimizers, :func:`ecosim.torch.ema_update`, or after :func:`ecosim.torch.unstore_weights`.
* ``w.detach()`` and ``w.data`` are detached slots of the same layer: they read the values
  and refuse writes, as ``w`` does.
* Inside ``torch.compile``d code the slot is the placeholder (traced graphs see one zero
  broadcast): read values there with ``layer.read()``.
* ``w += 1`` on a stored weight held in a variable rebinds the variable to ``values + 1``
  (torch turns the refusal of ``__iadd__`` into Python's fallback); on the module attribute
  (``layer.weight += 1``) torch refuses assigning a plain tensor to a parameter.
* Metadata (shape, dtype, device, ``.grad``, ``requires_grad_``, hooks) behaves as for any
  parameter.

ecosim's own code (conversions, state dicts, the autograd function of the forward) works on
the placeholder itself, under :func:`raw_slots`.
"""

from __future__ import annotations

import contextlib
import copy

import torch
from torch import nn

__all__ = ["GradSlot", "stored", "raw_slots"]

# Methods that only read metadata or manage autograd: they act on the placeholder.
_META = frozenset({
    "size", "dim", "ndimension", "numel", "nelement", "stride", "storage_offset",
    "is_contiguous", "element_size", "data_ptr", "untyped_storage", "get_device",
    "is_floating_point", "is_complex", "is_signed", "requires_grad_", "retain_grad",
    "register_hook", "register_post_accumulate_grad_hook", "_is_view", "is_shared",
    "share_memory_", "__len__", "__hash__", "type", "_has_compatible_shallow_copy_type",
    "__get__", "__set__", "__delete__",  # properties: shape, dtype, device, grad, data, ...
})
_INPLACE_DUNDER = frozenset({
    "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__imod__",
    "__ipow__", "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__",
    "__imatmul__", "__setitem__",
})


# Functions whose result is a detached alias of their argument.
_DETACHED = (torch.Tensor.detach, torch.detach, torch.Tensor.data.__get__)
# Properties that read values (the other properties are metadata: shape, dtype, grad, ...).
_VALUE_PROPS = tuple(getattr(torch.Tensor, p).__get__ for p in ("T", "mT", "H", "mH", "real",
                                                                   "imag"))


@contextlib.contextmanager
def raw_slots():
    """Within the block a :class:`GradSlot` is the plain placeholder it holds (one zero
    broadcast to the weight's shape): for code that manages the slot itself (module
    conversions, state dicts)."""
    with torch._C.DisableTorchFunctionSubclass():
        yield


def _raw_call(func, args, kwargs):
    # torch.Tensor's own default, minus the conversion of results to the subclass (a
    # parameter's .grad or a product is a plain tensor); traceable by torch.compile
    with torch._C.DisableTorchFunctionSubclass():
        return func(*args, **kwargs)


class _ReadStored(torch.autograd.Function):
    """``layer.read()`` as a function of the slot: the values of the stored weights forward,
    the incoming gradient passed to the slot backward."""

    generate_vmap_rule = True  # torch.func.vmap: the values are shared, not batched

    @staticmethod
    def forward(slot, layer):
        return layer.read()

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def _slots(tree):
    """The GradSlots among ``tree`` (arguments, lists and tuples of them)."""
    if isinstance(tree, GradSlot):
        yield tree
    elif isinstance(tree, (list, tuple)):
        for t in tree:
            yield from _slots(t)
    elif isinstance(tree, dict):
        for t in tree.values():
            yield from _slots(t)


def _with_values(tree):
    """``tree`` with every stored slot replaced by its layer's values (differentiable)."""
    if isinstance(tree, GradSlot):
        layer = stored(tree)
        if layer is None:
            return tree
        with raw_slots():
            if torch.is_grad_enabled() and tree.requires_grad:
                return _ReadStored.apply(tree, layer)
            return layer.read()
    if isinstance(tree, (list, tuple)):
        return type(tree)(_with_values(t) for t in tree)
    if isinstance(tree, dict):
        return {k: _with_values(t) for k, t in tree.items()}
    return tree


def _refuse(slot: "GradSlot", what: str):
    layer = stored(slot)
    name = getattr(layer, "name", "weight")
    raise TypeError(
        f"{what} writes into {name!r}, a weight stored as codes by ecosim (a GradSlot); "
        "change it with layer.write(W), an ecosim.torch optimizer (ECOAdamW, ECOSGD), "
        "ecosim.torch.ema_update, or ecosim.torch.unstore_weights(model) first")


class GradSlot(nn.Parameter):
    """A parameter with a weight's shape whose values live in a stored layer's codes.

    Storage is one element (4 bytes for float32); ``.grad`` is a full, contiguous tensor
    (autograd's layout for a broadcast parameter), where the weight gradient lands. The layer
    holding the codes is ``stored(slot)``. Reading the slot's values reads the layer's
    dequantized weights; writing into it in place raises :class:`TypeError` (see the module
    docstring). Deep copies and pickles keep the link to the (copied) layer and stay one
    element.
    """

    def __new__(cls, shape, dtype=torch.float32, device=None, requires_grad=True):
        data = torch.zeros((), dtype=dtype, device=device).expand(*shape)
        return torch.Tensor._make_subclass(cls, data, requires_grad)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if torch.compiler.is_compiling():  # traced code sees the plain placeholder
            return _raw_call(func, args, kwargs)
        if name in _META and func not in _DETACHED and func not in _VALUE_PROPS:
            return _raw_call(func, args, kwargs)
        if func in _DETACHED:  # a detached alias: reads read, writes are refused
            layer = stored(args[0]) if args else None
            if layer is not None:
                out = GradSlot(tuple(args[0].shape), args[0].dtype, args[0].device, False)
                out.__dict__["_ecosim_store"] = layer
                return out
        # the tensor an in-place function writes into: its first argument, or the keyword
        # torch.nn.init and torch.Tensor methods use for it
        target = args[0] if args else next(
            (kwargs[k] for k in ("tensor", "input", "self") if k in kwargs), None)
        inplace = (name in _INPLACE_DUNDER
                   or (name.endswith("_") and not name.endswith("__")))
        if inplace and any(stored(s) is not None for s in _slots(target)):
            _refuse(next(s for s in _slots(target) if stored(s) is not None), f"{name}()")
        out = kwargs.get("out")
        if out is not None and any(stored(s) is not None for s in _slots(out)):
            _refuse(next(s for s in _slots(out) if stored(s) is not None), f"{name}(out=...)")
        return _raw_call(func, _with_values(args), _with_values(kwargs))

    def __deepcopy__(self, memo):
        if id(self) in memo:
            return memo[id(self)]
        out = GradSlot(tuple(self.shape), self.dtype, self.device, self.requires_grad)
        memo[id(self)] = out
        out.__dict__.update(copy.deepcopy(self.__dict__, memo))
        return out

    def __reduce_ex__(self, proto):
        return (_rebuild_slot, (tuple(self.shape), self.dtype, self.device, self.requires_grad,
                                self.__dict__))

    def __repr__(self):
        return f"GradSlot(shape={tuple(self.shape)}, dtype={self.dtype}, device={self.device})"


def _rebuild_slot(shape, dtype, device, requires_grad, state):
    out = GradSlot(shape, dtype, device, requires_grad)
    out.__dict__.update(state)
    return out


def stored(p: torch.Tensor):
    """The layer that holds the weights of ``p`` when ``p`` is a :class:`GradSlot`, else None."""
    return p.__dict__.get("_ecosim_store") if isinstance(p, GradSlot) else None
