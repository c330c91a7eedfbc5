"""CPU selection against the kubelet's own cases (`cpumanager/cpu_assignment_test.go`)."""

from __future__ import annotations

import dataclasses

import pytest

from podlevel.engine.cpu_assignment import (
    AllocationFailed,
    CPUAccumulator,
    CPULayout,
    take_by_topology,
    take_by_topology_numa_distributed,
)
from podlevel.engine.cpuset import CPUSet
from podlevel.engine.errors import InputError
from podlevel.engine.topology import Topology
from support.kubelet_topologies import (
    DUAL_HT,
    DUAL_NO_HT,
    LARGE_HT,
    MULTI_NUMA_HT,
    SINGLE_HT,
    SOCKETS_PER_NUMA_HT,
    TRIPLE_HT,
    UNCORE_1S,
    UNCORE_2S,
    UNCORE_NUMA,
    UNCORE_SMT,
)


def accumulator(topology: Topology, available: str, *, spread: bool = False) -> CPUAccumulator:
    return CPUAccumulator(CPULayout.of(topology), CPUSet.parse(available), 0, spread=spread)


FREE_SOCKETS = [
    pytest.param(SINGLE_HT, "0-7", [0], id="single socket HT, 1 socket free"),
    pytest.param(SINGLE_HT, "1-7", [], id="single socket HT, 0 sockets free"),
    pytest.param(DUAL_HT, "0-11", [0, 1], id="dual socket HT, 2 sockets free"),
    pytest.param(DUAL_HT, "0-9,11", [1], id="dual socket HT, 1 socket free"),
    pytest.param(DUAL_HT, "0,2-9,11", [], id="dual socket HT, 0 sockets free"),
    pytest.param(MULTI_NUMA_HT, "0-79", [0, 1], id="dual socket multi numa, 2 sockets free"),
    pytest.param(MULTI_NUMA_HT, "1-79", [1], id="dual socket multi numa, 1 socket free"),
    pytest.param(MULTI_NUMA_HT, "1-78", [], id="dual socket multi numa, 0 sockets free"),
    pytest.param(SOCKETS_PER_NUMA_HT, "0-79", [0, 1, 2, 3], id="2 sockets per numa, 4 sockets free"),
    pytest.param(SOCKETS_PER_NUMA_HT, "0-19,21-79", [0, 1, 3], id="2 sockets per numa, 3 sockets free"),
    pytest.param(SOCKETS_PER_NUMA_HT, "0-59,61-78", [0, 1], id="2 sockets per numa, 2 sockets free"),
    pytest.param(SOCKETS_PER_NUMA_HT, "1-19,21-38,41-60,61-78", [1], id="2 sockets per numa, 1 socket free"),
    pytest.param(SOCKETS_PER_NUMA_HT, "0-40,42-49,51-68,71-79", [], id="2 sockets per numa, 0 sockets free"),
]


@pytest.mark.parametrize(("topology", "available", "expected"), FREE_SOCKETS)
def test_free_sockets(topology: Topology, available: str, expected: list[int]) -> None:
    acc = accumulator(topology, available)
    assert sorted(acc.wholly_free(acc.socket_order(acc.free), acc.layout.socket)) == expected


FREE_NUMA_NODES = [
    pytest.param(SINGLE_HT, "0-7", [0], id="single socket HT, 1 node free"),
    pytest.param(SINGLE_HT, "1-7", [], id="single socket HT, 0 nodes free"),
    pytest.param(DUAL_HT, "0-11", [0, 1], id="dual socket HT, 2 nodes free"),
    pytest.param(DUAL_HT, "0-9,11", [1], id="dual socket HT, 1 node free"),
    pytest.param(DUAL_HT, "0,2-9,11", [], id="dual socket HT, 0 nodes free"),
    pytest.param(MULTI_NUMA_HT, "0-79", [0, 1, 2, 3], id="dual socket multi numa, 4 nodes free"),
    pytest.param(MULTI_NUMA_HT, "1-79", [1, 2, 3], id="dual socket multi numa, 3 nodes free"),
    pytest.param(MULTI_NUMA_HT, "1-9,11-79", [2, 3], id="dual socket multi numa, 2 nodes free"),
    pytest.param(MULTI_NUMA_HT, "1-9,11-59,61-79", [3], id="dual socket multi numa, 1 node free"),
    pytest.param(MULTI_NUMA_HT, "1-9,11-59,61-78", [], id="dual socket multi numa, 0 nodes free"),
    pytest.param(MULTI_NUMA_HT, "1-59,61-79", [1, 3], id="socket-first order across sockets"),
    pytest.param(SOCKETS_PER_NUMA_HT, "0-79", [0, 1], id="2 sockets per numa, 2 nodes free"),
    pytest.param(SOCKETS_PER_NUMA_HT, "0-9,11-79", [1], id="2 sockets per numa, 1 node free"),
    pytest.param(SOCKETS_PER_NUMA_HT, "0-9,11-59,61-79", [], id="2 sockets per numa, 0 nodes free"),
]


