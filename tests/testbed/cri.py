"""A kubelet-like CRI (runtime.v1) client for driving a real containerd in tests and the demo.

It fills requests the way a kubelet does where that matters to the plugin: pods get a cgroup parent and
pod-level resources in `PodSandboxConfig.linux.resources`, containers get LinuxContainerResources computed
from requests and limits (`podspec.runtime`), and CreateContainer carries the sandbox config. Pods are
host-network unless asked for the pod network (a test bed started with `pod_network`, which has CNI), and
host-network pods have no hostname, which runc refuses to set without a private UTS namespace. Every RPC has
a deadline; failures raise CRIError naming the call and the runtime's reason.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Final, TypeVar

import grpc

from podlevel._proto.cri import api_pb2 as pb
from podlevel._proto.cri import api_pb2_grpc as pb_grpc
from podlevel.engine.pod import CPU, MEMORY
from podlevel.engine.pod import Resources as PodResources
from podlevel.engine.quantity import bytes_of, milli_cpu
from podlevel.podspec.runtime import RuntimeResources, linux_resources
from testbed.images import BUSYBOX_IMAGE

CRI_VERSION: Final = "v1"
DEFAULT_TIMEOUT_S: Final = 60.0

_Response = TypeVar("_Response")


def pod_cgroup_parent(cgroup_root: str, uid: str, qos: str = "guaranteed") -> str:
    """The pod cgroup a kubelet with the cgroupfs driver would use, moved under `cgroup_root`.

    Guaranteed pods sit directly under kubepods, the others under kubepods/<qos>, as the kubelet lays them
    out; only the top level differs, so a test bed's cleanup never touches a real kubelet's cgroups.
    """
    if qos not in ("guaranteed", "burstable", "besteffort"):
        raise ValueError(f"QoS class must be guaranteed, burstable or besteffort, got {qos!r}")
    tier = "" if qos == "guaranteed" else f"/{qos}"
    return f"{cgroup_root}/kubepods{tier}/pod{uid}"


class CRIError(RuntimeError):
    """A CRI call failed; `code` is the gRPC status code."""

    def __init__(self, method: str, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"CRI {method} failed: {code.name}: {details}")
        self.method = method
        self.code = code
        self.details = details


@dataclass(frozen=True)
class Resources:
    """LinuxContainerResources in plain Python; zero or empty means "not set", as in CRI."""

    cpu_shares: int = 0
    cpu_quota: int = 0
    cpu_period: int = 0
    memory_limit: int = 0
    cpuset_cpus: str = ""
    cpuset_mems: str = ""
    unified: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, sent: RuntimeResources, *, cpuset_cpus: str = "", cpuset_mems: str = "") -> Resources:
        return cls(cpu_shares=sent.cpu_shares, cpu_quota=sent.cpu_quota, cpu_period=sent.cpu_period,
                   memory_limit=sent.memory_limit, cpuset_cpus=cpuset_cpus, cpuset_mems=cpuset_mems)

    @classmethod
    def kubelet(cls, cpu_request: str | None = None, cpu_limit: str | None = None,
                memory_limit: str | None = None, *, cpuset_cpus: str = "",
                cpuset_mems: str = "") -> Resources:
        """What a kubelet puts into CRI for these requests and limits (`podspec.runtime.linux_resources`)."""
        requests = {CPU: milli_cpu(cpu_request)} if cpu_request is not None else {}
        limits = {CPU: milli_cpu(cpu_limit)} if cpu_limit is not None else {}
        if memory_limit is not None:
            limits[MEMORY] = bytes_of(memory_limit)
        return cls.of(linux_resources(PodResources(requests, limits)),
                      cpuset_cpus=cpuset_cpus, cpuset_mems=cpuset_mems)

    def to_proto(self) -> pb.LinuxContainerResources:
        return pb.LinuxContainerResources(
            cpu_shares=self.cpu_shares, cpu_quota=self.cpu_quota, cpu_period=self.cpu_period,
            memory_limit_in_bytes=self.memory_limit, cpuset_cpus=self.cpuset_cpus,
            cpuset_mems=self.cpuset_mems, unified=dict(self.unified))

    @classmethod
    def from_proto(cls, message: pb.LinuxContainerResources) -> Resources:
        return cls(cpu_shares=message.cpu_shares, cpu_quota=message.cpu_quota, cpu_period=message.cpu_period,
                   memory_limit=message.memory_limit_in_bytes, cpuset_cpus=message.cpuset_cpus,
                   cpuset_mems=message.cpuset_mems, unified=dict(message.unified))


@dataclass(frozen=True)
class RuntimeVersion:
    runtime_name: str
    runtime_version: str
    api_version: str


@dataclass(frozen=True)
class PodSummary:
    id: str
    name: str
    namespace: str
    uid: str
    state: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]


@dataclass(frozen=True)
class ContainerSummary:
    id: str
    pod_id: str
    name: str
    state: str


@dataclass(frozen=True)
class ContainerInfo:
    """ContainerStatus with the runtime's verbose info decoded.

    `pid` is the container's init process on the host (0 once it exited); `cgroups_path` is the OCI
    spec's linux.cgroupsPath, with the cgroupfs driver `<pod cgroup parent>/<container id>`; `resources`
    is what the runtime reports having applied; `spec` is the whole OCI runtime spec; `started_at` is when
    it started (Unix nanoseconds, 0 before).
    """

    id: str
    name: str
    state: str
    exit_code: int
    pid: int
    cgroups_path: str
    resources: Resources
    annotations: Mapping[str, str]
    spec: Mapping[str, Any]
    started_at: int = 0


@dataclass(frozen=True)
class ExecResult:
    exit_code: int
    stdout: str
    stderr: str


class CRI:
    """A CRI client on a containerd socket; a context manager that closes its channel.

    It remembers the sandbox config of each pod it ran, because CreateContainer must carry it, as a
    kubelet's does; containers can only be created in pods run by the same client. With `cgroup_root`
    set (as `Containerd.cri()` does), every pod cgroup must lie under it, and pods without an explicit
    parent get the Guaranteed-shaped one there, so no test can leave cgroups outside the test bed's.
    """

    def __init__(self, socket: Path | str, *, log_dir: Path | None = None, cgroup_root: str | None = None,
                 timeout: float = DEFAULT_TIMEOUT_S) -> None:
        self.socket = Path(socket)
        self.log_dir = log_dir
        self.cgroup_root = cgroup_root
        self.timeout = timeout
        self._channel = grpc.insecure_channel(f"unix://{self.socket}")
        self._runtime = pb_grpc.RuntimeServiceStub(self._channel)
        self._images = pb_grpc.ImageServiceStub(self._channel)
        self._pod_configs: dict[str, pb.PodSandboxConfig] = {}

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> CRI:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _call(self, method: grpc.UnaryUnaryMultiCallable[Any, _Response], name: str, request: Any,
              timeout: float | None = None) -> _Response:
        try:
            return method(request, timeout=timeout or self.timeout)
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.Call) else grpc.StatusCode.UNKNOWN
            details = (exc.details() if isinstance(exc, grpc.Call) else None) or str(exc)
            raise CRIError(name, code, details) from None

    # -- runtime ---------------------------------------------------------------------------------------

    def version(self, timeout: float | None = None) -> RuntimeVersion:
        reply = self._call(self._runtime.Version, "Version", pb.VersionRequest(version=CRI_VERSION), timeout)
        return RuntimeVersion(reply.runtime_name, reply.runtime_version, reply.runtime_api_version)

    def status(self) -> dict[str, bool]:
        """Runtime conditions by type, e.g. {"RuntimeReady": True, "NetworkReady": False} without CNI."""
        reply = self._call(self._runtime.Status, "Status", pb.StatusRequest())
        return {condition.type: condition.status for condition in reply.status.conditions}

    def image_tags(self) -> list[str]:
        reply = self._call(self._images.ListImages, "ListImages", pb.ListImagesRequest())
        return sorted(tag for image in reply.images for tag in image.repo_tags)

    # -- pods ------------------------------------------------------------------------------------------

    def run_pod(self, name: str, *, namespace: str = "default", uid: str | None = None,
                cgroup_parent: str | None = None, resources: Resources | None = None,
                overhead: Resources | None = None, annotations: Mapping[str, str] | None = None,
                labels: Mapping[str, str] | None = None, host_network: bool = True) -> str:
        """RunPodSandbox; returns the sandbox id.

        `resources` are the pod-level resources (KEP-2837) a kubelet puts into
        `PodSandboxConfig.linux.resources`; `cgroup_parent` is the pod cgroup (cgroupfs syntax). Without
        `host_network` the pod gets its own network namespace from the runtime's CNI (`pod_ip` says its
        address) and the pod's name as hostname, with the runtime's default seccomp profile, as a kubelet
        asks for a pod whose `seccompProfile` is RuntimeDefault.
        """
        uid = uid or str(uuid.uuid4())
        if self.cgroup_root is not None:
            cgroup_parent = cgroup_parent or pod_cgroup_parent(self.cgroup_root, uid)
            if not cgroup_parent.startswith(self.cgroup_root + "/"):
                raise ValueError(f"pod cgroup {cgroup_parent!r} must lie under the test bed's "
                                 f"{self.cgroup_root!r}, which is all its cleanup removes")
        log_directory = ""
        if self.log_dir is not None:
            pod_logs = self.log_dir / f"{namespace}_{name}_{uid}"
            pod_logs.mkdir(parents=True, exist_ok=True)
            log_directory = str(pod_logs)
        security = pb.LinuxSandboxSecurityContext(namespace_options=pb.NamespaceOption(
            network=pb.NODE if host_network else pb.POD, pid=pb.CONTAINER, ipc=pb.POD))
        if not host_network:
            security.seccomp.profile_type = pb.SecurityProfile.RuntimeDefault
        linux = pb.LinuxPodSandboxConfig(cgroup_parent=cgroup_parent or "", security_context=security)
        if resources is not None:
            linux.resources.CopyFrom(resources.to_proto())
        if overhead is not None:
            linux.overhead.CopyFrom(overhead.to_proto())
        config = pb.PodSandboxConfig(
            metadata=pb.PodSandboxMetadata(name=name, namespace=namespace, uid=uid, attempt=0),
            hostname="" if host_network else name, log_directory=log_directory, labels=dict(labels or {}),
            annotations=dict(annotations or {}),
            linux=linux)
        reply = self._call(self._runtime.RunPodSandbox, "RunPodSandbox",
                           pb.RunPodSandboxRequest(config=config))
        self._pod_configs[reply.pod_sandbox_id] = config
        return reply.pod_sandbox_id

    def stop_pod(self, pod_id: str) -> None:
        self._call(self._runtime.StopPodSandbox, "StopPodSandbox",
                   pb.StopPodSandboxRequest(pod_sandbox_id=pod_id))

    def remove_pod(self, pod_id: str) -> None:
        """RemovePodSandbox; the runtime also removes the pod's containers."""
        self._call(self._runtime.RemovePodSandbox, "RemovePodSandbox",
                   pb.RemovePodSandboxRequest(pod_sandbox_id=pod_id))
        self._pod_configs.pop(pod_id, None)

    def pod_ip(self, pod_id: str) -> str:
        """The pod's address on the pod network ("" for a host-network pod)."""
        reply = self._call(self._runtime.PodSandboxStatus, "PodSandboxStatus",
                           pb.PodSandboxStatusRequest(pod_sandbox_id=pod_id))
        return reply.status.network.ip

    def list_pods(self) -> list[PodSummary]:
        reply = self._call(self._runtime.ListPodSandbox, "ListPodSandbox", pb.ListPodSandboxRequest())
        return [PodSummary(p.id, p.metadata.name, p.metadata.namespace, p.metadata.uid,
                           pb.PodSandboxState.Name(p.state), dict(p.labels), dict(p.annotations))
                for p in reply.items]

    # -- containers ------------------------------------------------------------------------------------

    def create_container(self, pod_id: str, name: str, *, image: str = BUSYBOX_IMAGE,
                         command: Sequence[str] = (), args: Sequence[str] = (),
                         resources: Resources | None = None, annotations: Mapping[str, str] | None = None,
                         labels: Mapping[str, str] | None = None,
                         env: Mapping[str, str] | None = None, attempt: int = 0,
                         mounts: Sequence[pb.Mount] = (),
                         security: pb.LinuxContainerSecurityContext | None = None) -> str:
        """CreateContainer in a pod this client ran; returns the container id (not started yet).

        `attempt` counts restarts of the same container name, as the kubelet's does: the runtime reserves a
        name per attempt, so a restarted container may be created before the exited one is removed.
        `mounts` and `security` are what a kubelet makes of the container's volumes and securityContext.
        """
        if pod_id not in self._pod_configs:
            raise ValueError(f"pod {pod_id} was not run by this CRI client; CreateContainer needs its config")
        config = pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name=name, attempt=attempt), image=pb.ImageSpec(image=image),
            command=list(command), args=list(args), labels=dict(labels or {}),
            annotations=dict(annotations or {}),
            envs=[pb.KeyValue(key=k, value=v) for k, v in (env or {}).items()], mounts=list(mounts),
            log_path=f"{name}/{attempt}.log" if self._pod_configs[pod_id].log_directory else "",
            linux=pb.LinuxContainerConfig(
                resources=(resources or Resources()).to_proto(),
                security_context=security or pb.LinuxContainerSecurityContext()))
        request = pb.CreateContainerRequest(pod_sandbox_id=pod_id, config=config,
                                            sandbox_config=self._pod_configs[pod_id])
        return self._call(self._runtime.CreateContainer, "CreateContainer", request).container_id

    def log_file(self, pod_id: str, name: str, attempt: int = 0) -> Path:
        """The CRI log file of container `name` (`TIME STREAM TAG message` lines) in a pod this client ran."""
        return Path(self._pod_configs[pod_id].log_directory) / name / f"{attempt}.log"

    def start_container(self, container_id: str) -> None:
        self._call(self._runtime.StartContainer, "StartContainer",
                   pb.StartContainerRequest(container_id=container_id))

    def run_container(self, pod_id: str, name: str, **create: Any) -> str:
        """create_container then start_container; returns the container id."""
        container_id = self.create_container(pod_id, name, **create)
        self.start_container(container_id)
        return container_id

    def stop_container(self, container_id: str, grace_s: int = 0) -> None:
        """StopContainer; with the default grace 0 the runtime kills at once (busybox sh ignores SIGTERM)."""
        self._call(self._runtime.StopContainer, "StopContainer",
                   pb.StopContainerRequest(container_id=container_id, timeout=grace_s))

    def remove_container(self, container_id: str) -> None:
        self._call(self._runtime.RemoveContainer, "RemoveContainer",
                   pb.RemoveContainerRequest(container_id=container_id))

    def list_containers(self, pod_id: str = "") -> list[ContainerSummary]:
        request = pb.ListContainersRequest(filter=pb.ContainerFilter(pod_sandbox_id=pod_id))
        reply = self._call(self._runtime.ListContainers, "ListContainers", request)
        return [ContainerSummary(c.id, c.pod_sandbox_id, c.metadata.name, pb.ContainerState.Name(c.state))
                for c in reply.containers]

    def container_status(self, container_id: str) -> ContainerInfo:
        reply = self._call(self._runtime.ContainerStatus, "ContainerStatus",
                           pb.ContainerStatusRequest(container_id=container_id, verbose=True))
        info = json.loads(reply.info.get("info", "{}"))
        spec = info.get("runtimeSpec") or {}
        status = reply.status
        return ContainerInfo(
            id=status.id, name=status.metadata.name, state=pb.ContainerState.Name(status.state),
            exit_code=status.exit_code, pid=int(info.get("pid") or 0),
            cgroups_path=spec.get("linux", {}).get("cgroupsPath", ""),
            resources=Resources.from_proto(status.resources.linux), annotations=dict(status.annotations),
            spec=spec, started_at=status.started_at)

    def exec_sync(self, container_id: str, cmd: Sequence[str], timeout_s: int = 10) -> ExecResult:
        request = pb.ExecSyncRequest(container_id=container_id, cmd=list(cmd), timeout=timeout_s)
        reply = self._call(self._runtime.ExecSync, "ExecSync", request, timeout=timeout_s + self.timeout)
        return ExecResult(reply.exit_code, reply.stdout.decode(errors="replace"),
                          reply.stderr.decode(errors="replace"))

    def update_container_resources(self, container_id: str, resources: Resources,
                                   annotations: Mapping[str, str] | None = None) -> None:
        request = pb.UpdateContainerResourcesRequest(container_id=container_id, linux=resources.to_proto(),
                                                     annotations=dict(annotations or {}))
        self._call(self._runtime.UpdateContainerResources, "UpdateContainerResources", request)

    def remove_all(self) -> None:
        """Stop and remove every pod (with its containers) and any container outside a pod."""
        for pod in self.list_pods():
            self.stop_pod(pod.id)
            self.remove_pod(pod.id)
        for container in self.list_containers():
            self.stop_container(container.id)
            self.remove_container(container.id)
