"""DQT for torch: AdamW that writes every update onto the previous step's n-bit or ternary grid.

Mirror of :func:`ecosim.optim.dqt` (Zhao et al., "Direct Quantized Training of Language
Models with Stochastic Rounding", arXiv 2412.04787; docs/theory.md, DQT section). No master
copy: each quantized tensor lives on a symmetric integer grid (INT8, INT4, INT2) or the
ternary one, with one scale per tensor, and

* the initial write rounds the full-precision weights to nearest with BitNet b1.58's absmean
  scale (ternary) or an absmax scale (n bits): ``w_0 = q_init(W_0)``, no random bits;
* step ``t`` computes ``theta_tilde`` as :class:`~ecosim.torch.ECOAdamW` does (scheme
  ``"naive"``: DQT; ``"eco"``: ECO's injection on the same grids) and stores
  ``q(theta_tilde, key=fold_in(key, t, name), scales=s_t)`` with stochastic rounding, where
  ``s_t`` is the scale of the previous stored weights: ``max|w_{t-1}| / rho``
  (``scale="absmax"``) or the DQT reference code's signed ``max(w_{t-1}) / rho``
  (``scale="max"``: an integer grid then never grows; the absmax scale of ``w_{t-1}`` where
  it has no positive value).

The float operations, their order and the SR keys are the NumPy optimizer's, so on the CPU in
float32 the stored weights and moments equal ``ecosim.optim.dqt(..., base="adamw")`` bit for
bit (tests/test_torch_dqt.py). Weights may be plain float32 parameters or codes held by
:class:`~ecosim.torch.nn.QuantizedLinear` layers whose quantizer is DQT's step quantizer
(``dqt_quantizers(bits)[0]``): their codes are written with the given scale
(:meth:`~ecosim.torch.nn.QuantizedLinear.store`), INT8 as one byte per weight and ternary as
four codes per byte.

Supported: schemes ``"naive"`` and ``"eco"``, unsharded parameters (a per-tensor scale would
need a reduction across processes: DTensor parameters are refused by
:class:`~ecosim.torch.ECOAdamW`'s check of tensor-wise scales).
"""

from __future__ import annotations

import torch

from ..optim import dqt_quantizers as _np_dqt_quantizers
from .nn import stored
from .numerics import div
from .optim import ECOAdamW
from .quantizer import Quantizer

__all__ = ["DQTAdamW", "dqt_quantizers"]

_SCALES = ("absmax", "max")
_FORMATS = {"int8": 8, "int4": 4, "int2": 2}  # format names taken for ``bits`` too


def dqt_quantizers(bits=8, *, mode: str = "sr") -> tuple[Quantizer, Quantizer]:
    """DQT's ``(step, init)`` weight quantizers as :class:`ecosim.torch.Quantizer`, for
    ``bits`` in 8, 4, 2, 1.58, ``"ternary"`` or a format name (``"int8"``, ``"int4"``,
    ``"int2"``): the same
    fields as :func:`ecosim.optim.dqt_quantizers` (per tensor; the step quantizer rounds with
    ``mode`` and an absmax scale that the optimizer replaces by the previous weights' one, the
    initial one to nearest with an absmean (ternary) or absmax (n bits) scale).

    Example:
        >>> step_q, init_q = dqt_quantizers("ternary")
        >>> step_q.fmt.name, step_q.mode, init_q.scale
        ('ternary', 'sr', 'absmean')
    """
    out = []
    bits = _FORMATS.get(bits, bits) if isinstance(bits, str) else bits
    for q in _np_dqt_quantizers(bits, mode=mode):
        out.append(Quantizer(q.fmt, q.mode, granularity=q.granularity, scale=q.scale))
    return out[0], out[1]


