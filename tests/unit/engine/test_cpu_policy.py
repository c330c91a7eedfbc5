"""The static CPU policy against the kubelet's cases (`policy_static_test.go`, `policy_options_test.go`)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from podlevel.engine.bitmask import iterate_masks, nodes_of
from podlevel.engine.cpu_policy import CPUManagerOptions, CPUState, StaticCPUPolicy
from podlevel.engine.cpuset import CPUSet
from podlevel.engine.errors import (
    AdmissionError,
    EmptyPodSharedPoolError,
    InputError,
    SMTAlignmentError,
    UnexpectedAdmissionError,
)
from podlevel.engine.pod import Container, ContainerKind, Pod, Resources
from podlevel.engine.quantity import bytes_of, milli_cpu
from podlevel.engine.shared_pool import empty_shared_pool_violation
from podlevel.engine.topology import Topology, from_spec
from podlevel.engine.topology_manager import TopologyHint
from support.builders import pod, resources
from support.kubelet_topologies import (
    DUAL_HT,
    DUAL_NO_HT,
    LARGE_HT,
    MULTI_NUMA_HT,
    SINGLE_HT,
    SOCKETS_PER_NUMA_HT,
)

ANY = TopologyHint(None, True)
INIT, SIDECAR, APP = ContainerKind.INIT, ContainerKind.SIDECAR, ContainerKind.APP


def quantities(cpu: str, memory: str, cpu_limit: str | None = None) -> Resources:
    """CPU and memory as the kubelet's test pods write them; requests equal limits but for a `cpu_limit`."""
    memory_bytes = bytes_of(memory)
    return resources(
        {"cpu": milli_cpu(cpu), "memory": memory_bytes},
        {"cpu": milli_cpu(cpu_limit or cpu), "memory": memory_bytes},
    )


def ctr(
    name: str, cpu: str | None = None, kind: ContainerKind = APP, cpu_limit: str | None = None
) -> Container:
    """A container of the kubelet's test pods: `cpu` and 100Mi of memory, or no resources without `cpu`."""
    return Container(name, kind, quantities(cpu, "100Mi", cpu_limit) if cpu else Resources())


def pod_level(cpu: str, limit: str | None = None) -> Resources:
    """Pod-level resources as the kubelet's test pods have them: `cpu` and 300Mi of memory."""
    return quantities(cpu, "300Mi", limit)


def policy(
    topology: Topology, reserved: str = "0", options: Mapping[str, str] | None = None, tm: str = "best-effort"
) -> StaticCPUPolicy:
    return StaticCPUPolicy(
        topology, CPUSet.parse(reserved), CPUManagerOptions.parse(options or {}, topology, tm)
    )


def state(default: str, entries: Mapping[str, Mapping[str, str]] | None = None) -> CPUState:
    parsed = {
        uid: {name: CPUSet.parse(cpus) for name, cpus in ctrs.items()}
        for uid, ctrs in (entries or {}).items()
    }
    return CPUState(default=CPUSet.parse(default), entries=parsed)


def numa(*nodes: int) -> TopologyHint:
    return TopologyHint(sum(1 << n for n in nodes), True)


def check_invariants(p: StaticCPUPolicy, s: CPUState) -> None:
    """SHARED, bubbles and the entries of bubble-less pods cover the machine without overlap between pods."""
    seen = s.default.mask
    total = s.default.mask.bit_count()
    for uid, containers in s.entries.items():
        held = 0
        for cpus in containers.values():
            held |= cpus.mask
        bubble = s.pod_entries.get(uid)
        if bubble is not None:
            assert held & ~bubble.mask == 0, f"pod {uid} has entries outside its bubble"
            held = bubble.mask
        assert held & seen == 0, f"pod {uid} overlaps another pod or the shared pool"
        seen |= held
        total += held.bit_count()
    machine = p.topology.all_cpus - (p.reserved if p.options.strict_cpu_reservation else CPUSet())
    assert CPUSet.from_mask(seen) == machine
    assert total == len(machine)
    assert len(s.reusable) <= 1


# -- options -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param({}, CPUManagerOptions(), id="none"),
        pytest.param(
            {"full-pcpus-only": "true"}, CPUManagerOptions(full_pcpus_only=True), id="full-pcpus-only"
        ),
        pytest.param(
            {"distribute-cpus-across-numa": "1"},
            CPUManagerOptions(distribute_cpus_across_numa=True),
            id="numa, 1",
        ),
        pytest.param(
            {"align-by-socket": "T"}, CPUManagerOptions(align_by_socket=True), id="align-by-socket, T"
        ),
        pytest.param(
            {"distribute-cpus-across-cores": "True"},
            CPUManagerOptions(distribute_cpus_across_cores=True),
            id="cores",
        ),
        pytest.param(
            {"strict-cpu-reservation": "TRUE"},
            CPUManagerOptions(strict_cpu_reservation=True),
            id="strict, TRUE",
        ),
        pytest.param(
            {"prefer-align-cpus-by-uncorecache": "t"},
            CPUManagerOptions(prefer_align_cpus_by_uncorecache=True),
            id="uncorecache, t",
        ),
        pytest.param(
            {"full-pcpus-only": "False", "strict-cpu-reservation": "0"}, CPUManagerOptions(), id="false"
        ),
        pytest.param(
            {"full-pcpus-only": "true", "distribute-cpus-across-numa": "true"},
            CPUManagerOptions(full_pcpus_only=True, distribute_cpus_across_numa=True),
            id="full-pcpus-only with numa",
        ),
    ],
)
def test_options_parse_with_parse_bool(values: dict[str, str], expected: CPUManagerOptions) -> None:
    assert CPUManagerOptions.parse(values, MULTI_NUMA_HT, "best-effort") == expected
    assert CPUManagerOptions.parse(expected.values(), MULTI_NUMA_HT, "best-effort") == expected


