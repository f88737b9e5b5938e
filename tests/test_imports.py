"""Packages talk through public names: no ecosim module uses another package's private name.

A private name (``_x``, not a dunder) belongs to its package: modules of the same package (the
same folder) may share it, modules elsewhere may not. Checked on the syntax tree of every module
of ``ecosim``: ``from X import _x`` (relative imports resolved) and ``Y._x`` where ``Y`` was
imported from another package (a module, a class or a function of it). What the torch backend
needs from the core has public, documented names (``ecosim.core.rounding.plan``,
``ecosim.core.rng.mix32``, ...).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "ecosim"


def _modules() -> dict[str, Path]:
    """``{dotted name: path}`` of every module of ecosim (packages by their ``__init__``)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = ("ecosim",) + path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _package(name: str) -> str:
    """The package a module belongs to (a package's ``__init__`` belongs to the package)."""
    return name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]


# A named tuple's public API starts with an underscore (so as not to clash with field names).
NAMEDTUPLE_API = {"_asdict", "_field_defaults", "_fields", "_make", "_replace"}


def _private(name: str) -> bool:
    return (name.startswith("_") and not (name.startswith("__") and name.endswith("__"))
            and name not in NAMEDTUPLE_API)


def _resolve(name: str, node: ast.ImportFrom) -> str:
    """The absolute module of a ``from ... import`` in module ``name``."""
    if not node.level:
        return node.module or ""
    base = _package(name).split(".")
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _owner(target: str) -> str | None:
    """The ecosim module that defines what ``target`` (``module`` or ``module.name``) names."""
    while target and target not in MODULES:
        target = target.rpartition(".")[0]
    return target or None


def violations(name: str, path: Path) -> list[str]:
    """``file:line: what`` for each private name of another package that module uses."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    here = _package(name)
    foreign = {}  # local name -> owning ecosim module, for names imported from elsewhere
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            src = _resolve(name, node)
            for alias in node.names:
                owner = _owner(f"{src}.{alias.name}")
                if owner is None or _package(owner) == here:
                    continue
                if _private(alias.name):
                    found.append(f"{path.name}:{node.lineno}: from {src} import {alias.name}")
                foreign[alias.asname or alias.name] = owner
        elif isinstance(node, ast.Import):
            for alias in node.names:
                owner = _owner(alias.name)
                if owner is not None and _package(owner) != here and alias.asname:
                    foreign[alias.asname] = owner
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            chain, root = [node.attr], node.value
            while isinstance(root, ast.Attribute):  # Y.Cls._x: the chain down to its name
                chain.append(root.attr)
                root = root.value
            if isinstance(root, ast.Name) and root.id in foreign:
                dotted = ".".join([root.id] + chain[::-1])
                found.append(f"{path.name}:{node.lineno}: {dotted} ({foreign[root.id]})")
    return sorted(found)


def test_the_walk_sees_private_imports_and_attributes(tmp_path):
    src = ("from ..core.rounding import _plan, quantize\nfrom ..core import rng as _rng\n"
           "from . import nn\nx = _rng._mix(1) + quantize._cache + nn._local + _rng.A._b\n")
    path = tmp_path / "probe.py"
    path.write_text(src)
    MODULES["ecosim.torch.probe"] = path
    try:
        got = violations("ecosim.torch.probe", path)
    finally:
        del MODULES["ecosim.torch.probe"]
    assert got == ["probe.py:1: from ecosim.core.rounding import _plan",
                   "probe.py:4: _rng.A._b (ecosim.core.rng)",
                   "probe.py:4: _rng._mix (ecosim.core.rng)",
                   "probe.py:4: quantize._cache (ecosim.core.rounding)"]


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_private_names_across_packages(name):
    assert violations(name, MODULES[name]) == []


# -- the numeric core's former paths ---------------------------------------------------------------

def test_the_core_modules_former_paths_warn_and_give_the_same_objects():
    """ecosim.rounding and the other modules that moved into ecosim.core still import (old
    code, old pickles), with a DeprecationWarning naming the new path; their names are the new
    modules' own objects. An unknown module is still an ImportError."""
    import importlib
    import pickle
    import sys

    import ecosim
    from ecosim import former_paths as _moved
    from ecosim.core import quantizer as core_quantizer

    assert set(_moved.MOVED) >= {"ecosim.rounding", "ecosim.quantizer", "ecosim.formats",
                                 "ecosim._checks"}
    for old, new in _moved.MOVED.items():
        sys.modules.pop(old, None)
        with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
            mod = importlib.import_module(old)
        real = importlib.import_module(new)
        assert mod is real and real.__spec__.name == new  # one module; its spec its own
        sys.modules.pop(old, None)
    assert ecosim.formats is ecosim.core.formats and ecosim.rng is ecosim.core.rng
    with pytest.warns(DeprecationWarning, match="ecosim.quantizer moved"):
        from ecosim.quantizer import Quantizer as Old  # noqa: F401
    assert Old is ecosim.Quantizer is core_quantizer.Quantizer
    # a pickle written when the class lived at ecosim.quantizer loads as the same class
    payload = pickle.dumps(ecosim.Quantizer("e4m3"), protocol=0).replace(b"ecosim.core.quantizer",
                                                             b"ecosim.quantizer")
    assert pickle.loads(payload) == ecosim.Quantizer("e4m3")
    with pytest.raises(ImportError):
        importlib.import_module("ecosim.no_such_module")


def test_the_package_imports_no_former_path():
    """Inside ecosim every import names a module where it is: a former path would escape the
    cache keys' code fingerprints (which follow files) and warn. Shown to find one."""
    from ecosim.former_paths import MOVED

    def former(path: Path, mod: str, src: str) -> list[str]:
        here = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
        found = []
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.Import):
                found += [a.name for a in node.names if a.name in MOVED]
            elif isinstance(node, ast.ImportFrom):
                base = (".".join(here[:len(here) - node.level + 1]
                                 + ([node.module] if node.module else []))
                        if node.level else node.module)
                found += [n for n in [base] + [f"{base}.{a.name}" for a in node.names]
                          if n in MOVED]
        return found

    root = Path(__file__).resolve().parents[1] / "ecosim"
    bad = {}
    for f in root.rglob("*.py"):
        parts = ["ecosim", *f.relative_to(root).with_suffix("").parts]
        mod = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        hits = former(f, mod, f.read_text())
        if hits:
            bad[mod] = hits
    assert bad == {}
    probe = root / "optim" / "probe.py"
    assert former(probe, "ecosim.optim.probe", "from ..rounding import quantize\n"
                  "from .. import formats\nimport ecosim.rng\n") == [
        "ecosim.rounding", "ecosim.formats", "ecosim.rng"]
