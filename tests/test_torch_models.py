"""Stored weights on the layers real models use, and back: ecosim.torch on third-party models.

Covers ``torch.compile`` of stored layers, the stored convolution / ``Conv1D`` /
``MultiheadAttention`` layers (forward and backward against the plain layer holding the
dequantized weights, bit for bit on the CPU), :func:`ecosim.torch.quantize_model`,
:func:`ecosim.torch.unstore_weights`, in-place writes and EMA on stored weights, dtype
conversions, and an end-to-end run on transformers models built from configs (skipped where
transformers is not installed).
"""

import copy

import pytest

torch = pytest.importorskip("torch")

import ecosim.torch as et  # noqa: E402
from ecosim.torch.nn import QuantizedLinear, stored  # noqa: E402
from ecosim.torch.optim import ECOAdamW  # noqa: E402

nn = torch.nn


# -- torch.compile -------------------------------------------------------------------------------

# torch 2.13's dynamo instantiates an autograd.Function while tracing one and warns about it
_DYNAMO_WARNING = "ignore:.*should not be instantiated:DeprecationWarning"


@pytest.mark.filterwarnings(_DYNAMO_WARNING)
@pytest.mark.parametrize("scheme", ["master", "naive", "eco"])
def test_compile_fresh_stored_layer(scheme):
    """A freshly built layer (no weight decoded before) compiles: forward, backward and the
    optimizer step equal eager execution bit for bit (backend aot_eager: the traced graph run
    by torch's own kernels; inductor also runs but takes ~30 s per graph on one CPU)."""
    torch._dynamo.reset()
    q = et.Quantizer("e4m3", "sr", granularity="row")
    torch.manual_seed(0)
    lin = nn.Linear(16, 8)
    x = torch.randn(4, 16)
    runs = []
    for compiled in (False, True):
        layer = QuantizedLinear.from_linear(lin, q, key=3, name="w")
        opt = ECOAdamW([layer.weight, layer.bias], 1e-2, scheme=scheme, key=3)
        f = torch.compile(layer, backend="aot_eager", fullgraph=True) if compiled else layer
        y = f(x)
        y.square().sum().backward()
        grad = layer.weight.grad.clone()
        opt.step()
        runs.append((y.detach(), grad, layer.codes.clone(), layer.scales.clone()))
    for a, b in zip(*runs):
        assert torch.equal(a, b)
