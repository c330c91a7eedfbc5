"""The kubelet's `none` CPU policy and `None` memory policy, as null objects (its `policy_none.go`).

They have the static policies' methods and do nothing in them: no hints, no reserved CPUs, no NUMA nodes;
allocating and removing return the state they were given, and a restored pod's memory is not taken back.
The engine calls its two policies without asking whether one is switched off, and a pod allocates nothing
from a manager that is.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Final, Generic, TypeVar

from podlevel.engine.cpu_policy import CPUState
from podlevel.engine.cpuset import EMPTY, CPUSet
from podlevel.engine.memory_policy import MemoryState
from podlevel.engine.pod import Container, Pod
from podlevel.engine.topology import Topology
from podlevel.engine.topology_manager import TopologyHint

State = TypeVar("State")

_NO_MACHINE: Final = MemoryState(MappingProxyType({}))


class NonePolicy(Generic[State]):
    """What both managers' none policies do alike."""

    def empty_shared_pool(self, pod: Pod) -> str | None:
        return None

    def container_hints(self, state: State, pod: Pod, container: Container) -> None:
        return None

    def pod_hints(self, state: State, pod: Pod) -> None:
        return None

    def allocate(self, state: State, pod: Pod, container: Container, hint: TopologyHint) -> State:
        return state

    def allocate_pod(self, state: State, pod: Pod, hint: TopologyHint) -> State:
        return state

    def remove_container(self, state: State, pod_uid: str, container_name: str) -> State:
        return state


class NoneCPUPolicy(NonePolicy[CPUState]):
    """No exclusive CPUs: every container runs on every CPU."""

    reserved: CPUSet = EMPTY

    def __init__(self, topology: Topology) -> None:
        self._initial = CPUState(default=topology.all_cpus)

    def initial_state(self) -> CPUState:
        return self._initial

    def guaranteed_cpus(self, pod: Pod, container: Container) -> int:
        return 0


class NoneMemoryPolicy(NonePolicy[MemoryState]):
    """No NUMA accounting: every container may use every node's memory."""

    def initial_state(self) -> MemoryState:
        return _NO_MACHINE

    def mems_of(self, state: MemoryState, pod_uid: str, container_name: str) -> tuple[int, ...] | None:
        return None
