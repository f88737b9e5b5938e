"""The ECO optimizers' checkpoints (:mod:`ecosim.torch.optim`): ``state_dict`` with the step
counter and low-precision codes as same-size integers, ``load_state_dict`` back to the storage
dtypes, and the states of DTensor (FSDP2) parameters as DTensors of their placement, gathered
whole, or this process's rows.

A mixin of :class:`ecosim.torch.optim_base.ECOBase`: it reads the optimizer's ``_meta``,
``param_groups`` and ``state`` and its buffer codecs (``_codecs_of``).
"""

from __future__ import annotations

import math
import warnings

import torch

from ..optim.schemes import all_buffers
from .dtensor import gather_full, rows_of, is_dtensor
from .nn import as_raw_bits

_OWN_ATTRS = ("scheme", "weights", "states", "_meta", "_counter", "_step_count_t",
              "nesterov", "heavy_ball", "wd_corrected_injection", "_math",
              "schedule_guard", "lr_schedule", "_guard",
              "collect_diagnostics", "_never", "_last_diag")


class CheckpointMixin:
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
        sd["ecosim_scheme"] = self.scheme
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
        sd["state"] = {i: {k: gather_full(v) if is_dtensor(v) else v for k, v in s.items()}
                       for i, s in sd["state"].items()}
        return sd

    def _export(self, meta, k, v):
        if not isinstance(v, torch.Tensor):
            return v
        v = as_raw_bits(v)
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
        takes its rows) or this process's rows.

        The state must be this scheme's (its buffers: ``master`` for ``"master"``, ``c`` for
        ``"kahan"``...); another scheme's is refused before anything is loaded. As in
        ``torch.optim``, the groups' options come from the state, the SR ``key`` included (a
        resumed run continues its random stream); a key that differs from this optimizer's is
        reported with a warning.

        Raises:
            ValueError: the state was saved under another scheme, or a parameter's state lacks
                (or has extra) scheme buffers.
        """
        state_dict = dict(state_dict)
        t = state_dict.pop("ecosim_t", None)
        saved = state_dict.pop("ecosim_scheme", None)
        self._check_loaded(state_dict, saved)
        super().load_state_dict(state_dict)
        self._keep_saved_dtypes(state_dict.get("state") or {})
        if t is not None:
            self._step_count_t = int(t)
        for group in self.param_groups:
            for name, p in zip(group["names"], group["params"]):
                st = self.state[p]
                sh = self._meta[name].shard
                if sh is not None:
                    for k, v in list(st.items()):
                        if isinstance(v, torch.Tensor) and self._row_state(self._meta[name], k):
                            st[k] = rows_of(v, sh, name, k)
                for which, codec in self._codecs_of(self._meta[name]).items():
                    for k, typed in ((which, codec.typed), (which + "_scales",
                                                            codec.scales_typed)):
                        if k in st:
                            st[k] = _restore(st[k], typed)


    def _keep_saved_dtypes(self, saved: dict) -> None:
        """Undo ``torch.optim``'s cast of floating states to the parameter's dtype: the states
        keep the dtype they were saved in (a bfloat16 parameter's moments and master copy are
        float32, see ``_own_grid``; a cast to bfloat16 would round them)."""
        params = [p for g in self.param_groups for p in g["params"]]
        for i, st_saved in saved.items():
            if not isinstance(i, int) or not 0 <= i < len(params):
                continue
            st = self.state[params[i]]
            for k, v in st_saved.items():
                now = st.get(k)
                if (isinstance(v, torch.Tensor) and v.is_floating_point()
                        and isinstance(now, torch.Tensor) and now.dtype != v.dtype):
                    st[k] = v.to(device=now.device, copy=True)

    def _check_loaded(self, state_dict, saved) -> None:
        """Refuse a state of another scheme (see :meth:`load_state_dict`); warn of a new key."""
        if saved is not None and saved != self.scheme:
            raise ValueError(f"load_state_dict: the state was saved by a scheme={saved!r} "
                             f"optimizer, this one has scheme={self.scheme!r}; build the "
                             f"optimizer with scheme={saved!r} to resume that run")
        known = set(all_buffers())
        metas = self._metas_by_index()
        for i, st in (state_dict.get("state") or {}).items():
            if not st or not isinstance(i, int) or not 0 <= i < len(metas):
                continue  # an empty state or a bad index: torch's own checks report it
            meta = metas[i]
            want = set(meta.sch.buffers)
            have = set(st) & known
            if have != want:
                raise ValueError(
                    f"load_state_dict: parameter {meta.name!r} has scheme buffers "
                    f"{sorted(have)} in the state, scheme {meta.scheme!r} keeps {sorted(want)}; "
                    "the state is another scheme's")
        for g_new, g_old in zip(self.param_groups, state_dict.get("param_groups") or ()):
            k_old = g_old.get("key") if isinstance(g_old, dict) else None
            if k_old is not None and k_old != g_new["key"]:
                warnings.warn(f"load_state_dict: the state's SR key {k_old} replaces this "
                              f"optimizer's key {g_new['key']} (group options come from the "
                              "state, as in torch.optim)", stacklevel=3)


def _restore(v: torch.Tensor, typed: torch.dtype | None) -> torch.Tensor:
    """A state tensor back in its storage dtype after ``load_state_dict`` (which may have cast
    the integer codes to the parameter's float dtype: their values are exact)."""
    if typed is None or v.dtype == typed:
        return v
    raw = torch.uint8 if typed.itemsize == 1 else torch.int16
    return v.to(raw).view(typed)
