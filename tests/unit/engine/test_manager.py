"""The node engine: the documentation's example pods (deploy/examples/) under both scopes and every topology
policy, refusals, removal, quota, restoring from the checkpoints."""

from __future__ import annotations

import pytest

from podlevel.engine.cpu_policy import CPUManagerOptions
from podlevel.engine.cpuset import CPUSet
from podlevel.engine.errors import (
    EmptyPodSharedPoolError,
    SMTAlignmentError,
    TopologyAffinityError,
    UnexpectedAdmissionError,
)
from podlevel.engine.manager import (
    CFS_PERIOD_US,
    Assignment,
    ContainerDecision,
    Engine,
    NodeState,
    PodDecision,
)
from podlevel.engine.pod import ContainerKind, Pod
from podlevel.engine.topology import Topology, from_spec
from podlevel.engine.topology_manager import Scope, TopologyPolicyName
from support.builders import (
    GI,
    MI,
    SMALL,
    app,
    burstable,
    example,
    guaranteed,
    init,
    new_engine,
    pod,
    sidecar,
)

POLICIES = list(TopologyPolicyName)


def engine(
    scope: Scope = Scope.POD,
    policy: TopologyPolicyName = TopologyPolicyName.SINGLE_NUMA_NODE,
    **config: object,
) -> Engine:
    """The default engine on SMALL (first core reserved, as `simulate` does) in `scope` under `policy`."""
    return new_engine(scope=scope, topology_policy=policy, **config)


def by_name(decision: PodDecision) -> dict[str, ContainerDecision]:
    return {c.name: c for c in decision.containers}


def one_numa_node(topology: Topology, cpus: CPUSet) -> bool:
    return len(topology.numa_nodes_of(cpus)) == 1


def memory_free(state: NodeState, node: int) -> int:
    return state.memory.machine[node].memory_map["memory"].free


# -- the documentation's three example pods -----------------------------------------------------------


@pytest.mark.parametrize("policy", POLICIES, ids=str)
def test_pod_scope_mixed_under_pod_scope(policy: TopologyPolicyName) -> None:
    eng = engine(Scope.POD, policy)
    start = eng.initial_state()
    state, decision = eng.admit(start, example("pod-scope-mixed"))
    bubble = decision.bubble_cpus
    assert bubble is not None and len(bubble) == 4 and one_numa_node(eng.topology, bubble)
    (node,) = eng.topology.numa_nodes_of(bubble)
    assert decision.bubble_mems == (node,)
    containers = by_name(decision)
    main = containers["main-app"]
    assert main.assignment is Assignment.POD_EXCLUSIVE and len(main.cpus) == 2 and main.cpus.is_subset(bubble)
    assert (main.cpu_quota_us, main.cpu_period_us) == (-1, CFS_PERIOD_US)
    for name in ("metrics-sidecar", "logging-sidecar"):
        shared = containers[name]
        assert shared.kind is ContainerKind.SIDECAR
        assert shared.assignment is Assignment.POD_SHARED
        assert shared.cpus == bubble - main.cpus
        assert shared.cpu_quota_us == 2 * CFS_PERIOD_US  # the leftover 2 CPUs of the 4 CPU budget
    assert all(c.mems == (node,) for c in decision.containers)
    assert eng.node_shared_pool(state) == eng.topology.all_cpus - bubble
    assert memory_free(state, node) == memory_free(start, node) - 4 * GI


def test_pod_scope_mixed_exact_placement() -> None:
    """Packed best fit on an empty node: the first two free cores of node 0, main-app on the first."""
    _, decision = engine().admit(engine().initial_state(), example("pod-scope-mixed"))
    assert decision.bubble_cpus == CPUSet.parse("1-2,9-10")
    assert by_name(decision)["main-app"].cpus == CPUSet.parse("1,9")
    assert by_name(decision)["logging-sidecar"].cpus == CPUSet.parse("2,10")


