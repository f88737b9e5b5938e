"""Shared units: one computation asked for by several experiments, computed once.

Several experiments may contain the very same unit: the ``dqt_lm`` experiment's FP32 runs are
the ``lm`` experiment's FP32 runs again (same training function, same run config). Such a unit
is named by *what* it computes, a :class:`SharedUnit`: a module-level function and the keyword
arguments it is called with. Its cache key (:meth:`SharedUnit.digest`) covers the cache
format, the function's qualified name, the arguments and
:func:`~ecosim.experiments.provenance.code_fingerprint` of the function's module (the bytes of
every ecosim source file it imports, transitively, and the package versions), and nothing of
the experiment that asked for it: every experiment that asks for the same computation gets the
same entry. :func:`~ecosim.experiments.runner.run_many` computes it once per build (the first
experiment in job order that asks counts it as computed, the others as shared, unless a unit
provides it: see below) and later builds read it from the cache.

An experiment declares its shared units with ``share=`` (see
:func:`~ecosim.experiments.registry.experiment`): ``share(config, unit)`` returns the unit's
:class:`SharedUnit`, or None for a unit of its own. The experiment's results for that unit are
then ``fn(**args)`` exactly; its ``compute(config, unit)`` must return the same (it does where
it calls ``fn`` itself), so that running it alone or in a build gives the same bytes.

A unit of an experiment's own may also *provide* shared units: compute them on the way, as the
``lm_finetune`` experiment's unit trains the ``lm`` experiment's BF16 run of its seed before
fine-tuning from its weights. It declares them with ``provides=`` (``provides(config, unit)``:
a list of :class:`SharedUnit`) and returns their results beside its own, the ``k``-th one's
columns named ``provides.<k>.<column>`` (:func:`provided_columns`); the runner files them under
the shared units' keys (:func:`split_provided`), serves them to every experiment waiting for
them, and refuses results that differ from an entry the cache holds already.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from . import provenance as _provenance

__all__ = ["SHARED_FORMAT", "SharedUnit", "provided_columns",
           "schedule", "split_provided"]

#: the cache format of shared entries (bump with the key layout below)
SHARED_FORMAT = 1


@dataclasses.dataclass(frozen=True, eq=False)
class SharedUnit:
    """A unit named by its computation: ``fn(**args)``, whoever asks for it.

    Attributes:
        fn: a module-level function (a worker process imports it by name) returning results
            (a dict of arrays).
        args: its keyword arguments: str keys, JSON scalar values (bool, int, float, str).

    Equality and hashing follow :meth:`digest`.

    Example:
        >>> from ecosim.experiments.lm import train_run
        >>> a = SharedUnit(train_run, {"preset": "tiny", "method": "fp32", "seed": 0})
        >>> b = SharedUnit(train_run, {"seed": 0, "method": "fp32", "preset": "tiny"})
        >>> a == b, a.name
        (True, 'shared.ecosim.experiments.lm.train_run')
    """

    fn: Callable[..., Mapping[str, Any]]
    args: Mapping[str, Any]

    def __post_init__(self):
        qual = getattr(self.fn, "__qualname__", "")
        if not callable(self.fn) or "." in qual or "<" in qual:
            raise TypeError(f"SharedUnit.fn: expected a module-level function, got {self.fn!r}")
        if not isinstance(self.args, Mapping):
            raise TypeError(f"SharedUnit.args: expected a dict, got {type(self.args).__name__}")
        for k, v in self.args.items():
            if not (isinstance(k, str) and isinstance(v, (bool, int, float, str))):
                raise TypeError(f"SharedUnit.args: expected str keys and bool/int/float/str "
                                f"values, got {k!r}: {v!r}")
        object.__setattr__(self, "args", dict(sorted(self.args.items())))  # a private copy

    @property
    def name(self) -> str:
        """``shared.<module>.<function>``: the cache folder of its entries."""
        return f"shared.{self.fn.__module__}.{self.fn.__qualname__}"

    def code(self) -> dict[str, Any]:
        """:func:`~.provenance.code_fingerprint` of the module defining ``fn``."""
        return _provenance.code_fingerprint(self.fn.__module__)

    def key_doc(self) -> dict[str, Any]:
        """What the cache key hashes: format, function, arguments and code."""
        return {"cache_format": SHARED_FORMAT, "shared": self.name, "args": dict(self.args),
                "code": self.code()}

    def digest(self) -> str:
        """SHA-256 (hex) of :meth:`key_doc` as canonical JSON."""
        doc = json.dumps(self.key_doc(), sort_keys=True, separators=(",", ":"),
                         ensure_ascii=True)
        return hashlib.sha256(doc.encode()).hexdigest()

    def compute(self) -> Mapping[str, Any]:
        """``fn(**args)``."""
        return self.fn(**self.args)

    def __eq__(self, other) -> bool:
        return isinstance(other, SharedUnit) and self.digest() == other.digest()

    def __hash__(self) -> int:
        return hash(self.digest())

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.args.items())
        return f"SharedUnit({self.fn.__module__}.{self.fn.__qualname__}({args}))"


_PROVIDES = "provides."


def provided_columns(results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The columns under which a unit returns the results of the shared units it provides:
    ``provides.<k>.<column>`` for the ``k``-th of its ``provides`` list."""
    return {f"{_PROVIDES}{k}.{col}": v for k, r in enumerate(results) for col, v in r.items()}


