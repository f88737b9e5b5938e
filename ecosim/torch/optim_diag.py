"""The ECO optimizers' per-step diagnostics (``diagnostics=True`` of :mod:`ecosim.torch.optim`):
the fraction of stored codes changed and never changed, ``|m|/|g|``, and how much of ECO's
injection the stored momentum kept, collected on the device and moved to the host once a step.

A mixin of :class:`ecosim.torch.optim_base.ECOBase`, which calls :meth:`_diag_param` after each
quantized parameter's update and whose ECO injection records into :class:`StepDiag`.
"""

from __future__ import annotations

import math

import torch

from .dtensor import local_tensor
from .nn import as_raw_bits, stored
from .quantizer import unpack


class DiagnosticsMixin:
    """The diagnostics of the last step and the never-changed masks of an ECO optimizer."""

    def _flat_codes(self, p) -> torch.Tensor:
        """The stored codes of quantized parameter ``p`` (a copy), one integer per weight in
        C order (packed codes unpacked)."""
        enc = self.encoded(p)
        n = math.prod(local_tensor(p).shape) if stored(p) is None else math.prod(enc.shape)
        if enc.packed_bits:
            return unpack(enc.codes, enc.packed_bits, n)
        return as_raw_bits(enc.codes).reshape(-1).clone()

    def _diag_param(self, diag, meta, p, codes_old, g):
        """Record the diagnostics of quantized parameter ``meta.name`` after its update."""
        name = meta.name
        changed = self._flat_codes(p) != codes_old
        never = self._never.get(name)
        if never is None or never.shape != changed.shape:
            never = self._never[name] = torch.ones_like(changed)
        never &= ~changed
        like = torch.empty(local_tensor(p).shape, device="meta", dtype=meta.dtype)
        m = self._load(self.state[p], "m", like).to(torch.float64)
        g64 = g.to(torch.float64)
        diag.finish(name, torch.stack([
            changed.sum().to(torch.float64), never.sum().to(torch.float64),
            torch.dot(m.ravel(), m.ravel()), torch.dot(g64.ravel(), g64.ravel())]),
            changed.numel())

    def diagnostics(self) -> dict | None:
        """The diagnostics of the last step (None before the first step, or when the optimizer
        was built without ``diagnostics=True``).

        Over the quantized parameters of this process (a DTensor parameter: its rows; the
        full-precision ones are left out), aggregated and per parameter (``"params"``: name ->
        the same keys):

        * ``"changed_frac"``: the fraction of stored codes that changed in this step (the codes
          of :meth:`encoded`; a rescaled block whose codes stayed counts as unchanged, where
          NumPy's ``changed_frac`` compares values, all of which a moving row scale changes);
        * ``"never_changed_frac"``: the fraction never changed since diagnostics began (the
          first step taken with them on; :meth:`never_changed` gives the mask): weights
          stalled by round-to-nearest;
        * ``"m_over_g"``: ``|m| / |g|``, the 2-norm of the stored first moment after the
          step over the 2-norm of this step's gradient (after its quantization point, before
          weight decay); NaN for a zero gradient;
        * ``"inject_kept"`` (ECO only, else NaN): NumPy's definition, ``<kept, intended> /
          <intended, intended>`` in float64, ``intended`` the injection added to ``m`` and
          ``kept`` the stored momentum's move (1 with a full-precision momentum; NaN when
          nothing was injected), and ``"inject_lost"``: the fraction of elements with a
          nonzero injection whose stored momentum did not move.

        The aggregate of a ratio is the ratio of the sums (``sqrt(sum |m|^2 / sum |g|^2)``,
        ``sum <kept, intended> / sum <intended, intended>``). Also ``"step"``: the step's
        index. Collecting them costs a copy of each parameter's codes, a read of ``m``, a few
        reductions and one device-to-host transfer per step, and changes no result. The
        codes are compared through :meth:`encoded`: for a stored weight its codes (a copy,
        no sync); for a plain (not stored) parameter an RTN encoding of its values before and
        after the step, whose scale check adds a sync per parameter.
        """
        return self._last_diag

    def never_changed(self, p) -> torch.Tensor:
        """The bool mask of the stored weights of ``p`` (a tensor or its name; a DTensor's
        rows) that no step has changed since diagnostics began (``diagnostics=True``)."""
        name = p if isinstance(p, str) else next(
            n for g in self.param_groups for n, q in zip(g["names"], g["params"]) if q is p)
        if name not in self._never:
            raise KeyError(f"no never-changed mask for {name!r}: it is not quantized, no step "
                           "has run, or the optimizer was built without diagnostics=True")
        return self._never[name]


class StepDiag:
    """Collects one step's diagnostics as device tensors, one row per quantized parameter:
    ``[changed, never, |m|^2, |g|^2, <kept, intended>, <intended, intended>, injected,
    lost]`` (float64; the sizes are host ints); :meth:`result` moves them to the host in one
    transfer."""

    _INJ = 4  # the injection's entries, zeros when nothing was injected

    def __init__(self):
        self.rows: dict[str, list] = {}
        self.sizes: dict[str, int] = {}  # elements per parameter (host ints)
        self.injected: set[str] = set()

    def begin(self, name):
        self.rows[name] = [None, None]

    def inject(self, name, intended, kept):
        a = intended.to(torch.float64).ravel()
        b = kept.to(torch.float64).ravel()
        nz = a != 0
        self.rows[name][1] = torch.stack([torch.dot(a, b), torch.dot(a, a),
                                          nz.sum().to(torch.float64),
                                          (nz & (b == 0)).sum().to(torch.float64)])
        self.injected.add(name)

    def finish(self, name, row, n):
        inj = self.rows[name][1]
        self.rows[name][0] = torch.cat([row, inj if inj is not None else
                                        row.new_zeros(self._INJ)])
        self.sizes[name] = n

    @staticmethod
    def _values(n, changed, never, msq, gsq, dot, isq, inj_n, lost, injected):
        return {
            "changed_frac": changed / n if n else 0.0,
            "never_changed_frac": never / n if n else 0.0,
            "m_over_g": math.sqrt(msq / gsq) if gsq > 0 else math.nan,
            "inject_kept": dot / isq if injected and isq > 0 else math.nan,
            "inject_lost": lost / inj_n if injected and inj_n else math.nan,
        }

    def result(self, t) -> dict:
        names = list(self.rows)
        if not names:
            return {"step": t, **self._values(0, 0, 0, 0.0, 0.0, 0.0, 0.0, 0, 0, False),
                    "params": {}}
        dev = self.rows[names[0]][0].device
        table = torch.stack([self.rows[n][0].to(dev) for n in names]).tolist()  # one sync
        per = {n: self._values(self.sizes[n], *row, n in self.injected)
               for n, row in zip(names, table)}
        tot = [math.fsum(col) for col in zip(*table)]
        return {"step": t, **self._values(sum(self.sizes.values()), *tot, bool(self.injected)),
                "params": per}
