"""Test problems: quadratics, Rosenbrock and a NumPy MLP, behind one protocol.

See :mod:`ecosim.problems.base` for the protocol (``init``, ``loss``, ``grad``, ``batch``,
``optimum``, ``f_star``, ``has_validation``, ``val_loss``).
"""
from .base import Problem, keyed_rng
from .mlp import MLP, DataBatch, ParamInfo
from .quadratic import NoiseBatch, Quadratic
from .quantized import QuantizedForward, bitnet_quantizers
from .rosenbrock import Rosenbrock

__all__ = [
    "DataBatch",
    "MLP",
    "NoiseBatch",
    "ParamInfo",
    "Problem",
    "Quadratic",
    "QuantizedForward",
    "Rosenbrock",
    "bitnet_quantizers",
    "keyed_rng",
]
