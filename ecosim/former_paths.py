"""The former import paths of the numeric core's modules, as deprecated aliases.

The modules of :mod:`ecosim.core` sat one level up (``ecosim.rounding``, ``ecosim.formats``,
...). Code and torch checkpoints that name them keep working: importing a former path warns
(DeprecationWarning, naming the new one) and gives the new module itself, so the classes
and functions are the same objects and a write to the module reaches the one module.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

__all__ = ["MOVED", "Finder", "install"]

#: former module name -> its module now
MOVED = {f"ecosim.{m}": f"ecosim.core.{m}" for m in (
    "bitops", "catalog", "format_record", "formats", "gridrules", "quantizer", "quantizer_rows",
    "rng", "rounding", "rounding_codes", "rounding_modes", "scale_rules")}
MOVED["ecosim.checks"] = "ecosim.core.checks"
MOVED["ecosim._checks"] = "ecosim.core.checks"  # where NonFiniteError was defined (pickles)


class _Loader(importlib.abc.Loader):
    """Loads a former path as the module that replaced it (the same object, so writes to it
    and ``ecosim.formats`` stay the new module); its own ``__spec__`` is kept."""

    def create_module(self, spec):
        warnings.warn(f"{spec.name} moved to {MOVED[spec.name]}; import it from there",
                      DeprecationWarning, stacklevel=2)
        module = importlib.import_module(MOVED[spec.name])
        self._spec = module.__spec__  # the import system sets the former path's spec on it
        return module

    def exec_module(self, module):
        module.__spec__ = self._spec


class Finder(importlib.abc.MetaPathFinder):
    """Finds the former paths of :data:`MOVED` (after every other finder has not)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, _Loader())


def install() -> None:
    """Put :class:`Finder` on ``sys.meta_path`` once."""
    if not any(isinstance(f, Finder) for f in sys.meta_path):
        sys.meta_path.append(Finder())
