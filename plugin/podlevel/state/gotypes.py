"""The kubelet's checkpoint structs, read and written with Go `encoding/json`'s rules.

A checkpoint is only as compatible as its reader is faithful, so decoding follows what `json.Unmarshal`
does with the kubelet's structs, not what a JSON library would do by default:
- struct fields match JSON keys exactly or else case-insensitively (`defaultCPUSet` fills `defaultCpuSet`);
  unknown keys are ignored (and reported, so a newer layout is recognisable); a repeated key overwrites,
  except that a map is merged into;
- `null` leaves a string or number as it was and makes a map, slice or pointer nil (which hashes as
  `<nil>`, unlike an empty map); a fraction, a negative or an out-of-range number for an integer field, or
  any value of the wrong JSON type, fails the whole decode;
- map keys of integer maps (`machineState`) parse as Go's `strconv.ParseInt`.
Encoding is `json.Marshal`'s: struct fields in declaration order, `omitempty` honoured, map keys sorted by
their text, `<`, `>`, `&`, U+2028 and U+2029 escaped. Decoding produces a `checksum.GoValue`, so the value
that is hashed is the value Go would hash.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from podlevel.engine.cpuset import CPUSet
from podlevel.engine.errors import InputError
from podlevel.engine.limits import MAX_INTEGER_DIGITS, MAX_NESTING, json_depth
from podlevel.state.checksum import GoValue, go_map, go_slice, go_struct, pointer, scalar

_INT_KEY: Final = re.compile(r"[+-]?[0-9]+")
_RANGES: Final = {"int": (-(2**63), 2**63 - 1), "uint64": (0, 2**64 - 1)}


class GoDecodeError(ValueError):
    """A value Go's decoder refuses; `path` is where, in JSON-pointer-ish form."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path or '/'}: {message}")
        self.path = path


class JSONObject(list[tuple[str, object]]):
    """A JSON object as its key/value pairs in file order (Go sees every repeated key)."""


class Fraction(str):
    """A JSON number with a fraction or exponent, kept as text: no integer field accepts it."""


def parse(text: str) -> object:
    """Parse JSON keeping objects as `JSONObject`; raises `json.JSONDecodeError` (NaN and Infinity too)."""

    def reject(constant: str) -> object:
        raise json.JSONDecodeError(f"{constant} is not JSON", text, text.find(constant))

    def integer(digits: str) -> int:
        if len(digits) > MAX_INTEGER_DIGITS:  # int() of long digit strings is slow, and no field holds one
            raise json.JSONDecodeError(f"an integer of {len(digits)} digits", text, text.find(digits))
        return int(digits)

    depth = json_depth(text)
    if depth > MAX_NESTING:
        raise json.JSONDecodeError(f"nested {depth} levels deep, at most {MAX_NESTING} are read", text, 0)
    return json.loads(text, object_pairs_hook=JSONObject, parse_float=Fraction, parse_int=integer,
                      parse_constant=reject)


def fold(name: str) -> str:
    """Go's case folding of field names, one rune at a time (so `ß` does not become `ss`)."""
    return "".join(c.upper().lower() if len(c.upper()) == 1 else c for c in name)


class Schema:
    """A Go type: its static type string, how Go decodes JSON into it and marshals it."""

    go: str

    def zero(self) -> GoValue:
        raise NotImplementedError

    def decode(self, raw: object, path: str, current: GoValue) -> GoValue:
        """The value after Go decodes `raw` into a variable holding `current`."""
        raise NotImplementedError

    def encode(self, value: GoValue) -> str:
        raise NotImplementedError

    def is_empty(self, value: GoValue) -> bool:
        """`omitempty`'s test."""
        return False

    def value_of(self, value: Any) -> GoValue:
        """The engine's Python value as this Go type (what the checksum hashes): the model built from the
        schema, so a layout's structure is spelled out once, here."""
        raise NotImplementedError


@dataclass(frozen=True)
class String(Schema):
    go: str = "string"

    def zero(self) -> GoValue:
        return scalar(self.go, "")

    def decode(self, raw: object, path: str, current: GoValue) -> GoValue:
        if raw is None:
            return current
        if not isinstance(raw, str) or isinstance(raw, Fraction):
            raise GoDecodeError(path, f"cannot unmarshal {_json_type(raw)} into Go value of type {self.go}")
        return scalar(self.go, raw)

    def encode(self, value: GoValue) -> str:
        return encode_string(value.text)

    def value_of(self, value: Any) -> GoValue:
        return scalar(self.go, str(value))

    def is_empty(self, value: GoValue) -> bool:
        return value.text == ""


