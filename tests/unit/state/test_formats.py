"""Checkpoint layouts: round trips, the kubelet's reader rules, kubelet-written fixtures, typed corruption."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from podlevel.engine.cpuset import CPUSet
from podlevel.engine.memory_policy import MemoryBlock, MemoryTable, NUMANodeState
from podlevel.state.checksum import data_checksum
from podlevel.state.formats import (
    BAD_CHECKSUM,
    BAD_CONTENT,
    EMPTY,
    FUTURE_VERSION,
    NOT_JSON,
    TRUNCATED,
    UNKNOWN_KIND,
    CorruptCheckpoint,
    CPUCheckpoint,
    LegacyCPUCheckpoint,
    MemoryCheckpoint,
    MigrationError,
    decode,
    encode,
)
from support.builders import GI

FIXTURES = Path(__file__).parent / "checkpoints"
POD = "6f1f3a52-3c55-4f0e-9d1b-0a8c2e7f4b11"

CPU = CPUCheckpoint(
    "static",
    CPUSet.parse("0-1,8-15"),
    {
        POD: {"app": CPUSet.parse("2-3"), "sidecar": CPUSet.parse("4-5")},
        "other": {"main": CPUSet.parse("6-7")},
    },
    {POD: CPUSet.parse("2-5")},
)
CPU_NO_PODS = CPUCheckpoint(CPU.policy_name, CPU.default, CPU.entries)
LEGACY = LegacyCPUCheckpoint("static", CPUSet.parse("0-1,4-15"), {"cid-1": CPUSet.parse("2-3")})


def _node(n: int, reserved: int) -> NUMANodeState:
    tables = {
        "memory": MemoryTable(16 * GI, GI, 15 * GI, reserved, 15 * GI - reserved),
        "hugepages-2Mi": MemoryTable(0, 0, 0, 0, 0),
    }
    return NUMANodeState(1 if reserved else 0, tables, (n,))


MEMORY = MemoryCheckpoint(
    "Static",
    {0: _node(0, 2 * GI), 1: _node(1, 0)},
    {POD: {"app": (MemoryBlock((0,), "memory", GI),), "sidecar": (MemoryBlock((0,), "memory", GI),)}},
    {POD: (MemoryBlock((0,), "memory", 2 * GI),)},
)
MEMORY_NO_PODS = MemoryCheckpoint(MEMORY.policy_name, MEMORY.machine, MEMORY.entries)


def _tampered(data: bytes, **fields: object) -> bytes:
    obj = json.loads(data)
    obj.update(fields)
    return json.dumps(obj).encode()


@pytest.mark.parametrize(
    ("content", "version"),
    [
        (LEGACY, 1),
        (CPU_NO_PODS, 2),
        (CPU, 3),
        (CPU, 4),
        (CPU_NO_PODS, 4),
        (MEMORY_NO_PODS, 1),
        (MEMORY, 2),
        (MEMORY, 3),
    ],
)
def test_round_trip_every_layout(content: object, version: int) -> None:
    data = encode(content, version)  # type: ignore[arg-type]
    decoded = decode(data)
    assert (decoded.version, decoded.content, decoded.valid) == (version, content, True)
    assert encode(decoded.content, version) == data


def test_newest_layout_is_the_default_and_byte_stable() -> None:
    reordered = CPUCheckpoint(
        CPU.policy_name, CPU.default, dict(reversed(list(CPU.entries.items()))), dict(CPU.pod_entries)
    )
    assert encode(CPU) == encode(reordered) == encode(CPU, 4)
    assert decode(encode(MEMORY)).version == 3


def test_v4_layout_is_the_kubelets() -> None:
    obj = json.loads(encode(CPU))
    assert list(obj) == ["policyName", "defaultCpuSet", "entries", "checksum", "data", "dataChecksum"]
    assert obj["dataChecksum"] == data_checksum(obj["data"])
    assert json.loads(obj["data"])["podEntries"] == {POD: {"cpuSet": "2-5"}}
    # The inline part is a real V2 file: an older kubelet reads it as such.
    legacy = {k: obj[k] for k in ("policyName", "defaultCpuSet", "entries", "checksum")}
    older = decode(json.dumps(legacy))
    assert older.version == 2 and older.valid and older.content == CPU_NO_PODS


def test_memory_v3_inline_part_is_a_real_v1() -> None:
    obj = json.loads(encode(MEMORY))
    assert list(obj) == ["policyName", "machineState", "entries", "checksum", "data", "dataChecksum"]
    legacy = {k: v for k, v in obj.items() if k not in ("data", "dataChecksum")}
    older = decode(json.dumps(legacy))
    assert older.version == 1 and older.valid and older.content == MEMORY_NO_PODS


@pytest.mark.parametrize("fixture", sorted(p.name for p in FIXTURES.glob("*.json")))
def test_kubelet_fixtures_verify(fixture: str) -> None:
    decoded = decode((FIXTURES / fixture).read_bytes())
    assert decoded.valid, decoded.checks
    assert decoded.kind == fixture.split("-")[0]
    assert decoded.version == int(fixture.split("-")[1][1:])


@pytest.mark.parametrize("fixture", ["cpu-v4-kubelet-1.37.json", "memory-v3-kubelet-1.37.json"])
def test_the_newest_layouts_are_written_as_the_kubelet_wrote_them(fixture: str) -> None:
    """The writer of the newest layouts against the kubelet-shaped 1.37 fixtures, which predate it, byte for
    byte."""
    data = (FIXTURES / fixture).read_bytes().rstrip(b"\n")
    assert encode(decode(data).content) == data


def test_keys_match_case_insensitively() -> None:
    decoded = decode((FIXTURES / "cpu-v2-kubelet-test-key-case.json").read_bytes())
    assert decoded.content == CPUCheckpoint("none", CPUSet.parse("4-6"))


@pytest.mark.parametrize("checksum", [{"checksum": 0}, {}])
def test_checksum_zero_or_absent_accepted_for_cpu_v1_v2_and_memory_v1(checksum: dict[str, int]) -> None:
    for content, version in ((LEGACY, 1), (CPU_NO_PODS, 2), (MEMORY_NO_PODS, 1)):
        obj = json.loads(encode(content, version))
        del obj["checksum"]
        decoded = decode(json.dumps({**obj, **checksum}))
        assert (decoded.version, decoded.content, decoded.valid) == (version, content, True)
        assert "checksum 0" in decoded.checks[0].detail


def test_memory_v2_with_checksum_0_is_valid_read_as_v1_without_pod_entries_as_the_kubelet_reads_it() -> None:
    """The kubelet's "Restore checkpoint from v2 with zeroed checksum and with PodLevelResourceManagers
    disabled": V2 refuses checksum 0, V1 accepts it, and the pod entries are dropped."""
    decoded = decode(_tampered(encode(MEMORY, 2), checksum=0))
    assert decoded.version == 1
    assert decoded.content == MEMORY_NO_PODS  # a fresh decode: no pod entries carried over from the V2 try
    assert decoded.valid
    assert any("podEntries" in note and "dropped" in note for note in decoded.notes), decoded.notes


