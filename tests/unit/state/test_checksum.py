"""The kubelet's checkpoint checksum: FNV-1a-32 over go-spew's rendering, against the verified vectors."""

from __future__ import annotations

from pathlib import Path

import pytest

from podlevel.state import formats
from podlevel.state.checksum import data_checksum, fnv1a_32, pointer, render
from podlevel.state.gotypes import (
    CPU_ENTRIES,
    CPU_ENTRIES_V1,
    CPU_POD_ENTRIES,
    DEFAULT_CPU_SET,
    LEGACY_CHECKSUM,
    MACHINE_STATE,
    MEMORY_ENTRIES,
    POLICY,
    Field,
    checkpoint_struct,
    parse,
)

FIXTURES = Path(__file__).parent / "checkpoints"

# (spew rendering, checksum): the kubelet's own test expectations, recomputed.
VECTORS = [
    (
        "(*state.CPUManagerCheckpoint){PolicyName:(string)none DefaultCPUSet:(string)4-6 "
        "Entries:(map[string]map[string]string)map[] Checksum:(checksum.Checksum)0}",
        354655845,
    ),
    (
        "(*state.CPUManagerCheckpoint){PolicyName:(string)none DefaultCPUSet:(string)1-3 "
        "Entries:(map[string]map[string]string)map[pod:map[container1:4-6 container2:1-3]] "
        "Checksum:(checksum.Checksum)0}",
        3610638499,
    ),
    (
        "(*state.CPUManagerCheckpoint){PolicyName:(string)none DefaultCPUSet:(string)1-3 "
        "Entries:(map[string]string)map[] Checksum:(checksum.Checksum)0}",
        1694838852,
    ),
    (
        "(*state.CPUManagerCheckpointV3){PolicyName:(string)static DefaultCPUSet:(string)1-2 "
        "Entries:(map[string]map[string]string)map[pod1:map[container1:5-6 container2:3-4]] "
        "PodEntries:(state.PodCPUAssignments)map[pod2:{CPUSet:(cpuset.CPUSet){elems:(map[int]struct {})"
        "map[7:{} 8:{} 9:{}]}}] Checksum:(checksum.Checksum)0}",
        2284712151,
    ),
]


def test_fnv1a_32_reference_values() -> None:
    assert fnv1a_32(b"") == 0x811C9DC5
    assert fnv1a_32(b"a") == 0xE40C292C
    assert fnv1a_32(b"foobar") == 0xBF9CF968


@pytest.mark.parametrize(("rendering", "expected"), VECTORS)
def test_cpu_vectors(rendering: str, expected: int) -> None:
    assert fnv1a_32(rendering.encode()) == expected


def test_data_checksum_vector() -> None:
    assert data_checksum('{"policyName":"none","defaultCPUSet":"4-6"}') == 657950972


def _rendered(fields: tuple[Field, ...], type_name: str, text: str) -> str:
    struct = checkpoint_struct(fields, type_name)
    return render(pointer(f"*state.{type_name}", struct.decode(parse(text), "", struct.fresh())))


def test_decoded_files_render_as_go_does() -> None:
    v2 = (POLICY, DEFAULT_CPU_SET, CPU_ENTRIES, LEGACY_CHECKSUM)
    assert (
        _rendered(v2, "CPUManagerCheckpoint", '{"policyName":"none","defaultCPUSet":"4-6"}') == VECTORS[0][0]
    )
    assert (
        _rendered(
            v2,
            "CPUManagerCheckpoint",
            '{"policyName":"none","defaultCpuSet":"1-3","entries":{"pod":{"container2":"1-3","container1":"4-6"}}}',
        )
        == VECTORS[1][0]
    )
    v1 = (POLICY, DEFAULT_CPU_SET, CPU_ENTRIES_V1, LEGACY_CHECKSUM)
    assert (
        _rendered(v1, "CPUManagerCheckpoint", '{"policyName":"none","defaultCpuSet":"1-3"}') == VECTORS[2][0]
    )
    v3 = (POLICY, DEFAULT_CPU_SET, CPU_ENTRIES, CPU_POD_ENTRIES, LEGACY_CHECKSUM)
    text = (FIXTURES / "cpu-v3-kubelet-1.36-test-vector.json").read_text().replace("2284712151", "0")
    # The pod entry's set renders as the set it is, however the file spells it.
    assert _rendered(v3, "CPUManagerCheckpointV3", text.replace('"7-9"', '"9,7,8"')) == VECTORS[3][0]


def test_nil_map_renders_unlike_an_empty_one() -> None:
    v2 = (POLICY, DEFAULT_CPU_SET, CPU_ENTRIES, LEGACY_CHECKSUM)
    absent = _rendered(v2, "CPUManagerCheckpoint", '{"policyName":"none","defaultCpuSet":"4-6"}')
    null = _rendered(v2, "CPUManagerCheckpoint", '{"policyName":"none","defaultCpuSet":"4-6","entries":null}')
    assert "map[string]map[string]string)map[]" in absent
    assert "map[string]map[string]string)<nil>" in null


def test_memory_vector_from_a_real_kubelet_file() -> None:
    """The memory_manager_state quoted in kubernetes issue #128669 (kubelet 1.29), checksum 2552710201."""
    data = (FIXTURES / "memory-v1-issue-128669.json").read_bytes().strip()
    text = data.decode().replace("2552710201", "0")
    rendering = _rendered(
        (POLICY, MACHINE_STATE, MEMORY_ENTRIES, LEGACY_CHECKSUM), "MemoryManagerCheckpoint", text
    )
    assert rendering.startswith(
        "(*state.MemoryManagerCheckpoint){PolicyName:(string)Static MachineState:(state.NUMANodeMap)map[0:<*>"
        "{NumberOfAssignments:(int)0 MemoryMap:(map[v1.ResourceName]*state.MemoryTable)map[hugepages-1Gi:<*>"
        "{TotalMemSize:(uint64)10737418240 SystemReserved:(uint64)0 Allocatable:(uint64)10737418240 "
        "Reserved:(uint64)0 Free:(uint64)10737418240} hugepages-2Mi:<*>{"
    )
    assert rendering.endswith(
        "Cells:([]int)[1]}] Entries:(state.ContainerMemoryAssignments)map[] Checksum:(checksum.Checksum)0}"
    )
    assert fnv1a_32(rendering.encode()) == 2552710201
    decoded = formats.decode(data)
    assert (decoded.kind, decoded.version, decoded.valid) == ("memory", 1, True)
    # Written back in its own layout, the file is byte for byte what the kubelet wrote.
    assert formats.encode(decoded.content, 1) == data


def test_v3_checksum_under_both_type_names() -> None:
    versioned = formats.decode((FIXTURES / "cpu-v3-kubelet-1.36-test-vector.json").read_bytes())
    assert versioned.version == 3 and versioned.valid
    assert "state.CPUManagerCheckpointV3" in versioned.checks[0].detail
    plain = formats.decode(formats.encode(versioned.content, 3))
    assert plain.version == 3 and "state.CPUManagerCheckpoint)" in plain.checks[0].detail