@pytest.mark.parametrize(
    ("values", "topology", "tm", "message"),
    [
        pytest.param(
            {"no-such-option": "true"}, DUAL_HT, "none", "unknown CPU Manager Policy option", id="unknown"
        ),
        pytest.param(
            {"full-pcpus-only": "yes"}, DUAL_HT, "none", "full-pcpus-only: bad value 'yes'", id="yes"
        ),
        pytest.param(
            {"full-pcpus-only": ""}, DUAL_HT, "none", "full-pcpus-only: bad value ''", id="empty value"
        ),
        pytest.param(
            {"full-pcpus-only": "true", "distribute-cpus-across-cores": "true"},
            DUAL_HT,
            "none",
            "full-pcpus-only and distribute-cpus-across-cores",
            id="full-pcpus-only + cores",
        ),
        pytest.param(
            {"distribute-cpus-across-numa": "true", "distribute-cpus-across-cores": "true"},
            DUAL_HT,
            "none",
            "distribute-cpus-across-numa and distribute-cpus-across-cores",
            id="numa + cores",
        ),
        pytest.param(
            {"prefer-align-cpus-by-uncorecache": "true", "distribute-cpus-across-cores": "true"},
            DUAL_HT,
            "none",
            "prefer-align-cpus-by-uncorecache and distribute-cpus-across-cores",
            id="uncore + cores",
        ),
        pytest.param(
            {"prefer-align-cpus-by-uncorecache": "true", "distribute-cpus-across-numa": "true"},
            DUAL_HT,
            "none",
            "prefer-align-cpus-by-uncorecache and distribute-cpus-across-numa",
            id="uncore + numa",
        ),
        pytest.param(
            {"align-by-socket": "true"},
            MULTI_NUMA_HT,
            "single-numa-node",
            "single-numa-node is incompatible with align-by-socket",
            id="align-by-socket + single-numa-node",
        ),
        pytest.param(
            {"align-by-socket": "true"},
            SOCKETS_PER_NUMA_HT,
            "restricted",
            "this machine has 4 sockets and 2 NUMA nodes",
            id="align-by-socket, sockets > NUMA nodes",
        ),
    ],
)
def test_bad_options_name_the_option(
    values: dict[str, str], topology: Topology, tm: str, message: str
) -> None:
    with pytest.raises(InputError, match=message):
        CPUManagerOptions.parse(values, topology, tm)


@pytest.mark.parametrize(
    ("reserved", "options", "message"),
    [
        pytest.param("", CPUManagerOptions(), "at least one reserved CPU", id="nothing reserved"),
        pytest.param(
            "10-12", CPUManagerOptions(), r"reserved CPUs 12 are not on this machine", id="off machine"
        ),
        pytest.param(
            "0",
            CPUManagerOptions(full_pcpus_only=True, distribute_cpus_across_cores=True),
            "can not be used",
            id="incompatible options built directly",
        ),
    ],
)
def test_bad_policy_input(reserved: str, options: CPUManagerOptions, message: str) -> None:
    with pytest.raises(InputError, match=message):
        StaticCPUPolicy(DUAL_HT, CPUSet.parse(reserved), options)


@pytest.mark.parametrize(("strict", "default"), [(False, "0-11"), (True, "2-11")], ids=["plain", "strict"])
def test_initial_state_and_the_shared_pool(strict: bool, default: str) -> None:
    p = policy(DUAL_HT, "0-1", {"strict-cpu-reservation": str(strict).lower()})
    s = p.initial_state()
    assert s.default == CPUSet.parse(default)
    assert p.cpus_of(s, "any-pod", "any-container") == CPUSet.parse(default)
    assert p.assignable(s) == CPUSet.parse("2-11")
    check_invariants(p, s)


# -- who gets exclusive CPUs ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("the_pod", "expected"),
    [
        pytest.param(pod("p", ctr("c", "2")), 2, id="guaranteed integer"),
        pytest.param(pod("p", ctr("c", "977m")), 0, id="guaranteed non-integer"),
        pytest.param(pod("p", ctr("c", "1", cpu_limit="2")), 0, id="burstable"),
        pytest.param(
            pod("p", ctr("c", "2"), budget=pod_level("4")), 2, id="pod-level, equivalent guaranteed container"
        ),
        pytest.param(
            pod("p", Container("c", APP, Resources({"cpu": 2000}, {"cpu": 2000})), budget=pod_level("4")),
            0,
            id="pod-level, container without memory",
        ),
        pytest.param(
            pod("p", ctr("c", "2"), budget=pod_level("4", limit="5")), 0, id="pod-level burstable pod"
        ),
        pytest.param(
            pod("p", ctr("c"), budget=pod_level("4")), 0, id="pod-level, container without resources"
        ),
    ],
)
def test_guaranteed_cpus(the_pod: Pod, expected: int) -> None:
    assert policy(DUAL_HT).guaranteed_cpus(the_pod, the_pod.all_containers[0]) == expected


@pytest.mark.parametrize(
    ("the_pod", "expected"),
    [
        pytest.param(
            pod("p", ctr("i1", "3", INIT), ctr("s", "1", SIDECAR), ctr("i2", "2", INIT), ctr("a", "1")),
            3,
            id="largest init wins",
        ),
        pytest.param(
            pod("p", ctr("s", "2", SIDECAR), ctr("i", "1", INIT), ctr("a", "3")), 5, id="apps + sidecars"
        ),
        pytest.param(
            pod("p", ctr("s", "2", SIDECAR), ctr("i", "4", INIT), ctr("a", "3")), 6, id="init + sidecar"
        ),
        pytest.param(pod("p", ctr("a", "2"), ctr("b", "1500m")), 2, id="non-integer container adds nothing"),
        pytest.param(pod("p", ctr("a", "2"), budget=pod_level("5")), 5, id="pod-level budget"),
        pytest.param(
            pod("p", ctr("a", "2"), budget=pod_level("2500m")), 0, id="non-integer pod-level budget"
        ),
        pytest.param(
            pod("p", ctr("a", "2"), budget=pod_level("5", limit="6")), 0, id="burstable pod-level budget"
        ),
    ],
)
def test_pod_guaranteed_cpus(the_pod: Pod, expected: int) -> None:
    assert policy(DUAL_HT).pod_guaranteed_cpus(the_pod) == expected


