"""The topology manager against the kubelet's own cases (`topologymanager/policy_test.go`,
`numa_info_test.go`, `policy_options_test.go`, `topology_manager_test.go`) and against a literal
transcription of the kubelet's permutation walk, which the fast merge must match on every input."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import product

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podlevel.engine.bitmask import mask_of, narrowness
from podlevel.engine.errors import InputError
from podlevel.engine.hint_lattice import NodeLattice, reachable_ands_walk
from podlevel.engine.topology import CPUInfo, NUMANode, Topology
from podlevel.engine.topology_manager import (
    ProviderHints,
    TopologyHint,
    TopologyManager,
    TopologyManagerOptions,
    TopologyPolicyName,
    best_non_preferred,
    best_non_preferred_count,
    closest_key,
    filter_provider_hints,
    single_numa_hints,
)

BEST_EFFORT = TopologyPolicyName.BEST_EFFORT
RESTRICTED = TopologyPolicyName.RESTRICTED
SINGLE = TopologyPolicyName.SINGLE_NUMA_NODE
NONE = TopologyPolicyName.NONE

TWO_NODES = [[10, 11], [11, 10]]
FOUR_NODES = [[10, 11, 12, 12], [11, 10, 12, 12], [12, 12, 10, 11], [12, 12, 11, 10]]
"""commonNUMAInfoFourNodes, also the distance files of numa_info_test.go."""
EIGHT_NODES = [
    [10, 11, 12, 12, 30, 30, 30, 30],
    [11, 10, 12, 12, 30, 30, 30, 30],
    [12, 12, 10, 11, 30, 30, 30, 30],
    [12, 12, 11, 10, 30, 30, 30, 30],
    [30, 30, 30, 30, 10, 11, 12, 12],
    [30, 30, 30, 30, 11, 10, 12, 12],
    [30, 30, 30, 30, 12, 12, 10, 11],
    [30, 30, 30, 30, 12, 12, 13, 10],
]
"""commonNUMAInfoEightNodes (the last row is asymmetric in the kubelet's test too)."""


def machine(distances: Sequence[Sequence[int]], node_ids: Sequence[int] | None = None) -> Topology:
    """One CPU per NUMA node; `distances[i][j]` is the SLIT distance from the i-th to the j-th node."""
    ids = list(node_ids) if node_ids is not None else list(range(len(distances)))
    nodes = [
        NUMANode(node, 2**30, {}, {other: distances[i][j] for j, other in enumerate(ids)})
        for i, node in enumerate(ids)
    ]
    return Topology([CPUInfo(i, i, 0, node, 0) for i, node in enumerate(ids)], nodes)


def hint(*nodes: int, preferred: bool) -> TopologyHint:
    return TopologyHint(mask_of(nodes), preferred)


def any_node(preferred: bool) -> TopologyHint:
    return TopologyHint(None, preferred)


def manager(
    distances: Sequence[Sequence[int]], policy: TopologyPolicyName, *, closest: bool = False
) -> TopologyManager:
    return TopologyManager(
        machine(distances), policy, TopologyManagerOptions(prefer_closest_numa_nodes=closest)
    )


# --- options and construction ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param({}, TopologyManagerOptions(False, 8), id="defaults"),
        pytest.param(
            {"prefer-closest-numa-nodes": "true"}, TopologyManagerOptions(True, 8), id="closest true"
        ),
        pytest.param(
            {"prefer-closest-numa-nodes": "true", "max-allowable-numa-nodes": "8"},
            TopologyManagerOptions(True, 8),
            id="closest and max 8 (kubelet case)",
        ),
        pytest.param({"max-allowable-numa-nodes": "12"}, TopologyManagerOptions(False, 12), id="max 12"),
        pytest.param(
            {"max-allowable-numa-nodes": "+16"}, TopologyManagerOptions(False, 16), id="Atoi accepts +"
        ),
        pytest.param({"prefer-closest-numa-nodes": "1"}, TopologyManagerOptions(True, 8), id="ParseBool 1"),
        pytest.param({"prefer-closest-numa-nodes": "T"}, TopologyManagerOptions(True, 8), id="ParseBool T"),
        pytest.param(
            {"prefer-closest-numa-nodes": "False"}, TopologyManagerOptions(False, 8), id="ParseBool False"
        ),
        pytest.param({"prefer-closest-numa-nodes": "f"}, TopologyManagerOptions(False, 8), id="ParseBool f"),
    ],
)
def test_options_parse(values: dict[str, str], expected: TopologyManagerOptions) -> None:
    assert TopologyManagerOptions.parse(values) == expected
    assert TopologyManagerOptions.parse(expected.values()) == expected


