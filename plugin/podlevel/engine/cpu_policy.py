"""The kubelet's `static` CPU manager policy, with KEP-5526 pod-level allocation, over immutable states.

The sets it keeps (named as the kubelet's static policy names them):
- SHARED, `CPUState.default`: every CPU at first (minus RESERVED with strict-cpu-reservation); it shrinks
  and grows as exclusive sets come and go. BestEffort, Burstable and non-integer Guaranteed containers,
  and every container without an entry, run here.
- RESERVED, `StaticCPUPolicy.reserved`: given explicitly, fixed for the policy's life, never exclusive.
  `reserved_physical` adds their SMT siblings; only the full-pcpus-only availability check uses it.
- ASSIGNABLE, SHARED - RESERVED: where exclusive CPUs and pod bubbles come from.
- EXCLUSIVE, `entries[pod][container]`, and KEP-5526 pod bubbles, `pod_entries[pod]`.

Invariants:
- SHARED, the bubbles and the entries of pods without a bubble are pairwise disjoint between pods, and
  together they are every CPU (every CPU but RESERVED with strict-cpu-reservation). Entries of one pod
  may overlap: init-container CPUs are reused, pod-shared-pool containers share one set.
- Every entry of a pod with a bubble lies inside its bubble; the bubble returns to SHARED only when the
  pod's last entry goes.
- `reusable` (the kubelet's cpusToReuse) holds CPUs for at most one pod, the one allocated last.
- Every operation returns a new `CPUState` or raises, leaving its input untouched; states share the
  sub-maps they do not change.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Final

from podlevel.engine.bitmask import subset_sums
from podlevel.engine.cpu_assignment import AllocationFailed, CPULayout
from podlevel.engine.cpuset import EMPTY, CPUSet
from podlevel.engine.errors import (
    EmptyPodSharedPoolError,
    InputError,
    SMTAlignmentError,
    UnexpectedAdmissionError,
)
from podlevel.engine.option_values import parse_go_bool
from podlevel.engine.pod import CPU, Container, ContainerKind, Pod, QOSClass
from podlevel.engine.shared_map import with_item, without_item
from podlevel.engine.shared_pool import Amounts, empty_shared_pool_violation, partition
from podlevel.engine.topology import Topology
from podlevel.engine.topology_manager import TopologyHint, TopologyPolicyName

FULL_PCPUS_ONLY: Final = "full-pcpus-only"
DISTRIBUTE_CPUS_ACROSS_NUMA: Final = "distribute-cpus-across-numa"
ALIGN_BY_SOCKET: Final = "align-by-socket"
DISTRIBUTE_CPUS_ACROSS_CORES: Final = "distribute-cpus-across-cores"
STRICT_CPU_RESERVATION: Final = "strict-cpu-reservation"
PREFER_ALIGN_CPUS_BY_UNCORECACHE: Final = "prefer-align-cpus-by-uncorecache"

_OPTION_RULE: Final = "cpu manager policy options"
_OPTION_FIELDS: Final = MappingProxyType(
    {
        FULL_PCPUS_ONLY: "full_pcpus_only",
        DISTRIBUTE_CPUS_ACROSS_NUMA: "distribute_cpus_across_numa",
        ALIGN_BY_SOCKET: "align_by_socket",
        DISTRIBUTE_CPUS_ACROSS_CORES: "distribute_cpus_across_cores",
        STRICT_CPU_RESERVATION: "strict_cpu_reservation",
        PREFER_ALIGN_CPUS_BY_UNCORECACHE: "prefer_align_cpus_by_uncorecache",
    }
)
_INCOMPATIBLE: Final = (
    (FULL_PCPUS_ONLY, DISTRIBUTE_CPUS_ACROSS_CORES),
    (DISTRIBUTE_CPUS_ACROSS_NUMA, DISTRIBUTE_CPUS_ACROSS_CORES),
    (PREFER_ALIGN_CPUS_BY_UNCORECACHE, DISTRIBUTE_CPUS_ACROSS_CORES),
    (PREFER_ALIGN_CPUS_BY_UNCORECACHE, DISTRIBUTE_CPUS_ACROSS_NUMA),
)


@dataclass(frozen=True, slots=True)
class CPUManagerOptions:
    """The static policy's options (`cpuManagerPolicyOptions`). Alpha options are accepted without a gate."""

    full_pcpus_only: bool = False
    distribute_cpus_across_numa: bool = False
    align_by_socket: bool = False
    distribute_cpus_across_cores: bool = False
    strict_cpu_reservation: bool = False
    prefer_align_cpus_by_uncorecache: bool = False

    @classmethod
    def parse(cls, values: Mapping[str, str], topology: Topology, topology_policy: str) -> CPUManagerOptions:
        """Options from the kubelet's KEY=VALUE map, checked against the machine and the topology policy."""
        flags: dict[str, bool] = {}
        for name in sorted(values):
            if name not in _OPTION_FIELDS:
                known = ", ".join(_OPTION_FIELDS)
                raise InputError(_OPTION_RULE, f"unknown CPU Manager Policy option {name!r} (known: {known})")
            flags[_OPTION_FIELDS[name]] = parse_go_bool(name, values[name])
        options = cls(**flags)
        options.validate(topology, topology_policy)
        return options

    def values(self) -> dict[str, str]:
        """The options that are on, as the kubelet's KEY=VALUE map (the inverse of `parse`)."""
        return {name: "true" for name, field_name in _OPTION_FIELDS.items() if getattr(self, field_name)}

    def enabled(self, name: str) -> bool:
        value: bool = getattr(self, _OPTION_FIELDS[name])
        return value

    def validate(self, topology: Topology, topology_policy: str | None = None) -> None:
        """The kubelet's combination rules; InputError names the options and the numbers."""
        for first, second in _INCOMPATIBLE:
            if self.enabled(first) and self.enabled(second):
                raise InputError(_OPTION_RULE, f"{first} and {second} can not be used at the same time")
        if not self.align_by_socket:
            return
        if topology_policy == TopologyPolicyName.SINGLE_NUMA_NODE:
            conflict = f"topology manager policy {topology_policy} is incompatible with {ALIGN_BY_SOCKET}"
            raise InputError(_OPTION_RULE, conflict)
        nodes = len({info.numa_node for info in topology.cpus})
        if topology.num_sockets > nodes:
            raise InputError(
                _OPTION_RULE,
                f"{ALIGN_BY_SOCKET} needs at least as many NUMA nodes as sockets; "
                f"this machine has {topology.num_sockets} sockets and {nodes} NUMA nodes with CPUs",
            )


