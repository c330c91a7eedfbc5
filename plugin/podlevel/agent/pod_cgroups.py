"""The pod cgroups of admitted pods: each bubble written where NRI cannot reach, retried until it holds.

NRI adjusts containers only; the pod cgroup the kubelet made stays as wide as the node unless the plugin
writes it. For each managed pod `Placement.pod_cgroups` says what its cgroup should hold (the bubble's CPUs
and memory nodes; CFS quota lifted when a container holds CPUs of its own, as the kubelet does with
`DisableCPUQuotaWithExclusiveCPUs`). A failed write never fails the container (its own cpuset is already
enforced by the runtime): it is logged once per path and error, kept in `failed` for operators, and tried
again at the next event. A cgroup parent the runtime gave that would leave the cgroup root is refused for
good, with the rule it broke.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from podlevel.agent.events import Observer
from podlevel.agent.logs import logger
from podlevel.agent.placement import PodCgroupSettings
from podlevel.cgroups import (
    CgroupError,
    CgroupIOError,
    Cpuset,
    PodCgroup,
    locate_pod_cgroup,
    read_effective,
    write_bubble,
    write_cpu_max,
)
from podlevel.engine.cpuset import CPUSet

log = logger("podlevel.agent")


class PodCgroups:
    """Brings pod cgroups in line with what placement wants; remembers what it wrote and what failed."""

    def __init__(self, root: Path, observer: Observer | None = None) -> None:
        self.root = root
        self.observer = observer or Observer()
        self._written: dict[str, PodCgroupSettings] = {}
        self.failed: dict[str, str] = {}
        """sandbox id -> why its pod cgroup does not hold what it should (retried at every event)."""
        self._refused: dict[str, PodCgroupSettings] = {}
        """sandbox id -> settings refused for good (an unsafe path): not tried again until they change."""

    def sync(self, wanted: Mapping[str, PodCgroupSettings], changed: Iterable[str]) -> None:
        """Bring the pod cgroups of the `changed` sandboxes, and of those that failed before, in line with
        `wanted` (a sandbox no longer wanted is forgotten). Every other pod cgroup already holds its wants."""
        for sandbox_id in {*changed, *self.failed}:
            settings = wanted.get(sandbox_id)
            if settings is None:
                self._written.pop(sandbox_id, None)
                self.failed.pop(sandbox_id, None)
                self._refused.pop(sandbox_id, None)
            elif self._written.get(sandbox_id) != settings and self._refused.get(sandbox_id) != settings:
                self._apply(sandbox_id, settings)

    def _apply(self, sandbox_id: str, settings: PodCgroupSettings) -> None:
        widened: Cpuset | None = None
        try:
            pod = locate_pod_cgroup(
                pod_uid=settings.pod_uid, cgroup_parent=settings.cgroup_parent, cgroup_root=self.root
            )
            if settings.cpus is not None:
                effective = write_bubble(pod, Cpuset(settings.cpus, CPUSet(settings.mems)))
                if effective.cpus != settings.cpus:
                    log.warning("pod cgroup %s: bubble cpus %s in force as %s (its parent is narrower)",
                                pod.path, settings.cpus, effective.cpus, path=pod.path, pod=settings.what,
                                cpus=settings.cpus, effective=effective.cpus)
            else:
                widened = _widen(pod)
            if settings.unlimited_quota:
                write_cpu_max(pod, None, settings.cpu_period_us)
        except CgroupIOError as err:
            self._fail(sandbox_id, f"{settings.what}: {err}")
            return
        except (CgroupError, ValueError) as err:
            self._fail(sandbox_id, f"{settings.what}: {err}")
            self._refused[sandbox_id] = settings
            return
        self._written[sandbox_id] = settings
        if self.failed.pop(sandbox_id, None) is not None:
            log.info("pod cgroup of %s written after an earlier failure", settings.what, pod=settings.what)
        if settings.cpus is not None:
            cpus, mems = str(settings.cpus), ",".join(map(str, settings.mems))
        elif widened is not None:
            cpus, mems = f"{widened.cpus} (as its parent)", str(widened.mems)
        else:
            cpus = mems = "untouched"
        quota = "off" if settings.unlimited_quota else "untouched"
        log.info("pod cgroup %s: cpus=%s mems=%s quota=%s", pod.path, cpus, mems, quota, path=pod.path,
                 pod=settings.what, cpus=cpus, mems=mems, quota=quota)

    def _fail(self, sandbox_id: str, reason: str) -> None:
        self.observer.pod_cgroup_failed()
        if self.failed.get(sandbox_id) != reason:
            log.error("pod cgroup not written, will retry at the next event: %s", reason, sandbox=sandbox_id,
                      reason=reason)
        self.failed[sandbox_id] = reason


def _widen(pod: PodCgroup) -> Cpuset | None:
    """Give a pod without a bubble its parent's cpuset again if it holds less (an earlier run, under other
    settings, wrote a bubble there); returns what was written, None when nothing needed to be."""
    parent = read_effective(pod.cpuset_dir.parent, pod.version)
    if read_effective(pod.cpuset_dir, pod.version) == parent:
        return None
    write_bubble(pod, parent)
    return parent