@pytest.mark.parametrize(("topology", "available", "expected"), FREE_NUMA_NODES)
def test_free_numa_nodes_in_sort_order(topology: Topology, available: str, expected: list[int]) -> None:
    acc = accumulator(topology, available)
    assert list(acc.wholly_free(acc.numa_order(acc.free), acc.layout.numa)) == expected


FREE_CORES = [
    pytest.param(SINGLE_HT, "0-7", [0, 1, 2, 3], id="single socket HT, 4 cores free"),
    pytest.param(SINGLE_HT, "0-2,4-6", [0, 1, 2], id="single socket HT, 3 cores free"),
    pytest.param(SINGLE_HT, "0-6", [0, 1, 2], id="single socket HT, 3 cores free, 1 partial"),
    pytest.param(SINGLE_HT, "", [], id="single socket HT, nothing free"),
    pytest.param(SINGLE_HT, "0-3", [], id="single socket HT, 4 partial cores"),
    pytest.param(DUAL_HT, "0-11", [0, 2, 4, 1, 3, 5], id="dual socket HT, 6 cores free"),
    pytest.param(DUAL_HT, "1-5,7-11", [2, 4, 1, 3, 5], id="dual socket HT, 1 consumed on socket 0"),
    pytest.param(DUAL_HT, "2-5,8-11", [2, 4, 3, 5], id="dual socket HT, 1 consumed on each socket"),
]


@pytest.mark.parametrize(("topology", "available", "expected"), FREE_CORES)
def test_free_cores_in_sort_order(topology: Topology, available: str, expected: list[int]) -> None:
    acc = accumulator(topology, available)
    assert list(acc.wholly_free(acc.core_order(acc.free), acc.layout.core)) == expected


SORTED_CPUS = [
    pytest.param(SINGLE_HT, "0-7", False, [0, 4, 1, 5, 2, 6, 3, 7], id="single socket HT, 8 free"),
    pytest.param(SINGLE_HT, "3-7", False, [4, 5, 6, 3, 7], id="single socket HT, 5 free"),
    pytest.param(
        DUAL_HT, "0-11", False, [0, 6, 2, 8, 4, 10, 1, 7, 3, 9, 5, 11], id="dual socket HT, 12 free"
    ),
    pytest.param(DUAL_HT, "1-11", False, [6, 2, 8, 4, 10, 1, 7, 3, 9, 5, 11], id="dual socket HT, 11 free"),
    pytest.param(DUAL_HT, "1-5,7-11", False, [2, 8, 4, 10, 1, 7, 3, 9, 5, 11], id="dual socket HT, 10 free"),
    pytest.param(
        TRIPLE_HT, "0-3,6-13", False, [12, 13, 0, 1, 2, 3, 6, 7, 8, 9, 10, 11], id="triple socket HT, 12 free"
    ),
    pytest.param(DUAL_HT, "0-11", True, [0, 2, 4, 6, 8, 10, 1, 3, 5, 7, 9, 11], id="spread, dual socket HT"),
]


@pytest.mark.parametrize(("topology", "available", "spread", "expected"), SORTED_CPUS)
def test_cpu_order_packed_and_spread(
    topology: Topology, available: str, spread: bool, expected: list[int]
) -> None:
    acc = accumulator(topology, available, spread=spread)
    assert list(acc.cpu_order(acc.free)) == expected