_NO_CPUS: Mapping[str, CPUSet] = MappingProxyType({})
_NO_ENTRIES: Mapping[str, Mapping[str, CPUSet]] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class CPUState:
    """What the policy remembers: the shared pool, exclusive entries, pod bubbles and reusable CPUs."""

    default: CPUSet
    entries: Mapping[str, Mapping[str, CPUSet]] = field(default_factory=lambda: _NO_ENTRIES)
    """pod uid -> container name -> CPUs."""
    pod_entries: Mapping[str, CPUSet] = field(default_factory=lambda: _NO_CPUS)
    """pod uid -> the pod's bubble (KEP-5526)."""
    reusable: Mapping[str, CPUSet] = field(default_factory=lambda: _NO_CPUS)
    """pod uid -> CPUs of its finished standard init containers (the kubelet's cpusToReuse)."""

    def entry(self, pod_uid: str, container_name: str) -> CPUSet | None:
        return self.entries.get(pod_uid, _NO_CPUS).get(container_name)

    def pod_cpus(self, pod_uid: str) -> CPUSet | None:
        """The CPUs a pod holds of its own: its bubble, else its containers' exclusive CPUs; None: neither."""
        bubble = self.pod_entries.get(pod_uid)
        if bubble is not None:
            return bubble
        slices = self.entries.get(pod_uid)
        return CPUSet.union_of(slices.values()) if slices else None


