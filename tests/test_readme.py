"""The README's code runs, and its generated blocks equal what the code generates."""

import doctest
from pathlib import Path

from ecosim import memory
from ecosim.tooling.readme import refresh

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def test_readme_examples_run():
    result = doctest.testfile(str(README), module_relative=False,
                              optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 5
    assert result.failed == 0


def test_generated_blocks_are_up_to_date():
    # formats and memory tables, the gallery, and the tables `ecosim figures` wrote
    assert refresh(README, ROOT / "figures", check=True) == []
    text = README.read_text()
    assert memory.markdown_table() in text  # the formats table is a page of the site
