"""The operator views of the plugin's HTTP endpoint: `/debug/node` and `/debug/explain?pod=NAMESPACE/NAME`.

Both answer JSON, built on the request's thread from the latest `NodeSnapshot` (for explain, the decision log
it carries), never from the live agent. CPU and node sets are Linux list strings (`0-3,8`), memory in bytes,
CPU amounts in millicores.

`/debug/node`: its fields and their types are `report.schema`'s `NodeDocument`, shared with the commands
that read it (`show`, `check`, `simulate --node`); the checkpoint's two files are given as the text the plugin
would write now.

Per NUMA node, `bubbles` are the pods' bubbles and `exclusive` the containers' own CPUs (inside a bubble or
not), `free` what admissions can still take; memory `reserved` is the system reservation, `bubbles` the pods'
budgets and `exclusive` the blocks of containers that hold their own share, inside a bubble or not, as the
PodResources API reports them (a block over several nodes counted in equal parts).
A managed pod is `pending` until it is admitted (at its RunPodSandbox; at its first container when the plugin
did not see the sandbox start, or refused it then), `kept-out` when a restarted plugin could not admit it
again (it runs in the node shared pool), `refused` while its refusal stands. Where the runtime removes a
sandbox refused at its RunPodSandbox, the pod's last such sandbox is listed `refused` until the pod is
admitted, or for `REFUSED_SANDBOX_KEPT_S` after its last refusal. A `cpu_quota_us` null leaves the runtime's
quota alone; `pod_cgroup` is what the plugin writes into the pod cgroup (null: nothing, the kubelet's cgroup
stays); `shape` lets `simulate --node` rebuild the node.

`/debug/explain?pod=NAMESPACE/NAME`: `report.schema`'s `ExplainDocument`, or with 404 an
`ExplainMissingDocument` when no decision about the pod is kept (`refusal` then says what the runtime was
answered, if anything). Each provider's hints per resource: null is "no preference", an empty list "cannot
be placed"; `free` is what each NUMA node had before the decision.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from http import HTTPStatus

from podlevel.agent.records import RefusedSandbox, Sandbox
from podlevel.agent.snapshot import NodeSnapshot
from podlevel.engine.bitmask import nodes_of
from podlevel.engine.cpuset import CPUSet
from podlevel.engine.errors import AdmissionError
from podlevel.engine.explain import Explanation, explain
from podlevel.engine.manager import (
    ContainerDecision,
    Engine,
    EngineConfig,
    NodeState,
    PodDecision,
)
from podlevel.engine.memory_policy import MemoryBlock, MemoryState
from podlevel.engine.topology import Topology
from podlevel.engine.topology_manager import ProviderHints, TopologyHint
from podlevel.httpd import JSON, Query, Reply, Route
from podlevel.podspec.manifest import SHAPE_ANNOTATION, to_annotation
from podlevel.report.schema import (
    BubbleDocument,
    ContainerDocument,
    DecidedContainerDocument,
    DecisionDocument,
    EngineDocument,
    ErrorDocument,
    ExplainDocument,
    ExplainMissingDocument,
    HintDocument,
    NodeDocument,
    NumaCpus,
    NumaDocument,
    NumaMemory,
    PathsDocument,
    PodCgroupDocument,
    PodDocument,
    ProviderDocument,
    TopologyDocument,
)
from podlevel.state.engine_state import checkpoints_of
from podlevel.state.formats import encode

PROVIDERS = ("cpu", "memory")
"""The resource providers in the order admission asks them."""


def views(snapshot: Callable[[], NodeSnapshot], paths: PathsDocument) -> dict[str, Route]:
    def node(_: Query) -> Reply:
        return _json(HTTPStatus.OK, node_json(snapshot(), paths))

    def explain_view(query: Query) -> Reply:
        pod = (query.get("pod") or [""])[0]
        namespace, sep, name = pod.partition("/")
        if not sep or not namespace or not name:
            return _json(HTTPStatus.BAD_REQUEST, {"error": "give the pod as ?pod=NAMESPACE/NAME"})
        current = snapshot()
        refusal = _refusal_of(current, namespace, name)
        recorded = current.decisions.latest(pod)
        if recorded is None:
            missing = ExplainMissingDocument(error=f"no decision about {pod} is kept", refusal=refusal)
            return _json(HTTPStatus.NOT_FOUND, missing)
        explained = explain(current.engine, recorded.state, recorded.pod, within=recorded.within)
        return _json(HTTPStatus.OK, explanation_json(explained, refusal))

    return {"/debug/node": node, "/debug/explain": explain_view}


def _json(status: int, body: object) -> Reply:
    return Reply(status, (json.dumps(body, indent=2) + "\n").encode(), JSON)


def _refusal_of(snapshot: NodeSnapshot, namespace: str, name: str) -> str | None:
    for sandbox_id, sandbox in snapshot.placement.sandboxes.items():
        if (sandbox.namespace, sandbox.name) == (namespace, name) and sandbox_id in snapshot.refusals:
            return snapshot.refusals[sandbox_id]
    for kept in snapshot.refused_sandboxes.values():
        if (kept.sandbox.namespace, kept.sandbox.name) == (namespace, name):
            return kept.refusal
    return None


# -- /debug/node -----------------------------------------------------------------------------------------


def node_json(snapshot: NodeSnapshot, paths: PathsDocument) -> NodeDocument:
    engine, view = snapshot.engine, snapshot.placement
    state = view.state
    cpu, memory = checkpoints_of(engine, state)
    exclusive, own_memory = _held_as_own(engine, state)
    return {
        "generation": snapshot.generation,
        "synchronized": snapshot.synchronized,
        "checkpoint_error": snapshot.checkpoint_error,
        "engine": engine_json(engine.config),
        "topology": topology_json(engine.topology),
        "node_shared_pool": str(engine.node_shared_pool(state)),
        "numa_nodes": numa_usage(
            engine.topology.cpus_by_numa, engine.reserved_cpus, exclusive, state, own_memory
        ),
        "pods": [
            *(_pod_json(snapshot, sandbox_id) for sandbox_id in view.sandboxes),
            *(_refused_pod_json(kept) for kept in snapshot.refused_sandboxes.values()
              if kept.sandbox.id not in view.sandboxes),
        ],
        "checkpoint": {"cpu": encode(cpu).decode(), "memory": encode(memory).decode()},
        "paths": paths,
    }


def engine_json(config: EngineConfig) -> EngineDocument:
    return {
        "scope": config.scope.value,
        "topology_policy": config.topology_policy.value,
        "cpu_policy": config.cpu_policy,
        "memory_policy": config.memory_policy,
        "reserved_cpus": str(config.reserved_cpus),
        "reserved_memory": {str(node): dict(amounts) for node, amounts in config.reserved_memory.items()},
        "cpu_options": config.cpu_options.values(),
        "topology_options": config.topology_options.values(),
    }


def topology_json(topology: Topology) -> TopologyDocument:
    return {
        "cpus": str(topology.all_cpus),
        "numa_nodes": {str(node): str(cpus) for node, cpus in topology.cpus_by_numa.items()},
    }


def _held_as_own(engine: Engine, state: NodeState) -> tuple[CPUSet, list[MemoryBlock]]:
    """The CPUs and the memory blocks containers hold as their own (pod or node exclusive), from one decision
    per pod, as PodResources lists them. The checkpoint cannot tell: it records a pod shared pool container's
    CPUs and blocks beside the exclusive ones."""
    cpus: list[CPUSet] = []
    blocks: list[MemoryBlock] = []
    for uid in state.pods:
        for c in engine.decision(state, uid).containers:
            if c.assignment.exclusive:
                cpus.append(c.cpus)
            if c.memory_own:
                blocks.extend(state.memory.blocks(uid, c.name) or ())
    return CPUSet.union_of(cpus), blocks


def outside_bubbles(memory: MemoryState) -> list[MemoryBlock]:
    """The blocks of containers outside any bubble: all a checkpoint can tell of containers' own memory, as
    it records a pod shared pool container's blocks beside the exclusive ones."""
    return [
        b
        for uid, entries in memory.entries.items()
        if uid not in memory.pod_entries
        for blocks in entries.values()
        for b in blocks
    ]


