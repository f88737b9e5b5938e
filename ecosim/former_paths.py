"""The former import paths of the numeric core's modules, as deprecated aliases.

The modules of :mod:`ecosim.core` sat one level up (``ecosim.rounding``, ``ecosim.formats``,
...). Code and torch checkpoints that name them keep working: importing a former path warns
(DeprecationWarning, naming the new one) and gives a module whose attributes are the new
module's, so the classes and functions are the same objects.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
import warnings

__all__ = ["MOVED", "Finder", "install"]

#: former module name -> its module now
MOVED = {f"ecosim.{m}": f"ecosim.core.{m}" for m in (
    "bitops", "catalog", "format_record", "formats", "gridrules", "quantizer", "quantizer_rows",
    "rng", "rounding", "rounding_codes", "rounding_modes", "scale_rules")}
MOVED["ecosim.checks"] = "ecosim.core.checks"


class _Alias(types.ModuleType):
    """A former path: every attribute is read from the module that replaced it."""

    def __getattr__(self, name: str):
        return getattr(importlib.import_module(MOVED[self.__name__]), name)

    def __dir__(self):
        return dir(importlib.import_module(MOVED[self.__name__]))


class _Loader(importlib.abc.Loader):
    def create_module(self, spec):
        warnings.warn(f"{spec.name} moved to {MOVED[spec.name]}; import it from there",
                      DeprecationWarning, stacklevel=2)
        return _Alias(spec.name)

    def exec_module(self, module):
        pass


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
