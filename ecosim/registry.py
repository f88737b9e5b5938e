"""Registries of named things: the experiments (:mod:`ecosim.experiments`) and the figures
(:mod:`ecosim.figures`) register in one :class:`Registry` each.

A name is registered once (a second registration is an error, not a silent replacement); a
lookup of an unknown name fails with the closest registered name and the full list.

Example:
    >>> r = Registry("colour")
    >>> r.register("red", 1)
    1
    >>> r.get("rde")
    Traceback (most recent call last):
    ...
    KeyError: "unknown colour 'rde' (did you mean 'red'?); registered: red"
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator
from typing import Generic, TypeVar

__all__ = ["Registry", "did_you_mean"]

T = TypeVar("T")


def did_you_mean(key: str, names: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the name of ``names`` closest to ``key``, or ``""``."""
    close = difflib.get_close_matches(key, list(names), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


class Registry(Generic[T]):
    """Items of one ``kind`` by name, in registration order.

    Args:
        kind: what the items are, for messages (``"experiment"``, ``"figure"``).
    """

    def __init__(self, kind: str):
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str, item: T) -> T:
        """Add ``item`` as ``name`` and return it.

        Raises:
            ValueError: ``name`` is registered already.
        """
        if name in self._items:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        self._items[name] = item
        return item

    def get(self, name: str) -> T:
        """The item registered as ``name``.

        Raises:
            KeyError: no such name; the message suggests the closest one and lists them all
                (sorted).
        """
        try:
            return self._items[name]
        except (KeyError, TypeError):
            hint = did_you_mean(name, self._items) if isinstance(name, str) else ""
            raise KeyError(f"unknown {self.kind} {name!r}{hint}; registered: "
                           f"{', '.join(sorted(self._items)) or '(none)'}") from None

    def as_dict(self) -> dict[str, T]:
        """The items by name (a copy, in registration order)."""
        return dict(self._items)

    def values(self) -> list[T]:
        """The items in registration order."""
        return list(self._items.values())

    def __contains__(self, name) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)
