"""A workload's pod, taken from the rendered manifests, started through CRI the way a kubelet starts it.

What the kubelet makes of a pod template, for the fields deploy/ uses: the container's `args` (the image's
entrypoint runs them), its `env`, its resources (the one model in `podspec.runtime`) and the pod cgroup in
its QoS tier; the securityContext (`runAsUser`, `readOnlyRootFilesystem`, `capabilities.drop`,
`allowPrivilegeEscalation: false` as no_new_privs, the pod's RuntimeDefault seccomp profile); every volume
as a bind mount: a hostPath through `host_paths` (the manifest's node path -> the test bed's directory, so a
test never writes the host's real /var/lib or /run), a configMap (from the rendered ConfigMap) or a secret
as a directory of its files; `hostNetwork` or the pod network; probes as HTTP GETs on the pod's address; a
stop with the pod's `terminationGracePeriodSeconds` (SIGTERM, then SIGKILL when it runs out).
"""

from __future__ import annotations

import http.client
import shutil
import socket
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

import yaml

from podlevel._proto.cri import api_pb2 as pb
from podlevel.podspec.runtime import container_resources, sandbox_resources
from podlevel.podspec.workloads import load_pods
from testbed.cri import CRI
from testbed.cri import Resources as CRIResources
from testbed.kubelet import cgroup_parent
from testbed.manifests import Manifest, find

DEFAULT_GRACE_S: Final = 30  # the API server's default terminationGracePeriodSeconds
PROBE_TIMEOUT_S: Final = 1.0  # the kubelet's default probe timeoutSeconds


class WorkloadError(RuntimeError):
    """The pod template uses something this kubelet stand-in does not do, or a mapping is missing."""


@dataclass(frozen=True)
class RunningPod:
    """One replica of a workload: its sandbox, its (single) container and where its probes go."""

    name: str
    sandbox_id: str
    container_id: str
    ip: str
    template: Manifest
    """The pod template (`spec.template`) it was started from."""
    log_path: Path
    """The container's CRI log file (`TIME STREAM TAG message` lines); kept after the pod is removed."""

    @property
    def container(self) -> Manifest:
        return dict(self.template["spec"]["containers"][0])

    @property
    def grace_s(self) -> int:
        return int(self.template["spec"].get("terminationGracePeriodSeconds", DEFAULT_GRACE_S))

    def port(self, name_or_number: str | int) -> int:
        if isinstance(name_or_number, int):
            return name_or_number
        for port in self.container.get("ports", []):
            if port.get("name") == name_or_number:
                return int(port["containerPort"])
        raise WorkloadError(f"{self.name}: no container port named {name_or_number!r}")

    def probe(self, kind: str) -> bool:
        """Whether the container's `kind` probe (livenessProbe, readinessProbe) succeeds, as the kubelet
        runs it on the pod's address: an HTTP GET answered 200-399, or a TCP connection accepted."""
        probe = self.container[kind]
        if "tcpSocket" in probe:
            address = (self.ip, self.port(probe["tcpSocket"]["port"]))
            try:
                socket.create_connection(address, PROBE_TIMEOUT_S).close()
            except OSError:
                return False
            return True
        status, _ = self.get(probe["httpGet"]["port"], probe["httpGet"]["path"])
        return 200 <= status < 400

    def get(self, port: str | int, path: str) -> tuple[int, str]:
        """GET `path` on the pod's address: status and body (0 and the error when nothing answers)."""
        connection = http.client.HTTPConnection(self.ip, self.port(port), timeout=PROBE_TIMEOUT_S)
        try:
            connection.request("GET", path)
            reply = connection.getresponse()
            return reply.status, reply.read().decode(errors="replace")
        except OSError as err:
            return 0, str(err)
        finally:
            connection.close()


def only(objects: list[Manifest], kind: str, name: str) -> Manifest:
    found = find(objects, kind, name)
    if len(found) != 1:
        raise WorkloadError(f"{len(found)} {kind} named {name} in the rendered manifests, not one")
    return found[0]


def run(cri: CRI, objects: list[Manifest], kind: str, name: str, *, image: str, work: Path,
        host_paths: Mapping[str, Path], secret_dirs: Mapping[str, Path] | None = None) -> RunningPod:
    """Start one pod of the rendered workload `kind`/`name` and its single container (deploy/'s workloads
    have one each), named `name` as its pod.

    `host_paths` maps each hostPath volume's node path to the directory used instead; a configMap volume is
    the rendered ConfigMap's files, written under `work`; `secret_dirs` maps a secret's name to the directory
    of its files (the Secrets are made outside deploy/). A volume with nothing to mount is an error, so a new
    volume in the manifest cannot go unmounted here.
    """
    workload = only(objects, kind, name)
    namespace = workload["metadata"]["namespace"]
    template = dict(workload["spec"]["template"])
    spec = template["spec"]
    if len(spec["containers"]) != 1 or spec.get("initContainers"):
        raise WorkloadError(f"{name}: one container and no init containers expected")
    container = spec["containers"][0]
    document = {"apiVersion": "v1", "kind": "Pod", "spec": spec,
                "metadata": {"name": name, "namespace": namespace}}
    [pod] = load_pods(yaml.safe_dump(document), f"{name} template")
    pod = replace(pod, uid=str(uuid.uuid4()))  # every replica, and every replacement, is a new pod
    host_network = bool(spec.get("hostNetwork"))
    sandbox_id = cri.run_pod(
        name, namespace=namespace, uid=pod.uid, labels=template.get("metadata", {}).get("labels", {}),
        resources=CRIResources.of(sandbox_resources(pod)), cgroup_parent=cgroup_parent(cri, pod),
        host_network=host_network)
    [model] = pod.containers
    volume_dirs = _volume_dirs(objects, spec, work, secret_dirs or {})
    container_id = cri.create_container(
        sandbox_id, container["name"], image=image, command=container.get("command", ()),
        args=container.get("args", ()), env={e["name"]: e["value"] for e in container.get("env", [])},
        resources=CRIResources.of(container_resources(pod, model)),
        mounts=_mounts(name, spec, container, host_paths, volume_dirs),
        security=_security(spec, container, host_network))
    cri.start_container(container_id)
    return RunningPod(name, sandbox_id, container_id, "" if host_network else cri.pod_ip(sandbox_id),
                      template, cri.log_file(sandbox_id, container["name"]))


