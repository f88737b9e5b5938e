"""Stored weights for the other weight-bearing layers: convolutions, ``Conv1D``, attention.

:class:`~ecosim.torch.nn.QuantizedLinear` holds an ``(out, in)`` matrix as codes with one scale
per block of a row. The layers here hold their weights the same way, as the **(out, fan-in)
matrix** of the layer, so a row-wise quantizer (``granularity="row"``) gives one scale per
output feature whatever the parameter's shape, and a group size groups along the fan-in:

==============================  =========================  =====================================
layer                           parameter shape            one row scale per
==============================  =========================  =====================================
``nn.Linear`` (and subclasses)  ``(out, in)``              output feature (row)
``nn.Conv1d/2d/3d``             ``(out, in/groups, *k)``   output channel (all axes but dim 0)
transformers ``Conv1D``         ``(in, out)``              output feature (column of the weight)
``nn.MultiheadAttention``       ``in_proj_weight``         output row of the packed q, k, v
                                ``(3E, E)``; ``out_proj``  projection; ``out_proj``: row
==============================  =========================  =====================================

Each keeps its stored weights' :class:`~ecosim.torch.nn.GradSlot` as the parameter (named as
in the original module, so the optimizers' SR keys match a float32 run) and is updated in
place by the ECO optimizers. :func:`store_module` builds the stored twin of a module and
:meth:`to_plain` (every stored layer) builds the plain module back with the current weights.

Forward and backward: every stored layer saves its codes, not the dequantized weights, and
dequantizes again in backward (:mod:`ecosim.torch.layer_ops`), so no full-precision copy of
the weights is held from forward to backward; outputs and gradients are those of the plain
layer holding the dequantized weights, bit for bit (the same torch calls). Attention under
``torch.func`` transforms or ``torch.compile`` saves the decoded weights, as the plain module
saves its own.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from torch.nn import functional as F

from .layer_ops import StoredConv, StoredConv1D, decode_in_backward
from .nn import QuantizedLinear, cast_to, holds_slot, param, skeleton, start_weight
from .quantizer import Quantizer

__all__ = ["QuantizedConv", "QuantizedConv1D", "QuantizedMultiheadAttention", "store_module",
           "storable"]

_CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
_MHA_WEIGHTS = (("in_proj_weight", "in_proj"), ("q_proj_weight", "q_proj"),
                ("k_proj_weight", "k_proj"), ("v_proj_weight", "v_proj"))


class _Decoded(torch.autograd.Function):
    """The stored weights of ``layer`` in the slot's dtype; the gradient goes to the slot.

    The slot's dtype is the module's: after ``model.to(torch.bfloat16)`` the codes and scales
    are unchanged (the layer decodes in float32) and the decoded weights are cast to bfloat16,
    as the plain module's converted weight is, so the layer's own forward sees one dtype.
    """

    generate_vmap_rule = True  # torch.func.vmap: the decoded weights are shared, not batched

    @staticmethod
    def forward(slot, layer):
        return cast_to(layer.read(), slot.dtype)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dw):
        return dw, None


def _decoded(layer: QuantizedLinear) -> torch.Tensor:
    """The decoded weights of ``layer``, or the weight torch.func.functional_call put in
    place of its slot."""
    w = layer.weight
    return _Decoded.apply(w, layer) if holds_slot(layer, w) else w


class _StoredModule(QuantizedLinear):
    """A stored layer made from another module: the constructor takes that module and the
    ``(in, out)`` of its (out, fan-in) matrix; :meth:`from_module` also stores its weights."""

    def __init__(self, module: nn.Module, quantizer: Quantizer, in_out: tuple[int, int], *,
                 name: str, **layout):
        w = module.weight  # a bf16/fp16 module's layer decodes in float32 (see _take)
        super().__init__(*in_out, quantizer, bias=module.bias is not None, name=name,
                         dtype=torch.float32 if w.dtype in (torch.bfloat16, torch.float16)
                         else w.dtype, device=w.device, **layout)
        self.__dict__["_ecosim_skeleton"] = skeleton(module)

    @classmethod
    def from_module(cls, module: nn.Module, quantizer: Quantizer, *, key=0,
                    name: str = "weight"):
        """A layer holding ``q(module.weight)`` (SR key ``fold_in(key, "init", name)``) and a
        copy of its bias."""
        start_weight(module.weight, name)
        return cls(module, quantizer, name=name)._take(module.weight, module.bias, key)


class QuantizedConv(_StoredModule):
    """An ``nn.Conv1d``/``Conv2d``/``Conv3d`` whose weight is held as codes plus scales.

    The codes hold the ``(out_channels, in_channels/groups * prod(kernel_size))`` matrix: a
    row-wise quantizer gives one scale per output channel. Forward calls the convolution's own
    ``_conv_forward`` (every ``padding``/``padding_mode`` as the original) with the dequantized
    weight.

    Args:
        conv: the convolution whose configuration (channels, kernel, stride, padding,
            dilation, groups, bias, dtype, device) the layer takes; its weights are not read
            (:meth:`from_module` stores them).
        quantizer, name: as :class:`~ecosim.torch.nn.QuantizedLinear`.
    """

    def __init__(self, conv: nn.Module, quantizer: Quantizer, *, name: str = "weight"):
        if not isinstance(conv, _CONVS):
            raise TypeError(f"QuantizedConv takes an nn.Conv1d/2d/3d, got {type(conv).__name__}")
        w = conv.weight
        super().__init__(conv, quantizer, (w[0].numel(), w.shape[0]), name=name,
                         shape=tuple(w.shape))
        for attr in ("in_channels", "out_channels", "kernel_size", "stride", "padding",
                     "dilation", "groups", "padding_mode", "_reversed_padding_repeated_twice"):
            setattr(self, attr, getattr(conv, attr))
        self._conv_type = type(conv)

    @classmethod
    def from_conv(cls, conv: nn.Module, quantizer: Quantizer, *, key=0,
                  name: str = "weight") -> "QuantizedConv":
        """:meth:`from_module` under its former name (kept for callers of earlier releases)."""
        return cls.from_module(conv, quantizer, key=key, name=name)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        if not holds_slot(self, w):  # functional_call substituted the weight: the plain op
            return self._conv_type._conv_forward(self, x, w, self.bias)
        x, padding = self._padded(x)
        return StoredConv.apply(x, w, self.bias, self, padding)

    def _padded(self, x: torch.Tensor) -> tuple[torch.Tensor, list[int]]:
        """``x`` and the numeric padding of the convolution ``nn.ConvNd`` would make: other
        padding modes pad ``x`` first, ``"same"`` pads ``d (k - 1)`` in all, the odd one
        after (a pad of ``x``, as torch does), ``"valid"`` none."""
        n = len(self.kernel_size)
        if self.padding_mode != "zeros":
            return F.pad(x, self._reversed_padding_repeated_twice, mode=self.padding_mode), [0] * n
        if self.padding == "valid":
            return x, [0] * n
        if self.padding != "same":
            return x, list(self.padding)
        total = [d * (k - 1) for d, k in zip(self.dilation, self.kernel_size)]
        odd = [t % 2 for t in total]
        if any(odd):
            x = F.pad(x, [p for o in reversed(odd) for p in (0, o)])
        return x, [t // 2 for t in total]

    def extra_repr(self) -> str:
        return (f"{self._conv_type.__name__}({self.in_channels}, {self.out_channels}, "
                f"kernel_size={self.kernel_size}, stride={self.stride}), "
                + super().extra_repr())


class QuantizedConv1D(_StoredModule):
    """A transformers-style ``Conv1D`` (weight ``(in, out)``, ``y = x W + b``, as GPT-2's
    attention and MLP layers) whose weight is held as codes plus scales.

    The codes hold ``W^T`` (``(out, in)``): a row-wise quantizer gives one scale per output
    feature, a column of ``W``. Recognised by class name ``Conv1D`` with an ``nf`` attribute
    (transformers is not imported). Forward is the original class's forward with the
    dequantized weight.

    Args:
        conv1d: the module whose shape, bias, dtype and device the layer takes (its weights
            are not read; :meth:`from_module` stores them).
        quantizer, name: as :class:`~ecosim.torch.nn.QuantizedLinear`.
    """

    def __init__(self, conv1d: nn.Module, quantizer: Quantizer, *, name: str = "weight"):
        if not _is_conv1d(conv1d):
            raise TypeError(f"QuantizedConv1D takes a transformers-style Conv1D (class name "
                            f"Conv1D, attribute nf, 2-D weight), got {type(conv1d).__name__}")
        super().__init__(conv1d, quantizer, tuple(conv1d.weight.shape), name=name,
                         transposed=True)
        self.nf = int(conv1d.nf)

    @classmethod
    def from_conv1d(cls, conv1d: nn.Module, quantizer: Quantizer, *, key=0,
                    name: str = "weight") -> "QuantizedConv1D":
        """:meth:`from_module` under its former name (kept for callers of earlier releases)."""
        return cls.from_module(conv1d, quantizer, key=key, name=name)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        if not holds_slot(self, w):  # functional_call substituted the weight: the plain forward
            return type(self.__dict__["_ecosim_skeleton"]).forward(_View(self, weight=w), x)
        return StoredConv1D.apply(x, w, self.bias, self)


class _View:
    """``mod`` with some attributes replaced, as the original class's ``forward`` reads it."""

    def __init__(self, mod, **attrs):
        object.__setattr__(self, "_m", mod)
        self.__dict__.update(attrs)

    def __getattr__(self, name):
        return getattr(self._m, name)