# -- container path (policy_static_test.go TestStaticPolicyAdd) ------------------------------------------

FAKE = {"fakePod": {"fakeContainer100": ""}}
HELD = {"fakePod": {"fakeContainer100": "2-3,6-7"}}

ADD_CASES = [
    pytest.param(
        SINGLE_HT,
        "0",
        {},
        "0-1,4-5",
        HELD,
        "2",
        "1,5",
        id="GuPodMultipleCores, SingleSocketHT, ExpectAllocOneCore",
    ),
    pytest.param(
        DUAL_HT,
        "0",
        {},
        "0-1,3-11",
        {"fakePod": {"fakeContainer100": "2"}},
        "6",
        "1,3,5,7,9,11",
        id="GuPodMultipleCores, DualSocketHT, ExpectAllocOneSocket",
    ),
    pytest.param(
        DUAL_HT,
        "0",
        {},
        "0,2-4,6-11",
        {"fakePod": {"fakeContainer100": "1,5"}},
        "6",
        "2-4,8-10",
        id="GuPodMultipleCores, DualSocketHT, ExpectAllocThreeCores",
    ),
    pytest.param(
        DUAL_NO_HT,
        "0",
        {},
        "0-1,3-7",
        FAKE,
        "4",
        "4-7",
        id="GuPodMultipleCores, DualSocketNoHT, ExpectAllocOneSocket",
    ),
    pytest.param(
        DUAL_NO_HT,
        "0",
        {},
        "0-1,3,6-7",
        {"fakePod": {"fakeContainer100": "4-5"}},
        "4",
        "1,3,6-7",
        id="GuPodMultipleCores, DualSocketNoHT, ExpectAllocFourCores",
    ),
    pytest.param(
        DUAL_HT,
        "0",
        {},
        "0-1,3-11",
        {"fakePod": {"fakeContainer100": "2"}},
        "8",
        "1,3-5,7,9-11",
        id="GuPodMultipleCores, DualSocketHT, ExpectAllocOneSocketOneCore",
    ),
    pytest.param(
        SINGLE_HT, "0", {}, "0-7", {}, "1", "4", id="GuPodSingleCore, SingleSocketHT, ExpectAllocOneCPU"
    ),
    pytest.param(
        SINGLE_HT,
        "0",
        {"full-pcpus-only": "true"},
        "0-1,4-5",
        HELD,
        "2",
        "1,5",
        id="full-pcpus-only, GuPodMultipleCores, SingleSocketHT, ExpectAllocOneCore",
    ),
    pytest.param(
        DUAL_HT,
        "0,6",
        {"full-pcpus-only": "true"},
        "1-5,7-11",
        {},
        "10",
        "1-5,7-11",
        id="full-pcpus-only, GuPodManyCores, DualSocketHT, ExpectAllocAllCPUs",
    ),
]


@pytest.mark.parametrize(
    ("topology", "reserved", "options", "default", "entries", "cpu", "expected"), ADD_CASES
)
def test_allocate_container(
    topology: Topology,
    reserved: str,
    options: dict[str, str],
    default: str,
    entries: dict[str, dict[str, str]],
    cpu: str,
    expected: str,
) -> None:
    p = policy(topology, reserved, options)
    the_pod = pod("fakePod", ctr("fakeContainer3", cpu))
    before = state(default, entries)
    after = p.allocate(before, the_pod, the_pod.containers[0], ANY)
    assert after.entry("fakePod", "fakeContainer3") == CPUSet.parse(expected)
    assert after.default == before.default - CPUSet.parse(expected)
    assert p.cpus_of(after, "fakePod", "fakeContainer3") == CPUSet.parse(expected)


@pytest.mark.parametrize(
    "cpu",
    [pytest.param("1000m", id="NonGuPod (limit 2)"), pytest.param("977m", id="GuPodNonIntegerCore")],
)
def test_shared_containers_get_no_entry(cpu: str) -> None:
    p = policy(SINGLE_HT)
    the_pod = pod("fakePod", ctr("c", cpu, cpu_limit="2" if cpu == "1000m" else None))
    s = p.initial_state()
    assert p.allocate(s, the_pod, the_pod.containers[0], ANY) is s
    assert p.container_hints(s, the_pod, the_pod.containers[0]) is None
    assert p.cpus_of(s, "fakePod", "c") == CPUSet.parse("0-7")


def test_already_allocated_container_keeps_its_cpus() -> None:
    p = policy(SINGLE_HT)
    the_pod = pod("fakePod", ctr("fakeContainer3", "4"))
    before = state("0-1,4-5", {"fakePod": {"fakeContainer3": "2-3,6-7"}})
    after = p.allocate(before, the_pod, the_pod.containers[0], ANY)
    assert after.entry("fakePod", "fakeContainer3") == CPUSet.parse("2-3,6-7")
    assert after.default == before.default


