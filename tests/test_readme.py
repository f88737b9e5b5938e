"""The README's code runs, and its generated tables equal what the code generates."""

import doctest
from pathlib import Path

from ecosim import memory
from ecosim.catalog import markdown_table

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_examples_run():
    result = doctest.testfile(str(README), module_relative=False,
                              optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 5
    assert result.failed == 0


def test_formats_table_is_the_generated_one():
    assert markdown_table() in README.read_text()


def test_memory_table_is_the_generated_one():
    assert memory.markdown_table() in README.read_text()
