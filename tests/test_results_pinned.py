"""Experiments over the one training loop keep their results bit for bit.

Every experiment that trains goes through :func:`ecosim.train.train` (mlp_methods, the
low-precision experiments and rtn_stall are adapters over it). This pins the sha256 of a
few smoke-size units' results (name, dtype, shape and bytes of every array, names sorted). The
digests pin what each unit computes, whichever loop runs it: any change in what a run computes
(the loop, an optimizer, a rounding rule, a problem) makes this fail. The units cover the
stop rule (mlp_methods), a divergence (mlp_states' E4M3-SR states, seed 0, diverges at its
first update), Muon, compressed states and the RTN stall's per-step trajectory.

The digests hold per platform (``platform_pins``): MLP and Muon runs go through BLAS
products, whose last bits another BLAS kernel may legitimately change, and NumPy's
transcendental functions (exp, tanh, log) have other vector paths on other CPUs (AVX-512
against AVX2). So each platform of ``platform_pins.PLATFORMS`` has its digests, checked where
this machine computes as that platform; elsewhere the test skips, saying why. The ``avx512``
digests were computed on an AVX-512 x86-64 from the code the ``avx2`` ones come from, and
equal them for all ten units. A failure on a pinned platform after a NumPy upgrade means the
committed figures need a rebuild, not that the loop is wrong.
"""
from __future__ import annotations

import pytest

from ecosim import experiments as E
from platform_pins import PLATFORMS, digest_arrays, pinned_platform

# (experiment, unit, sha256 of the unit's results with the smoke config)
DIGESTS = [
    ("rtn_stall", {"scheme": "eco"},
     "c766cbdc9256fb08ca1279657038afa598bfccd4961ee4739064e80820b6a389"),
    ("rtn_stall", {"scheme": "naive"},
     "688cfd6dd00095cee0e6e30dcd7cf8b612c1961fdbfaaf8e39a2e0a1161f5b0d"),
    ("mantissa_sweep",
     {"component": "weights", "mantissa": 1, "optimizer": "muon", "problem": "rosenbrock",
      "seed": 0},
     "ff4c07e677b2197d51bcbe50625fc81eb1543521984018d538be1fd4d1dc5fa3"),
    ("mantissa_sweep",
     {"component": "v", "mantissa": 1, "optimizer": "adamw", "problem": "mlp", "seed": 0},
     "7a86c3fdb89e6fb68a69a444a758a155d91f91f393806b0ff0ad8bec33fbf972"),
    ("compressed_states", {"optimizer": "muon", "seed": 0, "spec": "eco-sr m:bf16"},
     "5c41d766afd7f42705d963e592d67f562fab9ddfd275dc1949cbda251748c14c"),
    ("compressed_states", {"optimizer": "adamw", "seed": 0, "spec": "eco-rtn m:e4m3 v:bf16"},
     "e7bbcd0227760ec85b6b65eb140d0f80172c2c6746aef791b7590d986142457d"),
    ("mlp_methods", {"mode": "sr", "scheme": "eco", "seed": 0, "weights": "fp8", "width": 8},
     "7b51824f3e938530d77dbc7e0c682adeaa1de45971b3224524750469036cfbd4"),
    ("mlp_methods", {"mode": "rtn", "scheme": "naive", "seed": 1, "weights": "int4", "width": 8},
     "2cee881df5f91135348c56bf4f411a4e3cf25328be51e22fd9839155396b4724"),
    ("mlp_states", {"seed": 0, "variant": "adamw:eco_sr:e4m3_sr:e4m3_sr"},
     "2da79bf6b72a020dc03c1adf586b1a4573eedef7cf47fefe145ca11e89c10794"),
    ("mlp_states", {"seed": 0, "variant": "sgdm:eco_sr:e4m3_rtn"},
     "a063447871d05765cab599df7a286708c8813b7f51f745020d4152f33a28aeb2"),
]


#: platform (platform_pins.PLATFORMS) -> its (experiment, unit, digest) list: DIGESTS on both
#: (the pinning code gave the AVX2 machine's digests on the AVX-512 one)
PINNED = {"avx2": DIGESTS, "avx512": DIGESTS}


def test_every_platform_pins_every_unit():
    assert set(PINNED) == set(PLATFORMS)
    assert all([u[:2] for u in units] == [u[:2] for u in DIGESTS] for units in PINNED.values())


@pytest.mark.parametrize("case", range(len(DIGESTS)),
                         ids=[f"{n}-{'-'.join(map(str, u.values()))}" for n, u, _ in DIGESTS])
def test_smoke_unit_results_are_pinned(case):
    name, unit, want = PINNED[pinned_platform()][case]
    exp = E.get(name)
    cfg = exp.default_config(smoke=True)
    assert unit in exp.unit_list(cfg)
    assert digest_arrays(exp.compute(cfg, dict(unit))) == want
