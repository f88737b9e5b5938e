"""Bit-identity pins of the NumPy optimizers' steps and of the schedules.

The digests below pin what the steps compute, not how: making a step cheaper (schedules read
from tables, per-parameter lookups cached, one check of each gradient instead of two
reductions) must leave them unchanged; any change of a single bit of a weight, a state buffer
or a diagnostic after a few steps of any optimizer x scheme x rounding (plain and with
low-precision states) changes them.
A change of the numerics on purpose updates them (rerun :func:`digests` and paste).

The schedules go through NumPy's ``cos`` and Muon through BLAS products, whose last bits may
differ on another CPU: the digests are pinned per platform (``platform_pins``) and checked where
this machine computes as one of them (elsewhere the tests skip, saying why). The ``avx512``
digests were computed on an AVX-512 x86-64 from the code the ``avx2`` ones come from, and
equal them (schedules included).
"""
import hashlib

import numpy as np
import pytest

from ecosim import Quantizer
from ecosim.optim import InverseTime, NonFiniteGradient, StepDecay, WarmupCosine, adamw, muon, sgdm
from ecosim.optim.schemes import names_for
from platform_pins import PLATFORMS, pinned_platform

SHAPES = {"w0": (6, 5), "w1": (5, 3), "b0": (5,), "b1": (3,)}
STEPS = 7

