"""Static memory: the formula (the paper's 12 -> 9 bytes/param), exact byte counts for given
shapes, and the real nbytes of what a run's state holds, which must agree."""
import doctest
import math

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from ecosim import Quantizer
from ecosim.memory import (
    Memory,
    ModelSpec,
    bytes_per_param,
    code_bytes,
    measured_bytes,
    model_memory,
    n_scales,
    static_bytes,
)
from ecosim.optim import SCHEMES, adamw, dqt, sgdm
from ecosim.problems import MLP

MLPS = MLP((8, 16, 8, 4), n_train=64, n_val=16, key=0)  # every last axis divisible by 4


def test_docstring_examples_run():
    import ecosim.memory

    res = doctest.testmod(ecosim.memory)
    assert res.attempted > 0 and res.failed == 0


def test_paper_numbers_adamw():
    master = bytes_per_param("adamw", "master")
    eco = bytes_per_param("adamw", "eco")
    assert master == Memory(master=4.0, m=4.0, v=4.0) and master.total == 12
    assert eco == Memory(weights=1.0, m=4.0, v=4.0) and eco.total == 9
    assert 1 - eco.total / master.total == 0.25
    assert bytes_per_param("adamw", "naive").total == 9
    assert bytes_per_param("adamw", "fp").total == 12
    assert bytes_per_param("adamw", "eco_exact").total == 13  # a reference, not a saving
    assert bytes_per_param("adamw", "kahan").total == 10
    assert bytes_per_param("adamw", "master", count_working_copy=True).total == 13
    assert bytes_per_param("adamw", "eco", states={"m": "bf16", "v": "bf16"}).total == 5
    assert bytes_per_param("adamw", "eco", weights="int4").total == 8.5
    assert bytes_per_param("adamw", "eco", weights=Quantizer("ternary", scale="absmean")
                           ).total == 8.25
    assert bytes_per_param("adamw", "master", dtype=np.float64).total == 24


def test_paper_numbers_sgdm():
    assert bytes_per_param("sgdm", "master").total == 8
    assert bytes_per_param("sgdm", "eco").total == 5
    assert bytes_per_param("sgdm", "eco", states={"m": "e4m3"}).total == 2


def test_scales_add_bytes_per_block():
    ncols = 2048
    eco = bytes_per_param("adamw", "eco", block=ncols)
    assert eco.weights == 1 + 4 / ncols and eco.total == 9 + 4 / ncols
    kahan = bytes_per_param("adamw", "kahan", block=ncols)
    assert kahan.c == 1 + 4 / ncols
    pow2 = bytes_per_param("adamw", "eco", weights=Quantizer("e4m3", scale="absmax_pow2",
                                                               granularity=32), block=32)
    assert pow2.weights == 1 + 1 / 32  # E8M0 scales: one byte per 32 values (MX)


def test_formula_from_an_optimizer_object():
    opt = adamw(1e-3, scheme="eco", weights=Quantizer("e4m3", granularity="row"),
                states={"m": "bf16"})
    assert bytes_per_param(opt).total == 1 + 2 + 4
    with pytest.raises(ValueError, match="one weight quantizer"):
        bytes_per_param(sgdm(0.1, scheme="eco", weights={"W0": Quantizer("e4m3")}))
    with pytest.raises(ValueError, match="optimizer"):
        bytes_per_param("sophia")


@pytest.mark.parametrize("fmt,nbytes", [("e4m3", 1), ("e5m2", 1), ("e2m3", 1), ("int8", 1),
                                        ("bf16", 2), ("fp16", 2), ("int4", 0.5), ("fp4", 0.5),
                                        ("int2", 0.25), ("ternary", 0.25)])
def test_code_bytes_match_encode(fmt, nbytes):
    assert code_bytes(fmt) == nbytes
    x = np.random.default_rng(0).standard_normal((7, 9)).astype(np.float32)
    enc = Quantizer(fmt).encode(x)
    assert enc.codes.nbytes == code_bytes(fmt, x.size) == math.ceil(x.size * nbytes)


@pytest.mark.parametrize("q", [
    Quantizer("e4m3"), Quantizer("e4m3", granularity="row"),
    Quantizer("e4m3", granularity="column"),
    Quantizer("int4", granularity=4), Quantizer("e4m3", granularity=4, scale="absmax_pow2"),
    Quantizer("int8", scale=0.25), Quantizer("ternary", scale="absmean")])
@pytest.mark.parametrize("shape", [(8, 12), (3, 4, 8), (16,)])
def test_n_scales_matches_the_quantizer(q, shape):
    if q.granularity == "column" and len(shape) == 1:  # both refuse a 1-D array
        for f in (lambda: n_scales(q, shape), lambda: q.scales(np.zeros(shape, np.float32))):
            with pytest.raises(ValueError, match="granularity='column' needs an array of 2"):
                f()
        return
    assert n_scales(q, shape) == q.scales(np.zeros(shape, np.float32)).size


WEIGHTS = {
    "e4m3_row_sr": Quantizer("e4m3", "sr", granularity="row"),
    "int4_group": Quantizer("int4", granularity=4),
    "e4m3_mx": Quantizer("e4m3", granularity=4, scale="absmax_pow2", pow2="ceil"),
    "ternary": Quantizer("ternary", "sr", scale="absmean"),
    "int8_fixed": Quantizer("int8", "sr", scale=2.0**-6),
}
STATES = {"fp32": None, "bf16": "bf16", "e4m3": "e4m3"}


