"""`cpu_manager_state` and `memory_manager_state`: the kubelet's layouts, read newest first, written stably.

Layouts (JSON; checksums as in `checksum`):

| file   | V | fields                                                      | written by            |
|--------|---|-------------------------------------------------------------|-----------------------|
| CPU    | 1 | policyName, defaultCpuSet, entries{containerID: cpus}, checksum | kubelet <= 1.17   |
| CPU    | 2 | policyName, defaultCpuSet, entries{pod: {container: cpus}}, checksum | <= 1.35, 1.36 |
| CPU    | 3 | V2 + podEntries{pod: {"cpuSet": cpus}}                      | 1.36, pod-level gate on |
| CPU    | 4 | data (JSON of the V3 fields) + dataChecksum + an inline V2   | 1.37                  |
| memory | 1 | policyName, machineState{node: state}, entries{pod: {container: [block]}}, checksum | <= 1.36 |
| memory | 2 | V1 + podEntries{pod: {"memoryBlocks": [block]}}              | 1.36, gate on         |
| memory | 3 | data (JSON of the V2 fields) + dataChecksum + an inline V1   | 1.37                  |

The inline legacy part of the `data` layouts is what keeps a downgrade possible: an older kubelet ignores
`data` and reads the inline fields, verified by their own checksum (pod entries are not there, so it sees
only container entries). Reading follows the kubelet: a file whose `data` or `dataChecksum` is set must
verify by them and is never retried as an older layout; otherwise each older layout is tried in turn on a
fresh decode, a checksum of 0 is accepted unverified where the kubelet accepts it (CPU V1 and V2, memory
V1), and so a V3 CPU or V2 memory file with checksum 0 reads without its pod entries.
`Decoded.checks` says, part by part, what verified and what an older kubelet would do with the file.

The module is long because the table above is one decision: every layout's reader and its legacy writer
must agree with the same rules of fallback, and tests hold them against the kubelet's own files together.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Final, Literal, NamedTuple

from podlevel.engine.cpuset import CPUSet
from podlevel.engine.errors import InputError
from podlevel.engine.memory_policy import MemoryBlock, MemoryTable, NUMANodeState
from podlevel.state.checksum import (
    GoValue,
    data_checksum,
    go_map,
    go_slice,
    go_struct,
    pointer,
    scalar,
    struct_checksum,
)
from podlevel.state.gotypes import (
    CHECKSUM,
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
    GoDecodeError,
    JSONObject,
    MapOf,
    PointerTo,
    Struct,
    checkpoint_struct,
    fold,
    parse,
)
from podlevel.state.newest import NewestEncoder

Kind = Literal["cpu", "memory"]
_HEAD: Final = Struct("head", (DATA, DATA_CHECKSUM))
"""The fields that tell the `data` layouts from the older ones."""
NEWEST: Final[Mapping[Kind, int]] = {"cpu": 4, "memory": 3}

EMPTY: Final = "empty"
TRUNCATED: Final = "truncated"
NOT_JSON: Final = "not JSON"
NOT_A_FILE: Final = "not a regular file"
BAD_CHECKSUM: Final = "bad checksum"
BAD_CONTENT: Final = "bad content"
FUTURE_VERSION: Final = "unknown future version"
UNKNOWN_KIND: Final = "unknown kind"


class CorruptCheckpoint(Exception):
    """A file no layout reads. `reason` is one of the constants above; `detail` names what failed."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class MigrationError(ValueError):
    """A conversion between layouts that would lose information, or needs information the file lacks."""


Entries = Mapping[str, Mapping[str, CPUSet]]


@dataclass(frozen=True)
class CPUCheckpoint:
    """What a CPU checkpoint holds from V2 on, keyed by pod UID and container name as the kubelet keys it."""

    policy_name: str
    default: CPUSet
    entries: Mapping[str, Mapping[str, CPUSet]] = field(default_factory=dict)
    pod_entries: Mapping[str, CPUSet] = field(default_factory=dict)
    """pod UID -> the pod's bubble (KEP-5526)."""


