"""The pod cgroups of admitted pods: each bubble written where NRI cannot reach, retried until it holds.

NRI adjusts containers only; the pod cgroup the kubelet made stays as wide as the node unless the plugin
writes it. For each managed pod `Placement.pod_cgroups` says what its cgroup should hold (the bubble's CPUs
and memory nodes; CFS quota lifted when a container holds CPUs of its own, as the kubelet does with
`DisableCPUQuotaWithExclusiveCPUs`); the agent hands over what changed after each event. A failed write
never fails the container (its own cpuset is already enforced by the runtime): it is logged once per path
and error, kept in `failed` for operators, and tried again with backoff (1 s, doubling to 60 s; at once when
the pod's wants change), so a node where many pod cgroups cannot be written (a wrong `--cgroup-root`, a
cgroup driver mismatch) pays nothing per event for them: the retries due are taken from a heap ordered by
time. A cgroup parent the runtime gave that would leave the cgroup root is refused for good, with the rule
it broke. Each pod cgroup is located once (its path checked against the root) and kept while its wants
name the same pod and parent; wants equal to those last written are not written again.

`PodCgroups` does the work on the caller's thread; `PodCgroupWorker` does it on a thread of its own, which
`nri-podlevel run` uses: an event hands over its changes and answers, never waiting behind another pod's
writes (cgroupfs writes release the interpreter), and the retries come due on time without an event. The
one wait left is the one README promises: a container is created only once its pod's cgroup holds the
bubble (`wait`), which RunPodSandbox's hand-over has usually done long before.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final, Protocol

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
Changes = Mapping[str, PodCgroupSettings | None]
"""sandbox id -> what its pod cgroup should hold now; None: no longer wanted (the pod went)."""


class PodCgroupSink(Protocol):
    """What the agent needs of a pod cgroup writer, on its thread or the caller's."""

    def submit(self, changes: Changes) -> None: ...

    def wait(self, sandbox_id: str, timeout: float) -> bool: ...

    @property
    def failed(self) -> dict[str, str]: ...

    @property
    def pending(self) -> bool: ...

    @property
    def version(self) -> int: ...

    def close(self) -> None: ...