@pytest.mark.parametrize(
    ("values", "key", "message"),
    [
        pytest.param(
            {"prefer-closest-numa-nodes": "yes"}, "prefer-closest-numa-nodes", "not a boolean", id="yes"
        ),
        pytest.param(
            {"prefer-closest-numa-nodes": ""}, "prefer-closest-numa-nodes", "not a boolean", id="empty"
        ),
        pytest.param(
            {"max-allowable-numa-nodes": "7"}, "max-allowable-numa-nodes", "below the minimum of 8", id="7"
        ),
        pytest.param({"max-allowable-numa-nodes": "a"}, "max-allowable-numa-nodes", "not an integer", id="a"),
        pytest.param(
            {"max-allowable-numa-nodes": "1_0"}, "max-allowable-numa-nodes", "not an integer", id="1_0"
        ),
        pytest.param(
            {"max-allowable-numa-nodes": " 9"}, "max-allowable-numa-nodes", "not an integer", id="space"
        ),
        pytest.param({"prefer-closest-numa": "true"}, "prefer-closest-numa", "unknown", id="unknown key"),
    ],
)
def test_options_parse_rejects(values: dict[str, str], key: str, message: str) -> None:
    with pytest.raises(InputError, match=message) as raised:
        TopologyManagerOptions.parse(values)
    assert raised.value.rule == key


def test_more_nodes_than_max_allowable_is_refused() -> None:
    nine = [[10 if i == j else 20 for j in range(9)] for i in range(9)]
    with pytest.raises(InputError, match="9 NUMA nodes, more than 8") as raised:
        manager(nine, BEST_EFFORT)
    assert raised.value.rule == "max-allowable-numa-nodes"
    TopologyManager(machine(nine), BEST_EFFORT, TopologyManagerOptions(max_allowable_numa_nodes=9))
    TopologyManager(machine(nine), NONE, TopologyManagerOptions())


def test_unknown_policy_is_refused() -> None:
    with pytest.raises(InputError, match="unknown policy 'strict'"):
        TopologyManager(machine(TWO_NODES), "strict", TopologyManagerOptions())


# --- filterProvidersHints --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("providers", "expected"),
    [
        pytest.param([], [], id="no providers"),
        pytest.param([None], [[any_node(True)]], id="provider without an answer"),
        pytest.param([{}], [[any_node(True)]], id="provider with an empty map"),
        pytest.param([{"cpu": None}], [[any_node(True)]], id="nil list: no preference"),
        pytest.param([{"cpu": []}], [[any_node(False)]], id="empty list: impossible"),
        pytest.param(
            [{"cpu": [hint(0, preferred=True)], "memory": None}, None],
            [[hint(0, preferred=True)], [any_node(True)], [any_node(True)]],
            id="one list per resource",
        ),
    ],
)
def test_filter_provider_hints(providers: list[ProviderHints], expected: list[list[TopologyHint]]) -> None:
    assert [list(hints) for hints in filter_provider_hints(providers)] == expected


# --- the kubelet's merge cases ---------------------------------------------------------------------------

Case = tuple[list[ProviderHints], TopologyHint]


def two(first: list[TopologyHint], second: list[TopologyHint]) -> list[ProviderHints]:
    """Two providers answering for one resource each."""
    return [{"resource1": first}, {"resource2": second}]


