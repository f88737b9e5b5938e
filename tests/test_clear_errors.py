"""Errors that say what is wrong: a float32 input for a format only float64 holds, a
non-integer format width, a torch gradient with NaN (the NumPy backend's exception class),
and a torch parameter resized after its optimizer state was built.
"""

import numpy as np
import pytest

import ecosim
from ecosim import formats
from ecosim.core.checks import NonFiniteError

torch = pytest.importorskip("torch")

import ecosim.torch as et  # noqa: E402


def test_float32_input_for_a_float64_format_asks_for_float64():
    f = formats.custom(11, 52)
    with pytest.raises(ValueError, match="not all representable in float32.*pass float64 input"):
        ecosim.quantize(np.ones(3, np.float32), f)
    with pytest.raises(ValueError, match="in torch.float32.*pass float64 input"):
        et.quantize(torch.ones(3), f)
    assert ecosim.quantize(np.ones(3), f).dtype == np.float64
    with pytest.raises(ValueError, match="in float16.*pass float32 or float64 input"):
        ecosim.quantize(np.ones(3, np.float16), "bfloat16")


@pytest.mark.parametrize("args", [(4.0, 3), (4, 3.5), (True, 3)])
def test_format_widths_must_be_ints(args):
    with pytest.raises(TypeError, match="must be an int"):
        formats.custom(*args)


def _stored_model():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    et.quantize_model(m, et.Quantizer("float8_e4m3fn"))
    return m


def test_torch_nonfinite_gradient_is_numpys_exception():
    m = _stored_model()
    opt = et.ECOAdamW(m.parameters(), lr=1e-2)
    m(torch.full((2, 4), float("nan"))).sum().backward()
    with pytest.raises(NonFiniteError, match="gradient of parameter .* non-finite"):
        opt.step()
    with pytest.raises(ecosim.optim.NonFiniteGradient):
        opt.step()


def test_torch_parameter_resized_after_its_state_names_it():
    m = _stored_model()
    opt = et.ECOAdamW(m.parameters(), lr=1e-2)
    m(torch.ones(2, 4)).sum().backward()
    opt.step()
    bias = m[1].bias
    with torch.no_grad():
        bias.data = torch.zeros(5)
    bias.grad = torch.ones(5)
    with pytest.raises(ValueError, match=r"parameter '3' has shape \(5,\) but its optimizer "
                                         r"states were built for \(2,\): was it resized"):
        opt.step()
