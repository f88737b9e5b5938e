"""Nothing loaded or keyed silently means something else: an ECO optimizer's state loaded
into another scheme is refused, a loaded SR key that replaces the optimizer's is reported,
keys of 2**64 and above are refused (reduced, they would repeat key 0's streams), and a
column-scaled quantizer refuses a 1-D array (each element would be its own block).
"""

import warnings

import numpy as np
import pytest

from ecosim import Quantizer, rng

torch = pytest.importorskip("torch")

import ecosim.torch as et  # noqa: E402


def _model(scheme, key=0):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))
    et.quantize_model(m, et.Quantizer("float8_e4m3fn", mode="sr"))
    opt = et.ECOAdamW(m.parameters(), lr=1e-2, scheme=scheme, key=key)
    x = torch.randn(4, 8)
    m(x).square().mean().backward()
    opt.step()
    return m, opt


@pytest.mark.parametrize("saved,now", [("eco", "master"), ("eco", "naive"),
                                       ("master", "eco"), ("kahan", "master")])
def test_state_of_another_scheme_is_refused(saved, now):
    _, a = _model(saved)
    sd = a.state_dict()
    _, b = _model(now)
    before = {k: v.clone() for k, v in b.state[b.param_groups[0]["params"][0]].items()
              if isinstance(v, torch.Tensor)}
    with pytest.raises(ValueError, match=f"scheme={saved!r}.*scheme={now!r}"):
        b.load_state_dict(sd)
    after = b.state[b.param_groups[0]["params"][0]]
    assert all(torch.equal(after[k], v) for k, v in before.items())  # nothing loaded
    # a state without the scheme's name (saved by hand, or older) is judged by its buffers
    sd.pop("ecosim_scheme")
    if {saved, now} & {"master", "kahan"}:
        with pytest.raises(ValueError, match="scheme buffers"):
            b.load_state_dict(sd)


def test_same_scheme_loads_and_a_new_key_is_reported():
    _, a = _model("master", key=3)
    sd = a.state_dict()
    _, b = _model("master", key=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        b.load_state_dict(sd)
    _, c = _model("master", key=4)
    with pytest.warns(UserWarning, match="SR key 3 replaces this optimizer's key 4"):
        c.load_state_dict(sd)
    assert c.param_groups[0]["key"] == 3  # as torch.optim restores the group's options


@pytest.mark.parametrize("key", [2**64, 2**64 + 5, 2**70])
def test_keys_of_2_64_and_above_are_refused(key):
    with pytest.raises(ValueError, match="below 2\\*\\*64"):
        rng.as_key(key)
    with pytest.raises(ValueError, match="below 2\\*\\*64"):
        rng.random_bits(key, 0, 4)


def test_largest_key_and_wrapping_counters_still_work():
    top = 2**64 - 1
    assert rng.as_key(top) == top
    # a stream's counters wrap as a 64-bit word does
    assert np.array_equal(rng.random_bits(7, 2**64, 3), rng.random_bits(7, 0, 3))


def test_experiment_key_of_2_64_is_a_config_error():
    from ecosim import experiments as ex

    with pytest.raises((ValueError, ex.ConfigError), match="2\\*\\*64"):
        ex.get("rtn_stall").default_config(smoke=True).replace(key=2**64)
    with pytest.raises(ex.ConfigError, match="2\\*\\*64"):
        ex.get("rtn_stall").default_config().override(["key=18446744073709551616"])


def test_column_scales_refuse_a_1d_array():
    q = Quantizer("int4", granularity="column")
    with pytest.raises(ValueError, match="granularity='column' needs an array of 2 or more"):
        q(np.ones(8, np.float32))
    assert q(np.ones((2, 8), np.float32)).shape == (2, 8)
    tq = et.Quantizer("int4", granularity="column")
    with pytest.raises(ValueError, match="granularity='column' needs an array of 2 or more"):
        tq(torch.ones(8))