COMMON_CASES = [
    pytest.param(
        two([hint(0, preferred=True)], [hint(0, preferred=True)]),
        hint(0, preferred=True),
        id="two providers, 1 hint each, same mask, both preferred 1/2",
    ),
    pytest.param(
        two([hint(1, preferred=True)], [hint(1, preferred=True)]),
        hint(1, preferred=True),
        id="two providers, 1 hint each, same mask, both preferred 2/2",
    ),
    pytest.param(
        [None, {"resource": [hint(0, preferred=True)]}],
        hint(0, preferred=True),
        id="two providers, 1 no hints, 1 single hint preferred 1/2",
    ),
    pytest.param(
        [None, {"resource": [hint(1, preferred=True)]}],
        hint(1, preferred=True),
        id="two providers, 1 no hints, 1 single hint preferred 2/2",
    ),
    pytest.param(
        two([hint(0, preferred=True), hint(1, preferred=True)], [hint(0, preferred=True)]),
        hint(0, preferred=True),
        id="two providers, 1 with 2 hints, 1 with single hint matching 1/2",
    ),
    pytest.param(
        two([hint(0, preferred=True), hint(1, preferred=True)], [hint(1, preferred=True)]),
        hint(1, preferred=True),
        id="two providers, 1 with 2 hints, 1 with single hint matching 2/2",
    ),
    pytest.param(
        two(
            [hint(0, preferred=True), hint(1, preferred=True)],
            [hint(0, preferred=True), hint(0, 1, preferred=False)],
        ),
        hint(0, preferred=True),
        id="two providers, both with 2 hints, matching narrower preferred hint from both",
    ),
    pytest.param(
        two(
            [hint(1, preferred=True), hint(0, 1, preferred=False)],
            [hint(0, preferred=True), hint(1, preferred=True), hint(0, 1, preferred=False)],
        ),
        hint(1, preferred=True),
        id="less narrow preferred hints are chosen over narrower non-preferred hints",
    ),
    pytest.param(
        [
            {
                "resource1": [hint(1, preferred=True), hint(0, 1, preferred=False)],
                "resource2": [hint(0, preferred=True), hint(1, preferred=True), hint(0, 1, preferred=False)],
            }
        ],
        hint(1, preferred=True),
        id="multiple resources, same provider",
    ),
]

ALL_FOUR = mask_of([0, 1, 2, 3])
BEST_EFFORT_CASES = [
    pytest.param(
        two(
            [hint(0, 1, preferred=True), hint(0, 2, preferred=True)],
            [hint(0, 1, preferred=True), hint(0, 2, preferred=True)],
        ),
        hint(0, 1, preferred=True),
        id="two providers, 2 hints each, same mask (some with different bits), same preferred",
    ),
    pytest.param([], TopologyHint(ALL_FOUR, True), id="TopologyHint not set"),
    pytest.param([{}], TopologyHint(ALL_FOUR, True), id="provider returns an empty map"),
    pytest.param([{"resource": None}], TopologyHint(ALL_FOUR, True), id="provider returns a nil list"),
    pytest.param([{"resource": []}], TopologyHint(ALL_FOUR, False), id="provider returns an empty list"),
    pytest.param(
        [{"resource": [any_node(True)]}],
        TopologyHint(ALL_FOUR, True),
        id="single hint, preferred, nil affinity",
    ),
    pytest.param(
        [{"resource": [any_node(False)]}],
        TopologyHint(ALL_FOUR, False),
        id="single hint, not preferred, nil affinity",
    ),
    pytest.param(
        two([hint(0, preferred=True)], [hint(1, preferred=True)]),
        TopologyHint(ALL_FOUR, False),
        id="two providers, 1 hint each, no common mask",
    ),
    pytest.param(
        two([hint(0, preferred=True)], [hint(0, preferred=False)]),
        hint(0, preferred=False),
        id="two providers, 1 hint each, same mask, 1 preferred, 1 not 1/2",
    ),
    pytest.param(
        two([hint(1, preferred=True)], [hint(1, preferred=False)]),
        hint(1, preferred=False),
        id="two providers, 1 hint each, same mask, 1 preferred, 1 not 2/2",
    ),
    pytest.param(
        two([hint(0, preferred=True)], [hint(0, 1, preferred=True)]),
        hint(0, preferred=False),
        id="two providers, 1 hint each, 1 wider mask, both preferred 1/2",
    ),
    pytest.param(
        two([hint(0, preferred=True), hint(1, preferred=True)], [hint(0, 1, preferred=False)]),
        hint(0, preferred=False),
        id="two providers, 1 with 2 hints, 1 with single non-preferred hint matching",
    ),
    pytest.param(
        two([hint(1, preferred=True)], [hint(0, 1, preferred=True)]),
        hint(1, preferred=False),
        id="two providers, 1 hint each, 1 wider mask, both preferred 2/2",
    ),
    pytest.param(
        two([hint(0, 1, 2, 3, preferred=False), hint(0, 1, preferred=False)], [hint(0, 1, preferred=False)]),
        hint(0, 1, preferred=False),
        id="bestNonPreferredAffinityCount (1)",
    ),
    pytest.param(
        two([hint(0, 1, 2, 3, preferred=False), hint(0, 1, preferred=False)], [hint(0, 3, preferred=False)]),
        hint(0, 3, preferred=False),
        id="bestNonPreferredAffinityCount (2)",
    ),
    pytest.param(
        two([hint(0, 1, 2, 3, preferred=False), hint(0, 1, preferred=False)], [hint(1, 2, preferred=False)]),
        hint(1, 2, preferred=False),
        id="bestNonPreferredAffinityCount (3)",
    ),
    pytest.param(
        two([hint(0, 1, 2, 3, preferred=False), hint(0, 1, preferred=False)], [hint(2, 3, preferred=False)]),
        hint(2, 3, preferred=False),
        id="bestNonPreferredAffinityCount (4)",
    ),
]

