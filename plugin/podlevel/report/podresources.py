"""The kubelet's PodResources v1 gRPC service (`v1.PodResourcesLister`), answered from the agent's snapshots.

Monitoring agents and device plugins already read a node's CPU and memory assignments from this API; with the
kubelet's managers off, the plugin is what assigns them, so it serves the same answers on a socket of its own.

Reporting rules (the kubelet's with pod-level resource managers, 1.37):
- topology-manager scope `pod`, a pod with a bubble: the pod-level `cpu_ids` are the bubble and the pod-level
  `memory` the pod budget's blocks. A container with an exclusive slice reports it (its CPUs, and its memory
  blocks when it has an exclusive memory share); a container in the pod shared pool reports empty lists, so
  nothing is counted twice and consumers get the pool as `pod.cpu_ids - union(container.cpu_ids)`.
- scope `container`, or a pod without pod-level resources: the pod-level fields stay empty; a container with
  exclusive CPUs from the node reports them and its memory blocks, the others empty lists.
- a pod the plugin does not manage (no shape, refused, not admitted yet): listed with its containers, no CPUs
  and no memory, as the kubelet lists a pod its managers left alone.
Containers are listed as the kubelet lists them: for an admitted pod, its shape's sidecars then its app
containers (the kubelet lists the spec's; standard init and ephemeral containers are not listed); for any
other pod, the containers the runtime has created, in that order.

Every answer reads one `NodeSnapshot`, taken once per call, so it is consistent and never waits on an event.

The answers know nothing of their transport: the socket, and gRPC with it, is `report.podresources_socket`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from podlevel._proto.podresources import api_pb2 as pb
from podlevel.agent.records import Sandbox
from podlevel.agent.snapshot import NodeSnapshot
from podlevel.engine.cpuset import CPUSet
from podlevel.engine.memory_policy import MemoryBlock
from podlevel.engine.pod import ContainerKind

_LISTED_KINDS: Final = (ContainerKind.SIDECAR, ContainerKind.APP)


def memory_of(blocks: Iterable[MemoryBlock]) -> list[pb.ContainerMemory]:
    return [
        pb.ContainerMemory(
            memory_type=block.type,
            size=block.size,
            topology=pb.TopologyInfo(nodes=[pb.NUMANode(ID=node) for node in block.numa_affinity]),
        )
        for block in blocks
    ]


def pod_resources(snapshot: NodeSnapshot, sandbox: Sandbox) -> pb.PodResources:
    """One pod's entry, by the reporting rules above."""
    answer = pb.PodResources(name=sandbox.name, namespace=sandbox.namespace)
    view = snapshot.placement
    uid = view.admitted.get(sandbox.id)
    pod = view.state.pods.get(uid) if uid is not None else None
    if pod is None:
        answer.containers.extend(
            pb.ContainerResources(name=view.containers[cid][1]) for cid in view.by_sandbox.get(sandbox.id, ())
        )
        return answer
    state = view.state
    bubble = state.cpu.pod_entries.get(pod.uid)
    pod_blocks = state.memory.pod_entries.get(pod.uid)
    if bubble is not None:
        answer.cpu_ids.extend(bubble.sorted())
    if pod_blocks is not None:
        answer.memory.extend(memory_of(pod_blocks))
    decisions = {d.name: d for d in snapshot.engine.decision(state, pod.uid).containers}
    for container in pod.all_containers:
        if container.kind not in _LISTED_KINDS:
            continue
        entry = pb.ContainerResources(name=container.name)
        decision = decisions.get(container.name)
        if decision is not None and decision.assignment.exclusive:
            entry.cpu_ids.extend(decision.cpus.sorted())
        if decision is not None and decision.memory_own:
            entry.memory.extend(memory_of(state.memory.blocks(pod.uid, container.name) or ()))
        answer.containers.append(entry)
    return answer


def one_per_pod(snapshot: NodeSnapshot, sandboxes: Iterable[Sandbox]) -> dict[str, Sandbox]:
    """pod uid -> its sandbox: a pod whose sandbox was recreated counts once, by the sandbox holding its
    allocations when one does."""
    admitted = snapshot.placement.admitted
    by_uid: dict[str, Sandbox] = {}
    for sandbox in sandboxes:
        if sandbox.uid not in by_uid or sandbox.id in admitted:
            by_uid[sandbox.uid] = sandbox
    return by_uid


def listed_sandboxes(snapshot: NodeSnapshot) -> list[Sandbox]:
    """One sandbox per pod, by namespace and name."""
    listed = one_per_pod(snapshot, snapshot.placement.sandboxes.values()).values()
    return sorted(listed, key=lambda s: (s.namespace, s.name, s.uid))


def list_response(snapshot: NodeSnapshot) -> pb.ListPodResourcesResponse:
    return pb.ListPodResourcesResponse(
        pod_resources=[pod_resources(snapshot, sandbox) for sandbox in listed_sandboxes(snapshot)]
    )


def find_pod(snapshot: NodeSnapshot, namespace: str, name: str) -> pb.PodResources | None:
    """The pod `List` would list under that name (the lowest uid, if a recreated pod's old sandbox lingers),
    found without sorting the node."""
    named = (s for s in snapshot.placement.sandboxes.values() if (s.namespace, s.name) == (namespace, name))
    by_uid = one_per_pod(snapshot, named)
    return pod_resources(snapshot, by_uid[min(by_uid)]) if by_uid else None


def allocatable_response(snapshot: NodeSnapshot) -> pb.AllocatableResourcesResponse:
    """What the managers may hand out: all CPUs but the reserved ones, and per NUMA node and memory type the
    allocatable bytes (none of either when that manager's policy is off, as the kubelet answers)."""
    engine = snapshot.engine
    static = engine.config.cpu_policy == "static"
    cpus = engine.topology.all_cpus - engine.reserved_cpus if static else CPUSet()
    machine = snapshot.placement.state.memory.machine
    blocks = [
        MemoryBlock((node,), name, table.allocatable)
        for node, numa in sorted(machine.items())
        for name, table in sorted(numa.memory_map.items())
        if table.allocatable > 0
    ]
    return pb.AllocatableResourcesResponse(cpu_ids=cpus.sorted(), memory=memory_of(blocks))
