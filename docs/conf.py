"""Sphinx configuration of ecosim's documentation site (``make docs``).

The results pages, the API reference, the README's generated tables and the notebook pages are
written at build start by ``_ext/ecosim_docs.py`` from the committed ``figures/``, the figure
registry, the ``__all__`` of every public module and ``notebooks/``; none of them is committed.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(DOCS / "_ext"))

# The notebooks execute in their smoke mode (seconds each, the mode the test suite runs them
# in), so a build never trains at full size; jupyter-cache keeps their outputs between builds
# and re-executes a notebook only when its code changes.
os.environ.setdefault("ECOSIM_SMOKE", "1")

project = "ecosim"
author = "the ecosim authors"
copyright = "the ecosim authors"
try:
    from importlib.metadata import version as _version
    release = _version("ecosim")
except Exception:  # a checkout without the editable install
    release = "0.1.0"

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "ecosim_docs",
]

source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "**.ipynb_checkpoints",
                    "results_notes/*"]
root_doc = "index"

myst_enable_extensions = ["colon_fence", "dollarmath", "deflist"]
myst_heading_anchors = 4

nb_execution_mode = "cache"
nb_execution_cache_path = str(DOCS / "_build" / ".jupyter_cache")
nb_execution_timeout = 300
nb_execution_raise_on_error = True
nb_merge_streams = True

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"undoc-members": False}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True  # a dataclass's Attributes section, not a second attribute entry
# headed lists of "name: description" in module docstrings, read like Args
napoleon_custom_sections = [("Public names", "params_style"),
                            ("Which exactness claims hold where", "params_style")]
autodoc_inherit_docstrings = False  # a base class's (the standard library's) prose is not ours
# A short name in a signature that several modules export (ecosim.Quantizer and
# ecosim.torch.Quantizer) resolves to one of them; the ambiguity is not a broken link.
suppress_warnings = ["ref.python"]

html_theme = "furo"
html_title = "ecosim"
html_static_path = []
html_show_sourcelink = False