@dataclass(frozen=True)
class Integer(Schema):
    go: str = "int"
    bits: str = "int"
    """`int` or `uint64`: the range Go checks."""

    def zero(self) -> GoValue:
        return scalar(self.go, "0")

    def decode(self, raw: object, path: str, current: GoValue) -> GoValue:
        if raw is None:
            return current
        if isinstance(raw, bool) or not isinstance(raw, int | Fraction):
            raise GoDecodeError(path, f"cannot unmarshal {_json_type(raw)} into Go value of type {self.go}")
        low, high = _RANGES[self.bits]
        if isinstance(raw, Fraction) or not low <= raw <= high:
            raise GoDecodeError(path, f"cannot unmarshal number {raw} into Go value of type {self.go}")
        return scalar(self.go, str(raw))

    def encode(self, value: GoValue) -> str:
        return value.text

    def is_empty(self, value: GoValue) -> bool:
        return value.text == "0"

    def value_of(self, value: Any) -> GoValue:
        return scalar(self.go, str(int(value)))


@dataclass(frozen=True)
class MapOf(Schema):
    go: str
    value: Schema
    int_keys: bool = False

    def zero(self) -> GoValue:
        return go_map(self.go, None)

    def empty(self) -> GoValue:
        return go_map(self.go, {})

    def decode(self, raw: object, path: str, current: GoValue) -> GoValue:
        if raw is None:
            return self.zero()
        if not isinstance(raw, JSONObject):
            raise GoDecodeError(path, f"cannot unmarshal {_json_type(raw)} into Go value of type {self.go}")
        items: dict[str | int, GoValue] = dict(current.items)  # Go adds to a map that already exists
        for key, item in raw:
            go_key = self._key(key, path)
            items[go_key] = self.value.decode(item, f"{path}/{key}", self.value.zero())
        return GoValue(self.go, "map", items)

    def _key(self, key: str, path: str) -> str | int:
        if not self.int_keys:
            return key
        if not _INT_KEY.fullmatch(key) or not -(2**63) <= int(key) < 2**63:
            raise GoDecodeError(
                f"{path}/{key}", f"cannot unmarshal number {key!r} into Go map key of type int"
            )
        return int(key)

    def encode(self, value: GoValue) -> str:
        if value.payload is None:
            return "null"
        entries = sorted((str(k), v) for k, v in value.items.items())
        return "{" + ",".join(f"{encode_string(k)}:{self.value.encode(v)}" for k, v in entries) + "}"

    def is_empty(self, value: GoValue) -> bool:
        return not value.items

    def value_of(self, value: Any) -> GoValue:
        return go_map(self.go, {key: self.value.value_of(item) for key, item in value.items()})


@dataclass(frozen=True)
class SliceOf(Schema):
    go: str
    element: Schema

    def zero(self) -> GoValue:
        return go_slice(self.go, None)

    def decode(self, raw: object, path: str, current: GoValue) -> GoValue:
        if raw is None:
            return self.zero()
        if not isinstance(raw, list) or isinstance(raw, JSONObject):
            raise GoDecodeError(path, f"cannot unmarshal {_json_type(raw)} into Go value of type {self.go}")
        return go_slice(
            self.go, [self.element.decode(e, f"{path}/{i}", self.element.zero()) for i, e in enumerate(raw)]
        )

    def encode(self, value: GoValue) -> str:
        if value.payload is None:
            return "null"
        return "[" + ",".join(self.element.encode(e) for e in value.elements) + "]"

    def is_empty(self, value: GoValue) -> bool:
        return not value.elements

    def value_of(self, value: Any) -> GoValue:
        return go_slice(self.go, [self.element.value_of(item) for item in value])


@dataclass(frozen=True)
class Field:
    name: str
    """The Go field name, as the checksum shows it."""
    json: str
    schema: Schema
    omitempty: bool = False
    allocated: bool = False
    """The kubelet's constructor makes this map before decoding, so an absent key hashes as `map[]`."""


