"""What a node shows of its pods' placement, read where an operator reads it, as flat comparable fields.

One record per run of a scenario: for each pod (by its manifest name) and container, the values the kernel
holds in the cgroup files (`cpuset.cpus.effective`, `cpuset.mems.effective`, `cpu.max`, the pod cgroup's
`cpu.weight` and `memory.max` too), the state files in the kubelet's layout (`cpu_manager_state`,
`memory_manager_state`, read here with plain JSON, sharing no code with the plugin's reader), what a
PodResources v1 client gets from `List`, `Get` and `GetAllocatableResources`, and whether the pod was
admitted or refused and by which rule. The kubelet's record and the plugin's are compared field by field
(`testbed.kubelet_compare`).

A field is a `Field(pod, container, name)`: container `-` is the pod itself (its fields' names start with
`pod`), pod `-` the node.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import grpc

from podlevel._proto.podresources import api_pb2 as pr
from podlevel._proto.podresources import api_pb2_grpc as pr_grpc
from podlevel.engine.cpuset import CPUSet
from testbed import cgroupfs
from testbed.cri import CRI, ContainerSummary, PodSummary

POD: Final = "-"
NODE: Final = "-"
PODRESOURCES_TIMEOUT_S: Final = 10.0
ADMITTED: Final = "admitted"


@dataclass(frozen=True, order=True)
class Field:
    pod: str
    container: str
    name: str


Record = dict[Field, str]


def cpu_max(values: cgroupfs.CgroupValues) -> str:
    """`cpu.max` as the kernel spells it."""
    quota = "max" if values.cpu_quota_us is None else str(values.cpu_quota_us)
    return f"{quota} {values.cpu_period_us}"


def _cgroup_fields(record: Record, pod: str, container: str, path: str) -> None:
    values = cgroupfs.read_cgroup(path)
    which = "pod cgroup" if container == POD else "cgroup"
    record[Field(pod, container, f"{which} cpuset.cpus.effective")] = values.effective_cpus
    record[Field(pod, container, f"{which} cpuset.mems.effective")] = values.effective_mems
    record[Field(pod, container, f"{which} cpu.max")] = cpu_max(values)
    if container == POD:
        record[Field(pod, container, "pod cgroup cpu.weight")] = str(values.cpu_weight)
        record[Field(pod, container, "pod cgroup memory.max")] = str(values.memory_limit or "max")


def manifest_name(sandbox: PodSummary, node_name: str) -> str:
    """A static pod's manifest name: the kubelet names its sandbox `<name>-<node>`."""
    suffix = f"-{node_name}"
    return sandbox.name[: -len(suffix)] if sandbox.name.endswith(suffix) else sandbox.name


def live_sandboxes(cri: CRI) -> list[PodSummary]:
    return [p for p in cri.list_pods() if p.state == "SANDBOX_READY"]


def newest_containers(cri: CRI, sandbox: PodSummary) -> dict[str, ContainerSummary]:
    """Each container name's newest instance in the sandbox (a restarted container leaves older ones)."""
    newest: dict[str, ContainerSummary] = {}
    for container in cri.list_containers(sandbox.id):
        newest[container.name] = container
    return newest


def record_cgroups(cri: CRI, node_name: str) -> tuple[Record, dict[str, str]]:
    """The cgroup fields of every live pod and running container; also pod uid -> manifest name."""
    record: Record = {}
    uids: dict[str, str] = {}
    for sandbox in live_sandboxes(cri):
        pod = manifest_name(sandbox, node_name)
        uids[sandbox.uid] = pod
        containers = newest_containers(cri, sandbox)
        pod_cgroup = ""
        for name, container in sorted(containers.items()):
            info = cri.container_status(container.id)
            pod_cgroup = info.cgroups_path.rsplit("/", 1)[0]
            record[Field(pod, name, "state")] = info.state
            if info.state == "CONTAINER_RUNNING":
                _cgroup_fields(record, pod, name, info.cgroups_path)
        if pod_cgroup:
            _cgroup_fields(record, pod, POD, pod_cgroup)
    return record, uids


def _checkpoint_data(path: Path) -> Mapping[str, Any]:
    """The newest content of a kubelet state file: the V4/V3 `data` string when there, else the object."""
    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    data = obj.get("data")
    content = json.loads(data) if isinstance(data, str) and data else obj
    return content if isinstance(content, dict) else {}


def _blocks(blocks: Iterable[Mapping[str, Any]]) -> str:
    def one(block: Mapping[str, Any]) -> str:
        nodes = "+".join(map(str, block.get("numaAffinity") or []))
        return f"{block.get('type')}={block.get('size')}@{nodes}"

    return ",".join(sorted(one(b) for b in blocks))