@pytest.mark.parametrize(
    ("topology", "default", "entries", "cpu", "numbers"),
    [
        pytest.param(SINGLE_HT, "0-7", {}, "8", "requested=8, available=7", id="SingleSocketHT, 8 of 7"),
        pytest.param(
            DUAL_HT,
            "0,4-11",
            {"fakePod": {"fakeContainer100": "1-3"}},
            "10",
            "requested=10, available=8",
            id="DualSocketHT, 10 of 8",
        ),
        pytest.param(
            SINGLE_HT,
            "0,7",
            {"fakePod": {"fakeContainer100": "1-6"}},
            "2",
            "requested=2, available=1",
            id="SingleSocketHT, 2 of 1",
        ),
    ],
)
def test_not_enough_cpus_is_unexpected_admission_error(
    topology: Topology, default: str, entries: dict[str, dict[str, str]], cpu: str, numbers: str
) -> None:
    p = policy(topology)
    the_pod = pod("fakePod", ctr("fakeContainer5", cpu))
    before = state(default, entries)
    with pytest.raises(
        UnexpectedAdmissionError, match=f"Allocate failed due to .*{numbers}, which is unexpected"
    ) as raised:
        p.allocate(before, the_pod, the_pod.containers[0], ANY)
    assert raised.value.resource == "cpu"


@pytest.mark.parametrize(
    ("topology", "reserved", "default", "cpu", "message"),
    [
        pytest.param(
            SINGLE_HT,
            "0",
            "0-7",
            "1",
            "requested 1 cpus not multiple cpus per core = 2",
            id="GuPodSingleCore, SingleSocketHT",
        ),
        pytest.param(
            DUAL_HT,
            "1,6",
            "0,2-5,7-11",
            "10",
            "available physical CPUs = 8, requested CPUs = 10, CPUs per core = 2",
            id="GuPodManyCores, DualSocketHT, reserved siblings count as taken",
        ),
    ],
)
def test_full_pcpus_only_smt_alignment(
    topology: Topology, reserved: str, default: str, cpu: str, message: str
) -> None:
    p = policy(topology, reserved, {"full-pcpus-only": "true"})
    the_pod = pod("fakePod", ctr("c", cpu))
    with pytest.raises(SMTAlignmentError, match=message) as raised:
        p.allocate(state(default), the_pod, the_pod.containers[0], ANY)
    assert (raised.value.type, raised.value.resource) == ("SMTAlignmentError", "cpu")
    assert "full-pcpus-only" in raised.value.message


@pytest.mark.parametrize(
    ("align", "expected"), [("true", "2,11"), ("false", "2,21")], ids=["by socket", "by numa"]
)
def test_align_by_socket_widens_the_hint_to_its_sockets(align: str, expected: str) -> None:
    p = policy(MULTI_NUMA_HT, "0", {"align-by-socket": align})
    the_pod = pod("fakePod", ctr("fakeContainer2", "2"))
    after = p.allocate(state("2,11,21,22"), the_pod, the_pod.containers[0], numa(0, 2))
    assert after.entry("fakePod", "fakeContainer2") == CPUSet.parse(expected)


def test_hint_cpus_first_then_the_rest() -> None:
    p = policy(DUAL_HT)
    the_pod = pod("p", ctr("c", "8"))
    after = p.allocate(p.initial_state(), the_pod, the_pod.containers[0], numa(1))
    assert after.entry("p", "c") == CPUSet.parse("1,3,5,7,9,11,2,8")


# -- hints ---------------------------------------------------------------------------------------------


def hints(*pairs: tuple[int, bool]) -> dict[str, list[TopologyHint] | None]:
    return {"cpu": [TopologyHint(affinity, preferred) for affinity, preferred in pairs]}


@pytest.mark.parametrize(
    ("cpu", "expected"),
    [
        pytest.param("2", hints((0b01, True), (0b10, True), (0b11, False)), id="fits either node"),
        pytest.param("6", hints((0b10, True), (0b11, False)), id="node 0 lost its reserved CPU"),
        pytest.param("7", hints((0b11, True)), id="needs both nodes"),
        pytest.param("12", hints(), id="more than assignable"),
    ],
)
def test_container_hints(cpu: str, expected: dict[str, list[TopologyHint]]) -> None:
    p = policy(DUAL_HT)
    the_pod = pod("p", ctr("c", cpu))
    assert p.container_hints(p.initial_state(), the_pod, the_pod.containers[0]) == expected


@pytest.mark.parametrize(
    ("allocated", "expected"),
    [
        pytest.param("1,3", hints((0b10, True), (0b11, False)), id="same size, regenerated from its CPUs"),
        pytest.param("1,3,5", hints(), id="different size, impossible"),
    ],
)
def test_container_hints_for_an_allocated_container(
    allocated: str, expected: dict[str, list[TopologyHint]]
) -> None:
    p = policy(DUAL_HT)
    the_pod = pod("p", ctr("c", "2"))
    s = state("0,2,4-11", {"p": {"c": allocated}})
    assert p.container_hints(s, the_pod, the_pod.containers[0]) == expected


def test_align_by_socket_prefers_socket_aligned_hints() -> None:
    the_pod = pod("p", ctr("c", "10"))
    for align, extra in (("false", set()), ("true", {0b0011, 0b1100})):
        p = policy(MULTI_NUMA_HT, "0", {"align-by-socket": align})
        result = p.container_hints(p.initial_state(), the_pod, the_pod.containers[0])
        assert result is not None
        found = result["cpu"]
        assert found is not None
        assert len(found) == 15
        assert {h.affinity for h in found if h.preferred} == {0b0001, 0b0010, 0b0100, 0b1000} | extra


def test_container_hints_keep_reusable_init_cpus_inside_the_mask() -> None:
    p = policy(DUAL_HT)
    the_pod = pod("p", ctr("init", "2", INIT), ctr("app", "2"))
    s = p.allocate(p.initial_state(), the_pod, the_pod.init_containers[0], numa(0))
    assert s.reusable == {"p": CPUSet.parse("2,8")}
    assert p.container_hints(s, the_pod, the_pod.containers[0]) == hints((0b01, True), (0b11, False))
    after = p.allocate(s, the_pod, the_pod.containers[0], numa(0))
    assert after.entry("p", "app") == CPUSet.parse("2,8")
    assert after.reusable == {"p": CPUSet()}
    check_invariants(p, after)