@dataclass(frozen=True)
class LegacyCPUCheckpoint:
    """A V1 CPU checkpoint: entries keyed by container ID, which the file cannot map to a pod."""

    policy_name: str
    default: CPUSet
    container_entries: Mapping[str, CPUSet] = field(default_factory=dict)

    def migrate(self, containers: Mapping[str, tuple[str, str]]) -> CPUCheckpoint:
        """The V2+ content, given container ID -> (pod UID, container name) for every entry."""
        unknown = sorted(set(self.container_entries) - set(containers))
        if unknown:
            raise MigrationError(
                f"V1 entries are keyed by container ID and {', '.join(unknown)} "
                "is not a known container: cannot tell its pod and container name"
            )
        entries: dict[str, dict[str, CPUSet]] = {}
        for container_id, cpus in self.container_entries.items():
            pod_uid, name = containers[container_id]
            entries.setdefault(pod_uid, {})[name] = cpus
        return CPUCheckpoint(self.policy_name, self.default, entries)


@dataclass(frozen=True)
class MemoryCheckpoint:
    policy_name: str
    machine: Mapping[int, NUMANodeState]
    entries: Mapping[str, Mapping[str, tuple[MemoryBlock, ...]]] = field(default_factory=dict)
    pod_entries: Mapping[str, tuple[MemoryBlock, ...]] = field(default_factory=dict)


Content = CPUCheckpoint | LegacyCPUCheckpoint | MemoryCheckpoint


@dataclass(frozen=True)
class Check:
    """One verified part of a file: `part` names it (`checksum`, `data`, `legacy part`, `pod entries`)."""

    part: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class Decoded:
    kind: Kind
    version: int
    content: Content
    checks: tuple[Check, ...]
    notes: tuple[str, ...] = ()

    @property
    def valid(self) -> bool:
        """Every checksum in the file is valid in a layout the plugin reads."""
        return all(check.ok for check in self.checks)


@dataclass(frozen=True)
class _Layout:
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
class _Family:
    kind: Kind
    noun: str
    data_fields: tuple[Field, ...]
    data_type: str
    older: tuple[_Layout, ...]
    """Newest first."""
    inline: tuple[_Layout, ...]
    """What the legacy part of the newest layout may be."""
    content: Callable[[GoValue], Content]

    def layout(self, version: int) -> _Layout:
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
    fields = {name for name, _ in value.payload}  # type: ignore[attr-defined]
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
    fields = {name for name, _ in value.payload}  # type: ignore[attr-defined]
    pod_entries = (
        {
            str(pod): _blocks(entry.field("MemoryBlocks"))
            for pod, entry in value.field("PodEntries").items.items()
        }
        if "PodEntries" in fields
        else {}
    )
    return MemoryCheckpoint(value.field("PolicyName").text, machine, entries, pod_entries)


