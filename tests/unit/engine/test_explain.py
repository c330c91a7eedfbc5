"""engine.explain: admission replayed with a trace — the hints, merges and refusals admission itself made."""

from __future__ import annotations

from podlevel.engine.cpuset import CPUSet
from podlevel.engine.errors import EMPTY_POD_SHARED_POOL_ERROR, TOPOLOGY_AFFINITY_ERROR
from podlevel.engine.explain import explain
from podlevel.engine.manager import AdmissionPath
from podlevel.engine.pod import CPU, MEMORY
from podlevel.engine.topology_manager import Scope, TopologyHint, TopologyPolicyName
from support.builders import GI, MI, app, fast_path, guaranteed, new_engine, pod

NODE_0, NODE_1 = 0b01, 0b10


def test_an_admitted_pod_level_pod_shows_both_providers_hints_the_merge_and_the_decision() -> None:
    engine = new_engine()
    state = engine.initial_state()

    explained = explain(engine, state, fast_path())

    assert (explained.path, explained.scope, explained.policy) == (
        AdmissionPath.POD_LEVEL, Scope.POD, TopologyPolicyName.SINGLE_NUMA_NODE)
    assert [(f.node, str(f.cpus)) for f in explained.free] == [(0, "1-3,9-11"), (1, "4-7,12-15")]
    assert explained.free[0].memory[MEMORY] == explained.free[1].memory[MEMORY] - 100 * MI
    [alignment] = explained.alignments
    assert alignment.container is None and alignment.admitted
    assert alignment.requested == {CPU: 4000, MEMORY: GI}
    cpu_hints, memory_hints = alignment.providers
    assert cpu_hints is not None and memory_hints is not None
    assert TopologyHint(NODE_0, True) in cpu_hints[CPU] and TopologyHint(NODE_1, True) in cpu_hints[CPU]
    assert TopologyHint(NODE_0, True) in memory_hints[MEMORY]
    assert alignment.merged == TopologyHint(NODE_0, True)
    assert explained.error is None
    assert explained.decision == engine.admit(state, fast_path())[1]


def test_a_refusal_names_the_rule_and_the_merge_that_failed() -> None:
    engine = new_engine()
    state, _ = engine.admit(engine.initial_state(), fast_path("first", cpus=6, exclusive=2))
    too_big = fast_path("second", cpus=9, exclusive=2)

    explained = explain(engine, state, too_big)

    assert explained.decision is None and explained.error is not None
    assert explained.error.type == TOPOLOGY_AFFINITY_ERROR
    assert "requested cpu=9" in explained.error.message
    assert "node 0: cpu=0" in explained.error.message and "node 1: cpu=8" in explained.error.message
    [alignment] = explained.alignments
    assert not alignment.admitted
    assert [len(f.cpus) for f in explained.free] == [0, 8]


def test_an_empty_pod_shared_pool_refusal_keeps_its_own_type() -> None:
    engine = new_engine()

    explained = explain(engine, engine.initial_state(), fast_path(cpus=4, exclusive=4))

    assert explained.error is not None and explained.error.type == EMPTY_POD_SHARED_POOL_ERROR
    assert "empty pod shared pool rule" in explained.error.message


def test_container_scope_shows_one_merge_per_container_on_the_state_its_predecessors_left() -> None:
    engine = new_engine(scope=Scope.CONTAINER)
    two = pod("two", app("a", guaranteed(4000, GI)), app("b", guaranteed(4000, GI)))

    explained = explain(engine, engine.initial_state(), two)

    assert explained.path is AdmissionPath.CONTAINER_SCOPE
    assert [(a.container, a.admitted) for a in explained.alignments] == [("a", True), ("b", True)]
    first, second = (a.merged.affinity for a in explained.alignments)
    assert first is not None and second is not None


def test_under_the_none_policy_there_is_no_merge_and_a_confinement_is_reported() -> None:
    engine = new_engine(topology_policy=TopologyPolicyName.NONE)
    within = CPUSet.parse("4-7")

    explained = explain(engine, engine.initial_state(), fast_path(), within=within)

    assert explained.alignments == () and explained.within == within
    assert explained.decision is not None and explained.decision.bubble_cpus == within
