"""The Static memory policy against the kubelet's own cases (`memorymanager/policy_static_test.go`) and
KEP-5526's pod-level examples, plus invariants over random admission and release sequences."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podlevel.engine.bitmask import iterate_masks, mask_of, nodes_of
from podlevel.engine.errors import EmptyPodSharedPoolError, InputError, UnexpectedAdmissionError
from podlevel.engine.memory_policy import (
    MemoryBlock,
    MemoryState,
    MemoryTable,
    StaticMemoryPolicy,
    container_requests,
    pod_requests,
)
from podlevel.engine.pod import Pod, Resources
from podlevel.engine.topology import CPUInfo, NUMANode, Topology
from podlevel.engine.topology_manager import TopologyHint
from support.builders import GI, MI, app, burstable, guaranteed, init, pod, sidecar
from support.memory_state import check_memory_state

HP1G = "hugepages-1Gi"
HP2M = "hugepages-2Mi"
ANY = TopologyHint(None, False)
ANY_PREFERRED = TopologyHint(None, True)
BURSTABLE = burstable(1000, GI, cpu_limit=1000, memory_limit=2 * GI)


def machine(*nodes: tuple[int, Mapping[int, int]]) -> Topology:
    """NUMA node i has `nodes[i]` = (MemTotal including hugepages, {page size: pages}); one CPU each."""
    numa = [
        NUMANode(i, memory, dict(pages), {j: 10 if i == j else 20 for j in range(len(nodes))})
        for i, (memory, pages) in enumerate(nodes)
    ]
    return Topology([CPUInfo(i, i, 0, i, 0) for i in range(len(nodes))], numa)


def policy(*nodes: tuple[int, Mapping[int, int]], reserved: int = 512 * MI) -> StaticMemoryPolicy:
    """The kubelet tests' usual setup: every node reserves `reserved` bytes of memory for the system."""
    return StaticMemoryPolicy(machine(*nodes), {i: {"memory": reserved} for i in range(len(nodes))})


def hint(*nodes: int, preferred: bool = True) -> TopologyHint:
    return TopologyHint(mask_of(nodes), preferred)


def table(state: MemoryState, node: int, name: str = "memory") -> tuple[int, int]:
    """(free, reserved) of one resource on one node."""
    entry = state.machine[node].memory_map[name]
    return entry.free, entry.reserved


def block(nodes: tuple[int, ...], name: str, size: int) -> MemoryBlock:
    return MemoryBlock(nodes, name, size)


POD1 = pod("pod1", app("container1", guaranteed(memory=GI, hugepages_1Gi=GI)))
POD2 = pod("pod2", app("container2", guaranteed(memory=GI, hugepages_1Gi=GI)))


def admit(p: StaticMemoryPolicy, state: MemoryState, target: Pod, affinity: TopologyHint) -> MemoryState:
    for container in target.all_containers:
        state = p.allocate(state, target, container, affinity)
    return state


# -- machine state and reservation -----------------------------------------------------------------------


def test_initial_state_matches_the_kubelet_default() -> None:
    """Kubelet "should fill the state with default values": 3Gi node, one 1Gi page, 512Mi reserved."""
    state = policy((3 * GI, {GI: 1})).initial_state()
    node = state.machine[0]
    assert (node.assignments, node.cells) == (0, (0,))
    assert node.memory_map == {
        "memory": MemoryTable(3 * GI, 512 * MI, 1536 * MI, 0, 1536 * MI),
        HP1G: MemoryTable(GI, 0, GI, 0, GI),
    }
    assert (state.entries, state.pod_entries) == ({}, {})


def test_hugepage_reservation_and_spelling() -> None:
    """A reservation may spell the page size any way the API accepts; it is keyed the kubelet's way."""
    p = StaticMemoryPolicy(
        machine((4 * GI, {2 * MI: 512})), {0: {"memory": GI, "hugepages-2048Ki": 256 * MI}}
    )
    assert p.reserved == {0: {"memory": GI, HP2M: 256 * MI}}
    assert p.initial_state().machine[0].memory_map[HP2M] == MemoryTable(GI, 256 * MI, 768 * MI, 0, 768 * MI)
    assert p.initial_state().machine[0].memory_map["memory"].allocatable == 2 * GI


def test_memory_may_be_reserved_on_one_node_only() -> None:
    """Kubelet "should succeed, when at least one NUMA node has reserved memory"."""
    p = StaticMemoryPolicy(machine((2 * GI, {}), (2 * GI, {})), {0: {}, 1: {"memory": 512 * MI}})
    assert table(p.initial_state(), 0) == (2 * GI, 0)
    assert table(p.initial_state(), 1) == (1536 * MI, 0)


