"""Whole models: store their weight matrices in one call, report it, and come back.

* :func:`quantize_model` stores the weight matrices of a model's block layers (linear,
  convolution, transformers ``Conv1D``, attention projections; :mod:`ecosim.torch.layers`) as
  low-precision codes, keeps embeddings, norms, biases and tied weights (a head tied to the
  embedding) in full precision, as the ECO paper does, and returns a :class:`QuantizeReport`
  saying what it stored and the optimizer's parameter groups.
* :func:`unstore_weights` puts the plain modules back with the current weights: the result's
  ``state_dict`` loads into the original architecture.
* :func:`save_pretrained` saves a stored transformers model as those plain weights, which
  ``from_pretrained`` reloads; the model's own ``save_pretrained`` is refused once
  :func:`quantize_model` stored it (it would write codes that ``from_pretrained`` ignores).
* :func:`ema_update` keeps an exponential moving average of a model with stored weights (torch's
  ``AveragedModel`` writes into the stored weight's slot in place, which the slot refuses with
  a TypeError naming this function).

Example (a small convolutional network; every convolution and the linear head stored)::

    report = quantize_model(model, Quantizer("e4m3", "sr", granularity="row"), key=0)
    print(report)       # stored 5 of 5 weight matrices, 98.7% of parameters; ...
    opt = ECOAdamW(report.param_groups(), 1e-3, scheme="eco", key=0)
    ema = unstore_weights(copy.deepcopy(model))   # a plain float copy to average into
    ...; opt.step(); ema_update(ema, model, 0.999)
"""

from __future__ import annotations

import copy
import dataclasses
import fnmatch
from collections import Counter

import torch
from torch import nn

from .layers import candidates, tied_weights, weights_of, store_weights
from .nn import QuantizedLinear, Codec, as_raw_bits, stored
from .quantizer import Quantizer

__all__ = ["QuantizeReport", "quantize_model", "unstore_weights", "ema_update"]


@dataclasses.dataclass(frozen=True)
class QuantizeReport:
    """What :func:`quantize_model` stored.

    Attributes:
        names: parameter names of the stored weights (``"a.b.weight"``, ...).
        n_matrices: weight tensors of two or more dimensions in the model (each counted once).
        stored_params, total_params: elements of the stored weights and of all parameters.
        skipped: ``{module path: reason}`` of modules holding such a weight that were kept in
            full precision (embeddings, tied weights, ``skip=``, unsupported layer types).
        model: the model (modified in place).
    """

    names: tuple
    n_matrices: int
    stored_params: int
    total_params: int
    skipped: dict
    model: nn.Module = dataclasses.field(repr=False, compare=False)

    @property
    def fraction(self) -> float:
        """Share of the model's parameter elements held as codes."""
        return self.stored_params / max(self.total_params, 1)

    def param_groups(self) -> list[dict]:
        """Fresh optimizer groups of ``(name, parameter)`` pairs: the stored weights, then the
        rest (full precision; set e.g. ``groups[1]["weight_decay"] = 0.0`` on it). Empty groups
        are left out."""
        groups: list[list] = [[], []]
        for name, p in self.model.named_parameters():
            groups[stored(p) is None].append((name, p))
        return [{"params": g} for g in groups if g]

    def __str__(self) -> str:
        kinds = Counter(r for r in self.skipped.values())
        kept = "; ".join(f"{r}: {', '.join(n for n, w in self.skipped.items() if w == r)}"
                         for r in kinds)
        return (f"stored {len(self.names)} of {self.n_matrices} weight matrices, "
                f"{100 * self.fraction:.1f}% of parameters"
                + (f"; kept in full precision: {kept}" if kept else ""))


def _skip_fn(skip):
    if skip is None:
        return lambda name, mod: False
    if callable(skip):
        return skip
    if isinstance(skip, str):
        skip = [skip]
    pats = list(skip)
    if not all(isinstance(p, str) for p in pats):
        raise TypeError("skip must be a callable (path, module) -> bool or module-path "
                        "patterns (fnmatch strings)")
    return lambda name, mod: any(fnmatch.fnmatchcase(name, p) for p in pats)


