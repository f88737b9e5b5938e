"""The scheme records (ecosim.optim.schemes): one registry that the optimizers, the memory
accounting and the torch mirror all read, and the shared real-number checks (ecosim.checks)."""
import dataclasses
import doctest

import numpy as np
import pytest

from ecosim import Quantizer, memory
from ecosim.checks import check_positive, check_real
from ecosim.optim import ADAMW_SCHEMES, SCHEMES, adamw, muon, schemes, sgdm
from ecosim.optim.schemes import REGISTRY, Scheme, get, names_for, torch_names_for

Q = Quantizer("e4m3", "sr", granularity="row")


def test_docstring_examples_run():
    res = doctest.testmod(schemes)
    assert res.attempted > 0 and res.failed == 0


def test_the_scheme_lists_come_from_the_registry():
    assert SCHEMES == ("fp", "master", "naive", "eco", "eco_exact", "kahan")
    assert ADAMW_SCHEMES == names_for("adamw")
    assert ADAMW_SCHEMES[:len(SCHEMES)] == SCHEMES
    assert names_for("sgdm") == names_for("muon") == SCHEMES
    assert set(torch_names_for("sgdm")) <= set(names_for("sgdm")) - {"fp"}
    with pytest.raises(ValueError, match="scheme must be one of"):
        get("nope")


@pytest.mark.parametrize("scheme", ADAMW_SCHEMES)
def test_every_optimizer_keeps_the_buffers_its_scheme_declares(scheme):
    """The state holds exactly the record's buffers (besides the moments), and the memory
    formula counts exactly those."""
    p = {"W": np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)}
    opts = [adamw(1e-2, scheme=scheme, weights=None if scheme == "fp" else Q)]
    if scheme in SCHEMES:
        opts += [sgdm(0.05, scheme=scheme, weights=None if scheme == "fp" else Q),
                 muon(0.02, scheme=scheme, weights=None if scheme == "fp" else Q)]
    for opt in opts:
        w, st = opt.init(p, key=0)
        w, st = opt.step(w, {"W": np.ones((3, 4), np.float32)}, st)
        held = {b for b in ("master", "e_prev", "c") if getattr(st, b) is not None}
        assert held == set(get(scheme).buffers), (opt.name, scheme)
        moments = ("m", "v") if opt.name == "adamw" else ("m",)
        assert opt.state_buffers("W", (3, 4)) == moments + get(scheme).buffers
        formula = memory.bytes_per_param(opt.name, scheme, weights=Q)
        assert {b for b in ("master", "e_prev", "c") if getattr(formula, b)} == held


def test_a_record_is_checked():
    with pytest.raises(ValueError, match="base in"):
        Scheme("x", "", base="elsewhere")
    with pytest.raises(ValueError, match="exact is set exactly"):
        Scheme("x", "", after="exact")
    with pytest.raises(ValueError, match="buffers among"):
        Scheme("x", "", buffers=("z",))


def test_base_values_and_the_exact_schemes_route():
    w, bufs = np.float64(1.0), {"master": 5.0, "c": 0.25, "e_prev": 0.5}
    load = bufs.__getitem__
    assert get("master").base_value(w, load, pending=False, linear=True) == 5.0
    assert get("kahan").base_value(w, load, pending=False, linear=True) == 1.25
    assert get("eco").base_value(w, load, pending=True, linear=False) == 1.0
    exact = get("eco_exact")
    # SGDM (linear): carried in the momentum unless pending; AdamW and Muon: feedback.
    assert exact.base_value(w, load, pending=False, linear=True) == 1.0
    assert exact.base_value(w, load, pending=True, linear=True) == 1.5
    assert exact.base_value(w, load, pending=False, linear=False) == 1.5
    mexact = get("eco_momentum_exact")
    assert mexact.base_value(w, load, pending=False, linear=False) == 1.0
    assert mexact.through_momentum(False) and not exact.through_momentum(False)


def test_coefficient_is_eco_times_decay_when_corrected():
    eco = get("eco")
    assert eco.coefficient(100.0, 0.9) == 100.0 * (1.0 - 1.0 / 0.9)
    corrected = dataclasses.replace(eco, decay_corrected=True)
    assert corrected.coefficient(100.0, 0.9, 0.99) == (100.0 * (1.0 - 1.0 / 0.9)) * 0.99


def test_the_shared_real_checks():
    assert check_real(np.float32(0.25), "x") == 0.25
    assert check_positive(0, "wd", allow_zero=True) == 0.0
    for bad, err in ((True, TypeError), ("1", TypeError), (float("nan"), ValueError)):
        with pytest.raises(err, match="x must be"):
            check_real(bad, "x")
    with pytest.raises(ValueError, match="lr must be > 0"):
        check_positive(0.0, "lr")
    with pytest.raises(ValueError, match="weight_decay must be >= 0"):
        sgdm(0.1, weight_decay=-1.0, scheme="fp")
    with pytest.raises(ValueError, match="eco_gain must be >= 0"):
        muon(0.1, scheme="fp", eco_gain=-1.0)