_CPU_V3: Final = _Layout(
    3,
    (POLICY, DEFAULT_CPU_SET, CPU_ENTRIES, CPU_POD_ENTRIES, LEGACY_CHECKSUM),
    ("CPUManagerCheckpoint", "CPUManagerCheckpointV3"),
    zero_ok=False,
)
_CPU_V2: Final = _Layout(
    2,
    (POLICY, DEFAULT_CPU_SET, CPU_ENTRIES, LEGACY_CHECKSUM),
    ("CPUManagerCheckpoint", "CPUManagerCheckpointV2"),
    zero_ok=True,
)
_CPU_V1: Final = _Layout(
    1, (POLICY, DEFAULT_CPU_SET, CPU_ENTRIES_V1, LEGACY_CHECKSUM), ("CPUManagerCheckpoint",), zero_ok=True
)
_MEMORY_V2: Final = _Layout(
    2,
    (POLICY, MACHINE_STATE, MEMORY_ENTRIES, MEMORY_POD_ENTRIES, LEGACY_CHECKSUM),
    ("MemoryManagerCheckpoint",),
    zero_ok=False,
)
_MEMORY_V1: Final = _Layout(
    1,
    (POLICY, MACHINE_STATE, MEMORY_ENTRIES, LEGACY_CHECKSUM),
    ("MemoryManagerCheckpoint", "MemoryManagerCheckpointV1"),
    zero_ok=True,
    drops_pod_entries=True,
)
_CPU: Final = _Family(
    kind="cpu",
    noun="CPU manager",
    data_fields=(POLICY, DEFAULT_CPU_SET, CPU_ENTRIES, CPU_POD_ENTRIES),
    data_type="CPUManagerCheckpointData",
    older=(_CPU_V3, _CPU_V2, _CPU_V1),
    inline=(_CPU_V2, _CPU_V3),
    content=_cpu_content,
)
_MEMORY: Final = _Family(
    kind="memory",
    noun="memory manager",
    data_fields=(POLICY, MACHINE_STATE, MEMORY_ENTRIES, MEMORY_POD_ENTRIES),
    data_type="MemoryManagerCheckpointData",
    older=(_MEMORY_V2, _MEMORY_V1),
    inline=(_MEMORY_V1, _MEMORY_V2),
    content=_memory_content,
)
_FAMILIES: Final[Mapping[Kind, _Family]] = {"cpu": _CPU, "memory": _MEMORY}
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


# Reading.


def parse_object(data: bytes | str) -> JSONObject:
    """The file's top-level JSON object, or CorruptCheckpoint saying why there is none."""
    # Go replaces invalid UTF-8 with U+FFFD rather than failing.
    text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
    if not text.strip():
        raise CorruptCheckpoint(EMPTY, "the file is empty")
    try:
        tree = parse(text)
    except json.JSONDecodeError as err:
        if err.pos >= len(text.rstrip()) or err.msg.startswith("Unterminated string"):
            raise CorruptCheckpoint(TRUNCATED, f"the JSON ends early ({err.msg} at byte {err.pos})") from None
        raise CorruptCheckpoint(NOT_JSON, f"{err.msg} at line {err.lineno} column {err.colno}") from None
    if not isinstance(tree, JSONObject):
        raise CorruptCheckpoint(NOT_JSON, f"the file holds a JSON {type(tree).__name__}, not an object")
    return tree


def detect_kind(obj: JSONObject) -> Kind:
    """CPU or memory, from the fields (inside `data` for the newest layouts), else from the policy name."""
    for pairs in (obj, _data_object(obj)):
        keys = {fold(key) for key, _ in pairs}
        if fold(MACHINE_STATE.json) in keys:
            return "memory"
        if fold(DEFAULT_CPU_SET.json) in keys:
            return "cpu"
    policies = {value for key, value in obj if fold(key) == fold(POLICY.json)}
    if policies & {"Static", "None"}:
        return "memory"
    if policies & {"static", "none"}:
        return "cpu"
    raise CorruptCheckpoint(
        UNKNOWN_KIND,
        "neither a CPU nor a memory manager checkpoint (no defaultCpuSet, "
        "no machineState, no known policy name)",
    )


def _data_object(obj: JSONObject) -> JSONObject:
    data = next((value for key, value in reversed(obj) if fold(key) == fold(DATA.json)), None)
    try:
        tree = parse(data) if isinstance(data, str) else None
    except json.JSONDecodeError:
        tree = None
    return tree if isinstance(tree, JSONObject) else JSONObject()