#: sha256 (first 16 hex digits) of weights, state and diagnostics after STEPS steps
DIGESTS = {
    "sgdm-fp-none-plain": "517024ef7f638786",
    "sgdm-fp-none-states": "07889601ef868e01",
    "sgdm-master-rtn-plain": "3a3da72baa5b84e9",
    "sgdm-master-rtn-states": "56ee90426a27b28e",
    "sgdm-master-sr-plain": "d80c46652b3155ee",
    "sgdm-master-sr-states": "a56ff40be621e6d1",
    "sgdm-naive-rtn-plain": "fe2e760b41df2547",
    "sgdm-naive-rtn-states": "f2e15c4761f1fffe",
    "sgdm-naive-sr-plain": "ad8691f8f49fb7ef",
    "sgdm-naive-sr-states": "7b5bfa9057a5986f",
    "sgdm-eco-rtn-plain": "1e640ee4486eab73",
    "sgdm-eco-rtn-states": "08c4dacc7c1a8b66",
    "sgdm-eco-sr-plain": "b35b1ceaaf766298",
    "sgdm-eco-sr-states": "90a1489161d359d0",
    "sgdm-eco_exact-rtn-plain": "dfb603f7229406f0",
    "sgdm-eco_exact-rtn-states": "ae1258297874bf5f",
    "sgdm-eco_exact-sr-plain": "ed347d75135817d8",
    "sgdm-eco_exact-sr-states": "e83dfc2b012db2ae",
    "sgdm-kahan-rtn-plain": "a3fe18953c30128e",
    "sgdm-kahan-rtn-states": "c2cd4b9c00179c85",
    "sgdm-kahan-sr-plain": "d0ceb61d06adefb2",
    "sgdm-kahan-sr-states": "5e3b4b6985937083",
    "adamw-fp-none-plain": "f5dc47fbd21bc739",
    "adamw-fp-none-states": "56ffeee8591ac73c",
    "adamw-master-rtn-plain": "35eb7c2608aeda7d",
    "adamw-master-rtn-states": "cd61d643cccb8b09",
    "adamw-master-sr-plain": "4c450b7a6d87135a",
    "adamw-master-sr-states": "4f5a354f8a03cd72",
    "adamw-naive-rtn-plain": "ea17b50e495436ce",
    "adamw-naive-rtn-states": "8357d7bb720a378f",
    "adamw-naive-sr-plain": "82edabaea64a489a",
    "adamw-naive-sr-states": "dc4c9add0b86ce4b",
    "adamw-eco-rtn-plain": "b76d27a8bfc3c906",
    "adamw-eco-rtn-states": "9cf643fc7d5c9839",
    "adamw-eco-sr-plain": "64aefaeaca226c9f",
    "adamw-eco-sr-states": "a48efe1e19060db4",
    "adamw-eco_exact-rtn-plain": "047471f6cabfe00b",
    "adamw-eco_exact-rtn-states": "d017d7be7bab2821",
    "adamw-eco_exact-sr-plain": "e232e821a3ee2001",
    "adamw-eco_exact-sr-states": "717e3ee2dde517ec",
    "adamw-kahan-rtn-plain": "4e1d4cbad56e05f2",
    "adamw-kahan-rtn-states": "a39bcd7c5eb300a8",
    "adamw-kahan-sr-plain": "912c70d2a6219da5",
    "adamw-kahan-sr-states": "98fcfbfb17e044d4",
    "adamw-eco_momentum_exact-rtn-plain": "bee3e4c8f60a46e1",
    "adamw-eco_momentum_exact-rtn-states": "c766e9c9a85bcbad",
    "adamw-eco_momentum_exact-sr-plain": "f7c340491fee4068",
    "adamw-eco_momentum_exact-sr-states": "83f282a7904200c4",
    "adamw-eco_wd-rtn-plain": "f7e147e31d4a8c30",
    "adamw-eco_wd-rtn-states": "b5889abb1cd5f9df",
    "adamw-eco_wd-sr-plain": "3ea733866b45877c",
    "adamw-eco_wd-sr-states": "16081cbfea999d82",
    "muon-fp-none-plain": "1e9503be844bdf7a",
    "muon-fp-none-states": "b40bbcfbc92161d8",
    "muon-master-rtn-plain": "589ab7e49c507126",
    "muon-master-rtn-states": "f7773c47f165fcb8",
    "muon-master-sr-plain": "bfcf036d9851c253",
    "muon-master-sr-states": "7e80c4e88865a369",
    "muon-naive-rtn-plain": "8d9f788a4aa276e5",
    "muon-naive-rtn-states": "d9b517dead9b3bca",
    "muon-naive-sr-plain": "281dc6f5378b1466",
    "muon-naive-sr-states": "55110a6e3d8d8737",
    "muon-eco-rtn-plain": "fad8f03328872b05",
    "muon-eco-rtn-states": "dd68f7b50ddab62d",
    "muon-eco-sr-plain": "d53b1446274fda37",
    "muon-eco-sr-states": "5ab2744dc24cace2",
    "muon-eco_exact-rtn-plain": "011e731c4f23668c",
    "muon-eco_exact-rtn-states": "37ef0c80957c8c90",
    "muon-eco_exact-sr-plain": "821c1310ef41fce7",
    "muon-eco_exact-sr-states": "ec07c4d79949ded8",
    "muon-kahan-rtn-plain": "37e25ffbab549ccd",
    "muon-kahan-rtn-states": "6a906180466e7195",
    "muon-kahan-sr-plain": "ef01df2a51a8a8a2",
    "muon-kahan-sr-states": "342aed7d3d0dc9e2"
}
DIGEST_SCHEDULES = "db2efdd811656bac"
#: platform (platform_pins.PLATFORMS) -> (case digests, schedule digest): the same on both (the
#: pinning code gave the AVX2 machine's digests on the AVX-512 one)
PINNED = {"avx2": (DIGESTS, DIGEST_SCHEDULES), "avx512": (DIGESTS, DIGEST_SCHEDULES)}


def params():
    r = np.random.default_rng(7)
    p = {k: r.standard_normal(s).astype(np.float32) for k, s in SHAPES.items()}
    p["w1"] = p["w1"].astype(np.float64)  # a float64 parameter among float32 ones
    return p


def grads(t):
    r = np.random.default_rng(100 + t)
    return {k: r.standard_normal(s) * 0.5 for k, s in SHAPES.items()}  # float64: cast per param


def digest(params, state, diags) -> str:
    h = hashlib.sha256()
    for k in sorted(params):
        a = np.ascontiguousarray(params[k])
        h.update(f"{k}{a.dtype}{a.shape}".encode())
        h.update(a.tobytes())
    for f in state._fields:
        v = getattr(state, f)
        if isinstance(v, dict):
            for k in sorted(v):
                a = np.ascontiguousarray(v[k])
                h.update(f"{f}{k}{a.dtype}{a.shape}".encode())
                h.update(a.tobytes())
        else:
            h.update(f"{f}{v!r}".encode())
    for d in diags:
        for k in sorted(d):
            if k == "e":
                for n in sorted(d[k] or {}):
                    h.update(np.ascontiguousarray(d[k][n]).tobytes())
            else:
                h.update(f"{k}{float(d[k]).hex()}".encode())
    return h.hexdigest()[:16]