def test_cpu_v3_with_checksum_0_reads_as_v2_without_pod_entries() -> None:
    decoded = decode(_tampered(encode(CPU, 3), checksum=0))
    assert (decoded.version, decoded.content, decoded.valid) == (2, CPU_NO_PODS, False)


def test_v4_whose_data_fails_is_not_retried_as_older() -> None:
    data = _tampered(encode(CPU), dataChecksum=1)
    with pytest.raises(CorruptCheckpoint) as caught:
        decode(data)
    assert caught.value.reason == BAD_CHECKSUM and "V4 data checksum 1" in caught.value.detail
    # The inline V2 part is valid on its own, and still not used.
    assert decode(json.dumps({k: v for k, v in json.loads(data).items() if "data" not in k.lower()})).valid


def test_early_v4_with_checksum_named_checksum_is_corrupt() -> None:
    obj = json.loads(encode(CPU))
    early = {"data": obj["data"], "checksum": obj["dataChecksum"]}
    with pytest.raises(CorruptCheckpoint) as caught:
        decode(json.dumps(early))
    assert caught.value.reason == BAD_CHECKSUM and "early layout" in caught.value.detail


def test_v4_with_a_wrong_legacy_checksum_restores_but_fails_verification() -> None:
    decoded = decode(_tampered(encode(CPU), checksum=12345))
    assert decoded.version == 4 and decoded.content == CPU
    failed = [c for c in decoded.checks if not c.ok]
    assert [c.part for c in failed] == ["legacy part"]
    assert "1.37 kubelet restores" in failed[0].detail and "downgrade to 1.36" in failed[0].detail


@pytest.mark.parametrize(
    ("fixture", "says"),
    [
        ("cpu-v4-inline-v3-checksum-0.json", "checksum 0"),
        ("cpu-v4-inline-v3.json", "legacy V3 part"),
        ("cpu-v4-data-only.json", "absent"),
        ("cpu-v4-kubelet-1.37.json", "legacy V2 part"),
    ],
)
def test_v4_inline_part_variants(fixture: str, says: str) -> None:
    decoded = decode((FIXTURES / fixture).read_bytes())
    assert decoded.version == 4
    assert decoded.content == decode((FIXTURES / "cpu-v4-kubelet-1.37.json").read_bytes()).content
    assert says in decoded.checks[1].detail and decoded.valid


