"""An immutable mapping whose updated copies share their storage with the original.

Engine states keep per-pod tables (the admitted pods, the CPU and memory entries). Copying such a table whole
at every admission and release costs time that grows with the pods on the node, and every state kept for
later (the decision log's) would hold its own copy. A `SharedMap` is instead a base dict plus a small overlay
of what changed since the base was made: base keys with a new value, base keys gone, and keys added after the
base (a gone key added again is an added key). An update copies the overlay only; once the overlay outgrows
about the square root of the base, the update folds both into a fresh base. So an update costs O(sqrt n)
amortized, and consecutive states share one base.

It reads as a dict that is never changed: lookups, `len`, iteration in insertion order (a changed value
keeps its key's place, a key removed and added again goes last) and equality with any mapping. None of its
dicts is mutated once built, so a reader on another thread always sees a whole map.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterable, Iterator, Mapping, ValuesView
from itertools import chain, filterfalse
from math import isqrt
from typing import Any, Final, TypeVar, cast

K = TypeVar("K")
V = TypeVar("V")

_MISSING: Final[Any] = object()


class SharedMap(Mapping[K, V]):
    __slots__ = ("_added", "_base", "_changed", "_gone", "_len")

    _base: dict[K, V]
    _changed: dict[K, V]
    """Base keys with a new value; never in `_gone`."""
    _gone: frozenset[K]
    """Base keys removed."""
    _added: dict[K, V]
    """Keys added after the base, in insertion order: new keys and gone base keys set again."""
    _len: int

    def __init__(self, items: Mapping[K, V] | Iterable[tuple[K, V]] = ()) -> None:
        self._fill(dict(items), {}, frozenset(), {}, -1)

    def _fill(
        self, base: dict[K, V], changed: dict[K, V], gone: frozenset[K], added: dict[K, V], length: int
    ) -> None:
        self._base, self._changed, self._gone, self._added = base, changed, gone, added
        self._len = len(base) if length < 0 else length

    @classmethod
    def _of(
        cls, base: dict[K, V], changed: dict[K, V], gone: frozenset[K], added: dict[K, V], length: int
    ) -> SharedMap[K, V]:
        """The map over these parts, folded into a fresh base once the overlay outgrows its limit."""
        shared: SharedMap[K, V] = cls.__new__(cls)
        if len(changed) + len(gone) + len(added) > 8 + isqrt(len(base)):
            shared._fill(_folded(base, changed, gone, added), {}, frozenset(), {}, length)
        else:
            shared._fill(base, changed, gone, added, length)
        return shared

    # -- reading ---------------------------------------------------------------------------------------

    def __getitem__(self, key: K) -> V:
        value = self._added.get(key, _MISSING)
        if value is _MISSING:
            value = self._changed.get(key, _MISSING)
            if value is _MISSING:
                if key in self._gone:
                    raise KeyError(key)
                return self._base[key]
        return cast(V, value)

    def get(self, key: K, default: Any = None) -> Any:
        value = self._added.get(key, _MISSING)
        if value is _MISSING:
            value = self._changed.get(key, _MISSING)
            if value is _MISSING:
                return default if key in self._gone else self._base.get(key, default)
        return value

    def __contains__(self, key: object) -> bool:
        if key in self._added:
            return True
        return key not in self._gone and key in self._base

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[K]:
        base: Iterable[K] = self._base
        if self._gone:
            base = filterfalse(self._gone.__contains__, base)
        return chain(base, self._added) if self._added else iter(base)

    def items(self) -> ItemsView[K, V]:
        return _Items(self)

    def values(self) -> ValuesView[V]:
        return _Values(self)

    def _items(self) -> Iterator[tuple[K, V]]:
        base: Iterable[tuple[K, V]] = self._base.items()
        changed, gone = self._changed, self._gone
        if changed or gone:
            base = ((key, changed.get(key, value)) for key, value in base if key not in gone)
        return chain(base, self._added.items()) if self._added else iter(base)

    def __repr__(self) -> str:
        return f"SharedMap({dict(self._items())!r})"

    def differing_keys(self, other: Mapping[K, V]) -> frozenset[K] | None:
        """The keys whose presence or value may differ between this map and `other`, when `other` is a
        SharedMap on the same base: every other key maps to the same value object in both. None when the
        maps share no base, and only comparing them whole tells (a reader that derives something from each
        entry, such as a checkpoint encoder, redoes only these keys)."""
        if not isinstance(other, SharedMap) or other._base is not self._base:
            return None
        return frozenset(
            chain(self._changed, self._gone, self._added, other._changed, other._gone, other._added)
        )

    # -- updated copies --------------------------------------------------------------------------------

    def set(self, key: K, value: V) -> SharedMap[K, V]:
        """A copy with `key` set to `value`."""
        base, changed, gone, added = self._base, self._changed, self._gone, self._added
        length = self._len
        if key not in gone and key in base:
            changed = {**changed, key: value}
        else:
            if key not in added:
                length += 1
            added = {**added, key: value}
        return self._of(base, changed, gone, added, length)

    def delete(self, key: K) -> SharedMap[K, V]:
        """A copy without `key`; KeyError when it is not there."""
        base, changed, gone, added = self._base, self._changed, self._gone, self._added
        if key in added:
            added = {k: v for k, v in added.items() if k != key}
        elif key not in gone and key in base:
            gone = gone | {key}
            if key in changed:
                changed = {k: v for k, v in changed.items() if k != key}
        else:
            raise KeyError(key)
        return self._of(base, changed, gone, added, self._len - 1)


def _folded(base: dict[K, V], changed: dict[K, V], gone: frozenset[K], added: dict[K, V]) -> dict[K, V]:
    """The parts as one dict, in order: a copy of the base (one block copy), then the overlay applied."""
    folded = dict(base)
    for key in gone:
        del folded[key]
    folded.update(changed)
    folded.update(added)
    return folded


class _Items(ItemsView[K, V]):
    _mapping: SharedMap[K, V]

    def __iter__(self) -> Iterator[tuple[K, V]]:
        return self._mapping._items()


class _Values(ValuesView[V]):
    _mapping: SharedMap[Any, V]

    def __iter__(self) -> Iterator[V]:
        return (value for _, value in self._mapping._items())


def with_item(mapping: Mapping[K, V], key: K, value: V) -> SharedMap[K, V]:
    """`mapping` with `key` set, sharing its storage when it is a SharedMap (any other is copied once)."""
    shared = mapping if isinstance(mapping, SharedMap) else SharedMap(mapping)
    return shared.set(key, value)


def without_item(mapping: Mapping[K, V], key: K) -> SharedMap[K, V]:
    """`mapping` without `key` (KeyError when it is not there), sharing storage as `with_item` does."""
    shared = mapping if isinstance(mapping, SharedMap) else SharedMap(mapping)
    return shared.delete(key)
