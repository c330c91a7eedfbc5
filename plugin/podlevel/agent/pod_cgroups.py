"""The pod cgroups of admitted pods: each bubble written where NRI cannot reach, retried until it holds.

NRI adjusts containers only; the pod cgroup the kubelet made stays as wide as the node unless the plugin
writes it. For each managed pod `Placement.pod_cgroups` says what its cgroup should hold (the bubble's CPUs
and memory nodes; CFS quota lifted when a container holds CPUs of its own, as the kubelet does with
`DisableCPUQuotaWithExclusiveCPUs`). A failed write never fails the container (its own cpuset is already
enforced by the runtime): it is logged once per path and error, kept in `failed` for operators, and tried
again with backoff (1 s, doubling to 60 s; at once when the pod's wants change), so a node where many pod
cgroups cannot be written (a wrong `--cgroup-root`, a cgroup driver mismatch) pays nothing per event for
them: the retries due are taken from a heap ordered by time. A cgroup parent the runtime gave that would
leave the cgroup root is refused for
good, with the rule it broke.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Final

from podlevel.agent.events import Observer
from podlevel.agent.records import PodCgroupSettings
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
from podlevel.engine.cfs import UNLIMITED_QUOTA, quota_text
from podlevel.engine.cpuset import CPUSet
from podlevel.eventlog import logger

log = logger(__name__)

RETRY_FIRST_S: Final = 1.0
RETRY_MAX_S: Final = 60.0


class PodCgroups:
    """Brings pod cgroups in line with what placement wants; remembers what it wrote and what failed."""

    def __init__(self, root: Path, observer: Observer | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.root = root
        self.observer = observer or Observer()
        self._clock = clock
        self._retries: list[tuple[float, str]] = []
        """(when, sandbox id), a heap; an entry whose sandbox no longer failed, or failed again since with a
        later time, is skipped when it comes up."""
        self._delay: dict[str, float] = {}
        """sandbox id -> the backoff its next failure waits, and when its retry is due."""
        self._due: dict[str, float] = {}
        self._written: dict[str, PodCgroupSettings] = {}
        self.failed: dict[str, str] = {}
        """sandbox id -> why its pod cgroup does not hold what it should (retried at every event)."""
        self._refused: dict[str, PodCgroupSettings] = {}
        """sandbox id -> settings refused for good (an unsafe path): not tried again until they change."""

    def sync(self, wanted: Mapping[str, PodCgroupSettings], changed: Iterable[str],
             limit: int | None = None) -> set[str]:
        """Bring the pod cgroups of the `changed` sandboxes, and of those whose retry is due, in line with
        `wanted` (a sandbox no longer wanted is forgotten), writing at most `limit` of them; returns those
        left for the next call. Every other pod cgroup already holds its wants, or waits for its retry."""
        left: set[str] = set()
        written = 0
        for sandbox_id in {*changed, *self._due_retries()}:
            if limit is not None and written >= limit:
                left.add(sandbox_id)
                continue
            settings = wanted.get(sandbox_id)
            if settings is None:
                self._written.pop(sandbox_id, None)
                self._forget_failure(sandbox_id)
                self._refused.pop(sandbox_id, None)
            elif self._written.get(sandbox_id) != settings and self._refused.get(sandbox_id) != settings:
                self._apply(sandbox_id, settings)
                written += 1
        return left

    def _apply(self, sandbox_id: str, settings: PodCgroupSettings) -> None:
        widened: Cpuset | None = None
        try:
            pod = locate_pod_cgroup(
                pod_uid=settings.pod_uid, cgroup_parent=settings.cgroup_parent, cgroup_root=self.root
            )
            if settings.cpus is not None:
                effective = write_bubble(pod, Cpuset(settings.cpus, CPUSet(settings.mems)))
                if effective.cpus != settings.cpus:
                    log.warning("pod cgroup {path}: bubble cpus {cpus} in force as {effective} (its parent "
                                "is narrower)", path=pod.path, pod=settings.what, cpus=settings.cpus,
                                effective=effective.cpus)
            else:
                widened = widen_pod_cgroup(pod)
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
        if self._forget_failure(sandbox_id):
            log.info("pod cgroup of {pod} written after an earlier failure", pod=settings.what)
        if settings.cpus is not None:
            cpus, mems = str(settings.cpus), str(CPUSet(settings.mems))
        elif widened is not None:
            cpus, mems = f"{widened.cpus} (as its parent)", str(widened.mems)
        else:
            cpus = mems = "untouched"
        quota = quota_text(UNLIMITED_QUOTA if settings.unlimited_quota else None)
        log.info("pod cgroup {path}: cpus={cpus} mems={mems} quota={quota}", path=pod.path, pod=settings.what,
                 cpus=cpus, mems=mems, quota=quota)

    @property
    def pending(self) -> bool:
        """Some pod cgroup waits for a retry."""
        return bool(self._due)

    def _due_retries(self) -> list[str]:
        now, due = self._clock(), []
        while self._retries and self._retries[0][0] <= now:
            when, sandbox_id = heapq.heappop(self._retries)
            if self._due.get(sandbox_id) == when:
                del self._due[sandbox_id]
                due.append(sandbox_id)
        return due

    def _forget_failure(self, sandbox_id: str) -> bool:
        self._delay.pop(sandbox_id, None)
        self._due.pop(sandbox_id, None)
        return self.failed.pop(sandbox_id, None) is not None

    def _fail(self, sandbox_id: str, reason: str) -> None:
        self.observer.pod_cgroup_failed()
        if self.failed.get(sandbox_id) != reason:
            log.error("pod cgroup not written, will retry: {reason}", sandbox=sandbox_id, reason=reason)
        self.failed[sandbox_id] = reason
        delay = self._delay.get(sandbox_id, RETRY_FIRST_S)
        self._delay[sandbox_id] = min(delay * 2, RETRY_MAX_S)
        when = self._due[sandbox_id] = self._clock() + delay
        heapq.heappush(self._retries, (when, sandbox_id))


def widen_pod_cgroup(pod: PodCgroup) -> Cpuset | None:
    """Give a pod without a bubble its parent's cpuset again if it holds less (an earlier run, under other
    settings, wrote a bubble there, or the plugin is being released); returns what was written, None when
    nothing needed to be."""
    parent = read_effective(pod.cpuset_dir.parent, pod.version)
    if read_effective(pod.cpuset_dir, pod.version) == parent:
        return None
    write_bubble(pod, parent)
    return parent