@pytest.mark.parametrize(
    ("reserved", "message"),
    [
        pytest.param({}, "needs memory reserved for the system", id="nothing reserved (kubelet case)"),
        pytest.param({0: {"memory": 0}}, "needs memory reserved for the system", id="zero reserved"),
        pytest.param({0: {HP2M: 2 * MI}}, "needs memory reserved for the system", id="only hugepages"),
        pytest.param(
            {2: {"memory": GI}}, r"NUMA node 2 does not exist \(the machine has \[0, 1\]\)", id="node"
        ),
        pytest.param({0: {"cpu": 1}}, "'cpu' is not a memory resource", id="not memory"),
        pytest.param({0: {"hugepages-x": 1}}, "'hugepages-x' is not a memory resource", id="bad page size"),
        pytest.param(
            {0: {"memory": GI, HP1G: GI}}, "NUMA node 0 has no hugepages-1Gi pages", id="no such pages"
        ),
        pytest.param({0: {"memory": -1}}, "-1 bytes of memory reserved", id="negative"),
        pytest.param(
            {0: {"memory": 4 * GI}}, "between 0 and the node's 3221225472", id="above MemTotal-hugepages"
        ),
        pytest.param(
            {0: {"memory": GI, HP2M: 2 * GI}}, "between 0 and the node's 1073741824", id="above pages"
        ),
        pytest.param(
            {0: {"memory": GI, HP2M: 2 * MI, "hugepages-2048Ki": 2 * MI}},
            "hugepages-2Mi is reserved twice",
            id="one size twice",
        ),
    ],
)
def test_bad_reservations(reserved: dict[int, dict[str, int]], message: str) -> None:
    topology = machine((4 * GI, {2 * MI: 512}), (4 * GI, {2 * MI: 512}))
    with pytest.raises(InputError, match=message) as raised:
        StaticMemoryPolicy(topology, reserved)
    assert raised.value.rule == "reserved memory"


# -- requests --------------------------------------------------------------------------------------------


def _requests(memory: int, pages: int) -> Resources:
    return Resources({"memory": memory, HP1G: pages})


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        pytest.param(
            pod(
                "p",
                init("i1", _requests(GI, GI)),
                init("i2", _requests(4 * GI, 4 * GI)),
                app("c1", _requests(GI, GI)),
                app("c2", _requests(2 * GI, 2 * GI)),
            ),
            {"memory": 4 * GI, HP1G: 4 * GI},
            id="maximum of init containers > total of containers",
        ),
        pytest.param(
            pod(
                "p",
                init("i1", _requests(GI, GI)),
                init("i2", _requests(3 * GI, 3 * GI)),
                app("c1", _requests(2 * GI, 2 * GI)),
                app("c2", _requests(3 * GI, 3 * GI)),
            ),
            {"memory": 5 * GI, HP1G: 5 * GI},
            id="maximum of init containers < total of containers",
        ),
        pytest.param(
            pod(
                "p",
                init("i1", _requests(GI, GI)),
                init("i2", _requests(3 * GI, 4 * GI)),
                app("c1", _requests(2 * GI, GI)),
                app("c2", _requests(3 * GI, 2 * GI)),
            ),
            {"memory": 5 * GI, HP1G: 4 * GI},
            id="different resources independently",
        ),
        pytest.param(
            pod(
                "p",
                sidecar("r1", _requests(2 * GI, 2 * GI)),
                init("i2", _requests(4 * GI, 4 * GI)),
                app("c1", _requests(GI, GI)),
                app("c2", _requests(2 * GI, 2 * GI)),
            ),
            {"memory": 6 * GI, HP1G: 6 * GI},
            id="init peak beside a sidecar > long-running containers",
        ),
        pytest.param(
            pod(
                "p",
                sidecar("r1", _requests(2 * GI, 2 * GI)),
                init("i2", _requests(4 * GI, 4 * GI)),
                app("c1", _requests(2 * GI, 2 * GI)),
                app("c2", _requests(3 * GI, 3 * GI)),
            ),
            {"memory": 7 * GI, HP1G: 7 * GI},
            id="init peak beside a sidecar < long-running containers",
        ),
        pytest.param(
            pod("p", init("i1", _requests(GI, GI)), app("c1", Resources({"memory": GI}))),
            {"memory": GI},
            id="a resource only init containers ask for is not counted",
        ),
        pytest.param(
            pod(
                "p", app("c1"), budget=Resources({"cpu": 4000, "memory": 4 * GI, HP2M: 0}, {"memory": 4 * GI})
            ),
            {"memory": 4 * GI},
            id="pod budget, zero amounts dropped",
        ),
    ],
)
def test_pod_requests(target: Pod, expected: dict[str, int]) -> None:
    assert pod_requests(target) == expected


# -- hints -----------------------------------------------------------------------------------------------

TWO_PAIRED = ((2 * GI + 20 * MI, {2 * MI: 10}), (2 * GI + 20 * MI, {2 * MI: 10}))
"""Two nodes with 1536Mi allocatable memory and 20Mi of 2Mi pages each."""
FOUR_NODES = tuple((3 * GI, {GI: 1}) for _ in range(4))
"""Four nodes with 1536Mi allocatable memory and one 1Gi page each."""


def test_no_hints_for_non_guaranteed_pods() -> None:
    p = policy((3 * GI, {GI: 1}))
    target = pod("pod1", app("container1", BURSTABLE))
    assert p.container_hints(p.initial_state(), target, target.containers[0]) is None
    assert p.pod_hints(p.initial_state(), target) is None


def test_hints_from_the_existing_assignment() -> None:
    p = policy((3 * GI, {GI: 1}))
    state = p.allocate(p.initial_state(), POD1, POD1.containers[0], ANY)
    assert p.container_hints(state, POD1, POD1.containers[0]) == {
        "memory": [hint(0)],
        HP1G: [hint(0)],
    }


