"""Policies of the quantized-weight optimizers: state quantizers, format checks, arguments.

How a ``states=`` / ``weights=`` spec becomes quantizers (:func:`state_quantizer`,
:func:`compensation_quantizer`, :func:`resolve_states`, :func:`weights_dict`), whether an array
lies on a quantizer's grid (:func:`on_grid`), and the checks of the scalar arguments (learning
rate, betas) shared by every optimizer of :mod:`ecosim.optim.base`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Callable

import numpy as np

from ..core.formats import Format, get
from ..core.quantizer import Quantizer
from ..core.rounding import quantize
from ..core.checks import check_real
from . import catalog as optimizer_catalog
from .schedules import as_schedule
from .schemes import REGISTRY, is_eco, names_for

__all__ = [
    "ADAMW_SCHEMES",
    "SCHEMES",
    "check_beta",
    "compensation_quantizer",
    "on_grid",
    "resolve_states",
    "state_quantizer",
    "weights_dict",
]

#: the schemes every optimizer that takes ECO's injection implements (SGDM, AdamW, Muon;
#: :mod:`ecosim.optim.schemes` defines them, :mod:`ecosim.optim.catalog` says which inject)
SCHEMES = tuple(n for n in REGISTRY
                if all(n in names_for(o.name) for o in optimizer_catalog.optimizers()
                       if o.injects))
#: AdamW's: SCHEMES and the AdamW-only ones (the momentum-exact ECO, :mod:`ecosim.optim.adamw`)
ADAMW_SCHEMES = names_for("adamw")
#: the schemes whose momentum carries the rounding error (beta in (0, 1) and lr > 0 needed)
ECO_SCHEMES = tuple(n for n in REGISTRY if is_eco(n))


# -- policies ---------------------------------------------------------------------------------

def state_quantizer(spec: Quantizer | Format | str | tuple) -> Quantizer:
    """The quantizer of a low-precision buffer (``g``, ``m``, ``v`` or ``master``).

    Args:
        spec: a :class:`~ecosim.Quantizer` (used as is: its mode applies), a format, or a
            pair ``(format, mode)`` with ``mode`` a name of
            :data:`~ecosim.core.rounding_modes.MODES` (a format alone means RTN). A format of 16
            bits or more (``"bf16"``, ``"fp16"``) or with an exponent field of 8 bits or more
            (the third reference's ``custom(8, M)``, any M) means a plain cast: the fixed
            scale 1, so the relative error is at most
            ``2**-M`` over float32's whole range. A narrower one (``"e4m3"``) gets row-wise
            absmax scales (one per output row, as the weights), since a plain FP8 cast would
            flush the small values of ``v`` to zero.

    Example:
        >>> from ecosim.core.formats import custom
        >>> state_quantizer((custom(8, 3), "sr")).scale, state_quantizer("e4m3").granularity
        (1.0, 'row')
    """
    if isinstance(spec, Quantizer):
        return spec
    mode = "rtn"
    if isinstance(spec, tuple):
        if len(spec) != 2 or not isinstance(spec[1], str):
            raise TypeError(f"a state format pair is (format, mode), got {spec!r}")
        spec, mode = spec
    if isinstance(spec, (str, Format)):
        fmt = get(spec)
        if fmt.bits >= 16 or (fmt.is_float and fmt.exponent_bits >= 8):
            return Quantizer(fmt, mode, scale=1.0)
        return Quantizer(fmt, mode, granularity="row", scale="absmax")
    raise TypeError(f"a state format must be a Quantizer, a format name or a (format, mode) "
                    f"pair, got {spec!r}")


def compensation_quantizer(q: Quantizer) -> Quantizer:
    """The quantizer of the Kahan compensation buffer: the weights' kind, with its own scale.

    Same format, rounding mode and granularity as the weight quantizer ``q``; a fixed scale
    (which belongs to the weight grid) is replaced by absmax, so the buffer gets its own scale.
    """
    return dataclasses.replace(q, scale="absmax") if q.fixed else q


def on_grid(q: Quantizer, x: np.ndarray, *, scales: np.ndarray | None = None) -> bool:
    """Whether ``x`` lies on the grid of ``q``: rounding it again (RTN) changes nothing.

    Args:
        q: the quantizer that produced ``x``.
        x: the stored values.
        scales: the scales the values were produced with, when they do not follow from ``x``
            itself (DQT's grid from the previous step's weights).

    An absmean scale is not idempotent (the mean of ternary values is smaller than their grid
    step), so for ``scale="absmean"`` the grid is checked with the absmax scale of ``x``, which
    recovers the step of a ternary grid exactly. Power-of-two scales with the ``"floor"`` or
    ``"even"`` rule are not idempotent either on some formats (int4: RTN may round a block's
    largest negative value to the code -8, whose re-derived scale is one binade up): pass
    ``scales`` for those.
    """
    check = dataclasses.replace(q, mode="rtn")
    if q.scale == "absmean":
        check = dataclasses.replace(check, scale="absmax")
    x = np.asarray(x)
    y = check(x, scales=scales)
    return bool(np.array_equal(y, x))


def resolve_weights(weights: Any, scheme: str,
                     schemes: tuple[str, ...] = SCHEMES) -> Quantizer | Mapping | None:
    if scheme not in schemes:
        raise ValueError(f"scheme must be one of {schemes}, got {scheme!r}")
    if weights is None:
        if scheme != "fp":
            raise ValueError(f"scheme {scheme!r} needs weights=: a Quantizer, or a dict "
                             "name -> Quantizer | None; weights=None is only for scheme='fp'")
        return None
    if scheme == "fp":
        raise ValueError("scheme 'fp' keeps full-precision weights: pass weights=None")
    if isinstance(weights, Quantizer):
        return weights
    if isinstance(weights, Mapping):
        return MappingProxyType(weights_dict(weights, Quantizer, "a Quantizer"))
    raise TypeError(f"weights must be a Quantizer, a dict name -> Quantizer | None, or None; "
                    f"got {type(weights).__name__}")


def weights_dict(weights: Mapping, qtype: type, what: str) -> dict:
    """A ``weights=`` dict checked: parameter names to ``qtype`` (``what``) or None.

    Shared with the torch optimizers (:mod:`ecosim.torch.optim`), which pass their own
    quantizer type."""
    out = {}
    for name, q in weights.items():
        if not isinstance(name, str):
            raise TypeError(f"weights keys must be parameter names (str), got {name!r}")
        if q is not None and not isinstance(q, qtype):
            raise TypeError(f"weights[{name!r}] must be {what} or None, got "
                            f"{type(q).__name__}")
        out[name] = q
    return out


def resolve_states(states: Any, moments: tuple[str, ...], scheme: str,
                   convert: Callable[[Any], Any] | None = None) -> Mapping[str, Quantizer]:
    """``states`` checked: keys among ``g``, the moments and ``master``; values quantizers
    (``convert(spec)``, default :func:`state_quantizer`: the torch backend passes its own)."""
    convert = convert or state_quantizer
    if states is None:
        return MappingProxyType({})
    if not isinstance(states, Mapping):
        raise TypeError(f"states must be a dict like {{'m': 'bf16'}}, got {states!r}")
    allowed = ("g",) + tuple(moments) + ("master",)
    out = {}
    for k, spec in states.items():
        if k not in allowed:
            raise ValueError(f"states keys must be among {allowed}, got {k!r}")
        if spec is not None:
            out[k] = convert(spec)
    if "master" in out and scheme != "master":
        raise ValueError(f"states['master'] is the format of the master copy: it needs "
                         f"scheme='master', got scheme={scheme!r}")
    return MappingProxyType(out)


def check_beta(value: Any, name: str, scheme: str) -> float:
    """beta in [0, 1); ECO's coefficient needs beta in (0, 1)."""
    value = check_real(value, name)
    if is_eco(scheme):
        if not 0.0 < value < 1.0:
            raise ValueError(f"scheme {scheme!r} needs {name} in (0, 1), got {value!r}: the "
                             f"injection coefficient (1/lr)(1 - 1/{name}) is undefined at 0")
    elif not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value!r}")
    return value


def make_schedule(lr: Any, scheme: str) -> Callable[[int], float]:
    if not callable(lr):
        value = check_real(lr, "lr")
        if value <= 0 and is_eco(scheme):
            raise ValueError(f"scheme {scheme!r} needs lr > 0, got {value!r}: the injection "
                             "coefficient (1/lr)(1 - 1/beta) is undefined")
    return as_schedule(lr)
