"""cgroup v2 facts the enforcement code relies on, checked on a real kernel with real NUMA nodes.

Each test builds a `kubepods`-like tree (controllers handed down from the root) and asserts what the kernel
shows: which writes it takes, what `.effective` files say, where tasks may run and where their memory lands.
"""

from __future__ import annotations

import errno
import subprocess
from pathlib import Path

import pytest
from vm_support import CGROUP_ROOT, GuestShape, Member, mkcgroup, read, write

from podlevel.engine.cpuset import CPUSet
from testbed.cgroup_writes import count_writes

pytestmark = pytest.mark.vm

MiB = 2**20
ALLOC_MIB = 64
HUGE_PAGE = 2 * MiB


def node_cpus(node: int) -> CPUSet:
    return CPUSet.parse(read(Path(f"/sys/devices/system/node/node{node}/cpulist")))


def cpus(path: Path) -> CPUSet:
    return CPUSet.parse(read(path))


def halves(guest: GuestShape) -> tuple[CPUSet, CPUSet]:
    half = guest.cpus // 2
    return CPUSet(range(half)), CPUSet(range(half, guest.cpus))


def numa_stat(cgroup: Path, item: str = "anon") -> dict[int, int]:
    """Bytes of `item` charged to `cgroup`, per NUMA node."""
    for line in read(cgroup / "memory.numa_stat").splitlines():
        name, *per_node = line.split()
        if name == item:
            return {int(k[1:]): int(v) for k, v in (f.split("=") for f in per_node)}
    raise KeyError(item)


def cpu_stat(cgroup: Path) -> dict[str, int]:
    return {k: int(v) for k, v in (line.split() for line in read(cgroup / "cpu.stat").splitlines())}


def write_error(path: Path, value: str) -> int:
    with pytest.raises(OSError) as err:
        write(path, value)
    assert err.value.errno is not None
    return err.value.errno


def test_cgroup_v2_is_the_only_hierarchy(guest: GuestShape, tmp_path: Path) -> None:
    assert "cgroup_no_v1=all" in read(Path("/proc/cmdline")).split()
    mount_v1 = ["mount", "-t", "cgroup", "-o", "cpuset", "cgroup", str(tmp_path)]
    v1 = subprocess.run(mount_v1, capture_output=True)
    assert v1.returncode != 0, "a cgroup v1 cpuset hierarchy could be mounted"
    assert {"cpuset", "cpu", "memory"} <= set(read(CGROUP_ROOT / "cgroup.controllers").split())


def test_controllers_are_handed_down_a_kubepods_hierarchy(kubepods: Path, guest: GuestShape) -> None:
    pod = mkcgroup(kubepods / "pod", enable=True)
    container = mkcgroup(pod / "container")
    for cgroup in (pod, container):
        assert {"cpuset", "cpu", "memory"} <= set(read(cgroup / "cgroup.controllers").split())
        for name in ("cpuset.cpus", "cpuset.mems", "cpuset.cpus.effective", "cpu.max", "memory.max"):
            assert (cgroup / name).is_file(), name
        # an empty cpuset.cpus means "whatever the parent has"
        assert read(cgroup / "cpuset.cpus") == ""
        assert cpus(cgroup / "cpuset.cpus.effective") == CPUSet(range(guest.cpus))
        assert cpus(cgroup / "cpuset.mems.effective") == CPUSet(range(guest.numa_nodes))  # same list syntax
    # below a cgroup that handed nothing down, there is nothing to enable
    bare = mkcgroup(container / "bare")
    assert not (bare / "cpuset.cpus").exists()
    assert write_error(bare / "cgroup.subtree_control", "+cpuset") == errno.ENOENT


def test_a_cgroup_with_tasks_may_hand_down_cpuset_and_cpu_but_not_memory(
    kubepods: Path, member: type[Member]
) -> None:
    pod = mkcgroup(kubepods / "pod")
    member(pod)
    # the no-internal-process rule: a domain controller (memory) is refused while the cgroup has tasks...
    assert write_error(pod / "cgroup.subtree_control", "+memory") == errno.EBUSY
    # ...threaded controllers (cpuset, cpu) are not
    write(pod / "cgroup.subtree_control", "+cpuset +cpu")
    assert set(read(pod / "cgroup.subtree_control").split()) == {"cpuset", "cpu"}
    # from then on the cgroup is a thread root, where domain controllers are not supported at all
    assert write_error(pod / "cgroup.subtree_control", "+memory") == errno.EOPNOTSUPP


def test_a_child_cpuset_outside_its_parent_falls_back_to_the_parent(
    kubepods: Path, guest: GuestShape
) -> None:
    first, second = halves(guest)
    pod = mkcgroup(kubepods / "pod", enable=True)
    container = mkcgroup(pod / "container")
    write(pod / "cpuset.cpus", str(first))
    write(container / "cpuset.cpus", str(second))  # accepted although disjoint from the parent
    assert cpus(container / "cpuset.cpus") == second
    assert cpus(container / "cpuset.cpus.effective") == first
    overlap = CPUSet([min(first), min(second)])
    write(container / "cpuset.cpus", str(overlap))
    assert cpus(container / "cpuset.cpus.effective") == CPUSet([min(first)])
    if guest.numa_nodes > 1:
        write(pod / "cpuset.mems", "0")
        write(container / "cpuset.mems", "1")
        assert read(container / "cpuset.mems") == "1"
        assert read(container / "cpuset.mems.effective") == "0"


