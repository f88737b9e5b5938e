"""The ECO paper's Table 1 methods and its training recipe, defined once.

Every experiment, figure and runner that speaks of Table 1 (Nikdan et al., "ECO: Quantized
Training without Full-Precision Master Weights", arXiv 2601.22101; docs/theory.md §7) reads it
from here: the seven methods, in the paper's order, each as the weight scheme of
:mod:`ecosim.optim`, the rounding of the stored weights and their format, with its name, its
label and the validation losses the paper reports for it; and the recipe (AdamW's
hyperparameters and the warmup-cosine schedule).

A method's weights are ``"bf16"`` (BF16 with an FP32 master copy: a plain bfloat16 cast, RTN
with scale 1, as in mixed-precision training) or ``"W"``, the low-precision format a run
chooses from :data:`WEIGHT_FORMATS`: ``fp8`` (FP8 E4M3 with one absmax scale per output row,
the paper's pre-training format) or ``int4`` (INT4 with one absmax scale per tensor, its
fine-tuning format).

The language-model runner's methods (``python -m ecosim.torch.lm``) are :data:`LM_METHODS`,
one :class:`LMMethod` per name: FP32, Table 1's rows with FP8 weights, DQT (INT8 and
ternary), BitNet b1.58, Table 1's quantized rows with INT4 weights, and ECO's variants for
AdamW with FP8 weights that each remove or correct one of its approximations
(:data:`ECO_ADAM_VARIANTS`). The torch runner
builds its methods from it; the LM experiments and figures read names, parts and labels from
it. Adding a method is one entry there.

The fine-tuning recipe of the paper's Table 2 (DeepSeek-MoE-16B-Base fine-tuned with INT4
weight-only quantization, one absmax scale per tensor): the same AdamW, weight decay
:data:`FINETUNE_WEIGHT_DECAY` = 0 and the learning rate annealed to zero
(:data:`FINETUNE_FINAL_FRAC` = 0); :data:`TABLE2` holds its zero-shot accuracies.

Example:
    >>> [m.name for m in TABLE1][:3]
    ['bf16_master', 'fp8_master_rtn', 'fp8_master_sr']
    >>> method_label("int4", "eco", "sr"), by_name("fp8_naive_rtn").paper[0]
    ('INT4 ECO + SR', 'diverged')
    >>> s = schedule(1e-3, 1000)
    >>> s(0), s(100), s(999)
    (1e-05, 0.001, 0.0001)
    >>> TABLE1[-1].run_name("int4"), parse_run_name("int4_eco_sr")[0]
    ('int4_eco_sr', 'int4')
    >>> lm_method("dqt8_sr").parts, lm_method("int4_eco_sr").granularity
    (('int8', 'dqt', 'sr'), 'tensor')
"""
from __future__ import annotations

import dataclasses

from .optim.schedules import WarmupCosine
from .core.quantizer import Quantizer

__all__ = ["Method", "TABLE1", "PAPER_SIZES", "WEIGHT_FORMATS", "BETAS", "EPS",
           "WEIGHT_DECAY", "CLIP", "WARMUP_FRAC", "INIT_FRAC", "FINAL_FRAC", "schedule",
           "method_label", "weight_quantizer", "by_name", "parse_run_name", "LMMethod",
           "LM_METHODS", "lm_method", "lm_methods", "ECO_ADAM_VARIANTS",
           "FINETUNE_WEIGHT_DECAY", "FINETUNE_FINAL_FRAC", "TABLE2_BENCHMARKS", "TABLE2"]

#: the model sizes of Table 1's columns (Llama-style models trained on C4)
PAPER_SIZES = ("30M", "50M", "100M", "200M", "430M", "800M")

#: low-precision weight formats by short name: (format, granularity) of the absmax scales
WEIGHT_FORMATS = {
    "fp8": ("float8_e4m3fn", "row"),
    "int4": ("int4", "tensor"),
}

# The recipe: AdamW (b1, b2), eps and weight decay, gradient clipping, and the schedule:
# linear warmup over WARMUP_FRAC of the steps from INIT_FRAC x the peak, cosine to FINAL_FRAC.
BETAS = (0.9, 0.98)
EPS = 1e-9
WEIGHT_DECAY = 0.1
CLIP = 1.0
WARMUP_FRAC = 0.1
INIT_FRAC = 0.01
FINAL_FRAC = 0.1
# The fine-tuning recipe (Table 2): no weight decay, the learning rate annealed to zero.
FINETUNE_WEIGHT_DECAY = 0.0
FINETUNE_FINAL_FRAC = 0.0

