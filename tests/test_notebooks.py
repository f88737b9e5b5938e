"""Notebooks: committed without outputs, and each runs top to bottom in a fresh kernel.

The kernel runs with ``ECOSIM_SMOKE=1``, which every notebook reads to shrink its work (steps,
sizes, seeds), so the four execute in seconds. The kernel is the native ``python3`` kernel of
the interpreter running the tests (``sys.executable``, the venv's), whatever kernel specs the
user has installed elsewhere.
"""
from __future__ import annotations

import os
import pathlib

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from traitlets import default

NOTEBOOKS_DIR = pathlib.Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = (
    "01_formats_and_rounding.ipynb",
    "02_eco_on_a_quadratic.ipynb",
    "03_mlp_every_scheme.ipynb",
    "04_checking_the_bounds.ipynb",
)
CELL_TIMEOUT = 300  # seconds per cell: a hang fails the test instead of stalling the suite

pytestmark = pytest.mark.notebooks


class _NativeKernelManager(AsyncKernelManager):
    """A kernel manager that knows only the native kernel of the running interpreter."""

    @default("kernel_spec_manager")
    def _kernel_spec_manager_default(self):
        return KernelSpecManager(kernel_dirs=[], parent=self)


def _read(name: str) -> nbformat.NotebookNode:
    nb = nbformat.read(NOTEBOOKS_DIR / name, as_version=4)
    nbformat.validate(nb)
    return nb


def _code(nb) -> str:
    return "\n".join(c.source for c in nb.cells if c.cell_type == "code")


def test_the_notebooks_are_the_four():
    assert sorted(p.name for p in NOTEBOOKS_DIR.glob("*.ipynb")) == list(NOTEBOOKS)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_committed_without_outputs(name):
    nb = _read(name)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{name}: cell {i} has outputs; strip them"
            assert cell.execution_count is None, f"{name}: cell {i} has an execution count"
    # each imports ecosim and has a smoke switch the suite can turn on
    code = _code(nb)
    assert "import ecosim" in code and "ECOSIM_SMOKE" in code


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_executes_in_smoke_mode(name, tmp_path):
    nb = _read(name)
    client = NotebookClient(
        nb,
        timeout=CELL_TIMEOUT,
        kernel_name="python3",
        # the cwd is a fresh directory: a notebook may not rely on (or write into) the checkout
        resources={"metadata": {"path": str(tmp_path)}},
        # no kernel_dirs: only the native kernel of this interpreter, argv[0] = sys.executable
        kernel_manager_class=_NativeKernelManager,
    )
    env = {**os.environ, "ECOSIM_SMOKE": "1"}
    env.pop("MPLBACKEND", None)  # the notebooks plot inline
    client.execute(env=env)  # raises CellExecutionError, naming the cell, on any error
    assert "smoke mode: True" in _stream_text(nb, "stdout")
    stderr = _stream_text(nb, "stderr")
    assert "Warning" not in stderr, f"{name} emitted a warning:\n{stderr}"
    images = sum("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code"
                 for o in c.outputs)
    assert images >= 1, f"{name} drew no figure"


def _stream_text(nb, stream: str) -> str:
    return "".join(o.text for c in nb.cells if c.cell_type == "code" for o in c.outputs
                   if o.output_type == "stream" and o.name == stream)
