"""The PodResources v1 service of `nri-podlevel run` on real containerd, called the way node agents call it.

Two clients ask the plugin's socket: one generated in the test by grpcio-tools from the upstream
`podresources/v1/api.proto` Debian ships with the kubelet API sources (1.32.7: no pod-level fields 4 and 5),
run as its own process, and one from the project's proto, which has them. Both must read the same pods,
containers and container CPUs; with the project's, for every pod, `pod cpu_ids - union(container cpu_ids)`
(the consumers' formula) must be the pod shared pool the plugin enforces, read from the cgroup files of the
containers that report no CPUs, and every reported CPU set must be what the kernel applies.

Sized for the 2-CPU host: CPU 0 reserved (the node shared pool), CPU 1 assignable.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any, Final

import grpc
import pytest
from google.protobuf import text_format
from google.protobuf.json_format import MessageToDict

from podlevel._proto.podresources import api_pb2 as pb
from podlevel._proto.podresources import api_pb2_grpc as pb_grpc
from podlevel.engine.cpuset import CPUSet
from podlevel.engine.pod import Pod
from podlevel.podspec.workloads import load_pods
from support import debian_protos
from support.demo_node import REFUSED_AT_SANDBOX, demo_pod
from testbed import cgroupfs
from testbed.containerd import Containerd
from testbed.cri import CRI, CRIError
from testbed.kubelet import StartedPod, start_pod
from testbed.plugin_process import PluginProcess
from testbed.wait import wait_until

pytestmark = pytest.mark.usefixtures("demo_node_cpus")

CLIENT: Final = Path(__file__).with_name("podresources_client.py")
RESERVED_MEMORY: Final = 100 * 2**20
"""The plugin's default --reserved-memory on node 0."""
TIMEOUT_S: Final = 15.0
POOLED: Final = """
apiVersion: v1
kind: Pod
metadata: {name: pooled}
spec:
  resources:
    requests: {cpu: "1", memory: 256Mi}
    limits: {cpu: "1", memory: 256Mi}
  initContainers:
  - {name: log, image: busybox, restartPolicy: Always}
  containers:
  - name: work
    image: busybox
    resources: {requests: {cpu: 100m, memory: 32Mi}}
"""
"""A 1-CPU bubble whose containers both run in the pod shared pool (neither has limits of its own)."""


