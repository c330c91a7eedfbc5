"""The kubelet's checkpoint checksum: FNV-1a-32 over go-spew's `%#v` rendering of the checkpoint struct.

The kubelet hashes the Go value, not the file, so two files with the same content in different JSON spellings
(key case, `"0-3"` against `"0,1,2,3"` for a pod entry's CPU set) carry the same checksum, and a `nil` map
hashes differently from an empty one. A checksum is therefore computed over a `GoValue`, a model of the
decoded Go value that keeps what the rendering shows: static type names, nil against empty, and map keys in
spew's sorted order (ints numerically, strings bytewise).

Rendering (spew with `SortKeys`, `DisableMethods`, `DisablePointerAddresses`): a value shows its static type
in parentheses unless it is a map key, map value or slice element; a pointer there shows `<*>` instead;
strings are unquoted; nil maps, slices and pointers show `<nil>`; struct fields are `Name:value`, space
separated. The hashed object is the checkpoint with its checksum field 0.

FNV-1a itself comes from `fnv-hash-fast` (C): a byte-by-byte Python loop took ~2.3 ms for a 40 KB rendering,
and a checkpoint is hashed at every admission and release, before the answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, cast

from fnv_hash_fast import fnv1a_32

Kind = Literal["scalar", "map", "slice", "struct", "pointer"]


@dataclass(frozen=True, slots=True)
class GoValue:
    """A Go value as spew sees it. `payload` by kind: scalar, its text; map, a dict (None for a nil map) with
    str or int keys; slice, a tuple (None for nil); struct, a tuple of (field name, value); pointer, the
    pointee (None for nil)."""

    type: str
    kind: Kind
    payload: object

    @property
    def fields(self) -> tuple[tuple[str, GoValue], ...]:
        """A struct's (field name, value) pairs, in declaration order."""
        assert self.kind == "struct"
        return cast("tuple[tuple[str, GoValue], ...]", self.payload)

    def field(self, name: str) -> GoValue:
        return next(value for field_name, value in self.fields if field_name == name)

    @property
    def text(self) -> str:
        assert self.kind == "scalar" and isinstance(self.payload, str)
        return self.payload

    @property
    def items(self) -> Mapping[str | int, GoValue]:
        """A map's entries; a nil map has none."""
        assert self.kind == "map"
        return cast("Mapping[str | int, GoValue]", self.payload or {})

    @property
    def elements(self) -> Sequence[GoValue]:
        assert self.kind == "slice"
        return cast("Sequence[GoValue]", self.payload or ())

    @property
    def target(self) -> GoValue | None:
        assert self.kind == "pointer"
        return cast("GoValue | None", self.payload)


def scalar(type_: str, text: str) -> GoValue:
    return GoValue(type_, "scalar", text)


def go_map(type_: str, items: Mapping[str, GoValue] | Mapping[int, GoValue] | None) -> GoValue:
    return GoValue(type_, "map", None if items is None else dict(items))


def go_slice(type_: str, elements: Sequence[GoValue] | None) -> GoValue:
    return GoValue(type_, "slice", None if elements is None else tuple(elements))


def go_struct(type_: str, fields: Sequence[tuple[str, GoValue]]) -> GoValue:
    return GoValue(type_, "struct", tuple(fields))


def pointer(type_: str, target: GoValue | None) -> GoValue:
    return GoValue(type_, "pointer", target)


def render(value: GoValue, show_type: bool = True) -> str:
    """spew's `%#v` of `value`; `show_type` False for map keys, map values and slice elements."""
    if value.kind == "pointer":
        target = value.target
        if target is None:
            return f"({value.type})<nil>" if show_type else "<nil>"
        return (f"({value.type})" if show_type else "<*>") + render(target, show_type=False)
    prefix = f"({value.type})" if show_type else ""
    if value.kind == "scalar":
        return prefix + value.text
    if value.kind == "struct":
        return prefix + "{" + " ".join(f"{name}:{render(v)}" for name, v in value.fields) + "}"
    if value.payload is None:
        return prefix + "<nil>"
    if value.kind == "slice":
        return prefix + "[" + " ".join(render(e, show_type=False) for e in value.elements) + "]"
    entries = sorted(value.items.items(), key=lambda item: _sort_key(item[0]))
    return prefix + "map[" + " ".join(f"{key}:{render(v, show_type=False)}" for key, v in entries) + "]"


def _sort_key(key: str | int) -> tuple[int, str | int] | tuple[int, bytes]:
    return (0, key) if isinstance(key, int) else (1, key.encode())


def struct_checksum(value: GoValue) -> int:
    """The checksum of a checkpoint struct (pointer to it, checksum field already 0), as `checksum.New`."""
    return rendered_checksum(render(value))


def rendered_checksum(rendered: str) -> int:
    """`struct_checksum` of the value whose `render` is `rendered`."""
    return fnv1a_32(rendered.encode())


def data_checksum(data: str) -> int:
    """The checksum of a string, the `dataChecksum` of the `data`-carrying layouts."""
    return fnv1a_32(("(string)" + data).encode())
