"""Input checks shared by the public entry points: byte order of arrays, bool options.

Every dtype dispatch in ecosim compares dtypes by equality, and NumPy's dtype equality includes
the byte order (``np.dtype(">f4") != np.float32``). Arrays therefore enter the numeric paths
through :func:`native`, which gives them the machine's byte order (values unchanged).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["native", "check_bool", "NonFiniteError", "NonFiniteGradient"]


class NonFiniteError(ValueError):
    """NaN or inf where a step needs finite values: a gradient, or the input of a
    data-dependent scale (a moment that overflowed on its way to a divergence).

    A :class:`ValueError`, so code that catches bad input keeps working;
    :func:`ecosim.train.train` catches this class (and only it) to record a divergence.
    """


class NonFiniteGradient(NonFiniteError):
    """A gradient holds NaN or inf: the optimizer refuses to write it into the weights."""


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
