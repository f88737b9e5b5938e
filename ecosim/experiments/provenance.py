"""What determines a cached result's bytes, and where the code that computed it came from.

A cache entry must never outlive the code that computed it, so its key covers the code itself
rather than a version tag that someone has to remember to bump. :func:`code_fingerprint`
follows, from an experiment's module, every ``import`` statement it makes (anywhere in the
file, lazy imports inside functions included) through the ``ecosim`` package, transitively, and
hashes the code of every ecosim source file it reaches (its syntax tree without docstrings,
:func:`code_bytes`: prose edits never recompute a result, code edits always do). The
third-party packages those files import (NumPy, ml_dtypes, SciPy, torch...) enter the key as
their installed versions, and the Python version too (the LM experiment's default corpus is the
standard library's source).
Where NumPy is imported, so is the BLAS that NumPy runs at run time (:func:`blas_fingerprint`):
OpenBLAS picks its kernel for the CPU it finds, and kernels sum float32 products in different
orders, so the same code and versions give different bits on different CPUs (stochastic
rounding then turns a last-bit difference into another trajectory). The same holds for NumPy's
own vector math (exp, tanh, log...), whose kernels NumPy picks for the CPU's instruction set
(AVX2 or AVX-512): :func:`ufunc_fingerprint` enters the key beside the BLAS.

Rules of the walk (static, on the syntax tree, so a module is never imported to be hashed):

* ``import ecosim.a.b`` and ``from ecosim.a import b`` follow ``ecosim.a.b`` (a module or a
  package ``__init__``); relative imports resolve against the importing module's package.
* ``from pkg import name`` where ``name`` is not a submodule follows ``pkg``'s ``__init__``
  (``name`` is defined there or imported by it).
* Parent packages that Python executes on the way (``ecosim/__init__.py`` for any submodule)
  are hashed but not followed: their other imports only register or re-export names that the
  experiment does not use (for ``ecosim.experiments`` that is every other experiment, which
  would otherwise invalidate each other's caches).

:func:`git_revision` gives the commit and dirty flag of the checkout the package runs from;
each cache entry records it with the source hash, and figures report mixed or dirty provenance.
"""
from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

__all__ = ["blas_fingerprint", "code_bytes", "code_fingerprint", "git_revision",
           "ufunc_fingerprint",
           "package_versions", "source_files"]

_PACKAGE = "ecosim"
_ROOT = Path(__file__).resolve().parent.parent  # the ecosim package directory