def run(opt) -> str:
    """STEPS steps from fixed params and gradients; every third with diagnostics."""
    p, s = opt.init(params(), key=11)
    diags = []
    for t in range(STEPS):
        if t % 3 == 2:
            p, s, d = opt.step(p, grads(t), s, diagnostics=True)
            diags.append(d)
        else:
            p, s = opt.step(p, grads(t), s)
    return digest(p, s, diags)


def build(case: str):
    """The optimizer of a case ``"OPT-SCHEME-MODE-plain|states"``: an E4M3 row grid for the
    matrices, BF16 for b0, b1 in full precision, a warmup-cosine schedule; ``states``: g in
    BF16 SR, m in E4M3 SR, v in BF16 RTN (and the master copy in BF16 SR)."""
    oname, scheme, mode, st = case.split("-")
    sched = WarmupCosine(0.05, STEPS, warmup_frac=0.3)
    kw = {}
    if scheme != "fp":
        q = Quantizer("e4m3", mode, granularity="row")
        kw["weights"] = {"w0": q, "w1": q, "b0": Quantizer("bfloat16", mode, scale=1.0)}
    if st == "states":
        kw["states"] = {"g": ("bfloat16", "sr"), "m": ("e4m3", "sr")}
        if oname != "sgdm":
            kw["states"]["v"] = ("bfloat16", "rtn")
        if scheme == "master":
            kw["states"]["master"] = ("bfloat16", "sr")
    if oname == "sgdm":
        return sgdm(sched, 0.9, scheme=scheme, nesterov=(mode == "sr"), weight_decay=0.01, **kw)
    if oname == "adamw":
        return adamw(sched, 0.9, 0.98, 1e-8, 0.01, scheme=scheme,
                     schedule_guard=(scheme == "eco" and mode == "sr"), **kw)
    return muon(sched, 0.9, scheme=scheme, weight_decay=0.01, **kw)


def digests() -> dict[str, str]:
    """Every case's digest (what DIGESTS holds)."""
    return {case: run(build(case)) for case in cases()}


def cases() -> list[str]:
    return [f"{o}-{s}-{m}-{st}" for o in ("sgdm", "adamw", "muon") for s in names_for(o)
            for m in (("none",) if s == "fp" else ("rtn", "sr")) for st in ("plain", "states")]


def test_every_case_is_pinned():
    assert set(PINNED) == set(PLATFORMS)
    for digests, _ in PINNED.values():
        assert sorted(cases()) == sorted(digests)
        assert len(set(digests.values())) == len(digests)  # the cases differ: none is trivial


@pytest.mark.parametrize("opt", ["sgdm", "adamw", "muon"])
def test_steps_are_bit_identical_to_the_pinned_ones(opt):
    digests, _ = PINNED[pinned_platform()]
    got = {c: run(build(c)) for c in cases() if c.startswith(opt + "-")}
    assert got == {c: digests[c] for c in got}


SCHEDULES = (WarmupCosine(3e-3, 1500, warmup_frac=0.1, init_frac=0.01, final_frac=0.1),
             WarmupCosine(0.1, 37), WarmupCosine(1.0, 2, warmup_frac=0.0),
             StepDecay(0.3, 7, 0.5), InverseTime(0.2, 13.0))


def test_schedule_values_are_bit_identical_to_the_pinned_ones():
    _, want = PINNED[pinned_platform()]
    h = hashlib.sha256()
    for s in SCHEDULES:
        for t in range(1600):
            h.update(float(s(t)).hex().encode())
    assert h.hexdigest()[:16] == want


@pytest.mark.parametrize("s", SCHEDULES)
def test_schedule_table_equals_the_array_path(s):
    # an int step is read from its block's table; a 0-d array takes the array path
    steps = [0, 1, 1023, 1024, 1025, 2047, 2048, 5000, 2**40 + 3, 2**62 - 1, 2**62, 2**63 - 1]
    for t in steps:
        assert s(t) == float(s(np.array(t))), t
        assert isinstance(s(t), float)
    assert len(s._tables) <= 64


