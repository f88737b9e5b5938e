"""ecosim: bit-exact low-precision formats and quantized training without master weights."""

__version__ = "0.1.0"

__all__ = ["__version__"]