@pytest.mark.parametrize(
    "blocks",
    [
        pytest.param((block((0,), "memory", GI),), id="fewer resources than requested"),
        pytest.param((block((0,), "memory", GI), block((0,), HP2M, GI)), id="other resources than requested"),
        pytest.param(
            (block((0,), "memory", 512 * MI), block((0,), HP1G, GI)), id="other size than requested"
        ),
    ],
)
def test_no_hints_when_the_existing_assignment_differs(blocks: tuple[MemoryBlock, ...]) -> None:
    p = policy((3 * GI, {GI: 1}))
    state = replace(p.initial_state(), entries={"pod1": {"container1": blocks}})
    assert p.container_hints(state, POD1, POD1.containers[0]) is None


def test_new_hints_skip_nodes_grouped_with_others() -> None:
    """Kubelet "should calculate new topology hints ...": pod1 holds a group over nodes 0 and 1, so
    pod2 fits on node 2, node 3 or both."""
    p = policy(*FOUR_NODES)
    first = pod("pod1", app("container1", guaranteed(memory=2 * GI, hugepages_1Gi=2 * GI)))
    state = admit(p, p.initial_state(), first, hint(0, 1))
    assert table(state, 0) == (0, 1536 * MI) and table(state, 1) == (GI, 512 * MI)
    assert state.machine[0].cells == state.machine[1].cells == (0, 1)
    expected = [hint(2), hint(3), hint(2, 3, preferred=False)]
    assert p.container_hints(state, POD2, POD2.containers[0]) == {"memory": expected, HP1G: expected}


def test_multi_node_hints_are_not_preferred_when_one_node_would_do() -> None:
    """Kubelet "should not return preferred hints with multiple NUMA nodes for the pod with resources
    satisfied by a single NUMA node": only the existing group has room; one node would have been enough."""
    p = policy(*TWO_PAIRED)
    first = pod("pod1", app("container1", guaranteed(memory=2 * GI, hugepages_2Mi=24 * MI)))
    state = admit(p, p.initial_state(), first, hint(0, 1))
    assert table(state, 0, HP2M) == (0, 20 * MI) and table(state, 1, HP2M) == (16 * MI, 4 * MI)
    second = pod("pod2", app("container2", guaranteed(memory=GI, hugepages_2Mi=16 * MI)))
    expected = [hint(0, 1, preferred=False)]
    assert p.container_hints(state, second, second.containers[0]) == {"memory": expected, HP2M: expected}


def test_every_mask_in_kubelet_order_with_the_narrowest_preferred() -> None:
    p = policy((2 * GI, {}), (2 * GI, {}), (2 * GI, {}))
    target = pod("p", app("c", guaranteed(memory=2 * GI)))
    hints = p.container_hints(p.initial_state(), target, target.containers[0])
    assert hints == {"memory": [hint(0, 1), hint(0, 2), hint(1, 2), hint(0, 1, 2, preferred=False)]}


def test_nothing_fits_means_no_preference() -> None:
    """The kubelet returns an empty map, which the topology manager reads as "no preference"; the allocation
    then fails on its own."""
    p = policy((2 * GI, {}))
    target = pod("p", app("c", guaranteed(memory=8 * GI)))
    assert p.container_hints(p.initial_state(), target, target.containers[0]) == {}
    with pytest.raises(UnexpectedAdmissionError, match="no NUMA nodes have 8Gi memory free") as raised:
        p.allocate(p.initial_state(), target, target.containers[0], ANY_PREFERRED)
    assert raised.value.message.endswith("(free: node 0: 1536Mi memory), which is unexpected")
    assert raised.value.resource == "memory"


def test_preferred_follows_allocatable_not_free() -> None:
    """minAffinitySize counts allocatable memory (#128669): when node 0 is full, the only fitting mask is
    wider than the narrowest allocatable one and so is not preferred."""
    p = policy((2 * GI, {}), (2 * GI, {}))
    first = pod("a", app("c", guaranteed(memory=GI)))
    state = admit(p, p.initial_state(), first, hint(0))
    state = admit(p, state, pod("b", app("c", guaranteed(memory=GI))), hint(1))
    third = pod("c", app("c", guaranteed(memory=GI)))
    assert p.container_hints(state, third, third.containers[0]) == {}


# -- allocate (container path) ---------------------------------------------------------------------------


def test_allocate_with_no_affinity_uses_the_default_hint() -> None:
    """Kubelet "should calculate a default topology hint when no NUMA affinity was provided ..."."""
    p = policy((3 * GI, {GI: 1}))
    state = p.allocate(p.initial_state(), POD1, POD1.containers[0], ANY)
    assert state.entries == {"pod1": {"container1": (block((0,), HP1G, GI), block((0,), "memory", GI))}}
    assert table(state, 0) == (512 * MI, GI)
    assert table(state, 0, HP1G) == (0, GI)
    assert (state.machine[0].assignments, state.machine[0].cells) == (2, (0,))
    assert p.mems_of(state, "pod1", "container1") == (0,)


def test_allocate_is_a_no_op_for_non_guaranteed_pods_and_idempotent() -> None:
    p = policy((3 * GI, {GI: 1}))
    target = pod("pod1", app("container1", BURSTABLE))
    assert p.allocate(p.initial_state(), target, target.containers[0], ANY) is p.initial_state()
    state = p.allocate(p.initial_state(), POD1, POD1.containers[0], ANY)
    assert p.allocate(state, POD1, POD1.containers[0], hint(0)) == state