def test_pod_hints_without_pod_level_resources() -> None:
    p = policy(DUAL_HT)
    the_pod = pod("p", ctr("a", "2"), ctr("b", "2"))
    s = p.initial_state()
    assert p.pod_hints(s, the_pod) == hints((0b01, True), (0b10, True), (0b11, False))
    s = p.allocate(s, the_pod, the_pod.containers[0], numa(1))
    assert p.pod_hints(s, the_pod) == hints((0b10, True), (0b11, False))
    s = p.allocate(s, the_pod, the_pod.containers[1], numa(1))
    assert p.pod_hints(s, the_pod) == hints((0b10, True), (0b11, False))
    wrong = CPUState(s.default, {"p": {**s.entries["p"], "b": CPUSet.parse("5")}})
    assert p.pod_hints(wrong, the_pod) == hints()
    assert p.pod_hints(s, pod("q", ctr("x", "1", cpu_limit="2"))) is None


def test_pod_hints_with_pod_level_resources() -> None:
    p = policy(DUAL_HT)
    good = pod("good", ctr("main", "2"), ctr("side", kind=SIDECAR), budget=pod_level("4"))
    s = p.initial_state()
    assert p.pod_hints(s, good) == hints((0b01, True), (0b10, True), (0b11, False))
    s = p.allocate_pod(s, good, numa(1))
    assert p.pod_hints(s, good) == hints((0b10, True), (0b11, False))
    full = pod("full", ctr("main", "4"), ctr("side", kind=SIDECAR), budget=pod_level("4"))
    assert p.pod_hints(p.initial_state(), full) == hints()
    assert p.pod_hints(s, pod("burst", ctr("main", "2"), budget=pod_level("4", limit="6"))) is None


# -- KEP-5526 AllocatePod (policy_static_test.go TestStaticPolicyAllocatePod) ------------------------------

ALLOCATE_POD_CASES = [
    pytest.param(
        pod("pod1", ctr("container1", "1"), budget=pod_level("2")),
        {"container1": "2"},
        "0-1,3-7,9-11",
        id="guaranteed pod, one guaranteed container",
    ),
    pytest.param(
        pod("p", ctr("ngu-container"), budget=pod_level("1")),
        {"ngu-container": "6"},
        "0-5,7-11",
        id="non-guaranteed container runs in the bubble",
    ),
    pytest.param(
        pod(
            "p",
            ctr("gu-container-1", "1"),
            ctr("gu-container-2", "1"),
            ctr("ngu-container"),
            budget=pod_level("3"),
        ),
        {"gu-container-1": "6", "gu-container-2": "2", "ngu-container": "8"},
        "0-1,3-5,7,9-11",
        id="mix of guaranteed and non-guaranteed containers",
    ),
    pytest.param(
        pod(
            "p",
            ctr("gu-init-container-1", "1", INIT),
            ctr("gu-init-container-2", "1", INIT),
            ctr("gu-container-1", "1"),
            ctr("gu-container-2", "1"),
            budget=pod_level("2"),
        ),
        {
            "gu-init-container-1": "2",
            "gu-init-container-2": "2",
            "gu-container-1": "2",
            "gu-container-2": "8",
        },
        "0-1,3-7,9-11",
        id="guaranteed init containers reuse the bubble",
    ),
    pytest.param(
        pod(
            "p",
            ctr("ngu-init-container-1", kind=INIT),
            ctr("gu-init-restartable-2", "1", SIDECAR),
            ctr("ngu-init-container-3", kind=INIT),
            ctr("gu-container-1", "1"),
            ctr("ngu-container-2"),
            budget=pod_level("3"),
        ),
        {
            "ngu-init-container-1": "2,6,8",
            "gu-init-restartable-2": "6",
            "ngu-init-container-3": "2,8",
            "gu-container-1": "2",
            "ngu-container-2": "8",
        },
        "0-1,3-5,7,9-11",
        id="guaranteed sidecar keeps its slice from later containers",
    ),
    pytest.param(
        pod(
            "p",
            ctr("ngu-init-container-1", kind=INIT),
            ctr("ngu-init-restartable-2", kind=SIDECAR),
            ctr("ngu-init-container-3", kind=INIT),
            ctr("gu-container-1", "1"),
            ctr("ngu-container-2"),
            budget=pod_level("3"),
        ),
        {
            "ngu-init-container-1": "2,6,8",
            "ngu-init-restartable-2": "2,8",
            "ngu-init-container-3": "2,6,8",
            "gu-container-1": "6",
            "ngu-container-2": "2,8",
        },
        "0-1,3-5,7,9-11",
        id="shared sidecar gets the final pod shared pool",
    ),
]


@pytest.mark.parametrize(("the_pod", "expected", "default"), ALLOCATE_POD_CASES)
def test_allocate_pod(the_pod: Pod, expected: dict[str, str], default: str) -> None:
    p = policy(DUAL_HT)
    after = p.allocate_pod(p.initial_state(), the_pod, numa(0))
    assert {name: str(cpus) for name, cpus in after.entries[the_pod.uid].items()} == {
        name: str(CPUSet.parse(cpus)) for name, cpus in expected.items()
    }
    assert after.default == CPUSet.parse(default)
    assert after.pod_entries[the_pod.uid] == p.topology.all_cpus - CPUSet.parse(default)
    check_invariants(p, after)


def test_kep_example_and_its_rejected_twin() -> None:
    p = policy(DUAL_HT)
    kep = pod("kep", ctr("c1", "3"), ctr("c2"), ctr("c3"), budget=pod_level("5"))
    after = p.allocate_pod(p.initial_state(), kep, numa(1))
    bubble = after.pod_entries["kep"]
    assert bubble == CPUSet.parse("1,3,5,7,9")
    assert after.entry("kep", "c1") == CPUSet.parse("1,5,7")
    assert after.entry("kep", "c2") == after.entry("kep", "c3") == CPUSet.parse("3,9")
    twin = pod("twin", ctr("c1", "3"), ctr("c2", "2"), ctr("c3"), budget=pod_level("5"))
    before = p.initial_state()
    with pytest.raises(
        EmptyPodSharedPoolError, match=r"take 5 of the pod's 5 CPUs, leaving an empty pod shared pool"
    ):
        p.allocate_pod(before, twin, numa(1))
    assert before == p.initial_state()


