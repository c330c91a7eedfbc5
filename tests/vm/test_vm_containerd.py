"""The test bed's private containerd inside the guest: an NRI cpuset lands in cgroup v2 on a real
NUMA node, and the pod cgroup (which NRI cannot adjust) bounds it.

A pod is run the way a kubelet runs one (cgroupfs driver, pod cgroup under `kubepods`, pod-level
resources); a plugin on the project's NRI stub answers CreateContainer by pinning the container to the CPUs
and memory of the guest's last NUMA node. The binaries come from the host's `.cache` (the guest has no
network): `make vm` fetches them first. Containerd's state lives on the guest's /run, a tmpfs, because
overlayfs snapshots cannot sit on the guest's overlay root.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest
from vm_support import CGROUP_ROOT, GuestShape, read, write

from podlevel.engine.cpuset import CPUSet
from podlevel.nri import CreateResult, Handler, Stub, api
from testbed import cgroupfs
from testbed.containerd import Containerd
from testbed.cri import Resources

pytestmark = pytest.mark.vm

BASE: Final = Path("/run/nri-podlevel-vm")
READY_TIMEOUT_S: Final = 60.0
SLEEP: Final = ["/bin/sh", "-c", "sleep 3600"]
POD_RESOURCES: Final = Resources.kubelet("2", "2", "256Mi")
CONTAINER_RESOURCES: Final = Resources.kubelet("1", "1", "64Mi")


class PinToNode(Handler):
    """Pins every container it sees created to one NUMA node's CPUs and memory."""

    def __init__(self, cpus: CPUSet, node: int) -> None:
        self.cpus = cpus
        self.node = node

    def create_container(self, pod: api.PodSandbox, container: api.Container) -> CreateResult:
        adjust = api.ContainerAdjustment()
        adjust.linux.resources.cpu.cpus = str(self.cpus)
        adjust.linux.resources.cpu.mems = str(self.node)
        return CreateResult(adjust=adjust)


@pytest.fixture
def containerd(guest: GuestShape) -> Iterator[Containerd]:
    """Started with the images imported; on exit it removes every pod, stops and leaves nothing behind."""
    with Containerd("2", BASE) as ctrd:
        yield ctrd


@pytest.fixture
def pin_to_last_node(containerd: Containerd, guest: GuestShape) -> Iterator[PinToNode]:
    last = guest.numa_nodes - 1
    handler = PinToNode(CPUSet.parse(read(Path(f"/sys/devices/system/node/node{last}/cpulist"))), last)
    stub = Stub(handler, "podlevel-vm", "50", str(containerd.nri_socket))
    thread = threading.Thread(target=stub.run, name="nri-stub", daemon=True)
    thread.start()
    try:
        assert stub.wait_ready(READY_TIMEOUT_S), f"the NRI stub did not register with {containerd.nri_socket}"
        yield handler
    finally:
        stub.stop()
        thread.join(READY_TIMEOUT_S)


def test_an_nri_cpuset_is_in_force_in_cgroup_v2_and_bounded_by_the_pod_cgroup(
    containerd: Containerd, pin_to_last_node: PinToNode
) -> None:
    node_cpus, node = pin_to_last_node.cpus, str(pin_to_last_node.node)
    with containerd.cri() as cri:
        uid = str(uuid.uuid4())
        pod_path = containerd.pod_cgroup_parent(uid)
        pod = cri.run_pod("pinned", uid=uid, cgroup_parent=pod_path, resources=POD_RESOURCES)
        container = cri.run_container(pod, "app", command=SLEEP, resources=CONTAINER_RESOURCES)

        info = cri.container_status(container)
        values = cgroupfs.read_cgroup(info.cgroups_path)
        assert values.version == 2
        assert info.cgroups_path.startswith(pod_path + "/")
        assert (CPUSet.parse(values.cpus), CPUSet.parse(values.effective_cpus)) == (node_cpus, node_cpus)
        assert (values.mems, values.effective_mems) == (node, node)
        assert CPUSet.parse(cgroupfs.cpus_allowed_list(info.pid)) == node_cpus
        assert cgroupfs.mems_allowed_list(info.pid) == node

        # A bubble written straight into the pod cgroup (two CPUs of the node) bounds the running container.
        pod_cgroup = CGROUP_ROOT / pod_path.lstrip("/")
        core = CPUSet(sorted(node_cpus)[:2])
        write(pod_cgroup / "cpuset.cpus", str(core))
        values = cgroupfs.read_cgroup(info.cgroups_path)
        assert (CPUSet.parse(values.cpus), CPUSet.parse(values.effective_cpus)) == (node_cpus, core)
        assert CPUSet.parse(cgroupfs.cpus_allowed_list(info.pid)) == core
