"""The torture's pure parts: which shapes it churns on a host, what it says it could not check, and its
closing lines. (The churn itself runs against containerd in tests/integration/test_torture.py.)"""

from __future__ import annotations

from podlevel.engine.cpuset import CPUSet
from podlevel.podspec.workloads import load_pods
from testbed.invariants import DOUBLE, Violation
from testbed.torture import SHAPE_FILES, Capabilities, Tally, closing_lines, fitting_shapes, qualifies

GIB = 1024**3
ALL_PODS = [pod for path in SHAPE_FILES for pod in load_pods(path.read_text(), str(path))]


def test_a_two_cpu_host_churns_the_one_cpu_shapes_and_node_pool_pods() -> None:
    shapes = fitting_shapes(ALL_PODS, CPUSet([1]), 12 * GIB)
    assert [p.name for p in shapes] == ["web", "fast-path", "no-room", "shared-bubble"]


def test_a_numa_guest_churns_the_documentation_pods_once_each() -> None:
    shapes = fitting_shapes(ALL_PODS, CPUSet(range(2, 8)), 6 * GIB)
    assert [p.name for p in shapes] == ["container-scope-mixed", "empty-shared-pool", "pod-scope-mixed",
                                        "web", "fast-path", "no-room", "shared-bubble"]
    assert [p.name for p in fitting_shapes(ALL_PODS, CPUSet(range(2, 8)), 3 * GIB)] == [
        "web", "fast-path", "no-room", "shared-bubble"]


def test_exclusive_containers_are_equivalent_guaranteed_with_whole_cpus() -> None:
    mixed = next(p for p in ALL_PODS if p.name == "pod-scope-mixed")
    assert {c.name: qualifies(c) for c in mixed.all_containers} == {
        "metrics-sidecar": False, "logging-sidecar": False, "main-app": True}


def test_what_is_skipped_by_capability_is_said() -> None:
    assert Capabilities.of("  --state-dir DIR\n  --cgroup-root DIR").skipped() == []
    assert Capabilities.of("  --state-dir DIR").skipped() == ["(e) pod cgroup"]
    lines = closing_lines(Tally(rounds=3, kills=2, restarts=1, checks=3), Capabilities(cgroup_root=False), 7)
    assert lines == [
        "rounds 3, plugin kills 2, containerd restarts 1, violations 0",
        "checks 3; skipped by capability: (e) pod cgroup (nri-podlevel run has no --cgroup-root)",
    ]


def test_closing_lines_name_each_violation_with_seed_and_round() -> None:
    tally = Tally(rounds=9, kills=4, restarts=2, checks=6,
                  violations=[(5, "kill-plugin", Violation(DOUBLE, "CPU 1 held by x and by y"))])
    assert closing_lines(tally, Capabilities(cgroup_root=True), 42) == [
        "rounds 9, plugin kills 4, containerd restarts 2, violations 1",
        "  seed 42 round 5 after kill-plugin: (a) double: CPU 1 held by x and by y",
        "checks 6; every invariant checked",
    ]
