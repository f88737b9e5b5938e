"""The documentation site: every public name is in the API reference, the site builds with
warnings as errors, no internal link is broken, and the guides' examples run.

* The public modules are those of ecosim with an ``__all__`` and no private part in their name
  (``docs/_ext/ecosim_docs.py``, ``public_modules``); the reference is generated from them, so
  the fast tests check the generated pages and the slow one the built objects inventory.
* Broken internal links: Sphinx with ``-W`` fails on a MyST link to a missing page or heading,
  and the built HTML is checked for relative links and anchors that lead nowhere.
* Each check has a negative control: a fake name missing from the reference and a fake page
  with a broken link are reported.

The build executes the notebooks (in their smoke mode, cached between builds) and takes over
a minute, so it is marked slow; ``make docs`` and CI run it.
"""
from __future__ import annotations

import doctest
import html.parser
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
sys.path.insert(0, str(DOCS / "_ext"))

import ecosim_docs  # noqa: E402  (docs/_ext is not a package)

# the pages whose ``>>>`` examples are executed (the README's examples moved here)
EXAMPLE_PAGES = sorted([DOCS / "getting-started.md", *(DOCS / "guide").glob("*.md")])

DIRECTIVE = re.compile(r"^\.\. (?:auto(?:module|class|function|data)|py:\w+):: (\S+)"
                       r"(?:\n   :module: (\S+))?", re.M)
MODULE_ITEM = re.compile(r"^- :py:mod:`([\w.]+)`", re.M)


def documented_in_rst(api_dir: Path) -> set[str]:
    """Qualified names that the generated reference pages document."""
    names = set()
    for page in api_dir.glob("*.rst"):
        text = page.read_text()
        for name, module in DIRECTIVE.findall(text):
            names.add(f"{module}.{name}" if module else name)
        names.update(MODULE_ITEM.findall(text))
    return names


def test_public_modules_include_the_main_ones_and_no_private_one():
    modules = ecosim_docs.public_modules()
    for m in ("ecosim", "ecosim.core", "ecosim.core.formats", "ecosim.core.rounding",
              "ecosim.core.quantizer", "ecosim.optim",
              "ecosim.experiments", "ecosim.figures", "ecosim.claims", "ecosim.theory",
              "ecosim.torch", "ecosim.torch.nn", "ecosim.torch.lm", "ecosim.torch.optim"):
        assert m in modules
    assert not [m for m in modules if any(p.startswith("_") for p in m.split("."))]


def test_missing_from_reports_a_name_the_reference_lacks():  # the negative control
    names = {"ecosim": ["quantize", "no_such_name"], "ecosim.core.formats": ["get"]}
    documented = {"ecosim.quantize", "ecosim.core.formats.get"}
    assert ecosim_docs.missing_from(documented, names) == ["ecosim.no_such_name"]


def test_generated_reference_documents_every_public_name(tmp_path):
    ecosim_docs.write_api(tmp_path)
    documented = documented_in_rst(tmp_path / "api")
    assert ecosim_docs.missing_from(documented, ecosim_docs.public_names()) == []
    # the same check fails on a page that lost an entry
    page = tmp_path / "api" / "ecosim.core.formats.rst"
    page.write_text(re.sub(r"^\.\. autofunction:: ecosim\.core\.formats\.get\n", "",
                           page.read_text(), flags=re.M))
    assert "ecosim.core.formats.get" in ecosim_docs.missing_from(
        documented_in_rst(tmp_path / "api"), ecosim_docs.public_names())


def test_a_results_page_per_figure(tmp_path):
    from ecosim.figures import figures

    pages = ecosim_docs.write_results(tmp_path)
    assert pages == list(figures())
    text = (tmp_path / "results" / "claims.md").read_text()
    assert "../../figures/claims.png" in text and "../../figures/claims.md" in text
    assert "../theory.md#59-the-claims-table" in text


@pytest.mark.parametrize("page", EXAMPLE_PAGES, ids=lambda p: p.name)
def test_guide_examples_run(page):
    result = doctest.testfile(str(page), module_relative=False,
                              optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


class _Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("href"):
            self.hrefs.append(attrs["href"])
        if tag in ("img", "script") and attrs.get("src"):
            self.hrefs.append(attrs["src"])
        if tag == "link" and attrs.get("href"):
            self.hrefs.append(attrs["href"])


def broken_links(site: Path) -> list[str]:
    """Relative links of the built HTML whose file or anchor does not exist."""
    parsed = {}
    for page in site.rglob("*.html"):
        p = _Links()
        p.feed(page.read_text(errors="replace"))
        parsed[page.resolve()] = p
    broken = []
    for page, p in parsed.items():
        for href in p.hrefs:
            parts = urlsplit(href)
            if parts.scheme or parts.netloc or href.startswith("mailto:"):
                continue
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{page.relative_to(site.resolve())}: {href}")
            elif parts.fragment and target.suffix == ".html":
                ids = parsed[target].ids if target in parsed else set()
                if unquote(parts.fragment) not in ids:
                    broken.append(f"{page.relative_to(site.resolve())}: {href}")
    return sorted(broken)


def test_broken_links_reports_a_missing_page_and_anchor(tmp_path):  # the negative control
    (tmp_path / "a.html").write_text('<a href="b.html#here">ok</a><a href="c.html">no</a>'
                                     '<a href="b.html#gone">no</a><a href="https://x.org">ext</a>')
    (tmp_path / "b.html").write_text('<h1 id="here">B</h1>')
    assert broken_links(tmp_path) == ["a.html: b.html#gone", "a.html: c.html"]


@pytest.mark.slow
def test_site_builds_with_warnings_as_errors_and_links_resolve(tmp_path):
    out = tmp_path / "html"
    run = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         "-d", str(tmp_path / "doctrees"), str(DOCS), str(out)],
        capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-4000:]
    from sphinx.util.inventory import InventoryFile

    inventory = InventoryFile.loads((out / "objects.inv").read_bytes(), uri="")
    documented = {name for (domain, name) in _inventory_names(inventory) if domain == "py"}
    assert ecosim_docs.missing_from(documented, ecosim_docs.public_names()) == []
    assert broken_links(out) == []


def _inventory_names(inventory):
    """(domain, name) pairs of a loaded inventory, whichever shape Sphinx returns."""
    data = getattr(inventory, "data", inventory)
    for objtype, entries in data.items():
        for name in entries:
            yield objtype.split(":")[0], name