def decode(data: bytes | str, kind: Kind | None = None) -> Decoded:
    """Read a checkpoint file's bytes, newest layout first. Raises CorruptCheckpoint."""
    obj = parse_object(data)
    family = _FAMILIES[kind or detect_kind(obj)]
    unknown = sorted({key for key, _ in obj if fold(key) not in family.known_keys})
    try:
        head = _HEAD.decode(obj, "", _HEAD.zero())
    except GoDecodeError as err:
        raise CorruptCheckpoint(BAD_CONTENT, f"V{NEWEST[family.kind]}: {err}") from None
    text, stored = head.field("Data").text, int(head.field("DataChecksum").text)
    if text or stored:
        return _decode_newest(obj, family, text, stored, unknown)
    failures: list[tuple[_Layout, CorruptCheckpoint]] = []
    for layout in family.older:
        try:
            value, verdict = _verify(layout, obj)
        except GoDecodeError as err:
            failures.append((layout, CorruptCheckpoint(BAD_CONTENT, f"as V{layout.version}: {err}")))
            continue
        if verdict.outcome is Outcome.MISMATCH:
            failure = CorruptCheckpoint(BAD_CHECKSUM, f"as V{layout.version}: {verdict.text}")
            failures.append((layout, failure))
            continue
        checks = [Check("checksum", True, verdict.text)]
        notes = [f"ignored fields no layout knows: {', '.join(unknown)}"] if unknown else []
        skipped = _skipped_pod_entries(obj, layout)
        if skipped and layout.drops_pod_entries:
            notes.append(skipped)
        elif skipped:
            checks.append(Check("pod entries", False, skipped))
        if layout.has("podEntries"):
            notes.append(
                "kubelets 1.35 and older, and 1.36 without pod-level resource managers, reject this layout"
            )
        return Decoded(family.kind, layout.version, family.content(value), tuple(checks), tuple(notes))
    raise _failure(obj, family, failures, unknown)


class Outcome(Enum):
    """How a layout's own checksum judged a file."""

    MATCHES = "matches"
    ZERO_ACCEPTED = "checksum 0 accepted"
    MISMATCH = "mismatch"


class Verdict(NamedTuple):
    outcome: Outcome
    text: str
    """The verdict as `verify` and `inspect` print it."""


def _verify(layout: _Layout, obj: JSONObject) -> tuple[GoValue, Verdict]:
    """The decoded struct and how its checksum verified."""
    struct = layout.struct()
    value = struct.decode(obj, "", struct.fresh())
    stored = int(value.field("Checksum").text)
    if stored == 0 and layout.zero_ok:
        accepted = "checksum 0: accepted unverified, as the kubelet accepts it"
        return value, Verdict(Outcome.ZERO_ACCEPTED, accepted)
    zeroed = _with(value, "Checksum", scalar(CHECKSUM.go, "0"))
    sums = {name: struct_checksum(pointer(f"*state.{name}", zeroed)) for name in layout.names}
    for name, computed in sums.items():
        if computed == stored:
            return value, Verdict(Outcome.MATCHES, f"checksum {stored} matches (as state.{name})")
    computed_text = " or ".join(str(s) for s in sums.values())
    return value, Verdict(Outcome.MISMATCH, f"mismatch: checksum {stored}, computed {computed_text}")


def _skipped_pod_entries(obj: JSONObject, layout: _Layout) -> str | None:
    if layout.has("podEntries") or not any(fold(key) == "podentries" for key, _ in obj):
        return None
    return (
        f"podEntries present but not covered by a valid checksum: read as V{layout.version} "
        "(checksum 0), the way the kubelet reads it, the pod entries are dropped"
    )