def test_allocate_fails_without_default_hint() -> None:
    """Kubelet "should fail when no NUMA affinity was provided ... and calculation of the default hint
    failed"."""
    p = policy((3 * GI, {GI: 1}))
    state = p.allocate(p.initial_state(), POD1, POD1.containers[0], ANY)
    with pytest.raises(
        UnexpectedAdmissionError, match="no NUMA nodes have 1Gi hugepages-1Gi, 1Gi memory free"
    ):
        p.allocate(state, POD2, POD2.containers[0], ANY)


def test_allocate_fails_when_the_default_hint_is_not_preferred() -> None:
    """Kubelet "should fail when ... the topology manager preferred hint and default hint has preferred
    false": only nodes 1 and 2 together can take the request, one node could by allocatable memory."""
    p = StaticMemoryPolicy(
        machine((2560 * MI, {GI: 1}), (2 * GI, {GI: 1}), (2 * GI, {GI: 1})),
        {0: {"memory": 512 * MI}, 1: {"memory": 512 * MI}, 2: {"memory": 512 * MI}},
    )
    first = pod("pod1", app("container1", guaranteed(memory=512 * MI)))
    state = admit(p, p.initial_state(), first, hint(0))
    with pytest.raises(UnexpectedAdmissionError, match=r"best default placement \{1,2\} is not preferred"):
        p.allocate(state, POD2, POD2.containers[0], ANY_PREFERRED)
    assert p.allocate(state, POD2, POD2.containers[0], ANY).entries["pod2"]["container2"][
        0
    ].numa_affinity == (1, 2)


def test_allocate_fails_when_the_hint_cannot_be_extended() -> None:
    """Kubelet "should fail when NUMA affinity ... did not satisfy container requirements and extended hint
    generation failed": node 0 is too small and nodes 1 and 2 form a group that 0 cannot join."""
    p = StaticMemoryPolicy(
        machine((2 * GI, {GI: 1}), (3 * GI, {GI: 1}), (3 * GI, {GI: 1})),
        {0: {"memory": 512 * MI}, 1: {"memory": 512 * MI}, 2: {"memory": 512 * MI}},
    )
    first = pod("pod1", app("container1", guaranteed(memory=2 * GI)))
    state = admit(p, p.initial_state(), first, hint(1, 2))
    message = r"NUMA nodes \{0\} lack 1Gi hugepages-1Gi, 1Gi memory free and no wider placement"
    with pytest.raises(UnexpectedAdmissionError, match=message):
        p.allocate(state, POD2, POD2.containers[0], hint(0, preferred=False))


def test_allocate_fails_when_the_extended_hint_is_not_preferred() -> None:
    """Kubelet "should fail when the topology manager provided the preferred hint and extended hint has
    preferred false"."""
    p = StaticMemoryPolicy(
        machine((2560 * MI, {GI: 1}), (2 * GI, {GI: 1}), (2 * GI, {GI: 1})),
        {0: {"memory": 512 * MI}, 1: {"memory": 512 * MI}, 2: {"memory": 512 * MI}},
    )
    first = pod("pod1", app("container1", guaranteed(memory=512 * MI)))
    state = admit(p, p.initial_state(), first, hint(0))
    with pytest.raises(
        UnexpectedAdmissionError, match=r"the placement around them, \{1,2\}, is not preferred"
    ):
        p.allocate(state, POD2, POD2.containers[0], hint(1))


def test_allocate_extends_a_narrowed_hint() -> None:
    """The merge can AND a provider's wider hint down to one node; the policy widens it again."""
    p = policy((2 * GI, {}), (2 * GI, {}))
    target = pod("p", app("c", guaranteed(memory=2 * GI)))
    state = p.allocate(p.initial_state(), target, target.containers[0], hint(1, preferred=False))
    assert state.entries["p"]["c"] == (block((0, 1), "memory", 2 * GI),)


def test_allocate_over_two_nodes_fills_them_in_order() -> None:
    """Kubelet "should succeed to allocate memory from multiple NUMA nodes"."""
    p = policy(*((GI + GI, {GI: 1}) for _ in range(4)))
    state = p.allocate(p.initial_state(), POD1, POD1.containers[0], hint(0, 1))
    assert state.entries["pod1"]["container1"] == (block((0, 1), HP1G, GI), block((0, 1), "memory", GI))
    assert [table(state, n) for n in range(4)] == [(0, 512 * MI), (0, 512 * MI), (512 * MI, 0), (512 * MI, 0)]
    assert [table(state, n, HP1G) for n in range(2)] == [(0, GI), (GI, 0)]
    assert [(state.machine[n].assignments, state.machine[n].cells) for n in range(4)] == [
        (2, (0, 1)),
        (2, (0, 1)),
        (0, (2,)),
        (0, (3,)),
    ]
    assert p.mems_of(state, "pod1", "container1") == (0, 1)


def test_allocate_refuses_to_mix_single_and_multi_node_allocations() -> None:
    """Node 0 holds a single-node block, so a group over 0 and 1 is refused (`isAffinityViolating...`)."""
    p = policy((4 * GI, {}), (4 * GI, {}))
    state = admit(p, p.initial_state(), pod("a", app("c", guaranteed(memory=GI))), hint(0))
    target = pod("b", app("c", guaranteed(memory=GI)))
    with pytest.raises(UnexpectedAdmissionError, match="would mix single-node and multi-node"):
        p.allocate(state, target, target.containers[0], hint(0, 1, preferred=False))


