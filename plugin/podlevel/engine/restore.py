"""Restore: whether a pod a checkpoint recorded can be taken back where it was, and why not.

The kubelet restores its managers' state from their checkpoints (`validateState`) and re-allocates what no
longer fits. Here each running pod is taken back on its own: admitted by today's rules confined to the CPUs
its checkpoint recorded, its recorded exclusive slices kept when the rules give the same shape, its recorded
memory blocks kept when the memory policy and the topology manager still allow them. Every sentence saying
why a pod's memory could not stay is written here; where a pod goes when it cannot stay at all is the agent's
plan (`agent.resync`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import NamedTuple

from podlevel.engine.bitmask import mask_of
from podlevel.engine.cpu_policy import CPUState
from podlevel.engine.cpuset import CPUSet
from podlevel.engine.errors import AdmissionError
from podlevel.engine.manager import Engine, NodeState, PodDecision
from podlevel.engine.memory_policy import (
    MemoryBlock,
    MemoryState,
    NUMANodeState,
    Owned,
    PodEntries,
    Requests,
    StaticMemoryPolicy,
    charge,
    container_requests,
    describe,
    table_of,
)
from podlevel.engine.pod import ContainerKind, Pod
from podlevel.engine.quantity import format_bytes
from podlevel.engine.shared_map import with_item
from podlevel.engine.topology_manager import Scope, TopologyPolicyName


@dataclass(frozen=True, slots=True)
class Checkpointed:
    """What a restarted plugin's checkpoints recorded, to take its running pods back onto."""

    cpu: CPUState
    memory: MemoryState | None = None
    """None when the memory checkpoint was missing or unusable: pods get their memory by today's rules."""


class Restored(NamedTuple):
    """A pod taken back from a checkpoint (`restore`)."""

    state: NodeState
    decision: PodDecision
    memory_moved: str | None
    """Why its recorded memory blocks were refused and today's rules placed its memory; None when they were
    taken back, or none were recorded (nor are pinned now)."""


def restore(
    engine: Engine, state: NodeState, pod: Pod, recorded: Checkpointed, within: CPUSet | None = None
) -> Restored:
    """Take a pod back onto the CPUs a checkpoint recorded for it: its bubble, CPUs no container runs on
    included, and each container's exclusive CPUs exactly; and onto its recorded memory blocks.

    The pod is admitted by today's rules confined to the recorded CPUs, so a record that no longer fits the
    settings (a CPU now reserved or gone, another policy) is refused with the rule it breaks (AdmissionError),
    and the caller re-places the pod. When the rules give the same shape (the same bubble, slices of the same
    sizes for the same containers), the recorded slices are kept as they were; otherwise the rules' own choice
    inside the recorded CPUs stands. Its recorded memory blocks are kept when they are valid under today's
    settings and the topology manager admits them with its CPUs; otherwise today's rules place its memory, and
    `memory_moved` says why. A pod the CPU checkpoint does not hold (it had no exclusive CPUs, or the CPU
    policy was none) is admitted on `within`, and still gets its recorded memory back.
    """
    held = recorded.cpu.pod_cpus(pod.uid)
    if held is None:
        held = within
    new, _ = engine.admit(state, pod, within=held)
    if pod.uid in state.pods:
        return Restored(new, engine.decision(new, pod.uid), None)
    moved = None
    if recorded.memory is not None:
        new, moved = _take_back_memory(engine, state, new, pod, recorded.memory, held)
    slices = recorded.cpu.entries.get(pod.uid, {})
    bubble = recorded.cpu.pod_entries.get(pod.uid)
    new = replace(new, cpu=_with_recorded_slices(state.cpu, new.cpu, pod, bubble, slices))
    return Restored(new, engine.decision(new, pod.uid), moved)


def _take_back_memory(
    engine: Engine,
    state: NodeState,
    admitted: NodeState,
    pod: Pod,
    recorded: MemoryState,
    within: CPUSet | None,
) -> tuple[NodeState, str | None]:
    """`admitted` (the pod admitted again on `state` by today's rules, its CPUs confined to `within`) with its
    `recorded` memory blocks instead, when the memory policy takes them back (`take_back`) and the topology
    manager admits them with the pod's CPUs, as the kubelet does with the hints it regenerates from a restored
    pod's blocks; else `admitted`, and why not."""
    memory, moved = take_back(engine.memory_policy, state.memory, admitted.memory, pod, recorded)
    if memory is admitted.memory:
        return admitted, moved
    try:
        kept, _ = engine.admit(replace(state, memory=memory), pod, within=within)
    except AdmissionError as err:
        policy = engine.config.topology_policy.value
        return admitted, (f"the topology alignment changed: the topology policy {policy} refuses its CPUs "
                          f"with its recorded memory ({err.type})")
    misaligned = _pod_scope_misalignment(engine, kept, pod, memory)
    return (admitted, misaligned) if misaligned is not None else (kept, None)


