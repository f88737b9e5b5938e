"""The bytes a torch model and its optimizer actually hold: :func:`measured_memory`.

The measured side of ecosim's memory accounting: every parameter (a stored layer's codes,
scales and slot; any other tensor's ``nbytes``) and every optimizer state tensor, by buffer,
in the fields of :class:`ecosim.memory.Memory`, the formula it is compared with.
"""

from __future__ import annotations

from collections import Counter, namedtuple

import torch
from torch import nn

from ..memory import Memory
from .slot import stored

__all__ = ["measured_memory", "MeasuredMemory"]

_STATE_BUFFER = {"m": "m", "exp_avg": "m", "momentum_buffer": "m", "v": "v",
                 "exp_avg_sq": "v", "master": "master", "e_prev": "e_prev", "c": "c",
                 "w_scales": "weights"}


_MEASURED = (*Memory._fields, "other", "n_params")  # the formula's buffers, then two more


class MeasuredMemory(namedtuple("MeasuredMemory", _MEASURED, defaults=(0,) * len(_MEASURED))):
    """Bytes actually held, by buffer (the tensors' ``nbytes``; see :func:`measured_memory`):
    the buffers of :class:`ecosim.memory.Memory` (the formula), then ``other`` and
    ``n_params``; every field an int, 0 by default.

    Attributes:
        weights: what the model holds for its parameters: codes + scales (+ the 4-byte slot)
            for stored weights, the tensor for plain parameters.
        master, m, v, e_prev, c: the optimizer states of that name (with their scales);
            torch's ``exp_avg``/``exp_avg_sq``/``momentum_buffer`` count as ``m``/``v``/``m``.
        other: any other optimizer state tensor (e.g. torch AdamW's ``step``).
        n_params: number of parameter elements (a stored weight counts its full shape).
    """

    __slots__ = ()

    @property
    def total(self) -> int:
        """All bytes (parameters and optimizer states)."""
        return sum(self[:-1])

    def per_param(self) -> dict[str, float]:
        """Bytes per parameter element, by buffer, plus ``"total"``."""
        n = max(self.n_params, 1)
        out = {k: getattr(self, k) / n for k in self._fields[:-1]}
        out["total"] = self.total / n
        return out


def _local_part(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's local shard (what this process holds), else the tensor."""
    if type(t).__name__ == "DTensor" and hasattr(t, "to_local"):
        return t.to_local()
    return t


def measured_memory(model: nn.Module | list, optimizer: torch.optim.Optimizer | None = None
                    ) -> MeasuredMemory:
    """The bytes a model's parameters and an optimizer's states actually hold.

    Counts each parameter once (tied ones too): a stored weight as ``codes.nbytes +
    scales.nbytes`` plus its slot's one element, any other parameter as its ``nbytes``; then
    every tensor in ``optimizer.state`` of those parameters, by buffer name (a
    ``"<buffer>_scales"`` entry counts with its buffer). Gradients and activations are
    transient and not counted (docs/theory.md §6). A DTensor (an FSDP2-sharded parameter or
    state) counts with its local shard: the bytes and parameters this process holds.

    Example (AdamW, master FP32 weights vs ECO with FP8 codes):
        >>> import torch
        >>> from ecosim.torch import ECOAdamW, Quantizer
        >>> q = Quantizer("e4m3", granularity="row")
        >>> net = torch.nn.Sequential(torch.nn.Linear(256, 256, bias=False))
        >>> opt = ECOAdamW(net.parameters(), 1e-3, scheme="master", weights=q)
        >>> measured_memory(net, opt).per_param()["total"]      # 4 weights + 4 master + 4 + 4
        16.015625
        >>> from ecosim.torch import store_weights
        >>> _ = store_weights(net, q)
        >>> opt = ECOAdamW(net.parameters(), 1e-3, scheme="eco")
        >>> round(measured_memory(net, opt).per_param()["total"], 4)   # 1 + 4/256 + 4 + 4
        9.0157
    """
    params = list(model.parameters()) if isinstance(model, nn.Module) else list(model)
    seen, acc = set(), Counter()
    n = 0
    for p in params:
        if id(p) in seen:
            continue
        seen.add(id(p))
        local = _local_part(p)
        n += local.numel()
        layer = stored(p)
        if layer is not None:
            acc["weights"] += (layer.codes.nbytes + layer.scales.nbytes
                               + p.untyped_storage().nbytes())
        else:
            acc["weights"] += local.nbytes
        if optimizer is None or p not in optimizer.state:
            continue
        for k, v in optimizer.state[p].items():
            if not isinstance(v, torch.Tensor):
                continue
            v = _local_part(v)
            base = k[:-len("_scales")] if k.endswith("_scales") and k not in _STATE_BUFFER else k
            acc[_STATE_BUFFER.get(base, "other")] += v.nbytes
    return MeasuredMemory(**acc, n_params=n)
