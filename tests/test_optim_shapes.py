"""A step whose parameters and gradients have another shape than the state's buffers is
refused with one line naming the parameter and both shapes, for every NumPy optimizer and
scheme; before, NumPy broadcast the buffer against the gradient, which either failed with a
message naming no parameter or (an ``(n, 1)`` or ``(m,)`` parameter against an ``(n, m)``
momentum) silently returned weights of the state's shape."""
from __future__ import annotations

import re

import numpy as np
import pytest

from ecosim import Quantizer
from ecosim.optim import SCHEMES, adamw, dqt, muon, sgdm

Q = Quantizer("float8_e4m3fn", granularity="row")
OPTIMIZERS = [
    *[(f"adamw_{s}", lambda s=s: adamw(1e-3, scheme=s, weights=None if s == "fp" else Q))
      for s in (*SCHEMES, "eco_momentum_exact")],
    *[(f"sgdm_{s}", lambda s=s: sgdm(1e-3, scheme=s, weights=None if s == "fp" else Q))
      for s in SCHEMES],
    ("muon", lambda: muon(1e-3, weights=Q)),
    ("dqt", lambda: dqt(1e-3, 8)),
]


@pytest.mark.parametrize("name, make", OPTIMIZERS, ids=[n for n, _ in OPTIMIZERS])
@pytest.mark.parametrize("shape", [(4, 3), (3, 1), (4,), (2,)])
def test_state_of_another_shape_is_refused(name, make, shape):
    opt = make()
    params = {"w": np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4),
              "b": np.ones(4, np.float32)}
    _, state = opt.init(params)
    p = dict(params, w=np.ones(shape, np.float32))
    g = {k: np.full(v.shape, 0.5, np.float32) for k, v in p.items()}
    want = (r"^state buffer '\w+' of parameter 'w' has shape \(3, 4\), the parameter and its "
            rf"gradient {re.escape(str(shape))}: pass the state that init built")
    with pytest.raises(ValueError, match=want) as err:
        opt.step(p, g, state)
    assert "\n" not in str(err.value)
    opt.step(params, {k: np.full(v.shape, 0.5, np.float32) for k, v in params.items()}, state)


def test_bare_array_state_of_another_shape_is_refused():
    opt = adamw(1e-3, weights=Q)
    _, state = opt.init(np.ones((3, 4), np.float32))
    with pytest.raises(ValueError, match=r"parameter '' has shape \(3, 4\), the parameter and "
                                         r"its gradient \(3, 1\)"):
        opt.step(np.ones((3, 1), np.float32), np.ones((3, 1), np.float32), state)