def test_the_documentation_example_pods() -> None:
    """pod-scope-mixed and empty-shared-pool of deploy/examples/, with the kubelet tests' memory."""
    p = policy(DUAL_HT)
    mixed = pod(
        "pod-scope-mixed",
        ctr("metrics-sidecar", kind=SIDECAR),
        ctr("logging-sidecar", kind=SIDECAR),
        ctr("main-app", "2"),
        budget=pod_level("4"),
    )
    s = p.allocate_pod(p.initial_state(), mixed, numa(1))
    main = s.entry(mixed.uid, "main-app")
    shared = s.entry(mixed.uid, "metrics-sidecar")
    assert main is not None and len(main) == 2
    assert shared is not None and len(shared) == 2 and shared.is_disjoint(main)
    assert s.entry(mixed.uid, "logging-sidecar") == shared
    empty = pod(
        "empty-shared-pool",
        ctr("metrics-sidecar", "1", SIDECAR),
        ctr("logging-sidecar", kind=SIDECAR),
        ctr("main-app", "3"),
        budget=pod_level("4"),
    )
    with pytest.raises(EmptyPodSharedPoolError, match="logging-sidecar") as raised:
        p.allocate_pod(s, empty, numa(0))
    assert raised.value.type == "EmptyPodSharedPoolError"
    assert "default/empty-shared-pool" in raised.value.message
    assert p.pod_hints(s, empty) == hints()


@pytest.mark.parametrize(
    ("the_pod", "message"),
    [
        pytest.param(
            pod("p", ctr("a", "1"), ctr("b", "1"), ctr("c"), budget=pod_level("2")),
            "exclusive containers take 2 of the pod's 2 CPUs, leaving an empty pod shared pool for c",
            id="kubelet case: sum equals budget",
        ),
        pytest.param(
            pod("p", ctr("s", "2", SIDECAR), ctr("i", "3", INIT), ctr("a", "1"), budget=pod_level("4")),
            "init container 'i' needs 3 exclusive CPUs but only 2 of the pod's 4",
            id="init slice larger than what the sidecars leave",
        ),
        pytest.param(
            pod("p", ctr("s", "4", SIDECAR), ctr("i", kind=INIT), ctr("a", "1"), budget=pod_level("4")),
            "init container 'i' needs the pod shared pool but the sidecars before it take 4",
            id="shared init after sidecars took everything",
        ),
    ],
)
def test_empty_shared_pool_rule(the_pod: Pod, message: str) -> None:
    p = policy(DUAL_HT)
    with pytest.raises(EmptyPodSharedPoolError, match=message):
        p.allocate_pod(p.initial_state(), the_pod, ANY)


def test_exclusive_sum_below_budget_is_accepted_and_the_rest_stays_unused() -> None:
    p = policy(DUAL_HT)
    the_pod = pod("p", ctr("a", "1"), ctr("b", "1"), budget=pod_level("3"))
    s = p.allocate_pod(p.initial_state(), the_pod, numa(0))
    assert len(s.pod_entries["p"]) == 3
    a, b = p.cpus_of(s, "p", "a"), p.cpus_of(s, "p", "b")
    assert (a, b) == (CPUSet.parse("6"), CPUSet.parse("2"))
    assert s.pod_entries["p"] - a - b == CPUSet.parse("8")


def test_empty_shared_pool_violation_is_generic_over_the_unit() -> None:
    the_pod = pod("p", ctr("a", "1"), ctr("b"), budget=pod_level("1"))
    found = empty_shared_pool_violation(
        the_pod, {"memory": 1024}, lambda c: {"memory": 1024} if c.name == "a" else {}
    )
    assert (
        found == "exclusive containers take 1024 of the pod's 1024 bytes of memory, leaving an empty pod "
        "shared pool for b"
    )


def test_allocate_pod_is_idempotent_and_rejections_change_nothing() -> None:
    p = policy(DUAL_HT)
    the_pod = pod("p", ctr("main", "2"), ctr("side", kind=SIDECAR), budget=pod_level("4"))
    once = p.allocate_pod(p.initial_state(), the_pod, numa(0))
    assert p.allocate_pod(once, the_pod, numa(1)) is once
    big = pod("big", ctr("main", "8"), ctr("side", kind=SIDECAR), budget=pod_level("9"))
    with pytest.raises(UnexpectedAdmissionError, match="requested=9, available=7"):
        p.allocate_pod(once, big, ANY)
    check_invariants(p, once)


def test_allocate_pod_checks_smt_alignment_on_the_pod_total() -> None:
    p = policy(DUAL_HT, "0", {"full-pcpus-only": "true"})
    odd = pod("p", ctr("main", "2"), ctr("side", kind=SIDECAR), budget=pod_level("3"))
    with pytest.raises(SMTAlignmentError, match="requested 3 cpus not multiple cpus per core = 2"):
        p.allocate_pod(p.initial_state(), odd, ANY)
    even = pod("p", ctr("main", "1"), ctr("side", kind=SIDECAR), budget=pod_level("4"))
    s = p.allocate_pod(p.initial_state(), even, numa(1))
    assert s.pod_entries["p"] == CPUSet.parse("1,3,7,9")


def test_allocate_pod_inputs() -> None:
    p = policy(DUAL_HT)
    s = p.initial_state()
    with pytest.raises(InputError, match=r"declares no \.spec\.resources"):
        p.allocate_pod(s, pod("p", ctr("a", "2")), ANY)
    assert p.allocate_pod(s, pod("p", ctr("a", "2"), budget=pod_level("2500m")), ANY) is s


