"""The :class:`Experiment` type and the registry of experiments (:func:`experiment`, :func:`get`).

An *experiment* is a registered pair of

* a **config**: a :class:`~ecosim.experiments.config.Config` subclass (frozen, keyword-only,
  type-checked; its defaults are the full-size run, :meth:`~.config.Config.smoke` shrinks it);
* a **compute** function ``config -> results``, pure and deterministic: every random draw comes
  from the config's explicit integer keys (``key`` fields), never from global state. Results
  are a flat ``dict`` of NumPy arrays (a small table is a few 1-D columns of equal length).

An experiment may split into independent **units** (one per seed, per learning rate...):
``units(config)`` lists JSON-able dicts, ``compute(config, unit)`` computes one, and
``combine(config, units, results)`` assembles them (by default,
:func:`~ecosim.experiments.runner.stack_units`). A unit that other experiments compute too may
be declared shared: ``share(config, unit)`` names its computation
(:class:`~ecosim.experiments.shared.SharedUnit`), whose key and cache entry are the same
whichever experiment asks, so a build computes it once.

Cache key (:meth:`Experiment.digest`): the SHA-256 of the canonical JSON of (cache format,
experiment name, the experiment's declared ``version``, the resolved config, the unit, and the
code: :func:`~ecosim.experiments.provenance.code_fingerprint` of the experiment's module, i.e.
the bytes of every ecosim source file it imports, transitively, the versions of the third-party
packages those import, and the Python version). Any change to the code an experiment runs, or
to a package version it depends on, recomputes; nothing has to remember to bump ``version``.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..registry import Registry
from . import provenance as _provenance
from .config import Config, check_supported, field_types
from .shared import SharedUnit

__all__ = ["CACHE_FORMAT", "Experiment", "experiment", "experiments", "get"]

CACHE_FORMAT = 2  # bump when the file layout (see .store) or the hashing below changes
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


@dataclasses.dataclass(frozen=True)
class Experiment:
    """A named computation: config type, compute function, declared code version, units.

    Build one with the :func:`experiment` decorator (which also registers it), or directly
    (unregistered; tests do this). ``compute`` must be a module-level function so that a
    process pool can send it to a worker.
    """

    name: str
    config: type
    compute: Callable[..., Mapping[str, Any]]
    version: str
    units: Callable[[Any], Sequence[Mapping[str, Any]]] | None = None
    combine: Callable[[Any, list, list], Mapping[str, Any]] | None = None
    description: str = ""
    requires: tuple[str, ...] = ()  # optional packages the compute function imports
    #: ``(config, unit) -> SharedUnit | None``: the units computed as shared units (see
    #: :mod:`.shared`); ``compute(config, unit)`` must return what the shared unit returns
    share: Callable[[Any, Mapping[str, Any]], SharedUnit | None] | None = None
    #: ``(config, unit) -> [SharedUnit, ...]``: the shared units a unit of its own computes on
    #: the way and returns beside its results (see :mod:`.shared`)
    provides: Callable[[Any, Mapping[str, Any]], Sequence[SharedUnit]] | None = None

    def missing(self) -> list[str]:
        """The packages of ``requires`` that are not installed."""
        import importlib.util

        return [m for m in self.requires if importlib.util.find_spec(m) is None]

    def __post_init__(self):
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValueError(f"experiment name {self.name!r} must match {_NAME.pattern}")
        if not (isinstance(self.config, type) and issubclass(self.config, Config)
                and dataclasses.is_dataclass(self.config)
                and self.config.__dataclass_params__.frozen):
            raise TypeError(f"experiment {self.name!r}: config must be a frozen dataclass "
                            f"deriving from ecosim.experiments.Config, got {self.config!r}")
        hints = field_types(self.config)
        for f in dataclasses.fields(self.config):
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise TypeError(f"{self.config.__name__}.{f.name} needs a default")
            check_supported(hints[f.name], f"{self.config.__name__}.{f.name}")
        if not isinstance(self.version, str) or not self.version:
            raise ValueError(f"experiment {self.name!r}: version must be a non-empty string")
        if self.combine is not None and self.units is None:
            raise ValueError(f"experiment {self.name!r}: combine= needs units=")
        for hook in ("share", "provides"):
            if getattr(self, hook) is not None and self.units is None:
                raise ValueError(f"experiment {self.name!r}: {hook}= needs units=")

    def default_config(self, *, smoke: bool = False) -> Config:
        """The default config, shrunk by :meth:`Config.smoke` when ``smoke``."""
        cfg = self.config()
        return cfg.smoke() if smoke else cfg

    def unit_list(self, cfg: Config) -> list[dict[str, Any] | None]:
        """The units of this config (``[None]`` for an experiment without units)."""
        if self.units is None:
            return [None]
        units = [dict(u) for u in self.units(cfg)]
        if not units:
            raise ValueError(f"experiment {self.name!r} has no units for {cfg!r}")
        seen = set()
        for u in units:
            for k, v in u.items():
                if not (isinstance(k, str) and isinstance(v, (bool, int, float, str))):
                    raise TypeError(f"experiment {self.name!r}: unit {u!r} must map str to "
                                    "bool/int/float/str")
            canon = canonical_json(u)
            if canon in seen:
                raise ValueError(f"experiment {self.name!r}: duplicate unit {u!r}")
            seen.add(canon)
        return units

    def shared_unit(self, cfg: Config, unit: Mapping[str, Any] | None) -> SharedUnit | None:
        """The :class:`~.shared.SharedUnit` that computes ``unit`` (None: its own unit)."""
        if self.share is None or unit is None:
            return None
        shared = self.share(cfg, dict(unit))
        if shared is not None and not isinstance(shared, SharedUnit):
            raise TypeError(f"experiment {self.name!r}: share() must return a SharedUnit or "
                            f"None, got {type(shared).__name__}")
        return shared

    def provided(self, cfg: Config, unit: Mapping[str, Any] | None) -> tuple[SharedUnit, ...]:
        """The shared units that computing ``unit`` provides (see :mod:`.shared`)."""
        if self.provides is None or unit is None:
            return ()
        out = tuple(self.provides(cfg, dict(unit)))
        if not all(isinstance(s, SharedUnit) for s in out):
            raise TypeError(f"experiment {self.name!r}: provides() must return SharedUnits, "
                            f"got {[type(s).__name__ for s in out]}")
        return out

    def digest(self, cfg: Config, unit: Mapping[str, Any] | None = None) -> str:
        """SHA-256 (hex) of (cache format, name, version, resolved config, unit, code)."""
        return hashlib.sha256(canonical_json(self.key_doc(cfg, unit)).encode()).hexdigest()

    def key_doc(self, cfg: Config, unit=None) -> dict[str, Any]:
        if not isinstance(cfg, self.config):
            raise TypeError(f"experiment {self.name!r} takes a {self.config.__name__}, "
                            f"got {type(cfg).__name__}")
        return {"cache_format": CACHE_FORMAT, "experiment": self.name, "version": self.version,
                "config": cfg.to_dict(), "unit": unit, "code": self.code()}

    def code(self) -> dict[str, Any]:
        """The code part of the cache key: :func:`~.provenance.code_fingerprint` of the modules
        defining ``compute``, ``units`` and ``combine``."""
        mods = sorted({f.__module__ for f in (self.compute, self.units, self.combine)
                       if f is not None})
        return _provenance.code_fingerprint(*mods)


def canonical_json(doc) -> str:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


_REGISTRY: Registry[Experiment] = Registry("experiment")


def experiment(name: str, config: type, *, version: str, units=None, combine=None,
               description: str | None = None, requires: Sequence[str] = (), share=None,
               provides=None):
    """Register ``compute`` as experiment ``name`` (decorator); returns the function unchanged.

    Args:
        name: unique lowercase name (``[a-z][a-z0-9_]*``).
        config: the :class:`Config` subclass.
        version: code version tag, part of the cache key: bump it when results change.
        units: optional ``config -> list of dicts`` (JSON scalars); then ``compute`` takes
            ``(config, unit)`` and each unit is computed and cached on its own.
        combine: optional ``(config, units, unit_results) -> results``; default
            :func:`stack_units`.
        description: one line for ``ecosim list`` (default: the docstring's first line).
        requires: optional packages (import names) the compute function needs, e.g.
            ``("torch",)``; ``ecosim figures`` skips figures whose experiments lack them.
        share: optional ``(config, unit) -> SharedUnit | None`` (needs ``units``): the units
            that are a computation other experiments may ask for too, cached under a key of
            their own (:mod:`.shared`) and computed once per build.
        provides: optional ``(config, unit) -> [SharedUnit, ...]`` (needs ``units``): the
            shared units a unit computes on the way, returned beside its results.
    """
    def register(compute):
        doc = description if description is not None else (compute.__doc__ or "").strip()
        exp = Experiment(name=name, config=config, compute=compute, version=version,
                         units=units, combine=combine, description=doc.splitlines()[0] if doc
                         else "", requires=tuple(requires), share=share,
                         provides=provides)
        _REGISTRY.register(name, exp)
        return compute
    return register


def experiments() -> dict[str, Experiment]:
    """The registered experiments by name (a copy)."""
    return _REGISTRY.as_dict()


def get(name: str | Experiment) -> Experiment:
    """A registered experiment by name (an Experiment passes through)."""
    if isinstance(name, Experiment):
        return name
    return _REGISTRY.get(name)
