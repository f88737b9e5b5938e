"""Controls of the verdicts that had none of their own, each beside a positive control on the
same constructed data shape: DQT's "on par with BitNet" reader (tested before only through the
claims that call it), the b2 sensitivity of precision against horizon (tested only where it
agrees) and the full list of horizon verdicts (tested only for its vocabulary)."""
import math

import numpy as np

from ecosim.claims import horizon as HC
from ecosim.claims.dqt import competitive_verdict
from ecosim.claims.stats import t_interval


# -- dqt.competitive_verdict ---------------------------------------------------------------------

def test_competitive_verdict_controls():
    """DQT minus BitNet per seed, tolerance 0.02: a gap well inside holds; a gap whose mean is
    inside but whose interval reaches past it is partly; a gap beyond it, and any gap when
    there is no positive tolerance (BitNet loses nothing to be on par within), are no."""
    tol = 0.02
    inside = t_interval([0.000, 0.002, 0.001, 0.003])
    assert inside["hi"] <= tol and competitive_verdict(inside, tol) == "holds"
    straddle = t_interval([-0.02, 0.05, 0.00, 0.03])
    assert straddle["mean"] <= tol < straddle["hi"]
    assert competitive_verdict(straddle, tol) == "partly"
    beyond = t_interval([0.10, 0.11, 0.12, 0.10])
    assert competitive_verdict(beyond, tol) == "no"
    for bad in (math.nan, 0.0, -0.01):
        assert competitive_verdict(inside, bad) == "no"
    # one pair: no interval, so at most partly
    assert competitive_verdict(t_interval([0.0]), tol) == "partly"


# -- horizon: b2 sensitivity and the whole list ---------------------------------------------------

def _results(rows, *, probe=False, m_max=16):
    """Hand-made ``precision_horizon`` columns; rows: (problem, optimizer, T, b2, buffer,
    smallest M); ``probe``: whether every probe run at M = 4 diverged."""
    cols = list(zip(*rows))
    n = len(rows)
    return {"problem": np.array(cols[0]), "optimizer": np.array(cols[1]),
            "horizon": np.array(cols[2], np.int64), "b2": np.array(cols[3], float),
            "buffer": np.array(cols[4]), "smallest": np.array(cols[5], np.int64),
            "m_max": np.int64(m_max), "probe_mantissa": np.int64(4),
            "probe_diverged": np.full(n, probe),
            "probe_cls": np.full(n, "failed" if probe else "fine")}


def _adam_rosenbrock(width, horizons=(256, 1024, 4096)):
    """AdamW on Rosenbrock, every buffer, T in ``horizons`` and b2 in 0.9, 0.999, with the
    smallest M given by ``width(buffer, log2 T, b2)``."""
    return [("rosenbrock", "adamw", T, b2, buf, width(buf, int(np.log2(T)), b2))
            for T in horizons for b2 in (0.9, 0.999)
            for buf in ("weights", "g", "m", "v")]


def test_b2_verdicts_agree_and_disagree():
    """Positive: M grows by 2 bits from b2 = 0.9 to 0.999 at every T; negative: M does not
    depend on b2 (the claim is false), and M falling with b2 is no agreement either."""
    def grows(buf, k, b2):
        return 4 + (2 if b2 > 0.99 else 0)
    got = {v["claim"]: v["verdict"] for v in HC.b2_verdicts(_results(_adam_rosenbrock(grows)))}
    assert got == {"Adam weights: more bits as b2 -> 1": "agree",
                   "Adam v: more bits as b2 -> 1": "agree"}
    flat = HC.b2_verdicts(_results(_adam_rosenbrock(lambda buf, k, b2: 6)))
    assert [v["verdict"] for v in flat] == ["disagree", "disagree"]
    assert "mean +0.00 bits over 3" in flat[0]["measured"]

    def falls(buf, k, b2):
        return 8 - (2 if b2 > 0.99 else 0)
    assert {v["verdict"] for v in HC.b2_verdicts(_results(_adam_rosenbrock(falls)))} == \
        {"disagree"}


def test_horizon_verdicts_follow_their_parts():
    """Positive: results built to satisfy every claim (T = 2048 and 4096: M on the theory's
    slope and at most the named width, one bit more at b2 = 0.999 for the weights and v, every
    probe diverged) agree throughout; negative: results where every claim is false (M far
    above every width, flat in T and b2, no probe diverged) disagree throughout."""
    slope = {"weights": 2, "g": 1, "m": 1, "v": 2}
    named = {b: HC.NAMED_WIDTHS["adamw", b] for b in slope}

    def true_width(buf, k, b2):  # k = log2 T, 11 or 12
        return named[buf] - slope[buf] * (12 - k) - (
            1 if b2 < 0.99 and buf in ("weights", "v") else 0)

    good = HC.verdicts(_results(_adam_rosenbrock(true_width, (2048, 4096)), probe=True))
    assert len(good) == 4 + 1 + 4 + 2  # named widths, the probe, slopes, b2
    assert {v["verdict"] for v in good} == {"agree"}
    bad = HC.verdicts(_results(_adam_rosenbrock(lambda buf, k, b2: 15, (2048, 4096))))
    assert {v["verdict"] for v in bad} == {"disagree"}
    # the same claims are judged on both: one row per claim, in the same order
    assert [v["claim"] for v in good] == [v["claim"] for v in bad]
    assert HC.PROBE_CLAIM in [v["claim"] for v in bad]
