"""The decision journal: what each decision changed, appended before an answer applies it, until the
checkpoint files hold it. Pure: records in, records out; the files are `store.StateDir`'s.

Writing both kubelet-format files takes the whole node's state; an answer that applies a decision must not
wait for that. So each decision's change is appended as one record (a few hundred bytes for a pod), and the
checkpoint writer folds the journal into the files later: once the files hold a state, the records they
hold are dropped. A record is absolute, not relative: for each pod it touched, the pod's entries as they
are after the decision (None: the pod has none), the node shared pool, and the memory tables of the NUMA
nodes whose tables changed. Replaying records over files that already hold some of them therefore changes
nothing those records did not change later, so a process killed between a fold and the drop of its records
loses nothing and gains nothing.

A record on disk: 4 bytes of payload length and 4 bytes of CRC-32 of the payload (big-endian), then the
payload, JSON:

  {"default": "0-3",
   "pods": {UID: {"cpus": {NAME: "1-2"} | null, "bubble": "1-3" | null,
                  "memory": {NAME: [[[NODE, ...], TYPE, SIZE], ...]} | null,
                  "pod_memory": [[[NODE, ...], TYPE, SIZE], ...] | null}},
   "machine": {NODE: {"assignments": N, "cells": [NODE, ...],
                      "map": {TYPE: [TOTAL, SYSTEM_RESERVED, ALLOCATABLE, RESERVED, FREE]}}}}

A record cut short (the process killed in mid-append) can only be the last one: it is ignored and reported.
A whole record whose checksum fails ends the replay there and is reported as corrupt.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from podlevel.engine.cpuset import CPUSet
from podlevel.engine.manager import NodeState
from podlevel.engine.memory_policy import MemoryBlock, MemoryTable, NUMANodeState
from podlevel.state.checkpoint_content import CPUCheckpoint, MemoryCheckpoint

HEADER: Final = struct.Struct(">II")
MAX_PAYLOAD: Final = 256 * 2**20
"""A length above this is not a record of ours (a whole 5,000-pod node is a few MiB)."""


@dataclass(frozen=True, slots=True)
class PodDelta:
    """One pod's entries after a decision; None: it has none of that kind."""

    cpus: Mapping[str, CPUSet] | None
    bubble: CPUSet | None
    memory: Mapping[str, tuple[MemoryBlock, ...]] | None
    pod_memory: tuple[MemoryBlock, ...] | None


@dataclass(frozen=True, slots=True)
class Delta:
    """What one decision changed in the checkpointed state."""

    default: CPUSet
    pods: Mapping[str, PodDelta]
    machine: Mapping[int, NUMANodeState]


@dataclass(frozen=True, slots=True)
class Replay:
    """What reading a journal gave: its whole records, and what stopped it early, if anything."""

    deltas: tuple[Delta, ...]
    problem: str | None = None
    corrupt: bool = False
    """A whole record failed its checksum or did not decode (a torn last record is not corrupt)."""


def delta_of(before: NodeState, after: NodeState) -> Delta:
    """The change from `before` to `after`, of the pods whose entries differ (found from the tables' shared
    storage where they share it, else by comparing them)."""
    uids: set[str] = set()
    for old, new in ((before.cpu.entries, after.cpu.entries), (before.cpu.pod_entries, after.cpu.pod_entries),
                     (before.memory.entries, after.memory.entries),
                     (before.memory.pod_entries, after.memory.pod_entries)):
        uids |= _differing(old, new)
    cpu, memory = after.cpu, after.memory
    pods = {uid: PodDelta(cpu.entries.get(uid), cpu.pod_entries.get(uid), memory.entries.get(uid),
                          memory.pod_entries.get(uid)) for uid in sorted(uids)}
    old_machine = before.memory.machine
    machine = {node: table for node, table in memory.machine.items() if old_machine.get(node) != table}
    return Delta(cpu.default, pods, machine)


def _differing(old: Mapping[str, Any], new: Mapping[str, Any]) -> set[str]:
    differing = getattr(new, "differing_keys", None)
    keys = differing(old) if differing is not None else None
    candidates = keys if keys is not None else {*old, *new}
    return {key for key in candidates if (was := old.get(key)) is not new.get(key) and was != new.get(key)}


def encode_record(delta: Delta) -> bytes:
    """The record of a delta, header and payload."""
    payload = json.dumps({
        "default": str(delta.default),
        "pods": {uid: {"cpus": _map(pod.cpus, str), "bubble": _text(pod.bubble),
                       "memory": _map(pod.memory, _blocks), "pod_memory": _blocks(pod.pod_memory)
                       if pod.pod_memory is not None else None}
                 for uid, pod in delta.pods.items()},
        "machine": {str(node): {"assignments": state.assignments, "cells": list(state.cells),
                                "map": {name: [t.total, t.system_reserved, t.allocatable, t.reserved, t.free]
                                        for name, t in state.memory_map.items()}}
                    for node, state in delta.machine.items()},
    }, separators=(",", ":")).encode()
    return HEADER.pack(len(payload), zlib.crc32(payload)) + payload


