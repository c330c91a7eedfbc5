"""Releasing a node the plugin no longer runs on: every container and pod cgroup it shaped put back as the
kubelet, with its resource managers off, leaves them.

Once the DaemonSet is gone nothing widens what the plugin narrowed: containers in the node shared pool keep
the pool as it last was, exclusive containers keep their slices with CFS quota off, pod cgroups keep their
bubbles, and new pods overlap the old exclusive CPUs. `Release` is an NRI handler for one connection: the
runtime's Synchronize lists every pod and container, and the answer gives every running container all the
machine's CPUs and memory nodes (the runtime applies it and keeps it in its own record of the container, so
nothing drifts back), with the CFS quota the kubelet gives it when it belongs to a pod the plugin managed (a
pod-shape annotation; no limit when the kubelet sets none) and the quota left alone otherwise. Before the
answer each managed pod's cgroup is widened to its parent's cpuset and given the kubelet's pod quota, so the
containers have room to widen into.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from podlevel.agent.nri_messages import by_settings, sandbox_of, updates_of
from podlevel.agent.placement import pod_shape
from podlevel.agent.pod_cgroups import widen_pod_cgroup
from podlevel.agent.records import Settings
from podlevel.cgroups import CgroupError, locate_pod_cgroup, write_cpu_max
from podlevel.engine.cfs import CFS_PERIOD_US, UNLIMITED_QUOTA
from podlevel.engine.errors import InputError
from podlevel.engine.manager import Assignment
from podlevel.engine.pod import Pod
from podlevel.engine.topology import Topology
from podlevel.eventlog import logger
from podlevel.nri import MAX_REPLY_BYTES, Handler, Updates, api, updates_within
from podlevel.podspec.shape_check import kubelet_quota

log = logger(__name__)


@dataclass
class Released:
    """What one release did."""

    containers: dict[str, Settings] = field(default_factory=dict)
    """container id -> what its answer gave it."""
    cgroups_paths: dict[str, str] = field(default_factory=dict)
    """container id -> its cgroups path, as the runtime reports it (to read it back)."""
    pod_cgroups: list[str] = field(default_factory=list)
    """The pod cgroups widened, by path."""
    failed: list[str] = field(default_factory=list)
    """Why a pod cgroup or a container could not be released."""


class Release(Handler):
    """Answers the runtime's Synchronize with every running container widened (see the module docstring)."""

    def __init__(self, topology: Topology, cgroup_root: Path | None) -> None:
        self.topology = topology
        self.cgroup_root = cgroup_root
        self.released = Released()

    def synchronize(self, pods: Sequence[api.PodSandbox], containers: Sequence[api.Container]) -> Updates:
        shapes = {pod.id: _shape(pod) for pod in pods}
        if self.cgroup_root is not None:
            for pod in pods:
                if shapes[pod.id] is not None:
                    self._release_pod_cgroup(pod, self.cgroup_root)
        live = (api.CONTAINER_CREATED, api.CONTAINER_RUNNING, api.CONTAINER_PAUSED)
        released = self.released
        for container in containers:
            if container.state not in live:
                continue
            shape = shapes.get(container.pod_sandbox_id)
            released.containers[container.id] = self._settings(container, shape)
            released.cgroups_paths[container.id] = container.linux.cgroups_path
        updates = updates_of(by_settings(released.containers))
        fitting = updates_within(updates, MAX_REPLY_BYTES)
        for container_id in updates.container_ids[fitting:]:
            released.failed.append(f"container {container_id[:12]}: its update does not fit the answer")
            del released.containers[container_id]
        log.info("releasing {containers} containers of {pods} pods, {pod_cgroups} pod cgroups",
                 containers=len(released.containers), pods=len(pods), pod_cgroups=len(released.pod_cgroups))
        return updates[:fitting]

    def remove_pod_sandbox(self, pod: api.PodSandbox) -> None:
        """Nothing to do: NRI subscribes a plugin to at least one event, and this one changes nothing."""

    def _settings(self, container: api.Container, shape: Pod | None) -> Settings:
        """All the machine's CPUs and memory nodes; the kubelet's quota for a container the plugin managed."""
        period = container.linux.resources.cpu.period.value or CFS_PERIOD_US
        quota = None
        if shape is not None and shape.container(container.name) is not None:
            quota = kubelet_quota(shape, container.name, period) or UNLIMITED_QUOTA
        topology = self.topology
        return Settings(topology.all_cpus, topology.numa_node_ids, quota, period, Assignment.NODE_SHARED)

    def _release_pod_cgroup(self, pod: api.PodSandbox, root: Path) -> None:
        resources = pod.linux.pod_resources.cpu
        period = resources.period.value or CFS_PERIOD_US
        quota = resources.quota.value if resources.quota.value > 0 else None
        try:
            cgroup = locate_pod_cgroup(pod_uid=pod.uid, cgroup_parent=pod.linux.cgroup_parent,
                                       cgroup_root=root)
            widen_pod_cgroup(cgroup)
            write_cpu_max(cgroup, quota, period)
        except (CgroupError, OSError, ValueError) as err:
            self.released.failed.append(f"pod cgroup of {pod.namespace}/{pod.name}: {err}")
            return
        self.released.pod_cgroups.append(str(cgroup.path))


def _shape(pod: api.PodSandbox) -> Pod | None:
    """The pod's shape when the plugin managed it; a malformed annotation it refused counts as none."""
    try:
        return pod_shape(sandbox_of(pod))
    except InputError:
        return None