def test_legacy_part_that_disagrees_with_data_is_noted() -> None:
    v4 = json.loads(encode(CPU))
    v2 = json.loads(encode(CPUCheckpoint("static", CPUSet.parse("0-15")), 2))
    decoded = decode(json.dumps({**v2, "data": v4["data"], "dataChecksum": v4["dataChecksum"]}))
    assert decoded.valid and any("disagrees with data" in note for note in decoded.notes)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", EMPTY),
        (b"  \n", EMPTY),
        (b'{"policyName":"static","defaultCpuSet":"0-3","entr', TRUNCATED),
        (b'{"policyName":"static","defaultCpuSet":"0-', TRUNCATED),
        (b"policyName: static", NOT_JSON),
        (b"[1, 2]", NOT_JSON),
        (b'{"policyName":"static","defaultCpuSet":"0-3"} trailing', NOT_JSON),
        (b'{"policyName":"static","defaultCpuSet":"0-3","checksum":NaN}', NOT_JSON),
        (b'{"policyName":"static","defaultCpuSet":"0-3","checksum":7}', BAD_CHECKSUM),
        (b'{"policyName":"static","defaultCpuSet":"0-3","checksum":1.5}', BAD_CONTENT),
        (b'{"policyName":"static","defaultCpuSet":"0-3","checksum":-1}', BAD_CONTENT),
        (b'{"policyName":"static","defaultCpuSet":"3-0","checksum":0}', BAD_CONTENT),
        (b'{"policyName":"static","defaultCpuSet":"0-3","entries":{"p":{"c":7}}}', BAD_CONTENT),
        (b'{"policyName":"static","defaultCpuSet":"0-3","version":5,"checksum":9}', FUTURE_VERSION),
        (b'{"policyName":"weird","checksum":0}', UNKNOWN_KIND),
        (b'{"policyName":"Static","machineState":{"x":{}},"checksum":0}', BAD_CONTENT),
        (b'{"policyName":"Static","machineState":{"0":null},"checksum":0}', BAD_CONTENT),
    ],
)
def test_corrupt_files_are_typed(data: bytes, reason: str) -> None:
    with pytest.raises(CorruptCheckpoint) as caught:
        decode(data)
    assert caught.value.reason == reason, caught.value


def test_bad_checksum_names_the_layout_the_file_looks_like() -> None:
    with pytest.raises(CorruptCheckpoint) as caught:
        decode(_tampered(encode(CPU_NO_PODS, 2), checksum=7))
    assert caught.value.detail.startswith("as V2:")
    with pytest.raises(CorruptCheckpoint) as caught:
        decode(_tampered(encode(LEGACY, 1), checksum=7))
    assert caught.value.detail.startswith("as V1:")


def test_v1_migration_needs_every_container() -> None:
    migrated = LEGACY.migrate({"cid-1": (POD, "app"), "cid-unused": ("x", "y")})
    assert migrated == CPUCheckpoint("static", LEGACY.default, {POD: {"app": CPUSet.parse("2-3")}})
    with pytest.raises(MigrationError, match="cid-1"):
        LEGACY.migrate({})


def test_encoding_refuses_what_a_layout_cannot_hold() -> None:
    with pytest.raises(MigrationError, match=f"V2 has no pod entries.*{POD}"):
        encode(CPU, 2)
    with pytest.raises(MigrationError, match=f"V1 has no pod entries.*{POD}"):
        encode(MEMORY, 1)
    with pytest.raises(MigrationError, match="container ID"):
        encode(CPU_NO_PODS, 1)
    with pytest.raises(MigrationError, match="container ID"):
        encode(LEGACY, 4)
    with pytest.raises(MigrationError, match="versions 1 to 3"):
        encode(MEMORY, 4)


def test_strings_are_escaped_as_go_escapes_them() -> None:
    data = encode(CPUCheckpoint("static", CPUSet(), {"<pod&>": {"c": CPUSet([1])}}), 2)
    assert b"\\u003cpod\\u0026\\u003e" in data
    assert decode(data).valid


_cpus = st.builds(CPUSet, st.sets(st.integers(0, 127), max_size=8))
_names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=6)
_blocks = st.lists(
    st.builds(
        MemoryBlock,
        st.tuples(st.integers(0, 7)),
        st.sampled_from(["memory", "hugepages-2Mi"]),
        st.integers(0, 2**64 - 1),
    ),
    max_size=3,
).map(tuple)
_tables = st.builds(MemoryTable, *[st.integers(0, 2**64 - 1)] * 5)


@given(
    st.builds(
        CPUCheckpoint,
        st.sampled_from(["static", "none"]),
        _cpus,
        st.dictionaries(_names, st.dictionaries(_names, _cpus, max_size=3), max_size=3),
        st.dictionaries(_names, _cpus, max_size=3),
    )
)
def test_cpu_round_trip_property(content: CPUCheckpoint) -> None:
    for version in (3, 4):
        assert decode(encode(content, version)).content == content


@given(
    st.builds(
        MemoryCheckpoint,
        st.just("Static"),
        st.dictionaries(
            st.integers(0, 7),
            st.builds(
                NUMANodeState,
                st.integers(0, 9),
                st.dictionaries(_names, _tables, max_size=2),
                st.tuples(st.integers(0, 7)),
            ),
            max_size=3,
        ),
        st.dictionaries(_names, st.dictionaries(_names, _blocks, max_size=2), max_size=2),
        st.dictionaries(_names, _blocks, max_size=2),
    )
)
def test_memory_round_trip_property(content: MemoryCheckpoint) -> None:
    for version in (2, 3):
        decoded = decode(encode(content, version))
        assert decoded.valid and decoded.content == content