def _decode_newest(obj: JSONObject, family: _Family, text: str, stored: int, unknown: list[str]) -> Decoded:
    version = NEWEST[family.kind]
    computed = data_checksum(text)
    if computed != stored:
        hint = ""
        named_checksum = [v for k, v in obj if fold(k) == "checksum"]
        if not any(fold(k) == fold(DATA_CHECKSUM.json) for k, _ in obj) and computed in named_checksum:
            hint = " (the data checksum is under `checksum`: an unmerged early layout the kubelet rejects)"
        raise CorruptCheckpoint(
            BAD_CHECKSUM, f"V{version} data checksum {stored} does not match computed {computed}{hint}"
        )
    try:
        tree = parse(text)
    except json.JSONDecodeError as err:
        raise CorruptCheckpoint(NOT_JSON, f"V{version} data: {err.msg} at byte {err.pos}") from None
    struct = checkpoint_struct(family.data_fields, family.data_type)
    try:
        value, data_unknown = struct.decode_fields(tree, "data", struct.fresh())
    except GoDecodeError as err:
        raise CorruptCheckpoint(BAD_CONTENT, f"V{version} {err}") from None
    content = family.content(value)
    legacy, legacy_notes = _legacy_check(obj, family, content)
    checks = (Check("data", True, f"data checksum {stored} matches"), legacy)
    notes = list(legacy_notes)
    if unknown or data_unknown:
        notes.append(
            f"ignored fields no layout knows: {', '.join(unknown + [f'data/{k}' for k in data_unknown])}"
        )
    return Decoded(family.kind, version, content, checks, tuple(notes))


def _legacy_check(obj: JSONObject, family: _Family, content: Content) -> tuple[Check, list[str]]:
    """How an older kubelet fares with the inline legacy part of a `data` file."""
    inline = [
        (key, value) for key, value in obj if fold(key) not in {fold(DATA.json), fold(DATA_CHECKSUM.json)}
    ]
    if not inline:
        return Check(
            "legacy part",
            True,
            "absent: kubelets older than 1.37 cannot restore this file (they find no policy name)",
        ), []
    legacy = JSONObject(inline)
    errors: list[str] = []
    for layout in family.inline:
        try:
            value, verdict = _verify(
                _Layout(layout.version, layout.fields, layout.names, zero_ok=True), legacy
            )
        except GoDecodeError as err:
            errors.append(f"not V{layout.version}: {err}")
            continue
        if verdict.outcome is Outcome.MISMATCH:
            errors.append(verdict.text)
            continue
        older = family.content(value)
        notes = (
            []
            if _same_legacy(older, content)
            else [
                f"the legacy V{layout.version} part disagrees with data: a downgraded kubelet would restore "
                "other assignments"
            ]
        )
        if verdict.outcome is Outcome.ZERO_ACCEPTED:
            return Check(
                "legacy part",
                True,
                f"V{family.inline[0].version} fields with checksum 0: older kubelets accept them unverified",
            ), notes
        downgrade = (
            "a 1.36 or older kubelet reads it (pod entries dropped)"
            if layout is family.inline[0]
            else "a 1.36 kubelet with pod-level resource managers reads it; older ones reject the file"
        )
        part = f"legacy V{layout.version} part: {verdict.text}; {downgrade}"
        return Check("legacy part", True, part), notes
    return Check(
        "legacy part",
        False,
        f"legacy part verifies as no older layout ({errors[0]}): the 1.37 "
        "kubelet restores the file from data, but a downgrade to 1.36 or older "
        "would reject it",
    ), []


def _same_legacy(older: Content, newest: Content) -> bool:
    if isinstance(older, CPUCheckpoint) and isinstance(newest, CPUCheckpoint):
        return (older.policy_name, older.default, older.entries) == (
            newest.policy_name,
            newest.default,
            newest.entries,
        )
    if isinstance(older, MemoryCheckpoint) and isinstance(newest, MemoryCheckpoint):
        return (older.policy_name, older.machine, older.entries) == (
            newest.policy_name,
            newest.machine,
            newest.entries,
        )
    return False


