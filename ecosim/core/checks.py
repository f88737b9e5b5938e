"""Input checks shared by the NumPy core, the optimizers and the torch backend.

:func:`native` gives an array the machine's byte order: every dtype dispatch in ecosim compares
dtypes by equality, and NumPy's dtype equality includes the byte order (``np.dtype(">f4") !=
np.float32``), so arrays enter the numeric paths through it (values unchanged).
:func:`check_bool` refuses a non-bool option with a one-line error, :func:`check_real` and
:func:`check_positive` read a finite real option (one message for every optimizer, schedule and
problem), and :class:`NonFiniteError` (with its subclass :class:`NonFiniteGradient`) is the
error a step raises on NaN or inf, which :func:`ecosim.train.train` records as a divergence
(:func:`scale_error` words it for a quantizer's scale).

Example:
    >>> check_bool(True, "saturate")
    True
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

__all__ = ["native", "check_bool", "check_real", "check_positive", "NonFiniteError",
           "NonFiniteGradient", "scale_error"]


class NonFiniteError(ValueError):
    """NaN or inf where a step needs finite values: a gradient, or the input of a
    data-dependent scale (a moment that overflowed on its way to a divergence).

    A :class:`ValueError`, so code that catches bad input keeps working;
    :func:`ecosim.train.train` catches this class (and only it) to record a divergence.
    """


class NonFiniteGradient(NonFiniteError):
    """A gradient holds NaN or inf: the optimizer refuses to write it into the weights."""


def scale_error(n_nonfinite: int, dtype: Any) -> NonFiniteError:
    """The error of a data-dependent scale that is not finite, for both backends' quantizers.

    ``n_nonfinite`` is the count of NaN/inf in the input; with none, the scale itself overflowed
    ``dtype`` (an absmean of finite values near the top of the range: the block's sum exceeds
    it), which is said as such rather than as "0 non-finite values".
    """
    if n_nonfinite:
        return NonFiniteError(f"input has {n_nonfinite} non-finite values; a data-dependent "
                              "scale is undefined (check gradients/updates for inf/NaN)")
    name = str(dtype).removeprefix("torch.")
    return NonFiniteError(f"the absmean scale overflowed {name}: a block's mean |x| exceeds "
                          "its range though every input is finite; use scale='absmax'")


def native(arr: np.ndarray, *, copy: bool = False) -> np.ndarray:
    """``arr`` with its dtype in the machine's byte order; the values are unchanged.

    A non-native (byte-swapped) array becomes a converted copy; a native one is returned as is
    (or copied when ``copy`` is true). The input is never modified.

    Example:
        >>> import numpy as np
        >>> big = np.array([1.5, -2.0], ">f4")
        >>> y = native(big)
        >>> y.dtype == np.float32, y.tolist(), big.dtype.byteorder
        (True, [1.5, -2.0], '>')
    """
    if not arr.dtype.isnative:
        return arr.astype(arr.dtype.newbyteorder("="))
    return arr.copy() if copy else arr


def check_bool(value: Any, name: str) -> bool:
    """``value`` as a Python bool; anything but a bool or a NumPy bool raises TypeError.

    A string such as ``"no"`` is truthy, so options are never read through ``bool(value)``.

    Example:
        >>> check_bool(np.True_, "saturate")
        True
        >>> check_bool("no", "saturate")
        Traceback (most recent call last):
        ...
        TypeError: saturate must be a bool (True or False), got 'no' (str)
    """
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{name} must be a bool (True or False), got {value!r} "
                    f"({type(value).__name__})")


def check_real(value: Any, name: str) -> float:
    """``value`` as a float if it is a finite real number (not a bool), else TypeError (not a
    real number) or ValueError (NaN or inf).

    Example:
        >>> check_real(np.float32(0.5), "lr")
        0.5
        >>> check_real(True, "lr")
        Traceback (most recent call last):
        ...
        TypeError: lr must be a real number, got bool True
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return value


def check_positive(value: Any, name: str, *, allow_zero: bool = False) -> float:
    """``value`` as a float if it is a finite real number > 0 (``>= 0`` with ``allow_zero``),
    else the errors of :func:`check_real` or ValueError.

    Example:
        >>> check_positive(0, "weight_decay", allow_zero=True)
        0.0
        >>> check_positive(0, "lr")
        Traceback (most recent call last):
        ...
        ValueError: lr must be > 0, got 0.0
    """
    value = check_real(value, name)
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return value
