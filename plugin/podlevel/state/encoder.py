"""Writing checkpoint content in any layout the kubelet reads: the newest through the fast encoder
(`state.newest`), an older one for `checkpoint migrate` and for tests, refusing a conversion that would lose
something."""

from __future__ import annotations

from podlevel.state.checkpoint_content import (
    Content,
    CPUCheckpoint,
    Kind,
    LegacyCPUCheckpoint,
    MemoryCheckpoint,
    MigrationError,
)
from podlevel.state.checksum import (
    GoValue,
    go_map,
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
    MACHINE_STATE,
    MEMORY_ENTRIES,
    MEMORY_POD_ENTRIES,
    CPUPodEntry,
    Field,
    MapOf,
    parse,
)
from podlevel.state.layouts import CPU_FAMILY, FAMILIES, MEMORY_FAMILY, NEWEST, Layout, with_field
from podlevel.state.newest import NewestEncoder


def encode(content: Content, version: int | None = None, newest: NewestEncoder | None = None) -> bytes:
    """The file bytes of `content` in `version` (default: the newest), as the kubelet would write them.
    `newest` keeps fragments between writes of the newest layouts (`state.newest`); without it they are
    made anew. Raises MigrationError for a layout that cannot hold the content."""
    kind: Kind = "memory" if isinstance(content, MemoryCheckpoint) else "cpu"
    family = FAMILIES[kind]
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
    return NewestEncoder(CPU_FAMILY.inline[0].names[0], MEMORY_FAMILY.inline[0].names[0])


def _refuse_lossy(content: Content, layout: Layout) -> None:
    pods = getattr(content, "pod_entries", {})
    if pods and not layout.has("podEntries"):
        raise MigrationError(
            f"V{layout.version} has no pod entries: the pod-level assignments (bubbles) of pod"
            f"{'s' if len(pods) > 1 else ''} {', '.join(sorted(pods))} would be lost"
        )


def _sealed(layout: Layout, content: Content) -> GoValue:
    """`content` as `layout`'s struct with its checksum set (under the unversioned type name). The checksum
    covers the value a reader decodes from the written JSON: an empty field left out by `omitempty` reads
    back nil, which hashes unlike the empty value written."""
    struct = layout.struct()
    value = struct.decode(parse(struct.encode(_value(layout.fields, content, struct.go))), "", struct.fresh())
    checksum = struct_checksum(pointer(f"*{struct.go}", value))
    return with_field(value, "Checksum", scalar(CHECKSUM.go, str(checksum)))


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
    return {
        f.name: f.schema.value_of(value)
        for f, value in ((MACHINE_STATE, content.machine), (MEMORY_ENTRIES, content.entries),
                         (MEMORY_POD_ENTRIES, content.pod_entries))
    }


def _schema_of(f: Field) -> MapOf:
    assert isinstance(f.schema, MapOf)
    return f.schema
