"""Input checks shared by the NumPy core and the torch backend, under public names.

:func:`native` gives an array the machine's byte order (dtype dispatch compares dtypes by
equality, and ``np.dtype(">f4") != np.float32``), :func:`check_bool` refuses a non-bool option
with a one-line error, :func:`check_real` and :func:`check_positive` read a finite real
option (one message for every optimizer, schedule and problem), and :class:`NonFiniteError`
(with its subclass :class:`NonFiniteGradient`) is the error a step raises on NaN or inf, which
:func:`ecosim.train.train` records as a divergence (:func:`scale_error` words it for a quantizer's
scale). They are defined in ``ecosim._checks``;
packages other than ``ecosim`` itself (``ecosim.torch``, ``ecosim.optim``) import them from here.

Example:
    >>> check_bool(True, "saturate")
    True
"""

from ._checks import (NonFiniteError, NonFiniteGradient, check_bool, check_positive, check_real,
                      native, scale_error)

__all__ = ["native", "check_bool", "check_real", "check_positive", "NonFiniteError",
           "NonFiniteGradient", "scale_error"]
