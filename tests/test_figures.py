"""Figures: every registered figure builds in smoke mode, reproducibly, with its data."""
from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import matplotlib
import numpy as np
import pytest

import ecosim
from ecosim import experiments as E
from ecosim import figures as F
from ecosim.figures import style

# tables that may legitimately hold NaN/inf (a diverged run, say): {figure: {table, ...}}
# (lm: a diverged run has no final loss; validation is sparse along a curve)
NONFINITE_OK: dict[str, set[str]] = {
    "lm_table": {"final", "curves"}, "lm_pareto": {"points"},
    # traces end in NaN after a divergence (and m/d is NaN without AdamW's d); a gap has no
    # interval (NaN) with fewer than two seeds where both runs trained
    "eco_adam_breakdown": {"approx_gaps"} | {f"trace_{v}" for v in (
        "eco_rtn", "fixed_scale", "b2_09999", "tanh_row", "fp8_row", "master_rtn", "sgdm")},
    # the same for DQT's paired gaps (a grid whose runs stalled or diverged has none)
    "dqt": {"gaps"}, "dqt_claims": {"points"}, "dqt_lm": {"points"},
    # beta_factor: with gradient noise a run's normalised floor has no closed form
    "beta_factor": {"runs"},
    # lm_scaling: a smoke column of one seed has a gap but no interval
    "lm_scaling": {"gaps"},
    # lm_moe: the reference has no gap, a paper column no value for methods its figure lacks
    "lm_moe": {"final"},
    # lm_finetune: a gap has no interval below two seeds; the paper has no accuracy for naive
    "lm_finetune": {"methods"},
    # lm_eco_adam: a gap has no interval below two seeds (none at all without a pair), and
    # plain ECO has no gap to itself, the guard no MLP number
    "lm_eco_adam": {"gaps"},
}


def _available(name: str) -> bool:
    """The figure's experiments have their optional packages (torch for ``lm``)."""
    return not any(E.get(e).missing() for e in F.get(name).experiments)


AVAILABLE = [n for n in F.figures() if _available(n)]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """All figures, smoke mode, built once into a fresh directory with a fresh cache."""
    root = tmp_path_factory.mktemp("figs")
    report = F.build(AVAILABLE, out=root / "out", smoke=True, cache=root / "cache")
    return root, report


def _files(path):
    return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.is_file()}


def _cache_files(path):
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file()}


def test_names_are_unique_and_experiments_exist():
    figs = F.figures()
    assert "grids" in figs
    exps = E.experiments()
    for name, spec in figs.items():
        assert spec.name == name and spec.caption and spec.experiments
        assert all(e in exps for e in spec.experiments), spec
    with pytest.raises(ValueError, match="registered twice"):
        F.figure("grids", experiments=["grids"], caption="again")(lambda grids: None)
    with pytest.raises(KeyError, match="registered: "):
        F.get("nope")


@pytest.mark.parametrize("name", list(F.figures()))
def test_every_figure_builds_in_smoke_mode(built, name):
    if not _available(name):
        pytest.skip(f"{name} needs an optional package (make torch)")
    root, report = built
    out = root / "out"
    spec = F.get(name)
    assert (out / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / f"{name}.pdf").read_bytes()[:5] == b"%PDF-"
    side = json.loads((out / f"{name}.json").read_text())
    assert side["figure"] == name and side["caption"] == spec.caption and side["smoke"] is True
    assert side["ecosim_version"] == ecosim.__version__
    assert side["git_revision"] is None or len(side["git_revision"]) == 40
    assert set(side["experiments"]) == set(spec.experiments)
    for e in spec.experiments:
        cfg = E.get(e).default_config(smoke=True)
        assert side["experiments"][e]["config"] == cfg.to_dict()
        assert side["experiments"][e]["digest"] == E.get(e).digest(cfg)
    csvs = sorted(out.glob(f"{name}.*.csv"))
    docs = sorted(out.glob(f"{name}.md"))  # a figure may also write a markdown table
    assert csvs and sorted(side["files"]) == sorted(
        [f"{name}.png", f"{name}.pdf", f"{name}.json", f"{name}.provenance.json"]
        + [p.name for p in csvs + docs])
    prov = json.loads((out / f"{name}.provenance.json").read_text())
    assert "git_revision" not in json.dumps(prov)  # the committed part: rebuild-stable
    for e in spec.experiments:
        assert prov["experiments"][e]["code"] == side["experiments"][e]["code"]
        assert prov["experiments"][e]["computed_by_source_sha256"] == sorted(
            {c["source_sha256"] for c in side["experiments"][e]["computed_by"]})
    for path in csvs:
        rows = list(csv.reader(io.StringIO(path.read_text())))
        header, body = rows[0], rows[1:]
        assert header and body, path
        assert all(len(r) == len(header) for r in body)
        table = path.name.split(".")[1]
        if table in NONFINITE_OK.get(name, ()):
            continue
        for r in body:
            for cell in r:
                try:
                    value = float(cell)
                except ValueError:
                    continue  # a label
                assert math.isfinite(value), (path.name, r)