class _OutProj(nn.Module):
    def __init__(self, weight, bias):
        super().__init__()
        self.weight, self.bias = weight, bias


def _stored_attr(attr: str, child: str):
    def get(self):
        layer = self._modules.get(child)
        return _decoded(layer) if layer is not None else self._parameters.get(attr)

    return property(get, doc=f"``{attr}``: the stored weights of ``self.{child}``, decoded "
                             "(gradients go to its slot), or None.")


class QuantizedMultiheadAttention(nn.MultiheadAttention):
    """``nn.MultiheadAttention`` with its projection weights held as codes plus scales.

    The packed ``in_proj_weight`` ``(3 * embed_dim, embed_dim)`` (or ``q/k/v_proj_weight``
    when key/value dimensions differ) is held by a child :class:`QuantizedLinear` ``in_proj``
    (``q_proj``, ...), stored under the name ``"<path>.in_proj_weight"``, one row scale per
    output row of the packed projection; ``out_proj`` is a :class:`QuantizedLinear`. Biases
    stay full precision. Reading ``in_proj_weight`` gives the decoded weights. Forward is
    ``nn.MultiheadAttention.forward`` with the decoded weights. Its ``_qkv_same_embed_dim``
    reads False, so ``nn.TransformerEncoderLayer`` never takes its fused inference path,
    which would read ``out_proj.weight`` (the slot) directly.

    Build with :meth:`from_module` (or :func:`store_module`).
    """

    in_proj_weight = _stored_attr("in_proj_weight", "in_proj")
    q_proj_weight = _stored_attr("q_proj_weight", "q_proj")
    k_proj_weight = _stored_attr("k_proj_weight", "k_proj")
    v_proj_weight = _stored_attr("v_proj_weight", "v_proj")

    @classmethod
    def from_module(cls, mha: nn.MultiheadAttention, quantizer: Quantizer, *, key=0,
                    name: str = "") -> "QuantizedMultiheadAttention":
        """The stored twin of ``mha`` (``name``: its module path, the prefix of the stored
        parameter names); ``mha`` is not modified."""
        if not isinstance(mha, nn.MultiheadAttention):
            raise TypeError(f"from_module takes an nn.MultiheadAttention, got "
                            f"{type(mha).__name__}")
        prefix = f"{name}." if name else ""
        new = cls.__new__(cls)
        new.__dict__.update(mha.__dict__)
        new._parameters = dict(mha._parameters)
        new._buffers = dict(mha._buffers)
        new._modules = dict(mha._modules)
        new.__dict__["_ecosim_skeleton"] = skeleton(mha)
        new._ecosim_same_embed_dim = mha._qkv_same_embed_dim
        new._qkv_same_embed_dim = False  # see the class docstring
        for attr, child in _MHA_WEIGHTS:
            w = new._parameters.pop(attr, None)
            if w is None:
                continue
            w0 = start_weight(w, prefix + attr)
            layer = QuantizedLinear(w.shape[1], w.shape[0], quantizer, bias=False,
                                    name=prefix + attr, dtype=w0.dtype, device=w0.device)
            new._modules[child] = layer._take(w, None, key)
        new._modules["out_proj"] = store_module(mha.out_proj, quantizer, key=key,
                                                name=prefix + "out_proj")
        return new

    def forward(self, *args, **kwargs):
        out = self._modules["out_proj"]
        layers = [(attr, self._modules[child]) for attr, child in _MHA_WEIGHTS
                  if self._modules.get(child) is not None] + [("out_proj", out)]
        ws = {attr: _decoded(layer) for attr, layer in layers}
        ours = [(layer, ws[attr]) for attr, layer in layers if holds_slot(layer, layer.weight)]
        view = _View(self, out_proj=_OutProj(ws.pop("out_proj"), out.bias),
                     _qkv_same_embed_dim=self._ecosim_same_embed_dim, **ws)
        with decode_in_backward(ours):
            return nn.MultiheadAttention.forward(view, *args, **kwargs)

    def to_plain(self) -> nn.MultiheadAttention:
        """The original ``nn.MultiheadAttention`` with the current weights as parameters."""
        plain = copy.deepcopy(self.__dict__["_ecosim_skeleton"])
        for attr, child in _MHA_WEIGHTS:
            layer = self._modules.get(child)
            if layer is not None:
                setattr(plain, attr, param(layer.read(), layer.weight))
        for attr, p in self._parameters.items():
            if p is not None:
                setattr(plain, attr, param(p, p))
        plain.out_proj = self._modules["out_proj"].to_plain()
        return plain