def test_a_single_node_inside_a_group_is_widened_to_the_group() -> None:
    """The merge can hand a node of a multi-node group alone (CPU on node 0, memory only on the group); the
    block goes on the whole group so the node's group stays true (the kubelet would charge node 0 alone)."""
    p = policy((4 * GI, {}), (4 * GI, {}))
    state = admit(p, p.initial_state(), pod("a", app("c", guaranteed(memory=2 * GI))), hint(0, 1))
    assert table(state, 0) == (1536 * MI, 2 * GI)
    target = pod("b", app("c", guaranteed(memory=256 * MI)))
    widened = p.allocate(state, target, target.containers[0], hint(0, preferred=False))
    assert widened.entries["b"]["c"] == (block((0, 1), "memory", 256 * MI),)
    check_memory_state(p, widened)
    with pytest.raises(
        UnexpectedAdmissionError, match=r"belong to a multi-node group and the placement around"
    ):
        p.allocate(state, target, target.containers[0], hint(0))


def test_init_container_memory_is_reused_by_the_app_container() -> None:
    """TestStaticPolicyAllocateWithInitContainers: the app container takes the init container's memory
    instead of charging the node again, and the init block shrinks so the blocks add up."""
    p = policy((8 * GI, {}))
    target = pod(
        "p",
        init("i1", guaranteed(memory=GI)),
        init("i2", guaranteed(memory=3 * GI)),
        app("app", guaranteed(memory=2 * GI)),
    )
    state = admit(p, p.initial_state(), target, hint(0))
    assert table(state, 0) == (7680 * MI - 3 * GI, 3 * GI)
    assert state.entries["p"] == {
        "i1": (block((0,), "memory", 0),),
        "i2": (block((0,), "memory", GI),),
        "app": (block((0,), "memory", 2 * GI),),
    }
    assert sum(b.size for blocks in state.entries["p"].values() for b in blocks) == 3 * GI
    check_memory_state(p, state)


def test_sidecar_memory_is_not_reused() -> None:
    p = policy((8 * GI, {}))
    target = pod("p", sidecar("s", guaranteed(memory=GI)), app("app", guaranteed(memory=2 * GI)))
    state = admit(p, p.initial_state(), target, hint(0))
    assert table(state, 0)[1] == 3 * GI


def test_only_the_last_pod_keeps_reusable_init_memory() -> None:
    p = policy((8 * GI, {}))
    first = pod("a", init("i", guaranteed(memory=2 * GI)), app("app", guaranteed(memory=GI)))
    state = p.allocate(p.initial_state(), first, first.init_containers[0], hint(0))
    assert state.init_reusable == {"a": {1: {"memory": 2 * GI}}}
    other = pod("b", app("app", guaranteed(memory=GI)))
    state = p.allocate(state, other, other.containers[0], hint(0))
    assert state.init_reusable == {}


# -- remove ----------------------------------------------------------------------------------------------


def test_remove_releases_node_by_node_and_resets_groups() -> None:
    p = policy(*((GI + GI, {GI: 1}) for _ in range(2)))
    state = p.allocate(p.initial_state(), POD1, POD1.containers[0], hint(0, 1))
    released = p.remove_container(state, "pod1", "container1")
    assert released == p.initial_state()
    assert p.remove_container(released, "pod1", "container1") is released
    assert p.mems_of(released, "pod1", "container1") is None


def test_remove_one_of_two_blocks_keeps_the_group() -> None:
    p = policy((4 * GI, {}), (4 * GI, {}))
    a = pod("a", app("c", guaranteed(memory=4 * GI)))
    b = pod("b", app("c", guaranteed(memory=GI)))
    state = admit(p, admit(p, p.initial_state(), a, hint(0, 1)), b, hint(0, 1, preferred=False))
    state = p.remove_container(state, "a", "c")
    assert [(state.machine[n].assignments, state.machine[n].cells) for n in (0, 1)] == [
        (1, (0, 1)),
        (1, (0, 1)),
    ]
    # Release is node by node, like the charge: a's 4Gi frees all of node 0 first, then 512Mi of node 1.
    assert table(state, 0) == (3584 * MI, 0) and table(state, 1) == (2560 * MI, GI)


# -- pod level (KEP-5526) --------------------------------------------------------------------------------

BUDGET_4 = guaranteed(cpu=4000, memory=4 * GI)
POD_SCOPE_MIXED = pod(
    "mixed",
    sidecar("metrics-sidecar"),
    sidecar("logging-sidecar"),
    app("main-app", guaranteed(cpu=2000, memory=2 * GI)),
    budget=BUDGET_4,
)
EMPTY_SHARED_POOL = pod(
    "empty",
    sidecar("metrics-sidecar", guaranteed(memory=GI)),
    sidecar("logging-sidecar"),
    app("main-app", guaranteed(cpu=3000, memory=3 * GI)),
    budget=BUDGET_4,
)
EIGHT_GI: tuple[tuple[int, dict[int, int]], ...] = ((9 * GI, {}), (9 * GI, {}))


