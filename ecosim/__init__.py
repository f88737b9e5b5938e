"""ecosim: bit-exact low-precision formats and quantized training without master weights.

Public names:
    formats: the :class:`~ecosim.formats.Format` records, :func:`~ecosim.formats.get`, custom
        formats, encode/decode to real low-precision storage.
    quantize: RTN and SR rounding onto a format's grid, exact.
    Quantizer: scaled quantization (tensor/row/column/group; absmax, power-of-two, absmean or
        fixed scales) to dequantized values or real low-precision storage.
    rng: counter-based random bits (a pure function of key and counter).
"""

from . import formats, rng
from .formats import Format
from .quantizer import Encoded, Quantizer
from .rounding import quantize

__version__ = "0.1.0"

__all__ = ["Encoded", "Format", "Quantizer", "formats", "quantize", "rng", "__version__"]