def _is_conv1d(mod: nn.Module) -> bool:
    w = getattr(mod, "weight", None)
    return (type(mod).__name__ == "Conv1D" and hasattr(mod, "nf")
            and isinstance(w, torch.Tensor) and w.ndim == 2)


def storable(mod: nn.Module) -> str | None:
    """Why ``mod`` cannot be stored by :func:`store_module` (a short reason), or None if it can:
    ``nn.Linear`` and subclasses that keep its forward, ``nn.Conv1d/2d/3d``, a
    transformers-style ``Conv1D``, ``nn.MultiheadAttention``."""
    if isinstance(mod, (QuantizedLinear, QuantizedMultiheadAttention)):
        return "already stored"
    if isinstance(mod, nn.Linear):
        if type(mod).forward is not nn.Linear.forward:
            return f"{type(mod).__name__} overrides nn.Linear.forward"
        return None
    if type(mod) in _CONVS or _is_conv1d(mod) or type(mod) is nn.MultiheadAttention:
        return None
    return f"{type(mod).__name__} is not a supported layer type"


def store_module(mod: nn.Module, quantizer: Quantizer, *, key=0, name: str = ""):
    """The stored twin of one layer (``mod`` itself is not modified).

    Args:
        mod: an ``nn.Linear`` (or a subclass keeping its forward), ``nn.Conv1d/2d/3d``, a
            transformers-style ``Conv1D`` or ``nn.MultiheadAttention``.
        quantizer: the :class:`ecosim.torch.Quantizer` of the stored weights.
        key: root key of the initial write (SR key ``fold_in(key, "init", <parameter name>)``).
        name: the module's path in its model; the stored weights are named
            ``"<name>.weight"`` (attention: ``"<name>.in_proj_weight"``,
            ``"<name>.out_proj.weight"``).

    Raises:
        TypeError: a module of another type (the message says why).
    """
    why = storable(mod)
    if why is not None:
        raise TypeError(f"cannot store {name or type(mod).__name__!r}: {why}")
    if not isinstance(quantizer, Quantizer):
        raise TypeError(f"quantizer must be an ecosim.torch.Quantizer, got "
                        f"{type(quantizer).__name__}")
    wname = f"{name}.weight" if name else "weight"
    if isinstance(mod, nn.MultiheadAttention):
        return QuantizedMultiheadAttention.from_module(mod, quantizer, key=key, name=name)
    if isinstance(mod, _CONVS):
        return QuantizedConv.from_module(mod, quantizer, key=key, name=wname)
    if isinstance(mod, nn.Linear):
        out = QuantizedLinear.from_linear(mod, quantizer, key=key, name=wname)
        if type(mod) is not nn.Linear:
            out.__dict__["_ecosim_skeleton"] = skeleton(mod)
        return out
    return QuantizedConv1D.from_module(mod, quantizer, key=key, name=wname)