def _failure(
    obj: JSONObject, family: _Family, failures: list[tuple[_Layout, CorruptCheckpoint]], unknown: list[str]
) -> CorruptCheckpoint:
    """The most telling error once every layout failed: a newer layout's fields first, then the error of
    the layout the file looks like."""
    if unknown:
        return CorruptCheckpoint(
            FUTURE_VERSION,
            f"fields {', '.join(unknown)} belong to no {family.noun} "
            "layout this plugin reads, and no known layout verifies",
        )
    keys = {fold(key) for key, _ in obj}
    entries = next((value for key, value in obj if fold(key) == "entries"), None)
    if "podentries" in keys:
        likely = NEWEST[family.kind] - 1
    elif (
        family.kind == "cpu"
        and isinstance(entries, JSONObject)
        and any(isinstance(v, str) for _, v in entries)
    ):
        likely = 1
    else:
        likely = family.older[-1].version if family.kind == "memory" else 2
    return next((error for layout, error in failures if layout.version == likely), failures[-1][1])


def _with(value: GoValue, name: str, new: GoValue) -> GoValue:
    fields: tuple[tuple[str, GoValue], ...] = value.payload  # type: ignore[assignment]
    return go_struct(value.type, [(n, new if n == name else v) for n, v in fields])


# Writing.


def encode(content: Content, version: int | None = None, newest: NewestEncoder | None = None) -> bytes:
    """The file bytes of `content` in `version` (default: the newest), as the kubelet would write them.
    `newest` keeps fragments between writes of the newest layouts (`state.newest`); without it they are
    made anew. Raises MigrationError for a layout that cannot hold the content."""
    kind: Kind = "memory" if isinstance(content, MemoryCheckpoint) else "cpu"
    family = _FAMILIES[kind]
    version = NEWEST[kind] if version is None else version
    if not 1 <= version <= NEWEST[kind]:
        raise MigrationError(f"{family.noun} checkpoints have versions 1 to {NEWEST[kind]}, not {version}")
    if isinstance(content, LegacyCPUCheckpoint) != (version == 1 and kind == "cpu"):
        raise MigrationError(
            "V1 keys CPU entries by container ID, which a V2+ checkpoint does not record"
            if version == 1
            else "V1 entries are keyed by container ID: migrating needs the running containers' pod UIDs and "
            "names (the plugin migrates such a file when it starts)"
        )
    if version == NEWEST[kind]:
        encoder = newest or newest_encoder()
        if isinstance(content, MemoryCheckpoint):
            return encoder.memory(content.policy_name, content.machine, content.entries, content.pod_entries)
        assert isinstance(content, CPUCheckpoint)
        return encoder.cpu(content.policy_name, content.default, content.entries, content.pod_entries)
    layout = family.layout(version)
    _refuse_lossy(content, layout)
    return layout.struct().encode(_sealed(layout, content)).encode()


def newest_encoder() -> NewestEncoder:
    """An encoder of the newest layouts, whose legacy parts render under the type names writers use."""
    return NewestEncoder(_CPU.inline[0].names[0], _MEMORY.inline[0].names[0])


def _refuse_lossy(content: Content, layout: _Layout) -> None:
    pods = getattr(content, "pod_entries", {})
    if pods and not layout.has("podEntries"):
        raise MigrationError(
            f"V{layout.version} has no pod entries: the pod-level assignments (bubbles) of pod"
            f"{'s' if len(pods) > 1 else ''} {', '.join(sorted(pods))} would be lost"
        )


def _sealed(layout: _Layout, content: Content) -> GoValue:
    """`content` as `layout`'s struct with its checksum set (under the unversioned type name). The checksum
    covers the value a reader decodes from the written JSON: an empty field left out by `omitempty` reads
    back nil, which hashes unlike the empty value written."""
    struct = layout.struct()
    value = struct.decode(parse(struct.encode(_value(layout.fields, content, struct.go))), "", struct.fresh())
    checksum = struct_checksum(pointer(f"*{struct.go}", value))
    return _with(value, "Checksum", scalar(CHECKSUM.go, str(checksum)))