COUNT_5 = two(
    [hint(0, 1, 2, 3, preferred=False), hint(0, 1, preferred=False)],
    [hint(1, 2, preferred=False), hint(2, 3, preferred=False)],
)
COUNT_6 = two(
    [hint(0, 1, 2, 3, preferred=False), hint(0, 1, preferred=False)],
    [
        hint(1, 2, 3, preferred=False),
        hint(1, 2, preferred=False),
        hint(1, 3, preferred=False),
        hint(2, 3, preferred=False),
    ],
)
NARROWEST_ONLY_CASES = [
    pytest.param(COUNT_5, hint(1, 2, preferred=False), id="bestNonPreferredAffinityCount (5)"),
    pytest.param(COUNT_6, hint(1, 2, preferred=False), id="bestNonPreferredAffinityCount (6)"),
]
CLOSEST_CASES = [
    pytest.param(
        two(
            [hint(0, 4, preferred=True), hint(0, 2, preferred=True)],
            [hint(0, 4, preferred=True), hint(0, 2, preferred=True)],
        ),
        hint(0, 2, preferred=True),
        id="two providers, 2 hints each, same mask (some with different bits), same preferred",
    ),
    pytest.param(
        two(
            [hint(4, preferred=True), hint(0, 2, preferred=True)],
            [hint(4, preferred=True), hint(0, 2, preferred=True)],
        ),
        hint(4, preferred=True),
        id="two providers, 2 hints each, different mask",
    ),
    pytest.param(COUNT_5, hint(2, 3, preferred=False), id="bestNonPreferredAffinityCount (5)"),
    pytest.param(COUNT_6, hint(2, 3, preferred=False), id="bestNonPreferredAffinityCount (6)"),
]


@pytest.mark.parametrize(("providers", "expected"), COMMON_CASES + BEST_EFFORT_CASES + NARROWEST_ONLY_CASES)
@pytest.mark.parametrize("policy", [BEST_EFFORT, RESTRICTED])
def test_merge_kubelet_cases(
    policy: TopologyPolicyName, providers: list[ProviderHints], expected: TopologyHint
) -> None:
    best, admit = manager(FOUR_NODES, policy).merge(providers)
    assert best == expected
    assert admit is (policy is BEST_EFFORT or expected.preferred)


@pytest.mark.parametrize(("providers", "expected"), CLOSEST_CASES)
def test_merge_kubelet_closest_cases(providers: list[ProviderHints], expected: TopologyHint) -> None:
    assert manager(EIGHT_NODES, BEST_EFFORT, closest=True).merge(providers) == (expected, True)


def test_prefer_closest_is_ignored_under_single_numa_node() -> None:
    """Node 0 is "farther" from itself than node 1: closest picks node 1, narrowest (lower mask) node 0."""
    odd = [[20, 30], [30, 10]]
    providers: list[ProviderHints] = [{"cpu": [hint(0, preferred=True), hint(1, preferred=True)]}]
    assert manager(odd, BEST_EFFORT, closest=True).merge(providers) == (hint(1, preferred=True), True)
    assert manager(odd, SINGLE, closest=True).merge(providers) == (hint(0, preferred=True), True)


