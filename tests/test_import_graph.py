"""The package's import graph has no cycle, no module imports below its top, and no module
imports a private name of another (a name another module needs is public).

Every ``import``/``from ... import`` of an ``ecosim`` module anywhere in a file (at the top
or inside a function) is an edge; a strongly connected component of two or more modules is
a cycle. The checker is shown to find the cycle of a two-module package built for the test.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "ecosim"


def _modules(root: Path, package: str) -> dict[str, Path]:
    out = {}
    for f in root.rglob("*.py"):
        parts = [package, *f.relative_to(root).with_suffix("").parts]
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """``{module: modules of the package it imports}``."""
    mods = _modules(root, package)
    graph = {}
    for mod, path in mods.items():
        here = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                deps |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(here[:len(here) - node.level + 1] + (
                    [node.module] if node.module else [])) if node.level else node.module
                deps |= {f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                         for a in node.names}
        graph[mod] = {d for d in deps if d in mods and d != mod}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of two or more nodes (Tarjan's algorithm)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while not comp or comp[-1] != v:
                comp.append(stack.pop())
                on.discard(comp[-1])
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_checker_finds_a_cycle(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..a import x\n")
    (pkg / "c.py").write_text("from . import a\n")
    assert cycles(import_graph(pkg, "pkg")) == [["pkg.a", "pkg.sub.b"]]


def test_the_package_has_no_import_cycle():
    graph = import_graph(ROOT, "ecosim")
    assert len(graph) > 100 and graph["ecosim.torch.layers"] >= {"ecosim.torch.nn"}
    assert cycles(graph) == []


def test_no_import_below_the_top_of_a_module():
    hits = [f"{p.relative_to(ROOT.parent)}:{i}" for p in sorted(ROOT.rglob("*.py"))
            for i, line in enumerate(p.read_text().splitlines(), 1) if "noqa: E402" in line]
    assert hits == []


def private_imports(root: Path, package: str) -> dict[str, list[str]]:
    """``{module: private names it imports from other modules of the package}`` (a name with
    one leading underscore, in a ``from ... import`` of a package module)."""
    mods = _modules(root, package)
    out = {}
    for mod, path in mods.items():
        names = []
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith(
                    package)):
                names += [a.name for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
        if names:
            out[mod] = names
    return out


#: The one exception: old pickles of a GradSlot name the rebuild function by its path in
#: ecosim.torch.nn, which imports it from ecosim.torch.slot for them.
PICKLED = {"ecosim.torch.nn": ["_rebuild_slot"]}


def test_the_checker_finds_a_private_import(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("_x = 1\ny = 2\n__all__ = ['y']\n")
    (pkg / "b.py").write_text("from .a import _x, y\nfrom . import _c\n")
    (pkg / "_c.py").write_text("")
    assert private_imports(pkg, "pkg") == {"pkg.b": ["_x", "_c"]}


def test_no_module_imports_a_private_name_of_another():
    assert private_imports(ROOT, "ecosim") == PICKLED