def stop(cri: CRI, pod: RunningPod) -> tuple[float, int]:
    """Delete the pod as the kubelet does: StopContainer with the grace period (SIGTERM, SIGKILL when it
    runs out), then the sandbox. Returns how long the container took to stop and its exit code."""
    started = time.monotonic()
    cri.stop_container(pod.container_id, grace_s=pod.grace_s)
    took = time.monotonic() - started
    exit_code = cri.container_status(pod.container_id).exit_code
    cri.stop_pod(pod.sandbox_id)
    cri.remove_pod(pod.sandbox_id)
    return took, exit_code


def _volume_dirs(objects: list[Manifest], spec: Manifest, work: Path,
                 secret_dirs: Mapping[str, Path]) -> dict[str, Path]:
    """configMap volumes projected from the rendered ConfigMaps into `work`, secret volumes from
    `secret_dirs`, by volume name."""
    dirs = {}
    for volume in spec.get("volumes", []):
        if "configMap" in volume:
            config_map = only(objects, "ConfigMap", volume["configMap"]["name"])
            directory = work / "volumes" / volume["name"]
            directory.mkdir(parents=True, exist_ok=True)
            for key, text in config_map.get("data", {}).items():
                (directory / key).write_text(text)
            dirs[volume["name"]] = directory
        elif "secret" in volume and volume["secret"]["secretName"] in secret_dirs:
            # Projected as the kubelet does: files of mode `defaultMode` (0644 unless set), owned by root.
            directory = work / "volumes" / volume["name"]
            shutil.copytree(secret_dirs[volume["secret"]["secretName"]], directory, dirs_exist_ok=True)
            for file in directory.iterdir():
                file.chmod(volume["secret"].get("defaultMode", 0o644))
            dirs[volume["name"]] = directory
    return dirs


def _mounts(name: str, spec: Manifest, container: Manifest, host_paths: Mapping[str, Path],
            volume_dirs: Mapping[str, Path]) -> list[pb.Mount]:
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    mounts = []
    for mount in container.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        if "hostPath" in volume:
            node_path = volume["hostPath"]["path"]
            if node_path not in host_paths:
                raise WorkloadError(f"{name}: no test bed directory for hostPath {node_path}")
            source = host_paths[node_path]
            if volume["hostPath"].get("type") == "DirectoryOrCreate":
                source.mkdir(parents=True, exist_ok=True)
        elif mount["name"] in volume_dirs:
            source = volume_dirs[mount["name"]]
        else:
            raise WorkloadError(f"{name}: no files for volume {mount['name']!r} ({sorted(volume)})")
        # `recursiveReadOnly: IfPossible` is the kubelet's plain read-only mount on a runtime that does not
        # announce recursive read-only mounts, as the test bed's CRI subset does not.
        mounts.append(pb.Mount(container_path=mount["mountPath"], host_path=str(source),
                               readonly=bool(mount.get("readOnly"))))
    return mounts


def _security(spec: Manifest, container: Manifest, host_network: bool) -> pb.LinuxContainerSecurityContext:
    """The kubelet's container security context; its own PID namespace (no `shareProcessNamespace`)."""
    pod_context: dict[str, Any] = spec.get("securityContext", {})
    context: dict[str, Any] = {**pod_context, **container.get("securityContext", {})}
    security = pb.LinuxContainerSecurityContext(
        privileged=bool(context.get("privileged")),
        readonly_rootfs=bool(context.get("readOnlyRootFilesystem")),
        no_new_privs=context.get("allowPrivilegeEscalation") is False,
        namespace_options=pb.NamespaceOption(network=pb.NODE if host_network else pb.POD, pid=pb.CONTAINER,
                                             ipc=pb.POD))
    if "runAsUser" in context:
        security.run_as_user.value = int(context["runAsUser"])
    if "runAsGroup" in context:
        security.run_as_group.value = int(context["runAsGroup"])
    security.capabilities.drop_capabilities.extend(context.get("capabilities", {}).get("drop", []))
    security.capabilities.add_capabilities.extend(context.get("capabilities", {}).get("add", []))
    profile = context.get("seccompProfile", {}).get("type")
    if profile != "RuntimeDefault":
        raise WorkloadError(f"seccompProfile {profile!r}: only RuntimeDefault is done here")
    security.seccomp.profile_type = pb.SecurityProfile.RuntimeDefault
    return security