@dataclass(frozen=True)
class Struct(Schema):
    go: str
    fields: tuple[Field, ...]

    def zero(self) -> GoValue:
        return go_struct(self.go, [(f.name, f.schema.zero()) for f in self.fields])

    def fresh(self) -> GoValue:
        """What the kubelet's `new...Checkpoint()` constructor hands to the decoder."""
        return go_struct(
            self.go,
            [
                (f.name, f.schema.empty() if f.allocated and isinstance(f.schema, MapOf) else f.schema.zero())
                for f in self.fields
            ],
        )

    def decode(self, raw: object, path: str, current: GoValue) -> GoValue:
        return self.decode_fields(raw, path, current)[0]

    def decode_fields(self, raw: object, path: str, current: GoValue) -> tuple[GoValue, list[str]]:
        """The decoded struct and the JSON keys no field took (Go ignores them)."""
        if raw is None:
            return current, []
        if not isinstance(raw, JSONObject):
            raise GoDecodeError(path, f"cannot unmarshal {_json_type(raw)} into Go value of type {self.go}")
        values = dict(current.fields)
        unknown: list[str] = []
        for key, item in raw:
            target = self.field_for(key)
            if target is None:
                unknown.append(key)
                continue
            values[target.name] = target.schema.decode(item, f"{path}/{key}", values[target.name])
        return go_struct(self.go, [(f.name, values[f.name]) for f in self.fields]), unknown

    def field_for(self, key: str) -> Field | None:
        exact = next((f for f in self.fields if f.json == key), None)
        return exact or next((f for f in self.fields if fold(f.json) == fold(key)), None)

    def encode(self, value: GoValue) -> str:
        parts = []
        for f in self.fields:
            item = value.field(f.name)
            if f.omitempty and f.schema.is_empty(item):
                continue
            parts.append(f"{encode_string(f.json)}:{f.schema.encode(item)}")
        return "{" + ",".join(parts) + "}"

    def value_of(self, value: Any) -> GoValue:
        """A dataclass whose fields are this struct's, in this order (the engine's `MemoryTable`,
        `NUMANodeState`, `MemoryBlock` are), or, for a struct of one field, that field's value."""
        values = ([getattr(value, f.name) for f in dataclasses.fields(value)]
                  if dataclasses.is_dataclass(value) else [value])
        return go_struct(self.go, [(f.name, f.schema.value_of(item))
                                   for f, item in zip(self.fields, values, strict=True)])


@dataclass(frozen=True)
class PointerTo(Schema):
    go: str
    element: Struct

    def zero(self) -> GoValue:
        return pointer(self.go, None)

    def decode(self, raw: object, path: str, current: GoValue) -> GoValue:
        if raw is None:
            return self.zero()
        return pointer(self.go, self.element.decode(raw, path, current.target or self.element.zero()))

    def encode(self, value: GoValue) -> str:
        target = value.target
        return "null" if target is None else self.element.encode(target)

    def value_of(self, value: Any) -> GoValue:
        return pointer(self.go, self.element.value_of(value))


@dataclass(frozen=True)
class CPUPodEntry(Schema):
    """The CPU `PodEntry`: `{"cpuSet": "0-3"}` in JSON (its own unmarshaller parses the list), a struct
    holding a `cpuset.CPUSet` (a set of ints) in Go and so in the checksum."""

    go: str = "state.PodEntry"
    _json: Struct = Struct("state.podEntryJSON", (Field("CPUSet", "cpuSet", String(), omitempty=True),))

    @property
    def json_field(self) -> Field:
        """The one field of its JSON form."""
        return self._json.fields[0]

    def zero(self) -> GoValue:
        return self.of(CPUSet())

    def of(self, cpus: CPUSet) -> GoValue:
        elems = go_map("map[int]struct {}", {cpu: go_struct("struct {}", ()) for cpu in cpus})
        return go_struct(self.go, [("CPUSet", go_struct("cpuset.CPUSet", [("elems", elems)]))])

    def decode(self, raw: object, path: str, current: GoValue) -> GoValue:
        text = self._json.decode(raw, path, self._json.zero()).field("CPUSet").text
        try:
            return self.of(CPUSet.parse(text))
        except InputError as err:
            raise GoDecodeError(path, f"failed to parse cpuset: {err.message}") from None

    def encode(self, value: GoValue) -> str:
        text = str(self.cpus(value))
        return "{" + (f'"cpuSet":{encode_string(text)}' if text else "") + "}"

    @staticmethod
    def cpus(value: GoValue) -> CPUSet:
        return CPUSet(int(cpu) for cpu in value.field("CPUSet").field("elems").items)


_PLAIN: Final = re.compile(r"[A-Za-z0-9 _.,:/+=@-]*")
"""Text Go's encoder writes between quotes unchanged: most of a checkpoint (uids, names, CPU lists)."""