@dataclass(frozen=True, slots=True)
class _NUMAMasks:
    """Every NUMA node combination in the kubelet's `IterateBitMasks` order (sizes 1..n, lexicographic),
    as parallel tuples, with the two hints each can give built once: hints are immutable and shared."""

    node_cpus: tuple[int, ...]
    """The CPUs of each NUMA node, in `CPULayout.numa` order: the nodes the packed indices count."""
    packed: tuple[int, ...]
    """Per combination, its nodes as bits of `node_cpus` positions: an index into `subset_sums`."""
    sizes: tuple[int, ...]
    nodes: tuple[int, ...]
    sockets: tuple[int, ...]
    hints: tuple[tuple[TopologyHint, TopologyHint], ...]
    """(not preferred, preferred) per combination."""

    @classmethod
    def of(cls, layout: CPULayout) -> _NUMAMasks:
        packed, sizes, nodes, sockets, hints = [], [], [], [], []
        ids = tuple(layout.numa)
        for size in range(1, len(ids) + 1):
            for combo in itertools.combinations(range(len(ids)), size):
                spanned = {socket for i in combo for socket in layout.sockets_of_numa[ids[i]]}
                affinity = sum(1 << ids[i] for i in combo)
                packed.append(sum(1 << i for i in combo))
                sizes.append(sum(layout.numa[ids[i]].bit_count() for i in combo))
                nodes.append(size)
                sockets.append(len(spanned))
                hints.append((TopologyHint(affinity, False), TopologyHint(affinity, True)))
        node_cpus = tuple(layout.numa[n] for n in ids)
        return cls(node_cpus, tuple(packed), tuple(sizes), tuple(nodes), tuple(sockets), tuple(hints))


CPUHints = dict[str, list[TopologyHint] | None] | None
"""`{"cpu": hints}`: None = no preference, [] = impossible (every policy but best-effort then rejects)."""


