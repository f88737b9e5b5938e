"""Experiments: frozen configs, a registry, an on-disk result cache and a resumable runner.

An *experiment* is a registered pair of

* a **config**: a small frozen, keyword-only dataclass deriving from :class:`Config`, whose
  field defaults are the full-size run and whose :meth:`Config.smoke` shrinks it. Field
  types are checked (and ``int`` widened to ``float`` where a float is declared) when a config
  is built, so the same values always hash the same; :meth:`Config.override` parses
  ``key=value`` strings from the command line against the declared types;
* a **compute** function ``config -> results``, pure and deterministic: every random draw comes
  from the config's explicit integer keys (``key`` fields), never from global state. Results
  are a flat ``dict`` of NumPy arrays (a small table is a few 1-D columns of equal length).

An experiment may split into independent **units** (one per seed, per learning rate...):
``units(config)`` lists JSON-able dicts, ``compute(config, unit)`` computes one, and
``combine(config, units, results)`` assembles them (by default, :func:`stack_units`). Units are
cached one by one, so a killed run resumes where it stopped, and run through any
:class:`concurrent.futures.Executor` (a process pool for ``--jobs N``, :class:`InlineExecutor`
in-process).

Cache: ``<root>/<experiment>/<digest>.npz`` where ``digest`` is the SHA-256 of the canonical
JSON of (cache format, experiment name, the experiment's declared ``version``, the resolved
config, the unit, and the code: :func:`~ecosim.experiments.provenance.code_fingerprint` of the
experiment's module, i.e. the bytes of every ecosim source file it imports, transitively, the
versions of the third-party packages those import, and the Python version). Any change to the
code an experiment runs, or to a package version it depends on, recomputes; nothing has to
remember to bump ``version``. Each entry's ``.json`` beside it records the key and the
provenance of the code that computed it (git revision, dirty flag, source hash); an entry that
cannot be read is recomputed with a one-line notice. Files are written byte-deterministic
(:func:`save_results`: stored zip members with a fixed timestamp, ``.npy`` payloads) to a
temporary file in the same directory and moved into place with :func:`os.replace`, so a file
that exists is complete, and a rerun writes the very same bytes.
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import math
import numbers
import os
import re
import sys
import tempfile
import time
import typing
import zipfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from pathlib import Path
from types import MappingProxyType, UnionType
from typing import Any, ClassVar, Literal

import numpy as np

from ..registry import Registry, did_you_mean
from . import provenance as _provenance

__all__ = [
    "Cache",
    "Config",
    "ConfigError",
    "Experiment",
    "InlineExecutor",
    "Results",
    "Run",
    "RunStats",
    "experiment",
    "experiments",
    "get",
    "load_results",
    "make_executor",
    "run",
    "run_many",
    "save_results",
    "stack_units",
]

Results = dict[str, np.ndarray]
"""What a compute function returns: named NumPy arrays (no object dtype)."""

CACHE_FORMAT = 2  # bump when the file layout or the hashing below changes
DEFAULT_CACHE = ".ecosim_cache"
CACHE_ENV = "ECOSIM_CACHE"
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_RESULT_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # the earliest zip timestamp: fixed, so bytes are stable


class ConfigError(TypeError, ValueError):
    """A config value or override is invalid (unknown key, wrong type, bad value)."""


# -- configs: declarative field checks ----------------------------------------------------------

class Check:
    """One declarative rule for a config field, stated in :attr:`Config.CHECKS`.

    ``ok(value) -> bool`` tests a value; ``expected`` says in words what a good value is (it is
    the middle of the error message ``Cls.field: expected <expected>, got <value>``). With
    ``each=True`` (the default) a tuple field is checked element by element, so the message
    names the offending entry (``betas[1]``); ``each=False`` checks the tuple as a whole.
    ``None`` (of an optional field) is never checked. Build checks with :func:`interval`,
    :func:`at_least`, :func:`one_of`, or use :data:`positive`, :data:`non_negative`,
    :data:`finite`, :data:`nonempty`, :data:`distinct`.

    Example:
        >>> interval("[0, 1)").problem(1.0)
        'a value in [0, 1)'
        >>> interval("[0, 1)").problem(0.5) is None
        True
    """

    __slots__ = ("expected", "ok", "each")

    def __init__(self, expected: str, ok: Callable[[Any], bool], *, each: bool = True):
        self.expected = expected
        self.ok = ok
        self.each = each

    def __repr__(self) -> str:
        return f"Check({self.expected!r})"

    def problem(self, value) -> str | None:
        """None when ``value`` passes, else what was expected (for the error message)."""
        try:
            good = bool(self.ok(value))
        except Exception:  # a rule that cannot even look at the value rejects it
            good = False
        return None if good else self.expected


def interval(spec: str) -> Check:
    """A finite number in an interval written as in mathematics: ``"[0, 1)"``, ``"(0, inf)"``.

    ``inf`` (or ``-inf``) leaves a side unbounded; NaN and infinities never pass.

    Example:
        >>> interval("(0, 1)").problem(0.0)
        'a value in (0, 1)'
    """
    m = re.fullmatch(r"\s*([\[(])\s*([^,\s]+)\s*,\s*([^,\s]+)\s*([\])])\s*", spec)
    if m is None:
        raise ValueError(f"interval {spec!r}: write it as '[lo, hi]', with ( or ) for open ends")
    lo, hi = float(m.group(2)), float(m.group(3))
    lo_closed, hi_closed = m.group(1) == "[", m.group(4) == "]"
    if not lo < hi:
        raise ValueError(f"interval {spec!r} is empty")
    if math.isinf(hi) and math.isfinite(lo):
        text = f"a value {'>=' if lo_closed else '>'} {_num(lo)}"
    elif math.isinf(lo) and math.isfinite(hi):
        text = f"a value {'<=' if hi_closed else '<'} {_num(hi)}"
    else:
        text = f"a value in {m.group(1)}{_num(lo)}, {_num(hi)}{m.group(4)}"

    def ok(x) -> bool:
        x = float(x)
        return (math.isfinite(x) and (lo <= x if lo_closed else lo < x)
                and (x <= hi if hi_closed else x < hi))
    return Check(text, ok)


def _num(x: float) -> str:
    return str(int(x)) if x.is_integer() and abs(x) < 2**53 else repr(x)


def at_least(low: float) -> Check:
    """A finite number ``>= low`` (dimensions, step counts: ``at_least(1)``)."""
    return interval(f"[{low!r}, inf)")


def one_of(*choices) -> Check:
    """A value among ``choices`` (each entry of a tuple field)."""
    allowed = tuple(choices[0]) if len(choices) == 1 and isinstance(choices[0], (tuple, list)) \
        else choices
    return Check(f"one of {', '.join(map(repr, allowed))}", lambda x: x in allowed)


positive = interval("(0, inf)")
"""A finite number ``> 0`` (learning rates, step sizes, curvatures)."""
non_negative = interval("[0, inf)")
"""A finite number ``>= 0`` (keys, noise levels, weight decay)."""
finite = Check("a finite number", lambda x: math.isfinite(float(x)))
"""Any finite number (no NaN, no infinity)."""
nonempty = Check("at least one entry", lambda t: len(t) > 0, each=False)
"""A tuple field with at least one entry."""
distinct = Check("distinct entries", lambda t: len(set(t)) == len(t), each=False)
"""A tuple field without repeated entries."""


def _field_checks(cls) -> dict[str, tuple[Check, ...]]:
    """``CHECKS`` of ``cls`` and its bases merged (a subclass's entry replaces its base's)."""
    merged: dict[str, tuple[Check, ...]] = {}
    for klass in reversed(cls.__mro__):
        for name, checks in dict(vars(klass).get("CHECKS", {})).items():
            checks = checks if isinstance(checks, tuple) else (checks,)
            if not all(isinstance(c, Check) for c in checks):
                raise TypeError(f"{cls.__name__}.CHECKS[{name!r}]: expected Check objects, "
                                f"got {checks!r}")
            merged[name] = checks
    return merged


def _run_checks(cfg) -> None:
    """Raise :class:`ConfigError` for the first field of ``cfg`` that breaks its CHECKS."""
    cls = type(cfg)
    names = {f.name for f in dataclasses.fields(cfg)}
    for name, checks in _field_checks(cls).items():
        if name not in names:
            raise TypeError(f"{cls.__name__}.CHECKS names {name!r}, which is not a field")
        value = getattr(cfg, name)
        if value is None:
            continue
        for check in checks:
            if check.each and isinstance(value, tuple):
                items = [(f"{name}[{i}]", v) for i, v in enumerate(value)]
            else:
                items = [(name, value)]
            for where, v in items:
                if v is None:
                    continue
                expected = check.problem(v)
                if expected is not None:
                    raise ConfigError(f"{cls.__name__}.{where}: expected {expected}, "
                                      f"got {v!r}")


# -- configs ------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, kw_only=True)
class Config:
    """Base of experiment configs: frozen, keyword-only, type-checked, hashable to a digest.

    Subclass with ``@dataclasses.dataclass(frozen=True, kw_only=True)``; every field needs a
    default (the full-size run). Supported field types: ``int``, ``float``, ``bool``, ``str``,
    ``Literal[...]``, ``tuple[T, ...]`` of those, and ``T | None``. Set the class variable
    ``SMOKE`` to the overrides of the smoke run (or override :meth:`smoke`). Subclasses that
    define ``__post_init__`` for their own checks call ``super().__post_init__()`` first and
    raise :class:`ConfigError`.

    Ranges are declared, not coded: the class variable ``CHECKS`` maps a field name to a
    :class:`Check` (or a tuple of them; a tuple field is checked entry by entry), e.g.
    ``{"lrs": (nonempty, positive), "betas": interval("[0, 1)"), "d": at_least(1)}``. They
    run when a config is built, after the type checks and before a subclass's own
    ``__post_init__`` checks (which are left for rules that tie several fields together), so
    a bad value fails at once with ``Cls.field: expected ..., got ...``.

    Example:
        >>> @dataclasses.dataclass(frozen=True, kw_only=True)
        ... class Sweep(Config):
        ...     lrs: tuple[float, ...] = (0.1, 0.01)
        ...     steps: int = 1000
        ...     key: int = 0
        ...     SMOKE: ClassVar[dict] = {"steps": 10}
        ...     CHECKS: ClassVar[dict] = {"lrs": (nonempty, positive), "steps": at_least(1)}
        >>> Sweep().smoke().override(["lrs=1,0.5"])
        Sweep(lrs=(1.0, 0.5), steps=10, key=0)
        >>> Sweep().override(["lrs=0.1,-1"])
        Traceback (most recent call last):
        ...
        ecosim.experiments.base.ConfigError: Sweep.lrs[1]: expected a value > 0, got -1.0
    """

    SMOKE: ClassVar[Mapping[str, Any]] = MappingProxyType({})
    CHECKS: ClassVar[Mapping[str, Check | tuple[Check, ...]]] = MappingProxyType({})

    def __post_init__(self):
        hints = _field_types(type(self))
        for f in dataclasses.fields(self):
            value = _coerce(getattr(self, f.name), hints[f.name], f"{type(self).__name__}.{f.name}")
            object.__setattr__(self, f.name, value)
        _run_checks(self)

    def smoke(self):
        """The shrunken variant for ``--smoke`` (applies ``SMOKE``)."""
        return self.replace(**self.SMOKE)

    def replace(self, **changes):
        """A copy with some fields changed; unknown names and wrong types are ConfigErrors."""
        _check_keys(type(self), changes)
        return dataclasses.replace(self, **changes)

    def override(self, assignments: Iterable[str]):
        """A copy with ``key=value`` strings applied, each parsed as its field's declared type.

        Tuples are comma-separated (``lrs=0.1,0.01``), booleans are true/false (or yes/no,
        on/off, 1/0), ``none`` sets an optional field to None. Unknown keys, a missing ``=``
        and values that do not parse as the field's type raise :class:`ConfigError`.
        """
        hints = _field_types(type(self))
        changes = {}
        for item in assignments:
            key, sep, text = str(item).partition("=")
            key = key.strip()
            if not sep or not key:
                raise ConfigError(f"override {item!r} is not of the form key=value")
            _check_keys(type(self), {key: None})
            changes[key] = _parse(text.strip(), hints[key], f"{type(self).__name__}.{key}")
        return self.replace(**changes)

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON-able Python values (tuples become lists)."""
        return {f.name: _jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def field_help(cls) -> list[tuple[str, str, Any]]:
        """``(name, type, default)`` for each field, for listings."""
        hints = _field_types(cls)
        return [(f.name, _type_name(hints[f.name]), f.default) for f in dataclasses.fields(cls)]


def _field_types(cls) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _check_keys(cls, changes: Mapping[str, Any]) -> None:
    names = [f.name for f in dataclasses.fields(cls)]
    for key in changes:
        if key not in names:
            raise ConfigError(f"{cls.__name__} has no field {key!r}{did_you_mean(key, names)}; "
                              f"valid keys: {', '.join(names)}")


def _type_name(tp) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "{" + ",".join(str(a) for a in typing.get_args(tp)) + "}"
    if origin is tuple:
        return f"tuple[{_type_name(typing.get_args(tp)[0])}, ...]"
    if origin in (typing.Union, UnionType):
        return " | ".join(_type_name(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "None"
    return getattr(tp, "__name__", str(tp))


def _check_supported(tp, where: str) -> None:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp in (int, float, bool, str):
        return
    if origin is Literal and all(isinstance(a, (int, float, str, bool)) for a in args):
        return
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return _check_supported(args[0], where)
    if origin in (typing.Union, UnionType) and len(args) == 2 and type(None) in args:
        return _check_supported(next(a for a in args if a is not type(None)), where)
    raise ConfigError(f"{where}: unsupported config field type {tp!r} (use int, float, bool, "
                      "str, Literal[...], tuple[T, ...] or T | None)")


def _coerce(value, tp, where: str):
    """Check ``value`` against the declared type ``tp``; widen ints to floats, lists to tuples."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, UnionType):
        if value is None:
            return None
        inner = next(a for a in typing.get_args(tp) if a is not type(None))
        return _coerce(value, inner, where)
    if origin is Literal:
        choices = typing.get_args(tp)
        for choice in choices:
            if type(value) is type(choice) and value == choice:
                return value
        raise ConfigError(f"{where}: expected one of {list(choices)}, got {value!r}")
    if origin is tuple:
        if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, list)):
            raise ConfigError(f"{where}: expected a tuple, got {type(value).__name__} {value!r}")
        elem = typing.get_args(tp)[0]
        return tuple(_coerce(v, elem, f"{where}[{i}]") for i, v in enumerate(value))
    if tp is bool:
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
    elif tp is int:
        if isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_)):
            return int(value)
    elif tp is float:
        if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)):
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return str(value)
    else:
        _check_supported(tp, where)
    raise ConfigError(f"{where}: expected {_type_name(tp)}, got {type(value).__name__} {value!r}")


_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def _parse(text: str, tp, where: str):
    """Parse a command-line string as type ``tp`` (then checked by :func:`_coerce`)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, UnionType):
        if text.lower() == "none":
            return None
        return _parse(text, next(a for a in typing.get_args(tp) if a is not type(None)), where)
    if origin is Literal:
        for choice in typing.get_args(tp):
            try:
                if _parse(text, type(choice), where) == choice:
                    return choice
            except ConfigError:
                pass
        raise ConfigError(f"{where}: expected one of {list(typing.get_args(tp))}, got {text!r}")
    if origin is tuple:
        body = text.strip()
        if body[:1] in "([" and body[-1:] in ")]":
            body = body[1:-1]
        parts = [p.strip() for p in body.split(",")] if body.strip() else []
        elem = typing.get_args(tp)[0]
        return tuple(_parse(p, elem, f"{where}[{i}]") for i, p in enumerate(parts))
    if tp is bool:
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise ConfigError(f"{where}: expected a bool (true/false), got {text!r}")
    if tp is int:
        try:
            return int(text)
        except ValueError:
            pass
        try:  # accept 1e6, but only when it is an exact integer
            as_float = float(text)
        except ValueError:
            as_float = math.nan
        if math.isfinite(as_float) and as_float.is_integer() and abs(as_float) < 2**53:
            return int(as_float)
        raise ConfigError(f"{where}: expected an int, got {text!r}")
    if tp is float:
        try:
            return float(text)
        except ValueError:
            raise ConfigError(f"{where}: expected a float, got {text!r}") from None
    if tp is str:
        return text
    _check_supported(tp, where)
    raise AssertionError("unreachable")


def _jsonable(value):
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    return value


# -- registry -----------------------------------------------------------------------------------

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
        hints = _field_types(self.config)
        for f in dataclasses.fields(self.config):
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise TypeError(f"{self.config.__name__}.{f.name} needs a default")
            _check_supported(hints[f.name], f"{self.config.__name__}.{f.name}")
        if not isinstance(self.version, str) or not self.version:
            raise ValueError(f"experiment {self.name!r}: version must be a non-empty string")
        if self.combine is not None and self.units is None:
            raise ValueError(f"experiment {self.name!r}: combine= needs units=")

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
            canon = _canonical(u)
            if canon in seen:
                raise ValueError(f"experiment {self.name!r}: duplicate unit {u!r}")
            seen.add(canon)
        return units

    def digest(self, cfg: Config, unit: Mapping[str, Any] | None = None) -> str:
        """SHA-256 (hex) of (cache format, name, version, resolved config, unit, code)."""
        return hashlib.sha256(_canonical(self.key_doc(cfg, unit)).encode()).hexdigest()

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


def _canonical(doc) -> str:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


_REGISTRY: Registry[Experiment] = Registry("experiment")


def experiment(name: str, config: type, *, version: str, units=None, combine=None,
               description: str | None = None, requires: Sequence[str] = ()):
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
    """
    def register(compute):
        doc = description if description is not None else (compute.__doc__ or "").strip()
        exp = Experiment(name=name, config=config, compute=compute, version=version,
                         units=units, combine=combine, description=doc.splitlines()[0] if doc
                         else "", requires=tuple(requires))
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


# -- results: validation and byte-stable storage ------------------------------------------------

def as_results(raw: Mapping[str, Any], where: str = "results") -> Results:
    """Validate and normalise a compute function's output to ``{str: ndarray}``."""
    if not isinstance(raw, Mapping):
        raise TypeError(f"{where}: a compute function returns a dict of arrays, "
                        f"got {type(raw).__name__}")
    out = {}
    for key in sorted(raw):
        if not isinstance(key, str) or not _RESULT_KEY.match(key):
            raise ValueError(f"{where}: result name {key!r} must match {_RESULT_KEY.pattern}")
        arr = np.asarray(raw[key])
        if arr.dtype.hasobject or arr.dtype.kind not in "biufcUSM":
            raise TypeError(f"{where}: result {key!r} has dtype {arr.dtype}; use numeric, "
                            "bool or fixed-width string arrays")
        arr = np.array(arr, order="C", copy=True)  # a private copy (0-d stays 0-d)
        arr.setflags(write=False)
        out[key] = arr
    return out


def results_bytes(results: Mapping[str, np.ndarray]) -> bytes:
    """The byte-deterministic ``.npz`` image of ``results``: sorted, stored, fixed timestamps."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as zf:
        for key in sorted(results):
            member = io.BytesIO()
            np.lib.format.write_array(member, np.asarray(results[key], order="C"),
                                      allow_pickle=False)
            info = zipfile.ZipInfo(f"{key}.npy", date_time=_ZIP_TIME)
            info.external_attr = 0o644 << 16
            info.create_system = 3  # unix, whatever the platform
            zf.writestr(info, member.getvalue())
    return buf.getvalue()


def save_results(path: str | os.PathLike, results: Mapping[str, Any]) -> Path:
    """Write ``results`` to ``path`` (``.npz``) atomically and byte-deterministically."""
    path = Path(path)
    atomic_write(path, results_bytes(as_results(results, str(path))))
    return path


def load_results(path: str | os.PathLike) -> Results:
    """Read a ``.npz`` written by :func:`save_results` (no pickles)."""
    # from bytes: np.load leaves its file open when the archive is corrupt
    with np.load(io.BytesIO(Path(path).read_bytes()), allow_pickle=False) as npz:
        return as_results({k: npz[k] for k in npz.files}, str(path))


def atomic_write(path: Path, data: bytes) -> bool:
    """Write ``data`` to ``path`` via a temporary file and ``os.replace``.

    Returns False (and leaves the file and its mtime alone) when it already holds ``data``.
    """
    path = Path(path)
    try:
        if path.stat().st_size == len(data) and path.read_bytes() == data:
            return False
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return True


# -- cache --------------------------------------------------------------------------------------

class Cache:
    """Results on disk under ``root/<experiment>/<digest>.npz`` (plus a ``.json`` of the key).

    ``root`` defaults to ``$ECOSIM_CACHE`` or ``.ecosim_cache`` in the working directory.
    """

    def __init__(self, root: str | os.PathLike | None = None):
        if root is None:
            root = os.environ.get(CACHE_ENV) or DEFAULT_CACHE
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"Cache({str(self.root)!r})"

    def path(self, exp: Experiment, cfg: Config, unit=None) -> Path:
        return self.root / exp.name / f"{exp.digest(cfg, unit)[:32]}.npz"

    def load(self, exp: Experiment, cfg: Config, unit=None) -> Results | None:
        """Cached results, or None when absent or unreadable (then they are recomputed, and a
        one-line notice on stderr says so)."""
        path = self.path(exp, cfg, unit)
        if not path.exists():
            return None
        try:
            return load_results(path)
        except (OSError, ValueError, TypeError, EOFError, zipfile.BadZipFile) as exc:
            print(f"ecosim: cache entry {path} is unreadable ({type(exc).__name__}: "
                  f"{str(exc).splitlines()[0] if str(exc) else 'no detail'}); recomputing it",
                  file=sys.stderr)
            return None

    def provenance(self, exp: Experiment, cfg: Config, unit=None) -> dict[str, Any]:
        """Who computed an entry: ``{"git_revision", "git_dirty", "source_sha256"}`` from its
        ``.json`` (Nones where the file is missing or older than this record)."""
        try:
            doc = json.loads(self.path(exp, cfg, unit).with_suffix(".json").read_text())
            prov = doc.get("provenance") or {}
        except (OSError, ValueError, AttributeError):
            prov = {}
        return {k: prov.get(k) for k in ("git_revision", "git_dirty", "source_sha256")}

    def save(self, exp: Experiment, cfg: Config, unit, results: Results) -> Path:
        """Write an entry: the ``.npz`` and a ``.json`` of its key and provenance."""
        path = self.path(exp, cfg, unit)
        doc = exp.key_doc(cfg, unit)
        rev, dirty = _provenance.git_revision()
        doc["provenance"] = {"git_revision": rev, "git_dirty": dirty,
                             "source_sha256": doc["code"]["source_sha256"]}
        atomic_write(path.with_suffix(".json"),
                     (json.dumps(doc, sort_keys=True, indent=1) + "\n").encode())
        atomic_write(path, results_bytes(results))
        return path


# -- running ------------------------------------------------------------------------------------

class InlineExecutor(Executor):
    """A :class:`concurrent.futures.Executor` that runs each call in-process, at submit."""

    _max_workers = 1

    def submit(self, fn, /, *args, **kwargs) -> Future:
        fut: Future = Future()
        fut.set_running_or_notify_cancel()
        try:
            fut.set_result(fn(*args, **kwargs))
        except Exception as exc:  # handed to the caller through the future, as pools do
            fut.set_exception(exc)
        return fut


def make_executor(jobs: int) -> Executor:
    """``jobs == 1``: :class:`InlineExecutor`; more: a spawn-based process pool."""
    if not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be a positive int, got {jobs!r}")
    if jobs == 1:
        return InlineExecutor()
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # Workers are separate processes already: a BLAS thread pool in each of them fights for
    # the same cores (measured: small MLP matmuls 5x slower under load). Spawned workers read
    # these variables when they import NumPy; a user's own setting wins.
    for var in _BLAS_THREAD_VARS:
        os.environ.setdefault(var, "1")
    # spawn: the same behaviour on every platform, and safe with threads in the parent.
    # Each worker watches its parent and exits when it dies (SIGTERM, SIGKILL, a crash): an
    # idle worker would otherwise wait on its task queue for minutes.
    return ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_exit_with_parent)


def _exit_with_parent() -> None:
    """Worker initializer: a daemon thread that ends this process when its parent is gone."""
    import multiprocessing
    import threading
    from multiprocessing.connection import wait as wait_for

    parent = multiprocessing.parent_process()
    if parent is None:  # pragma: no cover - not a multiprocessing child
        return

    def watch():
        wait_for([parent.sentinel])
        os._exit(1)
    threading.Thread(target=watch, name="ecosim-parent-watch", daemon=True).start()


_BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _compute_unit(compute, cfg, unit):
    """Worker side: one unit, timed. Module-level so that process pools can pickle it."""
    t0 = time.perf_counter()
    raw = compute(cfg) if unit is None else compute(cfg, dict(unit))
    return as_results(raw), time.perf_counter() - t0


@dataclasses.dataclass(frozen=True)
class RunStats:
    """How one experiment's results were obtained."""

    units: int
    cached: int
    computed: int
    compute_s: float  # summed compute time of the computed units (worker time)


@dataclasses.dataclass(frozen=True)
class Run:
    """An experiment's results with the config that produced them.

    Indexing reads the results: ``run["x"] is run.results["x"]``.
    """

    experiment: Experiment
    config: Config
    results: Results
    stats: RunStats
    provenance: tuple[dict[str, Any], ...] = ()
    """The distinct ``{"git_revision", "git_dirty", "source_sha256"}`` of the code that
    computed the units (one entry when all units came from the same checkout)."""

    @property
    def mixed_provenance(self) -> bool:
        """True when units were computed from different revisions or a dirty checkout."""
        return len(self.provenance) > 1 or any(p.get("git_dirty") for p in self.provenance)

    def __getitem__(self, key: str) -> np.ndarray:
        return self.results[key]

    def __repr__(self) -> str:
        names = ", ".join(self.results)
        return f"Run({self.experiment.name!r}, {self.config!r}, results=[{names}], {self.stats})"

    def __contains__(self, key: str) -> bool:
        return key in self.results

    @property
    def name(self) -> str:
        return self.experiment.name


def stack_units(cfg, units: list[dict], unit_results: list[Results]) -> Results:
    """Default ``combine``: stack each result along a new first axis (one row per unit) and add
    each unit field as a column ``unit_<field>``."""
    keys = set(unit_results[0])
    for r in unit_results[1:]:
        if set(r) != keys:
            raise ValueError("units returned different result names: "
                             f"{sorted(keys)} vs {sorted(r)}")
    out = {k: np.stack([r[k] for r in unit_results]) for k in sorted(keys)}
    for field in sorted({f for u in units for f in u}):
        name = f"unit_{field}"
        if name in out:
            raise ValueError(f"result name {name!r} collides with a unit field column")
        out[name] = np.array([u.get(field) for u in units])
    return out


def run(exp: str | Experiment, cfg: Config | None = None, *, cache: Cache | str | os.PathLike
        | None = None, executor: Executor | None = None, progress: bool | None = False,
        smoke: bool = False) -> Run:
    """Run one experiment (cached); see :func:`run_many`."""
    exp = get(exp)
    return run_many([(exp, cfg if cfg is not None else exp.default_config(smoke=smoke))],
                    cache=cache, executor=executor, progress=progress)[0]


def run_many(jobs: Sequence[tuple[str | Experiment, Config]], *, cache: Cache | str | os.PathLike
             | None = None, executor: Executor | None = None, progress: bool | None = False,
             max_pending: int | None = None) -> list[Run]:
    """Run several experiments, sharing one executor, caching and resuming unit by unit.

    Every unit not in the cache is submitted to ``executor`` (default: in-process), at most
    ``max_pending`` at a time (default: the executor's worker count), and saved as soon as it
    completes, so a run killed midway loses only the units in flight. Results are identical
    whatever the executor, because each unit is a pure function of (config, unit).

    Args:
        jobs: ``(experiment or name, config)`` pairs.
        cache: a :class:`Cache`, a directory, or None for the default directory.
        executor: any :class:`concurrent.futures.Executor`; None runs in-process.
        progress: a tqdm bar per experiment (None: only on a terminal).
        max_pending: how many units may be submitted and unfinished at once.

    Returns:
        One :class:`Run` per job, in order.
    """
    cache = cache if isinstance(cache, Cache) else Cache(cache)
    executor = executor if executor is not None else InlineExecutor()
    if max_pending is None:
        max_pending = max(1, int(getattr(executor, "_max_workers", None) or os.cpu_count() or 1))

    plans = []  # (exp, cfg, units, results list, stats dict)
    todo = []   # (plan index, unit index)
    for exp, cfg in jobs:
        exp = get(exp)
        if not isinstance(cfg, exp.config):
            raise TypeError(f"experiment {exp.name!r} takes a {exp.config.__name__}, "
                            f"got {type(cfg).__name__}")
        units = exp.unit_list(cfg)
        found = [cache.load(exp, cfg, u) for u in units]
        prov = [cache.provenance(exp, cfg, u) if r is not None else None
                for u, r in zip(units, found)]
        p = len(plans)
        plans.append((exp, cfg, units, found, {"compute_s": 0.0, "provenance": prov}))
        todo += [(p, i) for i, r in enumerate(found) if r is None]

    bars = _bars(plans, todo, progress)
    try:
        pending: dict[Future, tuple[int, int]] = {}
        queue = list(reversed(todo))
        while queue or pending:
            while queue and len(pending) < max_pending:
                p, i = queue.pop()
                exp, cfg, units = plans[p][:3]
                pending[executor.submit(_compute_unit, exp.compute, cfg, units[i])] = (p, i)
            done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
            for fut in sorted(done, key=lambda f: pending[f]):
                p, i = pending.pop(fut)
                exp, cfg, units, found, acc = plans[p]
                try:
                    results, seconds = fut.result()
                except Exception as exc:
                    for other in pending:
                        other.cancel()
                    unit = "" if units[i] is None else f" unit {units[i]}"
                    raise RuntimeError(f"experiment {exp.name!r}{unit} failed: {exc}") from exc
                cache.save(exp, cfg, units[i], results)
                found[i] = results
                acc["provenance"][i] = cache.provenance(exp, cfg, units[i])
                acc["compute_s"] += seconds
                if bars.get(p) is not None:
                    bars[p].update(1)
    finally:
        for bar in bars.values():
            bar.close()

    out = []
    computed = {}
    for p, _ in todo:
        computed[p] = computed.get(p, 0) + 1
    for p, (exp, cfg, units, found, acc) in enumerate(plans):
        if exp.units is None:
            results = found[0]
        else:
            combine = exp.combine or stack_units
            results = as_results(combine(cfg, units, found), f"experiment {exp.name!r}")
        n_new = computed.get(p, 0)
        stats = RunStats(units=len(units), cached=len(units) - n_new, computed=n_new,
                         compute_s=acc["compute_s"])
        distinct = {_canonical(d): d for d in acc["provenance"]}
        out.append(Run(experiment=exp, config=cfg, results=results, stats=stats,
                       provenance=tuple(distinct[k] for k in sorted(distinct))))
    return out


def _bars(plans, todo, progress) -> dict:
    if progress is False or not todo:
        return {}
    from tqdm import tqdm

    counts: dict[int, int] = {}
    for p, _ in todo:
        counts[p] = counts.get(p, 0) + 1
    bars = {}
    for pos, p in enumerate(sorted(counts)):
        exp = plans[p][0]
        n = len(plans[p][2])
        bars[p] = tqdm(total=n, initial=n - counts[p], desc=exp.name, unit="unit",
                       position=pos, leave=True, disable=None if progress is None else False,
                       dynamic_ncols=True)
    return bars