def record_state(cpu_state: Path, memory_state: Path, uids: Mapping[str, str]) -> Record:
    """The state files' allocations of the live pods (by manifest name), and the CPU file's default set."""
    record: Record = {}
    cpu = _checkpoint_data(cpu_state)
    record[Field(NODE, NODE, "state defaultCpuSet")] = str(cpu.get("defaultCpuSet", "(no file)"))
    for uid, containers in (cpu.get("entries") or {}).items():
        for name, cpus in containers.items():
            if uid in uids:
                record[Field(uids[uid], name, "state cpus")] = cpus
    for uid, entry in (cpu.get("podEntries") or {}).items():
        if uid in uids:
            record[Field(uids[uid], POD, "pod state cpus")] = entry.get("cpuSet", "")
    memory = _checkpoint_data(memory_state)
    for uid, containers in (memory.get("entries") or {}).items():
        for name, blocks in containers.items():
            if uid in uids:
                record[Field(uids[uid], name, "state memory")] = _blocks(blocks)
    for uid, entry in (memory.get("podEntries") or {}).items():
        if uid in uids:
            record[Field(uids[uid], POD, "pod state memory")] = _blocks(entry.get("memoryBlocks") or [])
    return record


def converged(cri: CRI, node_name: str, cpu_state: Path) -> bool:
    """Whether every running container's cgroup asks for the CPUs the CPU state file gives it (its entry, else
    the default set): the kubelet's reconcile (every `cpuManagerReconcilePeriod`) or the plugin's answers
    have applied what was decided. Until then a record would catch the node between two of its steps."""
    cpu = _checkpoint_data(cpu_state)
    if "defaultCpuSet" not in cpu:
        return True
    entries = cpu.get("entries") or {}
    default = CPUSet.parse(str(cpu["defaultCpuSet"]))
    for sandbox in live_sandboxes(cri):
        for name, container in newest_containers(cri, sandbox).items():
            info = cri.container_status(container.id)
            if info.state != "CONTAINER_RUNNING":
                continue
            wanted = entries.get(sandbox.uid, {}).get(name)
            held = cgroupfs.read_cgroup(info.cgroups_path).cpus
            if CPUSet.parse(held) != (default if wanted is None else CPUSet.parse(wanted)):
                return False
    return True


def _ids(values: Iterable[int]) -> str:
    return ",".join(map(str, sorted(values)))


def _memory(entries: Iterable[Any]) -> str:
    return ",".join(sorted(
        f"{m.memory_type}={m.size}@{'+'.join(str(n.ID) for n in m.topology.nodes)}" for m in entries))


def _pod_resources_fields(record: Record, prefix: str, pod: str, answer: Any) -> None:
    if answer.cpu_ids or answer.memory:
        record[Field(pod, POD, f"pod {prefix} cpu_ids")] = _ids(answer.cpu_ids)
        record[Field(pod, POD, f"pod {prefix} memory")] = _memory(answer.memory)
    for container in answer.containers:
        record[Field(pod, container.name, f"{prefix} cpu_ids")] = _ids(container.cpu_ids)
        record[Field(pod, container.name, f"{prefix} memory")] = _memory(container.memory)


def record_pod_resources(socket: Path, node_name: str, live: Iterable[str]) -> Record:
    """`List`, `Get` of each live pod and `GetAllocatableResources` from a PodResources v1 socket."""
    record: Record = {}
    live = set(live)
    with grpc.insecure_channel(f"unix:{socket}") as channel:
        client = pr_grpc.PodResourcesListerStub(channel)
        listed = client.List(pr.ListPodResourcesRequest(), timeout=PODRESOURCES_TIMEOUT_S)
        for pod in listed.pod_resources:
            name = pod.name.removesuffix(f"-{node_name}")
            if name in live:
                _pod_resources_fields(record, "list", name, pod)
        for name in sorted(live):
            request = pr.GetPodResourcesRequest(pod_name=f"{name}-{node_name}", pod_namespace="default")
            try:
                got = client.Get(request, timeout=PODRESOURCES_TIMEOUT_S)
            except grpc.RpcError as exc:
                record[Field(name, POD, "get error")] = str(exc.code())
                continue
            _pod_resources_fields(record, "get", name, got.pod_resources)
        allocatable = client.GetAllocatableResources(pr.AllocatableResourcesRequest(),
                                                     timeout=PODRESOURCES_TIMEOUT_S)
        record[Field(NODE, NODE, "allocatable cpu_ids")] = _ids(allocatable.cpu_ids)
        record[Field(NODE, NODE, "allocatable memory")] = _memory(allocatable.memory)
    return record


def as_json(record: Record) -> list[dict[str, str]]:
    return [{"pod": f.pod, "container": f.container, "field": f.name, "value": v}
            for f, v in sorted(record.items())]


def from_json(rows: Iterable[Mapping[str, str]]) -> Record:
    return {Field(r["pod"], r["container"], r["field"]): r["value"] for r in rows}