@pytest.mark.parametrize("policy", POLICIES, ids=str)
def test_empty_shared_pool_is_refused_under_pod_scope(policy: TopologyPolicyName) -> None:
    eng = engine(Scope.POD, policy)
    state = eng.initial_state()
    with pytest.raises(EmptyPodSharedPoolError) as caught:
        eng.admit(state, example("empty-shared-pool"))
    assert (caught.value.type, caught.value.resource) == ("EmptyPodSharedPoolError", "cpu")
    assert caught.value.message == (
        "pod default/empty-shared-pool: exclusive containers take 4 of the pod's 4 CPUs, leaving an empty "
        "pod shared pool for logging-sidecar (empty pod shared pool rule)"
    )


@pytest.mark.parametrize("policy", POLICIES, ids=str)
def test_an_empty_memory_shared_pool_is_named_when_the_cpus_keep_theirs(policy: TopologyPolicyName) -> None:
    """A non-integer CPU request keeps `app` out of the exclusive CPUs, but its memory takes the budget."""
    eng = engine(Scope.POD, policy)
    hog = pod("memory-hog", app("app", guaranteed(1500, 4 * GI)), app("log"), budget=guaranteed(4000, 4 * GI))
    with pytest.raises(EmptyPodSharedPoolError) as caught:
        eng.admit(eng.initial_state(), hog)
    assert caught.value.message == (
        f"pod default/memory-hog: exclusive containers take {4 * GI} of the pod's {4 * GI} bytes of memory, "
        "leaving an empty pod shared pool for log (empty pod shared pool rule)"
    )


@pytest.mark.parametrize("policy", POLICIES, ids=str)
def test_empty_shared_pool_is_admitted_under_container_scope(policy: TopologyPolicyName) -> None:
    eng = engine(Scope.CONTAINER, policy)
    _, decision = eng.admit(eng.initial_state(), example("empty-shared-pool"))
    containers = by_name(decision)
    assert decision.bubble_cpus is None and decision.bubble_mems is None
    assert containers["metrics-sidecar"].assignment is Assignment.NODE_EXCLUSIVE
    assert len(containers["metrics-sidecar"].cpus) == 1
    assert (
        containers["main-app"].assignment is Assignment.NODE_EXCLUSIVE
        and len(containers["main-app"].cpus) == 3
    )
    assert containers["main-app"].cpus.is_disjoint(containers["metrics-sidecar"].cpus)
    assert containers["logging-sidecar"].assignment is Assignment.NODE_SHARED
    assert containers["logging-sidecar"].cpu_quota_us is None


@pytest.mark.parametrize("policy", POLICIES, ids=str)
def test_container_scope_mixed_under_container_scope(policy: TopologyPolicyName) -> None:
    eng = engine(Scope.CONTAINER, policy)
    state, decision = eng.admit(eng.initial_state(), example("container-scope-mixed"))
    containers = by_name(decision)
    infra = containers["infrastructure-sidecar"]
    assert infra.assignment is Assignment.NODE_EXCLUSIVE and len(infra.cpus) == 2
    assert one_numa_node(eng.topology, infra.cpus) and infra.cpu_quota_us == -1
    assert len(infra.mems) == 1 and eng.topology.numa_nodes_of(infra.cpus) == infra.mems
    for worker in ("worker-1", "worker-2"):
        assert containers[worker].assignment is Assignment.NODE_SHARED
        assert containers[worker].cpus == eng.node_shared_pool(state) == eng.topology.all_cpus - infra.cpus
        assert containers[worker].cpu_quota_us is None
        assert containers[worker].mems == eng.topology.numa_node_ids
    assert decision.bubble_cpus is None