def _module_file(name: str, root: Path) -> Path | None:
    """The source file of ecosim module ``name`` under ``root`` (the package dir), or None."""
    parts = name.split(".")
    if parts[0] != _PACKAGE:
        return None
    base = root.joinpath(*parts[1:])
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _imports(path: Path, name: str, root: Path) -> tuple[list[str], set[str]]:
    """(ecosim modules ``name`` imports explicitly, top-level third-party names it imports)."""
    tree = ast.parse(path.read_bytes(), filename=str(path))
    is_pkg = path.name == "__init__.py"
    package = name if is_pkg else name.rpartition(".")[0]
    modules: list[str] = []
    external: set[str] = set()

    def note(target: str):
        if target.split(".")[0] == _PACKAGE:
            modules.append(target)
        else:
            external.add(target.split(".")[0])

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                note(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != _PACKAGE:
                note(target)
                continue
            for alias in node.names:  # `from pkg import sub` may name a submodule...
                sub = f"{target}.{alias.name}"
                if alias.name != "*" and _module_file(sub, root) is not None:
                    modules.append(sub)
                else:  # ...or a name that pkg's own file defines or imports
                    modules.append(target)
    return modules, external


def _closure(roots: tuple[str, ...], root: Path) -> tuple[dict[str, Path], set[str]]:
    """Every ecosim module reached from ``roots`` (followed), parents (hashed only), externals."""
    followed: dict[str, Path] = {}
    external: set[str] = set()
    stack = list(roots)
    while stack:
        name = stack.pop()
        if name in followed:
            continue
        path = _module_file(name, root)
        if path is None:  # not a file of the package (a misspelt or generated name)
            continue
        followed[name] = path
        modules, ext = _imports(path, name, root)
        if name != __name__:  # this module's own imports only fingerprint, never compute
            external |= ext
        stack += [m for m in modules if m not in followed]
    files = dict(followed)
    for name in list(followed):  # parents that Python executes on the way
        parts = name.split(".")
        for i in range(1, len(parts)):
            parent = ".".join(parts[:i])
            path = _module_file(parent, root)
            if path is not None:
                files.setdefault(parent, path)
    external -= set(sys.stdlib_module_names) | {"__future__", ""}
    return files, external


def source_files(*modules: str, root: str | Path | None = None) -> dict[str, Path]:
    """The ecosim source files whose bytes :func:`code_fingerprint` hashes for ``modules``."""
    return _closure(tuple(modules), Path(root) if root is not None else _ROOT)[0]


@lru_cache(maxsize=None)
def _distribution_of() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def package_versions(names) -> dict[str, str | None]:
    """Installed distribution versions of top-level import names (None: not installed)."""
    dists = _distribution_of()
    out = {}
    for name in sorted(set(names)):
        found = None
        for dist in dists.get(name, [name]):
            try:
                found = importlib.metadata.version(dist)
                break
            except importlib.metadata.PackageNotFoundError:
                continue
        out[name] = found
    return out


def code_bytes(path: str | Path) -> bytes:
    """What a source file contributes to the key: its syntax tree with every docstring (the
    first string statement of the module, a class or a function) removed, dumped without
    line and column positions; the raw bytes of a file that does not parse."""
    raw = Path(path).read_bytes()
    try:
        tree = ast.parse(raw)
    except (SyntaxError, ValueError):
        return raw
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(
                    getattr(body[0], "value", None), ast.Constant) and isinstance(
                    body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree, annotate_fields=True, include_attributes=False).encode()


@lru_cache(maxsize=None)
def code_fingerprint(*modules: str, root: str | None = None) -> dict:
    """The code part of a cache key for results computed by ``modules`` (and what they import).

    Returns ``{"source_sha256": ..., "files": n, "packages": {name: version}, "python": ...}``:
    the SHA-256 over the sorted (path relative to the package, code) of every ecosim source
    file reached (see the module docstring), the versions of the third-party packages those
    files import, and the Python version. A file's code is its syntax tree without docstrings
    and positions (:func:`code_bytes`): an edit to the code of any of those files, or a
    different version of any of those packages, changes the key; an edit to comments,
    docstrings or layout alone does not (it cannot change a result). Where those files import
    NumPy, ``"blas"`` (:func:`blas_fingerprint`) and ``"ufuncs"`` (:func:`ufunc_fingerprint`)
    say which kernels ran; where they import torch, ``"torch_cpu"``. Cached per process:
    sources are not expected to change under a running build.

    Example:
        >>> fp = code_fingerprint("ecosim.experiments.beta_factor")
        >>> sorted(fp)
        ['blas', 'files', 'packages', 'python', 'source_sha256', 'ufuncs']
        >>> "numpy" in fp["packages"]
        True
    """
    pkg_root = Path(root) if root is not None else _ROOT
    files, external = _closure(tuple(modules), pkg_root)
    h = hashlib.sha256()
    for path in sorted(files.values()):
        rel = path.relative_to(pkg_root).as_posix()
        data = code_bytes(path)
        h.update(f"{rel}\0{len(data)}\0".encode())
        h.update(data)
    v = sys.version_info
    out = {"source_sha256": h.hexdigest(), "files": len(files),
           "packages": package_versions(external), "python": f"{v.major}.{v.minor}.{v.micro}"}
    if "numpy" in external:
        out["blas"] = blas_fingerprint()
        out["ufuncs"] = ufunc_fingerprint()
    if "torch" in external:
        out["torch_cpu"] = _torch_cpu_capability()
    return out


def _torch_cpu_capability() -> str | None:
    """The vector instruction set torch's CPU kernels dispatch to here (e.g. ``AVX2``)."""
    try:
        import torch
        return str(torch.backends.cpu.get_cpu_capability())
    except (ImportError, AttributeError):
        return None


@lru_cache(maxsize=1)
def blas_fingerprint() -> dict:
    """What NumPy's linear algebra runs on this machine, as far as it changes bits.

    ``libraries``: the BLAS libraries loaded (library, version, the kernel chosen for this
    CPU, e.g. OpenBLAS's ``Haswell``) where threadpoolctl is installed, else None; ``probe``:
    a hash of the bytes of a few fixed float32 products (matrix and vector shapes of the
    size the experiments use), which differs whenever the kernel sums in another order.

    Example:
        >>> sorted(blas_fingerprint())
        ['libraries', 'probe']
    """
    import numpy as np

    try:
        from threadpoolctl import threadpool_info
        libs = sorted((i.get("internal_api"), i.get("version"), i.get("architecture"))
                      for i in threadpool_info() if i.get("user_api") == "blas")
        libraries = [list(map(str, lib)) for lib in libs]
    except ImportError:
        libraries = None
    h = hashlib.sha256()
    x = (np.arange(1, 64 * 97 + 1, dtype=np.float64) * 0.6180339887498949 % 1.0 - 0.5)
    x = x.astype(np.float32)
    for m, k, n in ((64, 97, 1), (64, 97, 33), (8, 64, 97), (97, 64, 64)):
        a = x[: m * k].reshape(m, k)
        b = x[: k * n].reshape(k, n) if n > 1 else x[:k]
        h.update(np.ascontiguousarray(a @ b).tobytes())
    return {"libraries": libraries, "probe": h.hexdigest()[:16]}


@lru_cache(maxsize=1)
def ufunc_fingerprint() -> dict:
    """Which kernels NumPy's element-wise math runs on this machine, as far as it changes bits.

    NumPy compiles its ufuncs for several instruction sets and picks, at import, the widest the
    CPU has and the environment allows (``NPY_ENABLE_CPU_FEATURES``,
    ``NPY_DISABLE_CPU_FEATURES``); its AVX-512 exp, tanh, log and cos round some results
    differently from its AVX2 ones. ``targets``: the dispatch targets enabled here (e.g.
    ``['X86_V3']``), None where this NumPy does not say; ``probe``: a hash of exp, tanh,
    log1p, expm1, sin, cos, log, sum and cumsum of fixed float32 and float64 inputs, which
    differs whenever a kernel rounds another way.

    Example:
        >>> sorted(ufunc_fingerprint())
        ['probe', 'targets']
    """
    import numpy as np

    try:  # NumPy's own record of its dispatch; not public API, so optional
        from numpy._core import _multiarray_umath as umath
    except ImportError:
        try:
            from numpy.core import _multiarray_umath as umath
        except ImportError:
            umath = None
    targets = None
    if umath is not None and hasattr(umath, "__cpu_dispatch__"):
        targets = [str(t) for t in umath.__cpu_dispatch__ if umath.__cpu_features__.get(t)]
    x = (np.arange(1, 4097, dtype=np.float64) * 0.6180339887498949 % 1.0 - 0.5) * 8
    h = hashlib.sha256()
    for dt in (np.float32, np.float64):
        v = x.astype(dt)
        for f in (np.exp, np.tanh, np.log1p, np.expm1, np.sin, np.cos):
            h.update(f(np.abs(v) if f is np.log1p else v).tobytes())
        h.update(np.log(np.abs(v) + 1).tobytes())
        h.update(np.sum(v).tobytes())
        h.update(np.cumsum(v).tobytes())
    return {"targets": targets, "probe": h.hexdigest()[:16]}


@lru_cache(maxsize=1)
def git_revision() -> tuple[str | None, bool | None]:
    """``(commit, dirty)`` of the git checkout holding this package, or ``(None, None)``.

    ``dirty``: files under ``ecosim/`` differ from that commit (or are untracked). Never
    raises: no git, no checkout, or an installed (untracked) copy all give ``(None, None)``.
    """
    def git(*args) -> str:
        return subprocess.run(["git", "-C", str(_ROOT), *args], capture_output=True, text=True,
                              check=True, timeout=10).stdout.strip()
    try:
        git("ls-files", "--error-unmatch", "__init__.py")  # is this copy tracked here?
        rev = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--", "."))
    except (OSError, subprocess.SubprocessError, ValueError):
        return None, None
    return rev or None, dirty