_SCHEME_LABELS = {"master": "w/ master", "naive": "naive", "eco": "ECO"}


@dataclasses.dataclass(frozen=True)
class Method:
    """A row of Table 1.

    Attributes:
        weights: ``"bf16"`` or ``"W"`` (the run's low-precision format).
        scheme: the weight-update scheme of :mod:`ecosim.optim` (``master``, ``naive``,
            ``eco``).
        mode: the rounding of the stored weights (``rtn``, ``sr``).
        paper: the final validation loss the paper reports for each of :data:`PAPER_SIZES`
            (None: not reported; ``"diverged"``).
    """

    weights: str
    scheme: str
    mode: str
    paper: tuple

    @property
    def name(self) -> str:
        """The name of the FP8 row (``"bf16_master"``, ``"fp8_eco_sr"``), as the language
        model runner calls it."""
        return self.run_name("fp8")

    def run_name(self, fmt: str = "fp8") -> str:
        """The runner's name of this row with ``W`` = ``fmt`` (a key of
        :data:`WEIGHT_FORMATS`): ``"int4_eco_sr"``; ``"bf16_master"`` whatever ``fmt``."""
        return "bf16_master" if self.weights == "bf16" else f"{fmt}_{self.scheme}_{self.mode}"

    def label(self, fmt: str = "fp8") -> str:
        """Table 1's label with ``W`` = ``fmt`` (``"FP8 ECO + SR"``)."""
        return method_label(self.weights if self.weights == "bf16" else fmt, self.scheme,
                            self.mode)

    def parts(self, fmt: str = "fp8") -> tuple[str, str, str]:
        """``(weights, scheme, mode)`` with ``W`` = ``fmt``."""
        return (self.weights if self.weights == "bf16" else fmt), self.scheme, self.mode


#: Table 1's rows, in its order, with the paper's final C4 validation losses
TABLE1 = (
    Method("bf16", "master", "rtn", (3.3238, 3.1616, 2.9811, 2.8157, 2.6464, 2.5306)),
    Method("W", "master", "rtn", (3.3248, 3.1668, 2.9846, 2.8194, 2.6490, 2.5343)),
    Method("W", "master", "sr", (3.3309, 3.1719, 2.9884, 2.8231, 2.6500, None)),
    Method("W", "naive", "rtn", ("diverged",) * 6),
    Method("W", "naive", "sr", (3.4008, 3.2563, 3.1006, 2.9684, 2.8378, 2.9471)),
    Method("W", "eco", "rtn", (3.3640, 3.1862, 3.0025, 2.8776, 2.7237, 2.6046)),
    Method("W", "eco", "sr", (3.3317, 3.1695, 2.9888, 2.8241, 2.6544, 2.5399)),
)


def by_name(name: str) -> Method:
    """The method of a name of :attr:`Method.name` (ValueError for any other)."""
    for m in TABLE1:
        if m.name == name:
            return m
    raise ValueError(f"unknown method {name!r}; expected one of {[m.name for m in TABLE1]}")


def parse_run_name(name: str) -> tuple[str, Method]:
    """``(W, row)`` of a runner name of :meth:`Method.run_name` (``"int4_eco_sr" ->
    ("int4", the ECO + SR row)``; ``"bf16_master" -> ("bf16", its row)``); ValueError for any
    other name."""
    for fmt in WEIGHT_FORMATS:
        for m in TABLE1:
            if m.run_name(fmt) == name:
                return ("bf16" if m.weights == "bf16" else fmt), m
    raise ValueError(f"unknown method {name!r}; expected bf16_master or W_SCHEME_MODE with W "
                     f"in {list(WEIGHT_FORMATS)} (e.g. int4_eco_sr)")


def method_label(weights: str, scheme: str, mode: str) -> str:
    """Table 1's name of a method: ``"BF16 w/ master"``, ``"FP8 ECO + SR"`` ... (``"FP32"``
    for the unquantized scheme ``"fp"``)."""
    if weights == "bf16":
        return "BF16 w/ master"
    if scheme == "fp":
        return "FP32"
    return f"{weights.upper()} {_SCHEME_LABELS[scheme]} + {mode.upper()}"


