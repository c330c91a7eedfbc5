"""The node engine: admits pods with the kubelet's topology, CPU and memory managers and says where each
container runs. `run` and `simulate` drive this same object.

Paths (KEP-5526 §4.1):
- scope `pod`, pod-level resources set: one Topology Manager merge over the providers' pod hints, then
  `allocate_pod` on the CPU and memory policies: a NUMA-aligned bubble, exclusive slices for
  equivalent-Guaranteed containers, the pod shared pool for the rest.
- scope `pod`, no pod-level resources: the kubelet's classic pod scope, one merge over the containers'
  aggregate, then `allocate` per container with that hint.
- scope `container`: per container (init, then app) hints, merge, admit, allocate. With pod-level resources
  set this is the hybrid model: equivalent-Guaranteed containers get exclusive CPUs from the node, the others
  stay in the node shared pool.

Refusals are typed as the kubelet types them: TopologyAffinityError (with a "Pod Scope " prefix on the
pod-level path), SMTAlignmentError, EmptyPodSharedPoolError, UnexpectedAdmissionError. Their messages carry
the numbers asked for and what each NUMA node has free. One deliberate difference: a pod that breaks the
empty-shared-pool rule is refused with EmptyPodSharedPoolError under every topology policy. Under
`restricted` and `single-numa-node` the kubelet reports it as a locality error instead, because its hint
providers answer such a pod with no hint.

CFS quota (§4.6):
- exclusive CPUs: -1, no limit;
- the pod shared pool: the pod CPU limit minus the exclusive slices running beside the container;
- the node shared pool: None, which leaves the runtime's value alone.

Invariants:
- every operation returns a new `NodeState` or raises, so a refused pod leaves the state as it was; the new
  state shares the per-pod tables it does not change with the old one (`shared_map`);
- admitting a pod that is already admitted returns the state unchanged;
- `pods` holds exactly the pods with at least one container not yet removed;
- a bubble goes back to the node only when the pod's last container is removed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import partial
from types import MappingProxyType
from typing import Final, Literal

from podlevel.engine.cfs import CFS_PERIOD_US, UNLIMITED_QUOTA, milli_cpu_to_quota
from podlevel.engine.cpu_policy import CPUManagerOptions, CPUState, StaticCPUPolicy
from podlevel.engine.cpuset import EMPTY, CPUSet
from podlevel.engine.errors import EmptyPodSharedPoolError, TopologyAffinityError
from podlevel.engine.memory_policy import MemoryState, StaticMemoryPolicy, container_requests
from podlevel.engine.pod import CPU, MEMORY, Container, ContainerKind, Pod, is_memory_resource
from podlevel.engine.policy_none import NoneCPUPolicy, NoneMemoryPolicy
from podlevel.engine.quantity import format_amount, format_bytes
from podlevel.engine.shared_map import SharedMap, with_item, without_item
from podlevel.engine.topology import Topology
from podlevel.engine.topology_manager import (
    Alignment,
    ProviderHints,
    Scope,
    TopologyHint,
    TopologyManager,
    TopologyManagerOptions,
    TopologyPolicyName,
)

TOPOLOGY_LOCALITY: Final = "Resources cannot be allocated with Topology locality"
POD_SCOPE_PREFIX: Final = "Pod Scope "

_NO_PREFERENCE: Final = TopologyHint(None, False)
"""What the kubelet's `none` topology policy hands the providers (an empty hint)."""

CPUPolicyName = Literal["static", "none"]
MemoryPolicyName = Literal["Static", "None"]


class AdmissionPath(StrEnum):
    """Which of the three admission paths (see the module docstring) a pod takes."""

    POD_LEVEL = "pod-level resources"
    POD_SCOPE = "pod scope"
    CONTAINER_SCOPE = "container scope"


class Assignment(StrEnum):
    """Where a container's CPUs come from; the values are the kubelet's `assignment_type` metric labels."""

    POD_EXCLUSIVE = "pod_exclusive"
    POD_SHARED = "pod_shared"
    NODE_EXCLUSIVE = "node_exclusive"
    NODE_SHARED = "node_shared"

    @property
    def exclusive(self) -> bool:
        """The container's CPUs are its own: a slice of its pod's bubble, or taken from the node."""
        return self in (Assignment.POD_EXCLUSIVE, Assignment.NODE_EXCLUSIVE)


