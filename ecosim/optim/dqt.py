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
step). Values beyond the grid saturate, so the scale never grows. The DQT reference code takes
the signed ``max`` of the previous weights; the symmetric absmax is used here.

``scheme="naive"`` is DQT itself; ``scheme="eco"`` runs ECO's momentum injection on the same
grids, and ``"master"``/``"eco_exact"``/``"kahan"`` are available for comparison.
"""

from __future__ import annotations

from typing import Any, Callable

from ..quantizer import Quantizer
from .adamw import AdamW
from .sgdm import SGDM

__all__ = ["dqt", "dqt_quantizers"]

_BITS = {8: "int8", 4: "int4", 2: "int2", 1.58: "ternary", "ternary": "ternary"}


def dqt_quantizers(bits: int | float | str = 8, *, mode: str = "sr") -> tuple[Quantizer,
                                                                                Quantizer]:
    """DQT's (step, init) weight quantizers for ``bits`` in 8, 4, 2, 1.58 or ``"ternary"``.

    Returns:
        ``(step_q, init_q)``: ``step_q`` rounds with ``mode`` (SR) on a per-tensor absmax grid,
        and the optimizer hands it the previous weights' scale; ``init_q`` rounds to nearest
        with a per-tensor absmean (ternary) or absmax (n bits) scale.
    """
    try:
        fmt = _BITS[bits]
    except (KeyError, TypeError):
        raise ValueError(f"bits must be one of {list(_BITS)}, got {bits!r}") from None
    init_scale = "absmean" if fmt == "ternary" else "absmax"
    step_q = Quantizer(fmt, mode, granularity="tensor", scale="absmax")
    init_q = Quantizer(fmt, "rtn", granularity="tensor", scale=init_scale)
    return step_q, init_q


def dqt(lr: float | Callable[[int], float], bits: int | float | str = 8, *,
        base: str = "adamw", scheme: str = "naive", names: Any = None, mode: str = "sr",
        **kwargs) -> SGDM | AdamW:
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
    step_q, init_q = dqt_quantizers(bits, mode=mode)
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
