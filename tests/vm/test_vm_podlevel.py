"""`nri-podlevel run` end to end on a real multi-NUMA cgroup v2 node: the pod bubble, its exclusive slice and
pod shared pool, and the node shared pool, as the kernel applies them.

The guest's real /sys gives the plugin its topology (CPU 0's core is reserved by default); pods are started
as a kubelet starts them, with the pod-shape annotation. Sized to fit every guest shape `make vm` boots: a
2-CPU bubble (one core) of 256Mi, which a single NUMA node holds on both the 2- and the 4-node guest.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest
from vm_support import GuestShape, in_force, node_cpus, pod, read

from podlevel.engine.cpuset import CPUSet
from podlevel.engine.errors import EMPTY_POD_SHARED_POOL_ERROR
from testbed import cgroupfs
from testbed.containerd import Containerd
from testbed.cri import CRI, CRIError, pod_cgroup_parent
from testbed.kubelet import start_pod
from testbed.plugin_process import PluginProcess

pytestmark = pytest.mark.vm

BASE: Final = Path("/run/nri-podlevel-vm-podlevel")
LOG_TIMEOUT_S: Final = 30.0
# Python's start-up under TCG on a loaded host (another guest, a build) has taken over 30 s.
REGISTER_TIMEOUT_S: Final = 120.0


@pytest.fixture
def plugin(guest: GuestShape) -> Iterator[tuple[CRI, PluginProcess]]:
    with Containerd("2", BASE) as ctrd:
        process = PluginProcess(ctrd.nri_socket, state_dir=BASE / "plugin-state",
                                prefix="  plugin (guest) | ")
        try:
            process.wait_registered(REGISTER_TIMEOUT_S)
            with ctrd.cri() as client:
                yield client, process
                client.remove_all()
        finally:
            process.stop()


def test_pod_bubble_slice_and_shared_pools_on_a_numa_node(plugin: tuple[CRI, PluginProcess],
                                                          guest: GuestShape) -> None:
    cri, process = plugin
    nodes = node_cpus(guest)
    web = start_pod(cri, pod("web"), with_shape=False).containers["server"]
    assert in_force(cri, web)[0] == CPUSet.parse(read(Path("/sys/devices/system/cpu/online")))

    fast_pod = pod("fast-path")
    fast = start_pod(cri, fast_pod).containers
    app_cpus, app_mems, app_quota = in_force(cri, fast["main-app"])
    log_cpus, log_mems, log_quota = in_force(cri, fast["logger"])

    bubble = app_cpus | log_cpus
    [home] = [node for node, cpus in nodes.items() if bubble.is_subset(cpus)]
    assert len(bubble) == 2 and app_cpus.is_disjoint(log_cpus), "one exclusive CPU, one pod-shared"
    assert app_mems == log_mems == str(home), "memory pinned to the bubble's NUMA node"
    assert app_quota == "max", "CFS quota off for the exclusive slice"
    assert log_quota == "100000", "the pod shared pool gets the leftover budget: 2 CPUs - 1 exclusive"
    assert in_force(cri, web)[0].is_disjoint(bubble), "the node shared pool gave up the bubble"
    assert cri.cgroup_root is not None
    pod_cgroup = cgroupfs.read_cgroup(pod_cgroup_parent(cri.cgroup_root, fast_pod.uid))
    assert CPUSet.parse(pod_cgroup.effective_cpus) == bubble, "the pod cgroup holds the bubble"
    assert pod_cgroup.effective_mems == str(home)
    # The pod's quota is the kubelet's to keep (logger runs in the pod shared pool); this test bed, unlike a
    # kubelet, made the pod cgroup without one, and the plugin wrote none.
    assert pod_cgroup.cpu_quota_us is None
    process.wait_for_line(f"pod{fast_pod.uid}: cpus={bubble} mems={home} quota=untouched", LOG_TIMEOUT_S)

    with pytest.raises(CRIError) as refused:
        start_pod(cri, pod("no-room"))
    assert f"{EMPTY_POD_SHARED_POOL_ERROR}: " in refused.value.details
    assert in_force(cri, fast["main-app"])[0] == app_cpus, "a refused pod moves nobody"