def test_pod_scope_mixed_partitions_the_budget() -> None:
    """The documentation's pod-scope-mixed example (deploy/examples/): main-app gets 2Gi, the sidecars share
    the other 2Gi, and the node is charged once with the 4Gi budget."""
    p = policy(*EIGHT_GI, reserved=GI)
    assert p.pod_hints(p.initial_state(), POD_SCOPE_MIXED) == {
        "memory": [hint(0), hint(1), hint(0, 1, preferred=False)]
    }
    state = p.allocate_pod(p.initial_state(), POD_SCOPE_MIXED, hint(1))
    shared = (block((1,), "memory", 2 * GI),)
    assert state.entries["mixed"] == {
        "metrics-sidecar": shared,
        "logging-sidecar": shared,
        "main-app": (block((1,), "memory", 2 * GI),),
    }
    assert state.pod_entries["mixed"] == (block((1,), "memory", 4 * GI),)
    assert table(state, 1) == (4 * GI, 4 * GI) and state.machine[1].assignments == 1
    assert {p.mems_of(state, "mixed", c.name) for c in POD_SCOPE_MIXED.all_containers} == {(1,)}
    check_memory_state(p, state)


def test_empty_shared_pool_is_refused() -> None:
    """The documentation's empty-shared-pool example (deploy/examples/): 1Gi + 3Gi exclusive of a 4Gi budget
    leaves nothing for logging-sidecar."""
    p = policy(*EIGHT_GI, reserved=GI)
    assert p.pod_hints(p.initial_state(), EMPTY_SHARED_POOL) == {"memory": []}
    with pytest.raises(
        EmptyPodSharedPoolError,
        match="take 4294967296 of the pod's 4294967296 bytes of memory, "
        "leaving an empty pod shared pool for logging-sidecar",
    ) as raised:
        p.allocate_pod(p.initial_state(), EMPTY_SHARED_POOL, ANY)
    assert (raised.value.type, raised.value.resource) == ("EmptyPodSharedPoolError", "memory")
    assert raised.value.message.startswith("pod default/empty: ")
    assert raised.value.message.endswith("(empty pod shared pool rule)")


@pytest.mark.parametrize(
    ("target", "violation"),
    [
        pytest.param(POD_SCOPE_MIXED, None, id="pod-scope-mixed keeps a pool"),
        pytest.param(
            pod("p", app("a", guaranteed(memory=4 * GI)), budget=BUDGET_4),
            None,
            id="all exclusive, nobody shares",
        ),
        pytest.param(
            pod("p", app("a", guaranteed(memory=3 * GI)), app("b"), budget=BUDGET_4),
            None,
            id="1Gi left for the shared app",
        ),
        pytest.param(
            pod("p", app("a", guaranteed(memory=4 * GI)), app("b"), budget=BUDGET_4),
            "leaving an empty pod shared pool for b",
            id="nothing left for the shared app",
        ),
        pytest.param(
            pod(
                "p",
                init("i", guaranteed(memory=5 * GI)),
                app("a", guaranteed(memory=GI)),
                budget=guaranteed(cpu=4000, memory=6 * GI),
            ),
            None,
            id="an init container may use the whole budget",
        ),
        pytest.param(
            pod(
                "p",
                sidecar("s", guaranteed(memory=3 * GI)),
                init("i", guaranteed(memory=2 * GI)),
                app("a"),
                budget=BUDGET_4,
            ),
            "init container 'i' needs 2147483648 bytes of memory but only 1073741824",
            id="init beside sidecars",
        ),
        pytest.param(
            pod(
                "p",
                sidecar("s", guaranteed(memory=4 * GI)),
                init("i"),
                app("a", guaranteed(memory=GI)),
                budget=BUDGET_4,
            ),
            "init container 'i' needs the pod shared pool but the sidecars before it take 4294967296",
            id="shared init after a sidecar that takes all",
        ),
        pytest.param(
            pod(
                "p",
                app("a", burstable(1000, 4 * GI, memory_limit=4 * GI)),
                app("b"),
                budget=BUDGET_4,
            ),
            None,
            id="a container that is not equivalent-Guaranteed shares",
        ),
        pytest.param(
            pod(
                "p",
                sidecar("s", guaranteed(memory=GI, hugepages_2Mi=64 * MI)),
                app("a", guaranteed(memory=GI)),
                budget=guaranteed(4000, 4 * GI, hugepages_2Mi=64 * MI),
            ),
            None,
            id="an exclusive container without hugepages does not need the shared hugepages",
        ),
    ],
)
def test_empty_shared_pool_rule(target: Pod, violation: str | None) -> None:
    found = StaticMemoryPolicy.empty_shared_pool(target)
    if violation is None:
        assert found is None
    else:
        assert found is not None and violation in found


def test_pod_partition_with_init_containers_and_sidecars() -> None:
    """Exclusive init and sidecar slices, a shared init container seeing the budget minus the sidecars before
    it, and the pod shared pool what sidecars and exclusive app containers leave."""
    budget = guaranteed(cpu=8000, memory=8 * GI)
    target = pod(
        "p",
        init("setup"),
        sidecar("proxy", guaranteed(memory=GI)),
        init("migrate", guaranteed(memory=3 * GI)),
        sidecar("log"),
        app("main", guaranteed(memory=2 * GI)),
        app("helper"),
        budget=budget,
    )
    p = policy(*EIGHT_GI, reserved=GI)
    state = p.allocate_pod(p.initial_state(), target, hint(0))
    assert {name: blocks[0].size if blocks else 0 for name, blocks in state.entries["p"].items()} == {
        "setup": 8 * GI,
        "proxy": GI,
        "migrate": 3 * GI,
        "log": 5 * GI,
        "main": 2 * GI,
        "helper": 5 * GI,
    }
    assert table(state, 0) == (0, 8 * GI)