def quantize_model(model: nn.Module, quantizer: Quantizer, *, key=0, skip=None
                   ) -> QuantizeReport:
    """Store the block weight matrices of ``model`` as codes, in place, and report it.

    Stored: every ``nn.Linear`` (and subclass keeping its forward), ``nn.Conv1d/2d/3d``,
    transformers ``Conv1D`` and ``nn.MultiheadAttention`` (scale axes: see
    :mod:`ecosim.torch.layers`). Kept in full precision: embeddings and norms (not supported
    layer types), biases, any layer whose weight is tied to another parameter (a language
    model's head tied to its token embedding), and the modules ``skip`` names.

    Args:
        model: the model (modified in place).
        quantizer: the :class:`ecosim.torch.Quantizer` of the stored weights (e.g.
            ``Quantizer("e4m3", "sr", granularity="row")``).
        key: root key of the initial writes (as :func:`ecosim.torch.store_weights`).
        skip: modules to keep in full precision as well: ``skip(path, module) -> bool`` or
            module-path patterns (``fnmatch``, e.g. ``["lm_head", "*.attn.c_proj"]``).

    Returns:
        A :class:`QuantizeReport` (``str(report)``: ``"stored k of n weight matrices, x% of
        parameters; kept in full precision: ..."``; ``report.param_groups()`` for the
        optimizer).

    Raises:
        ValueError: nothing left to store.
    """
    if not isinstance(quantizer, Quantizer):
        raise TypeError(f"quantizer must be an ecosim.torch.Quantizer, got "
                        f"{type(quantizer).__name__}")
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    skip_fn = _skip_fn(skip)
    params = {id(p): p for p in model.parameters()}
    n_matrices = sum(p.ndim >= 2 for p in params.values())
    chosen, skipped = candidates(model)
    ties = tied_weights(model, chosen)
    keep = []
    for name, mod in chosen:
        if name in ties:
            skipped[name] = "tied weight"
        elif skip_fn(name, mod):
            skipped[name] = "skip="
        else:
            keep.append(name)
    skipped = {n: (r if r in ("tied weight", "skip=") else type(dict(model.named_modules())[n])
                   .__name__) for n, r in skipped.items()}
    if not keep:
        raise ValueError(f"quantize_model: nothing to store (kept in full precision: "
                         f"{skipped or 'no weight matrices'})")
    weights = {n: [w for _, _, w in weights_of(m)] for n, m in chosen}
    stored_params = sum(w.numel() for n in keep for w in weights[n])
    names = store_weights(model, quantizer, key=key, predicate=lambda n, m: n in keep)
    if callable(getattr(model, "save_pretrained", None)):  # a transformers model
        model.__dict__["save_pretrained"] = _refuse_save_pretrained
    return QuantizeReport(tuple(names), n_matrices, stored_params,
                          sum(p.numel() for p in params.values()), skipped, model)


def unstore_weights(model: nn.Module) -> nn.Module:
    """Put plain modules with the current (dequantized) weights back in place of stored ones.

    The result has the original module types (``nn.Conv2d``, ``nn.MultiheadAttention``,
    transformers ``Conv1D``, ...) and parameter names, so its ``state_dict`` loads into the
    original architecture. ``model`` is modified in place (deep-copy it first to keep the
    stored model); the return value is ``model``, or the plain layer when ``model`` itself is
    a stored layer.
    """
    if hasattr(model, "to_plain") and _is_stored_module(model):
        return model.to_plain()
    for _, parent in list(model.named_modules(remove_duplicate=False)):
        for child_name, child in list(parent._modules.items()):
            if child is not None and _is_stored_module(child):
                parent._modules[child_name] = child.to_plain()
    return model