SINGLE_NUMA_CASES = [
    pytest.param([], TopologyHint(None, True), id="TopologyHint not set"),
    pytest.param([{}], TopologyHint(None, True), id="provider returns an empty map"),
    pytest.param([{"resource": None}], TopologyHint(None, True), id="provider returns a nil list"),
    pytest.param([{"resource": []}], TopologyHint(None, False), id="provider returns an empty list"),
    pytest.param([{"resource": [any_node(True)]}], TopologyHint(None, True), id="single preferred nil hint"),
    pytest.param(
        [{"resource": [any_node(False)]}], TopologyHint(None, False), id="single non-preferred nil hint"
    ),
    pytest.param(
        two([hint(0, preferred=True)], [hint(1, preferred=True)]),
        TopologyHint(None, False),
        id="two providers, 1 hint each, no common mask",
    ),
    pytest.param(
        two([hint(0, preferred=True)], [hint(0, preferred=False)]),
        TopologyHint(None, False),
        id="two providers, 1 hint each, same mask, 1 preferred, 1 not 1/2",
    ),
    pytest.param(
        two([hint(1, preferred=True)], [hint(1, preferred=False)]),
        TopologyHint(None, False),
        id="two providers, 1 hint each, same mask, 1 preferred, 1 not 2/2",
    ),
    pytest.param(
        two([hint(0, preferred=True), hint(1, preferred=True)], [hint(0, 1, preferred=False)]),
        TopologyHint(None, False),
        id="two providers, 1 with 2 hints, 1 with single non-preferred hint matching",
    ),
    pytest.param(
        [
            {
                "resource1": [hint(0, 1, preferred=True)],
                "resource2": [hint(0, preferred=True), hint(1, preferred=True), hint(0, 1, preferred=False)],
            }
        ],
        TopologyHint(None, False),
        id="single NUMA hint generation",
    ),
    pytest.param(
        [
            {"resource1": [hint(0, preferred=True), hint(1, preferred=True), hint(0, 1, preferred=False)]},
            None,
        ],
        hint(0, preferred=True),
        id="one no-preference provider",
    ),
]


@pytest.mark.parametrize(("providers", "expected"), COMMON_CASES + SINGLE_NUMA_CASES)
def test_merge_single_numa_node_kubelet_cases(providers: list[ProviderHints], expected: TopologyHint) -> None:
    assert manager(TWO_NODES, SINGLE).merge(providers) == (expected, expected.preferred)


def test_single_numa_node_maps_the_only_node_to_no_preference() -> None:
    """On a one-node machine the single node is the default mask, which single-numa-node reports as nil."""
    best, admit = manager([[10]], SINGLE).merge([{"cpu": [hint(0, preferred=True)]}])
    assert (best, admit) == (TopologyHint(None, True), True)


# --- every policy over a few hint sets -------------------------------------------------------------------

CPU_ON_0_OR_1 = {"cpu": [hint(0, preferred=True), hint(1, preferred=True), hint(0, 1, preferred=False)]}
MEMORY_ON_1 = {"memory": [hint(1, preferred=True), hint(0, 1, preferred=False)]}
MEMORY_NEEDS_BOTH = {"memory": [hint(0, 1, preferred=True)]}
MEMORY_IMPOSSIBLE: ProviderHints = {"memory": []}
BOTH = mask_of([0, 1])

