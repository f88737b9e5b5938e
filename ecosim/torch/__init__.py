"""Optional torch backend: the NumPy core's mirrors, bit-identical with it on the CPU.

Which exactness claims hold where:
    CPU: ``quantize``, ``random_bits``, ``Quantizer`` (every scale rule) and the eager
        ``ECOSGD``/``ECOAdamW`` (float32) equal NumPy bit for bit; tested by the test suite
        (tests/test_torch_*.py). ``ECOAdamW(compile=True)`` was measured bit-identical too.
        The language model's resume and DDP/FSDP layout equivalences are tested on the CPU.
    CUDA: designed to be bit-identical (integer bit manipulation; every division that must
        match NumPy divides by a tensor on the same device, since CUDA computes a division by
        a Python scalar or a CPU 0-dim tensor as a multiplication by the reciprocal; float32
        ``sqrt`` is assumed IEEE there), but not yet run: checked by
        ``benchmarks/cuda_check.py`` (quantize, the row-wise E4M3 Quantizer with RTN and SR,
        three ECOAdamW steps) when a GPU is available. Not claimed on CUDA:
        ``ECOAdamW(compile=True)`` (Triton may fuse multiply-adds), and the language model's
        bit-exact resume and layout equivalence (``python -m ecosim.torch.lm`` turns on
        deterministic algorithms and a fixed cuBLAS workspace there, unverified).
    Other devices: untested.

Imported lazily (``import ecosim.torch``); nothing else in ecosim needs torch. Install it with
the ``torch`` extra (``pip install -e '.[torch]'`` or ``make torch``).

Public names:
    quantize: :func:`ecosim.quantize` for tensors (RTN and SR on every format, same bits).
    Quantizer, Encoded: :class:`ecosim.Quantizer` for tensors, with codes stored in real torch
        low-precision dtypes (``torch.float8_e4m3fn`` ..., int8, packed uint8).
    random_bits: :func:`ecosim.core.rng.random_bits` as an int64 tensor of 32-bit words.
    fold_in, split_key: key derivation, shared with :mod:`ecosim.core.rng`.
    ECOSGD, ECOAdamW: the master/naive/ECO/exact-ECO/Kahan optimizers as torch optimizers,
        with low-precision states, bit-identical to :mod:`ecosim.optim` on the CPU in float32
        (:mod:`ecosim.torch.optim`).
    DQTAdamW, dqt_quantizers: AdamW writing onto the previous step's n-bit or ternary grid
        (DQT, :mod:`ecosim.torch.dqt`), on plain parameters or any stored layer.
    QuantizedLinear, store_weights, GradSlot, stored: weights held as real low-precision
        codes between steps (1 byte per FP8 weight plus scales), updated in place by the ECO
        optimizers (:mod:`ecosim.torch.nn`).
    QuantizedConv, QuantizedConv1D, QuantizedMultiheadAttention, store_module: the same
        storage for convolutions, transformers' ``Conv1D`` and attention, one scale per output
        feature (:mod:`ecosim.torch.layers`).
    quantize_model, QuantizeReport, unstore_weights, ema_update: one call to store a model's
        weight matrices with a report and the optimizer's parameter groups; back to a plain
        model; EMA of stored weights (:mod:`ecosim.torch.models`).
    save_pretrained: a stored transformers model saved as plain weights ``from_pretrained``
        reads (the model's own ``save_pretrained`` is refused once stored).
    data_parallel: ``DistributedDataParallel`` for models with stored weights.
    measured_memory, MeasuredMemory: bytes actually held by a model and its optimizer.
"""

try:
    import torch  # noqa: F401
except ImportError as err:  # pragma: no cover - exercised only without torch
    raise ImportError("ecosim.torch needs torch: pip install -e '.[torch]' (or `make torch`)"
                      ) from err

from .memory import MeasuredMemory, measured_memory
from .nn import GradSlot, QuantizedLinear, data_parallel, stored
from .layers import (
    QuantizedConv,
    QuantizedConv1D,
    QuantizedMultiheadAttention,
    store_module,
    store_weights,
)
from .models import (QuantizeReport, ema_update, quantize_model, save_pretrained,
                     unstore_weights)
from .dqt import DQTAdamW, dqt_quantizers
from .optim import ECOAdamW, ECOSGD
from .quantizer import Encoded, Quantizer
from .rng import fold_in, random_bits, split_key
from .rounding import MODES, quantize

__all__ = ["DQTAdamW", "ECOAdamW", "ECOSGD", "Encoded", "GradSlot", "MODES", "MeasuredMemory",
           "QuantizeReport", "QuantizedConv", "QuantizedConv1D", "QuantizedLinear",
           "QuantizedMultiheadAttention", "Quantizer", "data_parallel", "dqt_quantizers",
           "ema_update", "fold_in", "measured_memory", "quantize", "quantize_model", "random_bits",
           "save_pretrained", "split_key", "store_module", "store_weights", "stored",
           "unstore_weights"]