def test_pod_allocation_is_idempotent() -> None:
    """Re-admitting a restored pod must not charge its budget again (#140906)."""
    p = policy(*EIGHT_GI, reserved=GI)
    state = p.allocate_pod(p.initial_state(), POD_SCOPE_MIXED, hint(0))
    assert p.allocate_pod(state, POD_SCOPE_MIXED, hint(1)) is state
    assert p.pod_hints(state, POD_SCOPE_MIXED) == {"memory": [hint(0)]}


def test_pod_budget_is_released_with_the_last_container() -> None:
    p = policy(*EIGHT_GI, reserved=GI)
    state = p.allocate_pod(p.initial_state(), POD_SCOPE_MIXED, hint(0))
    for name in ("main-app", "metrics-sidecar"):
        state = p.remove_container(state, "mixed", name)
        assert table(state, 0) == (4 * GI, 4 * GI)
        assert p.mems_of(state, "mixed", name) is None
    assert p.mems_of(state, "mixed", "logging-sidecar") == (0,)
    state = p.remove_container(state, "mixed", "logging-sidecar")
    assert state == p.initial_state()


def test_pod_allocation_widens_like_the_container_path() -> None:
    p = policy((3 * GI, {}), (3 * GI, {}), reserved=GI)
    state = p.allocate_pod(p.initial_state(), POD_SCOPE_MIXED, hint(1, preferred=False))
    assert state.pod_entries["mixed"] == (block((0, 1), "memory", 4 * GI),)
    assert table(state, 0) == (0, 2 * GI) and table(state, 1) == (0, 2 * GI)


def test_pod_level_container_scope_pins_only_equivalent_guaranteed_containers() -> None:
    p = policy(*EIGHT_GI, reserved=GI)
    state = admit(p, p.initial_state(), POD_SCOPE_MIXED, ANY)
    assert set(state.entries["mixed"]) == {"main-app"}
    assert table(state, 0) == (6 * GI, 2 * GI)
    assert p.mems_of(state, "mixed", "logging-sidecar") is None


def test_non_guaranteed_pods_are_left_alone() -> None:
    p = policy(*EIGHT_GI, reserved=GI)
    burst = pod("b", app("c"), budget=burstable(1000, GI, cpu_limit=2000, memory_limit=2 * GI))
    assert p.allocate_pod(p.initial_state(), burst, ANY) is p.initial_state()
    assert p.pod_hints(p.initial_state(), burst) is None


# -- restored state --------------------------------------------------------------------------------------


def test_check_state_accepts_what_the_policy_built() -> None:
    """A state with every kind of node the check recharges: a group over nodes 0-1 charged greedily (node 0
    full, node 1 partly), a single-node allocation on node 2 and an untouched node 3."""
    p = policy(*FOUR_NODES)
    state = admit(
        p, p.initial_state(), pod("a", app("c", guaranteed(memory=2 * GI, hugepages_1Gi=2 * GI))), hint(0, 1)
    )
    built = p.allocate(state, POD2, POD2.containers[0], hint(2))
    assert [(built.machine[n].assignments, built.machine[n].cells) for n in range(4)] == [
        (2, (0, 1)), (2, (0, 1)), (2, (2,)), (0, (3,)),
    ]
    free_reserved = [(0, 1536 * MI), (GI, 512 * MI), (512 * MI, GI), (1536 * MI, 0)]
    assert [table(built, n) for n in range(4)] == free_reserved
    check_memory_state(p, built)  # raises InputError naming the first difference


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        pytest.param(lambda s: replace(s, machine={0: s.machine[0]}), "the state has NUMA nodes", id="nodes"),
        pytest.param(
            lambda s: replace(s, entries={}),
            r"NUMA node 0: 2 assignments over nodes \[0, 1\]",
            id="lost entries",
        ),
        pytest.param(
            lambda s: replace(
                s, entries={"a": {"c": (block((0, 1), "memory", GI), block((0, 1), HP1G, 2 * GI))}}
            ),
            r"NUMA nodes \[0, 1\] memory: free",
            id="block size changed",
        ),
        pytest.param(
            lambda s: replace(s, entries={"a": {"c": (block((0, 9), "memory", GI),)}}),
            "does not have",
            id="node 9",
        ),
    ],
)
def test_check_state_names_the_difference(tamper: object, message: str) -> None:
    p = policy(*FOUR_NODES)
    state = admit(
        p, p.initial_state(), pod("a", app("c", guaranteed(memory=2 * GI, hugepages_1Gi=2 * GI))), hint(0, 1)
    )
    assert callable(tamper)
    with pytest.raises(InputError, match=message):
        check_memory_state(p, tamper(state))


def test_check_state_refuses_a_changed_reservation() -> None:
    state = StaticMemoryPolicy(machine(*FOUR_NODES), {0: {"memory": 512 * MI}}).initial_state()
    changed = StaticMemoryPolicy(machine(*FOUR_NODES), {0: {"memory": 512 * MI}, 1: {"memory": 512 * MI}})
    with pytest.raises(
        InputError, match="node 1 memory: system_reserved is 0, the machine and reservation give"
    ):
        check_memory_state(changed, state)


# -- invariants over random sequences --------------------------------------------------------------------


Steps = list[tuple[str, Pod, TopologyHint] | tuple[str, str, str]]


