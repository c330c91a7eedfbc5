"""state.engine_state: the engine's allocations as checkpoint content and back, through the files' bytes."""

from __future__ import annotations

from podlevel.state.engine_state import checkpoints_of, node_state, recorded_cpus
from podlevel.state.formats import CPUCheckpoint, MemoryCheckpoint, decode, encode
from support.builders import fast_path, new_engine


def test_a_node_survives_its_checkpoints_byte_for_byte() -> None:
    """Admitted pods written as the kubelet's two files and read back give the node they came from."""
    engine = new_engine()
    state = engine.initial_state()
    pods = [fast_path("first", 4, 2), fast_path("second", 2, 1)]
    for pod in pods:
        state, _ = engine.admit(state, pod)
    cpu, memory = checkpoints_of(engine, state)
    read_cpu, read_memory = decode(encode(cpu)).content, decode(encode(memory)).content
    assert isinstance(read_cpu, CPUCheckpoint) and isinstance(read_memory, MemoryCheckpoint)

    again = node_state(read_cpu, read_memory, {pod.uid: pod for pod in pods})

    assert again == state
    assert recorded_cpus(read_cpu) == state.cpu
    assert set(read_cpu.pod_entries) == {pod.uid for pod in pods}, "each bubble is a pod entry"


def test_the_policy_names_are_the_configured_ones() -> None:
    engine = new_engine()
    cpu, memory = checkpoints_of(engine, engine.initial_state())
    assert (cpu.policy_name, memory.policy_name) == (engine.config.cpu_policy, engine.config.memory_policy)
    assert cpu.entries == {} and cpu.pod_entries == {} and cpu.default == engine.topology.all_cpus
