"""DQT: direct quantized training with stochastic rounding onto the previous step's grid.

Zhao et al., "Direct Quantized Training of Language Models with Stochastic Rounding",
arXiv 2412.04787 (ACML 2025): no master weights; the weights live on an n-bit integer grid (or
a ternary one) with one scale per tensor, and every update is written with stochastic rounding
onto the grid whose scale comes from the *previous* step's stored weights (docs/theory.md §4.7).
Initialisation rounds the full-precision weights to nearest with BitNet b1.58's absmean scale
(ternary) or an absmax scale (n bits), as the DQT reference code does.

The scale of step ``t`` is the absmax scale of the previous stored weights,
``max|theta_hat_{t-1}| / rho``: the step of the grid they lie on when their largest code is
``rho`` (for ternary weights it is their grid step exactly; the absmean of ternary values is
smaller than the step, so re-deriving an absmean scale from them would shrink the grid every
step). Values beyond the grid saturate. On the symmetric ternary grid the scale therefore never
grows: it stays the initial absmean. An integer grid is not symmetric: its most negative code
``-2**(n-1)`` lies one step beyond ``-rho``, so a weight saturated there has ``|theta| =
(rho + 1) s`` and the next absmax scale is ``(rho + 1) / rho`` times larger (x2 for INT2, x8/7
for INT4, x128/127 for INT8), a ratchet that can repeat every step. The DQT reference code
takes the signed ``max`` of the previous weights instead (``scale="max"`` here): the positive
side, which saturates at ``rho``, so that scale never grows. ``scale="absmax"`` (the default)
keeps this module's original rule.

``scheme="naive"`` is DQT itself; ``scheme="eco"`` runs ECO's momentum injection on the same
grids, and ``"master"``/``"eco_exact"``/``"kahan"`` are available for comparison.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..core.quantizer import Quantizer
from .adamw import AdamW
from .sgdm import SGDM

__all__ = ["dqt", "dqt_quantizers", "MaxScaleQuantizer"]

_BITS = {8: "int8", 4: "int4", 2: "int2", 1.58: "ternary", "ternary": "ternary"}


@dataclass(frozen=True)
class MaxScaleQuantizer(Quantizer):
    """A per-tensor quantizer whose :meth:`scales` are the DQT reference code's: the *signed*
    maximum over ``rho``, ``max(x) / rho``, falling back to the absmax scale for a tensor with
    no positive value. Rounding, formats and codes are :class:`~ecosim.Quantizer`'s.

    On a two's-complement grid ``[-(rho + 1), rho]`` a tensor written with this scale has
    ``max(x) <= rho * s``, so the next scale is at most ``s``: the grid never grows.

    Example:
        >>> import numpy as np
        >>> q = MaxScaleQuantizer("int2", "rtn", granularity="tensor", scale="absmax")
        >>> w = np.array([-1.0, 0.0, 0.5], np.float32)   # codes -2, 0, 1 at s = 0.5
        >>> float(q.scales(w)[0]), float(Quantizer("int2", scale="absmax").scales(w)[0])
        (0.5, 1.0)
    """

    def __post_init__(self):
        super().__post_init__()
        if self.granularity != "tensor" or self.scale != "absmax":
            raise ValueError("MaxScaleQuantizer is per tensor with an absmax fallback: "
                             f"expected granularity='tensor', scale='absmax', got "
                             f"{self.granularity!r}, {self.scale!r}")

    def scales(self, x: np.ndarray) -> np.ndarray:
        """``max(x) / rho`` (at least the smallest normal), shaped as the absmax scales; the
        absmax scale where ``max(x) <= 0``."""
        s = super().scales(x)
        top = np.max(np.asarray(x))
        if not top > 0:
            return s
        dt = s.dtype
        return np.full_like(s, max(dt.type(top) / dt.type(self.rho), np.finfo(dt).tiny))


def dqt_quantizers(bits: int | float | str = 8, *, mode: str = "sr",
                   scale: str = "absmax") -> tuple[Quantizer, Quantizer]:
    """DQT's (step, init) weight quantizers for ``bits`` in 8, 4, 2, 1.58 or ``"ternary"``.

    Args:
        bits: the weight grid.
        mode: rounding of the updates, ``"sr"`` or ``"rtn"``.
        scale: the scale each step takes from the previous weights: ``"absmax"``
            (``max|theta| / rho``) or ``"max"`` (the reference code's signed
            ``max(theta) / rho``, :class:`MaxScaleQuantizer`).

    Returns:
        ``(step_q, init_q)``: ``step_q`` rounds with ``mode`` (SR) on a per-tensor grid, and
        the optimizer hands it the previous weights' scale; ``init_q`` rounds to nearest
        with a per-tensor absmean (ternary) or absmax (n bits) scale.
    """
    try:
        fmt = _BITS[bits]
    except (KeyError, TypeError):
        raise ValueError(f"bits must be one of {list(_BITS)}, got {bits!r}") from None
    if scale not in ("absmax", "max"):
        raise ValueError(f"scale must be 'absmax' or 'max', got {scale!r}")
    init_scale = "absmean" if fmt == "ternary" else "absmax"
    cls = MaxScaleQuantizer if scale == "max" else Quantizer
    step_q = cls(fmt, mode, granularity="tensor", scale="absmax")
    init_q = Quantizer(fmt, "rtn", granularity="tensor", scale=init_scale)
    return step_q, init_q


def dqt(lr: float | Callable[[int], float], bits: int | float | str = 8, *,
        base: str = "adamw", scheme: str = "naive", names: Any = None, mode: str = "sr",
        scale: str = "absmax", **kwargs) -> SGDM | AdamW:
    """DQT as a named optimizer configuration: SR onto the previous step's n-bit grid.

    The update is that of ``base`` (:func:`~ecosim.optim.adamw` or :func:`~ecosim.optim.sgdm`)
    with ``scheme``; the weight write is
    ``theta_hat_t = q(theta_tilde, key=fold_in(key, t, name), scales=q.scales(theta_hat_{t-1}))``
    with ``q`` a per-tensor integer (or ternary) quantizer in ``mode`` (SR in DQT), and
    :meth:`init` rounds to nearest with an absmean (ternary) or absmax scale.

    Args:
        lr: learning rate or schedule.
        bits: 8, 4, 2, 1.58 or ``"ternary"``.
        base: ``"adamw"`` (DQT's choice) or ``"sgdm"``.
        scheme: ``"naive"`` (DQT), ``"eco"`` (ECO on DQT's grids), or any other scheme but
            ``"fp"``.
        names: the parameter names to quantize (e.g. ``mlp.quantized_names("matrices")``);
            None quantizes every parameter.
        mode: rounding of the updates, ``"sr"`` (DQT) or ``"rtn"``.
        scale: ``"absmax"`` (default) or ``"max"`` (the reference code's rule; see the module
            docstring: only it keeps an integer grid from growing).
        **kwargs: hyperparameters of the base optimizer (``b1``, ``b2``, ``eps``,
            ``weight_decay``, ``beta``, ``states`` ...).

    Example:
        >>> import numpy as np
        >>> opt = dqt(0.01, bits="ternary", base="sgdm", scheme="naive")
        >>> w, state = opt.init(np.array([0.3, -0.1, 0.02, 0.5]), key=0)
        >>> w                                   # absmean scale 0.23: codes 1, 0, 0, 1
        array([0.23, 0.  , 0.  , 0.23])
        >>> w, state = opt.step(w, np.array([1.0, 1.0, -1.0, 0.0]), state)
        >>> bool(np.isin(w, [-0.23, 0.0, 0.23]).all())    # the previous grid, kept
        True
    """
    step_q, init_q = dqt_quantizers(bits, mode=mode, scale=scale)
    if names is None:
        weights, init_weights = step_q, init_q
    else:
        names = tuple(names)
        weights = {n: step_q for n in names}
        init_weights = {n: init_q for n in names}
    if scheme == "fp":
        raise ValueError("DQT quantizes the weights: scheme 'fp' has no DQT version")
    common = dict(lr=lr, scheme=scheme, weights=weights, init_weights=init_weights,
                  prev_scale=True)
    if base == "adamw":
        return AdamW(**common, **kwargs)
    if base == "sgdm":
        return SGDM(**common, **kwargs)
    raise ValueError(f"base must be 'adamw' or 'sgdm', got {base!r}")
