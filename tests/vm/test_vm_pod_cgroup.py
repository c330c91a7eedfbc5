"""The pod bubble writer on a real cgroup v2 kernel with real NUMA nodes (podlevel.cgroups).

A kubelet-shaped pod cgroup (`<kubepods>/pod<uid>` with a `sandbox` and a `ctr` child, a task in `ctr`) is
located from its cgroup parent as the sandbox gives it, then its bubble is shrunk, moved and widened, and
its CFS quota set as the kubelet sets it for a pod with exclusive CPUs. What is in force is read from the
`.effective` files and from the task itself.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from vm_support import CGROUP_ROOT, GuestShape, Member, mkcgroup, read

from podlevel.cgroups import (
    Cpuset,
    locate_pod_cgroup,
    read_cpu_max,
    read_effective,
    write_bubble,
    write_cpu_max,
)
from podlevel.engine.cpuset import CPUSet

pytestmark = pytest.mark.vm


def node_cpus(node: int) -> CPUSet:
    return CPUSet.parse(read(Path(f"/sys/devices/system/node/node{node}/cpulist")))


def test_bubble_shrink_move_and_widen_on_cgroup_v2(
    kubepods: Path, member: type[Member], guest: GuestShape
) -> None:
    assert guest.numa_nodes >= 2, "boot the guest with --numa-nodes 2 or more"
    uid = str(uuid.uuid4())
    directory = mkcgroup(kubepods / f"pod{uid}", enable=True)
    ctr, sandbox = mkcgroup(directory / "ctr"), mkcgroup(directory / "sandbox")
    task = member(ctr)
    pod = locate_pod_cgroup(pod_uid=uid, cgroup_parent=f"/{kubepods.name}/pod{uid}", cgroup_root=CGROUP_ROOT)
    assert (pod.version, pod.cpuset_dir, pod.cpu_dir) == (2, directory, directory)
    everything = Cpuset(CPUSet(range(guest.cpus)), CPUSet(range(guest.numa_nodes)))
    assert read_effective(directory, 2) == everything  # nothing configured: the parent's
    node0, node1 = Cpuset(node_cpus(0), CPUSet([0])), Cpuset(node_cpus(1), CPUSet([1]))

    # shrink onto node 0; `ctr` and `sandbox` configure nothing, so they follow without being written
    assert write_bubble(pod, node0) == node0
    for child in (ctr, sandbox):
        assert read(child / "cpuset.cpus") == ""
        assert read_effective(child, 2) == node0
    assert CPUSet.parse(task.status("Cpus_allowed_list")) == node0.cpus
    assert task.status("Mems_allowed_list") == "0"

    # move to node 1 (both ways at once), `ctr` given one CPU of it
    one = Cpuset(CPUSet([min(node1.cpus)]), node1.mems)
    assert write_bubble(pod, node1, {f"/{kubepods.name}/pod{uid}/ctr": one}) == node1
    assert read_effective(ctr, 2) == one
    assert read_effective(sandbox, 2) == node1
    assert CPUSet.parse(task.status("Cpus_allowed_list")) == one.cpus
    assert task.status("Mems_allowed_list") == "1"

    # widen to the whole machine; `ctr` keeps its CPU, which lies inside
    assert write_bubble(pod, everything) == everything
    assert read_effective(ctr, 2) == one
    assert read_effective(sandbox, 2) == everything

    # a pod with exclusive CPUs: the kubelet leaves its pod cgroup unlimited, keeping the period
    write_cpu_max(pod, 20_000)
    assert read(directory / "cpu.max") == "20000 100000"
    write_cpu_max(pod, None)
    assert read(directory / "cpu.max") == "max 100000"
    assert read_cpu_max(pod) == (None, 100_000)