def weight_quantizer(weights: str, mode: str) -> Quantizer:
    """The quantizer of the stored weights: ``"bf16"`` (a plain cast: RTN, scale 1), or a
    name of :data:`WEIGHT_FORMATS` with absmax scales and the given rounding."""
    if weights == "bf16":
        return Quantizer("bfloat16", "rtn", scale=1.0)
    fmt, granularity = WEIGHT_FORMATS[weights]
    return Quantizer(fmt, mode, granularity=granularity)


@dataclasses.dataclass(frozen=True)
class LMMethod:
    """A method of the language-model runner (:mod:`ecosim.torch.lm`): what its block-internal
    linear layers store and how they are updated.

    Attributes:
        name: the runner's name (``"fp8_eco_sr"``).
        label: the figures' label (``"FP8 ECO + SR"``).
        weights: the format's short name in figures and tables (``"fp32"``, ``"bf16"``,
            ``"e4m3"``, ``"int4"``, ``"int8"``, ``"ternary"``).
        fmt: the stored format of the torch quantizer (``"float8_e4m3fn"``, ``"bfloat16"``,
            ``"int4"``, ``"int8"``, ``"ternary"``); None: FP32, unquantized.
        scheme: the update scheme of the stored weights (``"master"``, ``"naive"``,
            ``"eco"``; DQT's is ``"naive"``: no master copy); None: plain AdamW on FP32
            parameters (FP32, BitNet's master weights).
        mode: the rounding of the stored weights (``"rtn"``, ``"sr"``; None: FP32).
        granularity: the absmax scales of a scaled format (``"row"``: one per output row;
            ``"tensor"``: one per tensor, which FSDP cannot shard).
        kind: ``"table1"`` (ECOAdamW), ``"dqt"`` (DQTAdamW), ``"bitnet"`` (BitLinear) or
            ``"eco_adam"`` (ECOAdamW with one of ECO's approximations for AdamW removed or
            corrected: :data:`ECO_ADAM_VARIANTS`).
        wd_corrected: ECOAdamW's ``wd_corrected_injection`` (ECO's coefficient times
            ``1 - lr wd``).
        schedule_guard: ECOAdamW's ``schedule_guard`` (the injection sized with the
            ``b1``-weighted mean of the later learning rates).
    """

    name: str
    label: str
    weights: str
    fmt: str | None
    scheme: str | None
    mode: str | None
    granularity: str = "row"
    kind: str = "table1"
    wd_corrected: bool = False
    schedule_guard: bool = False

    @property
    def parts(self) -> tuple[str, str, str]:
        """``(weights, scheme, mode)`` as the figures' styles take them: the scheme is
        ``"fp"`` for FP32 and the kind for DQT and BitNet; FP32's mode is ``"rtn"``."""
        scheme = self.kind if self.kind != "table1" else (self.scheme or "fp")
        return self.weights, scheme, self.mode or "rtn"


def _table1_lm(row: Method, fmt: str) -> LMMethod:
    """Table 1's ``row`` with ``W`` = ``fmt`` (a key of :data:`WEIGHT_FORMATS`)."""
    weights, scheme, mode = row.parts(fmt)
    if weights == "bf16":
        return LMMethod(row.run_name(fmt), row.label(fmt), "bf16", "bfloat16", scheme, mode)
    stored, granularity = WEIGHT_FORMATS[fmt]
    return LMMethod(row.run_name(fmt), row.label(fmt), "e4m3" if fmt == "fp8" else fmt, stored,
                    scheme, mode, granularity)


#: ECO's approximations for AdamW on the LM, one variant each (issue 12, part 4; the MLP's
#: are the ``eco_adam_breakdown`` experiment's): short name -> (label, scheme, options).
#: ``ecomx``: scheme ``eco_momentum_exact`` (the error stored and given back through the
#: momentum with the current ``d``: ECO's ``e_prev ~ e`` removed); ``ecowd``: ECO with
#: ``wd_corrected_injection`` (the MLP figure's ``eco_wd``); ``ecoguard``: ECO with
#: ``schedule_guard`` (the injection sized for the later learning rates).
ECO_ADAM_VARIANTS = {
    "ecomx": ("ECO momentum-exact", "eco_momentum_exact", {}),
    "ecowd": ("ECO wd-corrected", "eco", {"wd_corrected": True}),
    "ecoguard": ("ECO guarded", "eco", {"schedule_guard": True}),
}


