"""docs/theory.md is the only theory reference: citations of it resolve, and nothing else is cited.

Checks, over every file of the repository (tracked or not ignored by git):

* no file cites the external specification the project was built from (its name is assembled
  below so that this file does not match itself);
* every ``docs/theory.md §N.M`` citation (and every ``§N.M`` inside docs/theory.md itself)
  names a numbered heading of docs/theory.md, and every link to an anchor of docs/theory.md
  (from another file, or inside it) names a heading's anchor;
* every ``tests/test_x.py::test_name`` that docs/theory.md gives as the place a result is
  tested is a test function defined in that file.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
THEORY = ROOT / "docs" / "theory.md"
SKIP_DIRS = {".git", ".venv", "__pycache__", ".hypothesis", ".ecosim_cache", ".pytest_cache",
             "build", "dist"}
TEXT_SUFFIXES = {".py", ".md", ".ipynb", ".toml", ".txt", ".cfg", ".ini", ".yml", ".yaml",
                 ".rst", ".json", ".csv", ""}

FORBIDDEN = re.compile(r"\b" + "SP" + r"EC\b")          # the spec's name: any mention of it
HEADING = re.compile(r"^#{1,6}\s+(\d+(?:\.\d+)*)\.?\s+\S", re.M)
CITATION = re.compile(r"docs/theory\.md((?:(?:,|,? and| or|-)? ?§\d+(?:\.\d+)*)+)")
SECTION = re.compile(r"§(\d+(?:\.\d+)*)")
ANCHOR_LINK = re.compile(r"docs/theory\.md#([\w-]+)")
TEST_REF = re.compile(r"(tests/test_\w+\.py)::(test_\w+)")


def repo_files() -> list[Path]:
    """Text files of the repository: git's view (tracked plus untracked, not ignored) where it
    is available, else a walk that skips build and cache folders."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], cwd=ROOT, capture_output=True, check=True)
        paths = [ROOT / p for p in out.stdout.decode().split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        paths = [p for p in ROOT.rglob("*")
                 if not SKIP_DIRS.intersection(p.relative_to(ROOT).parts)
                 and not any(part.endswith(".egg-info") for part in p.parts)]
    return sorted(p for p in paths if p.is_file() and p.suffix in TEXT_SUFFIXES)


def read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return ""


def sections(text: str) -> set[str]:
    """Section numbers of the numbered headings (``## 5. Theory`` gives ``5``)."""
    return set(HEADING.findall(text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading text."""
    s = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return s.replace(" ", "-")


def anchors(text: str) -> set[str]:
    return {slug(h) for h in re.findall(r"^#{1,6}\s+(.+?)\s*$", text, re.M)}


def cited_sections(text: str) -> list[str]:
    """Every section number cited as ``docs/theory.md §...`` (lists like ``§4, §5`` included)."""
    flat = re.sub(r"\s+", " ", text)
    return [n for group in CITATION.findall(flat) for n in SECTION.findall(group)]


def test_theory_document_exists_and_is_numbered():
    text = THEORY.read_text(encoding="utf-8")
    assert {"1", "2", "3", "4", "5", "6", "7"} <= sections(text)
    assert {"2.2", "4.3", "4.4", "5.2", "5.3", "5.5", "5.6", "5.7", "5.8"} <= sections(text)


def test_no_file_cites_the_external_specification():
    offenders = [f"{p.relative_to(ROOT)}:{i}" for p in repo_files()
                 for i, line in enumerate(read(p).splitlines(), 1) if FORBIDDEN.search(line)]
    assert offenders == []


def test_every_theory_citation_names_an_existing_section():
    text = THEORY.read_text(encoding="utf-8")
    known, known_anchors = sections(text), anchors(text)
    bad, seen = [], 0
    for p in repo_files():
        body = read(p)
        cited = cited_sections(body)
        if p == THEORY:
            cited += SECTION.findall(body)
        seen += len(cited)
        bad += [f"{p.relative_to(ROOT)}: §{n}" for n in cited if n not in known]
        links = ANCHOR_LINK.findall(body)
        if p == THEORY:
            links += re.findall(r"\]\(#([\w-]+)\)", body)
        bad += [f"{p.relative_to(ROOT)}: #{a}" for a in links if a not in known_anchors]
    assert bad == []
    assert seen > 50  # the code, tests and README really cite it


def test_every_test_named_in_the_theory_exists():
    refs = set(TEST_REF.findall(THEORY.read_text(encoding="utf-8")))
    assert len(refs) > 40
    missing = [f"{f}::{name}" for f, name in sorted(refs)
               if not re.search(rf"^\s*def {name}\(", read(ROOT / f), re.M)]
    assert missing == []


@pytest.mark.parametrize("text, expected", [
    ("see docs/theory.md §5.2.", ["5.2"]),
    ("(docs/theory.md §4, §5)", ["4", "5"]),
    ("docs/theory.md §5.5 and §5.6", ["5.5", "5.6"]),
    ("docs/theory.md\n    §7 here", ["7"]),
    ("docs/theory.md, the theory", []),
])
def test_citation_parser(text, expected):
    assert cited_sections(text) == expected


def test_checks_can_fail(tmp_path):
    assert FORBIDDEN.search("as " + "SP" + "EC.md section 5 says")
    assert not FORBIDDEN.search("F32_SPECIALS = ADAMW_SPECS")
    assert "9.9" not in sections(THEORY.read_text(encoding="utf-8"))
    assert slug("5.2 The quadratic example: closed forms") == "52-the-quadratic-example-closed-forms"