class StaticCPUPolicy:
    """The static policy on one machine. Stateless itself: every call takes and returns a `CPUState`."""

    def __init__(self, topology: Topology, reserved: CPUSet, options: CPUManagerOptions) -> None:
        if not reserved:
            need = "the static policy needs at least one reserved CPU (kubeReserved + systemReserved > 0)"
            raise InputError("reserved cpus", need)
        outside = reserved - topology.all_cpus
        if outside:
            where = f"reserved CPUs {outside} are not on this machine (CPUs {topology.all_cpus})"
            raise InputError("reserved cpus", where)
        options.validate(topology)
        self.topology = topology
        self.reserved = reserved
        self.options = options
        self.reserved_physical = topology.core_siblings(reserved)
        self.layout = CPULayout.of(topology)
        self.cpus_per_core = self.layout.cpus_per_core
        """The kubelet's cpuGroupSize: the SMT level full-pcpus-only rounds to."""
        self._masks = _NUMAMasks.of(self.layout)
        self._numa_cpus = sum(self._masks.node_cpus)
        self._hint_rows = tuple(self._hint_row(narrowest) for narrowest in range(len(self.layout.numa) + 1))
        self._reaching_out = functools.lru_cache(maxsize=256)(self._reaching_out_of)

    # -- sets --------------------------------------------------------------------------------------

    def initial_state(self) -> CPUState:
        default = self.topology.all_cpus
        if self.options.strict_cpu_reservation:
            default -= self.reserved
        return CPUState(default=default)

    def assignable(self, state: CPUState) -> CPUSet:
        """ASSIGNABLE: the shared pool minus the reserved CPUs."""
        return state.default - self.reserved

    def cpus_of(self, state: CPUState, pod_uid: str, container_name: str) -> CPUSet:
        """The container's exclusive slice or pod pool when it has an entry, else the node shared pool."""
        cpus = state.entry(pod_uid, container_name)
        return state.default if cpus is None else cpus

    def take(self, available: CPUSet, count: int) -> CPUSet:
        """The kubelet's `takeByTopology` with this policy's options. Raises AllocationFailed."""
        options = self.options
        if options.distribute_cpus_across_numa:
            group = self.cpus_per_core if options.full_pcpus_only else 1
            return self.layout.take_distributed(available, count, group)
        return self.layout.take(
            available,
            count,
            spread=options.distribute_cpus_across_cores,
            prefer_uncore=options.prefer_align_cpus_by_uncorecache,
        )

    # -- who gets exclusive CPUs -------------------------------------------------------------------

    def guaranteed_cpus(self, pod: Pod, container: Container) -> int:
        """Exclusive CPUs for `container` (0 = shared): Guaranteed pod, integer CPU request, and with
        pod-level resources also an equivalent-Guaranteed container (CPU and memory requests = limits)."""
        return self._exclusive_cpus(pod, pod.qos_class() is QOSClass.GUARANTEED, container)

    @staticmethod
    def _exclusive_cpus(pod: Pod, guaranteed: bool, container: Container) -> int:
        if not guaranteed:
            return 0
        if pod.resources is not None and not container.resources.is_equivalent_guaranteed():
            return 0
        milli = container.resources.request(CPU)
        return milli // 1000 if milli % 1000 == 0 else 0

    def pod_guaranteed_cpus(self, pod: Pod) -> int:
        """The pod's exclusive CPU total. With `.spec.resources` it is the integer pod-level request (0
        unless the pod is Guaranteed). Without, it is what the largest phase's containers take together."""
        guaranteed = pod.qos_class() is QOSClass.GUARANTEED
        if pod.resources is not None:
            milli = pod.resources.request(CPU)
            return milli // 1000 if guaranteed and milli % 1000 == 0 else 0
        return max(
            sum(self._exclusive_cpus(pod, guaranteed, c) for c in phase.containers) for phase in pod.phases()
        )

    def empty_shared_pool(self, pod: Pod) -> str | None:
        """What breaks the empty-shared-pool rule for this pod's CPUs, or None when it keeps the rule."""
        guaranteed = pod.qos_class() is QOSClass.GUARANTEED

        def slice_of(container: Container) -> Amounts:
            count = self._exclusive_cpus(pod, guaranteed, container)
            return {CPU: count} if count else {}

        return empty_shared_pool_violation(pod, {CPU: self.pod_guaranteed_cpus(pod)}, slice_of)

    # -- hints -------------------------------------------------------------------------------------

    def _hint_row(self, narrowest: int) -> tuple[TopologyHint, ...]:
        """Every combination's hint, for a request whose narrowest fitting combination has `narrowest` nodes.
        A combination is preferred when it has that many nodes too. With align-by-socket it is also
        preferred when it spans no more sockets than that many nodes need."""
        min_sockets = 0
        if self.options.align_by_socket:
            per_socket = len(self.layout.numa) // self.topology.num_sockets
            min_sockets = -(-narrowest // per_socket) if per_socket else 0
        masks = self._masks
        return tuple(
            pair[nodes == narrowest or sockets == min_sockets]
            for pair, nodes, sockets in zip(masks.hints, masks.nodes, masks.sockets, strict=True)
        )

    def _hints(self, available: int, reusable: int, request: int) -> list[TopologyHint]:
        """A hint for every NUMA combination that can hold `request` and contains all of `reusable`, with its
        preference from `_hint_row`.

        NUMA nodes are disjoint, so a combination's free CPUs are the sum of its nodes' (`subset_sums`). When
        the emptiest node can hold the request, every combination can; and when the nodes that cannot hold it
        alone cannot together either, exactly the combinations with another node can."""
        masks = self._masks
        narrowest = next(
            (nodes for nodes, size in zip(masks.nodes, masks.sizes, strict=True) if size >= request),
            len(masks.node_cpus),
        )
        row = self._hint_rows[narrowest]
        free = [(available & cpus).bit_count() for cpus in masks.node_cpus]
        if reusable:
            if reusable & ~self._numa_cpus:
                return []
            need = request - reusable.bit_count()
            inside = sum(1 << i for i, cpus in enumerate(masks.node_cpus) if reusable & cpus)
            sums = subset_sums(free)
            return [row[i] for i, p in enumerate(masks.packed) if p & inside == inside and sums[p] >= need]
        short = short_free = 0
        for i, count in enumerate(free):
            if count < request:
                short |= 1 << i
                short_free += count
        if not short:
            return list(row)
        if short_free < request:
            return list(itertools.compress(row, self._reaching_out(short)))
        sums = subset_sums(free)
        return [row[i] for i, p in enumerate(masks.packed) if sums[p] >= request]

    def _reaching_out_of(self, nodes: int) -> tuple[bool, ...]:
        """Per combination, whether it has a node outside `nodes` (packed as in `_NUMAMasks.packed`)."""
        return tuple(packed & ~nodes != 0 for packed in self._masks.packed)

    def container_hints(self, state: CPUState, pod: Pod, container: Container) -> CPUHints:
        """The kubelet's `GetTopologyHints` for one container (None = no preference, [] = impossible)."""
        requested = self.guaranteed_cpus(pod, container)
        if requested == 0:
            return None
        allocated = state.entry(pod.uid, container.name)
        if allocated is not None:
            if len(allocated) != requested:
                return {CPU: []}
            return {CPU: self._hints(allocated.mask, 0, requested)}
        reusable = state.reusable.get(pod.uid, EMPTY)
        return {CPU: self._hints(self.assignable(state).mask, reusable.mask, requested)}

    def pod_hints(self, state: CPUState, pod: Pod) -> CPUHints:
        """The kubelet's `GetPodTopologyHints`: for the pod-level budget when the pod sets `.spec.resources`
        (impossible when it breaks the empty-shared-pool rule), else for the containers' pod-scope total."""
        requested = self.pod_guaranteed_cpus(pod)
        if requested == 0:
            return None
        reusable = state.reusable.get(pod.uid, EMPTY).mask
        if pod.resources is not None:
            if self.empty_shared_pool(pod) is not None:
                return {CPU: []}
            bubble = state.pod_entries.get(pod.uid)
            if bubble is not None:
                return {CPU: self._hints(bubble.mask, 0, requested) if len(bubble) == requested else []}
            return {CPU: self._hints(self.assignable(state).mask, reusable, requested)}
        guaranteed = pod.qos_class() is QOSClass.GUARANTEED
        allocated = state.entries.get(pod.uid, _NO_CPUS)
        assigned = 0
        for container in pod.all_containers:
            cpus = allocated.get(container.name)
            if cpus is None:
                continue
            if len(cpus) != self._exclusive_cpus(pod, guaranteed, container):
                return {CPU: []}
            assigned |= cpus.mask
        if assigned.bit_count() == requested:
            return {CPU: self._hints(assigned, 0, requested)}
        return {CPU: self._hints(self.assignable(state).mask, reusable | assigned, requested)}

    # -- allocation --------------------------------------------------------------------------------

    def _enforce_smt_alignment(self, state: CPUState, count: int) -> None:
        if not self.options.full_pcpus_only:
            return
        per_core = self.cpus_per_core
        if count % per_core:
            raise SMTAlignmentError(
                f"SMT Alignment Error: requested {count} cpus not multiple cpus per core = {per_core} "
                f"({FULL_PCPUS_ONLY})"
            )
        physical = len(state.default - self.reserved_physical)
        if count > physical:
            raise SMTAlignmentError(
                f"SMT Alignment Error: not enough free physical CPUs: available physical CPUs = {physical}, "
                f"requested CPUs = {count}, CPUs per core = {per_core} ({FULL_PCPUS_ONLY})"
            )

    def _aligned(self, affinity: int) -> int:
        """CPUs of the hint's NUMA nodes, or of their sockets with align-by-socket."""
        layout = self.layout
        nodes = [node for node in layout.numa if affinity >> node & 1]
        if self.options.align_by_socket:
            sockets = {socket for node in nodes for socket in layout.sockets_of_numa[node]}
            return sum(layout.socket[socket] for socket in sockets)
        return sum(layout.numa[node] for node in nodes)

    def _allocate_cpus(self, state: CPUState, count: int, affinity: int | None, reusable: CPUSet) -> CPUSet:
        """The hint's CPUs first, then the rest from anywhere assignable. Raises AllocationFailed."""
        allocatable = self.assignable(state) | reusable
        result = EMPTY
        if affinity is not None:
            aligned = CPUSet.from_mask(allocatable.mask & self._aligned(affinity))
            result = self.take(aligned, min(count, len(aligned)))
        if len(result) == count:
            return result
        return result | self.take(allocatable - result, count - len(result))

    @staticmethod
    def _unexpected(failed: AllocationFailed) -> UnexpectedAdmissionError:
        return UnexpectedAdmissionError(f"Allocate failed due to {failed}, which is unexpected", CPU)

    @staticmethod
    def _reused(
        reusable: Mapping[str, CPUSet], pod: Pod, container: Container, cpus: CPUSet
    ) -> Mapping[str, CPUSet]:
        """Keep reusable CPUs for this pod only: a standard init container adds its set, others subtract."""
        current = reusable.get(pod.uid, EMPTY)
        return {pod.uid: current | cpus if container.kind is ContainerKind.INIT else current - cpus}

    def allocate(self, state: CPUState, pod: Pod, container: Container, hint: TopologyHint) -> CPUState:
        """The container path: exclusive CPUs from the node, aligned to `hint`, or nothing when shared."""
        count = self.guaranteed_cpus(pod, container)
        if count == 0:
            return state
        self._enforce_smt_alignment(state, count)
        existing = state.entry(pod.uid, container.name)
        if existing is not None:
            return replace(state, reusable=self._reused(state.reusable, pod, container, existing))
        try:
            cpus = self._allocate_cpus(state, count, hint.affinity, state.reusable.get(pod.uid, EMPTY))
        except AllocationFailed as failed:
            raise self._unexpected(failed) from failed
        containers = {**state.entries.get(pod.uid, _NO_CPUS), container.name: cpus}
        return CPUState(
            default=state.default - cpus,
            entries=with_item(state.entries, pod.uid, containers),
            pod_entries=state.pod_entries,
            reusable=self._reused(state.reusable, pod, container, cpus),
        )

    def allocate_pod(self, state: CPUState, pod: Pod, hint: TopologyHint) -> CPUState:
        """KEP-5526 `AllocatePod`: one bubble of the pod budget aligned to `hint`, carved into exclusive
        slices and the pod shared pool. A pod that already has a bubble keeps it (restart re-admission)."""
        if pod.resources is None:
            raise InputError("pod-level resources", f"pod {pod.key} declares no .spec.resources")
        total = self.pod_guaranteed_cpus(pod)
        if total == 0 or pod.uid in state.pod_entries:
            return state
        violation = self.empty_shared_pool(pod)
        if violation is not None:
            raise EmptyPodSharedPoolError.of(pod.key, violation, CPU)
        self._enforce_smt_alignment(state, total)
        try:
            bubble = self._allocate_cpus(state, total, hint.affinity, EMPTY)
            partition = self._partition(pod, bubble)
        except AllocationFailed as failed:
            raise self._unexpected(failed) from failed
        return CPUState(
            default=state.default - bubble,
            entries=with_item(state.entries, pod.uid, partition),
            pod_entries=with_item(state.pod_entries, pod.uid, bubble),
            reusable=state.reusable,
        )

    def _partition(self, pod: Pod, bubble: CPUSet) -> dict[str, CPUSet]:
        """Each container's CPUs in the bubble: its exclusive slice, or the pod shared pool beside it."""
        guaranteed = pod.qos_class() is QOSClass.GUARANTEED

        def slice_of(container: Container, free: CPUSet) -> CPUSet | None:
            count = self._exclusive_cpus(pod, guaranteed, container)
            return self.take(free, count) if count > 0 else None

        return partition(pod, bubble, slice_of, CPUSet.__sub__)

    def remove_container(self, state: CPUState, pod_uid: str, container_name: str) -> CPUState:
        """Drop the container's entry. Container path: its CPUs no sibling holds go back to SHARED.
        Pod-level pod: nothing goes back until its last entry goes, then the whole bubble does."""
        containers = state.entries.get(pod_uid, _NO_CPUS)
        if container_name not in containers:
            return state
        remaining = {name: cpus for name, cpus in containers.items() if name != container_name}
        reusable = state.reusable
        if remaining:
            entries = with_item(state.entries, pod_uid, remaining)
        else:
            entries = without_item(state.entries, pod_uid)
            reusable = {uid: cpus for uid, cpus in reusable.items() if uid != pod_uid}
        bubble = state.pod_entries.get(pod_uid)
        if bubble is None:
            siblings = 0
            for cpus in remaining.values():
                siblings |= cpus.mask
            released = CPUSet.from_mask(containers[container_name].mask & ~siblings)
            return CPUState(state.default | released, entries, state.pod_entries, reusable)
        if remaining:
            return CPUState(state.default, entries, state.pod_entries, reusable)
        return CPUState(state.default | bubble, entries, without_item(state.pod_entries, pod_uid), reusable)