POLICY_TABLE = [
    pytest.param(
        [CPU_ON_0_OR_1, MEMORY_ON_1],
        {
            NONE: (TopologyHint(None, False), True),
            BEST_EFFORT: (hint(1, preferred=True), True),
            RESTRICTED: (hint(1, preferred=True), True),
            SINGLE: (hint(1, preferred=True), True),
        },
        id="aligned on node 1",
    ),
    pytest.param(
        [CPU_ON_0_OR_1, MEMORY_NEEDS_BOTH],
        {
            NONE: (TopologyHint(None, False), True),
            BEST_EFFORT: (TopologyHint(BOTH, False), True),
            RESTRICTED: (TopologyHint(BOTH, False), False),
            SINGLE: (TopologyHint(None, False), False),
        },
        id="memory needs two nodes: aim for the wider need",
    ),
    pytest.param(
        [{"cpu": [hint(0, 1, preferred=True)]}, MEMORY_NEEDS_BOTH],
        {
            NONE: (TopologyHint(None, False), True),
            BEST_EFFORT: (TopologyHint(BOTH, True), True),
            RESTRICTED: (TopologyHint(BOTH, True), True),
            SINGLE: (TopologyHint(None, False), False),
        },
        id="both need two nodes",
    ),
    pytest.param(
        [CPU_ON_0_OR_1, MEMORY_IMPOSSIBLE],
        {
            NONE: (TopologyHint(None, False), True),
            BEST_EFFORT: (hint(0, preferred=False), True),
            RESTRICTED: (hint(0, preferred=False), False),
            SINGLE: (TopologyHint(None, False), False),
        },
        id="memory impossible",
    ),
    pytest.param(
        [None, {"cpu": None}],
        {
            NONE: (TopologyHint(None, False), True),
            BEST_EFFORT: (TopologyHint(BOTH, True), True),
            RESTRICTED: (TopologyHint(BOTH, True), True),
            SINGLE: (TopologyHint(None, True), True),
        },
        id="nobody cares",
    ),
]


@pytest.mark.parametrize(("providers", "expected"), POLICY_TABLE)
@pytest.mark.parametrize("policy", list(TopologyPolicyName))
def test_every_policy(
    policy: TopologyPolicyName,
    providers: list[ProviderHints],
    expected: dict[TopologyPolicyName, tuple[TopologyHint, bool]],
) -> None:
    assert manager(TWO_NODES, policy).merge(providers) == expected[policy]


def test_sparse_node_ids_use_the_real_ids() -> None:
    tm = TopologyManager(machine(FOUR_NODES, [0, 2, 4, 6]), BEST_EFFORT, TopologyManagerOptions())
    assert tm.merge([]) == (TopologyHint(mask_of([0, 2, 4, 6]), True), True)
    assert tm.merge([{"cpu": [hint(4, preferred=True), hint(2, preferred=True)]}]) == (
        hint(2, preferred=True),
        True,
    )


# --- HintMerger.compare, NUMAInfo.Closest, maxOfMinAffinityCounts ----------------------------------------


@pytest.mark.parametrize(
    ("target", "current", "candidate", "winner"),
    [
        pytest.param(1, [0, 1], [0, 1], "current", id="1.1"),
        pytest.param(1, [1, 2], [0, 1], "candidate", id="1.2"),
        pytest.param(1, [0, 1], [1, 2], "current", id="1.3"),
        pytest.param(2, [0, 1], [0], "current", id="2.1"),
        pytest.param(2, [0, 1], [0, 1], "current", id="2.2"),
        pytest.param(2, [1, 2], [0, 1], "candidate", id="2.3"),
        pytest.param(2, [0, 1], [1, 2], "current", id="2.4"),
        pytest.param(2, [0], [0, 1, 2], "current", id="3a"),
        pytest.param(2, [0], [0, 1], "candidate", id="3b"),
        pytest.param(3, [0], [0, 1], "candidate", id="3ca.1"),
        pytest.param(3, [0], [1, 2], "candidate", id="3ca.2"),
        pytest.param(4, [0, 1], [1, 2, 3], "candidate", id="3ca.3"),
        pytest.param(4, [1, 2, 3], [0, 1], "current", id="3cb"),
        pytest.param(4, [0, 1, 2], [0, 1, 2], "current", id="3cc.1"),
        pytest.param(4, [0, 1, 2], [1, 2, 3], "current", id="3cc.2"),
        pytest.param(4, [1, 2, 3], [0, 1, 2], "candidate", id="3cc.3"),
    ],
)
def test_non_preferred_compare_cases(
    target: int, current: list[int], candidate: list[int], winner: str
) -> None:
    """TestCompareHintsNarrowest's non-preferred cases: the walk's winner of two candidates, either order."""
    expected = mask_of(current if winner == "current" else candidate)
    assert best_non_preferred({mask_of(current), mask_of(candidate)}, target, narrowness) == expected