def _value(fields: tuple[Field, ...], content: Content, type_: str) -> GoValue:
    values: dict[str, GoValue] = {
        "PolicyName": scalar("string", content.policy_name),
        "Checksum": scalar(CHECKSUM.go, "0"),
    }
    if isinstance(content, LegacyCPUCheckpoint):
        values["DefaultCPUSet"] = scalar("string", str(content.default))
        values["Entries"] = go_map(
            CPU_ENTRIES_V1.schema.go,
            {cid: scalar("string", str(c)) for cid, c in content.container_entries.items()},
        )
    elif isinstance(content, CPUCheckpoint):
        values["DefaultCPUSet"] = scalar("string", str(content.default))
        inner = _schema_of(CPU_ENTRIES).value.go
        values["Entries"] = go_map(
            CPU_ENTRIES.schema.go,
            {
                pod: go_map(inner, {n: scalar("string", str(c)) for n, c in ctrs.items()})
                for pod, ctrs in content.entries.items()
            },
        )
        values["PodEntries"] = go_map(
            CPU_POD_ENTRIES.schema.go,
            {pod: CPUPodEntry().of(cpus) for pod, cpus in content.pod_entries.items()},
        )
    else:
        values.update(_memory_values(content))
    return go_struct(type_, [(f.name, values[f.name]) for f in fields])


def _memory_values(content: MemoryCheckpoint) -> dict[str, GoValue]:
    machine = _schema_of(MACHINE_STATE)
    node_pointer = machine.value
    assert isinstance(node_pointer, PointerTo)
    node_struct = node_pointer.element
    memory_map = _schema_of(node_struct.fields[1])
    table_pointer = memory_map.value
    assert isinstance(table_pointer, PointerTo)

    def node(state: NUMANodeState) -> GoValue:
        tables = {
            name: pointer(
                table_pointer.go,
                go_struct(
                    table_pointer.element.go,
                    [
                        (f.name, scalar(f.schema.go, str(v)))
                        for f, v in zip(
                            table_pointer.element.fields,
                            (t.total, t.system_reserved, t.allocatable, t.reserved, t.free),
                            strict=True,
                        )
                    ],
                ),
            )
            for name, t in state.memory_map.items()
        }
        return pointer(
            node_pointer.go,
            go_struct(
                node_struct.go,
                [
                    ("NumberOfAssignments", scalar("int", str(state.assignments))),
                    ("MemoryMap", go_map(memory_map.go, tables)),
                    ("Cells", go_slice("[]int", [scalar("int", str(c)) for c in state.cells])),
                ],
            ),
        )

    entries = _schema_of(MEMORY_ENTRIES)
    pod_entries = _schema_of(MEMORY_POD_ENTRIES)
    pod_entry = pod_entries.value
    return {
        "MachineState": go_map(machine.go, {n: node(s) for n, s in content.machine.items()}),
        "Entries": go_map(
            entries.go,
            {
                pod: go_map(entries.value.go, {name: _blocks_value(b) for name, b in ctrs.items()})
                for pod, ctrs in content.entries.items()
            },
        ),
        "PodEntries": go_map(
            pod_entries.go,
            {
                pod: go_struct(pod_entry.go, [("MemoryBlocks", _blocks_value(b))])
                for pod, b in content.pod_entries.items()
            },
        ),
    }


def _blocks_value(blocks: tuple[MemoryBlock, ...]) -> GoValue:
    return go_slice(
        "[]state.Block",
        [
            go_struct(
                "state.Block",
                [
                    ("NUMAAffinity", go_slice("[]int", [scalar("int", str(n)) for n in b.numa_affinity])),
                    ("Type", scalar("v1.ResourceName", b.type)),
                    ("Size", scalar("uint64", str(b.size))),
                ],
            )
            for b in blocks
        ],
    )


def _schema_of(f: Field) -> MapOf:
    assert isinstance(f.schema, MapOf)
    return f.schema
