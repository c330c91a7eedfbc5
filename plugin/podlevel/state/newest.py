"""The fast encoder: the newest checkpoint layouts (CPU V4, memory V3), written from per-pod fragments kept
between writes.

The plugin writes both checkpoints at every admission and release, before any answer applies it, so their
cost lands on the container-creation path. Building the whole `GoValue` model, encoding it, reading it
back and rendering it for the checksum (what `encoder` does for the older layouts) grows with every pod on
the node; here each pod's JSON text and spew rendering are made once and kept while its entries stay equal,
and a write joins the fragments (each also kept escaped, as it reads inside the `data` string) and hashes
the two texts. The bytes are the ones the model gives: the JSON of `gotypes` and the rendering of
`checksum`, in the same order (map keys sorted by their text, which for valid strings is the bytewise order
both Go's encoder and spew use; integer keys of the machine state numerically in the rendering).

The legacy inline part is hashed as its reader decodes it: `entries` left out by `omitempty` reads back as
the empty map the kubelet's constructor allocates, which renders as `map[]`.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Generic, TypeVar

from podlevel.engine.cpuset import CPUSet
from podlevel.engine.memory_policy import MemoryBlock, MemoryTable, NUMANodeState
from podlevel.engine.shared_map import SharedMap
from podlevel.state.checksum import data_checksum, rendered_checksum
from podlevel.state.gotypes import (
    BLOCK,
    CPU_ENTRIES,
    CPU_POD_ENTRIES,
    DATA,
    DATA_CHECKSUM,
    DEFAULT_CPU_SET,
    LEGACY_CHECKSUM,
    MACHINE_STATE,
    MEMORY_BLOCKS,
    MEMORY_ENTRIES,
    MEMORY_POD_ENTRIES,
    MEMORY_TABLE,
    NUMA_NODE_STATE,
    POLICY,
    CPUPodEntry,
    Field,
    encode_string,
)

V = TypeVar("V")
_ABSENT: Final[Any] = object()

def _key(field: Field) -> str:
    return f"{encode_string(field.json)}:"


def _shown(field: Field) -> str:
    """How spew starts a field of a struct: its name and static type."""
    return f"{field.name}:({field.schema.go})"


def _both(fields: Iterable[Field]) -> tuple[tuple[str, str], ...]:
    return tuple((_key(f), _shown(f)) for f in fields)


# Made once: hashing or formatting a `Field` per write costs more than the rest of the write.
_POLICY, _DEFAULT, _CPU_ENTRIES = _both((POLICY, DEFAULT_CPU_SET, CPU_ENTRIES))
(_LEGACY_CHECKSUM,) = _both((LEGACY_CHECKSUM,))
_MACHINE, _MEMORY_ENTRIES = _both((MACHINE_STATE, MEMORY_ENTRIES))
_ASSIGNMENTS, _MEMORY_MAP, _CELLS = _both(NUMA_NODE_STATE.fields)
_TABLE: Final = _both(MEMORY_TABLE.fields)
_AFFINITY, _TYPE, _SIZE = _both(BLOCK.fields)
_CPU_SET_KEY: Final = _key(CPUPodEntry().json_field)
_BLOCKS_KEY: Final = _key(MEMORY_BLOCKS)
_CPU_POD_ENTRIES_KEY, _MEMORY_POD_ENTRIES_KEY = _key(CPU_POD_ENTRIES), _key(MEMORY_POD_ENTRIES)
_DATA_KEY, _DATA_CHECKSUM_KEY = _key(DATA), _key(DATA_CHECKSUM)


def _escaped(text: str) -> str:
    """`text` as it reads inside a JSON string Go wrote. Escaping goes character by character, so the
    escaped `data` string is the escaped fragments joined."""
    return encode_string(text)[1:-1]


class _Fragments(Generic[V]):
    """Per pod UID: the value its fragments were made from, and the fragments (JSON, that JSON escaped as
    a string, rendering), also kept as lists in key order. The tables come from the engine's states, which
    share their storage (`SharedMap`): between two consecutive states only the keys they say may differ are
    looked at, so a write does not walk every pod."""

    def __init__(self, make: Callable[[str, V], tuple[str, str]], *, rendered: bool = True) -> None:
        """`rendered`: the spew rendering is wanted (the pod entries' is not: the legacy part, which the
        rendering hashes, leaves them out), so it is listed and joined only then."""
        self._make = make
        self._made: dict[str, tuple[V, tuple[str, ...]]] = {}
        """uid -> the value and its texts (JSON, escaped, rendering: as many as there are lists)."""
        self._source: Mapping[str, V] = {}
        self._order: list[str] = []
        self._lists: tuple[list[str], ...] = ([], [], []) if rendered else ([], [])

    def of(self, entries: Mapping[str, V]) -> tuple[str, str, str]:
        """The JSON members (plain and escaped) and the spew map entries of `entries`, in key order; pods
        gone are forgotten."""
        keys = entries.differing_keys(self._source) if isinstance(entries, SharedMap) else None
        if keys is None:
            self._rebuild(entries)
        else:
            for uid in keys:
                self._update(uid, entries)
        self._source = entries
        json_parts, escaped_parts, *shown_parts = self._lists
        shown = " ".join(shown_parts[0]) if shown_parts else ""
        return ",".join(json_parts), ",".join(escaped_parts), shown

    def _made_for(self, uid: str, value: V) -> tuple[V, tuple[str, ...]] | None:
        """The fragments of `uid` for `value`, made anew unless kept; None when kept as they are."""
        kept = self._made.get(uid)
        if kept is not None and (kept[0] is value or kept[0] == value):
            return None
        json_text, shown_text = self._make(uid, value)
        made = (value, (json_text, _escaped(json_text), shown_text)[: len(self._lists)])
        self._made[uid] = made
        return made

    def _rebuild(self, entries: Mapping[str, V]) -> None:
        for uid, value in entries.items():
            self._made_for(uid, value)
        made = self._made
        if len(made) > len(entries):
            for uid in [uid for uid in made if uid not in entries]:
                del made[uid]
        self._order = sorted(entries)
        kept_in_order = [made[uid] for uid in self._order]
        self._lists = tuple([kept[1][part] for kept in kept_in_order] for part in range(len(self._lists)))

    def _update(self, uid: str, entries: Mapping[str, V]) -> None:
        """Bring one key's fragments and place in line with `entries`."""
        order = self._order
        at = bisect_left(order, uid)
        placed = at < len(order) and order[at] == uid
        value = entries.get(uid, _ABSENT)
        if value is _ABSENT:
            if placed:
                del order[at]
                for parts in self._lists:
                    del parts[at]
                del self._made[uid]
            return
        made = self._made_for(uid, value)
        if made is None:
            return
        if not placed:
            order.insert(at, uid)
        for parts, text in zip(self._lists, made[1], strict=True):
            if placed:
                parts[at] = text
            else:
                parts.insert(at, text)