@dataclass(frozen=True, slots=True)
class EngineConfig:
    scope: Scope = Scope.POD
    topology_policy: TopologyPolicyName = TopologyPolicyName.SINGLE_NUMA_NODE
    topology_options: TopologyManagerOptions = field(default_factory=TopologyManagerOptions)
    cpu_options: CPUManagerOptions = field(default_factory=CPUManagerOptions)
    reserved_cpus: CPUSet = EMPTY
    reserved_memory: Mapping[int, Mapping[str, int]] = field(default_factory=lambda: MappingProxyType({}))
    """NUMA node -> resource name -> bytes, as the kubelet's `reservedMemory`."""
    cpu_policy: CPUPolicyName = "static"
    memory_policy: MemoryPolicyName = "Static"
    cpu_period_us: int = CFS_PERIOD_US


@dataclass(frozen=True, slots=True)
class ContainerDecision:
    name: str
    kind: ContainerKind
    assignment: Assignment
    cpus: CPUSet
    mems: tuple[int, ...]
    cpu_quota_us: int | None
    """-1 for exclusive CPUs; the leftover pod budget for the pod shared pool; None leaves the quota alone."""
    cpu_period_us: int
    memory_own: bool = False
    """The container's memory blocks are its own: in a pod-level pod, it requests memory of its own (the
    rest share the pod's budget); elsewhere, the memory manager pinned blocks for it."""


@dataclass(frozen=True, slots=True)
class PodDecision:
    pod: Pod
    bubble_cpus: CPUSet | None
    bubble_mems: tuple[int, ...] | None
    containers: tuple[ContainerDecision, ...]
    """The pod's containers that are not removed, init containers first, in declaration order."""


@dataclass(frozen=True, slots=True)
class NumaFree:
    """What one NUMA node has left for admissions: CPUs (reserved ones excluded) and memory by resource."""

    node: int
    cpus: CPUSet
    memory: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class NodeState:
    cpu: CPUState
    memory: MemoryState
    pods: Mapping[str, Pod]
    """Admitted pods by uid."""
    removed: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """pod uid -> names of its containers already removed, for pods that still have others."""

    def live_containers(self, pod_uid: str) -> tuple[Container, ...]:
        """The pod's containers not yet removed, in declaration order (init containers first)."""
        pod = self.pods.get(pod_uid)
        if pod is None:
            return ()
        gone = self.removed.get(pod_uid)
        return pod.all_containers if not gone else tuple(c for c in pod.all_containers if c.name not in gone)