def _pod_scope_misalignment(engine: Engine, admitted: NodeState, pod: Pod, memory: MemoryState) -> str | None:
    """Why a pod's recorded memory cannot stand beside its CPUs under pod scope, or None. Pod scope aligns a
    pod once: every memory block on the NUMA nodes of one hint, which under `restricted` and
    `single-numa-node` also hold its exclusive CPUs. The re-admission cannot see this for a pod of several
    containers (the hint it rebuilds from their blocks matches none), so it is checked here."""
    policy = engine.config.topology_policy
    if engine.config.scope is not Scope.POD or policy is TopologyPolicyName.NONE:
        return None
    blocks = [*memory.pod_entries.get(pod.uid, ()),
              *(block for owned in memory.entries.get(pod.uid, {}).values() for block in owned)]
    masks = {block.numa_affinity for block in blocks}
    nodes = sorted({node for mask in masks for node in mask})
    cpus = admitted.cpu.pod_cpus(pod.uid)
    cpu_nodes = engine.topology.numa_nodes_of(cpus) if cpus else ()
    strict = policy in (TopologyPolicyName.RESTRICTED, TopologyPolicyName.SINGLE_NUMA_NODE)
    if len(masks) <= 1 and not (strict and set(cpu_nodes) - set(nodes)):
        return None
    return (f"the topology alignment changed: pod scope under the topology policy {policy.value} aligns "
            f"a pod on one set of NUMA nodes, and its recorded memory is on NUMA nodes {nodes} in "
            f"{len(masks)} groups, its CPUs on NUMA nodes {list(cpu_nodes)}")


def _with_recorded_slices(
    before: CPUState, admitted: CPUState, pod: Pod, bubble: CPUSet | None, slices: Mapping[str, CPUSet]
) -> CPUState:
    """`admitted` with the pod's exclusive CPUs swapped for the recorded ones, when that changes nothing else:
    the same bubble, the same containers with the same number of CPUs, those that run side by side pairwise
    disjoint (a standard init container's CPUs are reused by the containers after it), and (without a
    bubble) taken from what was free before."""
    pod_uid = pod.uid
    chosen = admitted.entries.get(pod_uid, {})
    if admitted.pod_entries.get(pod_uid) != bubble or chosen.keys() != slices.keys():
        return admitted
    if any(len(slices[name]) != len(cpus) for name, cpus in chosen.items()):
        return admitted
    finished = {c.name for c in pod.init_containers if c.kind is ContainerKind.INIT}
    side_by_side = [cpus for name, cpus in slices.items() if name not in finished]
    if len(CPUSet.union_of(side_by_side)) != sum(len(cpus) for cpus in side_by_side):
        return admitted
    recorded = CPUSet.union_of(slices.values())
    default = admitted.default
    if bubble is None:
        taken = CPUSet.union_of(chosen.values())
        if not recorded.is_subset(before.default):
            return admitted
        default = (default | taken) - recorded
    elif not recorded.is_subset(bubble):
        return admitted
    return replace(admitted, default=default, entries=with_item(admitted.entries, pod_uid, dict(slices)))


# -- memory ----------------------------------------------------------------------------------------------