def numa_usage(
    cpus_by_numa: Mapping[int, CPUSet],
    reserved: CPUSet | None,
    exclusive: CPUSet | None,
    state: NodeState,
    own_memory: Iterable[MemoryBlock],
) -> list[NumaDocument]:
    """Per NUMA node, CPUs and memory reserved, in bubbles, exclusive and free. `reserved` and `exclusive`
    None: unknown (null), which leaves every CPU of the node shared pool counted as free; `own_memory` the
    blocks counted as exclusive."""
    bubbles = CPUSet.union_of(state.cpu.pod_entries.values())
    free = state.cpu.default - (reserved or CPUSet())
    pod_blocks = _block_bytes(b for blocks in state.memory.pod_entries.values() for b in blocks)
    container_blocks = _block_bytes(own_memory)
    usage: list[NumaDocument] = []
    for node, node_cpus in cpus_by_numa.items():
        cpus: NumaCpus = {
            "all": str(node_cpus),
            "reserved": str(reserved & node_cpus) if reserved is not None else None,
            "bubbles": str(bubbles & node_cpus),
            "exclusive": str(exclusive & node_cpus) if exclusive is not None else None,
            "free": str(free & node_cpus),
        }
        usage.append({"node": node, "cpus": cpus, "memory": _memory_usage(state.memory, node, pod_blocks,
                                                                           container_blocks)})
    return usage