def _opt(name, scheme, weights, states):
    st = None if states is None else ({"m": states} if name == "sgdm" else
                                      {"m": states, "v": states})
    make = (lambda **kw: sgdm(0.05, 0.9, **kw)) if name == "sgdm" else (
        lambda **kw: adamw(1e-2, weight_decay=0.1, **kw))
    return make(scheme=scheme, weights=None if scheme == "fp" else weights, states=st)


def _trained(opt, params, steps=3, dtype=np.float32):
    w, st = opt.init(params, key=0)
    for t in range(steps):
        g = {k: np.cos(v + t).astype(dtype) for k, v in w.items()} if isinstance(w, dict) \
            else np.cos(w + t)
        w, st = opt.step(w, g, st)
    return w, st


@pytest.mark.parametrize("states", list(STATES))
@pytest.mark.parametrize("wname", list(WEIGHTS))
@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("name", ["sgdm", "adamw"])
def test_formula_equals_measured(name, scheme, wname, states):
    opt = _opt(name, scheme, WEIGHTS[wname], STATES[states])
    params = MLPS.init(1)
    w, st = _trained(opt, params)
    shapes = {k: v.shape for k, v in params.items()}
    for copy_ in (False, True):
        formula = static_bytes(opt, shapes, count_working_copy=copy_)
        measured = measured_bytes(opt, w, st, count_working_copy=copy_)
        assert formula == measured
        assert all(isinstance(x, int) for x in measured)


def test_formula_equals_measured_for_policies_dqt_bare_arrays_and_float64():
    q = Quantizer("e4m3", "sr", granularity="row")
    shapes = {k: v.shape for k, v in MLPS.init(1).items()}
    for opt in (adamw(1e-2, scheme="eco", weights={n: q for n in MLPS.quantized_names("hidden")}),
                sgdm(0.05, scheme="master", weights={"W0": q}),
                dqt(1e-2, 8, base="adamw"), dqt(0.05, "ternary", base="sgdm", names=["W1"])):
        w, st = _trained(opt, MLPS.init(1))
        assert static_bytes(opt, shapes) == measured_bytes(opt, w, st)
    opt = adamw(1e-2, scheme="kahan", weights=q, states={"m": "bf16"})
    x = np.linspace(-1, 1, 40).reshape(5, 8)
    w, st = _trained(opt, x, dtype=np.float64)
    assert static_bytes(opt, x.shape, dtype=np.float64) == measured_bytes(opt, w, st)
    # float64 runs keep float64 scales: 8 bytes per row
    assert measured_bytes(opt, w, st).weights == 40 + 5 * 8


def test_what_is_measured_is_really_held():
    """The encoded weights decode to exactly the stored weights: the bytes counted are a
    faithful storage of what the model uses."""
    q = Quantizer("e4m3", "sr", granularity="row")
    opt = adamw(1e-2, scheme="eco", weights=q, states={"m": "bf16", "v": "e4m3"})
    w, st = _trained(opt, MLPS.init(1))
    for k, v in w.items():
        rq = Quantizer("e4m3", granularity="row")
        assert_array_equal(rq.decode(rq.encode(v)), v)
        sq = opt.states["m"]
        assert_array_equal(sq.decode(sq.encode(st.m[k])), st.m[k])


def test_per_param_measurement_matches_bytes_per_param_with_blocks():
    shape = (64, 256)
    q = Quantizer("e4m3", granularity="row")
    for scheme in SCHEMES:
        opt = adamw(1e-3, scheme=scheme, weights=None if scheme == "fp" else q)
        w, st = _trained(opt, {"W": np.random.default_rng(0).standard_normal(shape)
                               .astype(np.float32)})
        measured = measured_bytes(opt, w, st) / (64 * 256)
        formula = bytes_per_param("adamw", scheme, weights=q, block=shape[1])
        assert measured == pytest.approx(formula, rel=1e-12), scheme


def test_model_memory_reproduces_12_to_9_and_moe():
    only = ModelSpec("quantized layers only", quantized=10**9)
    master, eco = model_memory(only, scheme="master"), model_memory(only, scheme="eco")
    assert (master.per_param, eco.per_param, eco.saving) == (12.0, 9.0, 0.25)
    assert master.bytes == 12e9 and eco.baseline_bytes == 12e9
    # the paper's 800M shape: embeddings and norms stay FP32 with master weights
    spec = ModelSpec.llama(2048, 16)
    assert spec.quantized == 16 * (4 * 2048**2 + 3 * 2048 * 5504)
    eco800 = model_memory(spec, scheme="eco")
    assert 9 < eco800.per_param < 12 and 0 < eco800.saving < 0.25
    assert eco800.per_active_param == eco800.per_param  # dense
    # mixture of experts: memory follows total parameters, compute the active ones
    moe = ModelSpec.moe(2048, 16, n_experts=64, top_k=4, expert_hidden=1024, shared_experts=1)
    assert moe.active < moe.total
    m_master, m_eco = model_memory(moe, scheme="master"), model_memory(moe, scheme="eco")
    assert m_eco.per_active_param > 9 * moe.total / moe.active * 0.99
    assert m_eco.saving == pytest.approx(0.25 * moe.quantized * 12 / m_master.bytes)
    assert model_memory(only, scheme="eco", states={"m": "bf16", "v": "bf16"}).per_param == 5
