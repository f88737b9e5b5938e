"""Tests of ecosim.optim.schedules: exact values at the key points, monotone pieces,
vectorised evaluation, argument checks."""
import dataclasses
import math

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from ecosim.optim import (Constant, InverseTime, StepDecay, WarmupCosine, as_schedule, constant,
                          inverse_time, step_decay, warmup_cosine)

PEAKS = [1.2e-3, 7.5e-5, 0.3, 1.0]


def test_constant():
    s = constant(0.05)
    assert s(0) == s(10**9) == 0.05 and isinstance(s(3), float)
    assert_array_equal(s(np.arange(4)), np.full(4, 0.05))


@pytest.mark.parametrize("peak", PEAKS)
@pytest.mark.parametrize("total", [1000, 37, 2])
def test_warmup_cosine_key_points(peak, total):
    s = warmup_cosine(peak, total)
    w = s.warmup_steps
    assert w == round(0.1 * total)
    assert s(0) == (0.01 * peak if w > 0 else peak)
    assert s(total - 1) == 0.1 * peak  # the floor, reached exactly at the last update
    assert s(total) == s(10 * total) == 0.1 * peak  # and held afterwards
    if w < total - 1:
        assert s(w) == peak  # end of warmup: the peak, exactly


def test_warmup_cosine_paper_defaults_and_shape():
    peak, total = 6e-4, 1000
    s = WarmupCosine(peak, total)
    assert (s.warmup_frac, s.init_frac, s.final_frac) == (0.1, 0.01, 0.1)
    lr = s(np.arange(total))
    warm, cos = lr[:100], lr[100:]
    assert np.all(np.diff(warm) > 0) and np.all(np.diff(cos) <= 0)
    # Linear warmup: constant increments of 0.99 * peak / 100.
    np.testing.assert_allclose(np.diff(warm), 0.99 * peak / 100, rtol=1e-9)
    # Cosine midpoint: p = 1/2 at t = 100 + 899/2 is not an integer; check the formula instead.
    t = 550
    p = (t - 100) / 899
    assert s(t) == pytest.approx(0.1 * peak + 0.9 * peak * (1 + math.cos(math.pi * p)) / 2,
                                 rel=1e-14)
    assert lr.max() == peak and lr.min() == 0.01 * peak
    assert np.all(lr >= 0.01 * peak)


def test_warmup_cosine_midpoint_is_mean_of_peak_and_floor():
    s = WarmupCosine(1.0, 1001, warmup_frac=0.1)  # W = 100, cosine over 900 steps
    assert s(100 + 450) == pytest.approx(0.55, rel=1e-15)


def test_warmup_cosine_edge_fractions():
    s = WarmupCosine(2.0, 10, warmup_frac=0.0)
    assert s.warmup_steps == 0 and s(0) == 2.0 and s(9) == 0.2
    full = WarmupCosine(2.0, 10, warmup_frac=1.0, init_frac=0.0)
    lr = full(np.arange(10))
    np.testing.assert_allclose(lr, 2.0 * np.arange(10) / 10, rtol=1e-15)
    assert full(10) == 0.2  # past the end: the floor
    flat = WarmupCosine(1.0, 50, final_frac=1.0)
    assert np.all(flat(np.arange(10, 60)) == 1.0)
    assert WarmupCosine(1.0, 1)(0) == 0.1  # a one-update run sits at the floor


def test_step_decay_and_inverse_time():
    s = step_decay(0.8, every=3, factor=0.5)
    assert [s(t) for t in range(8)] == [0.8] * 3 + [0.4] * 3 + [0.2] * 2
    assert step_decay(0.8, every=3, factor=1.0)(100) == 0.8
    it = inverse_time(2.0, t0=4)
    assert it(0) == 2.0 and it(4) == 1.0 and it(12) == 0.5
    assert np.all(np.diff(it(np.arange(50))) < 0)


@pytest.mark.parametrize("s", [
    Constant(0.1), WarmupCosine(1e-3, 200, warmup_frac=0.25), StepDecay(1.0, 7, 0.3),
    InverseTime(0.5, 3.5),
])
def test_vectorised_matches_scalar(s):
    steps = np.arange(250)
    lr = s(steps)
    assert lr.shape == (250,) and lr.dtype == np.float64
    assert_array_equal(lr, [s(int(t)) for t in steps])
    assert_array_equal(s(steps.reshape(25, 10)), lr.reshape(25, 10))
    assert s(np.int64(5)) == s(5) and isinstance(s(np.int32(5)), float)


def test_schedules_are_frozen_with_readable_repr():
    s = warmup_cosine(1e-3, 100)
    assert repr(s) == ("WarmupCosine(peak=0.001, total_steps=100, warmup_frac=0.1, "
                       "init_frac=0.01, final_frac=0.1, warmup_offset=0)")
    assert eval(repr(s)) == s
    assert repr(step_decay(1, 2, 0.5)) == "StepDecay(lr=1.0, every=2, factor=0.5)"
    assert repr(inverse_time(1, 10)) == "InverseTime(lr=1.0, t0=10.0)"
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.peak = 1.0
    assert constant is Constant and hash(Constant(0.1)) == hash(Constant(0.1))


def test_as_schedule():
    assert as_schedule(0.1) == Constant(0.1)
    assert as_schedule(2) == Constant(2.0)
    assert as_schedule(np.float32(0.5)) == Constant(0.5)
    s = WarmupCosine(1.0, 10)
    assert as_schedule(s) is s

    def f(t):
        return 1.0 / (t + 1)
    assert as_schedule(f) is f
    for bad in ["0.1", None, True, [0.1]]:
        with pytest.raises(TypeError, match="callable schedule"):
            as_schedule(bad)
    with pytest.raises(ValueError, match="lr must be > 0"):
        as_schedule(0.0)


@pytest.mark.parametrize("make, err, match", [
    (lambda: Constant(0.0), ValueError, "lr must be > 0"),
    (lambda: Constant(-1.0), ValueError, "lr must be > 0"),
    (lambda: Constant(float("nan")), ValueError, "finite"),
    (lambda: Constant("1"), TypeError, "real number"),
    (lambda: WarmupCosine(1.0, 0), ValueError, "total_steps must be a positive integer"),
    (lambda: WarmupCosine(1.0, 10.0), TypeError, "total_steps must be a positive integer"),
    (lambda: WarmupCosine(1.0, 10, warmup_frac=1.5), ValueError,
     r"warmup_frac must be in \[0, 1\]"),
    (lambda: WarmupCosine(1.0, 10, init_frac=-0.1), ValueError, "init_frac"),
    (lambda: WarmupCosine(1.0, 10, final_frac=2.0), ValueError, "final_frac"),
    (lambda: WarmupCosine(0.0, 10), ValueError, "peak must be > 0"),
    (lambda: StepDecay(1.0, 0, 0.5), ValueError, "every"),
    (lambda: StepDecay(1.0, 2, 1.5), ValueError, r"factor must be in \(0, 1\]"),
    (lambda: StepDecay(1.0, 2, 0.0), ValueError, "factor"),
    (lambda: InverseTime(1.0, 0.0), ValueError, "t0 must be > 0"),
])
def test_bad_arguments(make, err, match):
    with pytest.raises(err, match=match):
        make()


def test_bad_steps():
    s = WarmupCosine(1.0, 10)
    with pytest.raises(ValueError, match="step must be >= 0"):
        s(-1)
    with pytest.raises(ValueError, match="step must be >= 0"):
        s(np.array([0, -2]))
    for bad in [1.5, np.linspace(0, 1, 3), True]:
        with pytest.raises(TypeError, match="integer"):
            s(bad)
