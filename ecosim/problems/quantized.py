"""An MLP whose forward pass runs on quantized weights and activations (BitNet-style QAT).

:class:`QuantizedForward` wraps an :class:`~ecosim.problems.MLP`: each linear layer computes
``z = Qa(h) Qw(W)^T + b`` with a weight quantizer ``Qw`` (BitNet b1.58: ternary with one absmean
scale per tensor) and an activation quantizer ``Qa`` applied to the layer's input (BitNet b1.58:
8-bit absmax, one scale per row, i.e. per token/example). The backward pass is the
straight-through estimator (STE): both quantizers are treated as the identity, so

* ``dL/dW = dz^T Qa(h)`` (the gradient with respect to ``Qw(W)``, handed to ``W``),
* ``dL/db = sum_rows dz``,
* ``dL/dh = dz Qw(W)`` (then through the previous layer's activation derivative, taken at its
  unquantized pre-activation).

The optimizer then updates the full-precision weights (the master copy of quantization-aware
training), which is what DQT (:func:`ecosim.optim.dqt`) removes.

``train=False`` leaves the training forward and gradient those of the plain MLP and quantizes
only the validation loss: the deployed model is the trained weights re-quantized (e.g. an
8-bit DQT model run with ternary weights). Everything else (data, batches, initialisation,
parameter names) is the wrapped MLP's.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..core.quantizer import Quantizer
from .base import Problem
from .mlp import MLP, DataBatch, activate, act_grad, loss_and_dout

__all__ = ["QuantizedForward", "bitnet_quantizers"]


def bitnet_quantizers(act_bits: int = 8) -> tuple[Quantizer, Quantizer]:
    """BitNet b1.58's ``(weight, activation)`` quantizers.

    Weights: ternary ``{-1, 0, 1} * gamma`` with ``gamma = mean|W|`` (one absmean scale per
    tensor), round to nearest. Activations: ``int{act_bits}`` with one absmax scale per row,
    ``max|h_row| / (2**(act_bits - 1) - 1)``, round to nearest (BitNet's per-token absmax).

    Args:
        act_bits: 4 or 8.

    Returns:
        ``(weight_q, act_q)``.
    """
    if act_bits not in (4, 8):
        raise ValueError(f"act_bits must be 4 or 8, got {act_bits!r}")
    return (Quantizer("ternary", "rtn", granularity="tensor", scale="absmean"),
            Quantizer(f"int{act_bits}", "rtn", granularity="row", scale="absmax"))


class QuantizedForward(Problem):
    """An MLP trained (or evaluated) through quantized weights and activations, STE backward.

    Args:
        mlp: the wrapped :class:`~ecosim.problems.MLP` (data, architecture, initialisation).
        weights: quantizer of every weight matrix in the forward (None: full precision).
        activations: quantizer of every layer's input (None: full precision).
        train: True quantizes the training forward (gradients by STE) and the validation
            loss; False quantizes only the validation loss.

    Attributes:
        mlp, weights, activations, train: as given. ``optimum`` and ``f_star`` are None (the
        quantized network has no known minimiser).

    Example:
        >>> from ecosim.problems import MLP
        >>> wq, aq = bitnet_quantizers()
        >>> p = QuantizedForward(MLP((4, 8, 1), n_train=32, n_val=8, key=0), wq, aq)
        >>> params = p.init(1)
        >>> loss, g = p.loss_and_grad(params, p.batch(key=0, step=0, batch_size=8))
        >>> sorted(g) == sorted(params), g["W0"].shape
        (True, (8, 4))
    """

    has_validation = True
    optimum = None
    f_star = None

    def __init__(self, mlp: MLP, weights: Quantizer | None = None,
                 activations: Quantizer | None = None, *, train: bool = True) -> None:
        if not isinstance(mlp, MLP):
            raise TypeError(f"mlp must be an ecosim.problems.MLP, got {type(mlp).__name__}")
        for name, q in (("weights", weights), ("activations", activations)):
            if q is not None and not isinstance(q, Quantizer):
                raise TypeError(f"{name} must be a Quantizer or None, got {type(q).__name__}")
            if q is not None and q.rounding.stochastic:
                raise ValueError(f"{name} must round deterministically (not mode 'sr'): the "
                                 f"forward is deterministic; got mode {q.mode!r}")
        if not isinstance(train, (bool, np.bool_)):
            raise TypeError(f"train must be a bool, got {train!r}")
        self.mlp, self.weights, self.activations = mlp, weights, activations
        self.train = bool(train)
        self.dtype = mlp.dtype

    def __repr__(self) -> str:
        return (f"QuantizedForward({self.mlp!r}, weights={self.weights!r}, "
                f"activations={self.activations!r}, train={self.train})")

    # -- delegated to the MLP -------------------------------------------------------------------

    def init(self, key: int) -> dict[str, np.ndarray]:
        """The wrapped MLP's initial weights (full precision: the forward quantizes them)."""
        return self.mlp.init(key)

    def batch(self, key: int, step: int, batch_size: int | None = None) -> DataBatch | None:
        """The wrapped MLP's mini-batch of step ``step``."""
        return self.mlp.batch(key, step, batch_size)

    def quantized_names(self, policy: str = "hidden") -> tuple[str, ...]:
        """The wrapped MLP's :meth:`~ecosim.problems.MLP.quantized_names`."""
        return self.mlp.quantized_names(policy)

    # -- the quantized forward and its STE backward ---------------------------------------------

    def quantized_layers(self, params: dict) -> list[tuple[np.ndarray, np.ndarray]]:
        """``[(Qw(W_l), b_l), ...]``: the weights the forward multiplies with."""
        layers = self.mlp._layers(params)
        if self.weights is None:
            return layers
        return [(self.weights(w), b) for w, b in layers]

    def _forward(self, params: dict, x: np.ndarray):
        """Output, quantized layer inputs ``a_l = Qa(h_l)``, pre-activations ``z_l``, layers."""
        layers = self.quantized_layers(params)
        act = self.mlp.activation
        aas, zs = [], []
        h = x
        for i, (w, b) in enumerate(layers):
            a = h if self.activations is None else self.activations(h)
            aas.append(a)
            z = a @ w.T + b
            zs.append(z)
            h = activate(z, act) if i < len(layers) - 1 else z
        return h, aas, zs, layers

    def predict(self, params: dict, x: np.ndarray) -> np.ndarray:
        """Outputs of the quantized network, ``(n, sizes[-1])``."""
        x = np.asarray(x)
        if x.ndim != 2 or x.shape[1] != self.mlp.sizes[0]:
            raise ValueError(f"x must have shape (n, {self.mlp.sizes[0]}), got {x.shape}")
        return self._forward(params, x.astype(self.dtype, copy=False))[0]

    def _loss_q(self, params: dict, x: np.ndarray, y: np.ndarray) -> float:
        out = self.predict(params, x)
        return float(loss_and_dout(out, y, self.mlp.loss_kind)[0])

    def loss(self, params: dict, batch: DataBatch | None = None) -> float:
        """Mean training loss over ``batch`` (the full training set when None): of the
        quantized network when ``train``, else of the plain MLP."""
        if not self.train:
            return self.mlp.loss(params, batch)
        x, y = self.mlp._data(batch)
        return self._loss_q(params, x, y)

    def loss_and_grad(self, params: dict, batch: DataBatch | None = None):
        """``(loss, grad)``; with ``train`` the quantized forward and the STE backward."""
        if not self.train:
            return self.mlp.loss_and_grad(params, batch)
        x, y = self.mlp._data(batch)
        out, aas, zs, layers = self._forward(params, x)
        value, dz = loss_and_dout(out, y, self.mlp.loss_kind)
        grads = {}
        for i in range(len(layers) - 1, -1, -1):
            grads[f"W{i}"] = dz.T @ aas[i]
            grads[f"b{i}"] = dz.sum(axis=0)
            if i > 0:
                dz = (dz @ layers[i][0]) * act_grad(zs[i - 1], self.mlp.activation)
        return float(value), {p.name: grads[p.name] for p in self.mlp.param_info}

    def grad(self, params: dict, batch: DataBatch | None = None) -> dict[str, np.ndarray]:
        """The gradient of :meth:`loss_and_grad`."""
        return self.loss_and_grad(params, batch)[1]

    def val_loss(self, params: Any) -> float:
        """Validation loss of the quantized network (the deployed model)."""
        return self._loss_q(params, self.mlp.x_val, self.mlp.y_val)
