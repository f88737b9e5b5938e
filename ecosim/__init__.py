"""ecosim: bit-exact low-precision formats and quantized training without master weights.

Public names:
    formats: the :class:`~ecosim.core.formats.Format` records,
        :func:`~ecosim.core.formats.get`, custom formats, encode/decode to real low-precision
        storage.
    quantize: rounding onto a format's grid, exact (round to nearest, stochastic, and the
        other modes of ecosim.core.rounding_modes); Rounding: the checked record of a rounding
        (mode, nbits, sr_rule, saturate).
    Quantizer: scaled quantization (tensor/row/column/group; absmax, power-of-two, absmean or
        fixed scales) to dequantized values or real low-precision storage.
    rng: counter-based random bits (a pure function of key and counter).
    optim: SGD-momentum and AdamW under every weight scheme (fp, master, naive, eco, eco_exact,
        kahan), DQT, learning-rate schedules.
    problems: quadratics, Rosenbrock, a NumPy MLP.
    train: the training loop, returning a History.
    theory: closed-form noise floors, Lyapunov solver, bounds; metrics: error similarity.
    memory: static bytes per parameter, formula and measured.
"""

from . import former_paths, memory, metrics, optim, problems, theory
from .core import formats, rng
from .core.formats import Format
from .core.quantizer import Encoded, Quantizer
from .core.rounding import quantize
from .core.rounding_modes import Rounding
from .train import History, train

__version__ = "0.1.0"

former_paths.install()  # the former paths of ecosim.core's modules (ecosim.rounding, ...) still import

__all__ = ["Encoded", "Format", "History", "Quantizer", "Rounding", "formats", "memory", "metrics",
           "optim", "problems", "quantize", "rng", "theory", "train", "__version__"]