@pytest.fixture(scope="module")
def upstream_client(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The upstream api.proto from Debian, generated into Python modules by grpcio-tools here."""
    root = debian_protos.fetch(debian_protos.KUBELET)
    out = tmp_path_factory.mktemp("upstream-podresources")
    (out / "api.proto").write_text(debian_protos.without_gogoproto(root / debian_protos.PODRESOURCES_PROTO))
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{out}", f"--python_out={out}",
                    f"--grpc_python_out={out}", "api.proto"], check=True, cwd=out)
    print(f"upstream client from {debian_protos.versions()}")
    return out


def fresh(pod: Pod) -> Pod:
    return replace(pod, uid=str(uuid.uuid4()))


def ask_upstream(generated: Path, socket: Path, *pods: str) -> dict[str, Any]:
    run = subprocess.run([sys.executable, str(CLIENT), str(generated), str(socket), *pods],
                         capture_output=True, text=True, timeout=60, check=True)
    answers: dict[str, Any] = json.loads(run.stdout)
    return answers


def ask_project(socket: Path) -> pb.ListPodResourcesResponse:
    with grpc.insecure_channel(f"unix:{socket}") as channel:
        return pb_grpc.PodResourcesListerStub(channel).List(pb.ListPodResourcesRequest(), timeout=TIMEOUT_S)


def without_pod_level(answer: pb.ListPodResourcesResponse) -> dict[str, Any]:
    """The project's answer as the 1.32 proto reads it: no pod-level cpu_ids and memory."""
    stripped = pb.ListPodResourcesResponse()
    stripped.CopyFrom(answer)
    for listed in stripped.pod_resources:
        listed.ClearField("cpu_ids")
        listed.ClearField("memory")
    return MessageToDict(stripped, preserving_proto_field_name=True)


def cgroup_cpus(cri: CRI, container_id: str) -> CPUSet:
    return CPUSet.parse(cgroupfs.read_cgroup(cri.container_status(container_id).cgroups_path).cpus)


def drifts(cri: CRI, answer: pb.ListPodResourcesResponse, started: dict[str, StartedPod]) -> list[str]:
    """Where the answer and the cgroup files disagree. Per pod, the consumers' pool
    `pod - union(containers)` is what the containers reporting no CPUs run on; a pod without pod-level CPUs
    has no pool, and those of its containers run in the node shared pool (every CPU no answer reports)."""
    reported = CPUSet.union_of(
        CPUSet(p.cpu_ids) | CPUSet.union_of(CPUSet(c.cpu_ids) for c in p.containers)
        for p in answer.pod_resources
    )
    node_pool = CPUSet(os.sched_getaffinity(0)) - reported
    found: list[str] = []
    for listed in answer.pod_resources:
        pool = CPUSet(listed.cpu_ids) - CPUSet.union_of(CPUSet(c.cpu_ids) for c in listed.containers)
        enforced: list[CPUSet] = []
        for container in listed.containers:
            cpus = cgroup_cpus(cri, started[listed.name].containers[container.name])
            if container.cpu_ids:
                expected = CPUSet(container.cpu_ids)
            else:
                enforced.append(cpus)
                expected = pool if listed.cpu_ids else node_pool
            if cpus != expected:
                found.append(f"{listed.name}/{container.name}: cgroup cpus {cpus}, answer says {expected}")
        if listed.cpu_ids and enforced and CPUSet.union_of(enforced) != pool:
            found.append(f"{listed.name}: pod shared pool {pool} by the formula, {CPUSet.union_of(enforced)} "
                         "in the cgroups")
    return found


def settled(cri: CRI, socket: Path, started: dict[str, StartedPod]) -> pb.ListPodResourcesResponse:
    """The List answer once the cgroup files hold what it reports (updates to other containers land
    asynchronously after the CreateContainer that caused them)."""

    def agreed() -> pb.ListPodResourcesResponse | None:
        answer = ask_project(socket)
        return answer if not drifts(cri, answer, started) else None

    try:
        return wait_until(agreed, TIMEOUT_S, "the PodResources answer to match the cgroup files")
    finally:
        print(text_format.MessageToString(ask_project(socket)))


def node0_allocatable_memory() -> int:
    """MemTotal of NUMA node 0 (or the machine) minus its hugepages and the reserved 100Mi, from sysfs."""
    node = Path("/sys/devices/system/node/node0")
    meminfo = (node / "meminfo") if node.exists() else Path("/proc/meminfo")
    found = re.search(r"MemTotal:\s+(\d+) kB", meminfo.read_text())
    assert found, f"no MemTotal in {meminfo}"
    total = int(found.group(1)) * 1024
    hugepages = 0
    for pages in node.glob("hugepages/hugepages-*kB/nr_hugepages"):
        size_kb = int(pages.parent.name.removeprefix("hugepages-").removesuffix("kB"))
        hugepages += int(pages.read_text()) * size_kb * 1024
    return total - hugepages - RESERVED_MEMORY


def test_pod_shared_pool_by_the_consumers_formula_is_what_the_cgroups_hold(
    cri: CRI, plugin: PluginProcess, upstream_client: Path
) -> None:
    status = plugin.podresources_socket.lstat()
    assert (stat.S_ISSOCK(status.st_mode), stat.S_IMODE(status.st_mode), status.st_uid) == (True, 0o600, 0)
    [pooled] = load_pods(POOLED)
    started = {"web": start_pod(cri, demo_pod("web"), with_shape=False),
               "pooled": start_pod(cri, fresh(pooled))}

    answer = settled(cri, plugin.podresources_socket, started)

    by_name = {p.name: p for p in answer.pod_resources}
    assert sorted(by_name) == ["pooled", "web"]
    pool = by_name["pooled"]
    assert (list(pool.cpu_ids), [c.name for c in pool.containers]) == ([1], ["log", "work"])
    assert [(m.memory_type, m.size, [n.ID for n in m.topology.nodes]) for m in pool.memory] == [
        ("memory", 256 * 2**20, [0])]
    assert all(not c.cpu_ids and not c.memory for p in answer.pod_resources for c in p.containers)
    socket = plugin.podresources_socket
    upstream = ask_upstream(upstream_client, socket, "default/pooled", "kube-system/ghost")
    print(json.dumps(upstream, indent=1))
    as_upstream_reads_it = without_pod_level(answer)
    assert upstream["list"] == as_upstream_reads_it
    assert upstream["get"]["default/pooled"] == {"pod_resources": as_upstream_reads_it["pod_resources"][0]}
    assert upstream["get"]["kube-system/ghost"] == {
        "code": "UNKNOWN", "details": "pod ghost in namespace kube-system not found"}
    assert upstream["allocatable"] == {
        "cpu_ids": ["1"],
        "memory": [{"memory_type": "memory", "size": str(node0_allocatable_memory()),
                    "topology": {"nodes": [{}]}}],  # NUMA node ID 0 is the default value, left out
    }


def test_an_exclusive_slice_is_reported_twice_and_a_refused_pod_not_at_all(
    containerd: Containerd, cri: CRI, plugin: PluginProcess, upstream_client: Path
) -> None:
    started = {"web": start_pod(cri, demo_pod("web"), with_shape=False),
               "fast-path": start_pod(cri, demo_pod("fast-path"))}
    with pytest.raises(CRIError):
        start_pod(cri, demo_pod("no-room"))

    answer = settled(cri, plugin.podresources_socket, started)

    by_name = {p.name: p for p in answer.pod_resources}
    fast = by_name["fast-path"]
    assert (list(fast.cpu_ids), [(c.name, list(c.cpu_ids)) for c in fast.containers]) == (
        [1], [("main-app", [1])])
    assert [(m.memory_type, m.size) for m in fast.containers[0].memory] == [("memory", 128 * 2**20)]
    if containerd.flavour.name in REFUSED_AT_SANDBOX:
        assert "no-room" not in by_name, "refused at its sandbox, which the runtime removed"
    else:
        refused = by_name["no-room"]
        assert (list(refused.cpu_ids), list(refused.memory), list(refused.containers)) == ([], [], [])
    upstream = ask_upstream(upstream_client, plugin.podresources_socket, "default/fast-path")
    assert upstream["list"] == without_pod_level(answer)