def previous_scales(q: Quantizer, prev: torch.Tensor, scale: str = "absmax", *,
                    like: tuple | None = None) -> torch.Tensor:
    """The scale DQT's next write uses: ``q.scales(prev)`` (``"absmax"``) or, for ``"max"``,
    ``max(prev) / rho`` (at least the smallest normal; the absmax scale when ``prev`` has no
    positive value), as :class:`ecosim.optim.dqt.MaxScaleQuantizer` computes it.
    ``like``: the ``(shape, dtype)`` of ``q.scales(prev)`` when known (from a tensor of
    ``prev``'s shape and dtype): ``"max"`` then computes them only when it needs them."""
    if scale not in _SCALES:
        raise ValueError(f"scale must be 'absmax' or 'max', got {scale!r}")
    if scale == "absmax":
        return q.scales(prev)
    s = q.scales(prev) if like is None else None
    shape, dtype = (s.shape, s.dtype) if like is None else like
    top = prev.max()
    if not bool(top > 0):
        return q.scales(prev) if s is None else s
    tiny = torch.finfo(dtype).tiny
    return torch.clamp_min(div(top.to(dtype), q.rho), tiny).expand(shape).clone()


class DQTAdamW(ECOAdamW):
    """AdamW with DQT's weight writes (mirror of ``ecosim.optim.dqt(lr, bits, base="adamw")``).

    The update is :class:`~ecosim.torch.ECOAdamW`'s (``scheme="naive"``; ``"eco"`` adds ECO's
    momentum injection); only the writes differ, see the module docstring::

        w_0 = q_init(W_0)                                   (RTN, absmean or absmax scale)
        w_t = q(theta_tilde, key=fold_in(key, t, name), scales=s(w_{t-1}))      (SR)

    Args:
        params: tensors, ``named_parameters()`` pairs or param groups, as
            :class:`~ecosim.torch.ECOAdamW`: plain float32 tensors, or stored layers
            holding ``dqt_quantizers(bits, mode=mode)[0]`` (any layer type
            :func:`~ecosim.torch.quantize_model` stores: linear, convolutions, ``Conv1D``,
            attention; the grid is one scale per weight tensor).
        lr: learning rate.
        bits: 8, 4, 2, 1.58, ``"ternary"`` or a format name (``"int8"`` ...).
        betas, eps, weight_decay, key, states, diagnostics, compile: as
            :class:`~ecosim.torch.ECOAdamW`.
        scheme: ``"naive"`` (DQT) or ``"eco"``.
        mode: rounding of the updates, ``"sr"`` (DQT) or ``"rtn"``.
        scale: ``"absmax"`` or ``"max"`` (see :func:`previous_scales`).
        quantize_plain: whether plain (not stored) parameters are put on DQT's grid too.
            None (default): only when no stored weight is given, so
            ``DQTAdamW(report.param_groups(), lr)`` keeps the norms, biases and embeddings
            of :func:`~ecosim.torch.quantize_model`'s second group in their own precision
            (AdamW), as :class:`~ecosim.torch.ECOAdamW` does, while ``DQTAdamW([p], lr)``
            quantizes ``p``. True or False decides it for every plain parameter.

    Example:
        >>> import torch
        >>> p = torch.nn.Parameter(torch.tensor([[0.3, -0.1, 0.02, 0.5]]))
        >>> opt = DQTAdamW([p], 0.01, bits="ternary")
        >>> p.detach()                          # absmean scale 0.23: codes 1, 0, 0, 1
        tensor([[0.2300, 0.0000, 0.0000, 0.2300]])
        >>> p.grad = torch.tensor([[1.0, 1.0, -1.0, 0.0]])
        >>> opt.step()
        >>> bool(torch.isin(p.detach(), torch.tensor([-0.23, 0.0, 0.23])).all())
        True
    """

    def __init__(self, params, lr, bits=8, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, *,
                 scheme="naive", mode="sr", scale="absmax", key=0, states=None,
                 diagnostics=False, compile=False, quantize_plain=None):
        if scheme not in ("naive", "eco"):
            raise ValueError(f"DQTAdamW's scheme must be 'naive' or 'eco', got {scheme!r}")
        if scale not in _SCALES:
            raise ValueError(f"scale must be 'absmax' or 'max', got {scale!r}")
        self.step_quantizer, self.init_quantizer = dqt_quantizers(bits, mode=mode)
        self.scale_rule = scale
        self._stepping = False
        self._read: dict = {}  # stored layer -> its weights read this step (w_{t-1})
        self._like: dict = {}  # parameter name -> (shape, dtype) of its scales
        self._initial: dict = {}  # stored layer -> W_0, taken before the base optimizer drops it
        if quantize_plain is not None and not isinstance(quantize_plain, bool):
            raise TypeError(f"quantize_plain must be None, True or False, got "
                            f"{quantize_plain!r}")
        params = _listed(params)
        if quantize_plain is None:  # plain parameters beside stored ones: the model's rest
            quantize_plain = not any(stored(t) is not None for t in _tensors(params))
        self.quantize_plain = quantize_plain
        super().__init__(params, lr, betas, eps, weight_decay, scheme=scheme,
                         weights=self.step_quantizer, key=key, states=states,
                         diagnostics=diagnostics, compile=compile)

    def add_param_group(self, param_group):
        """As :meth:`ECOAdamW.add_param_group`, the initial write being DQT's ``q_init``."""
        ps = param_group["params"]
        ps = [ps] if isinstance(ps, torch.Tensor) else list(ps)
        for p in ps:
            layer = stored(p[1] if isinstance(p, tuple) else p)
            if layer is not None:
                self._initial[layer] = layer.pop_initial()
        super().add_param_group({**param_group, "params": ps})

    def _quantizer_for(self, name, layer):
        if layer is None and not self.quantize_plain:
            return None  # kept in its own precision, updated by AdamW ("fp")
        return super()._quantizer_for(name, layer)

    @torch.no_grad()
    def step(self, closure=None):
        """One DQT update of every parameter (see the class docstring)."""
        self._stepping = True
        try:
            return super().step(closure)
        finally:
            self._stepping = False
            self._read.clear()

    def _weights_of(self, meta, p):
        """The stored weights, remembered for this step's write of a stored layer: they are
        ``w_{t-1}``, whose scale the write uses (one decode of the codes instead of two)."""
        w = super()._weights_of(meta, p)
        if self._stepping and meta.layer is not None:
            self._read[meta.layer] = w
        return w

    def _write(self, meta, p, x, key):
        """Store DQT's write of ``x`` and return the stored values: ``q_init(x)`` at
        construction (a stored layer: of its ``W_0``; one without, its codes loaded from a
        checkpoint, keeps them), then SR onto the previous grid."""
        layer = stored(p)
        # a stored layer's codes hold its (out, fan-in) matrix (a kernel flattened, a Conv1D
        # transposed): the grid is computed and written in that layout
        as_codes = layer._to_matrix if layer is not None else (lambda y: y)
        if not self._stepping:  # the initial write, to nearest
            q, k = self.init_quantizer, None
            if layer is not None:
                w0 = self._initial.pop(layer, None)
                if w0 is None:  # loaded or written codes (a resume): already on their grid
                    return layer.read()
                x = w0
            x = as_codes(x)
            s = q.scales(x)
        else:
            q, k = self.step_quantizer, key
            prev = p.detach() if layer is None else self._read.pop(layer, None)
            if prev is None:
                prev = layer.read()
            x, prev = as_codes(x), as_codes(prev)
            s = previous_scales(q, prev, self.scale_rule, like=self._like.get(meta.name))
            self._like[meta.name] = (s.shape, s.dtype)
        if layer is not None:
            layer.store(q.encode(x, key=k, scales=s))
            return layer.read()
        values = q(x, key=k, scales=s)
        p.detach().copy_(values)
        self.state[p]["w_scales"] = s  # the scales of the stored values (ECOAdamW.encoded)
        return values


def _listed(params):
    """``params`` as a list, each group's ``"params"`` a list (they are read twice)."""
    if isinstance(params, torch.Tensor):
        return [params]
    out = []
    for g in params:
        if isinstance(g, dict):
            ps = g["params"]
            g = {**g, "params": [ps] if isinstance(ps, torch.Tensor) else list(ps)}
        out.append(g)
    return out


def _tensors(params):
    """The tensors of ``_listed`` params (groups, tensors or ``(name, tensor)`` pairs)."""
    for g in params:
        for x in (g["params"] if isinstance(g, dict) else [g]):
            yield x[1] if isinstance(x, tuple) else x
