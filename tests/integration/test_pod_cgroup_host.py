"""The pod bubble writer on this host's real cgroup v1 cpuset and cpu hierarchies (no containerd needed).

A throw-away tree `nri-podlevel-test-<pid>/kubepods/burstable/pod<uid>/{sandbox,ctr}` is made in both
hierarchies, a process is put into `ctr`, and the bubble is shrunk, widened and moved (both at once); each
time the `.effective` files and the process's allowed CPUs are read back. The real kernel also shows the
out-of-order write the writer avoids being refused. Everything made is removed afterwards, deepest first.
The cgroup v2 counterpart runs in the guest (tests/vm/test_vm_pod_cgroup.py).
"""

from __future__ import annotations

import errno
import os
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from podlevel.cgroups import (
    DEFAULT_CGROUP_ROOT,
    CgroupWriteError,
    Cpuset,
    PodCgroup,
    locate_pod_cgroup,
    read_cpu_max,
    read_effective,
    write_bubble,
    write_cpu_max,
)
from podlevel.cgroups.paths import cgroup_version
from podlevel.cgroups.pod_cgroup import FILES
from podlevel.engine.cpuset import CPUSet
from testbed.cgroupfs import cpus_allowed_list


@dataclass
class HostPod:
    pod: PodCgroup
    container_path: str
    ctr: Path
    sandbox: Path
    all_cpus: CPUSet
    mems: CPUSet
    task: subprocess.Popen[bytes]


def _read(path: Path) -> str:
    return path.read_text().strip()


@pytest.fixture
def host_pod() -> Iterator[HostPod]:
    if os.geteuid() != 0:
        pytest.fail("writing the host's cgroups needs root")
    if cgroup_version(DEFAULT_CGROUP_ROOT) != 1:
        pytest.skip("this host has no cgroup v1 cpuset hierarchy; the cgroup v2 case runs in tests/vm")
    uid = str(uuid.uuid4())
    top = f"nri-podlevel-test-{os.getpid()}"
    parent = f"/{top}/kubepods/burstable/pod{uid}"
    pod = locate_pod_cgroup(pod_uid=uid, cgroup_parent=parent)
    levels = [Path(top), Path(top, "kubepods"), Path(top, "kubepods/burstable"), Path(parent.lstrip("/"))]
    levels += [levels[-1] / "sandbox", levels[-1] / "ctr"]
    made: list[Path] = []
    task: subprocess.Popen[bytes] | None = None
    try:
        cpuset_root = pod.cpuset_base
        all_cpus, mems = CPUSet.parse(_read(cpuset_root / "cpuset.cpus")), _read(cpuset_root / "cpuset.mems")
        for base in (pod.cpuset_base, pod.cpu_base):
            for level in levels:
                (base / level).mkdir()
                made.append(base / level)
                if base == pod.cpuset_base:  # cgroup.clone_children is 0: a new cpuset starts empty
                    (base / level / "cpuset.cpus").write_text(str(all_cpus))
                    (base / level / "cpuset.mems").write_text(mems)
        task = subprocess.Popen(["sleep", "600"])
        (pod.cpuset_dir / "ctr" / "cgroup.procs").write_text(str(task.pid))
        yield HostPod(pod, f"{parent}/ctr", pod.cpuset_dir / "ctr", pod.cpuset_dir / "sandbox",
                      all_cpus, CPUSet.parse(mems), task)
    finally:
        if task is not None:
            task.kill()
            task.wait()
        for directory in reversed(made):
            directory.rmdir()
        assert not any(d.exists() for d in made)


def test_shrink_widen_and_both_on_the_real_v1_hierarchy(host_pod: HostPod) -> None:
    if len(host_pod.all_cpus) < 2:
        pytest.skip("moving a bubble needs two CPUs")
    pod, mems = host_pod.pod, host_pod.mems
    first, second = CPUSet([min(host_pod.all_cpus)]), CPUSet([max(host_pod.all_cpus)])

    with pytest.raises(CgroupWriteError) as refused:  # the order the writer never uses
        FILES.write(pod.cpuset_dir / "cpuset.cpus", str(first))
    assert refused.value.errno == errno.EBUSY
    assert refused.value.path == pod.cpuset_dir / "cpuset.cpus"

    # shrink: the containers' cgroups first, each keeping what lies in the bubble
    assert write_bubble(pod, Cpuset(first, mems)) == Cpuset(first, mems)
    for child in (host_pod.ctr, host_pod.sandbox):
        assert read_effective(child, 1) == Cpuset(first, mems)
    assert CPUSet.parse(cpus_allowed_list(host_pod.task.pid)) == first

    # widen: the pod first, then the container given a target; the sandbox keeps its set
    assert write_bubble(pod, Cpuset(host_pod.all_cpus, mems), {host_pod.container_path: Cpuset(
        host_pod.all_cpus, mems)}) == Cpuset(host_pod.all_cpus, mems)
    assert read_effective(host_pod.ctr, 1) == Cpuset(host_pod.all_cpus, mems)
    assert read_effective(host_pod.sandbox, 1) == Cpuset(first, mems)
    assert CPUSet.parse(cpus_allowed_list(host_pod.task.pid)) == host_pod.all_cpus

    # both: from `first` to `second` (disjoint), through the union
    write_bubble(pod, Cpuset(first, mems))
    assert write_bubble(pod, Cpuset(second, mems)) == Cpuset(second, mems)
    for child in (host_pod.ctr, host_pod.sandbox):
        assert read_effective(child, 1) == Cpuset(second, mems)
    assert CPUSet.parse(cpus_allowed_list(host_pod.task.pid)) == second

    # the kubelet's pod quota with exclusive CPUs (no limit), then a limit, read back from v1's two files
    write_cpu_max(pod, None)
    assert read_cpu_max(pod) == (None, 100_000)
    assert _read(pod.cpu_dir / "cpu.cfs_quota_us") == "-1"
    write_cpu_max(pod, 50_000, 50_000)
    assert read_cpu_max(pod) == (50_000, 50_000)