def take_back(
    policy: StaticMemoryPolicy | None,
    state: MemoryState,
    admitted: MemoryState,
    pod: Pod,
    recorded: MemoryState,
) -> tuple[MemoryState, str | None]:
    """A restored pod's memory: the blocks a checkpoint `recorded` for it, charged onto `state` (the node
    before the pod was admitted again) as admission charges, when `policy` allows them; else `admitted`
    itself (what today's rules gave the pod) and why not (None when nothing was recorded nor is pinned).
    Under the memory policy None (`policy` None) nothing is taken back.

    The recorded blocks stand when they are on NUMA nodes that have their resources, are the sizes today's
    rules give (the same containers, resources and bytes; a standard init container's at most its request:
    how far it was shrunk depends on where the containers after it were placed), and fit the free memory
    after reserved memory without mixing single-node and multi-node allocations on a node. Whether the
    topology manager aligns them with the pod's CPUs is `restore`'s question.
    """
    pod_uid = pod.uid
    containers = recorded.entries.get(pod_uid, {})
    pod_blocks = recorded.pod_entries.get(pod_uid)
    if policy is None:
        if containers or pod_blocks is not None:
            return admitted, "memory is no longer managed (memory policy None); its recorded blocks are freed"
        return admitted, None
    had = _owned(containers, pod_blocks)
    has = _owned(admitted.entries.get(pod_uid, {}), admitted.pod_entries.get(pod_uid))
    shrinkable = {_owner(c.name): container_requests(pod, c) for c in pod.init_containers
                  if c.kind is ContainerKind.INIT}
    if not had:
        pinned = f"it had no recorded memory blocks; today's rules pin it to {_on(_flat(has))}"
        return admitted, pinned if has else None
    try:
        _check_blocks(state, had, has, shrinkable)
        machine = _recharged(policy, state, _flat(had) if pod_blocks is None else pod_blocks)
    except _Refused as refused:
        return admitted, str(refused)
    pod_entries: PodEntries = state.pod_entries
    if pod_blocks is not None:
        pod_entries = with_item(pod_entries, pod_uid, pod_blocks)
    return MemoryState(machine, with_item(state.entries, pod_uid, containers), pod_entries), None


class _Refused(Exception):
    """Why a restored pod's recorded memory blocks cannot be taken back (`take_back`)."""


def _check_blocks(state: MemoryState, had: Owned, has: Owned, shrinkable: Mapping[str, Requests]) -> None:
    """Raise _Refused unless the recorded blocks (`had`) are on nodes that have their resources and are the
    sizes of today's (`has`), or for the owners in `shrinkable` at most their requests."""
    machine = state.machine
    for block in _flat(had):
        if any(n not in machine or block.type not in machine[n].memory_map for n in block.numa_affinity):
            raise _Refused(f"its recorded {block.type} block is on {_on([block])}, where the machine has no "
                           f"{block.type}")
    for owner in sorted(had.keys() | has.keys()):
        recorded, today = _sizes(had.get(owner, ())), _sizes(has.get(owner, ()))
        requested = shrinkable.get(owner)
        if requested is not None and all(size <= requested.get(n, 0) for n, size in recorded.items()):
            continue
        if recorded != today:
            raise _Refused(f"{owner} was recorded with {describe(recorded)} pinned, today's rules give "
                           f"{describe(today)}")


def _recharged(
    policy: StaticMemoryPolicy, state: MemoryState, blocks: Iterable[MemoryBlock]
) -> dict[int, NUMANodeState]:
    """`state`'s machine with `blocks` charged, or _Refused naming the rule the first that does not fit
    breaks: free memory after reserved memory, or the node groups."""
    machine = dict(state.machine)
    for block in blocks:
        mask, view = mask_of(block.numa_affinity), MemoryState(machine)
        if policy.violates_groups(view, mask) or policy.inside_group(view, mask):
            raise _Refused(f"its recorded memory on {_on([block])} would mix single-node and multi-node "
                           "memory allocations on a node")
        if not policy.fits(view, mask, {block.type: block.size}):
            free = sum(table_of(machine[n], block.type).free for n in block.numa_affinity)
            raise _Refused(f"not enough {block.type} free on {_on([block])} after reserved memory: "
                           f"{format_bytes(free)} for its recorded {format_bytes(block.size)} block")
        charge(machine, block.numa_affinity, block.type, block.size)
    return machine


def _owner(container_name: str) -> str:
    return f"its container {container_name}"


def _owned(containers: Owned, pod_blocks: tuple[MemoryBlock, ...] | None) -> Owned:
    owned = {_owner(name): blocks for name, blocks in containers.items()}
    return owned if pod_blocks is None else {"its pod budget": pod_blocks, **owned}


def _sizes(blocks: Iterable[MemoryBlock]) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for block in blocks:
        sizes[block.type] = sizes.get(block.type, 0) + block.size
    return sizes


def _flat(owned: Owned) -> list[MemoryBlock]:
    return [block for blocks in owned.values() for block in blocks]


def _on(blocks: Iterable[MemoryBlock]) -> str:
    """The NUMA nodes the blocks span, for messages."""
    nodes = sorted({n for block in blocks for n in block.numa_affinity})
    return f"NUMA node {nodes[0]}" if len(nodes) == 1 else f"NUMA nodes {nodes}"