class PodCgroups:
    """Brings pod cgroups in line with what placement wants, on the caller's thread; remembers what it
    wrote and what failed."""

    def __init__(self, root: Path, observer: Observer | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.root = root
        self.observer = observer or Observer()
        self.clock = clock
        self._wanted: dict[str, PodCgroupSettings] = {}
        self._located: dict[str, tuple[tuple[str, str], PodCgroup]] = {}
        """sandbox id -> ((pod uid, cgroup parent), its pod cgroup), located once."""
        self._retries: list[tuple[float, str]] = []
        """(when, sandbox id), a heap; an entry whose sandbox no longer failed, or failed again since with a
        later time, is skipped when it comes up."""
        self._delay: dict[str, float] = {}
        """sandbox id -> the backoff its next failure waits."""
        self._due: dict[str, float] = {}
        """sandbox id -> when its retry is due."""
        self._written: dict[str, PodCgroupSettings] = {}
        self._failed: dict[str, str] = {}
        self._failed_lock = threading.Lock()
        """`failed` is read by snapshot readers on other threads."""
        self._version = 0
        self._refused: dict[str, PodCgroupSettings] = {}
        """sandbox id -> settings refused for good (an unsafe path): not tried again until they change."""

    @property
    def failed(self) -> dict[str, str]:
        """sandbox id -> why its pod cgroup does not hold what it should (a copy)."""
        with self._failed_lock:
            return dict(self._failed)

    @property
    def version(self) -> int:
        """Counts the changes of `failed` (a snapshot is made anew only then)."""
        return self._version

    @property
    def pending(self) -> bool:
        """Some pod cgroup waits for a retry, which the next `submit` takes when due."""
        return bool(self._due)

    def submit(self, changes: Changes) -> None:
        """Bring the pod cgroups of `changes`, and those whose retry is due, in line now."""
        self.sync(changes)

    def wait(self, sandbox_id: str, timeout: float) -> bool:
        """Submitted changes are written already."""
        return True

    def close(self) -> None:
        """Nothing runs on its own."""

    def sync(self, changes: Changes) -> None:
        """Take `changes` (a sandbox no longer wanted is forgotten) and write those, and those whose retry is
        due, unless they already hold their wants."""
        for sandbox_id, settings in changes.items():
            if settings is None:
                self._wanted.pop(sandbox_id, None)
                self._written.pop(sandbox_id, None)
                self._located.pop(sandbox_id, None)
                self._forget_failure(sandbox_id)
                self._refused.pop(sandbox_id, None)
            else:
                self._wanted[sandbox_id] = settings
        for sandbox_id in {*changes, *self._due_retries()}:
            settings = self._wanted.get(sandbox_id)
            if (settings is not None and self._written.get(sandbox_id) != settings
                    and self._refused.get(sandbox_id) != settings):
                self._apply(sandbox_id, settings)

    def next_retry(self) -> float | None:
        """When the earliest retry is due (the clock's time), None when none waits."""
        while self._retries and self._due.get(self._retries[0][1]) != self._retries[0][0]:
            heapq.heappop(self._retries)
        return self._retries[0][0] if self._retries else None

    def _locate(self, sandbox_id: str, settings: PodCgroupSettings) -> PodCgroup:
        key = (settings.pod_uid, settings.cgroup_parent)
        known = self._located.get(sandbox_id)
        if known is not None and known[0] == key:
            return known[1]
        pod = locate_pod_cgroup(pod_uid=settings.pod_uid, cgroup_parent=settings.cgroup_parent,
                                cgroup_root=self.root)
        self._located[sandbox_id] = (key, pod)
        return pod

    def _apply(self, sandbox_id: str, settings: PodCgroupSettings) -> None:
        widened: Cpuset | None = None
        try:
            pod = self._locate(sandbox_id, settings)
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

    def _due_retries(self) -> list[str]:
        now, due = self.clock(), []
        while self._retries and self._retries[0][0] <= now:
            when, sandbox_id = heapq.heappop(self._retries)
            if self._due.get(sandbox_id) == when:
                del self._due[sandbox_id]
                due.append(sandbox_id)
        return due

    def _forget_failure(self, sandbox_id: str) -> bool:
        self._delay.pop(sandbox_id, None)
        self._due.pop(sandbox_id, None)
        if sandbox_id not in self._failed:
            return False
        with self._failed_lock:
            del self._failed[sandbox_id]
            self._version += 1
        return True

    def _fail(self, sandbox_id: str, reason: str) -> None:
        self.observer.pod_cgroup_failed()
        self._located.pop(sandbox_id, None)
        if self._failed.get(sandbox_id) != reason:
            log.error("pod cgroup not written, will retry: {reason}", sandbox=sandbox_id, reason=reason)
            with self._failed_lock:
                self._failed[sandbox_id] = reason
                self._version += 1
        delay = self._delay.get(sandbox_id, RETRY_FIRST_S)
        self._delay[sandbox_id] = min(delay * 2, RETRY_MAX_S)
        when = self._due[sandbox_id] = self.clock() + delay
        heapq.heappush(self._retries, (when, sandbox_id))


class PodCgroupWorker:
    """A `PodCgroups` on a thread of its own (see the module docstring). Changes handed over while it writes
    are merged, the latest wants of a sandbox winning; it writes them as one batch next."""

    def __init__(self, cgroups: PodCgroups) -> None:
        self.cgroups = cgroups
        self._cond = threading.Condition()
        self._queued: dict[str, PodCgroupSettings | None] = {}
        self._busy: frozenset[str] = frozenset()
        """The sandboxes of the batch being written now."""
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="pod-cgroups", daemon=True)
        self._thread.start()

    @property
    def failed(self) -> dict[str, str]:
        return self.cgroups.failed

    @property
    def version(self) -> int:
        return self.cgroups.version

    @property
    def pending(self) -> bool:
        """Never: the thread takes its retries when they come due."""
        return False

    def submit(self, changes: Changes) -> None:
        if not changes:
            return
        with self._cond:
            self._queued.update(changes)
            self._cond.notify_all()

    def wait(self, sandbox_id: str, timeout: float) -> bool:
        """Until the changes submitted for the sandbox were written (or failed); False on timeout."""
        with self._cond:
            return self._cond.wait_for(
                lambda: sandbox_id not in self._queued and sandbox_id not in self._busy, timeout)

    def close(self) -> None:
        """Write what was submitted, then stop the thread."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queued and not self._closed:
                    due = self.cgroups.next_retry()
                    timeout = None if due is None else due - self.cgroups.clock()
                    if timeout is not None and timeout <= 0:
                        break
                    self._cond.wait(timeout)
                if self._closed and not self._queued:
                    return
                batch, self._queued = self._queued, {}
                self._busy = frozenset(batch)
            try:
                self.cgroups.sync(batch)
            except Exception:  # the thread outlives a surprise: later changes are still written
                log.exception("pod cgroup writes failed unexpectedly", sandboxes=sorted(batch))
            finally:
                with self._cond:
                    self._busy = frozenset()
                    self._cond.notify_all()


def widen_pod_cgroup(pod: PodCgroup) -> Cpuset | None:
    """Give a pod without a bubble its parent's cpuset again if it holds less (an earlier run, under other
    settings, wrote a bubble there, or the plugin is being released); returns what was written, None when
    nothing needed to be."""
    parent = read_effective(pod.cpuset_dir.parent, pod.version)
    if read_effective(pod.cpuset_dir, pod.version) == parent:
        return None
    write_bubble(pod, parent)
    return parent
