"""Static memory of quantized training: bytes per parameter by formula, and measured.

Convention (docs/theory.md §6, the ECO paper's accounting). *Static* memory is what persists
between optimizer steps, per parameter:

* the weights of record: the full-precision master copy for scheme ``"master"`` (the model's
  low-precision copy ``q(theta)`` is recomputed from it every step and is **not** counted, as
  in the paper's "master FP32 weights 4 + m 4 + v 4 = 12"; pass ``count_working_copy=True`` to
  add it); the stored low-precision weights (codes plus scales) for ``"naive"``, ``"eco"``,
  ``"eco_exact"`` and ``"kahan"``; the full-precision weights for ``"fp"`` and for parameters a
  policy leaves unquantized;
* the optimizer states ``m`` (and ``v`` for AdamW; for Muon ``v`` only of the parameters it
  updates with AdamW), in their storage formats;
* the scheme's extra buffers: ``e_prev`` (``"eco_exact"``, ``"eco_momentum_exact"``, full
  precision) and the Kahan compensation ``c`` (weight format, its own scales).

The master copy is counted in its own format when ``states["master"]`` gives one (e.g. 2
bytes for a bfloat16 master). Gradients (``states["g"]``) and activations are transient and
not counted. Scales add
``(bytes per scale) / (block size)``: 4/ncols per parameter for row-wise FP8 with float32
scales. So AdamW with float32 states costs 12 bytes/param with FP32 master weights and
``1 + 4 + 4 = 9`` (plus scales) with FP8 ECO, 25% less; with bfloat16 moments ECO needs 5.

:func:`bytes_per_param` is the formula, :func:`static_bytes` the same formula for given shapes
(exact integers, including packing and scales), :func:`measured_bytes` the real ``nbytes`` of the
arrays a state holds (low-precision buffers encoded with :meth:`~ecosim.Quantizer.encode`), and
:func:`model_memory` the total for a model description (dense or mixture-of-experts).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from .core.checks import check_bool
from .core.formats import Format, get
from .optim import catalog as optimizer_catalog
from .optim.base import QuantizedOptimizer, compensation_quantizer, state_quantizer
from .optim.schemes import names_for
from .optim.schemes import BUFFER_STORAGE
from .optim.schemes import get as get_scheme
from .core.quantizer import Quantizer

__all__ = [
    "Memory",
    "ModelSpec",
    "ModelMemory",
    "bytes_per_param",
    "static_bytes",
    "measured_bytes",
    "model_memory",
    "code_bytes",
    "n_scales",
]

_BUFFERS = ("weights", "master", "m", "v", "e_prev", "c")


class Memory(NamedTuple):
    """Bytes held per buffer (per parameter, or in total, as the producing function says).

    Attributes:
        weights: stored weights the model uses (codes + scales; 0 for the master scheme's
            working copy unless counted).
        master: full-precision master weights.
        m, v: optimizer moments (codes + scales when low precision).
        e_prev: the stored error of exact ECO.
        c: the Kahan compensation (codes + scales).
    """

    weights: float = 0
    master: float = 0
    m: float = 0
    v: float = 0
    e_prev: float = 0
    c: float = 0

    @property
    def total(self) -> float:
        return sum(self)

    def __truediv__(self, n: float) -> "Memory":
        return Memory(*(x / n for x in self))


# -- formats and blocks -----------------------------------------------------------------------

def _packed_bits(fmt: Format) -> int:
    return 0 if fmt.bits > 4 else (4 if fmt.bits > 2 else 2)


def code_bytes(fmt: Format | str, n: int | None = None) -> float:
    """Bytes of ``n`` codes of ``fmt`` as :meth:`Quantizer.encode` stores them.

    Formats of 5 bits or more take one element of their storage dtype each (FP8, FP6 and int8:
    1 byte; bfloat16: 2); 3- and 4-bit codes are packed two per byte, 2-bit codes (int2,
    ternary) four per byte, the flattened tensor padded to a whole byte. ``n=None`` gives the
    bytes of one code (a fraction for packed formats).
    """
    fmt = get(fmt)
    packed = _packed_bits(fmt)
    if packed:
        return packed / 8 if n is None else math.ceil(n * packed / 8)
    dt = fmt.dtype if fmt.dtype is not None else fmt.code_dtype
    return dt.itemsize if n is None else n * dt.itemsize


def n_scales(q: Quantizer, shape: tuple[int, ...]) -> int:
    """How many scales ``q`` stores for an array of ``shape`` (a fixed scale counts once)."""
    shape = tuple(shape)
    if q.fixed or len(shape) == 0 or q.granularity == "tensor":
        return 1
    if q.granularity == "row":
        return math.prod(shape[:-1])
    if q.granularity == "column":
        if len(shape) == 1:  # the quantizer refuses it: see Quantizer._blocked
            raise ValueError(f"granularity='column' needs an array of 2 or more dimensions "
                             f"(one scale per column), got shape {shape}")
        return shape[-1]
    return math.prod(shape) // q.granularity


def _scale_bytes(q: Quantizer, dtype: np.dtype) -> int:
    if q.scale == "absmax_pow2":
        return 1  # E8M0
    dt = np.dtype(dtype).newbyteorder("=")  # ">f8" is float64 too
    return dt.itemsize if dt in (np.float32, np.float64) else 4


def _buffer_bytes(q: Quantizer | None, shape: tuple[int, ...], dtype) -> int:
    n = math.prod(shape)
    if q is None:
        return n * np.dtype(dtype).itemsize
    return int(code_bytes(q.fmt, n)) + n_scales(q, shape) * _scale_bytes(q, dtype)


def _buffer_bytes_per_param(q: Quantizer | None, dtype, block: int | None) -> float:
    if q is None:
        return float(np.dtype(dtype).itemsize)
    # A fixed scale (a plain cast, e.g. bf16 states) is one number for the whole tensor.
    scales = 0.0 if block is None or q.fixed else _scale_bytes(q, dtype) / block
    return float(code_bytes(q.fmt)) + scales


def _as_quantizer(spec: Any) -> Quantizer | None:
    if spec is None or isinstance(spec, Quantizer):
        return spec
    if isinstance(spec, (str, Format)):
        return Quantizer(spec, granularity="row")
    raise TypeError(f"expected a Quantizer, a format name or None, got {spec!r}")


def _layout(scheme: str, optimizer: str) -> tuple[str, ...]:
    """The buffers of the formula (Muon: every parameter a matrix, so no ``v``)."""
    return optimizer_catalog.get(optimizer).moments + get_scheme(scheme).buffers


def _storage_of(b: str) -> str:
    """How buffer ``b`` is stored: ``"state"`` (the moments, and a scheme's state-format
    buffers), ``"full"`` or ``"compensation"`` (:data:`ecosim.optim.schemes.BUFFER_STORAGE`)."""
    return BUFFER_STORAGE.get(b, "state")


# -- the formula ------------------------------------------------------------------------------

def bytes_per_param(optimizer: str | QuantizedOptimizer = "adamw", scheme: str = "eco", *,
                    weights: Any = "float8_e4m3fn", states: Mapping | None = None,
                    dtype: Any = np.float32, block: int | None = None,
                    count_working_copy: bool = False) -> Memory:
    """Static bytes per parameter of a scheme (the formula; see the module docstring).

    Args:
        optimizer: a name of :mod:`ecosim.optim.catalog` (``"adamw"``, ``"sgdm"``,
            ``"muon"``: every parameter a matrix, one momentum; any other row), or an
            optimizer object (then ``scheme``, ``weights`` and ``states``
            are taken from it, ``weights`` must be one Quantizer).
        scheme: one of the schemes the optimizer runs
            (:func:`ecosim.optim.schemes.names_for`).
        weights: the weight format (a Quantizer or a format name); ignored for ``"fp"``.
        states: ``{"m": ..., "v": ..., "master": ...}`` formats or Quantizers (default:
            ``dtype``); ``"g"`` is accepted and not counted (gradients are transient).
        dtype: the full-precision type (float32: 4 bytes; also the type of the scales).
        block: elements per scale (e.g. the number of columns for row-wise scales); None
            leaves scales out, as the paper's headline numbers do.
        count_working_copy: add the master scheme's low-precision copy of the weights.

    Example:
        >>> bytes_per_param("adamw", "master").total, bytes_per_param("adamw", "eco").total
        (12.0, 9.0)
        >>> bytes_per_param("adamw", "eco", states={"m": "bf16", "v": "bf16"}).total
        5.0
        >>> round(bytes_per_param("adamw", "eco", block=2048).total, 5)  # row-wise FP32 scales
        9.00195
    """
    count_working_copy = check_bool(count_working_copy, "count_working_copy")
    if isinstance(optimizer, QuantizedOptimizer):
        opt = optimizer
        if isinstance(opt.weights, Mapping):
            raise ValueError("bytes_per_param takes one weight quantizer; use static_bytes for "
                             "per-parameter policies")
        optimizer, scheme, weights = opt.name, opt.scheme, opt.weights
        states = dict(opt.states)
    if optimizer not in optimizer_catalog.names():
        raise ValueError(f"optimizer must be one of {optimizer_catalog.names()}, got "
                         f"{optimizer!r}")
    if scheme not in names_for(optimizer):
        raise ValueError(f"optimizer {optimizer!r} runs the schemes {names_for(optimizer)}, "
                         f"got scheme {scheme!r}")
    q = None if scheme == "fp" else _as_quantizer(weights)
    states = {k: state_quantizer(v) for k, v in (states or {}).items() if v is not None}
    wq = _buffer_bytes_per_param(q, dtype, block)
    out = {"weights": wq}
    if scheme == "master":
        out["weights"] = wq if count_working_copy else 0.0
    for b in _layout(scheme, optimizer):
        kind = _storage_of(b)
        if kind == "state":
            out[b] = _buffer_bytes_per_param(states.get(b), dtype, block)
        elif kind == "full":
            out[b] = float(np.dtype(dtype).itemsize)
        else:
            out[b] = _buffer_bytes_per_param(compensation_quantizer(q), dtype, block)
    return Memory(**out)


def static_bytes(opt: QuantizedOptimizer, shapes: Mapping[str, tuple] | tuple, *,
                 dtype: Any = np.float32, count_working_copy: bool = False) -> Memory:
    """Exact static bytes of ``opt`` for parameters of the given shapes (the formula).

    Args:
        opt: an optimizer (its scheme, per-parameter weight policy and state formats).
        shapes: dict name -> shape, or one shape (a bare-array parameter).
        dtype: the parameters' dtype.
        count_working_copy: count the master scheme's low-precision weights.

    Returns:
        Total bytes per buffer (integers); divide by the parameter count for bytes/param.
    """
    if not isinstance(shapes, Mapping):
        shapes = {"": tuple(shapes)}
    count_working_copy = check_bool(count_working_copy, "count_working_copy")
    tot = dict.fromkeys(_BUFFERS, 0)
    for name, shape in shapes.items():
        shape = tuple(shape)
        q = opt.weight_quantizer(name)
        scheme = opt.scheme_of(name)
        wb = _buffer_bytes(q, shape, dtype)
        if scheme != "master" or count_working_copy:
            tot["weights"] += wb
        for b in opt.state_buffers(name, shape):
            kind = _storage_of(b)
            if kind == "state":
                tot[b] += _buffer_bytes(opt.states.get(b), shape, dtype)
            elif kind == "full":
                tot[b] += _buffer_bytes(None, shape, dtype)
            else:
                tot[b] += _buffer_bytes(compensation_quantizer(q), shape, dtype)
    return Memory(**tot)


# -- the measurement --------------------------------------------------------------------------

def _storage(q: Quantizer) -> Quantizer:
    """``q`` for storing on-grid values: RTN (exact on the grid), absmax for absmean grids."""
    q = dataclasses.replace(q, mode="rtn")
    return dataclasses.replace(q, scale="absmax") if q.scale == "absmean" else q


def _held(q: Quantizer | None, x: np.ndarray) -> int:
    x = np.asarray(x)
    if q is None:
        return int(x.nbytes)
    return _storage(q).encode(x).nbytes


def measured_bytes(opt: QuantizedOptimizer, params: Any, state: tuple, *,
                   count_working_copy: bool = False) -> Memory:
    """Bytes the arrays of a run really hold: stored weights and state, per buffer.

    Low-precision buffers (quantized weights, the Kahan compensation, low-precision moments)
    are encoded into real storage with :meth:`~ecosim.Quantizer.encode` (codes in 1-byte
    ``ml_dtypes`` arrays or packed bytes, plus scales) and their ``nbytes`` counted;
    full-precision buffers count their own ``nbytes``.

    Args:
        opt: the optimizer that produced ``state``.
        params: the stored weights (as returned by ``init``/``step``).
        state: the optimizer state.
        count_working_copy: count the master scheme's low-precision weights.
    """
    P = params if isinstance(params, Mapping) else {"": params}
    bare = not isinstance(params, Mapping)

    def entry(tree, name):
        if tree is None:
            return None
        return tree if bare else tree.get(name)

    count_working_copy = check_bool(count_working_copy, "count_working_copy")
    tot = dict.fromkeys(_BUFFERS, 0)
    for name, w in P.items():
        q = opt.weight_quantizer(name)
        scheme = opt.scheme_of(name)
        if scheme != "master" or count_working_copy:
            tot["weights"] += _held(q, w)
        for b in opt.state_buffers(name, np.shape(w)):
            x = entry(getattr(state, b), name)
            if x is None:
                raise ValueError(f"state has no {b!r} for parameter {name!r}")
            kind = _storage_of(b)
            if kind == "state":
                tot[b] += _held(opt.states.get(b), x)
            elif kind == "compensation":
                tot[b] += _held(compensation_quantizer(q), x)
            else:
                tot[b] += _held(None, x)
    return Memory(**tot)


# -- model-level calculator -------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """A model described by parameter counts.

    Attributes:
        name: label.
        quantized: parameters in the quantized (block-internal linear) layers, all experts.
        other: parameters kept in full precision (embeddings, norms, output head), trained
            with FP32 master weights whatever the scheme.
        active_quantized: quantized parameters used per token (MoE: the routed top-k plus
            shared experts and attention); equals ``quantized`` for dense models.
    """

    name: str
    quantized: int
    other: int = 0
    active_quantized: int | None = None

    @property
    def total(self) -> int:
        return self.quantized + self.other

    @property
    def active(self) -> int:
        aq = self.quantized if self.active_quantized is None else self.active_quantized
        return aq + self.other

    @classmethod
    def llama(cls, d_model: int, n_layers: int, *, vocab: int = 32000,
              ffn_hidden: int | None = None, tied: bool = False, name: str = "") -> "ModelSpec":
        """A Llama-style dense transformer (SwiGLU MLP, attention width ``d_model``).

        Per block: attention ``4 d^2`` and SwiGLU ``3 d ffn`` quantized, two norms ``2 d`` not;
        embeddings ``vocab d`` (and an untied head ``vocab d``) and a final norm ``d`` not.
        ``ffn_hidden`` defaults to ``8 d / 3`` rounded up to a multiple of 64.
        """
        tied = check_bool(tied, "tied")
        ffn = ffn_hidden or 64 * math.ceil(8 * d_model / 3 / 64)
        q = n_layers * (4 * d_model**2 + 3 * d_model * ffn)
        other = n_layers * 2 * d_model + d_model + vocab * d_model * (1 if tied else 2)
        return cls(name or f"llama-d{d_model}-L{n_layers}", q, other)

    @classmethod
    def moe(cls, d_model: int, n_layers: int, *, n_experts: int, top_k: int,
            expert_hidden: int, shared_experts: int = 0, vocab: int = 32000,
            tied: bool = False, name: str = "") -> "ModelSpec":
        """A mixture-of-experts transformer: every block has ``n_experts`` SwiGLU experts of
        width ``expert_hidden`` (+ ``shared_experts`` always active), ``top_k`` routed per
        token, and a router ``d * n_experts`` (kept in full precision)."""
        tied = check_bool(tied, "tied")
        attn = 4 * d_model**2
        expert = 3 * d_model * expert_hidden
        q = n_layers * (attn + (n_experts + shared_experts) * expert)
        aq = n_layers * (attn + (top_k + shared_experts) * expert)
        other = (n_layers * (2 * d_model + d_model * n_experts) + d_model
                 + vocab * d_model * (1 if tied else 2))
        return cls(name or f"moe-d{d_model}-L{n_layers}-E{n_experts}k{top_k}", q, other, aq)


class ModelMemory(NamedTuple):
    """Static memory of a model under one scheme.

    Attributes:
        spec: the model.
        bytes: total static bytes.
        per_param: bytes per (total) parameter.
        per_active_param: bytes per parameter active per token (MoE: larger than per_param).
        baseline_bytes: the same model with FP32 master weights (AdamW/SGDM, same states).
        saving: ``1 - bytes / baseline_bytes``.
    """

    spec: ModelSpec
    bytes: float
    per_param: float
    per_active_param: float
    baseline_bytes: float
    saving: float


def model_memory(spec: ModelSpec, optimizer: str = "adamw", scheme: str = "eco", *,
                 weights: Any = "float8_e4m3fn", states: Mapping | None = None,
                 block: int | None = None, count_working_copy: bool = False) -> ModelMemory:
    """Static memory of a model: quantized layers under ``scheme``, the rest with FP32 master.

    Args:
        spec: a :class:`ModelSpec` (e.g. ``ModelSpec.llama(2048, 16)``).
        optimizer, scheme, weights, states, block, count_working_copy: as in
            :func:`bytes_per_param`.

    Example:
        >>> spec = ModelSpec("linear layers only", quantized=10**9)
        >>> master = model_memory(spec, scheme="master")
        >>> eco = model_memory(spec, scheme="eco")
        >>> master.per_param, eco.per_param, eco.saving
        (12.0, 9.0, 0.25)
    """
    kw = dict(states=states, block=block, count_working_copy=count_working_copy)
    per_q = bytes_per_param(optimizer, scheme, weights=weights, **kw).total
    per_base = bytes_per_param(optimizer, "master", weights=weights, **kw).total
    # the full-precision rest (embeddings, norms): the optimizer that trains what this one
    # does not take (AdamW under Muon)
    fp_other = bytes_per_param(optimizer_catalog.get(optimizer).others or optimizer, "fp",
                               states=states).total
    total = spec.quantized * per_q + spec.other * fp_other
    base = spec.quantized * per_base + spec.other * fp_other
    return ModelMemory(spec, total, total / spec.total, total / spec.active, base,
                       1.0 - total / base)


def markdown_table(block: int = 2048) -> str:
    """Static bytes per parameter of each configuration, as a markdown table.

    The README's memory table is this, verbatim. ``block`` is the row length used for the
    row-wise scale column (the ECO paper's FP8 weights have one FP32 scale per row).
    """
    rows = [
        ("AdamW, FP32 master weights (paper baseline)", "adamw", "master", "e4m3", None),
        ("AdamW, ECO / naive, FP8 weights", "adamw", "eco", "e4m3", None),
        ("AdamW, eco_exact (stores e_prev)", "adamw", "eco_exact", "e4m3", None),
        ("AdamW, Kahan (FP8 compensation)", "adamw", "kahan", "e4m3", None),
        ("AdamW, ECO, FP8 weights, BF16 m and v", "adamw", "eco", "e4m3",
         {"m": "bf16", "v": "bf16"}),
        ("AdamW, ECO, FP8 weights, FP8 m, BF16 v", "adamw", "eco", "e4m3",
         {"m": "e4m3", "v": "bf16"}),
        ("AdamW, ECO, INT4 weights", "adamw", "eco", "int4", None),
        ("AdamW, DQT, INT8 weights (no master)", "adamw", "naive", "int8", None),
        ("AdamW, DQT, ternary weights (no master)", "adamw", "naive", "ternary", None),
        ("AdamW, DQT, INT8 weights, BF16 m and v", "adamw", "naive", "int8",
         {"m": "bf16", "v": "bf16"}),
        ("SGDM, FP32 master weights", "sgdm", "master", "e4m3", None),
        ("SGDM, ECO, FP8 weights", "sgdm", "eco", "e4m3", None),
    ]
    out = ["| configuration | weights | master | m | v | other | total | with row scales |",
           "|---|---|---|---|---|---|---|---|"]
    for label, opt, scheme, w, states in rows:
        m = bytes_per_param(opt, scheme, weights=w, states=states)
        mb = bytes_per_param(opt, scheme, weights=w, states=states, block=block)
        other = m.e_prev + m.c
        out.append(f"| {label} | {m.weights:g} | {m.master:g} | {m.m:g} | {m.v:g} | "
                   f"{other:g} | **{m.total:g}** | {mb.total:.4f} |")
    return "\n".join(out)