@pytest.mark.parametrize("s", SCHEDULES)
def test_schedule_table_equals_the_array_path_at_every_step_of_three_blocks(s):
    # portable (no pinned platform): the table is the array path's value at every step
    steps = np.arange(3 * 1024)
    want = s(steps)
    got = np.array([s(int(t)) for t in steps])
    assert got.tobytes() == want.tobytes()


def test_caches_are_neither_pickled_nor_copied():
    import copy
    import pickle

    s = WarmupCosine(3e-3, 10**6)
    for b in range(8):
        s(b * 1024)
    assert len(s._tables) == 8
    for other in (pickle.loads(pickle.dumps(s)), copy.copy(s), copy.deepcopy(s)):
        assert "_tables" not in other.__dict__ and other == s and other(5000) == s(5000)
    opt = build("adamw-eco-sr-plain")
    run(opt)
    assert opt.__dict__["_param_memo"]
    assert "_param_memo" not in copy.copy(opt).__dict__


def test_step_keys_are_fold_in_of_the_key_the_step_the_name_and_the_tags():
    """StepContext folds (key, t) and (key, t, name) once a step; every key it hands out is
    still rng.fold_in(key, t, name, *tags), whatever order the names and tags come in."""
    import dataclasses

    from ecosim import rng
    from ecosim.optim.base import StepContext

    asks = [("W1", ()), ("W1", ("m",)), ("b0", ("m_inject",)), ("W1", ()), ("", ("g",)),
            ("b0", ()), ("W1", ("c",))]
    for key, t in ((0, 0), (12345, 7), (2**64 - 1, 10**6)):
        for order in (asks, asks[::-1]):
            ctx = StepContext(t, 0.1, None, key, False, None)
            for name, tags in order:
                assert ctx.key_of(name, *tags) == rng.fold_in(key, t, name, *tags)
            other = dataclasses.replace(ctx, lr=0.5)  # Muon's AdamW parameters
            assert other.key_of("v", "m") == rng.fold_in(key, t, "v", "m")


def test_the_buffers_looked_up_once_are_those_of_the_shape():
    """The per-parameter memo keys the state buffers by name and shape: a Muon optimizer
    that stepped a matrix "W" (no v) keeps v for a vector "W" (an AdamW parameter) and steps
    it as a fresh optimizer does."""
    def make():
        return muon(0.02, scheme="eco", weights=Quantizer("e4m3", "rtn", granularity="row"))

    def one_step(opt, g):
        p, s = opt.init({"W": g * 0.5}, key=1)
        p, s = opt.step(p, {"W": g}, s)
        return p, s

    opt = make()
    assert one_step(opt, np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))[1].v is None
    vec = np.linspace(-1, 1, 4, dtype=np.float32)
    (p, s), (p0, s0) = one_step(opt, vec), one_step(make(), vec)
    assert p["W"].tobytes() == p0["W"].tobytes()
    assert s.m["W"].tobytes() == s0.m["W"].tobytes()
    assert s.v["W"].tobytes() == s0.v["W"].tobytes()


def test_schedule_tables_are_bounded_and_not_part_of_equality():
    s, fresh = WarmupCosine(1e-3, 100), WarmupCosine(1e-3, 100)
    for b in range(70):  # more blocks than are kept
        s(b * 1024)
    assert 1 <= len(s._tables) <= 64
    assert s == fresh and hash(s) == hash(fresh) and repr(s) == repr(fresh)
    assert s(10**6) == fresh(np.array(10**6))


def test_huge_finite_gradients_pass_and_non_finite_ones_are_counted():
    # <g, g> overflows for |g| ~ 3e38 in float32: the check then counts, and finds none
    opt = sgdm(1e-45, 0.0, scheme="fp")
    w, st = opt.init({"a": np.zeros(3, np.float32)})
    big = np.full(3, 3e38, np.float32)
    w2, _ = opt.step(w, {"a": big}, st)
    assert np.isfinite(w2["a"]).all()
    for bad in (np.nan, np.inf, -np.inf):
        g = big.copy()
        g[1] = bad
        with pytest.raises(NonFiniteGradient, match="has 1 non-finite"):
            opt.step(w, {"a": g}, st)