def _container_map(uid: str, containers: Mapping[str, str], shown: Mapping[str, str]) -> tuple[str, str]:
    names = sorted(containers)
    json_text = ",".join(f"{encode_string(name)}:{containers[name]}" for name in names)
    shown_text = " ".join(f"{name}:{shown[name]}" for name in names)
    return f"{encode_string(uid)}:{{{json_text}}}", f"{uid}:map[{shown_text}]"


def _cpu_entry(uid: str, containers: Mapping[str, CPUSet]) -> tuple[str, str]:
    texts = {name: str(cpus) for name, cpus in containers.items()}
    return _container_map(uid, {n: encode_string(t) for n, t in texts.items()}, texts)


def _cpu_pod_entry(uid: str, cpus: CPUSet) -> tuple[str, str]:
    text = str(cpus)
    member = f"{_CPU_SET_KEY}{encode_string(text)}" if text else ""
    return f"{encode_string(uid)}:{{{member}}}", ""


def _ints(values: Iterable[int], separator: str) -> str:
    return separator.join(str(value) for value in values)


def _block_fragments(blocks: tuple[MemoryBlock, ...]) -> tuple[str, str]:
    json_parts, shown_parts = [], []
    for block in blocks:
        json_parts.append(
            f"{{{_AFFINITY[0]}[{_ints(block.numa_affinity, ',')}],"
            f"{_TYPE[0]}{encode_string(block.type)},{_SIZE[0]}{block.size}}}"
        )
        shown_parts.append(
            f"{{{_AFFINITY[1]}[{_ints(block.numa_affinity, ' ')}] "
            f"{_TYPE[1]}{block.type} {_SIZE[1]}{block.size}}}"
        )
    return f"[{','.join(json_parts)}]", f"[{' '.join(shown_parts)}]"


def _memory_entry(uid: str, containers: Mapping[str, tuple[MemoryBlock, ...]]) -> tuple[str, str]:
    encoded = {name: _block_fragments(blocks) for name, blocks in containers.items()}
    return _container_map(uid, {n: e[0] for n, e in encoded.items()}, {n: e[1] for n, e in encoded.items()})


def _memory_pod_entry(uid: str, blocks: tuple[MemoryBlock, ...]) -> tuple[str, str]:
    member = f"{_BLOCKS_KEY}{_block_fragments(blocks)[0]}" if blocks else ""
    return f"{encode_string(uid)}:{{{member}}}", ""


def _table(table: MemoryTable) -> tuple[str, str]:
    values = (table.total, table.system_reserved, table.allocatable, table.reserved, table.free)
    pairs = tuple(zip(_TABLE, values, strict=True))
    return (
        "{" + ",".join(f"{key}{v}" for (key, _), v in pairs) + "}",
        "<*>{" + " ".join(f"{shown}{v}" for (_, shown), v in pairs) + "}",
    )


