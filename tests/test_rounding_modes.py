"""The Rounding record: checked once, and it carries everything a rounding needs."""

import re

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import ecosim
from ecosim import formats
from ecosim.rounding_modes import MODES, RULES, Rounding

def _bits(a):
    a = np.asarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


# -- the record --------------------------------------------------------------------------------

def test_modes_are_the_rules_and_the_record_normalises():
    assert MODES == ("rtn", "sr") and tuple(RULES) == MODES
    assert [RULES[m].stochastic for m in MODES] == [False, True]
    assert Rounding("rtn", nbits=8, sr_rule="nearest") == Rounding("rtn")
    assert Rounding("sr", nbits=8) != Rounding("sr")
    r = Rounding("sr", 8, "nearest", np.bool_(False))
    assert (r.nbits, r.sr_rule, r.saturate, r.stochastic) == (8, "nearest", False, True)
    assert type(r.saturate) is bool
    assert Rounding.of(r) is r and Rounding.of("sr", 8) == Rounding("sr", 8)


@pytest.mark.parametrize("args, err", [
    (("round",), f"mode must be one of {MODES}, got 'round'"),
    ((None,), "mode must be one of"),
    (("sr", 0), "nbits must be an int in 1..32, got 0"),
    (("sr", True), "nbits must be an int in 1..32, got True"),
    (("rtn", 33), "nbits must be an int in 1..32"),  # checked even where it is not read
    (("sr", 8, "up"), "sr_rule must be one of ('floor', 'nearest'), got 'up'"),
])
def test_bad_roundings_are_one_line_errors(args, err):
    with pytest.raises(ValueError, match=re.escape(err)):
        Rounding(*args)


def test_a_rounding_beside_its_own_fields_is_refused():
    with pytest.raises(ValueError, match="a Rounding carries nbits"):
        ecosim.quantize(np.ones(3, np.float32), "e4m3", Rounding("sr"), nbits=8, key=0)
    with pytest.raises(TypeError, match="saturate"):
        Rounding("rtn", saturate=1)


def test_a_rounding_is_the_same_as_its_fields_everywhere():
    x = np.random.default_rng(0).standard_normal((6, 40)).astype(np.float32) * 3
    r = Rounding("sr", nbits=5, sr_rule="nearest")
    want = ecosim.quantize(x, "e4m3", "sr", nbits=5, sr_rule="nearest", key=4)
    assert_array_equal(_bits(ecosim.quantize(x, "e4m3", r, key=4)), _bits(want))
    q = ecosim.Quantizer("e4m3", r, granularity="row")
    assert (q.mode, q.nbits, q.sr_rule, q.rounding) == ("sr", 5, "nearest", r)
    assert q == ecosim.Quantizer("e4m3", "sr", granularity="row", nbits=5, sr_rule="nearest")
    assert_array_equal(_bits(q(x, key=4)), _bits(ecosim.Quantizer(
        "e4m3", "sr", granularity="row", nbits=5, sr_rule="nearest")(x, key=4)))
    with pytest.raises(ValueError, match="nbits must be an int in 1..32"):
        ecosim.Quantizer("e4m3", "sr", nbits=40)  # checked when the quantizer is built
