"""Stored modules inside ordinary PyTorch loops: torch.func and dtype moves (issue 27).

Reproducers of open defects are strict xfails: each turns into a failure (XPASS) the
moment its fix lands, so the marker must then be removed.
"""
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from ecosim.torch import Quantizer, quantize_model  # noqa: E402

pytestmark = pytest.mark.torch


def _model(*layers):
    torch.manual_seed(0)
    m = nn.Sequential(*layers)
    quantize_model(m, Quantizer("e4m3", granularity="row"))
    return m


@pytest.mark.xfail(strict=True, reason="issue 27 finding 3: substituted stored weight ignored")
def test_functional_call_honours_a_substituted_weight():
    m = _model(nn.Linear(4, 3, bias=False))
    x = torch.ones(2, 4)
    w = torch.zeros(3, 4)
    y = torch.func.functional_call(m, {"0.weight": w}, (x,))
    assert torch.equal(y, torch.zeros(2, 3))


@pytest.mark.xfail(strict=True, reason="issue 27 finding 3: no setup_context for torch.func")
def test_torch_func_grad_runs_on_a_stored_model():
    m = _model(nn.Linear(4, 3))
    params = {k: v.detach() for k, v in m.named_parameters() if k == "0.bias"}
    g = torch.func.grad(lambda p, x: torch.func.functional_call(m, p, (x,)).sum())(
        params, torch.ones(2, 4))
    assert torch.equal(g["0.bias"], torch.full((3,), 2.0))


def test_to_bfloat16_moves_a_stored_conv2d():
    m = _model(nn.Conv2d(3, 8, 3))
    m.to(torch.bfloat16)
    y = m(torch.ones(1, 3, 5, 5, dtype=torch.bfloat16))
    assert y.dtype == torch.bfloat16