def test_lm_eco_adam_smoke_markdown(built):
    """The smoke build's table: its one variant and plain ECO, one seed each (no interval)."""
    if not _available("lm_eco_adam"):
        pytest.skip("lm_eco_adam needs torch (make torch)")
    md = (built[0] / "out" / "lm_eco_adam.md").read_text()
    assert "| FP8 ECO + SR | 1 trained | n=0 (no interval) | (itself) |" in md
    assert "| FP8 ECO momentum-exact + SR | 1 trained | n=0 (no interval) | n=1 (no interval) |" \
        in md


def test_rerun_is_byte_identical(built, tmp_path):
    root, first = built
    before = _files(root / "out")
    cache_before = _cache_files(root / "cache")
    again = F.build(AVAILABLE, out=root / "out", smoke=True, cache=root / "cache")
    assert again.computed == 0 and again.cached == first.computed + first.cached
    assert all(not fr.changed for fr in again.figures)
    assert _files(root / "out") == before  # PNG and PDF included
    # recomputing everything from an empty cache gives the same data and cache bytes
    fresh = F.build(AVAILABLE, out=tmp_path / "out", smoke=True, cache=tmp_path / "cache")
    assert fresh.cached == 0
    assert _cache_files(tmp_path / "cache") == cache_before
    after = _files(tmp_path / "out")
    for fname, data in before.items():
        if fname.endswith((".csv", ".json")):
            assert after[fname] == data, fname


def test_table_csv_formatting():
    data = F.table_csv({"f64": np.array([0.1, 1e-300, -2.0, np.nan]),
                        "f32": np.array([0.1, 3, 1e-8, np.inf], np.float32),
                        "i": np.array([1, -2, 3, 4]), "b": np.array([True, False, True, False]),
                        "s": np.array(["a", "b,c", 'd"e', ""])})
    assert data.decode().splitlines() == [
        "f64,f32,i,b,s",
        "0.1,0.1,1,true,a",
        '1e-300,3.0,-2,false,"b,c"',
        '-2.0,1e-08,3,true,"d""e"',
        'nan,inf,4,false,',
    ]
    assert float(data.decode().splitlines()[1].split(",")[0]) == 0.1  # exact round trip
    with pytest.raises(ValueError, match="different lengths"):
        F.table_csv({"a": [1, 2], "b": [1]})
    with pytest.raises(ValueError, match="1-D"):
        F.table_csv({"a": np.zeros((2, 2))})
    with pytest.raises(ValueError, match="at least one column"):
        F.table_csv({})


def test_figure_registration_is_validated():
    with pytest.raises(ValueError, match="must match"):
        F.figure("Bad Name", experiments=["grids"], caption="c")
    with pytest.raises(ValueError, match="caption"):
        F.figure("ok_name", experiments=["grids"], caption=" ")
    with pytest.raises(ValueError, match="identifiers"):
        F.figure("ok_name", experiments=["not-an-identifier"], caption="c")


def test_git_revision_never_fails(monkeypatch):
    F.git_revision.cache_clear()
    try:
        monkeypatch.setenv("PATH", "/nonexistent")  # no git executable at all
        assert F.git_revision() == (None, None)
    finally:
        F.git_revision.cache_clear()
    rev, dirty = F.git_revision()
    assert rev is None or (len(rev) == 40 and isinstance(dirty, bool))


def test_style_context_restores_rcparams():
    before = dict(matplotlib.rcParams)
    with style.context():
        assert matplotlib.rcParams["axes.spines.top"] is False
    assert dict(matplotlib.rcParams) == before


def test_committed_figures_carry_their_provenance():
    """Each committed figure has the rebuild-stable provenance of the build that drew it, for
    the experiments it plots (make figures rewrites both together)."""
    root = Path(__file__).resolve().parents[1] / "figures"
    pngs = sorted(p.stem for p in root.glob("*.png") if p.stem in F.figures())
    assert pngs
    for name in pngs:
        path = root / f"{name}.provenance.json"
        assert path.is_file(), f"{path} is missing: run make figures and commit it"
        prov = json.loads(path.read_text())
        assert prov["figure"] == name and prov["smoke"] is False
        assert set(prov["experiments"]) == set(F.get(name).experiments)
        for e, rec in prov["experiments"].items():
            assert len(rec["code"]["source_sha256"]) == 64, (name, e)
            assert rec["computed_by_source_sha256"], (name, e)