def save_pretrained(model: nn.Module, save_directory, **kwargs) -> None:
    """Save a stored transformers model so that ``from_pretrained`` reloads it.

    Writes the plain twin (:func:`unstore_weights` of a deep copy: the current weights,
    dequantized, in the original module types and parameter names) with its own
    ``save_pretrained(save_directory, **kwargs)``; ``model`` is not modified. The reloaded
    model is a plain one: quantize it again to go on training with stored weights. (To resume
    the stored state itself, codes and scales, save ``model.state_dict()`` with
    ``torch.save`` and load it into a model quantized the same way.) ``model.save_pretrained``
    of a model :func:`quantize_model` stored is refused: it would write codes and scales,
    which ``from_pretrained`` does not read (it initialises those weights at random).
    """
    if not callable(getattr(type(model), "save_pretrained", None)):
        raise TypeError(f"save_pretrained takes a transformers model (with a save_pretrained "
                        f"method), got {type(model).__name__}; for other models save "
                        "unstore_weights(copy.deepcopy(model)).state_dict()")
    plain = unstore_weights(copy.deepcopy(model))
    plain.__dict__.pop("save_pretrained", None)
    plain.save_pretrained(save_directory, **kwargs)


def _refuse_save_pretrained(*args, **kwargs):
    raise TypeError("this model's weights are stored as codes by ecosim.torch.quantize_model, "
                    "which from_pretrained would load as random weights; save it with "
                    "ecosim.torch.save_pretrained(model, directory) (plain weights)")


def _is_stored_module(mod) -> bool:
    from .layers import QuantizedMultiheadAttention
    return isinstance(mod, (QuantizedLinear, QuantizedMultiheadAttention))


def _write_rtn(layer: QuantizedLinear, x: torch.Tensor) -> None:
    """Store ``q(x)`` in ``layer`` with round-to-nearest (whatever the layer's mode)."""
    rtn = Codec(dataclasses.replace(layer.quantizer, mode="rtn"))
    _, codes, scales = rtn.encode(layer._to_matrix(x.to(layer._value_dtype)), None)
    layer.codes.copy_(as_raw_bits(codes))
    if scales is not None:
        layer.scales.copy_(as_raw_bits(scales))


def _values(model: nn.Module) -> dict[str, tuple[torch.Tensor, object]]:
    """``{name: (current values, layer or None)}`` of the parameters, stored ones by their
    store's name (the original parameter name)."""
    out = {}
    for name, p in model.named_parameters():
        layer = stored(p)
        out[layer.name if layer is not None else name] = (p, layer)
    return out


@torch.no_grad()
def ema_update(ema: nn.Module, model: nn.Module, decay: float, *,
               buffers: bool = True) -> None:
    """``ema <- decay * ema + (1 - decay) * model`` for every parameter (torch's ``lerp_``).

    ``model`` may hold stored weights (their decoded values are averaged); ``ema`` is usually a
    plain copy (``unstore_weights(copy.deepcopy(model))``), and may hold stored weights too
    (the average is then written back with RTN). Parameters are matched by name (a stored
    weight by its store's name, the original parameter name). ``buffers``: copy the model's
    buffers (e.g. batch-norm statistics) into ``ema`` as ``AveragedModel(use_buffers=False)``
    leaves them to the user.

    Raises:
        ValueError: ``decay`` outside [0, 1], or the two models' parameter names or shapes
            differ.
    """
    if isinstance(decay, bool) or not isinstance(decay, (int, float)) or not 0 <= decay <= 1:
        raise ValueError(f"decay must be a number in [0, 1], got {decay!r}")
    src, dst = _values(model), _values(ema)
    if src.keys() != dst.keys():
        raise ValueError(f"ema and model have different parameters: only in ema "
                         f"{sorted(dst.keys() - src.keys())}, only in model "
                         f"{sorted(src.keys() - dst.keys())}")
    for name, (e, _) in dst.items():
        if e.shape != src[name][0].shape:
            raise ValueError(f"ema and model have different parameters: {name!r} has shape "
                             f"{tuple(e.shape)} in ema, {tuple(src[name][0].shape)} in model")
    for name, (e, e_layer) in dst.items():
        p, layer = src[name]
        value = layer.read() if layer is not None else p.detach()
        if e_layer is not None:
            _write_rtn(e_layer, e_layer.read().lerp_(value, 1 - decay))
        else:
            e.detach().lerp_(value.to(e.dtype), 1 - decay)
    if buffers:
        theirs = dict(model.named_buffers())
        for name, b in ema.named_buffers():
            if name in theirs and theirs[name].shape == b.shape and not name.endswith(
                    (".codes", ".scales")):
                b.copy_(theirs[name])
