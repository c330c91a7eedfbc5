"""The memory manager's `Static` policy: per-NUMA-node accounting of `memory` and each hugepage size.

One module of ~700 lines, as the kubelet's `policy_static.go` is one file: the hints, the allocation and the
machine state's accounting share its invariants (below), and a reader checks them against the kubelet side by
side. Restoring recorded blocks is `restore`'s; the tests check every state against the kubelet's
`validateState` (`tests/support/memory_state.py`).

Semantics are the kubelet's (`pkg/kubelet/cm/memorymanager/policy_static.go`), including KEP-5526's
`AllocatePod`. Only Guaranteed pods are managed. A container's (or pod's) request becomes one block per memory
resource, pinned to a NUMA mask; the machine state charges each block to the mask's nodes greedily, in node
order, moving bytes from `free` to `reserved`.

Invariants kept by every operation (each returns a new `MemoryState` and never mutates its input):
- per node and resource, `free + reserved == allocatable == total - system_reserved` (`memory` also minus the
  node's hugepages), so a node's free bytes never go negative;
- a node is either used by single-node blocks only (`cells == (node,)`) or by blocks over exactly one group
  of nodes (`cells` == that group): a multi-node hint never mixes with single-node allocations
  (`isAffinityViolatingNUMAAllocations`); `assignments` counts the blocks charged to the node, and `cells`
  resets to the node alone when it drops to zero;
- a pod-level pod (KEP-5526) charges the machine once with its pod budget (`pod_entries`); its containers'
  blocks are bookkeeping inside that budget, and the budget is released when its last container entry goes;
- admitting a pod that already has `pod_entries` changes nothing (kubelet bug #140906 double-charged it).
States handed in come from `initial_state` or from this policy's operations (or `restore`'s, which charges
recorded blocks as admission does): hints use allocatable sums precomputed from the machine and the
reservation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from types import MappingProxyType
from typing import Final

from podlevel.engine.bitmask import format_nodes, iterate_masks, mask_of, nodes_of, subset_sums
from podlevel.engine.errors import EmptyPodSharedPoolError, InputError, UnexpectedAdmissionError
from podlevel.engine.pod import (
    HUGEPAGES_PREFIX,
    MEMORY,
    Container,
    ContainerKind,
    Pod,
    QOSClass,
    is_memory_resource,
)
from podlevel.engine.quantity import bytes_of, format_bytes
from podlevel.engine.shared_map import with_item, without_item
from podlevel.engine.shared_pool import empty_shared_pool_violation, partition
from podlevel.engine.topology import NUMANode, Topology
from podlevel.engine.topology_manager import TopologyHint

RESERVED_MEMORY_RULE: Final = "reserved memory"

Requests = Mapping[str, int]
"""memory resource name -> bytes."""


@dataclass(frozen=True, slots=True)
class MemoryTable:
    """One memory resource on one NUMA node, in bytes (the checkpoint's `MemoryTable`)."""

    total: int
    system_reserved: int
    allocatable: int
    reserved: int
    free: int


@dataclass(frozen=True, slots=True)
class NUMANodeState:
    assignments: int
    """Blocks charged to this node (a block over k nodes counts on each of them)."""
    memory_map: Mapping[str, MemoryTable]
    cells: tuple[int, ...]
    """The group of nodes this node's blocks span; the node alone when single-node or unused."""


@dataclass(frozen=True, slots=True)
class MemoryBlock:
    numa_affinity: tuple[int, ...]
    type: str
    size: int


Entries = Mapping[str, Mapping[str, tuple[MemoryBlock, ...]]]
PodEntries = Mapping[str, tuple[MemoryBlock, ...]]
Reusable = Mapping[str, Mapping[int, Mapping[str, int]]]
Owned = Mapping[str, tuple[MemoryBlock, ...]]
"""A pod's blocks by owner: its containers by name; in messages, `its container <name>`, `its pod budget`."""
_NO_ENTRIES: Final[Entries] = MappingProxyType({})
_NO_POD_ENTRIES: Final[PodEntries] = MappingProxyType({})
_NO_REUSABLE: Final[Reusable] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class MemoryState:
    machine: Mapping[int, NUMANodeState]
    entries: Entries = field(default_factory=lambda: _NO_ENTRIES)
    """pod uid -> container name -> blocks."""
    pod_entries: PodEntries = field(default_factory=lambda: _NO_POD_ENTRIES)
    """pod uid -> the pod budget's blocks (KEP-5526 pod-level pods only)."""
    init_reusable: Reusable = field(default_factory=lambda: _NO_REUSABLE)
    """pod uid -> NUMA mask -> resource -> bytes held by the pod's standard init containers, which its later
    containers reuse instead of charging the machine again (`initContainersReusableMemory`). Like the kubelet,
    only the pod allocated last keeps an entry; it is runtime bookkeeping, not checkpointed."""

    def blocks(self, pod_uid: str, container_name: str) -> tuple[MemoryBlock, ...] | None:
        return self.entries.get(pod_uid, {}).get(container_name)


def hugepage_resource(page_size: int) -> str:
    """The resource name of a page size in bytes, as the kubelet spells it (2097152 -> `hugepages-2Mi`)."""
    return f"{HUGEPAGES_PREFIX}{format_bytes(page_size)}"


def describe(requests: Requests) -> str:
    return ", ".join(f"{format_bytes(size)} {name}" for name, size in sorted(requests.items())) or "nothing"


class StaticMemoryPolicy:
    """The Static policy on one machine. Stateless itself: every call takes and returns a `MemoryState`."""

    def __init__(self, topology: Topology, reserved: Mapping[int, Mapping[str, int]]) -> None:
        self.topology = topology
        self.node_ids: tuple[int, ...] = topology.numa_node_ids
        self.reserved = _checked_reservation(topology, reserved)
        machine = {
            node.id: NUMANodeState(0, _default_tables(node, self.reserved.get(node.id, {})), (node.id,))
            for node in topology.numa_nodes
        }
        self._initial = MemoryState(MappingProxyType(machine))
        # Every NUMA node combination in `IterateBitMasks` order, with its index in the packed subset-sum
        # lists of `subset_sums` (bit i of a packed index stands for node_ids[i]).
        position = {n: i for i, n in enumerate(self.node_ids)}
        self._masks: tuple[int, ...] = tuple(iterate_masks(self.node_ids))
        self._sizes: tuple[int, ...] = tuple(m.bit_count() for m in self._masks)
        self._packed: tuple[int, ...] = tuple(sum(1 << position[n] for n in nodes_of(m)) for m in self._masks)
        self._hint_pairs = tuple((TopologyHint(m, False), TopologyHint(m, True)) for m in self._masks)
        self._index: Mapping[int, int] = {m: i for i, m in enumerate(self._masks)}
        self._all_nodes = mask_of(self.node_ids)
        resources = sorted({name for state in machine.values() for name in state.memory_map})
        self._allocatable: Mapping[str, tuple[int, ...]] = {
            name: self._per_mask([table_of(machine[n], name).allocatable for n in self.node_ids])
            for name in resources
        }
        self._no_memory = (0,) * len(self._masks)

    def _per_mask(self, per_node: list[int]) -> tuple[int, ...]:
        """Sums of a per-node quantity over every mask, in mask order."""
        sums = subset_sums(per_node)
        return tuple(sums[p] for p in self._packed)

    def initial_state(self) -> MemoryState:
        return self._initial

    # -- hints ---------------------------------------------------------------------------------------------

    def container_hints(
        self, state: MemoryState, pod: Pod, container: Container
    ) -> dict[str, list[TopologyHint] | None] | None:
        """`GetTopologyHints`: the masks that can hold the container's request, or its existing blocks'."""
        if pod.qos_class() is not QOSClass.GUARANTEED:
            return None
        requests = container_requests(pod, container)
        existing = state.blocks(pod.uid, container.name)
        if existing is not None:
            return _regenerated_hints(existing, requests)
        return self._hints(state, pod.uid, requests)

    def pod_hints(self, state: MemoryState, pod: Pod) -> dict[str, list[TopologyHint] | None] | None:
        """`GetPodTopologyHints`: hints for the pod budget (KEP-5526) or the pod-scope container total.

        A pod-level pod that breaks the empty-shared-pool rule gets an empty list per resource, which every
        policy but best-effort rejects. A pod already charged regenerates its hint from its pod blocks (the
        kubelet compares them with a container's blocks, which never match a budget, and loses the hint).
        """
        if pod.qos_class() is not QOSClass.GUARANTEED:
            return None
        requests = pod_requests(pod)
        if pod.resources is not None and self.empty_shared_pool(pod) is not None:
            return {name: [] for name in requests}
        if not requests:
            return None
        pod_blocks = state.pod_entries.get(pod.uid)
        if pod_blocks is not None:
            return _regenerated_hints(pod_blocks, requests)
        for container in pod.all_containers:
            existing = state.blocks(pod.uid, container.name)
            if existing is not None:
                return _regenerated_hints(existing, requests)
        return self._hints(state, pod.uid, requests)

    def _hints(
        self, state: MemoryState, pod_uid: str, requests: Requests
    ) -> dict[str, list[TopologyHint] | None]:
        hints = self._calculate_hints(state, pod_uid, requests)
        if not hints:
            return {}
        return {name: list(hints) for name in requests}

    def _calculate_hints(self, state: MemoryState, pod_uid: str, requests: Requests) -> list[TopologyHint]:
        """`calculateHints`: the masks that can hold every requested resource. Empty when nothing fits.

        A mask qualifies when the node groups allow it and, for each resource, it has enough allocatable
        memory and enough free memory (counting what the pod's init containers hold there). A hint is
        preferred when its mask is as narrow as the narrowest mask with enough *allocatable* memory.

        The group rule is applied first: on a used machine it leaves few masks (each node alone, the
        groups), so the memory sums are looked up for those only."""
        if not requests:
            return []
        rows = [(self._allocatable.get(name, self._no_memory), size) for name, size in requests.items()]
        if any(allocatable[-1] < size for allocatable, size in rows):
            return []  # not even every node together has it; no smaller mask has more
        narrowest = self._sizes[
            next(i for i in range(len(self._masks)) if all(a[i] >= size for a, size in rows))
        ]
        machine = state.machine
        candidates = self._group_allowed(machine)
        held = state.init_reusable.get(pod_uid)
        packed, masks = self._packed, self._masks
        for (allocatable, size), name in zip(rows, requests, strict=True):
            free = subset_sums([table_of(machine[n], name).free for n in self.node_ids])
            if held:
                extra = [held.get(masks[i], {}).get(name, 0) for i in candidates]
                candidates = [
                    i
                    for i, more in zip(candidates, extra, strict=True)
                    if allocatable[i] >= size and free[packed[i]] + more >= size
                ]
            else:
                candidates = [i for i in candidates if allocatable[i] >= size and free[packed[i]] >= size]
        pairs, sizes = self._hint_pairs, self._sizes
        return [pairs[i][sizes[i] == narrowest] for i in candidates]

    def _group_allowed(self, machine: Mapping[int, NUMANodeState]) -> Sequence[int]:
        """Indices, ascending, of the masks the node groups allow. These are:
        - each node that is in no group;
        - each multi-node mask without used nodes;
        - each group whose used nodes all have it as their group. A used node in any other multi-node mask
          would mix allocations.
        The list is built from the groups rather than by testing every mask, because a used machine allows
        few."""
        assigned = 0
        groups: dict[int, int] = {}
        for n in self.node_ids:
            node = machine[n]
            groups[1 << n] = mask_of(node.cells)
            if node.assignments > 0:
                assigned |= 1 << n
        allowed = {bit for bit, group in groups.items() if group.bit_count() == 1}
        if not assigned and len(allowed) == len(groups):
            return range(len(self._masks))
        for group in set(groups.values()):
            if group.bit_count() > 1 and all(groups[1 << u] == group for u in nodes_of(group & assigned)):
                allowed.add(group)
        unused = self._all_nodes & ~assigned
        subset = unused
        while subset:
            if subset & (subset - 1):
                allowed.add(subset)
            subset = (subset - 1) & unused
        index = self._index
        return sorted(index[m] for m in allowed if m in index)

    # -- allocation ----------------------------------------------------------------------------------------

    def allocate(self, state: MemoryState, pod: Pod, container: Container, hint: TopologyHint) -> MemoryState:
        """`Allocate`: charge the container's request on the hinted nodes (container path, idempotent)."""
        if pod.qos_class() is not QOSClass.GUARANTEED:
            return state
        existing = state.blocks(pod.uid, container.name)
        if existing is not None:
            return replace(state, init_reusable=_reusable_after(state, pod, container, existing))
        requests = container_requests(pod, container)
        if not requests:
            # A container of a pod-level pod that is not equivalent-Guaranteed runs in shared memory. The
            # kubelet would look for a default hint for "nothing" and fail the pod; there is nothing to pin.
            return state
        nodes = nodes_of(self._resolve(state, pod, requests, hint))
        blocks = tuple(MemoryBlock(nodes, name, size) for name, size in sorted(requests.items()))
        reusable = state.init_reusable.get(pod.uid, {}).get(mask_of(nodes), {})
        machine = dict(state.machine)
        for block in blocks:
            charge(machine, nodes, block.type, max(block.size - reusable.get(block.type, 0), 0))
        containers = _shrink_init_blocks(
            {**state.entries.get(pod.uid, {}), container.name: blocks}, pod, container
        )
        return MemoryState(
            machine,
            with_item(state.entries, pod.uid, containers),
            state.pod_entries,
            _reusable_after(state, pod, container, blocks),
        )

    def allocate_pod(self, state: MemoryState, pod: Pod, hint: TopologyHint) -> MemoryState:
        """KEP-5526 `AllocatePod`: charge the pod budget once on one mask and partition it among the
        containers: exclusive blocks for equivalent-Guaranteed containers, the pod shared pool for the rest.
        A pod that already has its pod blocks is left as it is."""
        if pod.qos_class() is not QOSClass.GUARANTEED or pod.uid in state.pod_entries:
            return state
        budget = pod_requests(pod)
        violation = self.empty_shared_pool(pod)
        if violation is not None:
            raise EmptyPodSharedPoolError.of(pod.key, violation, MEMORY)
        if not budget:
            return state
        nodes = nodes_of(self._resolve(state, pod, budget, hint))
        machine = dict(state.machine)
        for name, size in sorted(budget.items()):
            charge(machine, nodes, name, size)
        entries = with_item(state.entries, pod.uid, _partition(pod, budget, nodes))
        pod_entries = with_item(state.pod_entries, pod.uid, _blocks(nodes, budget))
        return MemoryState(machine, entries, pod_entries, state.init_reusable)

    @staticmethod
    def empty_shared_pool(pod: Pod) -> str | None:
        """What breaks the empty-shared-pool rule for this pod's memory budget, or None when it keeps the
        rule. A container is exclusive when it has any memory request (after `container_requests`)."""
        return empty_shared_pool_violation(pod, pod_requests(pod), partial(container_requests, pod))

    def _resolve(self, state: MemoryState, pod: Pod, requests: Requests, hint: TopologyHint) -> int:
        """The mask to charge.

        It starts as the topology manager's hint, or the default hint when that has no mask. It is widened to
        the best calculated hint around it when it lacks free memory (the merge ANDs masks, so it can) or
        when it is a single node that belongs to a group. It is refused when it would mix single-node and
        multi-node allocations on a node.

        The kubelet widens only for lack of memory, and so charges a single grouped node when the merge hands
        it one: that node's group then disagrees with its blocks and the kubelet's own state check fails on
        the next restart. Widening to the group, as `calculateHints` would have offered, keeps it consistent.
        """
        best = hint
        if best.affinity is None:
            default = _find_best(self._calculate_hints(state, pod.uid, requests))
            if default is None:
                raise self._failed(state, pod, requests, f"no NUMA nodes have {describe(requests)} free")
            if hint.preferred and not default.preferred:
                raise self._failed(
                    state,
                    pod,
                    requests,
                    f"the topology manager asked for a preferred placement of {describe(requests)} but the "
                    f"best default placement {format_nodes(default.affinity)} is not preferred",
                )
            best = default
        affinity = best.affinity
        assert affinity is not None
        fits = self.fits(state, affinity, requests)
        if not fits or self.inside_group(state, affinity):
            why = f"lack {describe(requests)} free" if not fits else "belong to a multi-node group"
            around = [
                h
                for h in self._calculate_hints(state, pod.uid, requests)
                if h.affinity is not None and h.affinity & affinity == affinity
            ]
            extended = _find_best(around)
            if extended is None:
                raise self._failed(
                    state,
                    pod,
                    requests,
                    f"NUMA nodes {format_nodes(affinity)} {why} and no wider placement around them fits",
                )
            if best.preferred and not extended.preferred:
                raise self._failed(
                    state,
                    pod,
                    requests,
                    f"NUMA nodes {format_nodes(affinity)} {why} and the placement around them, "
                    f"{format_nodes(extended.affinity)}, is not preferred",
                )
            assert extended.affinity is not None
            affinity = extended.affinity
        if self.violates_groups(state, affinity):
            raise self._failed(
                state,
                pod,
                requests,
                f"NUMA nodes {format_nodes(affinity)} would mix single-node and multi-node memory "
                "allocations on a node",
            )
        return affinity

    def fits(self, state: MemoryState, affinity: int, requests: Requests) -> bool:
        """`isAffinitySatisfyRequest`: enough free memory of every resource on the mask's nodes."""
        nodes = nodes_of(affinity)
        return all(
            sum(table_of(state.machine[n], name).free for n in nodes if n in state.machine) >= size
            for name, size in requests.items()
        )

    @staticmethod
    def inside_group(state: MemoryState, affinity: int) -> bool:
        """A single node whose memory is already charged together with other nodes."""
        return affinity.bit_count() == 1 and len(state.machine[affinity.bit_length() - 1].cells) > 1

    def violates_groups(self, state: MemoryState, affinity: int) -> bool:
        """`isAffinityViolatingNUMAAllocations`."""
        nodes = nodes_of(affinity)
        if len(nodes) == 1:
            return False
        for n in nodes:
            node = state.machine[n]
            if node.assignments and tuple(sorted(node.cells)) != nodes:
                return True
        return False

    def _failed(
        self, state: MemoryState, pod: Pod, requests: Requests, reason: str
    ) -> UnexpectedAdmissionError:
        """The refusal with what each NUMA node has free of the requested resources."""
        free = "; ".join(
            f"node {n}: {describe({name: table_of(state.machine[n], name).free for name in requests})}"
            for n in self.node_ids
        )
        return UnexpectedAdmissionError(
            f"Allocate failed due to memory manager: pod {pod.key}: {reason} "
            f"(free: {free}), which is unexpected",
            MEMORY,
        )

    # -- release and queries -------------------------------------------------------------------------------

    def remove_container(self, state: MemoryState, pod_uid: str, container_name: str) -> MemoryState:
        """`RemoveContainer`: forget the container; release its blocks, or, for a pod-level pod, the pod
        budget once no container entry of the pod is left. Removing an unknown container changes nothing."""
        pod_blocks = state.pod_entries.get(pod_uid)
        containers = state.entries.get(pod_uid, {})
        if pod_blocks is None and container_name not in containers:
            return state
        remaining = {name: blocks for name, blocks in containers.items() if name != container_name}
        entries: Entries
        pod_entries: PodEntries
        if remaining:
            entries = with_item(state.entries, pod_uid, remaining)
        else:
            entries = without_item(state.entries, pod_uid) if pod_uid in state.entries else state.entries
        if pod_blocks is not None:
            if remaining:
                return replace(state, entries=entries)
            released = pod_blocks
            pod_entries = without_item(state.pod_entries, pod_uid)
        else:
            released = containers[container_name]
            pod_entries = state.pod_entries
        machine = dict(state.machine)
        for block in released:
            _release(machine, block)
        reusable = state.init_reusable
        if not remaining and pod_uid in reusable:
            reusable = {uid: held for uid, held in reusable.items() if uid != pod_uid}
        return MemoryState(machine, entries, pod_entries, reusable)

    def mems_of(self, state: MemoryState, pod_uid: str, container_name: str) -> tuple[int, ...] | None:
        """The NUMA nodes for the container's cpuset.mems (`GetMemoryNUMANodes`); None when it has no blocks.
        Every container of a pod-level pod has a non-empty share of the bubble (the empty-shared-pool rule
        sees to it), so they all get the bubble's nodes."""
        nodes = {n for block in state.blocks(pod_uid, container_name) or () for n in block.numa_affinity}
        return tuple(sorted(nodes)) or None

# -- requests ------------------------------------------------------------------------------------------------


def container_requests(pod: Pod, container: Container) -> dict[str, int]:
    """`getContainerRequestedResources`: the container's memory and hugepages requests; nothing for a
    container of a pod-level pod that is not equivalent-Guaranteed (it runs in a shared pool)."""
    resources = container.resources
    if pod.resources is not None and not resources.is_equivalent_guaranteed():
        return {}
    names = resources.requests.keys() | resources.limits.keys()
    return {name: resources.request(name) for name in names if is_memory_resource(name)}


def pod_requests(pod: Pod) -> dict[str, int]:
    """`getPodRequestedResources`: the pod budget's memory resources (KEP-5526), or else, per resource an app
    container requests, the larger of the init-time peak and all app containers plus sidecars (KEP-753)."""
    if pod.resources is not None:
        budget = pod.resources
        names = budget.requests.keys() | budget.limits.keys()
        return {n: budget.request(n) for n in names if is_memory_resource(n) and budget.request(n) > 0}
    names = {name for container in pod.containers for name in container_requests(pod, container)}
    return {name: pod.aggregate_request(name) for name in names}


def _partition(pod: Pod, budget: Requests, nodes: tuple[int, ...]) -> dict[str, tuple[MemoryBlock, ...]]:
    """The per-container bookkeeping of a pod budget (`AllocatePod` step 4): an exclusive container's blocks
    are its requests, a shared container's the pod shared pool beside it."""

    def slice_of(container: Container, _free: Requests) -> Requests | None:
        return container_requests(pod, container) or None

    shares = partition(pod, budget, slice_of, _minus)
    return {name: _blocks(nodes, share) for name, share in shares.items()}


def _minus(pool: Requests, taken: Requests) -> Requests:
    return {name: size - taken.get(name, 0) for name, size in pool.items()}


def _blocks(nodes: tuple[int, ...], sizes: Requests) -> tuple[MemoryBlock, ...]:
    return tuple(MemoryBlock(nodes, name, size) for name, size in sorted(sizes.items()) if size > 0)


def _regenerated_hints(
    blocks: Iterable[MemoryBlock], requests: Requests
) -> dict[str, list[TopologyHint] | None] | None:
    """`regenerateHints`: a preferred hint per block when the blocks match the request exactly, else None."""
    blocks = tuple(blocks)
    if len(blocks) != len(requests):
        return None
    grouped: dict[str, list[TopologyHint]] = {name: [] for name in requests}
    for block in blocks:
        if requests.get(block.type) != block.size:
            return None
        grouped[block.type].append(TopologyHint(mask_of(block.numa_affinity), True))
    return {name: hints for name, hints in grouped.items()}


def _find_best(hints: Iterable[TopologyHint]) -> TopologyHint | None:
    """`findBestHint`: a preferred hint first, then the narrowest."""
    return min(
        hints,
        key=lambda h: (not h.preferred, (h.affinity or 0).bit_count(), h.affinity or 0),
        default=None,
    )


# -- machine state -------------------------------------------------------------------------------------------


def table_of(node: NUMANodeState, name: str) -> MemoryTable:
    return node.memory_map.get(name, _NO_TABLE)


_NO_TABLE: Final = MemoryTable(0, 0, 0, 0, 0)


def charge(machine: dict[int, NUMANodeState], nodes: tuple[int, ...], name: str, size: int) -> None:
    """`updateMachineState`: count the block on every node of the mask and take `size` bytes greedily in node
    order. Replaces the touched node states in `machine`."""
    for n in nodes:
        node = machine[n]
        table = node.memory_map.get(name)
        memory_map = node.memory_map
        if size > 0 and table is not None and table.free > 0:
            taken = min(size, table.free)
            size -= taken
            memory_map = {
                **memory_map,
                name: replace(table, reserved=table.reserved + taken, free=table.free - taken),
            }
        machine[n] = NUMANodeState(node.assignments + 1, memory_map, nodes)


def _release(machine: dict[int, NUMANodeState], block: MemoryBlock) -> None:
    """`releaseMemory` for one block: give its bytes back node by node, uncount it everywhere."""
    size = block.size
    for n in block.numa_affinity:
        node = machine[n]
        assignments = node.assignments - 1
        cells = node.cells if assignments else (n,)
        table = node.memory_map.get(block.type)
        memory_map = node.memory_map
        if size > 0 and table is not None and table.reserved > 0:
            given = min(size, table.reserved)
            size -= given
            memory_map = {
                **memory_map,
                block.type: replace(table, reserved=table.reserved - given, free=table.free + given),
            }
        machine[n] = NUMANodeState(assignments, memory_map, cells)


def _is_standard_init(pod: Pod, container: Container) -> bool:
    return any(c.name == container.name and c.kind is ContainerKind.INIT for c in pod.init_containers)


def _reusable_after(
    state: MemoryState, pod: Pod, container: Container, blocks: tuple[MemoryBlock, ...]
) -> Reusable:
    """`updatePodReusableMemory`: a standard init container raises what its mask holds to its block sizes;
    any other container uses that up. Entries of other pods are dropped."""
    init = _is_standard_init(pod, container)
    if not init and pod.uid not in state.init_reusable:
        return _NO_REUSABLE
    held = {mask: dict(sizes) for mask, sizes in state.init_reusable.get(pod.uid, {}).items()}
    for block in blocks:
        mask = mask_of(block.numa_affinity)
        if init:
            sizes = held.setdefault(mask, {})
            sizes[block.type] = max(sizes.get(block.type, 0), block.size)
        elif held.get(mask, {}).get(block.type, 0):
            held[mask][block.type] = max(held[mask][block.type] - block.size, 0)
    return {pod.uid: held}


def _shrink_init_blocks(
    containers: dict[str, tuple[MemoryBlock, ...]], pod: Pod, container: Container
) -> dict[str, tuple[MemoryBlock, ...]]:
    """`updateInitContainersMemoryBlocks`: shrink the blocks of the standard init containers before
    `container` by what it reuses, so the pod's container blocks (`containers`, changed in place) add up to
    what the machine charged."""
    for block in containers[container.name]:
        size = block.size
        for init in pod.init_containers:
            if init.name == container.name or size == 0:
                break
            if init.kind is not ContainerKind.INIT or not containers.get(init.name):
                continue
            shrunk = []
            for old in containers[init.name]:
                if old.size and old.type == block.type and set(old.numa_affinity) == set(block.numa_affinity):
                    taken = min(old.size, size)
                    size -= taken
                    old = replace(old, size=old.size - taken)
                shrunk.append(old)
            containers[init.name] = tuple(shrunk)
    return containers


# -- machine and reservation ---------------------------------------------------------------------------------


def _default_tables(node: NUMANode, reserved: Mapping[str, int]) -> Mapping[str, MemoryTable]:
    """`getDefaultMachineState` for one node: hugepages per size, then memory minus every hugepage byte."""
    tables: dict[str, MemoryTable] = {}
    hugepages = 0
    for page, count in sorted(node.hugepages.items()):
        name = hugepage_resource(page)
        total = page * count
        held = reserved.get(name, 0)
        tables[name] = MemoryTable(total, held, total - held, 0, total - held)
        hugepages += total
    held = reserved.get(MEMORY, 0)
    allocatable = node.memory - held - hugepages
    tables[MEMORY] = MemoryTable(node.memory, held, allocatable, 0, allocatable)
    return MappingProxyType(tables)


def _checked_reservation(
    topology: Topology, reserved: Mapping[int, Mapping[str, int]]
) -> dict[int, dict[str, int]]:
    """The reservation with canonical resource names, or InputError naming the rule it breaks."""
    checked: dict[int, dict[str, int]] = {}
    for node_id, resources in sorted(reserved.items()):
        node = topology.numa_by_id.get(node_id)
        if node is None:
            raise InputError(
                RESERVED_MEMORY_RULE,
                f"NUMA node {node_id} does not exist (the machine has {list(topology.numa_node_ids)})",
            )
        pages = {hugepage_resource(page): page * count for page, count in node.hugepages.items()}
        limits = {**pages, MEMORY: node.memory - sum(pages.values())}
        canonical: dict[str, int] = {}
        for name, size in resources.items():
            key = _canonical_resource(name)
            if key not in limits:
                raise InputError(
                    RESERVED_MEMORY_RULE,
                    f"NUMA node {node_id} has no {key} pages to reserve "
                    f"(it has {', '.join(sorted(pages)) or 'none'})",
                )
            if key in canonical:
                raise InputError(
                    RESERVED_MEMORY_RULE, f"NUMA node {node_id}: {key} is reserved twice ({name!r})"
                )
            if size < 0 or size > limits[key]:
                raise InputError(
                    RESERVED_MEMORY_RULE,
                    f"NUMA node {node_id}: {size} bytes of {key} reserved, must be between 0 and the node's "
                    f"{limits[key]}",
                )
            canonical[key] = size
        checked[node_id] = canonical
    if sum(resources.get(MEMORY, 0) for resources in checked.values()) <= 0:
        raise InputError(
            RESERVED_MEMORY_RULE,
            "the Static memory policy needs memory reserved for the system on at least one NUMA node "
            "(kubelet --reserved-memory, e.g. 0:memory=1Gi); none is",
        )
    return checked


def _canonical_resource(name: str) -> str:
    """`memory`, or `hugepages-<size>` with the size spelled as the kubelet does (`hugepages-2048Ki` ->
    `hugepages-2Mi`)."""
    if name == MEMORY:
        return MEMORY
    if name.startswith(HUGEPAGES_PREFIX):
        try:
            return hugepage_resource(bytes_of(name.removeprefix(HUGEPAGES_PREFIX)))
        except InputError:
            pass
    raise InputError(RESERVED_MEMORY_RULE, f"{name!r} is not a memory resource (memory or hugepages-<size>)")
