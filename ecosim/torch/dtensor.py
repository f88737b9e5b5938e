"""DTensor (FSDP2) parameters seen from one process: the one test for a DTensor and its local
part, used by the optimizers (:mod:`ecosim.torch.optim`) and the LM runner
(:mod:`ecosim.torch.lm`).

``torch.distributed.tensor`` is imported on first use (and not at all where
``torch.distributed`` is unavailable), so that importing the backend stays cheap.
"""

from __future__ import annotations

import torch

__all__ = ["dtensor_class", "is_dtensor", "local_tensor"]

_DTENSOR = []  # [DTensor class or None], imported on first use


def dtensor_class():
    """``torch.distributed.tensor.DTensor``, or None where torch has no DTensor."""
    if not _DTENSOR:
        cls = None
        if torch.distributed.is_available():
            try:
                from torch.distributed.tensor import DTensor as cls
            except ImportError:  # pragma: no cover - torch without DTensor
                cls = None
        _DTENSOR.append(cls)
    return _DTENSOR[0]


def is_dtensor(t) -> bool:
    """Whether ``t`` is a DTensor (a tensor sharded over processes)."""
    cls = dtensor_class()
    return cls is not None and isinstance(t, cls)


def local_tensor(t):
    """This process's part of ``t`` (a DTensor's local shard, an alias; else ``t``)."""
    return t.to_local() if is_dtensor(t) else t