def split_provided(results: Mapping[str, Any], provided: Sequence[SharedUnit]
                   ) -> tuple[dict[str, Any], dict[SharedUnit, dict[str, Any]]]:
    """A unit's results as (its own columns, the results of each shared unit it provides).

    Raises:
        ValueError: a provided shared unit without columns, or ``provides.`` columns of an
            index that ``provided`` does not have.
    """
    own = {k: v for k, v in results.items() if not k.startswith(_PROVIDES)}
    parts: dict[int, dict[str, Any]] = {}
    for key, v in results.items():
        if key.startswith(_PROVIDES):
            k, _, col = key[len(_PROVIDES):].partition(".")
            parts.setdefault(int(k) if k.isdigit() else -1, {})[col] = v
    if set(parts) != set(range(len(provided))):
        raise ValueError(f"expected provides.<k>.<column> results for k in "
                         f"0..{len(provided) - 1}, got indices {sorted(parts)}")
    return own, {s: parts[k] for k, s in enumerate(provided)}


def schedule(asks: Sequence[tuple[Hashable, SharedUnit | None, Sequence[SharedUnit]]]
             ) -> dict[Hashable, list[Hashable]]:
    """Which units to compute, and which units each one's result serves.

    Args:
        asks: ``(id, shared unit or None, shared units it provides)`` of each unit to compute,
            in job order.

    Returns:
        ``{id computed: [ids served by it]}`` in job order: a shared unit that a computed unit
        provides is served by that unit, any other by the first unit that asks for it.

    Example:
        >>> from ecosim.experiments.lm import train_run
        >>> s = SharedUnit(train_run, {"seed": 0})
        >>> schedule([("a", s, ()), ("b", None, ()), ("c", s, ()), ("d", None, (s,))])
        {'b': [], 'd': ['a', 'c']}
    """
    providers: dict[SharedUnit, Hashable] = {}
    for uid, _, provided in asks:
        for s in provided:
            providers.setdefault(s, uid)
    first: dict[SharedUnit, Hashable] = {}
    source = {}
    for uid, s, _ in asks:
        if s is None:
            source[uid] = uid
        else:
            source[uid] = providers[s] if s in providers else first.setdefault(s, uid)
    served: dict[Hashable, list[Hashable]] = {u: [] for u, src in source.items() if src == u}
    for uid, src in source.items():
        if src != uid:
            served[src].append(uid)
    return served