def _memory_usage(
    memory: MemoryState,
    node: int,
    pod_blocks: Mapping[tuple[int, str], int],
    container_blocks: Mapping[tuple[int, str], int],
) -> dict[str, NumaMemory]:
    numa = memory.machine.get(node)
    if numa is None:
        return {}
    return {
        name: {
            "total": table.total,
            "reserved": table.system_reserved,
            "allocatable": table.allocatable,
            "bubbles": pod_blocks.get((node, name), 0),
            "exclusive": container_blocks.get((node, name), 0),
            "free": table.free,
        }
        for name, table in sorted(numa.memory_map.items())
    }


def _block_bytes(blocks: Iterable[MemoryBlock]) -> dict[tuple[int, str], int]:
    """(node, resource) -> bytes of the blocks; a block over k nodes counts size/k on each."""
    total: dict[tuple[int, str], int] = {}
    for block in blocks:
        share, rest = divmod(block.size, len(block.numa_affinity))
        for i, node in enumerate(block.numa_affinity):
            key = (node, block.type)
            total[key] = total.get(key, 0) + share + (rest if i == 0 else 0)
    return total


def _pod_json(snapshot: NodeSnapshot, sandbox_id: str) -> PodDocument:
    engine, view = snapshot.engine, snapshot.placement
    sandbox = view.sandboxes[sandbox_id]
    uid = view.admitted.get(sandbox_id)
    decision = engine.decision(view.state, uid) if uid is not None else None
    if uid is not None:
        status = "admitted"
    elif sandbox_id in view.kept_out:
        status = "kept-out"
    elif sandbox_id in snapshot.refusals:
        status = "refused"
    else:
        status = "unmanaged" if SHAPE_ANNOTATION not in sandbox.annotations else "pending"
    wanted = snapshot.pod_cgroups.get(sandbox_id)
    pod_cgroup: PodCgroupDocument | None = None
    if wanted is not None:
        pod_cgroup = {
            "cpus": str(wanted.cpus) if wanted.cpus is not None else None,
            "mems": nodes_text(wanted.mems),
            "unlimited_quota": wanted.unlimited_quota,
            "cpu_period_us": wanted.cpu_period_us,
            "failure": snapshot.pod_cgroup_failures.get(sandbox_id),
        }
    containers: list[ContainerDocument] = []
    for container_id in view.by_sandbox.get(sandbox_id, ()):
        name = view.containers[container_id][1]
        settings = view.applied.get(container_id)
        if settings is None:
            continue
        containers.append({
            "id": container_id,
            "name": name,
            "assignment": settings.assignment.value,
            "cpus": str(settings.cpus),
            "mems": nodes_text(settings.mems),
            "cpu_quota_us": settings.cpu_quota_us,
            "cpu_period_us": settings.cpu_period_us,
            "cgroups_path": snapshot.cgroups_paths.get(container_id),
        })
    return _pod_document(
        sandbox, status, snapshot.refusals.get(sandbox_id),
        shape=to_annotation(view.state.pods[uid]) if uid is not None else None,
        bubble=bubble_json(decision) if decision is not None else None,
        pod_cgroup=pod_cgroup,
        containers=containers,
    )


