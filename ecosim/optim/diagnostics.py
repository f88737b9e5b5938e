"""The diagnostics of one optimizer step (``step(..., diagnostics=True)``).

:class:`StepDiagnostics` accumulates, parameter by parameter, what
:meth:`ecosim.optim.QuantizedOptimizer.step` reports: the rounding error of the weight write,
the norm of the update, the fraction of stored weights that changed, and how much of ECO's
momentum injection the stored momentum kept. It only reads the step's arrays.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["StepDiagnostics"]


class StepDiagnostics:
    """Accumulates the diagnostics of one step."""

    def __init__(self, quantized: bool):
        self.e: dict[str, np.ndarray] | None = {} if quantized else None
        self.sq = 0.0
        self.changed = 0
        self.n = 0
        self.inj_dot = 0.0  # <kept, intended> over the ECO injections of this step
        self.inj_sq = 0.0   # <intended, intended>
        self.inj_n = 0      # elements with a nonzero injection
        self.inj_lost = 0   # ... whose stored momentum did not change at all

    def add(self, name: str, w_old: np.ndarray, w_new: np.ndarray, tt: np.ndarray | None,
            quantized: bool) -> None:
        """Record parameter ``name``'s write: stored weights ``w_old`` -> ``w_new`` from
        ``theta_tilde = tt`` (None: nothing was written)."""
        if tt is not None:
            d = (tt - w_old).astype(np.float64, copy=False).ravel()
            self.sq += float(np.dot(d, d))
        self.changed += int(np.count_nonzero(w_new != w_old))
        self.n += w_old.size
        if self.e is not None:
            self.e[name] = (tt - w_new) if (quantized and tt is not None) else np.zeros_like(w_old)

    def inject(self, intended: np.ndarray, kept: np.ndarray) -> None:
        """Record an injection into a (possibly quantized) momentum: what was meant, what
        the stored momentum actually moved by."""
        a = intended.astype(np.float64, copy=False).ravel()
        b = kept.astype(np.float64, copy=False).ravel()
        self.inj_dot += float(np.dot(a, b))
        self.inj_sq += float(np.dot(a, a))
        nz = a != 0
        self.inj_n += int(np.count_nonzero(nz))
        self.inj_lost += int(np.count_nonzero(nz & (b == 0)))

    def result(self, lr: float) -> dict:
        """The step's diagnostics (``"e"`` a dict by parameter name, None for scheme fp)."""
        return {
            "e": self.e,
            "update_norm": math.sqrt(self.sq),
            "changed_frac": self.changed / self.n if self.n else 0.0,
            "lr": lr,
            "inject_kept": self.inj_dot / self.inj_sq if self.inj_sq > 0 else math.nan,
            "inject_lost": self.inj_lost / self.inj_n if self.inj_n else math.nan,
        }
