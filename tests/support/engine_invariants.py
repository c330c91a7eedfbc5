"""The node engine's invariants over one state, for every test that drives the engine (directly, through
Placement, or through the NRI handler): no CPU held exclusively twice, no bubble overlapping another, nothing
reserved handed out, and nothing leaked (reserved, the node shared pool, bubbles and node-exclusive slices
cover every CPU)."""

from __future__ import annotations

import itertools

from podlevel.engine.cpuset import CPUSet
from podlevel.engine.manager import Assignment, Engine, NodeState
from podlevel.engine.pod import ContainerKind
from podlevel.engine.topology_manager import TopologyPolicyName

EXCLUSIVE = (Assignment.POD_EXCLUSIVE, Assignment.NODE_EXCLUSIVE)


def check_invariants(engine: Engine, state: NodeState) -> None:
    topology = engine.topology
    reserved = engine.reserved_cpus
    shared = engine.node_shared_pool(state)
    bubbles: list[CPUSet] = []
    node_exclusive: list[tuple[str, CPUSet]] = []
    long_running: list[CPUSet] = []
    for uid in state.pods:
        decision = engine.decision(state, uid)
        if decision.bubble_cpus is not None:
            bubbles.append(decision.bubble_cpus)
            if engine.config.topology_policy is TopologyPolicyName.SINGLE_NUMA_NODE:
                assert len(topology.numa_nodes_of(decision.bubble_cpus)) == 1
        for c in decision.containers:
            if c.assignment is Assignment.POD_EXCLUSIVE:
                assert decision.bubble_cpus is not None and c.cpus.is_subset(decision.bubble_cpus)
            if c.assignment is Assignment.NODE_EXCLUSIVE:
                node_exclusive.append((uid, c.cpus))
            if c.assignment in EXCLUSIVE:
                assert c.cpu_quota_us == -1 and c.cpus
                if c.kind is not ContainerKind.INIT:
                    long_running.append(c.cpus)
            if c.assignment is Assignment.POD_SHARED:
                assert decision.bubble_cpus is not None and c.cpus.is_subset(decision.bubble_cpus)
                assert c.cpus and c.cpu_quota_us is not None and c.cpu_quota_us > 0
            if c.assignment is Assignment.NODE_SHARED:
                assert c.cpus == shared and c.cpu_quota_us is None
    for a, b in itertools.combinations(long_running, 2):
        assert a.is_disjoint(b), f"{a} and {b} are both exclusive"
    for a, b in itertools.combinations(bubbles, 2):
        assert a.is_disjoint(b), f"bubbles {a} and {b} overlap"
    for (uid_a, a), (uid_b, b) in itertools.combinations(node_exclusive, 2):
        assert uid_a == uid_b or a.is_disjoint(b)
    held = CPUSet()
    for cpus in [*bubbles, *(cpus for _, cpus in node_exclusive)]:
        assert cpus.is_disjoint(reserved), f"reserved CPUs {reserved} handed out in {cpus}"
        assert cpus.is_disjoint(shared), f"{cpus} is both held and in the node shared pool {shared}"
        held |= cpus
    assert held | shared | reserved == topology.all_cpus
