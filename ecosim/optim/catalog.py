"""The optimizers ecosim runs, one row each: what every other module reads instead of
spelling their names.

A row says what the optimizer keeps per parameter (its moments: what the memory formula
counts), which optimizer trains the parameters it does not take (Muon: the non-matrices, with
AdamW), where its NumPy factory and its torch twin live (as ``"module:name"``, imported when
asked, so that this table depends on nothing), and its display name. The schemes an
optimizer runs are the schemes' side (:mod:`ecosim.optim.schemes`: each names its
optimizers, by default all of these).

Example:
    >>> [o.name for o in optimizers()]
    ['sgdm', 'adamw', 'muon', 'lion']
    >>> get("adamw").moments, get("muon").others
    (('m', 'v'), 'adamw')
    >>> get("adamw").torch_twin().__name__
    'ECOAdamW'
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from ..registry import Registry

__all__ = ["OptimizerSpec", "get", "names", "optimizers"]


def _load(path: str | None):
    if path is None:
        return None
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True)
class OptimizerSpec:
    """One optimizer of the table.

    Attributes:
        name: the name ``memory``, ``schemes`` and the experiments use (``"adamw"``).
        title: the display name (``"AdamW"``).
        moments: the per-parameter buffers it keeps besides the weights (``("m", "v")``),
            each in the optimizer's ``states[name]`` format.
        others: the optimizer that trains the parameters this one does not take (None: it
            takes every parameter).
        factory: ``"module:function"`` of the NumPy factory.
        torch: ``"module:class"`` of the torch twin (None: NumPy only).
        injects: whether an offset added to the momentum is given back by the later updates
            (the update grows with the momentum at fixed other state), as ECO's memory-free
            injection needs; False: the schemes that inject into the momentum or carry their
            error through it are not offered (:func:`ecosim.optim.schemes.names_for`).
    """

    name: str
    title: str
    moments: tuple[str, ...]
    factory: str
    others: str | None = None
    torch: str | None = None
    injects: bool = True

    def make(self, *args, **kwargs):
        """The NumPy optimizer: ``factory(*args, **kwargs)``."""
        return _load(self.factory)(*args, **kwargs)

    def factory_function(self):
        """The NumPy factory itself (what :mod:`ecosim.optim` exports under :attr:`name`)."""
        return _load(self.factory)

    def torch_twin(self):
        """The torch optimizer class mirroring this one (needs torch), or None."""
        return _load(self.torch)


_REGISTRY: Registry[OptimizerSpec] = Registry("optimizer")
for _spec in (
    OptimizerSpec("sgdm", "SGDM", ("m",), "ecosim.optim.sgdm:sgdm",
                  torch="ecosim.torch.optim:ECOSGD"),
    OptimizerSpec("adamw", "AdamW", ("m", "v"), "ecosim.optim.adamw:adamw",
                  torch="ecosim.torch.optim:ECOAdamW"),
    # every parameter Muon takes is a matrix: one momentum; the rest is AdamW's
    OptimizerSpec("muon", "Muon", ("m",), "ecosim.optim.muon:muon", others="adamw"),
    # its update is a sign: nothing injected into the momentum is given back
    OptimizerSpec("lion", "Lion", ("m",), "ecosim.optim.lion:lion", injects=False),
):
    _REGISTRY.register(_spec.name, _spec)
del _spec


def get(name: str) -> OptimizerSpec:
    """The row of optimizer ``name``.

    Raises:
        KeyError: an unknown name (the message gives the closest one and the list).
    """
    return _REGISTRY.get(name)


def names() -> tuple[str, ...]:
    """The optimizers' names, in table order."""
    return tuple(_REGISTRY)


def optimizers() -> tuple[OptimizerSpec, ...]:
    """Every row, in table order."""
    return tuple(_REGISTRY.values())
