"""Experiment configs: the frozen :class:`Config` base, its type checks and ``--set`` parsing.

A *config* is a small frozen, keyword-only dataclass deriving from :class:`Config`, whose
field defaults are the full-size run and whose :meth:`Config.smoke` shrinks it. Field
types are checked (and ``int`` widened to ``float`` where a float is declared) when a config
is built, so the same values always hash the same; :meth:`Config.override` parses
``key=value`` strings from the command line against the declared types. Ranges are declared
in :attr:`Config.CHECKS` with :class:`Check` rules (:func:`interval`, :func:`at_least`,
:func:`one_of`, :data:`positive`, :data:`non_negative`, :data:`finite`, :data:`nonempty`,
:data:`distinct`); a bad value is a :class:`ConfigError`.
"""
from __future__ import annotations

import dataclasses
import math
import numbers
import re
import typing
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType, UnionType
from typing import Any, ClassVar, Literal

import numpy as np

from ..registry import did_you_mean

__all__ = [
    "Check",
    "Config",
    "ConfigError",
    "at_least",
    "distinct",
    "finite",
    "interval",
    "non_negative",
    "nonempty",
    "one_of",
    "positive",
    "rng_key",
]


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
"""A finite number ``>= 0`` (noise levels, weight decay; keys: :data:`rng_key`)."""
rng_key = Check("an integer key in [0, 2**64)",
                lambda x: isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 2**64)
"""A key of :mod:`ecosim.core.rng` (an integer below 2**64: a larger one would repeat another's
streams)."""
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
        ecosim.experiments.config.ConfigError: Sweep.lrs[1]: expected a value > 0, got -1.0
    """

    SMOKE: ClassVar[Mapping[str, Any]] = MappingProxyType({})
    CHECKS: ClassVar[Mapping[str, Check | tuple[Check, ...]]] = MappingProxyType({})

    def __post_init__(self):
        hints = field_types(type(self))
        for f in dataclasses.fields(self):
            value = _coerce(getattr(self, f.name), hints[f.name], f"{type(self).__name__}.{f.name}")
            object.__setattr__(self, f.name, value)
        _run_checks(self)

    def parse_entries(self, name: str, parse: Callable[[Any], Any]) -> list:
        """``parse`` of every entry of the tuple field ``name``, for a subclass's
        ``__post_init__`` (names that a parser knows: methods, variants, specs); the first
        ValueError becomes a :class:`ConfigError` ``Cls.name: <the parser's message>``."""
        out = []
        for entry in getattr(self, name):
            try:
                out.append(parse(entry))
            except ValueError as exc:
                raise ConfigError(f"{type(self).__name__}.{name}: {exc}") from None
        return out

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
        hints = field_types(type(self))
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
        hints = field_types(cls)
        return [(f.name, _type_name(hints[f.name]), f.default) for f in dataclasses.fields(cls)]


def field_types(cls) -> dict[str, Any]:
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


def check_supported(tp, where: str) -> None:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp in (int, float, bool, str):
        return
    if origin is Literal and all(isinstance(a, (int, float, str, bool)) for a in args):
        return
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return check_supported(args[0], where)
    if origin in (typing.Union, UnionType) and len(args) == 2 and type(None) in args:
        return check_supported(next(a for a in args if a is not type(None)), where)
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
        check_supported(tp, where)
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
    check_supported(tp, where)
    raise AssertionError("unreachable")


def _jsonable(value):
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    return value