def weights_of(mod: nn.Module) -> list[tuple[str, nn.Module, torch.Tensor]]:
    """``(suffix, owner, weight)`` of the weights :func:`store_module` would store."""
    if isinstance(mod, nn.MultiheadAttention):
        out = [(a, mod, mod._parameters[a]) for a, _ in _MHA_WEIGHTS
               if mod._parameters.get(a) is not None]
        return out + [("out_proj.weight", mod.out_proj, mod.out_proj.weight)]
    return [("weight", mod, mod.weight)]


def candidates(model: nn.Module):
    """``(path, module)`` of the storable modules of ``model`` (not inside an attention
    module, which stores its own ``out_proj``), and ``{path: reason}`` of the others that hold
    a weight of two or more dimensions."""
    chosen, others, inside = [], {}, []
    for name, mod in model.named_modules():
        if any(name.startswith(p + ".") for p in inside):
            continue
        why = storable(mod)
        if why is None:
            chosen.append((name, mod))
            if isinstance(mod, nn.MultiheadAttention):
                inside.append(name)
        elif any(p.ndim >= 2 for p in mod.parameters(recurse=False)):
            others[name] = why
    return chosen, others


def tied_weights(model: nn.Module, chosen) -> dict[str, str]:
    """``{path: reason}`` of the chosen modules with a weight tied to another parameter."""
    uses: dict[int, int] = {}
    for _, p in model.named_parameters(remove_duplicate=False):
        uses[id(p)] = uses.get(id(p), 0) + 1
    owners: dict[int, int] = {}
    for _, parent in model.named_modules(remove_duplicate=False):
        for child in parent._modules.values():
            owners[id(child)] = owners.get(id(child), 0) + 1
    out = {}
    for name, mod in chosen:
        for suffix, owner, w in weights_of(mod):
            if uses[id(w)] - (owners.get(id(owner), 0) or 1) > 0:
                out[name] = f"weight {suffix} is tied to another parameter"
    return out


