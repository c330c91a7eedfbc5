"""The engine's allocations as checkpoint content, and back: the kubelet keys both the same way.

The CPU checkpoint is the static policy's state as it stands (`defaultCpuSet` = the node shared pool,
`entries` = exclusive CPUs by pod UID and container name, `podEntries` = bubbles); the memory checkpoint is
the Static policy's machine state, container blocks and pod blocks. Policy names are the configured ones, as
the kubelet writes them. What the kubelet does not checkpoint (the CPUs and memory of finished init
containers a pod's later containers reuse) is not written either.
"""

from __future__ import annotations

from collections.abc import Mapping

from podlevel.engine.cpu_policy import CPUState
from podlevel.engine.manager import Engine, NodeState
from podlevel.engine.memory_policy import MemoryState
from podlevel.engine.pod import Pod
from podlevel.state.formats import CPUCheckpoint, MemoryCheckpoint


def checkpoints_of(engine: Engine, state: NodeState) -> tuple[CPUCheckpoint, MemoryCheckpoint]:
    config = engine.config
    cpu = CPUCheckpoint(config.cpu_policy, state.cpu.default, state.cpu.entries, state.cpu.pod_entries)
    memory = MemoryCheckpoint(
        config.memory_policy, state.memory.machine, state.memory.entries, state.memory.pod_entries
    )
    return cpu, memory


def recorded_cpus(checkpoint: CPUCheckpoint) -> CPUState:
    """The CPU state a checkpoint recorded, for `Placement` to take running pods back onto."""
    return CPUState(checkpoint.default, checkpoint.entries, checkpoint.pod_entries)


def recorded_memory(checkpoint: MemoryCheckpoint) -> MemoryState:
    """The memory state a checkpoint recorded (its init containers' reusable memory is not checkpointed)."""
    return MemoryState(checkpoint.machine, checkpoint.entries, checkpoint.pod_entries)


def node_state(cpu: CPUCheckpoint, memory: MemoryCheckpoint, pods: Mapping[str, Pod]) -> NodeState:
    """The engine state two checkpoints recorded, with the admitted pods (by uid) they hold: the inverse of
    `checkpoints_of`, for simulating on a node as it is."""
    return NodeState(recorded_cpus(cpu), recorded_memory(memory), dict(pods))
