"""The shape statements of Table 1 (ecosim.claims.mlp): each verdict on a constructed table
where it holds (positive control) and on one where it does not (negative control), and the
paper's own table judged by the same code."""
import math

import pytest

from ecosim.claims import mlp as S
from ecosim.figures.mlp_methods import PAPER_TABLE1


def _table(**over):
    """Gaps to BF16 at three sizes with the paper's shape: ECO+SR close to master, naive+SR
    behind by more at each size, ECO+RTN between, naive+RTN diverged."""
    t = {"w/ master + SR": [0.001, 0.001, 0.001], "ECO + SR": [0.002, 0.003, 0.002],
         "naive + SR": [0.05, 0.10, 0.20], "ECO + RTN": [0.02, 0.04, 0.06],
         "naive + RTN": [None, None, None]}
    t.update(over)
    return {f"FP8 {k}": v for k, v in t.items()}


def test_the_paper_shaped_table_passes_every_check():
    _, v = S.shape_checks(_table(), "FP8")
    assert all(v[k] for k in S.SHAPE_NAMES) and v["naive_rtn_diverges"]


@pytest.mark.parametrize("key, over", [
    ("eco_sr_close", {"ECO + SR": [0.002, 0.05, 0.002]}),
    ("naive_sr_worse", {"naive + SR": [0.05, 0.001, 0.20]}),
    ("naive_sr_grows", {"naive + SR": [0.05, 0.20, 0.10]}),
    ("naive_rtn_fails", {"naive + RTN": [None, 0.01, None]}),
    ("eco_rtn_between", {"ECO + RTN": [0.02, 0.001, 0.06]}),
    ("eco_rtn_below_naive_sr", {"ECO + RTN": [0.02, 0.04, 0.25],
                                "naive + RTN": [None, None, None]}),
    ("eco_rtn_below_naive_sr", {"ECO + RTN": [0.02, math.nan, 0.06]}),
])
def test_each_check_fails_where_its_statement_is_false(key, over):
    """Negative controls: one size breaks one statement and that verdict says so."""
    _, v = S.shape_checks(_table(**over), "FP8")
    assert v[key] is False


def test_eco_rtn_above_naive_sr_is_named_in_the_statement():
    lines, v = S.shape_checks(_table(**{"ECO + RTN": [0.06, 0.12, 0.25]}), "FP8")
    assert not v["eco_rtn_below_naive_sr"]
    assert "ECO+RTN minus naive+SR: +0.0100, +0.0200, +0.0500 (ECO+RTN below at 0/3" \
        in " ".join(lines)


def test_the_papers_table_has_its_own_shape():
    base = PAPER_TABLE1[0][1]
    paper = {lab: [None if v == "diverged" else math.nan if v is None else v - b
                   for v, b in zip(vals, base)] for lab, vals in PAPER_TABLE1[1:]}
    _, v = S.shape_checks(paper, "FP8")
    assert v["eco_rtn_below_naive_sr"] and v["naive_sr_worse"] and v["naive_rtn_diverges"]


def test_shape_verdict_lists_what_is_not_reproduced():
    paper = {k: True for k in S.SHAPE_NAMES}
    ours = dict(paper, eco_rtn_below_naive_sr=False)
    text = S.shape_verdict(ours, paper)
    assert "Not reproduced: ECO+RTN below naive+SR at every size." in text
    assert "Not reproduced" not in S.shape_verdict(paper, paper)


def test_trend():
    assert S.trend([0.3, 0.2]) == "shrinks with size" and S.trend([1.0]) == "one size only"