COMMON_CASES = [
    pytest.param(SINGLE_HT, "0-7", 0, "", id="take zero cpus"),
    pytest.param(SINGLE_HT, "0-7", 1, "0", id="take one cpu from single socket HT"),
    pytest.param(SINGLE_HT, "1,3,5-7", 1, "6", id="take one cpu, some cpus taken"),
    pytest.param(SINGLE_HT, "0-7", 2, "0,4", id="take two cpus from single socket HT"),
    pytest.param(SINGLE_HT, "0-7", 8, "0-7", id="take all cpus from single socket HT"),
    pytest.param(SINGLE_HT, "0-3,6", 2, "2,6", id="take two cpus, only one core totally free"),
    pytest.param(DUAL_HT, "0-11", 6, "0,2,4,6,8,10", id="take a socket from dual socket HT"),
    pytest.param(MULTI_NUMA_HT, "0-79", 40, "0-19,40-59", id="take a socket, multi numa per socket"),
    pytest.param(MULTI_NUMA_HT, "0-79", 20, "0-9,40-49", id="take a numa node, multi numa per socket"),
    pytest.param(MULTI_NUMA_HT, "10-39,50-79", 20, "10-19,50-59", id="take a numa node, 1 node taken"),
    pytest.param(MULTI_NUMA_HT, "0-79", 60, "0-29,40-69", id="take a socket and a numa node"),
    pytest.param(MULTI_NUMA_HT, "1-39,41-79", 60, "10-39,50-79", id="take socket and node, a core taken"),
]

PACKED_CASES = [
    *COMMON_CASES,
    pytest.param(DUAL_HT, "1-5,7-11", 1, "2", id="one cpu from dual socket HT, core from socket 0"),
    pytest.param(DUAL_HT, "0-11", 8, "0,6,2,8,4,10,1,7", id="4 cores: 3 filling node 0, 1 from node 1"),
    pytest.param(
        MULTI_NUMA_HT, "0-79", 64, "0-29,40-69,30,31,70,71", id="32 cores: 3 nodes filled, 2 from the 4th"
    ),
    pytest.param(DUAL_NO_HT, "0-7", 2, "0,1", id="no SMT: two cpus from the first socket"),
]


@pytest.mark.parametrize(("topology", "available", "count", "expected"), PACKED_CASES)
def test_take_by_topology_packed(topology: Topology, available: str, count: int, expected: str) -> None:
    assert take_by_topology(topology, CPUSet.parse(available), count) == CPUSet.parse(expected)


UNCORE_CASES = [
    pytest.param(UNCORE_1S, "1-15", 10, "1-2,4-11", id="two full uncore caches and part of one"),
    pytest.param(DUAL_HT, "1-5,7-11", 1, "1", id="one cpu, odd request takes one thread of a core"),
    pytest.param(UNCORE_2S, "0-15", 4, "0-3", id="first free uncore cache of first socket"),
    pytest.param(UNCORE_2S, "2-15", 6, "2-7", id="all available uncore caches of first socket"),
    pytest.param(UNCORE_2S, "8-15", 4, "8-11", id="first free uncore cache of second socket"),
    pytest.param(UNCORE_NUMA, "3-8,12", 2, "4,5", id="first fitting uncore cache of a numa node"),
    pytest.param(UNCORE_SMT, "2-7,10-15", 6, "4-6,12-14", id="best uncore cache, SMT"),
    pytest.param(UNCORE_SMT, "1-7,9-15", 10, "1,4-7,9,12-15", id="several uncore caches, SMT"),
]


@pytest.mark.parametrize(("topology", "available", "count", "expected"), UNCORE_CASES)
def test_take_by_topology_prefers_uncore_caches(
    topology: Topology, available: str, count: int, expected: str
) -> None:
    result = take_by_topology(topology, CPUSet.parse(available), count, prefer_uncore=True)
    assert result == CPUSet.parse(expected)