def _machine(machine: Mapping[int, NUMANodeState]) -> tuple[str, str]:
    """The machine state's JSON object and spew map (a few NUMA nodes: made anew at every write)."""
    encoded: dict[int, tuple[str, str]] = {}
    for node, state in machine.items():
        tables = {name: _table(table) for name, table in state.memory_map.items()}
        names = sorted(tables)
        encoded[node] = (
            f"{{{_ASSIGNMENTS[0]}{state.assignments},"
            f"{_MEMORY_MAP[0]}{{{','.join(f'{encode_string(n)}:{tables[n][0]}' for n in names)}}},"
            f"{_CELLS[0]}[{_ints(state.cells, ',')}]}}",
            f"<*>{{{_ASSIGNMENTS[1]}{state.assignments} "
            f"{_MEMORY_MAP[1]}map[{' '.join(f'{n}:{tables[n][1]}' for n in names)}] "
            f"{_CELLS[1]}[{_ints(state.cells, ' ')}]}}",
        )
    json_text = ",".join(f'"{node}":{encoded[node][0]}' for node in sorted(encoded, key=str))
    shown_text = " ".join(f"{node}:{encoded[node][1]}" for node in sorted(encoded))
    return f"{{{json_text}}}", f"map[{shown_text}]"


def _member(key: str, members: str) -> str:
    """A map field left out when empty (`omitempty`), else `,"name":{...}`."""
    return f",{key}{{{members}}}" if members else ""


def _escaped_member(key: str, escaped_members: str) -> str:
    """`_member` escaped, from its members escaped."""
    return f"{_escaped(f',{key}{{')}{escaped_members}}}" if escaped_members else ""


Joined = tuple[str, str, str]
"""What `_Fragments.of` gives: JSON members, the same escaped, spew map entries."""


def _file(
    head: str, shown_head: str, entries_field: tuple[str, str], entries: Joined, pods_key: str, pods: Joined
) -> bytes:
    """The file: the legacy fields (`head`, then the container entries) and their checksum, then `data` (the
    same with the pod entries) and its checksum. `shown_head` renders the legacy struct up to its entries."""
    legacy = head + _member(entries_field[0], entries[0])
    shown = f"{shown_head}{entries_field[1]}map[{entries[2]}] {_LEGACY_CHECKSUM[1]}0}}"
    data = f"{{{legacy}{_member(pods_key, pods[0])}}}"
    escaped_data = (
        f"{_escaped('{' + head)}{_escaped_member(entries_field[0], entries[1])}"
        f"{_escaped_member(pods_key, pods[1])}}}"
    )
    return (
        f'{{{legacy},{_LEGACY_CHECKSUM[0]}{rendered_checksum(shown)},'
        f'{_DATA_KEY}"{escaped_data}",{_DATA_CHECKSUM_KEY}{data_checksum(data)}}}'
    ).encode()


class NewestEncoder:
    """Encodes checkpoints in the newest layouts; keep one per state directory so that consecutive writes
    reuse the fragments of the pods that did not change."""

    def __init__(self, cpu_type: str, memory_type: str) -> None:
        self._cpu_type = cpu_type
        self._memory_type = memory_type
        self._cpu = _Fragments(_cpu_entry)
        self._cpu_pods = _Fragments(_cpu_pod_entry, rendered=False)
        self._memory = _Fragments(_memory_entry)
        self._memory_pods = _Fragments(_memory_pod_entry, rendered=False)

    def cpu(
        self,
        policy: str,
        default: CPUSet,
        entries: Mapping[str, Mapping[str, CPUSet]],
        pod_entries: Mapping[str, CPUSet],
    ) -> bytes:
        default_text = str(default)
        return _file(
            f"{_POLICY[0]}{encode_string(policy)},{_DEFAULT[0]}{encode_string(default_text)}",
            f"(*state.{self._cpu_type}){{{_POLICY[1]}{policy} {_DEFAULT[1]}{default_text} ",
            _CPU_ENTRIES,
            self._cpu.of(entries),
            _CPU_POD_ENTRIES_KEY,
            self._cpu_pods.of(pod_entries),
        )

    def memory(
        self,
        policy: str,
        machine: Mapping[int, NUMANodeState],
        entries: Mapping[str, Mapping[str, tuple[MemoryBlock, ...]]],
        pod_entries: Mapping[str, tuple[MemoryBlock, ...]],
    ) -> bytes:
        machine_json, machine_shown = _machine(machine)
        return _file(
            f"{_POLICY[0]}{encode_string(policy)},{_MACHINE[0]}{machine_json}",
            f"(*state.{self._memory_type}){{{_POLICY[1]}{policy} {_MACHINE[1]}{machine_shown} ",
            _MEMORY_ENTRIES,
            self._memory.of(entries),
            _MEMORY_POD_ENTRIES_KEY,
            self._memory_pods.of(pod_entries),
        )