class Engine:
    """Stateless apart from its configuration: every method takes a `NodeState` and returns a new one."""

    def __init__(self, topology: Topology, config: EngineConfig | None = None) -> None:
        self.topology = topology
        self.config = config or EngineConfig()
        self._tm = TopologyManager(topology, self.config.topology_policy, self.config.topology_options)
        self._cpu: StaticCPUPolicy | NoneCPUPolicy = (
            StaticCPUPolicy(topology, self.config.reserved_cpus, self.config.cpu_options)
            if self.config.cpu_policy == "static"
            else NoneCPUPolicy(topology)
        )
        self._memory: StaticMemoryPolicy | NoneMemoryPolicy = (
            StaticMemoryPolicy(topology, self.config.reserved_memory)
            if self.config.memory_policy == "Static"
            else NoneMemoryPolicy()
        )
        self._all_mems = topology.numa_node_ids

    @property
    def reserved_cpus(self) -> CPUSet:
        return self._cpu.reserved

    @property
    def memory_policy(self) -> StaticMemoryPolicy | None:
        """The memory manager's Static policy; None under the policy None (for `restore`)."""
        return self._memory if isinstance(self._memory, StaticMemoryPolicy) else None

    def initial_state(self) -> NodeState:
        return NodeState(cpu=self._cpu.initial_state(), memory=self._memory.initial_state(), pods=SharedMap())

    # -- admission ---------------------------------------------------------------------------------------

    def admission_path(self, pod: Pod) -> AdmissionPath:
        if self.config.scope is Scope.CONTAINER:
            return AdmissionPath.CONTAINER_SCOPE
        return AdmissionPath.POD_LEVEL if pod.resources is not None else AdmissionPath.POD_SCOPE

    def admit(
        self,
        state: NodeState,
        pod: Pod,
        *,
        within: CPUSet | None = None,
        trace: list[Alignment] | None = None,
    ) -> tuple[NodeState, PodDecision]:
        """Admit `pod` or raise AdmissionError; the returned state holds its allocations.

        `within` confines the CPUs the pod may be given (its bubble, its exclusive containers) to a set, by
        the same rules: an agent that restarts without its state re-adopts the CPUs the runtime already
        runs the pod on. A pod that does not fit there is refused, and the caller decides what next.
        `trace`, when given, receives every merge admission makes, in order (`explain.explain`).
        """
        if pod.uid in state.pods:
            return state, self.decision(state, pod.uid)
        view = state
        if within is not None:
            confined = state.cpu.default & (within | self.reserved_cpus)
            view = replace(state, cpu=replace(state.cpu, default=confined))
        path = self.admission_path(pod)
        if path is AdmissionPath.CONTAINER_SCOPE:
            cpu, memory = self._admit_per_container(view, pod, trace)
        elif path is AdmissionPath.POD_LEVEL:
            cpu, memory = self._admit_pod_level(view, pod, trace)
        else:
            cpu, memory = self._admit_classic_pod_scope(view, pod, trace)
        if within is not None:
            # Admission only takes from the shared pool: what left the confined view leaves the real one.
            cpu = replace(cpu, default=state.cpu.default - (view.cpu.default - cpu.default))
        new = NodeState(
            cpu=cpu, memory=memory, pods=with_item(state.pods, pod.uid, pod), removed=state.removed
        )
        return new, self.decision(new, pod.uid)

    def _admit_pod_level(
        self, state: NodeState, pod: Pod, trace: list[Alignment] | None
    ) -> tuple[CPUState, MemoryState]:
        """KEP-5526 §4.3/§4.4: one merge over the pod budget, then each provider's AllocatePod."""
        hint = _NO_PREFERENCE
        if self.config.topology_policy is not TopologyPolicyName.NONE:
            providers = [self._cpu.pod_hints(state.cpu, pod), self._memory.pod_hints(state.memory, pod)]
            best, admit = self._tm.merge(providers)
            if trace is not None:
                trace.append(Alignment(None, _pod_budget(pod), tuple(providers), best, admit))
            if not admit:
                self._raise_empty_shared_pool(pod, providers)
                raise TopologyAffinityError(
                    POD_SCOPE_PREFIX + self._locality_message(state, _pod_budget(pod))
                )
            hint = best
        cpu_state = self._cpu.allocate_pod(state.cpu, pod, hint)
        return cpu_state, self._memory.allocate_pod(state.memory, pod, hint)

    def _raise_empty_shared_pool(self, pod: Pod, providers: Sequence[ProviderHints]) -> None:
        """Name the empty-shared-pool rule when it is why a provider had no hint (KEP-5526 §4.2).

        A provider answers a pod that breaks the rule with an empty hint list. The merge then reports a
        locality failure, but operators should see the rule they broke. So each provider that gave an empty
        list is asked whether the pod breaks the rule, with the same check its AllocatePod makes. CPU is asked
        first, in the order admission allocates.
        """
        for resource, policy, hints in zip((CPU, MEMORY), (self._cpu, self._memory), providers, strict=True):
            violation = policy.empty_shared_pool(pod) if _has_impossible(hints) else None
            if violation is not None:
                raise EmptyPodSharedPoolError.of(pod.key, violation, resource)

    def _admit_classic_pod_scope(
        self, state: NodeState, pod: Pod, trace: list[Alignment] | None
    ) -> tuple[CPUState, MemoryState]:
        """The kubelet's pod scope for a pod without a budget: one hint for all, Allocate per container."""
        cpu, memory = self._cpu, self._memory
        providers = [cpu.pod_hints(state.cpu, pod), memory.pod_hints(state.memory, pod)]
        hint = self._merged(providers, state, partial(_aggregate, pod), None, trace)
        cpu_state, memory_state = state.cpu, state.memory
        for container in pod.all_containers:
            cpu_state = cpu.allocate(cpu_state, pod, container, hint)
            memory_state = memory.allocate(memory_state, pod, container, hint)
        return cpu_state, memory_state

    def _admit_per_container(
        self, state: NodeState, pod: Pod, trace: list[Alignment] | None
    ) -> tuple[CPUState, MemoryState]:
        """Container scope: each container is aligned and allocated on the state its predecessors left."""
        cpu, memory = self._cpu, self._memory
        cpu_state, memory_state = state.cpu, state.memory
        for container in pod.all_containers:
            providers = [
                cpu.container_hints(cpu_state, pod, container),
                memory.container_hints(memory_state, pod, container),
            ]
            hint = self._merged(
                providers,
                NodeState(cpu_state, memory_state, state.pods, state.removed),
                partial(_requests, container),
                container.name,
                trace,
            )
            cpu_state = cpu.allocate(cpu_state, pod, container, hint)
            memory_state = memory.allocate(memory_state, pod, container, hint)
        return cpu_state, memory_state

    def _merged(
        self,
        providers: Sequence[ProviderHints],
        state: NodeState,
        requested: Callable[[], Mapping[str, int]],
        container: str | None,
        trace: list[Alignment] | None,
    ) -> TopologyHint:
        if self.config.topology_policy is TopologyPolicyName.NONE:
            return _NO_PREFERENCE
        best, admit = self._tm.merge(providers)
        if trace is not None:
            trace.append(Alignment(container, requested(), tuple(providers), best, admit))
        if not admit:
            raise TopologyAffinityError(self._locality_message(state, requested()))
        return best

    def _locality_message(self, state: NodeState, requested: Mapping[str, int]) -> str:
        """The kubelet's message plus the numbers an operator needs: what was asked, what each node has."""
        asked = ", ".join(f"{name}={format_amount(name, n)}" for name, n in sorted(requested.items()))
        nodes: list[str] = []
        for numa in self.free_per_numa(state):
            memory = [f"{name}={format_bytes(n)}" for name, n in numa.memory.items() if name in requested]
            free = [f"cpu={len(numa.cpus)}", *memory]
            nodes.append(f"node {numa.node}: {', '.join(free)}")
        return f"{TOPOLOGY_LOCALITY}: requested {asked or 'nothing'}; free per NUMA node: {'; '.join(nodes)}"

    # -- removal -----------------------------------------------------------------------------------------

    def remove_container(self, state: NodeState, pod_uid: str, name: str) -> NodeState:
        """Release what the container holds; the pod's bubble goes back once its last container is gone.

        Removing a container the engine does not know (already removed, never admitted) changes nothing, so
        replayed runtime events are harmless.
        """
        live = state.live_containers(pod_uid)
        if not any(c.name == name for c in live):
            return state
        return self._release(state, pod_uid, len(live), (name,))

    def container_added(self, state: NodeState, pod_uid: str, name: str) -> NodeState:
        """The memory manager's `AddContainer` as a container of an admitted pod starts: every standard init
        container declared before it has run to completion, so its memory entry is forgotten (its blocks
        released for other pods, unless the pod holds pod-level memory, which stays the pod's). Their CPU
        entries stay, as the CPU manager keeps them. Unknown pods and repeated calls change nothing."""
        pod = state.pods.get(pod_uid)
        if pod is None:
            return state
        memory = state.memory
        for container in pod.init_containers:
            if container.name == name:
                break
            if container.kind is ContainerKind.INIT and container.name in memory.entries.get(pod_uid, {}):
                memory = self._memory.remove_container(memory, pod_uid, container.name)
        if memory is state.memory:
            return state
        return NodeState(state.cpu, memory, state.pods, state.removed)

    def remove_pod(self, state: NodeState, pod_uid: str) -> NodeState:
        """Release every container of the pod that is still there (and with the last one, the bubble)."""
        live = state.live_containers(pod_uid)
        if not live:
            return state
        return self._release(state, pod_uid, len(live), [c.name for c in live])

    def _release(self, state: NodeState, pod_uid: str, live: int, names: Sequence[str]) -> NodeState:
        """Remove `names`, `live` being how many of the pod's containers are still there."""
        cpu, memory = state.cpu, state.memory
        for name in names:
            cpu = self._cpu.remove_container(cpu, pod_uid, name)
            memory = self._memory.remove_container(memory, pod_uid, name)
        if live > len(names):
            gone = state.removed.get(pod_uid, frozenset()).union(names)
            return NodeState(cpu, memory, state.pods, with_item(state.removed, pod_uid, gone))
        removed = without_item(state.removed, pod_uid) if pod_uid in state.removed else state.removed
        return NodeState(cpu, memory, without_item(state.pods, pod_uid), removed)

    # -- views -------------------------------------------------------------------------------------------

    def free_per_numa(self, state: NodeState) -> tuple[NumaFree, ...]:
        """What each NUMA node has left for admissions (memory resources in name order)."""
        available = state.cpu.default - self.reserved_cpus
        free: list[NumaFree] = []
        for node in self.topology.numa_node_ids:
            numa_state = state.memory.machine.get(node)
            tables = sorted(numa_state.memory_map.items()) if numa_state is not None else []
            cpus = available & self.topology.cpus_by_numa[node]
            free.append(NumaFree(node, cpus, {name: table.free for name, table in tables}))
        return tuple(free)

    def node_shared_pool(self, state: NodeState) -> CPUSet:
        """Where containers without exclusive CPUs run: the kubelet's default set (reserved CPUs included
        unless strict-cpu-reservation took them out)."""
        return state.cpu.default

    def decision(self, state: NodeState, pod_uid: str) -> PodDecision:
        """The current placement of an admitted pod; shared pools reflect everything admitted since."""
        pod = state.pods.get(pod_uid)
        if pod is None:
            raise KeyError(f"pod {pod_uid} is not admitted")
        bubble = state.cpu.pod_entries.get(pod_uid)
        bubble_mems = self._bubble_mems(state, pod_uid)
        entries = state.cpu.entries.get(pod_uid, {})
        shared_pool = self.node_shared_pool(state)
        pod_level_memory = pod_uid in state.memory.pod_entries
        exclusive: Mapping[str, int] = {}
        if bubble is not None:
            exclusive = {c.name: self._cpu.guaranteed_cpus(pod, c) for c in pod.all_containers}
        containers: list[ContainerDecision] = []
        for container in state.live_containers(pod_uid):
            quota: int | None = None
            if bubble is not None:
                cpus = entries.get(container.name, bubble)
                if exclusive.get(container.name, 0) > 0:
                    assignment, quota = Assignment.POD_EXCLUSIVE, UNLIMITED_QUOTA
                else:
                    assignment = Assignment.POD_SHARED
                    quota = self._pod_shared_quota(pod, container, exclusive)
            elif container.name in entries:
                cpus, assignment, quota = entries[container.name], Assignment.NODE_EXCLUSIVE, UNLIMITED_QUOTA
            else:
                cpus, assignment = shared_pool, Assignment.NODE_SHARED
            mems = self._memory.mems_of(state.memory, pod_uid, container.name)
            containers.append(
                ContainerDecision(
                    name=container.name,
                    kind=container.kind,
                    assignment=assignment,
                    cpus=cpus,
                    mems=tuple(sorted(mems)) if mems else self._all_mems,
                    cpu_quota_us=quota,
                    cpu_period_us=self.config.cpu_period_us,
                    memory_own=(bool(container_requests(pod, container)) if pod_level_memory
                                else bool(state.memory.blocks(pod_uid, container.name))),
                )
            )
        return PodDecision(pod=pod, bubble_cpus=bubble, bubble_mems=bubble_mems, containers=tuple(containers))

    def _bubble_mems(self, state: NodeState, pod_uid: str) -> tuple[int, ...] | None:
        blocks = state.memory.pod_entries.get(pod_uid)
        if not blocks:
            return None
        return tuple(sorted({node for block in blocks for node in block.numa_affinity}))

    def _pod_shared_quota(self, pod: Pod, container: Container, exclusive: Mapping[str, int]) -> int | None:
        """§4.6: the pod CPU limit minus the exclusive slices running beside this container, as CFS quota.

        The slices beside it are those of the last phase it runs in: its own phase for a standard init
        container, the pod's last phase for a sidecar or an app container.
        """
        assert pod.resources is not None
        limit = pod.resources.limits.get(CPU, pod.resources.request(CPU))
        if limit == 0:
            return None
        last = [phase for phase in pod.phases() if container.name in (c.name for c in phase.containers)][-1]
        beside = sum(exclusive.get(c.name, 0) for c in last.containers)
        leftover_millis = limit - 1000 * beside
        return milli_cpu_to_quota(max(1, leftover_millis), self.config.cpu_period_us)


def _has_impossible(hints: ProviderHints) -> bool:
    return hints is not None and any(h is not None and not h for h in hints.values())


def _pod_budget(pod: Pod) -> Mapping[str, int]:
    assert pod.resources is not None
    names = pod.resources.requests.keys() | pod.resources.limits.keys()
    return {name: pod.resources.request(name) for name in names if name == CPU or is_memory_resource(name)}


def _aggregate(pod: Pod) -> Mapping[str, int]:
    names = {name for c in pod.all_containers for name in (*c.resources.requests, *c.resources.limits)}
    return {name: pod.aggregate_request(name) for name in names}


def _requests(container: Container) -> Mapping[str, int]:
    names = container.resources.requests.keys() | container.resources.limits.keys()
    return {name: container.resources.request(name) for name in names}