SPREAD_CASES = [
    pytest.param(SINGLE_HT, "0-7", 3, "0-2", id="single socket HT, 3 cpus"),
    pytest.param(DUAL_HT, "0-11", 2, "0,2", id="dual socket HT, 2 cpus"),
    pytest.param(DUAL_HT, "0-11", 3, "0,2,4", id="dual socket HT, 3 cpus"),
    pytest.param(DUAL_HT, "0-11", 6, "0,2,4,6,8,10", id="dual socket HT, 6 cpus"),
    pytest.param(DUAL_HT, "0-11", 8, "0,2,4,6,8,10,1,3", id="dual socket HT, 8 cpus"),
    pytest.param(DUAL_NO_HT, "0-7", 2, "0,1", id="dual socket no HT, 2 cpus"),
    pytest.param(MULTI_NUMA_HT, "0-79", 8, "0-7", id="multi numa per socket HT, 8 cpus"),
]


@pytest.mark.parametrize(("topology", "available", "count", "expected"), SPREAD_CASES)
def test_take_by_topology_spread_skips_whole_cores(
    topology: Topology, available: str, count: int, expected: str
) -> None:
    assert take_by_topology(topology, CPUSet.parse(available), count, spread=True) == CPUSet.parse(expected)


DISTRIBUTED_CASES = [
    *[pytest.param(*case.values[:3], 1, case.values[3], id=f"group 1, {case.id}") for case in COMMON_CASES],
    pytest.param(DUAL_HT, "0-11", 8, 1, "0,6,2,8,1,7,3,9", id="4 cores, 2 on each numa node"),
    pytest.param(
        MULTI_NUMA_HT,
        "0-79",
        64,
        1,
        "0-7,10-17,20-27,30-37,40-47,50-57,60-67,70-77",
        id="32 cores, 8 on each numa node",
    ),
    pytest.param(
        MULTI_NUMA_HT,
        "0-79",
        48,
        1,
        "0-7,10-17,20-27,40-47,50-57,60-67",
        id="24 cores, 8 on each of the first 3 nodes",
    ),
    pytest.param(
        MULTI_NUMA_HT,
        "1-29,32-39,41-69,72-79",
        48,
        1,
        "1-8,10-17,20-27,41-48,50-57,60-67",
        id="24 cores on the first 3 nodes, all but 2 of node 0",
    ),
    pytest.param(
        MULTI_NUMA_HT,
        "2-29,31-39,42-69,71-79",
        48,
        1,
        "10-17,20-27,31-38,50-57,60-67,71-78",
        id="24 cores on the last 3 nodes though node 0 could hold 8",
    ),
    pytest.param(
        MULTI_NUMA_HT,
        "0-2,10-12,20-22,30-32,40-41,50-51,60-61,70-71",
        16,
        1,
        "0-1,10-11,20-21,30-31,40-41,50-51,60-61,70-71",
        id="8 cores, 2 on each numa node",
    ),
    pytest.param(DUAL_HT, "1-5,7-11", 1, 1, "1", id="one cpu, group 1"),
    pytest.param(DUAL_HT, "1-5,7-11", 1, 2, "2", id="one cpu, group 2 falls back to packed"),
    pytest.param(MULTI_NUMA_HT, "0-79", 26, 1, "0-6,10-16,40-45,50-55", id="13 cores over the first 2 nodes"),
    pytest.param(MULTI_NUMA_HT, "0-79", 26, 2, "0-6,10-15,40-46,50-55", id="13 cores over 2 nodes, group 2"),
    pytest.param(
        MULTI_NUMA_HT,
        "0-79",
        62,
        1,
        "0-7,10-17,20-27,30-37,40-47,50-57,60-66,70-76",
        id="31 cores, 15 per node, 1 extra on nodes 0 and 1",
    ),
    pytest.param(
        MULTI_NUMA_HT,
        "0-79",
        62,
        2,
        "0-7,10-17,20-27,30-36,40-47,50-57,60-67,70-76",
        id="31 cores, 14 per node, 2 extra on nodes 0, 1, 2 (group 2)",
    ),
    pytest.param(
        MULTI_NUMA_HT,
        "0-8,10-18,20-39,40-48,50-58,60-79",
        62,
        1,
        "0-7,10-17,20-27,30-37,40-46,50-56,60-67,70-77",
        id="31 cores, extra on nodes 2 and 3 to keep balance",
    ),
    pytest.param(
        MULTI_NUMA_HT,
        "0-8,10-18,20-39,40-48,50-58,60-79",
        62,
        2,
        "0-7,10-16,20-27,30-37,40-47,50-56,60-67,70-77",
        id="31 cores, extra on nodes 0, 2, 3 (group 2)",
    ),
    pytest.param(
        MULTI_NUMA_HT,
        "0-3,10-13,20-23,30-36,40-43,50-53,60-63,70-76",
        34,
        1,
        "0-3,10-13,20-23,30-34,40-43,50-53,60-63,70-74",
        id="remainder goes to nodes that can hold it",
    ),
    pytest.param(
        LARGE_HT,
        "0,128,30,31,158,159,43-47,171-175,62,63,190,191,75-79,203-207,94,96,222,223,101-111,229-239,126,127,254,255",
        28,
        1,
        "43-47,75-79,96,101-105,171-174,203-206,229-232",
        id="failure seen on a live machine",
    ),
]