@st.composite
def workloads(draw: st.DrawFn) -> Steps:
    steps: Steps = []
    admitted: list[Pod] = []
    for index in range(draw(st.integers(1, 12))):
        remove = draw(st.booleans())
        if admitted and remove:
            victim = draw(st.sampled_from(admitted))
            steps.append(("remove", victim.uid, draw(st.sampled_from(victim.all_containers)).name))
            continue
        memory = draw(st.sampled_from([256 * MI, GI, 3 * GI]))
        pages = draw(st.sampled_from([0, GI]))
        nodes = draw(st.sets(st.integers(0, 2), max_size=3))
        target_hint = TopologyHint(mask_of(nodes) if nodes else None, draw(st.booleans()))
        containers = (
            app("c", guaranteed(memory=memory, hugepages_1Gi=pages) if pages else guaranteed(memory=memory)),
        )
        if draw(st.booleans()):
            target = pod(
                f"p{index}",
                app("main", guaranteed(memory=memory)),
                app("shared"),
                budget=guaranteed(cpu=4000, memory=memory + GI),
            )
            steps.append(("pod", target, target_hint))
        else:
            target = pod(f"p{index}", init("i", guaranteed(memory=memory)), *containers)
            steps.append(("containers", target, target_hint))
        admitted.append(target)
    return steps


def replay(p: StaticMemoryPolicy, steps: Steps) -> Iterator[MemoryState]:
    """The state after each step; a refused step leaves the state as it was."""
    state = p.initial_state()
    for step in steps:
        try:
            if step[0] == "remove":
                state = p.remove_container(state, str(step[1]), str(step[2]))
            elif step[0] == "pod":
                assert isinstance(step[1], Pod) and isinstance(step[2], TopologyHint)
                state = p.allocate_pod(state, step[1], step[2])
            else:
                assert isinstance(step[1], Pod) and isinstance(step[2], TopologyHint)
                before = state
                try:
                    state = admit(p, state, step[1], step[2])
                except UnexpectedAdmissionError:
                    state = before
        except (UnexpectedAdmissionError, EmptyPodSharedPoolError):
            pass
        yield state


@settings(max_examples=300, deadline=None)
@given(workloads())
def test_accounting_invariants(steps: Steps) -> None:
    p = policy((6 * GI, {GI: 2}), (6 * GI, {GI: 2}), (6 * GI, {GI: 2}))
    state = p.initial_state()
    for state in replay(p, steps):
        for node in state.machine.values():
            for entry in node.memory_map.values():
                assert entry.free >= 0 and entry.reserved >= 0
                assert entry.free + entry.reserved == entry.allocatable
        check_memory_state(p, state)
    for uid, containers in list(state.entries.items()):
        for name in list(containers):
            state = p.remove_container(state, uid, name)
    assert state.machine == p.initial_state().machine


def reference_hints(
    p: StaticMemoryPolicy, state: MemoryState, pod_uid: str, requests: Mapping[str, int]
) -> list[TopologyHint]:
    """`calculateHints` as the kubelet spells it out: every mask, checked on its own."""

    def total(mask: int, name: str, quantity: str) -> int:
        tables = [state.machine[n].memory_map.get(name) for n in nodes_of(mask)]
        return sum(getattr(t, quantity) for t in tables if t is not None)

    def enough(mask: int, quantity: str, extra: Mapping[str, int]) -> bool:
        return all(total(mask, n, quantity) + extra.get(n, 0) >= size for n, size in requests.items())

    allocatable = [m for m in iterate_masks(p.node_ids) if enough(m, "allocatable", {})]
    if not allocatable:
        return []
    narrowest = allocatable[0].bit_count()
    held = state.init_reusable.get(pod_uid, {})
    hints = []
    for mask in allocatable:
        if not enough(mask, "free", held.get(mask, {})):
            continue
        if mask.bit_count() == 1:
            allowed = mask_of(state.machine[nodes_of(mask)[0]].cells).bit_count() == 1
        else:
            used = [n for n in nodes_of(mask) if state.machine[n].assignments > 0]
            allowed = all(mask_of(state.machine[n].cells) == mask for n in used)
        if allowed:
            hints.append(TopologyHint(mask, mask.bit_count() == narrowest))
    return hints


@settings(max_examples=300, deadline=None)
@given(
    workloads(), st.sampled_from([256 * MI, GI, 3 * GI, 8 * GI, 16 * GI]), st.sampled_from([0, GI, 3 * GI])
)
def test_hints_are_the_masks_every_rule_allows(steps: Steps, memory: int, pages: int) -> None:
    """On every state a sequence leaves, for a new container of each pod (whose init containers' memory it
    may reuse) and of a pod never seen."""
    p = policy((6 * GI, {GI: 2}), (6 * GI, {GI: 2}), (6 * GI, {GI: 2}))
    resources = guaranteed(memory=memory, hugepages_1Gi=pages) if pages else guaranteed(memory=memory)
    names = ["memory", HP1G] if pages else ["memory"]
    uids = ["new", *(str(step[1].uid) for step in steps if isinstance(step[1], Pod))]
    for state in replay(p, steps):
        for uid in uids:
            probe = pod(uid, app("probe", resources))
            expected = reference_hints(p, state, uid, container_requests(probe, probe.containers[0]))
            found = p.container_hints(state, probe, probe.containers[0])
            assert found == ({name: expected for name in names} if expected else {})