def _refused_pod_json(kept: RefusedSandbox) -> PodDocument:
    """A pod whose last sandbox was refused and removed by the runtime: nothing of it runs."""
    return _pod_document(kept.sandbox, "refused", kept.refusal)


def _pod_document(
    sandbox: Sandbox, status: str, refusal: str | None, *, shape: str | None = None,
    bubble: BubbleDocument | None = None, pod_cgroup: PodCgroupDocument | None = None,
    containers: list[ContainerDocument] | None = None,
) -> PodDocument:
    return {
        "namespace": sandbox.namespace,
        "name": sandbox.name,
        "uid": sandbox.uid,
        "sandbox_id": sandbox.id,
        "managed": SHAPE_ANNOTATION in sandbox.annotations,
        "status": status,
        "refusal": refusal,
        "shape": shape,
        "cgroup_parent": sandbox.cgroup_parent,
        "bubble": bubble,
        "pod_cgroup": pod_cgroup,
        "containers": containers or [],
    }


# -- decisions and explanations ---------------------------------------------------------------------------


def bubble_json(decision: PodDecision) -> BubbleDocument | None:
    if decision.bubble_cpus is None and decision.bubble_mems is None:
        return None
    return {
        "cpus": str(decision.bubble_cpus) if decision.bubble_cpus is not None else None,
        "mems": nodes_text(decision.bubble_mems) if decision.bubble_mems is not None else None,
    }


def container_json(decision: ContainerDecision) -> DecidedContainerDocument:
    return {
        "name": decision.name,
        "kind": decision.kind.value,
        "assignment": decision.assignment.value,
        "cpus": str(decision.cpus),
        "mems": nodes_text(decision.mems),
        "cpu_quota_us": decision.cpu_quota_us,
        "cpu_period_us": decision.cpu_period_us,
    }


def decision_json(decision: PodDecision) -> DecisionDocument:
    return {"bubble": bubble_json(decision), "containers": [container_json(c) for c in decision.containers]}


def error_json(error: AdmissionError | None) -> ErrorDocument | None:
    """A refusal's kubelet error type and message (explain's and simulate's `error`)."""
    return None if error is None else {"type": error.type, "message": error.message}


def explanation_json(explained: Explanation, refusal: str | None) -> ExplainDocument:
    pod, error = explained.pod, explained.error
    return {
        "pod": {"namespace": pod.namespace, "name": pod.name, "uid": pod.uid},
        "path": explained.path.value,
        "scope": explained.scope.value,
        "topology_policy": explained.policy.value,
        "within": str(explained.within) if explained.within is not None else None,
        "free": [{"node": n.node, "cpus": str(n.cpus), "memory": dict(n.memory)} for n in explained.free],
        "alignments": [
            {
                "container": alignment.container,
                "requested": dict(sorted(alignment.requested.items())),
                "hints": {
                    provider: _provider_json(hints)
                    for provider, hints in zip(PROVIDERS, alignment.providers, strict=True)
                },
                "merged": _hint_json(alignment.merged),
                "admitted": alignment.admitted,
            }
            for alignment in explained.alignments
        ],
        "admitted": error is None,
        "error": error_json(error),
        "decision": decision_json(explained.decision) if explained.decision is not None else None,
        "refusal": refusal,
    }


def _provider_json(hints: ProviderHints) -> ProviderDocument | None:
    if hints is None:
        return None
    return {
        resource: None if listed is None else [_hint_json(hint) for hint in listed]
        for resource, listed in sorted(hints.items())
    }


def _hint_json(hint: TopologyHint) -> HintDocument:
    nodes = None if hint.affinity is None else list(nodes_of(hint.affinity))
    return {"numa_nodes": nodes, "preferred": hint.preferred}


def nodes_text(nodes: Iterable[int]) -> str:
    """NUMA node ids as a Linux list (`0-1,3`)."""
    return str(CPUSet(nodes))