@pytest.mark.parametrize("policy", POLICIES, ids=str)
def test_container_scope_mixed_under_pod_scope_shares_the_bubble(policy: TopologyPolicyName) -> None:
    eng = engine(Scope.POD, policy)
    _, decision = eng.admit(eng.initial_state(), example("container-scope-mixed"))
    assert decision.bubble_cpus is not None and len(decision.bubble_cpus) == 4
    containers = by_name(decision)
    assert containers["infrastructure-sidecar"].assignment is Assignment.POD_EXCLUSIVE
    for worker in ("worker-1", "worker-2"):
        assert containers[worker].assignment is Assignment.POD_SHARED
        assert containers[worker].cpu_quota_us == 2 * CFS_PERIOD_US


@pytest.mark.parametrize("policy", POLICIES, ids=str)
def test_pod_scope_mixed_under_container_scope_is_the_hybrid_model(policy: TopologyPolicyName) -> None:
    eng = engine(Scope.CONTAINER, policy)
    state, decision = eng.admit(eng.initial_state(), example("pod-scope-mixed"))
    containers = by_name(decision)
    assert containers["main-app"].assignment is Assignment.NODE_EXCLUSIVE
    assert containers["metrics-sidecar"].assignment is Assignment.NODE_SHARED
    assert containers["metrics-sidecar"].cpus == eng.node_shared_pool(state)
    assert decision.bubble_cpus is None


# -- refusals ------------------------------------------------------------------------------------------


def test_pod_budget_larger_than_a_numa_node_is_refused_with_numbers() -> None:
    eng = engine()
    state = eng.initial_state()
    big = pod("big", app("c"), budget=guaranteed(10_000, GI))
    with pytest.raises(TopologyAffinityError) as caught:
        eng.admit(state, big)
    message = caught.value.message
    assert caught.value.resource is None, "refused by the topology manager, before either allocation"
    assert message.startswith("Pod Scope Resources cannot be allocated with Topology locality")
    assert "cpu=10" in message and "node 0: cpu=6" in message and "node 1: cpu=8" in message
    assert "memory=" in message


def test_the_same_pod_fits_across_nodes_under_best_effort() -> None:
    eng = engine(policy=TopologyPolicyName.BEST_EFFORT)
    _, decision = eng.admit(eng.initial_state(), pod("big", app("c"), budget=guaranteed(10_000, GI)))
    assert decision.bubble_cpus is not None and len(decision.bubble_cpus) == 10


def test_container_scope_refusal_has_no_pod_scope_prefix() -> None:
    eng = engine(Scope.CONTAINER)
    with pytest.raises(TopologyAffinityError) as caught:
        eng.admit(eng.initial_state(), pod("big", app("c", guaranteed(10_000, GI))))
    assert caught.value.message.startswith("Resources cannot be allocated with Topology locality: requested")


def test_a_refused_pod_changes_nothing() -> None:
    eng = engine()
    state, _ = eng.admit(eng.initial_state(), example("pod-scope-mixed"))
    before = NodeState(state.cpu, state.memory, dict(state.pods), dict(state.removed))
    for refused in (example("empty-shared-pool"), pod("big", app("c"), budget=guaranteed(10_000, GI))):
        with pytest.raises((EmptyPodSharedPoolError, TopologyAffinityError)):
            eng.admit(state, refused)
    assert state == before


def test_full_pcpus_only_refuses_an_odd_pod_budget() -> None:
    topology = from_spec(SMALL)
    options = CPUManagerOptions.parse({"full-pcpus-only": "true"}, topology, "single-numa-node")
    eng = engine(cpu_options=options)
    with pytest.raises(SMTAlignmentError):
        eng.admit(eng.initial_state(), pod("odd", app("c"), budget=guaranteed(3000, GI)))


def test_an_allocation_failure_without_alignment_is_unexpected() -> None:
    eng = engine(policy=TopologyPolicyName.NONE)
    with pytest.raises(UnexpectedAdmissionError) as caught:
        eng.admit(eng.initial_state(), pod("huge", app("c"), budget=guaranteed(20_000, GI)))
    assert caught.value.message.startswith("Allocate failed due to ")


# -- lifecycle -----------------------------------------------------------------------------------------


