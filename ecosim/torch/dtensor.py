"""DTensor (FSDP2) parameters seen from one process: the one test for a DTensor and its local
part, used by the optimizers (:mod:`ecosim.torch.optim`) and the LM runner
(:mod:`ecosim.torch.lm`); and, for the optimizers, where a dim-0 shard sits in its whole tensor
(its rows, its first element as the SR counter base) and which quantizers such a shard can use.

``torch.distributed.tensor`` is imported on first use (and not at all where
``torch.distributed`` is unavailable), so that importing the backend stays cheap.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

import torch

from . import rng

if TYPE_CHECKING:  # pragma: no cover
    from .quantizer import Quantizer

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


# -- DTensor (FSDP2) parameters ------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ShardRows:
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


def shard_of(name, p) -> ShardRows:
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
    return ShardRows(shape, start, rows, mesh, pl)


def check_sharded_quantizer(name, q: Quantizer, shard: ShardRows, what: str):
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


class ShardKey(int):
    """A root key that also carries a shard's global element offset: SR keys derived from it
    by :func:`sr_key` draw element ``i`` of the shard from counter ``offset + i``, the
    counter element ``offset + i`` of the whole tensor would use."""

    def __new__(cls, key, offset):
        obj = int.__new__(cls, key)
        obj.offset = int(offset)
        return obj


def sr_key(key, *data):
    """``fold_in(key, *data)``, as ``(key, counter)`` for a shard (see :class:`ShardKey`)."""
    k = rng.fold_in(key, *data)
    off = getattr(key, "offset", 0)
    return (k, off) if off else k


def gather_full(v) -> torch.Tensor:
    """``v.full_tensor()``; 16-bit integer codes travel as int32 (gloo has no int16)."""
    if v.dtype == torch.int16:
        return v.to(torch.int32).full_tensor().to(torch.int16)
    return v.full_tensor()


def rows_of(v: torch.Tensor, sh: ShardRows, name, k) -> torch.Tensor:
    """This process's rows of a loaded state (a DTensor, the whole tensor, or the rows)."""
    if is_dtensor(v):
        return v.to_local()
    if v.shape[0] == sh.shape[0]:
        return v[sh.start:sh.start + sh.rows].clone()
    if v.shape[0] == sh.rows:
        return v
    raise ValueError(f"state {k!r} of parameter {name!r} has {v.shape[0]} rows: neither the "
                     f"parameter's {sh.shape[0]} nor this process's {sh.rows}")