def _eco_adam_lm(variant: str, mode: str) -> LMMethod:
    """``fp8_<variant>_<mode>``: FP8 E4M3 row-wise weights under one of ECO's variants."""
    label, scheme, options = ECO_ADAM_VARIANTS[variant]
    stored, granularity = WEIGHT_FORMATS["fp8"]
    return LMMethod(f"fp8_{variant}_{mode}", f"FP8 {label} + {mode.upper()}", "e4m3", stored,
                    scheme, mode, granularity, kind="eco_adam", **options)


#: every method of the language-model runner by name, in the runner's order: FP32, Table 1's
#: rows with FP8 weights, DQT, BitNet b1.58, Table 1's quantized rows with INT4 weights, then
#: ECO's variants for AdamW with FP8 weights (``fp8_ecomx_rtn`` ... ``fp8_ecoguard_sr``)
LM_METHODS: dict[str, LMMethod] = {m.name: m for m in (
    LMMethod("fp32", "FP32 (no quantization)", "fp32", None, None, None),
    *(_table1_lm(row, "fp8") for row in TABLE1),
    LMMethod("dqt8_sr", "DQT INT8 + SR", "int8", "int8", "naive", "sr", kind="dqt"),
    LMMethod("dqt_ternary_sr", "DQT ternary + SR", "ternary", "ternary", "naive", "sr",
             kind="dqt"),
    LMMethod("bitnet_b158", "BitNet b1.58", "ternary", "ternary", None, "rtn", kind="bitnet"),
    *(_table1_lm(row, "int4") for row in TABLE1 if row.weights == "W"),
    *(_eco_adam_lm(v, mode) for v in ECO_ADAM_VARIANTS for mode in ("rtn", "sr")),
)}


def lm_method(name: str) -> LMMethod:
    """The method of a name of :data:`LM_METHODS` (ValueError listing every name else)."""
    try:
        return LM_METHODS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown method {name!r}; expected one of {list(LM_METHODS)}") \
            from None


def lm_methods(weights: str | None = None, kind: str | None = None) -> tuple[str, ...]:
    """The names of :data:`LM_METHODS` (in order) with these ``weights`` and ``kind`` (None:
    any), e.g. ``lm_methods("int4")`` the six INT4 rows."""
    return tuple(n for n, m in LM_METHODS.items()
                 if weights in (None, m.weights) and kind in (None, m.kind))


#: the zero-shot benchmarks of the paper's Table 2 (accuracy, %)
TABLE2_BENCHMARKS = ("ARC-C", "ARC-E", "GSM8K", "HellaSwag", "PIQA", "MMLU")

#: Table 2 of the ECO paper (arXiv 2601.22101): zero-shot accuracy (%) of DeepSeek-MoE-16B-Base
#: before ("base") and after INT4 weight-only fine-tuning (one absmax scale per tensor), by the
#: runner's method name; the naive runs diverged and are not reported.
TABLE2 = {
    "base": (47.53, 73.06, 16.15, 77.34, 80.36, 37.64),
    "int4_master_rtn": (48.29, 71.38, 16.68, 78.76, 80.69, 37.87),
    "int4_master_sr": (48.55, 71.13, 16.15, 78.78, 80.90, 38.57),
    "int4_eco_rtn": (49.15, 71.59, 16.30, 78.88, 81.34, 38.63),
    "int4_eco_sr": (48.55, 71.17, 16.00, 78.84, 81.50, 38.41),
}


def schedule(peak: float, steps: int) -> WarmupCosine:
    """The recipe's learning rate: linear warmup over :data:`WARMUP_FRAC` of ``steps`` from
    :data:`INIT_FRAC` x ``peak``, then cosine decay to :data:`FINAL_FRAC` x ``peak``."""
    return WarmupCosine(peak, steps, warmup_frac=WARMUP_FRAC, init_frac=INIT_FRAC,
                        final_frac=FINAL_FRAC)