def test_container_scope_with_pod_level_resources_takes_slices_from_the_node() -> None:
    p = policy(DUAL_HT)
    the_pod = pod("p", ctr("main", "2"), ctr("side", kind=SIDECAR), budget=pod_level("4"))
    s = p.initial_state()
    for container in the_pod.all_containers:
        s = p.allocate(s, the_pod, container, numa(1))
    assert s.entries == {"p": {"main": CPUSet.parse("1,7")}}
    assert p.cpus_of(s, "p", "side") == s.default
    assert not s.pod_entries


# -- removal -------------------------------------------------------------------------------------------


def test_remove_container_on_the_container_path_keeps_cpus_siblings_hold() -> None:
    p = policy(DUAL_HT)
    the_pod = pod("p", ctr("init", "2", INIT), ctr("app", "4"))
    s = p.initial_state()
    for container in the_pod.all_containers:
        s = p.allocate(s, the_pod, container, numa(0))
    assert s.entry("p", "init") == CPUSet.parse("2,8")
    assert s.entry("p", "app") == CPUSet.parse("2,4,8,10")
    s = p.remove_container(s, "p", "init")
    assert s.default == CPUSet.parse("0-1,3,5-7,9,11")
    s = p.remove_container(s, "p", "app")
    assert s == p.initial_state()
    assert p.remove_container(s, "p", "app") is s


def test_remove_container_releases_the_bubble_with_the_last_entry() -> None:
    p = policy(DUAL_HT)
    the_pod = pod(
        "p", ctr("init", kind=INIT), ctr("main", "2"), ctr("side", kind=SIDECAR), budget=pod_level("4")
    )
    s = p.allocate_pod(p.initial_state(), the_pod, numa(1))
    bubble = s.pod_entries["p"]
    for name in ("init", "main"):
        s = p.remove_container(s, "p", name)
        assert s.pod_entries["p"] == bubble
        assert s.default == p.topology.all_cpus - bubble
        check_invariants(p, s)
    s = p.remove_container(s, "p", "side")
    assert s == p.initial_state()


def test_reusable_cpus_follow_the_last_allocated_pod_and_skip_sidecars() -> None:
    p = policy(DUAL_HT)
    first = pod("a", ctr("init", "2", INIT), ctr("side", "1", SIDECAR), ctr("app", "1"))
    s = p.allocate(p.initial_state(), first, first.init_containers[0], ANY)
    assert s.reusable == {"a": CPUSet.parse("2,8")}
    s = p.allocate(s, first, first.init_containers[1], ANY)
    assert s.reusable == {"a": CPUSet.parse("2,8")}
    other = pod("b", ctr("x", "1"))
    s = p.allocate(s, other, other.containers[0], ANY)
    assert set(s.reusable) == {"b"}
    check_invariants(p, s)


# -- options that change the choice -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        pytest.param({}, "0-29,40-69,30-31,70-71", id="packed"),
        pytest.param(
            {"distribute-cpus-across-numa": "true"},
            "0-7,10-17,20-27,30-37,40-47,50-57,60-67,70-77",
            id="distributed",
        ),
    ],
)
def test_policy_take_follows_the_options(options: dict[str, str], expected: str) -> None:
    p = policy(MULTI_NUMA_HT, "0", options)
    assert p.take(MULTI_NUMA_HT.all_cpus, 64) == CPUSet.parse(expected)


def test_many_pods_keep_the_invariants_and_come_back_to_the_start() -> None:
    p = policy(LARGE_HT, "0,128")
    s = p.initial_state()
    pods = []
    for i in range(40):
        if i % 2:
            main = 1 + i % 3
            budget = pod_level(str(main + 1 + i % 4))
            the_pod = pod(f"pl{i}", ctr("main", str(main)), ctr("side", kind=SIDECAR), budget=budget)
            s = p.allocate_pod(s, the_pod, numa(i % 8))
        else:
            the_pod = pod(f"c{i}", ctr("init", "1", INIT), ctr("app", str(1 + i % 4)))
            for container in the_pod.all_containers:
                s = p.allocate(s, the_pod, container, numa(i % 8))
        pods.append(the_pod)
        check_invariants(p, s)
    for the_pod in pods:
        for container in the_pod.all_containers:
            s = p.remove_container(s, the_pod.uid, container.name)
        check_invariants(p, s)
    assert s.default == p.initial_state().default
    assert not s.entries and not s.pod_entries


# -- random sequences ----------------------------------------------------------------------------------

MACHINES = [
    from_spec("sockets=2,nodes-per-socket=2,cores-per-node=4,threads-per-core=2,uncore-caches-per-node=2"),
    from_spec("sockets=1,nodes-per-socket=2,cores-per-node=6,threads-per-core=1,uncore-caches-per-node=3"),
    DUAL_HT,
]
OPTION_SETS = [
    {},
    {"full-pcpus-only": "true"},
    {"distribute-cpus-across-numa": "true", "full-pcpus-only": "true"},
    {"distribute-cpus-across-cores": "true"},
    {"prefer-align-cpus-by-uncorecache": "true", "strict-cpu-reservation": "true"},
    {"align-by-socket": "true"},
]


