"""The 2-CPU demo node the integration tests share: the demo's pods under fresh uids, and what the kernel
applies to a running container (its cgroup files and its process's affinity).

Sized for the 2-CPU host: CPU 0 is reserved by default (and stays in the node shared pool), CPU 1 is the
only assignable one; the pods are deploy/demo/pods-2cpu.yaml.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from typing import Final

from podlevel.engine.pod import Pod
from podlevel.podspec.workloads import load_pods
from support.builders import CHECKOUT
from testbed import cgroupfs
from testbed.cri import CRI
from testbed.kubelet import start_pod
from testbed.wait import wait_until

PODS: Final = CHECKOUT / "deploy" / "demo" / "pods-2cpu.yaml"
ALL: Final = "0-1"
RESERVED: Final = "0"
ASSIGNABLE: Final = "1"
APPLY_TIMEOUT_S: Final = 10.0
REFUSED_AT_SANDBOX: Final = frozenset({"2.4"})
"""The test bed's containerd flavours where the plugin refuses a pod at its RunPodSandbox (the runtime rolls
a failed sandbox back); on the others, at the pod's first CreateContainer."""


def refused_at(flavour: str) -> str:
    """The CRI call a pod the plugin refuses fails on this flavour."""
    return "RunPodSandbox" if flavour in REFUSED_AT_SANDBOX else "CreateContainer"


def demo_pod(name: str) -> Pod:
    """A demo pod under a fresh uid, so no two tests (or flavours) share a pod cgroup."""
    [pod] = [p for p in load_pods(PODS.read_text(), str(PODS)) if p.name == name]
    return replace(pod, uid=str(uuid.uuid4()))


@dataclass(frozen=True)
class Applied:
    """What the kernel applies to a running container."""

    cpus: str
    mems: str
    quota: str
    """The raw CFS quota: cpu.cfs_quota_us on v1 ("-1" = off), the first field of cpu.max on v2 ("max")."""
    allowed: str
    """/proc/PID/status Cpus_allowed_list of the container's process."""


def raw_quota(cgroups_path: str) -> str:
    relative = cgroups_path.strip("/")
    if cgroupfs.is_cgroup2():
        return (cgroupfs.CGROUP_MOUNT / relative / "cpu.max").read_text().split()[0]
    return (cgroupfs.CGROUP_MOUNT / "cpu" / relative / "cpu.cfs_quota_us").read_text().strip()


def applied(cri: CRI, container_id: str) -> Applied:
    status = cri.container_status(container_id)
    assert status.state == "CONTAINER_RUNNING" and status.pid, (status.name, status.state)
    values = cgroupfs.read_cgroup(status.cgroups_path)
    return Applied(values.cpus, values.mems, raw_quota(status.cgroups_path),
                   cgroupfs.cpus_allowed_list(status.pid))


def quota_off() -> str:
    return "max" if cgroupfs.is_cgroup2() else "-1"


def wait_applied(cri: CRI, container_id: str, cpus: str) -> Applied:
    """The container's settings once its cgroup and its process both hold `cpus`."""

    def there() -> Applied | None:
        now = applied(cri, container_id)
        return now if now.cpus == now.allowed == cpus else None

    return wait_until(there, APPLY_TIMEOUT_S, f"container {container_id[:12]} on CPUs {cpus}")


def web_and_fast_path(cri: CRI) -> tuple[Pod, dict[str, str], dict[str, Applied]]:
    """`web` in the node shared pool and `fast-path`'s bubble, both settled: the fast-path pod, the two
    containers by name and what each holds."""
    web = start_pod(cri, demo_pod("web"), with_shape=False)
    fast_path = demo_pod("fast-path")
    fast = start_pod(cri, fast_path)
    containers = {"web": web.containers["server"], "main-app": fast.containers["main-app"]}
    before = {name: wait_applied(cri, cid, RESERVED if name == "web" else ASSIGNABLE)
              for name, cid in containers.items()}
    return fast_path, containers, before