def _replace(model: nn.Module, mod: nn.Module, new: nn.Module) -> None:
    """Put ``new`` wherever ``mod`` is a child in ``model``."""
    for _, parent in model.named_modules(remove_duplicate=False):
        for child_name, child in list(parent._modules.items()):
            if child is mod:
                parent._modules[child_name] = new


def store_weights(model: nn.Module, quantizer: Quantizer, *, key=0,
                  predicate=None) -> list[str]:
    """Replace the weight-bearing layers of ``model`` in place by their stored twins.

    Every module :func:`store_module` takes (``nn.Linear`` and subclasses keeping its forward,
    ``nn.Conv1d/2d/3d``, a transformers-style ``Conv1D``, ``nn.MultiheadAttention`` with its
    ``out_proj``) is replaced, each scaled along its output features (see the table in this
    module's docstring). :func:`ecosim.torch.quantize_model` does the same with the usual
    exclusions and a report.

    Args:
        model: the model (modified in place); not itself a storable layer.
        quantizer: the :class:`ecosim.torch.Quantizer` of the stored weights.
        key: root key of the initial write: the weight of module ``"a.b"`` is stored as
            ``q(W)`` with SR key ``fold_in(key, "init", "a.b.weight")``, the write an ECO
            optimizer built with the same key makes on a float32 parameter of that name.
        predicate: ``predicate(module_path, module) -> bool`` chooses among those modules;
            default: all of them.

    Returns:
        The parameter names of the stored weights (``"a.b.weight"``, ...).

    Raises:
        TypeError: ``model`` is itself a storable layer (there is no parent to put the new
            layer in: use :func:`store_module`) or ``quantizer`` is not a torch Quantizer.
        ValueError: nothing matched, or a chosen weight is tied to another parameter.
    """
    if storable(model) is None:
        raise TypeError(f"store_weights replaces submodules in place; for a bare "
                        f"{type(model).__name__} use ecosim.torch.store_module(module, "
                        "quantizer) (QuantizedLinear.from_linear for an nn.Linear)")
    if not isinstance(quantizer, Quantizer):
        raise TypeError(f"quantizer must be an ecosim.torch.Quantizer, got "
                        f"{type(quantizer).__name__}")
    chosen = [(n, m) for n, m in candidates(model)[0] if predicate is None or predicate(n, m)]
    if not chosen:
        raise ValueError("store_weights: no nn.Linear, nn.Conv1d/2d/3d, Conv1D or "
                         "nn.MultiheadAttention module of the model matched the predicate")
    for name, why in tied_weights(model, chosen).items():
        raise ValueError(f"in {name!r}, {why}; storing it as codes would break the tie "
                         "(exclude it with predicate=)")
    names = []
    for name, mod in chosen:
        _replace(model, mod, store_module(mod, quantizer, key=key, name=name))
        names += [f"{name}.{s}" if name else s for s, _, _ in weights_of(mod)]
    return names