def encode_string(text: str) -> str:
    """A JSON string as Go's `json.Marshal` writes it."""
    if _PLAIN.fullmatch(text):
        return f'"{text}"'
    encoded = json.dumps(text, ensure_ascii=False)
    for char, escape in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        encoded = encoded.replace(char, escape)
    return encoded.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def _json_type(raw: object) -> str:
    if isinstance(raw, bool):
        return "bool"
    if isinstance(raw, JSONObject):
        return "object"
    if isinstance(raw, Fraction | int):
        return "number"
    if isinstance(raw, str):
        return "string"
    if isinstance(raw, list):
        return "array"
    return "null"


# The kubelet's structs (field names and JSON tags as in `cpumanager/state` and `memorymanager/state`).

CHECKSUM: Final = Integer("checksum.Checksum", "uint64")
_CPU_ENTRIES: Final = MapOf("map[string]map[string]string", MapOf("map[string]string", String()))
_CPU_ENTRIES_V1: Final = MapOf("map[string]string", String())
_CPU_POD_ENTRIES: Final = MapOf("state.PodCPUAssignments", CPUPodEntry())

MEMORY_TABLE: Final = Struct(
    "state.MemoryTable",
    (
        Field("TotalMemSize", "total", Integer("uint64", "uint64")),
        Field("SystemReserved", "systemReserved", Integer("uint64", "uint64")),
        Field("Allocatable", "allocatable", Integer("uint64", "uint64")),
        Field("Reserved", "reserved", Integer("uint64", "uint64")),
        Field("Free", "free", Integer("uint64", "uint64")),
    ),
)
NUMA_NODE_STATE: Final = Struct(
    "state.NUMANodeState",
    (
        Field("NumberOfAssignments", "numberOfAssignments", Integer()),
        Field(
            "MemoryMap",
            "memoryMap",
            MapOf("map[v1.ResourceName]*state.MemoryTable", PointerTo("*state.MemoryTable", MEMORY_TABLE)),
        ),
        Field("Cells", "cells", SliceOf("[]int", Integer())),
    ),
)
BLOCK: Final = Struct(
    "state.Block",
    (
        Field("NUMAAffinity", "numaAffinity", SliceOf("[]int", Integer())),
        Field("Type", "type", String("v1.ResourceName")),
        Field("Size", "size", Integer("uint64", "uint64")),
    ),
)
_BLOCKS: Final = SliceOf("[]state.Block", BLOCK)
_MACHINE_STATE: Final = MapOf(
    "state.NUMANodeMap", PointerTo("*state.NUMANodeState", NUMA_NODE_STATE), int_keys=True
)
_MEMORY_ENTRIES: Final = MapOf("state.ContainerMemoryAssignments", MapOf("map[string][]state.Block", _BLOCKS))
MEMORY_BLOCKS: Final = Field("MemoryBlocks", "memoryBlocks", _BLOCKS, omitempty=True)
"""The one field of the memory `PodEntry`."""
_MEMORY_POD_ENTRIES: Final = MapOf("state.PodMemoryAssignments", Struct("state.PodEntry", (MEMORY_BLOCKS,)))

POLICY: Final = Field("PolicyName", "policyName", String())
DEFAULT_CPU_SET: Final = Field("DefaultCPUSet", "defaultCpuSet", String())
CPU_ENTRIES: Final = Field("Entries", "entries", _CPU_ENTRIES, omitempty=True, allocated=True)
CPU_ENTRIES_V1: Final = Field("Entries", "entries", _CPU_ENTRIES_V1, omitempty=True, allocated=True)
CPU_POD_ENTRIES: Final = Field("PodEntries", "podEntries", _CPU_POD_ENTRIES, omitempty=True, allocated=True)
MACHINE_STATE: Final = Field("MachineState", "machineState", _MACHINE_STATE, allocated=True)
MEMORY_ENTRIES: Final = Field("Entries", "entries", _MEMORY_ENTRIES, omitempty=True, allocated=True)
MEMORY_POD_ENTRIES: Final = Field(
    "PodEntries", "podEntries", _MEMORY_POD_ENTRIES, omitempty=True, allocated=True
)
LEGACY_CHECKSUM: Final = Field("Checksum", "checksum", CHECKSUM)
DATA: Final = Field("Data", "data", String())
DATA_CHECKSUM: Final = Field("DataChecksum", "dataChecksum", CHECKSUM)


def checkpoint_struct(fields: Sequence[Field], type_name: str = "checkpoint") -> Struct:
    """A checkpoint struct of `fields`; `type_name` is what its checksum renders (`state.<type_name>`)."""
    return Struct(f"state.{type_name}", tuple(fields))