@pytest.mark.parametrize(
    ("distances", "current", "candidate", "winner"),
    [
        pytest.param([[10]], [0], [0, 2], "current", id="length differs, current narrower"),
        pytest.param([[10] * 3] * 3, [0, 1], [0, 2], "current", id="same distance, current more lower bits"),
        pytest.param(
            [[10] * 4] * 4, [0, 3], [0, 2], "candidate", id="same distance, candidate more lower bits"
        ),
        pytest.param(FOUR_NODES, [0, 3], [0, 1], "candidate", id="candidate average distance is smaller"),
        pytest.param(FOUR_NODES, [2, 3], [0, 3], "current", id="current average distance is smaller"),
    ],
)
def test_closest(distances: list[list[int]], current: list[int], candidate: list[int], winner: str) -> None:
    size = max(len(distances), 3)
    full = [[distances[i % len(distances)][j % len(distances)] for j in range(size)] for i in range(size)]
    fitness = closest_key(machine(full), list(range(size)))
    best = min(mask_of(current), mask_of(candidate), key=fitness)
    assert best == mask_of(current if winner == "current" else candidate)


@pytest.mark.parametrize(
    ("nodes", "average"),
    [
        pytest.param([0], 10, id="1 node"),
        pytest.param([0, 2], 11, id="4 nodes, 2 set"),
        pytest.param([0, 2, 3], 11.11111111111111, id="4 nodes, 3 set"),
        pytest.param([0, 1, 2, 3], 11.25, id="4 nodes, all set"),
    ],
)
def test_closest_ranks_by_mean_distance(nodes: list[int], average: float) -> None:
    """TestCalculateAvgDistanceFor: the key's distance term is the mean times the number of ordered pairs."""
    _, total, _ = closest_key(machine(FOUR_NODES), [0, 1, 2, 3])(mask_of(nodes))
    assert total / len(nodes) ** 2 == pytest.approx(average)


@pytest.mark.parametrize(
    ("lists", "expected"),
    [
        pytest.param([], 0, id="no lists"),
        pytest.param([[0]], 0, id="empty mask"),
        pytest.param([[1]], 1, id="one node"),
        pytest.param([[0b11]], 2, id="two nodes"),
        pytest.param([[0b11, 0b111]], 2, id="narrowest of a list"),
        pytest.param([[0b11, 0b111], [0b111]], 3, id="largest narrowest across lists"),
        pytest.param([[0b11, 0b111], [0b111, 0b1111]], 3, id="largest narrowest, wider lists"),
        pytest.param([[None, 0b1]], 1, id="nil ignored"),
    ],
)
def test_best_non_preferred_count(lists: list[list[int | None]], expected: int) -> None:
    assert best_non_preferred_count([set(masks) for masks in lists]) == expected


# --- equivalence with the literal permutation walk -------------------------------------------------------


def kubelet_walk(
    lists: Sequence[Sequence[TopologyHint]],
    node_ids: Sequence[int],
    fitness: Callable[[int], tuple[int, ...]],
) -> TopologyHint:
    """`HintMerger.Merge` as the kubelet writes it: every permutation, merged and compared one by one."""
    default = mask_of(node_ids)
    target = best_non_preferred_count([{h.affinity for h in hints} for hints in lists])

    def fitter(current: tuple[int, bool], candidate: tuple[int, bool]) -> tuple[int, bool]:
        if candidate[0] == current[0]:
            return current
        return current if fitness(current[0]) <= fitness(candidate[0]) else candidate

    def compare(current: tuple[int, bool] | None, candidate: tuple[int, bool]) -> tuple[int, bool] | None:
        size = candidate[0].bit_count()
        if size == 0:
            return current
        if current is None:
            return candidate
        if current[1] != candidate[1]:
            return current if current[1] else candidate
        if current[1]:
            return fitter(current, candidate)
        now = current[0].bit_count()
        if now > target:
            return fitter(current, candidate)
        if now == target:
            return fitter(current, candidate) if size == target else current
        if size > target:
            return current
        if size == target or size > now:
            return candidate
        if size < now:
            return current
        return fitter(current, candidate)

    best: tuple[int, bool] | None = None
    for permutation in product(*lists):
        affinities = [h.affinity for h in permutation if h.affinity is not None]
        preferred = all(h.preferred for h in permutation) and all(a == affinities[0] for a in affinities)
        merged = default
        for affinity in affinities:
            merged &= affinity
        best = compare(best, (merged, preferred))
    return TopologyHint(default, False) if best is None else TopologyHint(*best)


