"""The ``claims`` figure: its markdown table of theory claims, built on the smoke runs.

The verdicts themselves are not asserted here (smoke runs are too short for the 5% criteria;
the full-size build decides them); what is checked is that the table is well formed, has one
row per claim of docs/theory.md §5.9 in order, and that every number in it is finite.
"""
from __future__ import annotations

import csv
import io
import math
import re

import pytest

from ecosim import figures as F
from ecosim.figures import claims as C

NUMBER = re.compile(r"[-+−]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?|nan|inf", re.I)
EXPECTED = [
    "Normalised noise floors, real SR, uniform grid",
    "ECO's price in normalised floors: eco/master → 1/(1−β²)",
    "Naive removal's 1/η law",
    "The same closed forms on FP8 E4M3",
    "Absolute floor: naive+SR does not blow up with exact gradients",
    "Decaying LR: naive's normalised error grows, ECO's stays bounded",
    "RTN stall and ECO's release",
    "Consecutive errors are similar with RTN, not with SR",
    "What a user pays: ECO's absolute floor over master's is 1/(1−β²)",
]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("claims")
    report = F.build(["claims"], out=root / "out", smoke=True, cache=root / "cache")
    return root / "out", report


def _table(md: str):
    lines = md.strip().splitlines()
    rows = [ln for ln in lines if ln.startswith("|")]
    assert rows and all(ln.endswith("|") for ln in rows)
    cells = [[c.strip() for c in ln.strip("|").split("|")] for ln in rows]
    return cells[0], cells[1], cells[2:], [ln for ln in lines if not ln.startswith("|")]


def test_claims_is_the_last_figure():
    assert list(F.figures())[-1] == "claims"


def test_markdown_is_a_table_of_the_claims(built):
    out, _ = built
    md = (out / "claims.md").read_text()
    header, rule, body, rest = _table(md)
    assert tuple(header) == C.HEADER
    assert all(re.fullmatch(r"-{3,}", c) for c in rule) and len(rule) == len(header)
    assert len(body) == len(EXPECTED)
    for i, (row, name) in enumerate(zip(body, EXPECTED), 1):
        assert len(row) == len(header), row
        claim, theory, measured, holds = row
        assert claim == f"({i}) {name}"
        assert theory and measured
        verdict = re.match(r"\*\*(yes|partly|no)\*\*: \S", holds)
        assert verdict, holds
        # numbers come from the runs: every row has some, and all are finite
        nums = NUMBER.findall(measured)
        assert nums, measured
        for cell in (theory, measured, holds):
            for tok in NUMBER.findall(cell):
                assert tok.lower() not in ("nan", "inf"), (i, cell)
                assert math.isfinite(float(tok.replace("−", "-"))), (i, tok)
    # the summary line counts the verdicts
    verdicts = [re.match(r"\*\*(\w+)\*\*", r[3]).group(1) for r in body]
    summary = " ".join(rest)
    assert (f"{verdicts.count('yes')} of {len(body)} claims hold, "
            f"{verdicts.count('partly')} partly, {verdicts.count('no')} not") in summary


def test_data_tables_match_the_markdown(built):
    out, _ = built
    verdicts = list(csv.DictReader(io.StringIO((out / "claims.verdicts.csv").read_text())))
    assert [int(v["claim"]) for v in verdicts] == list(range(1, 10))
    assert [v["name"] for v in verdicts] == EXPECTED
    md = (out / "claims.md").read_text()
    for v in verdicts:
        assert f"**{v['holds']}**: {v['criterion']}" in md
    points = list(csv.DictReader(io.StringIO((out / "claims.points.csv").read_text())))
    assert {int(p["claim"]) for p in points} == set(range(1, 10))
    for p in points:
        for k in ("measured", "std_error", "predicted"):
            assert math.isfinite(float(p[k])), p
    assert (out / "claims.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_cell_with_a_pipe_is_refused():
    c = C.Claim(1, "a | b", "t", "m", "yes", "c")
    with pytest.raises(ValueError, match="may not hold"):
        C.claims_markdown([c])
