"""The ECO optimizers' checkpoints (:mod:`ecosim.torch.optim`): ``state_dict`` with the step
counter and low-precision codes as same-size integers, ``load_state_dict`` back to the storage
dtypes, and the states of DTensor (FSDP2) parameters as DTensors of their placement, gathered
whole, or this process's rows.

A mixin of :class:`ecosim.torch.optim_base._ECOBase`: it reads the optimizer's ``_meta``,
``param_groups`` and ``state`` and its buffer codecs (``_codecs_of``).
"""

from __future__ import annotations

import math

import torch

from ..optim.schemes import all_buffers
from .dtensor import _full_tensor, _rows_of, is_dtensor
from .nn import _raw

_OWN_ATTRS = ("scheme", "weights", "states", "_meta", "_counter", "_step_count_t",
              "nesterov", "heavy_ball", "wd_corrected_injection", "_math",
              "schedule_guard", "lr_schedule", "_guard",
              "collect_diagnostics", "_never", "_last_diag")


class _CheckpointMixin:
    """``state_dict``/``load_state_dict`` (and pickling) of an ECO optimizer."""

    def __getstate__(self):
        return dict(super().__getstate__(), **{k: v for k, v in self.__dict__.items()
                                              if k in _OWN_ATTRS})

    def _metas_by_index(self) -> list:
        """The parameters' metadata in ``state_dict``'s index order."""
        return [self._meta[n] for g in self.param_groups for n in g["names"]]

    def _row_state(self, meta, k) -> bool:
        """Whether state ``k`` of a parameter is split by rows as the parameter is: the
        buffers of its shape and the scales of row-wise (or per-group) formats."""
        if k.endswith("_scales"):
            base = k[:-len("_scales")]
            codec = meta.codec if base == "w" else self._codecs_of(meta).get(base)
            return codec is not None and not codec.q.fixed
        return k in ("m", "v") + all_buffers()

    def state_dict(self):
        """``Optimizer.state_dict`` plus the step counter, low-precision codes as same-size
        integers. The states of a DTensor parameter are DTensors with its placement (their
        ``full_tensor()`` is what one process holding the whole parameter would have)."""
        sd = super().state_dict()
        sd["ecosim_t"] = self._step_count_t
        metas = self._metas_by_index()
        # Low-precision codes as same-size integers: load_state_dict casts floats.
        sd["state"] = {i: {k: self._export(metas[i], k, v) for k, v in s.items()}
                       for i, s in sd["state"].items()}
        return sd

    def full_state_dict(self):
        """:meth:`state_dict` with the states of DTensor parameters gathered into whole
        tensors: what an unsharded optimizer's ``state_dict`` holds. A collective: every
        process of the mesh calls it (in the same order)."""
        sd = self.state_dict()
        sd["state"] = {i: {k: _full_tensor(v) if is_dtensor(v) else v for k, v in s.items()}
                       for i, s in sd["state"].items()}
        return sd

    def _export(self, meta, k, v):
        if not isinstance(v, torch.Tensor):
            return v
        v = _raw(v)
        sh = meta.shard
        if sh is None or not self._row_state(meta, k):
            return v
        from torch.distributed.tensor import DTensor
        shape = (sh.shape[0],) + tuple(v.shape[1:])
        stride = tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))
        return DTensor.from_local(v, sh.mesh, sh.placements, run_check=False, shape=shape,
                                  stride=stride)

    def load_state_dict(self, state_dict):
        """Inverse of :meth:`state_dict`. For a DTensor parameter a state may be a DTensor,
        the whole tensor (a checkpoint of an unsharded run, or a gathered one: this process
        takes its rows) or this process's rows."""
        state_dict = dict(state_dict)
        t = state_dict.pop("ecosim_t", None)
        super().load_state_dict(state_dict)
        if t is not None:
            self._step_count_t = int(t)
        for group in self.param_groups:
            for name, p in zip(group["names"], group["params"]):
                st = self.state[p]
                sh = self._meta[name].shard
                if sh is not None:
                    for k, v in list(st.items()):
                        if isinstance(v, torch.Tensor) and self._row_state(self._meta[name], k):
                            st[k] = _rows_of(v, sh, name, k)
                for which, codec in self._codecs_of(self._meta[name]).items():
                    for k, typed in ((which, codec.typed), (which + "_scales",
                                                            codec.scales_typed)):
                        if k in st:
                            st[k] = _restore(st[k], typed)


def _restore(v: torch.Tensor, typed: torch.dtype | None) -> torch.Tensor:
    """A state tensor back in its storage dtype after ``load_state_dict`` (which may have cast
    the integer codes to the parameter's float dtype: their values are exact)."""
    if typed is None or v.dtype == typed:
        return v
    raw = torch.uint8 if typed.itemsize == 1 else torch.int16
    return v.to(raw).view(typed)