@pytest.mark.parametrize(("topology", "available", "count", "group_size", "expected"), DISTRIBUTED_CASES)
def test_take_by_topology_numa_distributed(
    topology: Topology, available: str, count: int, group_size: int, expected: str
) -> None:
    result = take_by_topology_numa_distributed(topology, CPUSet.parse(available), count, group_size)
    assert result == CPUSet.parse(expected)


@pytest.mark.parametrize("distributed", [False, True], ids=["packed", "distributed"])
def test_not_enough_cpus_names_the_numbers(distributed: bool) -> None:
    available = CPUSet.parse("0,2,4,6")
    with pytest.raises(AllocationFailed, match=r"requested=5, available=4"):
        if distributed:
            take_by_topology_numa_distributed(SINGLE_HT, available, 5, 1)
        else:
            take_by_topology(SINGLE_HT, available, 5)


def test_cpus_outside_the_machine_are_never_taken() -> None:
    with pytest.raises(AllocationFailed, match=r"requested=2"):
        take_by_topology(SINGLE_HT, CPUSet.parse("7,64-65"), 2)


def test_cpus_the_layout_cannot_reach_fail_with_the_numbers_and_the_step() -> None:
    """A layout whose socket lists lose a core leaves that core's CPUs unreachable: the guard after the
    last step names the request, what was free and the step."""
    layout = CPULayout.of(SINGLE_HT)
    lost = dataclasses.replace(layout, cores_of_socket={0: layout.cores_of_socket[0][:-1]})
    last_core = CPUSet.from_mask(layout.core[layout.cores_of_socket[0][-1]])
    with pytest.raises(AllocationFailed) as raised:
        lost.take(last_core, 1)
    assert str(raised.value) == (
        "failed to allocate cpus: requested=1, available=2, still 1 needed after the last step "
        "(take_remaining_cpus); every free CPU should be in the core order"
    )


@pytest.mark.parametrize(
    ("count", "group_size", "rule"),
    [
        pytest.param(-1, 1, "cpu request", id="negative count"),
        pytest.param(2, 0, "cpu group size", id="group 0"),
    ],
)
def test_bad_requests_are_input_errors(count: int, group_size: int, rule: str) -> None:
    with pytest.raises(InputError) as raised:
        take_by_topology_numa_distributed(SINGLE_HT, CPUSet.parse("0-7"), count, group_size)
    assert raised.value.rule == rule
    assert str(count if rule == "cpu request" else group_size) in raised.value.message


@pytest.mark.parametrize("count", [*range(0, 68, 7), 68])
@pytest.mark.parametrize(
    "options", [{}, {"spread": True}, {"prefer_uncore": True}], ids=["packed", "spread", "uncore"]
)
def test_result_is_a_subset_of_the_requested_size(count: int, options: dict[str, bool]) -> None:
    available = CPUSet.parse("1-9,12-37,41-44,50-78")
    result = take_by_topology(MULTI_NUMA_HT, available, count, **options)
    assert len(result) == count
    assert result.is_subset(available)