def test_admission_is_idempotent() -> None:
    eng = engine()
    state, first = eng.admit(eng.initial_state(), example("pod-scope-mixed"))
    again, second = eng.admit(state, example("pod-scope-mixed"))
    assert again is state and second == first


def test_bubble_is_released_only_with_the_last_container() -> None:
    eng = engine()
    start = eng.initial_state()
    mixed = example("pod-scope-mixed")
    state, decision = eng.admit(start, mixed)
    assert decision.bubble_cpus is not None
    state = eng.remove_container(state, mixed.uid, "main-app")
    state = eng.remove_container(state, mixed.uid, "metrics-sidecar")
    left = eng.decision(state, mixed.uid)
    assert left.bubble_cpus == decision.bubble_cpus
    assert [c.name for c in left.containers] == ["logging-sidecar"]
    assert eng.node_shared_pool(state).is_disjoint(decision.bubble_cpus)
    state = eng.remove_container(state, mixed.uid, "logging-sidecar")
    assert mixed.uid not in state.pods and mixed.uid not in state.removed
    assert eng.node_shared_pool(state) == eng.topology.all_cpus
    assert state.memory.machine == start.memory.machine
    with pytest.raises(KeyError):
        eng.decision(state, mixed.uid)


def test_removing_unknown_things_changes_nothing() -> None:
    eng = engine()
    state, _ = eng.admit(eng.initial_state(), example("pod-scope-mixed"))
    assert eng.remove_container(state, "no-such-pod", "c") is state
    assert eng.remove_container(state, example("pod-scope-mixed").uid, "no-such-container") is state
    assert eng.remove_pod(state, "no-such-pod") is state


@pytest.mark.parametrize("scope", list(Scope), ids=str)
def test_remove_pod_returns_everything(scope: Scope) -> None:
    eng = engine(scope)
    start = eng.initial_state()
    state = start
    for name in ("pod-scope-mixed", "container-scope-mixed"):
        state, _ = eng.admit(state, example(name))
    for name in ("pod-scope-mixed", "container-scope-mixed"):
        state = eng.remove_pod(state, example(name).uid)
    assert not state.pods and not state.removed
    assert state.cpu.default == start.cpu.default
    assert state.memory.machine == start.memory.machine


def test_re_admission_after_removal_allocates_again() -> None:
    eng = engine()
    mixed = example("pod-scope-mixed")
    state, first = eng.admit(eng.initial_state(), mixed)
    state = eng.remove_pod(state, mixed.uid)
    _, second = eng.admit(state, mixed)
    assert second.bubble_cpus == first.bubble_cpus


def test_node_shared_view_follows_later_admissions() -> None:
    eng = engine(Scope.CONTAINER)
    mixed = example("container-scope-mixed")
    state, _ = eng.admit(eng.initial_state(), mixed)
    state, _ = eng.admit(state, example("pod-scope-mixed"))
    worker = by_name(eng.decision(state, mixed.uid))["worker-1"]
    assert worker.cpus == eng.node_shared_pool(state)
    assert len(worker.cpus) == 16 - 2 - 2


def test_reserved_cpus_are_never_handed_out() -> None:
    reserved = CPUSet.parse("0-2,8-10")
    eng = new_engine("0-2,8-10")
    state, decision = eng.admit(eng.initial_state(), example("pod-scope-mixed"))
    assert decision.bubble_cpus is not None and decision.bubble_cpus.is_disjoint(reserved)
    assert eng.topology.numa_nodes_of(decision.bubble_cpus) == (1,)
    assert eng.reserved_cpus == reserved
    assert reserved.is_subset(eng.node_shared_pool(state))


# -- classic paths and quota ---------------------------------------------------------------------------


def classic_pod(*millicpus: int) -> Pod:
    """A pod without a budget whose containers are all Guaranteed: the kubelet's classic pod scope."""
    return pod("classic", *(app(f"c{i}", guaranteed(m, GI)) for i, m in enumerate(millicpus)))


