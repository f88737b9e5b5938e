"""Source says why, not when: the comments and docstrings of ``ecosim/``, ``tests/`` and
``benchmarks/`` carry no dates, commit hashes, stories of where a figure was measured, or timing figures.

Such text goes stale the day it is written (the code moves on, the machine changes) and cannot be
checked; measurements belong in generated benchmark outputs, provenance in git. The scanner reads
only prose: ``tokenize`` comments and ``ast`` docstrings, never code or other string literals, so
format names, hex constants and pinned digests in code are untouched.
"""
import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("ecosim", "tests", "benchmarks")

_MONTH = (r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|"
          r"Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)")
RULES = {
    "date": re.compile(r"\b(?:19|20)\d{2}-(?:0[1-9]|1[0-2])(?:-(?:0[1-9]|[12]\d|3[01]))?\b"
                       rf"|\b{_MONTH}\.? (?:\d{{1,2}},? )?(?:19|20)\d{{2}}\b"),
    # 7-40 hex characters with at least one letter and one digit, not part of a 0x literal or a
    # longer word; digests of 64 characters (sha256) are too long to match.
    "commit": re.compile(r"(?<![0-9A-Za-z_x])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}"
                         r"(?![0-9A-Za-z_])"),
    # Stories of where and under what load something ran.
    "machine": re.compile(r"\bmeasured (?:on|at)\b|\b(?:idle|shared|lighter|heavier|busy) "
                          r"(?:\d+-core )?(?:machine|box|host|load)\b|\b\d+-core machine\b"
                          r"|\bunder (?:a |heavy |light )?load\b|\b(?:heavy|light) load\b|\bload of \d|\bEPYC\b|\bXeon\b", re.I),
    # A number with a unit of time; bare ``h`` is left out (step sizes: ``2h``, ``O(h^2)``).
    "timing": re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?: |-)?(?:CPU-(?:s|min|h|seconds?|minutes?|"
                         r"hours?)|ms|µs|us|s|sec|secs|seconds?|min|mins|minutes?|hours?)\b(?!-)"),
}

# (path, rule, matched text) -> why the text is not a date, hash or timing in prose.
ALLOWED = {
}


def prose(source):
    """Yield ``(line, text)`` for every comment and docstring of a Python source string."""
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                yield body[0].lineno, body[0].value.value


def findings(source):
    """``(line, rule, matched text)`` for each date, hash, story or timing in the prose."""
    out = []
    for line, text in prose(source):
        for rule, pattern in RULES.items():
            out.extend((line + text.count("\n", 0, m.start()), rule, m.group(0))
                       for m in pattern.finditer(text))
    return sorted(out)


def scanned_files():
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), path


def test_comments_and_docstrings_carry_no_history():
    bad = []
    for rel, path in scanned_files():
        for line, rule, text in findings(path.read_text(encoding="utf-8")):
            if (rel, rule, text) not in ALLOWED:
                bad.append(f"{rel}:{line}: {rule}: {text!r}")
    assert not bad, "history or timings in prose (say why instead):\n" + "\n".join(bad)


def test_allow_list_entries_still_match():
    """A stale allow-list entry hides nothing and should go."""
    live = set()
    for rel, path in scanned_files():
        live.update((rel, rule, text) for _, rule, text in findings(path.read_text("utf-8")))
    assert not set(ALLOWED) - live, sorted(set(ALLOWED) - live)


# The history the scanner must flag, assembled so that this file itself holds none of it
DATE, MONTH = "2024" + "-03-07", "March" + " 2024"
COMMIT, MEASURED = "3fa9" + "c1d", "measured" + " on"
SYNTHETIC = '''"""Module written on {date} after the run of {month}."""
X = 0x1f2e3d4c5b  # a hex constant in code is fine: this comment names none


def f():
    """Fixed in commit {commit}, {measured} the lab box: 12 s per run, 3.5 CPU-s."""
    return "{date} in a plain string literal is data, not prose"  # takes 40 ms
'''.format(date=DATE, month=MONTH, commit=COMMIT, measured=MEASURED)


@pytest.mark.parametrize("rule, text", [
    ("date", DATE), ("date", MONTH), ("commit", COMMIT),
    ("machine", MEASURED), ("timing", "12 s"), ("timing", "3.5 CPU-s"),
    ("timing", "40 ms"),
])
def test_scanner_flags_synthetic_history(rule, text):
    assert (rule, text) in {(r, t) for _, r, t in findings(SYNTHETIC)}


def test_scanner_ignores_code_and_plain_strings():
    lines = {line for line, _, _ in findings(SYNTHETIC)}
    assert 2 not in lines  # the hex constant's line
    assert sum(1 for _, r, t in findings(SYNTHETIC) if t == DATE) == 1


@pytest.mark.parametrize("text", [
    "float8_e4m3fn and e5m2 formats", "a 0x7f800000 mask", "steps 1 to 10",
    "sha256 of the file", "bfloat16 has 8 exponent bits", "3 minutes-long",
])
def test_scanner_passes_ordinary_prose(text):
    assert findings(f"# {text}\n") == []
