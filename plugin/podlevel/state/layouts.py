"""The kubelet's checkpoint layouts, one `Layout` per version of each file, newest first (the table is in
`state.formats`), and the conversions between a layout's decoded struct and the checkpoint content."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from podlevel.engine.cpuset import CPUSet
from podlevel.engine.errors import InputError
from podlevel.engine.memory_policy import MemoryBlock, MemoryTable, NUMANodeState
from podlevel.state.checkpoint_content import (
    BAD_CONTENT,
    Content,
    CorruptCheckpoint,
    CPUCheckpoint,
    Kind,
    LegacyCPUCheckpoint,
    MemoryCheckpoint,
)
from podlevel.state.checksum import (
    GoValue,
    go_struct,
)
from podlevel.state.gotypes import (
    CPU_ENTRIES,
    CPU_ENTRIES_V1,
    CPU_POD_ENTRIES,
    DATA,
    DATA_CHECKSUM,
    DEFAULT_CPU_SET,
    LEGACY_CHECKSUM,
    MACHINE_STATE,
    MEMORY_ENTRIES,
    MEMORY_POD_ENTRIES,
    POLICY,
    CPUPodEntry,
    Field,
    Struct,
    checkpoint_struct,
    fold,
)

HEAD: Final = Struct("head", (DATA, DATA_CHECKSUM))
"""The fields that tell the `data` layouts from the older ones."""
NEWEST: Final[Mapping[Kind, int]] = {"cpu": 4, "memory": 3}


@dataclass(frozen=True)
class Layout:
    version: int
    fields: tuple[Field, ...]
    names: tuple[str, ...]
    """Type names the checksum may render; the first is what writers use (the unversioned one)."""
    zero_ok: bool
    drops_pod_entries: bool = False
    """The kubelet restores a file whose newer layout failed as this one, dropping its `podEntries`, and
    calls that valid (memory V2 with checksum 0 read as V1, the kubelet's "zeroed checksum" test)."""

    def struct(self) -> Struct:
        return checkpoint_struct(self.fields, self.names[0])

    def has(self, json_name: str) -> bool:
        return any(f.json == json_name for f in self.fields)


@dataclass(frozen=True)
class Family:
    kind: Kind
    noun: str
    data_fields: tuple[Field, ...]
    data_type: str
    older: tuple[Layout, ...]
    """Newest first."""
    inline: tuple[Layout, ...]
    """What the legacy part of the newest layout may be."""
    content: Callable[[GoValue], Content]

    def layout(self, version: int) -> Layout:
        return next(layout for layout in self.older if layout.version == version)

    @property
    def known_keys(self) -> frozenset[str]:
        keys = {f.json for layout in self.older for f in layout.fields} | {DATA.json, DATA_CHECKSUM.json}
        return frozenset(fold(key) for key in keys)


def _parse_cpus(text: str, what: str) -> CPUSet:
    try:
        return CPUSet.parse(text)
    except InputError as err:
        raise CorruptCheckpoint(BAD_CONTENT, f"{what} {text!r}: {err.message}") from None


def _cpu_content(value: GoValue) -> Content:
    policy = value.field("PolicyName").text
    default = _parse_cpus(value.field("DefaultCPUSet").text, "defaultCpuSet")
    entries_value = value.field("Entries")
    if entries_value.type == CPU_ENTRIES_V1.schema.go:
        by_id = {
            str(cid): _parse_cpus(cpus.text, f"entry of container {cid}")
            for cid, cpus in entries_value.items.items()
        }
        return LegacyCPUCheckpoint(policy, default, by_id)
    entries = {
        str(pod): {
            str(name): _parse_cpus(cpus.text, f"entry of pod {pod} container {name}")
            for name, cpus in containers.items.items()
        }
        for pod, containers in entries_value.items.items()
    }
    fields = {name for name, _ in value.fields}
    pod_entries = (
        {str(pod): CPUPodEntry.cpus(entry) for pod, entry in value.field("PodEntries").items.items()}
        if "PodEntries" in fields
        else {}
    )
    return CPUCheckpoint(policy, default, entries, pod_entries)


def _blocks(value: GoValue) -> tuple[MemoryBlock, ...]:
    return tuple(
        MemoryBlock(
            tuple(int(n.text) for n in block.field("NUMAAffinity").elements),
            block.field("Type").text,
            int(block.field("Size").text),
        )
        for block in value.elements
    )


def _memory_content(value: GoValue) -> Content:
    machine: dict[int, NUMANodeState] = {}
    for node, state in value.field("MachineState").items.items():
        target = state.target
        if target is None:
            raise CorruptCheckpoint(BAD_CONTENT, f"machineState of NUMA node {node} is null")
        tables: dict[str, MemoryTable] = {}
        for resource, table_pointer in target.field("MemoryMap").items.items():
            table = table_pointer.target
            if table is None:
                raise CorruptCheckpoint(BAD_CONTENT, f"memoryMap {resource} of NUMA node {node} is null")
            tables[str(resource)] = MemoryTable(
                *(
                    int(table.field(name).text)
                    for name in ("TotalMemSize", "SystemReserved", "Allocatable", "Reserved", "Free")
                )
            )
        cells = tuple(int(cell.text) for cell in target.field("Cells").elements)
        machine[int(node)] = NUMANodeState(int(target.field("NumberOfAssignments").text), tables, cells)
    entries = {
        str(pod): {str(name): _blocks(blocks) for name, blocks in containers.items.items()}
        for pod, containers in value.field("Entries").items.items()
    }
    fields = {name for name, _ in value.fields}
    pod_entries = (
        {
            str(pod): _blocks(entry.field("MemoryBlocks"))
            for pod, entry in value.field("PodEntries").items.items()
        }
        if "PodEntries" in fields
        else {}
    )
    return MemoryCheckpoint(value.field("PolicyName").text, machine, entries, pod_entries)


_CPU_V3: Final = Layout(
    3,
    (POLICY, DEFAULT_CPU_SET, CPU_ENTRIES, CPU_POD_ENTRIES, LEGACY_CHECKSUM),
    ("CPUManagerCheckpoint", "CPUManagerCheckpointV3"),
    zero_ok=False,
)
_CPU_V2: Final = Layout(
    2,
    (POLICY, DEFAULT_CPU_SET, CPU_ENTRIES, LEGACY_CHECKSUM),
    ("CPUManagerCheckpoint", "CPUManagerCheckpointV2"),
    zero_ok=True,
)
_CPU_V1: Final = Layout(
    1, (POLICY, DEFAULT_CPU_SET, CPU_ENTRIES_V1, LEGACY_CHECKSUM), ("CPUManagerCheckpoint",), zero_ok=True
)
_MEMORY_V2: Final = Layout(
    2,
    (POLICY, MACHINE_STATE, MEMORY_ENTRIES, MEMORY_POD_ENTRIES, LEGACY_CHECKSUM),
    ("MemoryManagerCheckpoint",),
    zero_ok=False,
)
_MEMORY_V1: Final = Layout(
    1,
    (POLICY, MACHINE_STATE, MEMORY_ENTRIES, LEGACY_CHECKSUM),
    ("MemoryManagerCheckpoint", "MemoryManagerCheckpointV1"),
    zero_ok=True,
    drops_pod_entries=True,
)
CPU_FAMILY: Final = Family(
    kind="cpu",
    noun="CPU manager",
    data_fields=(POLICY, DEFAULT_CPU_SET, CPU_ENTRIES, CPU_POD_ENTRIES),
    data_type="CPUManagerCheckpointData",
    older=(_CPU_V3, _CPU_V2, _CPU_V1),
    inline=(_CPU_V2, _CPU_V3),
    content=_cpu_content,
)
MEMORY_FAMILY: Final = Family(
    kind="memory",
    noun="memory manager",
    data_fields=(POLICY, MACHINE_STATE, MEMORY_ENTRIES, MEMORY_POD_ENTRIES),
    data_type="MemoryManagerCheckpointData",
    older=(_MEMORY_V2, _MEMORY_V1),
    inline=(_MEMORY_V1, _MEMORY_V2),
    content=_memory_content,
)
FAMILIES: Final[Mapping[Kind, Family]] = {"cpu": CPU_FAMILY, "memory": MEMORY_FAMILY}
_WRITERS: Final[Mapping[tuple[Kind, int], str]] = {
    ("cpu", 1): "kubelet 1.17 or older",
    ("cpu", 2): "kubelet 1.35 or older, or 1.36 without pod-level resource managers",
    ("cpu", 3): "kubelet 1.36 with pod-level resource managers",
    ("cpu", 4): "kubelet 1.37",
    ("memory", 1): "kubelet 1.36 or older without pod-level resource managers",
    ("memory", 2): "kubelet 1.36 with pod-level resource managers",
    ("memory", 3): "kubelet 1.37",
}


def written_by(kind: Kind, version: int) -> str:
    return _WRITERS[(kind, version)]


def with_field(value: GoValue, name: str, new: GoValue) -> GoValue:
    return go_struct(value.type, [(n, new if n == name else v) for n, v in value.fields])