def kubelet_policy(
    tm: TopologyManager, topology: Topology, providers: Sequence[ProviderHints]
) -> tuple[TopologyHint, bool]:
    """The four policies' `Merge` around `kubelet_walk`."""
    if tm.policy is NONE:
        return TopologyHint(None, False), True
    lists = filter_provider_hints(providers)
    nodes = topology.numa_node_ids
    if tm.policy is SINGLE:
        best = kubelet_walk(single_numa_hints(lists), nodes, narrowness)
        if best.affinity == mask_of(nodes):
            best = TopologyHint(None, best.preferred)
        return best, best.preferred
    fitness = closest_key(topology, nodes) if tm.options.prefer_closest_numa_nodes else narrowness
    best = kubelet_walk(lists, nodes, fitness)
    return best, tm.policy is BEST_EFFORT or best.preferred


@st.composite
def machines(draw: st.DrawFn) -> Topology:
    ids = sorted(draw(st.sets(st.integers(0, 7), min_size=1, max_size=5)))
    distance = st.sampled_from([11, 12, 20, 21, 30])
    rows = [[10 if i == j else draw(distance) for j in range(len(ids))] for i in range(len(ids))]
    return machine(rows, ids)


def hint_lists(universe: int) -> st.SearchStrategy[list[TopologyHint] | None]:
    affinity = st.one_of(st.none(), st.integers(0, universe), st.integers(0, 255))
    hints = st.builds(TopologyHint, affinity, st.booleans())
    return st.one_of(st.none(), st.lists(hints, max_size=6))


@st.composite
def providers_for(draw: st.DrawFn, topology: Topology) -> list[ProviderHints]:
    universe = mask_of(topology.numa_node_ids)
    answer = st.one_of(
        st.none(),
        st.dictionaries(
            st.sampled_from(["cpu", "memory", "hugepages-2Mi"]), hint_lists(universe), max_size=3
        ),
    )
    return draw(st.lists(answer, max_size=3))


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_merge_equals_the_permutation_walk(data: st.DataObject) -> None:
    topology = data.draw(machines())
    providers = data.draw(providers_for(topology))
    for policy in TopologyPolicyName:
        for closest in (False, True):
            tm = TopologyManager(topology, policy, TopologyManagerOptions(prefer_closest_numa_nodes=closest))
            assert tm.merge(providers) == kubelet_policy(tm, topology, providers)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_lattice_and_walk_reach_the_same_ands(data: st.DataObject) -> None:
    ids = sorted(data.draw(st.sets(st.integers(0, 9), min_size=1, max_size=6)))
    default = mask_of(ids)
    subsets = st.integers(0, (1 << len(ids)) - 1).map(
        lambda index: mask_of(n for i, n in enumerate(ids) if index >> i & 1)
    )
    mask_sets = data.draw(st.lists(st.sets(subsets, min_size=1, max_size=12), min_size=1, max_size=4))
    assert NodeLattice(ids).reachable_ands(mask_sets) == reachable_ands_walk(mask_sets, default)


def test_merge_of_full_eight_node_lists_matches_the_walk() -> None:
    """The case the lattice exists for: 255 CPU hints against 247 memory hints, no common preferred mask."""
    topology = machine(EIGHT_NODES)
    nodes = list(range(8))
    masks = [mask_of(n for n in nodes if index >> n & 1) for index in range(1, 256)]
    cpu = [TopologyHint(m, m.bit_count() == 1) for m in masks]
    memory = [TopologyHint(m, m.bit_count() == 2) for m in masks if m.bit_count() >= 2]
    for closest in (False, True):
        tm = TopologyManager(topology, BEST_EFFORT, TopologyManagerOptions(prefer_closest_numa_nodes=closest))
        providers: list[ProviderHints] = [{"cpu": cpu}, {"memory": memory}]
        assert tm.merge(providers) == kubelet_policy(tm, topology, providers)