def _text(cpus: CPUSet | None) -> str | None:
    return str(cpus) if cpus is not None else None


def _map(mapping: Mapping[str, Any] | None, convert: Any) -> dict[str, Any] | None:
    return {name: convert(value) for name, value in mapping.items()} if mapping is not None else None


def _blocks(blocks: Iterable[MemoryBlock]) -> list[list[Any]]:
    return [[list(b.numa_affinity), b.type, b.size] for b in blocks]


def read_records(data: bytes) -> Replay:
    """The deltas of a journal's bytes, in order, up to the first record that is cut short or corrupt."""
    deltas: list[Delta] = []
    for offset, payload in _frames(data):
        if payload is None:
            return Replay(tuple(deltas), f"a record cut short at byte {offset} (the process was killed while "
                                         "appending it) is ignored")
        if isinstance(payload, str):
            return Replay(tuple(deltas), f"the record at byte {offset} {payload}; it and what follows are "
                                         "ignored", corrupt=True)
        try:
            deltas.append(_delta(json.loads(payload)))
        except (ValueError, KeyError, TypeError, IndexError) as err:
            return Replay(tuple(deltas), f"the record at byte {offset} does not decode ({err}); it and what "
                                         "follows are ignored", corrupt=True)
    return Replay(tuple(deltas))


def _frames(data: bytes) -> Iterator[tuple[int, bytes | str | None]]:
    """(offset, payload) per record; payload None when cut short, a reason when its header or checksum is
    wrong."""
    offset = 0
    while offset < len(data):
        if len(data) - offset < HEADER.size:
            yield offset, None
            return
        length, checksum = HEADER.unpack_from(data, offset)
        if length > MAX_PAYLOAD:
            yield offset, f"claims {length} bytes"
            return
        start = offset + HEADER.size
        payload = data[start:start + length]
        if len(payload) < length:
            yield offset, None
            return
        if zlib.crc32(payload) != checksum:
            yield offset, "fails its checksum"
            return
        yield offset, payload
        offset = start + length


def _delta(obj: dict[str, Any]) -> Delta:
    pods = {
        uid: PodDelta(
            {name: CPUSet.parse(text) for name, text in pod["cpus"].items()}
            if pod["cpus"] is not None else None,
            CPUSet.parse(pod["bubble"]) if pod["bubble"] is not None else None,
            {name: _read_blocks(blocks) for name, blocks in pod["memory"].items()}
            if pod["memory"] is not None else None,
            _read_blocks(pod["pod_memory"]) if pod["pod_memory"] is not None else None,
        )
        for uid, pod in obj["pods"].items()
    }
    machine = {
        int(node): NUMANodeState(state["assignments"],
                                 {name: MemoryTable(*values) for name, values in state["map"].items()},
                                 tuple(state["cells"]))
        for node, state in obj["machine"].items()
    }
    return Delta(CPUSet.parse(obj["default"]), pods, machine)


def _read_blocks(blocks: list[list[Any]]) -> tuple[MemoryBlock, ...]:
    return tuple(MemoryBlock(tuple(nodes), kind, size) for nodes, kind, size in blocks)


def replayed(
    cpu: CPUCheckpoint, memory: MemoryCheckpoint | None, deltas: Iterable[Delta]
) -> tuple[CPUCheckpoint, MemoryCheckpoint | None]:
    """The checkpoints' contents with the deltas applied in order (memory only where there is a memory
    checkpoint to apply them to)."""
    default = cpu.default
    cpu_entries, bubbles = dict(cpu.entries), dict(cpu.pod_entries)
    machine = dict(memory.machine) if memory is not None else {}
    memory_entries = dict(memory.entries) if memory is not None else {}
    pod_memory = dict(memory.pod_entries) if memory is not None else {}
    for delta in deltas:
        default = delta.default
        machine.update(delta.machine)
        for uid, pod in delta.pods.items():
            _put(cpu_entries, uid, pod.cpus)
            _put(bubbles, uid, pod.bubble)
            _put(memory_entries, uid, pod.memory)
            _put(pod_memory, uid, pod.pod_memory)
    new_cpu = CPUCheckpoint(cpu.policy_name, default, cpu_entries, bubbles)
    if memory is None:
        return new_cpu, None
    return new_cpu, MemoryCheckpoint(memory.policy_name, machine, memory_entries, pod_memory)


def _put(table: dict[str, Any], key: str, value: Any) -> None:
    if value is None:
        table.pop(key, None)
    else:
        table[key] = value
