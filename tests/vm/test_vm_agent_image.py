"""The agent as its DaemonSet runs it, in the cgroup v2 guest: the image (built on the host by hack/image) in
the guest's containerd, the rendered DaemonSet's pod started as a kubelet starts it (testbed.agent_node).

On cgroup v2 the runtime gives every container a cgroup namespace of its own, while the bind mount of the
node's /sys/fs/cgroup at /host/cgroup still shows the whole tree, so the agent writes the pod cgroups there,
from inside the container, as uid 0 with no capabilities (owning the files is enough). What a pod-level pod
gets is read from the kernel: the pod cgroup's cpuset, memory node and quota, its containers' cpusets, and
the agent's own log lines saying it wrote them.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest
from vm_support import GuestShape, in_force, node_cpus, pod

from podlevel.engine.cpuset import CPUSet
from testbed import agent_image, cgroupfs
from testbed.agent_node import AgentNode
from testbed.containerd import Containerd
from testbed.kubelet import start_pod
from testbed.manifests import render

# Importing the ~200 MB image through the guest's 9p share under TCG takes two minutes (115 s measured with
# 4 NUMA nodes), the rest about one. The bound stays well inside the guest's own (Makefile: vm), so a run
# that hangs fails here with every thread's stack rather than being killed with the guest.
pytestmark = [pytest.mark.vm, pytest.mark.timeout(600)]

BASE: Final = Path("/run/nri-podlevel-vm-agent")


@pytest.fixture
def node(guest: GuestShape) -> Iterator[AgentNode]:
    with Containerd("2", BASE / "ctrd", pod_network=True) as ctrd, ctrd.cri() as cri:
        node = AgentNode(ctrd, cri, BASE, render("script-certs"))
        started = time.monotonic()
        node.import_image(agent_image.prebuilt())
        print(f"image imported in the guest in {time.monotonic() - started:.0f} s")
        yield node


def test_the_agent_container_writes_the_pod_cgroup_from_its_own_cgroup_namespace(
        node: AgentNode, guest: GuestShape) -> None:
    agent = node.start_agent(agent_image.prebuilt())
    pid = node.cri.container_status(agent.container_id).pid
    assert os.readlink(f"/proc/{pid}/ns/cgroup") != os.readlink("/proc/self/ns/cgroup"), "its own namespace"

    fast_pod = pod("fast-path")
    fast = start_pod(node.cri, fast_pod).containers
    app_cpus, app_mems, app_quota = in_force(node.cri, fast["main-app"])
    log_cpus, _, _ = in_force(node.cri, fast["logger"])
    bubble = app_cpus | log_cpus
    [home] = [number for number, cpus in node_cpus(guest).items() if bubble.is_subset(cpus)]
    assert (len(bubble), app_mems, app_quota) == (2, str(home), "max")

    parent = node.containerd.pod_cgroup_parent(fast_pod.uid)
    pod_cgroup = cgroupfs.read_cgroup(parent)
    assert (CPUSet.parse(pod_cgroup.cpus), pod_cgroup.mems) == (bubble, str(home)), "written by the agent"
    assert pod_cgroup.cpu_quota_us is None, "the kubelet's to keep (logger is pod-shared); the bed set none"
    written = node.wait_logged(agent, f"pod cgroup {parent}: cpus={bubble} mems={home} quota=untouched")
    print(f"agent container log (guest, {guest.numa_nodes} NUMA nodes): {written}")
    # The operator commands inside the agent's container, as on the host's test bed: the guest switches to
    # its root as a node does, so a CRI exec reaches the container's root (its cgroup mount is /host/cgroup).
    check = node.operator(agent, "check")
    assert check.exit_code == 0, check.stdout + check.stderr
    show = node.operator(agent, "show", "--json")
    assert show.exit_code == 0, show.stderr
    pods = json.loads(show.stdout)["pods"]
    shown = {(p["name"], c["name"]): c["cgroup"] for p in pods for c in p["containers"]}
    found = shown[(fast_pod.name, "main-app")]["found"]
    assert (CPUSet.parse(found["cpus"]), found["drifted"]) == (app_cpus, [])
