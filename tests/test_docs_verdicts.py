"""docs/verdicts.md covers every verdict function of ecosim.claims, and its controls exist.

A verdict function is found by introspection, by this rule: a public (no leading underscore)
function defined at module level in a submodule of ``ecosim.claims`` that is not a renderer
(its name does not contain ``markdown``) and that

* has the word ``verdict`` in its source (its name, docstring or body: it returns a verdict
  or writes a ``"verdict"`` field), or
* is annotated to return ``Claim`` objects (each carries a verdict), or
* is a thin wrapper: its body returns a call of a verdict function found by the first two
  points (``return lm_orderings(...)``).

Each must have a section in docs/verdicts.md whose heading names it as
``## `ecosim.claims.<module>.<function>` ``. Every control the document names as
``tests/<file>.py::<test>`` must be a test function defined at module level in that file.
"""
import ast
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import ecosim.claims

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "verdicts.md"
REF = re.compile(r"(tests/[A-Za-z0-9_/]+\.py)::([A-Za-z_][A-Za-z0-9_]*)")


def _public_functions():
    for info in pkgutil.iter_modules(ecosim.claims.__path__):
        mod = importlib.import_module(f"ecosim.claims.{info.name}")
        for name, f in inspect.getmembers(mod, inspect.isfunction):
            if f.__module__ == mod.__name__ and not name.startswith("_") \
                    and "markdown" not in name:
                yield f"{info.name}.{name}", f


def verdict_functions() -> set[str]:
    """``module.function`` of every verdict function of ecosim.claims, by the rule above."""
    funcs = dict(_public_functions())
    found = {k for k, f in funcs.items()
             if re.search(r"verdict", inspect.getsource(f), re.IGNORECASE)
             or "Claim" in str(inspect.signature(f).return_annotation)}
    for k, f in funcs.items():
        body = inspect.getsource(f)
        if any(re.search(rf"\breturn\s+{re.escape(v.split('.')[1])}\(", body) for v in found):
            found.add(k)
    return found


def _sections(text: str) -> set[str]:
    return set(re.findall(r"^## `ecosim\.claims\.([a-z_]+\.[a-z_0-9]+)`", text, re.MULTILINE))


def _missing_sections(text: str) -> list[str]:
    return sorted(verdict_functions() - _sections(text))


def _missing_controls(text: str) -> list[str]:
    missing, defined = [], {}
    for path, test in sorted(set(REF.findall(text))):
        f = ROOT / path
        if path not in defined:
            defined[path] = ({n.name for n in ast.parse(f.read_text()).body
                              if isinstance(n, ast.FunctionDef)} if f.is_file() else set())
        if not test.startswith("test") or test not in defined[path]:
            missing.append(f"{path}::{test}")
    return missing


def test_the_rule_finds_the_known_verdicts():
    """The rule is not vacuous: it finds the verdicts of every table, the wrapper, and no
    renderer or plain statistic."""
    found = verdict_functions()
    assert {"stats.sign_verdict", "table.verdict_of", "theory.evaluate", "lm.lm_orderings",
            "lm.gap_change", "lm_moe.moe_orderings", "mlp.shape_checks", "dqt.evaluate",
            "dqt.competitive_verdict", "dqt_lm.lm_claims", "horizon.b2_verdicts",
            "sr_bits.summarise"} <= found
    assert not found & {"stats.t_interval", "lm.lm_cells", "dqt.paired_gap",
                        "theory.claims_markdown", "horizon.markdown_table"}


def test_every_verdict_function_has_a_section():
    missing = _missing_sections(DOC.read_text())
    assert not missing, f"docs/verdicts.md has no section for {missing}"


def test_every_named_control_exists():
    text = DOC.read_text()
    assert len(set(REF.findall(text))) >= 20  # the document names its controls
    missing = _missing_controls(text)
    assert not missing, f"docs/verdicts.md names tests that do not exist: {missing}"


def test_the_checks_fail_on_a_broken_document():
    """Negative controls of the two checks: a document with one section removed, and one
    naming a test that does not exist, are both caught."""
    text = DOC.read_text()
    start = text.index("## `ecosim.claims.horizon.b2_verdicts`")
    end = text.index("\n## ", start + 1)
    assert _missing_sections(text[:start] + text[end + 1:]) == ["horizon.b2_verdicts"]
    broken = text + "\n`tests/test_verdict_controls.py::test_no_such_control`\n"
    assert _missing_controls(broken) == ["tests/test_verdict_controls.py::test_no_such_control"]
    assert _missing_controls(text + "\n`tests/test_no_such_file.py::test_x`\n") == \
        ["tests/test_no_such_file.py::test_x"]
