"""A pure-NumPy multilayer perceptron with hand-written backpropagation.

Data come from a random *teacher* MLP (teacher-student regression or classification), from
caller-supplied arrays, or from scikit-learn's bundled 8x8 digits when scikit-learn happens
to be installed (it is not a dependency of ecosim).

Parameters are a dict ``{"W0": (n1, n0), "b0": (n1,), "W1": (n2, n1), ...}``. Weights are
stored ``(fan_out, fan_in)`` as in ``torch.nn.Linear``, so a row-wise quantization scale
is one scale per output unit, the granularity the ECO paper uses for FP8.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple, Sequence

import numpy as np

from .base import (
    STREAM_BUILD,
    STREAM_EPOCH,
    STREAM_INIT,
    Problem,
    check_batch_size,
    check_dtype,
    check_key,
    check_positive,
    keyed_rng,
    readonly,
)

__all__ = ["MLP", "DataBatch", "ParamInfo", "ACTIVATIONS", "LOSSES", "QUANT_POLICIES"]

ACTIVATIONS = ("relu", "gelu", "tanh")
LOSSES = ("mse", "xent")
#: ``quantized_names`` policies: every parameter, every weight matrix, or the weight
#: matrices of the hidden-to-hidden layers only (first and last layer kept in high
#: precision, the usual mixed-precision practice; the ECO paper quantizes only the
#: block-internal linear layers).
QUANT_POLICIES = ("all", "matrices", "hidden")

_GELU_C = math.sqrt(2.0 / math.pi)


class DataBatch(NamedTuple):
    """A mini-batch.

    Attributes:
      x: inputs, ``(B, d_in)`` in the problem's dtype.
      y: targets, ``(B, d_out)`` in the problem's dtype (mse) or int64 labels ``(B,)`` (xent).
    """

    x: np.ndarray
    y: np.ndarray


class ParamInfo(NamedTuple):
    """One parameter of an MLP: its name, shape, kind ("matrix" or "vector") and layer."""

    name: str
    shape: tuple[int, ...]
    kind: str
    layer: int


# ---------------------------------------------------------------------------------------------
# Numerics shared by the student and the teacher. ``layers`` is a list of (W, b).


def activate(z: np.ndarray, activation: str) -> np.ndarray:
    if activation == "relu":
        return np.maximum(z, 0)
    if activation == "tanh":
        return np.tanh(z)
    # gelu, tanh approximation: 0.5 z (1 + tanh(c (z + 0.044715 z^3))), c = sqrt(2/pi)
    return 0.5 * z * (1 + np.tanh(_GELU_C * (z + 0.044715 * z**3)))


def act_grad(z: np.ndarray, activation: str) -> np.ndarray:
    if activation == "relu":
        return (z > 0).astype(z.dtype)
    if activation == "tanh":
        t = np.tanh(z)
        return 1 - t * t
    t = np.tanh(_GELU_C * (z + 0.044715 * z**3))
    return 0.5 * (1 + t) + 0.5 * z * (1 - t * t) * _GELU_C * (1 + 3 * 0.044715 * z * z)


def _forward(layers, x, activation):
    """Returns the output and the pre-activations z_l and layer inputs h_l (for backprop)."""
    hs, zs = [], []
    h = x
    for i, (w, b) in enumerate(layers):
        hs.append(h)
        z = h @ w.T + b
        zs.append(z)
        h = activate(z, activation) if i < len(layers) - 1 else z
    return h, hs, zs


def loss_and_dout(out, y, loss):
    """Loss value and d loss / d out for a batch of B rows.

    mse:  l = (1/(2B)) sum_i ||out_i - y_i||^2,           dl/dout = (out - y) / B
    xent: l = (1/B) sum_i [logsumexp(out_i) - out_i[y_i]], dl/dout = (softmax(out) - onehot) / B
    """
    n = out.shape[0]
    if loss == "mse":
        r = out - y
        return 0.5 * np.sum(r * r) / n, r / n
    zmax = out.max(axis=1, keepdims=True)
    ez = np.exp(out - zmax)
    s = ez.sum(axis=1, keepdims=True)
    rows = np.arange(n)
    value = np.sum(np.log(s[:, 0]) + zmax[:, 0] - out[rows, y]) / n
    dout = ez / s
    dout[rows, y] -= 1
    return value, dout / n


def _backward(layers, hs, zs, dout, activation):
    grads = [None] * len(layers)
    dz = dout
    for i in range(len(layers) - 1, -1, -1):
        w = layers[i][0]
        grads[i] = (dz.T @ hs[i], dz.sum(axis=0))
        if i > 0:
            dz = (dz @ w) * act_grad(zs[i - 1], activation)
    return grads


def _check_choice(value: Any, name: str, choices: Sequence[str]) -> str:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value


def _check_sizes(sizes: Any, name: str, *, min_len: int) -> tuple[int, ...]:
    try:
        out = tuple(check_key(s, f"each entry of {name}") for s in sizes)
    except TypeError as err:
        if "entry" in str(err):
            raise
        raise TypeError(f"{name} must be a sequence of positive integers, got {sizes!r}") from None
    if len(out) < min_len or any(s < 1 for s in out):
        raise ValueError(
            f"{name} must be {min_len} or more positive integers, got {sizes!r}"
        )
    return out


class MLP(Problem):
    """A fully connected network ``sizes[0] -> sizes[1] -> ... -> sizes[-1]`` as a problem.

    Model: h_0 = x; z_l = h_l W_l^T + b_l; h_{l+1} = act(z_l) for hidden layers; the last
    layer is linear. Losses (means over the B rows of the batch):

    * ``"mse"``:  (1/(2B)) sum_i ||f(x_i) - y_i||^2 (regression onto ``sizes[-1]`` outputs);
    * ``"xent"``: (1/B) sum_i [logsumexp(f(x_i)) - f(x_i)[y_i]] over ``sizes[-1] >= 2``
      classes.

    Activations: ``"relu"`` (derivative 0 at 0), ``"tanh"``, ``"gelu"`` (tanh approximation
    0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3)))).

    Teacher-student data (built in float64 from ``key``, then rounded once to ``dtype``):
    inputs x ~ N(0, I); a teacher MLP with the same input/output sizes, hidden widths
    ``teacher`` (the student's when None), the same activation, weights N(0, 2/fan_in) in
    its hidden layers and N(0, 1/fan_in) in its output layer, and biases N(0, 0.1^2), gives
    t(x), after an affine rescaling of its output layer that makes every output of t have
    mean 0 and standard deviation 1 over the generated inputs (train and validation).
    Targets are ``t(x) + noise * N(0, I)`` (mse) or ``argmax(t(x) + noise * N(0, I))``
    (xent), so ``noise`` is a noise-to-signal ratio. When the teacher has the student's
    architecture, loss is mse and noise is 0, the teacher is a global minimiser: ``optimum``
    is its params and ``f_star`` is 0 (up to the rounding of the data to ``dtype``);
    otherwise both are ``None``.

    Batches (see :meth:`batch`) are drawn from the training set, epoch by epoch, without
    replacement; ``batch=None`` means the full training set, and :meth:`val_loss` is the loss
    on the held-out set.

    Args:
      sizes: layer widths ``(d_in, hidden..., d_out)``, two or more positive integers.
      activation: one of ``ACTIVATIONS``.
      loss: ``"mse"`` or ``"xent"``.
      n_train: training-set size (>= 1).
      n_val: validation-set size (>= 1).
      key: non-negative integer; builds the teacher and the data.
      teacher: hidden widths of the teacher (``()`` for a linear teacher); None copies the
        student's.
      dtype: floating type of params, data, losses and gradients (float32 by default, as for
        training runs; float64 for gradient checks and theory).
      noise: standard deviation (>= 0) of the label noise described above.

    Attributes:
      sizes, activation, dtype: as given; ``loss_kind``: the ``loss`` argument (``loss`` is
        the method).
      param_info: tuple of :class:`ParamInfo` in parameter order ``W0, b0, W1, b1, ...``.
      x_train, y_train, x_val, y_val: the read-only data.
      teacher_params: the teacher's params (dict, read-only arrays) or None.

    Example:
      >>> mlp = MLP((4, 8, 1), n_train=64, n_val=16, key=0)
      >>> params = mlp.init(1)
      >>> sorted(params), params["W0"].shape, params["W0"].dtype
      (['W0', 'W1', 'b0', 'b1'], (8, 4), dtype('float32'))
      >>> g = mlp.grad(params, mlp.batch(key=2, step=0, batch_size=16))
      >>> g["W1"].shape
      (1, 8)
      >>> mlp.quantized_names("matrices")
      ('W0', 'W1')
    """

    has_validation = True

    def __init__(
        self,
        sizes: Sequence[int],
        activation: str = "relu",
        loss: str = "mse",
        *,
        n_train: int = 1024,
        n_val: int = 256,
        key: int = 0,
        teacher: Sequence[int] | None = None,
        dtype: Any = np.float32,
        noise: float = 0.0,
    ) -> None:
        sizes = _check_sizes(sizes, "sizes", min_len=2)
        activation = _check_choice(activation, "activation", ACTIVATIONS)
        loss = _check_choice(loss, "loss", LOSSES)
        n_train = check_key(n_train, "n_train")
        n_val = check_key(n_val, "n_val")
        if n_train < 1 or n_val < 1:
            raise ValueError(f"n_train and n_val must be positive, got {n_train} and {n_val}")
        key = check_key(key)
        hidden = sizes[1:-1] if teacher is None else _check_sizes(teacher, "teacher", min_len=0)
        dtype = check_dtype(dtype)
        noise = check_positive(noise, "noise", allow_zero=True)
        if loss == "xent" and sizes[-1] < 2:
            raise ValueError(f"loss='xent' needs sizes[-1] >= 2 classes, got {sizes[-1]}")

        rng = keyed_rng(key, STREAM_BUILD)
        tsizes = (sizes[0], *hidden, sizes[-1])
        tlayers = []
        for i, (fan_in, fan_out) in enumerate(zip(tsizes[:-1], tsizes[1:])):
            gain = 1.0 if i == len(tsizes) - 2 else 2.0
            w = rng.standard_normal((fan_out, fan_in)) * math.sqrt(gain / fan_in)
            tlayers.append((w, 0.1 * rng.standard_normal(fan_out)))
        n = n_train + n_val
        x = rng.standard_normal((n, sizes[0]))
        t = _forward(tlayers, x, activation)[0]
        # Standardise the teacher's outputs over the generated inputs by an affine change of
        # its last layer (it stays an MLP): unit-scale regression targets, so ``noise`` is a
        # noise-to-signal ratio, and classes of comparable frequency for xent.
        mean, std = t.mean(axis=0), t.std(axis=0)
        std = np.where(std > 0, std, 1.0)
        w_last, b_last = tlayers[-1]
        tlayers[-1] = (w_last / std[:, None], (b_last - mean) / std)
        t = (t - mean) / std
        if noise > 0:
            t = t + noise * rng.standard_normal(t.shape)
        y = t.astype(dtype) if loss == "mse" else np.argmax(t, axis=1).astype(np.int64)
        x = x.astype(dtype)

        teacher_params = {}
        for i, (w, b) in enumerate(tlayers):
            teacher_params[f"W{i}"] = readonly(w.astype(dtype))
            teacher_params[f"b{i}"] = readonly(b.astype(dtype))
        exact = loss == "mse" and noise == 0 and tuple(hidden) == sizes[1:-1]
        config = dict(sizes=sizes, activation=activation, loss=loss, n_train=n_train,
                      n_val=n_val, key=key, teacher=tuple(hidden), dtype=dtype, noise=noise)
        self._setup(sizes, activation, loss, dtype, x[:n_train], y[:n_train], x[n_train:],
                    y[n_train:], teacher_params=teacher_params,
                    optimum=teacher_params if exact else None, f_star=0.0 if exact else None,
                    repr_=f"MLP({', '.join(f'{k}={v!r}' for k, v in config.items())})")

    # -- alternative constructors ------------------------------------------------------------

    @classmethod
    def from_data(
        cls,
        x_train: np.ndarray,
        y_train: np.ndarray,
        x_val: np.ndarray,
        y_val: np.ndarray,
        *,
        hidden: Sequence[int] = (),
        activation: str = "relu",
        loss: str = "xent",
        n_classes: int | None = None,
        dtype: Any = np.float32,
    ) -> "MLP":
        """An MLP problem on caller-supplied data (copied; the inputs are not modified).

        Args:
          x_train, x_val: inputs ``(n, d_in)``.
          y_train, y_val: integer labels ``(n,)`` for ``"xent"``; targets ``(n, d_out)`` or
            ``(n,)`` (one output) for ``"mse"``.
          hidden: hidden-layer widths.
          activation, loss, dtype: as in the constructor.
          n_classes: number of classes for ``"xent"``; default ``max label + 1``.

        Returns:
          The problem; ``optimum``, ``f_star`` and ``teacher_params`` are None.
        """
        activation = _check_choice(activation, "activation", ACTIVATIONS)
        loss = _check_choice(loss, "loss", LOSSES)
        dtype = check_dtype(dtype)
        hidden = _check_sizes(hidden, "hidden", min_len=0)
        xs = [np.array(x_train, dtype=dtype), np.array(x_val, dtype=dtype)]
        for name, xx in zip(("x_train", "x_val"), xs):
            if xx.ndim != 2 or xx.shape[0] < 1:
                raise ValueError(
                    f"{name} must be a non-empty 2-d array (n, d_in), got shape {xx.shape}")
        if xs[0].shape[1] != xs[1].shape[1]:
            raise ValueError(
                f"x_train and x_val have different widths: {xs[0].shape} vs {xs[1].shape}")
        ys = []
        for name, yy, xx in zip(("y_train", "y_val"), (y_train, y_val), xs):
            yy = np.asarray(yy)
            if yy.shape[:1] != xx.shape[:1]:
                raise ValueError(f"{name} has {yy.shape[:1]} rows, its inputs have {xx.shape[0]}")
            if loss == "xent":
                if yy.ndim != 1 or not np.issubdtype(yy.dtype, np.integer) or yy.min() < 0:
                    raise ValueError(f"{name} must be non-negative integer labels (n,) for xent")
                ys.append(yy.astype(np.int64))
            else:
                yy = yy.reshape(-1, 1) if yy.ndim == 1 else yy
                if yy.ndim != 2:
                    raise ValueError(
                        f"{name} must have shape (n,) or (n, d_out) for mse, got {yy.shape}")
                ys.append(yy.astype(dtype))
        if loss == "xent":
            top = int(max(ys[0].max(), ys[1].max())) + 1
            n_out = top if n_classes is None else check_key(n_classes, "n_classes")
            if n_out < max(2, top):
                raise ValueError(f"n_classes must be >= 2 and > every label, got {n_out}")
        else:
            n_out = ys[0].shape[1]
            if ys[1].shape[1] != n_out:
                raise ValueError(
                    f"y_train and y_val have different widths: {ys[0].shape} vs {ys[1].shape}")
        sizes = (xs[0].shape[1], *hidden, n_out)
        self = cls.__new__(cls)
        self._setup(sizes, activation, loss, dtype, xs[0], ys[0], xs[1], ys[1],
                    teacher_params=None, optimum=None, f_star=None,
                    repr_=(f"MLP.from_data(<{xs[0].shape[0]} train, {xs[1].shape[0]} val>, "
                           f"sizes={sizes!r}, activation={activation!r}, loss={loss!r}, "
                           f"dtype={dtype!r})"))
        return self

    @classmethod
    def digits(
        cls,
        hidden: Sequence[int] = (32,),
        activation: str = "relu",
        *,
        n_val: int = 360,
        key: int = 0,
        dtype: Any = np.float32,
    ) -> "MLP":
        """Classification of scikit-learn's bundled 8x8 digits (1797 images, 10 classes).

        Needs scikit-learn (optional; the data ship with it, nothing is downloaded). Pixels
        0..16 are mapped to x = pixel/8 - 1 in [-1, 1]; a permutation keyed by ``key``
        splits off ``n_val`` validation images. Loss is ``"xent"``.

        Raises:
          ImportError: scikit-learn is not installed.
        """
        try:
            from sklearn.datasets import load_digits
        except ImportError as err:  # pragma: no cover - depends on the environment
            raise ImportError(
                "MLP.digits needs scikit-learn (optional, not an ecosim dependency): "
                "pip install scikit-learn"
            ) from err
        n_val = check_key(n_val, "n_val")
        data = load_digits()
        x, y = data.data / 8.0 - 1.0, data.target.astype(np.int64)
        if not 1 <= n_val < len(y):
            raise ValueError(f"n_val must be in [1, {len(y) - 1}], got {n_val}")
        perm = keyed_rng(key, STREAM_BUILD).permutation(len(y))
        tr, va = perm[n_val:], perm[:n_val]
        self = cls.from_data(x[tr], y[tr], x[va], y[va], hidden=hidden, activation=activation,
                             loss="xent", n_classes=10, dtype=dtype)
        object.__setattr__(self, "_repr", (
            f"MLP.digits(hidden={tuple(hidden)!r}, activation={activation!r}, n_val={n_val}, "
            f"key={key}, dtype={self.dtype!r})"))
        return self

    def _setup(self, sizes, activation, loss, dtype, x_train, y_train, x_val, y_val, *,
               teacher_params, optimum, f_star, repr_) -> None:
        set_ = object.__setattr__
        set_(self, "sizes", tuple(sizes))
        set_(self, "activation", activation)
        set_(self, "loss_kind", loss)
        set_(self, "dtype", dtype)
        for name, arr in [("x_train", x_train), ("y_train", y_train), ("x_val", x_val),
                          ("y_val", y_val)]:
            set_(self, name, readonly(np.ascontiguousarray(arr)))
        set_(self, "teacher_params", teacher_params)
        set_(self, "optimum", optimum)
        set_(self, "f_star", f_star)
        info = []
        for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            info.append(ParamInfo(f"W{i}", (fan_out, fan_in), "matrix", i))
            info.append(ParamInfo(f"b{i}", (fan_out,), "vector", i))
        set_(self, "param_info", tuple(info))
        set_(self, "_sorted_names", sorted(p.name for p in info))
        set_(self, "_repr", repr_)
        # the shuffle of the last epoch drawn, as [((key, epoch), order)]: see _epoch_order
        set_(self, "_last_order", [None])

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"MLP is immutable: cannot assign to {name!r}")

    def __repr__(self) -> str:
        return self._repr

    # -- structure ----------------------------------------------------------------------------

    @property
    def n_layers(self) -> int:
        """Number of linear layers, ``len(sizes) - 1``."""
        return len(self.sizes) - 1

    @property
    def n_train(self) -> int:
        return self.x_train.shape[0]

    @property
    def n_val(self) -> int:
        return self.x_val.shape[0]

    @property
    def num_params(self) -> int:
        """Total number of scalar parameters."""
        return sum(math.prod(p.shape) for p in self.param_info)

    def quantized_names(self, policy: str = "hidden") -> tuple[str, ...]:
        """Names of the parameters a quantization policy stores in low precision.

        Args:
          policy: ``"all"`` (every parameter), ``"matrices"`` (every weight matrix, biases
            kept in high precision) or ``"hidden"`` (weight matrices of layers 1..n-2: the
            first and last layer stay in high precision; empty with fewer than 3 layers).
        """
        _check_choice(policy, "policy", QUANT_POLICIES)
        if policy == "all":
            return tuple(p.name for p in self.param_info)
        lo, hi = (0, self.n_layers) if policy == "matrices" else (1, self.n_layers - 1)
        return tuple(p.name for p in self.param_info if p.kind == "matrix" and lo <= p.layer < hi)

    # -- the problem protocol -------------------------------------------------------------------

    def init(self, key: int) -> dict[str, np.ndarray]:
        """Fresh params: W_l ~ N(0, 2/fan_in) (He) for relu/gelu, N(0, 2/(fan_in + fan_out))
        (Glorot) for tanh, drawn in float64 from ``key`` and rounded to ``dtype``; biases 0."""
        rng = keyed_rng(key, STREAM_INIT)
        params = {}
        for p in self.param_info:
            if p.kind == "vector":
                params[p.name] = np.zeros(p.shape, dtype=self.dtype)
                continue
            fan_out, fan_in = p.shape
            var = 2.0 / (fan_in + fan_out) if self.activation == "tanh" else 2.0 / fan_in
            params[p.name] = (math.sqrt(var) * rng.standard_normal(p.shape)).astype(self.dtype)
        return params

    def _layers(self, params: Any) -> list[tuple[np.ndarray, np.ndarray]]:
        if not isinstance(params, dict):
            raise TypeError(
                f"MLP params must be a dict of named arrays, got {type(params).__name__}")
        if sorted(params) != self._sorted_names:
            expected = [p.name for p in self.param_info]
            raise ValueError(
                f"MLP params must have exactly the keys {expected}, got {sorted(params)}")
        arrays = {}
        for p in self.param_info:
            a = np.asarray(params[p.name])
            if a.shape != p.shape:
                raise ValueError(f"params[{p.name!r}] must have shape {p.shape}, got {a.shape}")
            if a.dtype != self.dtype:  # the training loop's arrays skip the dtype checks
                if not (np.issubdtype(a.dtype, np.floating)
                        or np.issubdtype(a.dtype, np.integer)):
                    raise TypeError(
                        f"params[{p.name!r}] must be a real array, got dtype {a.dtype}")
                a = a.astype(self.dtype)
            arrays[p.name] = a
        return [(arrays[f"W{i}"], arrays[f"b{i}"]) for i in range(self.n_layers)]

    def _data(self, batch: Any) -> tuple[np.ndarray, np.ndarray]:
        if batch is None:
            return self.x_train, self.y_train
        if not isinstance(batch, DataBatch):
            raise TypeError("batch must be None (full training set) or a DataBatch, "
                            f"got {type(batch).__name__}")
        y = np.asarray(batch.y)
        if self.loss_kind == "xent":
            if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
                raise TypeError(
                    f"xent targets must be integer labels of shape (B,), got {y.dtype} {y.shape}")
        else:
            y = y.astype(self.dtype, copy=False)
        return batch.x, y

    def predict(self, params: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
        """Network outputs (regression values or logits), ``(n, sizes[-1])`` in ``dtype``."""
        x = np.asarray(x)
        if x.ndim != 2 or x.shape[1] != self.sizes[0]:
            raise ValueError(f"x must have shape (n, {self.sizes[0]}), got {x.shape}")
        return _forward(self._layers(params), x.astype(self.dtype, copy=False), self.activation)[0]

    def loss(self, params: dict[str, np.ndarray], batch: DataBatch | None = None) -> float:
        """Mean loss over ``batch`` (the full training set when None)."""
        x, y = self._data(batch)
        out = self.predict(params, x)
        return float(loss_and_dout(out, y, self.loss_kind)[0])

    def loss_and_grad(self, params: dict[str, np.ndarray], batch: DataBatch | None = None):
        """``(loss, grad)`` from one forward and one backward pass."""
        layers = self._layers(params)
        x, y = self._data(batch)
        out, hs, zs = _forward(layers, x, self.activation)
        value, dout = loss_and_dout(out, y, self.loss_kind)
        grads = {}
        for i, (gw, gb) in enumerate(_backward(layers, hs, zs, dout, self.activation)):
            grads[f"W{i}"], grads[f"b{i}"] = gw, gb
        return float(value), grads

    def grad(
        self, params: dict[str, np.ndarray], batch: DataBatch | None = None
    ) -> dict[str, np.ndarray]:
        """Gradient dict with the keys, shapes and dtype of ``params``."""
        return self.loss_and_grad(params, batch)[1]

    def val_loss(self, params: dict[str, np.ndarray]) -> float:
        """Mean loss on the validation set."""
        return self.loss(params, DataBatch(self.x_val, self.y_val))

    def accuracy(self, params: dict[str, np.ndarray], split: str = "val") -> float:
        """Fraction of argmax predictions equal to the label (``"xent"`` only)."""
        if self.loss_kind != "xent":
            raise ValueError("accuracy is defined for loss='xent' only")
        _check_choice(split, "split", ("train", "val"))
        x, y = (self.x_val, self.y_val) if split == "val" else (self.x_train, self.y_train)
        return float(np.mean(np.argmax(self.predict(params, x), axis=1) == y))

    def batch(self, key: int, step: int, batch_size: int | None = None) -> DataBatch | None:
        """The mini-batch of step ``step``: a pure function of ``(key, step, batch_size)``.

        Epochs of ``E = n_train // batch_size`` steps; epoch ``k = step // E`` shuffles the
        training set with a permutation keyed by ``(key, k)`` and step ``step`` takes its
        slice ``[(step % E) * batch_size, (step % E + 1) * batch_size)`` (the last
        ``n_train % batch_size`` examples of each shuffle are skipped). Every example is seen
        at most once per epoch.

        Args:
          key: non-negative integer key of the data order.
          step: non-negative step index.
          batch_size: 1..n_train, or None for the full training set (returns None).

        Returns:
          A :class:`DataBatch` of read-only copies, or None (full batch).
        """
        key, step = check_key(key), check_key(step, "step")
        batch_size = check_batch_size(batch_size)
        if batch_size is None:
            return None
        if batch_size > self.n_train:
            raise ValueError(f"batch_size must be at most n_train={self.n_train}, got {batch_size}")
        per_epoch = self.n_train // batch_size
        epoch, pos = divmod(step, per_epoch)
        idx = self._epoch_order(key, epoch)[pos * batch_size:(pos + 1) * batch_size]
        return DataBatch(readonly(self.x_train[idx]), readonly(self.y_train[idx]))

    def _epoch_order(self, key: int, epoch: int) -> np.ndarray:
        """The shuffle of the training set in epoch ``epoch`` under ``key`` (read-only).

        The last one drawn is kept: a run asks for the same epoch ``n_train // batch_size``
        times in a row, and drawing it costs more than the rest of a small step's batch.
        """
        last = self._last_order[0]
        if last is not None and last[0] == (key, epoch):
            return last[1]
        order = readonly(keyed_rng(key, STREAM_EPOCH, epoch).permutation(self.n_train))
        self._last_order[0] = ((key, epoch), order)
        return order