def test_classic_pod_scope_aligns_all_guaranteed_containers_on_one_node() -> None:
    eng = engine()
    _, decision = eng.admit(eng.initial_state(), classic_pod(2000, 3000))
    a, b = decision.containers
    assert decision.bubble_cpus is None
    assert a.assignment is b.assignment is Assignment.NODE_EXCLUSIVE
    assert (len(a.cpus), len(b.cpus)) == (2, 3) and a.cpus.is_disjoint(b.cpus)
    assert one_numa_node(eng.topology, a.cpus | b.cpus)
    assert a.cpu_quota_us == b.cpu_quota_us == -1


def test_classic_pod_scope_refuses_containers_that_do_not_fit_together() -> None:
    eng = engine()
    with pytest.raises(TopologyAffinityError) as caught:
        eng.admit(eng.initial_state(), classic_pod(5000, 5000))
    assert (
        caught.value.message.startswith("Resources cannot be allocated") and "cpu=10" in caught.value.message
    )


def test_burstable_pod_stays_in_the_node_shared_pool() -> None:
    eng = engine()
    _, decision = eng.admit(eng.initial_state(), pod("b", app("c", burstable(500))))
    [c] = decision.containers
    assert c.assignment is Assignment.NODE_SHARED and c.cpus == eng.topology.all_cpus
    assert c.cpu_quota_us is None and c.mems == (0, 1)


def test_pod_shared_quota_counts_only_the_slices_running_beside_each_container() -> None:
    """Budget 6: sidecar s (1 exclusive), init i (shared), app a (2 exclusive), app b (shared)."""
    eng = engine()
    shaped = pod(
        "q",
        sidecar("s", guaranteed(1000, GI)),
        init("i"),
        app("a", guaranteed(2000, GI)),
        app("b"),
        budget=guaranteed(6000, 4 * GI),
    )
    _, decision = eng.admit(eng.initial_state(), shaped)
    containers = by_name(decision)
    assert containers["s"].cpu_quota_us == containers["a"].cpu_quota_us == -1
    assert containers["i"].cpu_quota_us == 5 * CFS_PERIOD_US
    assert containers["b"].cpu_quota_us == 3 * CFS_PERIOD_US
    assert containers["i"].assignment is containers["b"].assignment is Assignment.POD_SHARED


def test_fractional_budget_leaves_the_pod_in_the_node_shared_pool() -> None:
    eng = engine()
    _, decision = eng.admit(eng.initial_state(), pod("f", app("c"), budget=guaranteed(1500, GI)))
    assert decision.bubble_cpus is None
    assert decision.containers[0].assignment is Assignment.NODE_SHARED


def test_cpu_policy_none_keeps_memory_alignment() -> None:
    eng = engine(cpu_policy="none")
    state, decision = eng.admit(eng.initial_state(), example("pod-scope-mixed"))
    assert (
        decision.bubble_cpus is None and decision.bubble_mems is not None and len(decision.bubble_mems) == 1
    )
    assert all(c.assignment is Assignment.NODE_SHARED for c in decision.containers)
    assert all(c.cpus == eng.topology.all_cpus for c in decision.containers)
    assert eng.node_shared_pool(state) == eng.topology.all_cpus


def test_memory_policy_none_keeps_cpu_alignment() -> None:
    eng = engine(memory_policy="None")
    state, decision = eng.admit(eng.initial_state(), example("pod-scope-mixed"))
    assert decision.bubble_cpus is not None and decision.bubble_mems is None
    assert all(c.mems == (0, 1) for c in decision.containers)
    assert not state.memory.machine