@st.composite
def workloads(draw: st.DrawFn) -> tuple[int, int, list[tuple[str, Pod]]]:
    steps: list[tuple[str, Pod]] = []
    for i in range(draw(st.integers(1, 14))):
        if draw(st.booleans()):
            slices = draw(st.lists(st.integers(0, 3), min_size=1, max_size=3))
            budget = sum(slices) + draw(st.integers(0, 2))
            sidecar = (
                ctr("side", str(draw(st.integers(1, 2))), SIDECAR)
                if draw(st.booleans())
                else ctr("side", kind=SIDECAR)
            )
            apps = [ctr(f"a{j}", str(n)) if n else ctr(f"a{j}") for j, n in enumerate(slices)]
            steps.append(("admit", pod(f"p{i}", sidecar, *apps, budget=pod_level(str(max(budget, 1))))))
        else:
            sizes = draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
            init = ctr("init", str(draw(st.integers(1, 4))), INIT)
            steps.append(("admit", pod(f"c{i}", init, *[ctr(f"a{j}", str(n)) for j, n in enumerate(sizes)])))
        if draw(st.booleans()) and steps:
            steps.append(("remove", draw(st.sampled_from([p for _, p in steps]))))
    return draw(st.integers(0, len(MACHINES) - 1)), draw(st.integers(0, len(OPTION_SETS) - 1)), steps


def admit(p: StaticCPUPolicy, s: CPUState, the_pod: Pod) -> CPUState:
    def first_preferred(found: dict[str, list[TopologyHint] | None] | None) -> TopologyHint:
        listed = (found or {}).get("cpu") or []
        return next((h for h in listed if h.preferred), ANY)

    if the_pod.resources is not None:
        return p.allocate_pod(s, the_pod, first_preferred(p.pod_hints(s, the_pod)))
    for container in the_pod.all_containers:
        s = p.allocate(s, the_pod, container, first_preferred(p.container_hints(s, the_pod, container)))
    return s


@given(workloads())
@settings(deadline=None, max_examples=200)
def test_random_admissions_and_removals_keep_the_invariants(
    workload: tuple[int, int, list[tuple[str, Pod]]],
) -> None:
    machine, option_set, steps = workload
    topology = MACHINES[machine]
    p = policy(topology, "0", OPTION_SETS[option_set])
    s = p.initial_state()
    admitted: dict[str, Pod] = {}
    for action, the_pod in steps:
        if action == "remove":
            for container in the_pod.all_containers:
                s = p.remove_container(s, the_pod.uid, container.name)
            admitted.pop(the_pod.uid, None)
        elif the_pod.uid not in admitted:
            try:
                s = admit(p, s, the_pod)
            except AdmissionError as refused:
                event(f"refused: {refused.type}")
                continue
            event("admitted pod-level" if the_pod.resources is not None else "admitted")
            admitted[the_pod.uid] = the_pod
            for container in the_pod.all_containers:
                cpus = p.cpus_of(s, the_pod.uid, container.name)
                exclusive = p.guaranteed_cpus(the_pod, container)
                assert not exclusive or len(cpus) == exclusive
                assert cpus.is_disjoint(p.reserved) or (not exclusive and the_pod.resources is None)
        check_invariants(p, s)
    for the_pod in admitted.values():
        for container in the_pod.all_containers:
            s = p.remove_container(s, the_pod.uid, container.name)
    assert s == p.initial_state()


def reference_hints(
    p: StaticCPUPolicy, available: CPUSet, reusable: CPUSet, request: int
) -> list[TopologyHint]:
    """The kubelet's `generateCPUTopologyHints` written out: every NUMA mask, its CPUs counted on their own;
    preferred when as narrow as the narrowest that could hold `request` on an empty machine, or, with
    align-by-socket, when it spans no more sockets than that narrowest needs."""
    topology = p.topology
    ids = [n for n, cpus in topology.cpus_by_numa.items() if cpus]

    def cpus_of(mask: int) -> CPUSet:
        return CPUSet(cpu for n in nodes_of(mask) for cpu in topology.cpus_by_numa[n])

    masks = list(iterate_masks(ids))
    narrowest = min((m.bit_count() for m in masks if len(cpus_of(m)) >= request), default=len(ids))
    min_sockets = 0
    if p.options.align_by_socket:
        per_socket = len(ids) // topology.num_sockets
        min_sockets = -(-narrowest // per_socket) if per_socket else 0
    hints = []
    for mask in masks:
        cpus = cpus_of(mask)
        if reusable.is_subset(cpus) and len(available & cpus) >= request - len(reusable):
            sockets = {topology.info[cpu].socket for cpu in cpus}
            hints.append(TopologyHint(mask, mask.bit_count() == narrowest or len(sockets) == min_sockets))
    return hints


@given(
    st.sampled_from([SINGLE_HT, DUAL_HT, DUAL_NO_HT, MULTI_NUMA_HT, SOCKETS_PER_NUMA_HT, LARGE_HT]),
    st.booleans(),
    st.integers(0, 2**256 - 1),
    st.integers(0, 2**256 - 1),
    st.integers(1, 256),
)
@settings(deadline=None, max_examples=300)
def test_container_hints_are_every_mask_that_holds_the_request(
    topology: Topology, align: bool, shared: int, reused: int, request: int
) -> None:
    """On random shared pools and reusable init CPUs the hints are the per-mask definition's, in its order."""
    options = {"align-by-socket": "true"} if align and topology is not SOCKETS_PER_NUMA_HT else {}
    p = policy(topology, "0", options)
    machine = topology.all_cpus.mask
    default = CPUSet.from_mask(shared & machine | 1)
    reusable = CPUSet.from_mask(reused & machine & ~default.mask & (reused >> 7))
    request = request % len(topology.all_cpus) + 1
    the_pod = pod("p", ctr("c", str(request)))
    s = CPUState(default=default, reusable={"p": reusable} if reusable else {})
    expected = reference_hints(p, p.assignable(s), reusable, request)
    assert p.container_hints(s, the_pod, the_pod.containers[0]) == {"cpu": expected}


def test_reusable_cpus_off_the_machine_fit_no_mask() -> None:
    p = policy(DUAL_HT, "0")
    the_pod = pod("p", ctr("c", "1"))
    s = CPUState(default=DUAL_HT.all_cpus, reusable={"p": CPUSet([1, 99])})
    assert p.container_hints(s, the_pod, the_pod.containers[0]) == {"cpu": []}