def test_shrinking_a_parent_below_its_child_is_allowed_and_tasks_follow(
    kubepods: Path, member: type[Member], guest: GuestShape
) -> None:
    first, second = halves(guest)
    pod = mkcgroup(kubepods / "pod", enable=True)
    container = mkcgroup(pod / "container")
    write(container / "cpuset.cpus", str(second))
    task = member(container)
    assert CPUSet.parse(task.status("Cpus_allowed_list")) == second

    write(pod / "cpuset.cpus", str(first))  # cgroup v1 would refuse this with EBUSY
    assert cpus(container / "cpuset.cpus") == second  # the child's request is kept...
    assert cpus(container / "cpuset.cpus.effective") == first  # ...but not in force
    assert CPUSet.parse(task.status("Cpus_allowed_list")) == first

    write(pod / "cpuset.cpus", str(first | second))
    assert cpus(container / "cpuset.cpus.effective") == second  # widening the parent restores it
    assert CPUSet.parse(task.status("Cpus_allowed_list")) == second


@pytest.mark.parametrize(
    ("written", "read_back"),
    [
        ("50000 100000", "50000 100000"),
        ("max", "max 100000"),
        ("25000", "25000 100000"),  # a lone quota keeps the period
        ("max 50000", "max 50000"),
        ("1000 100000", "1000 100000"),  # the smallest quota: 1 ms
    ],
)
def test_cpu_max_reads_back(kubepods: Path, written: str, read_back: str) -> None:
    pod = mkcgroup(kubepods / "pod")
    assert read(pod / "cpu.max") == "max 100000"
    write(pod / "cpu.max", written)
    assert read(pod / "cpu.max") == read_back


@pytest.mark.parametrize("written", ["-1", "-1 100000", "999 100000", "50000 999"])
def test_cpu_max_refuses_what_cgroup_v1_or_oci_would_take(kubepods: Path, written: str) -> None:
    """OCI's quota -1 means "no limit", but cgroup v2 wants the word `max`; quota and period >= 1 ms."""
    pod = mkcgroup(kubepods / "pod")
    assert write_error(pod / "cpu.max", written) == errno.EINVAL
    assert read(pod / "cpu.max") == "max 100000"


def test_a_quota_throttles_and_max_does_not(kubepods: Path, member: type[Member]) -> None:
    limited = mkcgroup(kubepods / "limited")
    unlimited = mkcgroup(kubepods / "unlimited")
    write(limited / "cpu.max", "10000 100000")
    member(limited).ask("spin 0.5")
    member(unlimited).ask("spin 0.5")
    assert cpu_stat(limited)["nr_throttled"] > 0
    assert cpu_stat(limited)["throttled_usec"] > 0
    assert cpu_stat(unlimited)["nr_throttled"] == 0


def test_memory_pinned_with_cpuset_mems_lands_on_that_node(
    kubepods: Path, member: type[Member], guest: GuestShape
) -> None:
    last = guest.numa_nodes - 1
    pod = mkcgroup(kubepods / "pod")
    write(pod / "cpuset.mems", str(last))
    task = member(pod)
    assert task.status("Mems_allowed_list") == str(last)
    task.ask(f"alloc {ALLOC_MIB}")
    anon = numa_stat(pod)
    assert anon[last] >= ALLOC_MIB * MiB
    assert sum(v for node, v in anon.items() if node != last) < MiB


def test_changing_cpuset_mems_migrates_the_memory(
    kubepods: Path, member: type[Member], guest: GuestShape
) -> None:
    assert guest.numa_nodes >= 2, "boot the guest with --numa-nodes 2 or more"
    pod = mkcgroup(kubepods / "pod")
    write(pod / "cpuset.mems", "0")
    task = member(pod)
    task.ask(f"alloc {ALLOC_MIB}")
    assert numa_stat(pod)[0] >= ALLOC_MIB * MiB
    for node in range(1, guest.numa_nodes):
        write(pod / "cpuset.mems", str(node))  # returns once the pages have moved
        anon = numa_stat(pod)
        # The kernel migrates best effort: a page busy at that instant stays (seen once: one 2 MiB THP).
        assert anon[node] >= ALLOC_MIB * MiB - HUGE_PAGE, anon
        assert anon[node - 1] <= HUGE_PAGE, anon


def test_memory_max_is_enforced_by_the_oom_killer(kubepods: Path, member: type[Member]) -> None:
    pod = mkcgroup(kubepods / "pod")
    write(pod / "memory.max", str(32 * MiB))
    assert read(pod / "memory.max") == str(32 * MiB)
    task = member(pod)
    task.send(f"alloc {ALLOC_MIB}")
    assert task.close() == -9
    events = dict(line.split() for line in read(pod / "memory.events").splitlines())
    assert int(events["oom_kill"]) >= 1
    write(pod / "memory.max", "max")
    assert read(pod / "memory.max") == "max"


def test_inotify_counts_writes_to_cgroup_files_and_not_reads(kubepods: Path) -> None:
    """What `hack/kubelet-compare` counts a write war with: a write to a cgroup file raises IN_MODIFY on
    it like on any file, a read does not, and an untouched file counts nothing."""
    pod = mkcgroup(kubepods / "pod-watched")
    files = {"cpu.max": pod / "cpu.max", "cpuset.cpus": pod / "cpuset.cpus", "cpu.weight": pod / "cpu.weight"}

    def owner_at_work() -> None:
        write(pod / "cpu.max", "200000 100000")
        read(pod / "cpuset.cpus")

    counted = count_writes(files, 0.5, during=owner_at_work)
    assert (counted["cpu.max"], counted["cpuset.cpus"], counted["cpu.weight"]) == (1, 0, 0)