@pytest.mark.parametrize("scope", list(Scope))
@pytest.mark.parametrize("name", ["pod-scope-mixed", "container-scope-mixed", "empty-shared-pool"])
def test_with_both_policies_none_containers_run_anywhere_and_nothing_is_held(scope: Scope, name: str) -> None:
    eng = engine(scope, cpu_policy="none", memory_policy="None")
    start = eng.initial_state()
    state, decision = eng.admit(start, example(name))
    assert decision.bubble_cpus is None and decision.bubble_mems is None
    for container in decision.containers:
        assert container.assignment is Assignment.NODE_SHARED and container.cpu_quota_us is None
        assert (container.cpus, container.mems) == (eng.topology.all_cpus, (0, 1))
    assert (state.cpu, state.memory) == (start.cpu, start.memory)
    assert eng.remove_pod(state, decision.pod.uid) == start


# -- confined admission (re-adopting what the runtime already runs) ------------------------------------


@pytest.mark.parametrize("scope", list(Scope))
def test_admission_within_a_set_re_adopts_the_cpus_a_pod_held(scope: Scope) -> None:
    """Admitted alone on an empty node the pods land elsewhere; confined, each gets back what it held."""
    node = engine(scope)
    first, second = example("pod-scope-mixed"), example("container-scope-mixed")
    state = node.initial_state()
    state, _ = node.admit(state, first)
    state, _ = node.admit(state, second)
    held = {p.uid: {c.name: c.cpus for c in node.decision(state, p.uid).containers} for p in (first, second)}
    within = {uid: _union(cpus.values()) for uid, cpus in held.items()}

    fresh = node.initial_state()
    fresh, _ = node.admit(fresh, second, within=within[second.uid])
    fresh, _ = node.admit(fresh, first, within=within[first.uid])

    for p in (first, second):
        assert {c.name: c.cpus for c in node.decision(fresh, p.uid).containers} == held[p.uid]
    assert fresh.cpu.default == state.cpu.default
    assert fresh.cpu.pod_entries == state.cpu.pod_entries


def test_admission_within_a_set_too_small_is_refused_and_changes_nothing() -> None:
    node = engine()
    mixed = example("pod-scope-mixed")
    start = node.initial_state()
    with pytest.raises(TopologyAffinityError):
        node.admit(start, mixed, within=CPUSet.parse("1-2,9"))
    assert start == node.initial_state()
    state, decision = node.admit(start, mixed, within=CPUSet.parse("1-3,9-11"))
    assert decision.bubble_cpus is not None and decision.bubble_cpus.is_subset(CPUSet.parse("1-3,9-11"))
    assert state.cpu.default == node.initial_state().cpu.default - decision.bubble_cpus


def _union(sets: object) -> CPUSet:
    result = CPUSet()
    for cpus in sets:  # type: ignore[attr-defined]
        result = result | cpus
    return result


@pytest.mark.parametrize("scope", list(Scope))
def test_a_started_container_forgets_the_memory_of_the_standard_init_containers_before(scope: Scope) -> None:
    """The memory manager's `AddContainer`: a standard init container has run to completion once a later
    container starts, so its memory entry goes; its blocks go back to the node unless they are part of the
    pod's own memory (pod scope). A sidecar before it, and every CPU entry, stay."""
    staged = pod("staged", sidecar("proxy", guaranteed(1000, 256 * MI)), init("setup", guaranteed(2000, GI)),
                 app("app", guaranteed(1000, 512 * MI)), budget=guaranteed(4000, 2 * GI), uid="uid-staged")
    eng = engine(scope=scope)
    admitted, _ = eng.admit(eng.initial_state(), staged)
    free_before = sum(n.memory["memory"] for n in eng.free_per_numa(admitted))

    started = eng.container_added(admitted, "uid-staged", "app")

    assert started.memory.entries["uid-staged"].keys() == {"proxy", "app"}
    assert started.cpu.entries == admitted.cpu.entries
    free_after = sum(n.memory["memory"] for n in eng.free_per_numa(started))
    held = sum(b.size for b in admitted.memory.entries["uid-staged"]["setup"])
    assert free_after - free_before == (0 if scope is Scope.POD else held)
    assert eng.container_added(started, "uid-staged", "app") is started, "a restart changes nothing more"
    assert eng.container_added(admitted, "uid-staged", "setup") is admitted, "nothing before it to forget"
