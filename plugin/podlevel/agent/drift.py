"""Container cgroups put back when something else changed them: the kubelet's CPU manager reconcile loop.

The plugin tells the runtime each container's settings (cpuset, memory nodes, CFS quota) through NRI; the
runtime writes them once. A cpuset written later by hand or by another agent stays wrong until the container
is recreated, and a shared container left on an exclusive CPU takes time from the container that owns it. The
kubelet re-applies every container's cpuset each `cpuManagerReconcilePeriod`; `DriftRepair` does the same each
`--reconcile-period` and after every Synchronize: it reads each container's cgroup files against what the
plugin last applied (drift as `cgroups.compare` defines it for `check` too) and writes the intended values
back (the runtime's record already holds them: they were the plugin's own adjustment; a container whose update
did not fit an answer yet is left alone until one carries it). A Synchronize counts once the registration it
belongs to is complete (`ready`): the runtime has applied its updates by then. A value read while a decision
was being made is checked again under the handler lock before it is written, so a repair never undoes a newer
decision. Each repair is counted (`Observer.cgroup_repaired`) and logged once per container, fields and values
found; a container that cannot be read (it exited, its cgroup is gone) is left to the next round.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from podlevel.agent.events import Observer
from podlevel.agent.records import Settings
from podlevel.agent.snapshot import NodeSnapshot
from podlevel.cgroups import (
    Cgroup,
    CgroupError,
    Cpuset,
    FieldDrift,
    Found,
    Wanted,
    compare,
    cpu_max_text,
    limit_of,
    locate_cgroup,
    write_cpu_max,
    write_cpuset,
)
from podlevel.engine.cpuset import CPUSet
from podlevel.engine.errors import InputError
from podlevel.eventlog import logger

log = logger(__name__)

RESYNC_POLL_S: Final = 0.5
"""How soon after a resync the cgroups are compared."""


@dataclass(frozen=True)
class ContainerDrift:
    """One container whose cgroup does not hold what the plugin applied, in fields its own files can fix."""

    container_id: str
    cgroup: Cgroup
    wanted: Settings
    found: Found
    fields: tuple[FieldDrift, ...]

    @property
    def names(self) -> list[str]:
        return [f.field for f in self.fields]


def find_drifts(snapshot: NodeSnapshot, root: Path) -> Iterator[ContainerDrift]:
    """Every container of the snapshot whose cgroup differs from what was applied to it, by the rule
    `cgroups.compare` states. Containers whose settings did not fit an answer yet (`unsent`) are skipped:
    the runtime still has their older settings, and so may their cgroups."""
    unsent = snapshot.placement.unsent
    for container_id, wanted in snapshot.placement.applied.items():
        cgroups_path = snapshot.cgroups_paths.get(container_id)
        if not cgroups_path or container_id in unsent:
            continue
        try:
            cgroup = locate_cgroup(cgroups_path, root)
            found, drifts = compare(cgroup, _wanted(wanted), report=False)
        except (CgroupError, OSError, InputError, ValueError):
            continue
        repairable = tuple(d for d in drifts if d.repairable)
        if repairable:
            yield ContainerDrift(container_id, cgroup, wanted, found, repairable)


def _wanted(settings: Settings) -> Wanted:
    return Wanted(settings.cpus, CPUSet(settings.mems), settings.cpu_quota_us)


class DriftRepair:
    """Finds and repairs drifted container cgroups on a thread of its own: every `period` seconds while the
    plugin is `ready` (registered and synchronized), and as soon as it becomes ready again (a resync).
    `snapshot` gives the node; `lock` is what the event handlers hold, and `applied` reads what a container
    was last told, under it."""

    def __init__(
        self,
        root: Path,
        snapshot: Callable[[], NodeSnapshot],
        lock: Callable[[], AbstractContextManager[object]],
        applied: Callable[[str], Settings | None],
        ready: Callable[[], bool],
        period: float,
        observer: Observer | None = None,
    ) -> None:
        self.root = root
        self._snapshot = snapshot
        self._lock = lock
        self._applied = applied
        self._ready = ready
        self.period = period
        self.observer = observer or Observer()
        self._logged: set[tuple[str, str, str]] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="drift-repair", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _loop(self) -> None:
        was_ready = False
        since = 0.0
        # Readiness is looked at often (a bool); the cgroups are read once a period, or at a resync.
        tick = min(RESYNC_POLL_S, self.period)
        while not self._stop.wait(tick):
            ready = self._ready()
            since += tick
            if ready and (not was_ready or since >= self.period):
                self.repair(self._snapshot())
                since = 0.0
            was_ready = ready

    def repair(self, snapshot: NodeSnapshot) -> int:
        """Put back every drifted container of `snapshot` that still wants what it held; returns how many."""
        repaired = 0
        for drift in find_drifts(snapshot, self.root):
            with self._lock():
                if self._applied(drift.container_id) != drift.wanted:
                    continue  # a newer decision is on its way to this container: it is not drift
                fields = self._put_back(drift, snapshot)
            repaired += bool(fields)
            for name in fields:
                self.observer.cgroup_repaired(name)
        return repaired

    def _put_back(self, drift: ContainerDrift, snapshot: NodeSnapshot) -> list[str]:
        wanted = drift.wanted
        fields = drift.names
        quota = None if wanted.cpu_quota_us is None else limit_of(wanted.cpu_quota_us)
        try:
            if "cpus" in fields or "mems" in fields:
                write_cpuset(drift.cgroup, Cpuset(wanted.cpus, CPUSet(wanted.mems)))
            if "quota" in fields:
                write_cpu_max(drift.cgroup, quota, wanted.cpu_period_us)
        except (CgroupError, OSError) as err:
            self._log_once(drift, "failed", f"container {drift.container_id[:12]}: cannot put its cgroup "
                                            f"back ({', '.join(fields)}): {err}", error=True)
            return []
        held = drift.found.in_force
        found = f"cpus={held.cpus} mems={held.mems} quota={cpu_max_text(drift.found.quota_us)}"
        shared_on_exclusive = not wanted.assignment.exclusive and _on_exclusive(drift, snapshot)
        what = "a shared container found on exclusive CPUs; " if shared_on_exclusive else ""
        self._log_once(drift, found, f"container {drift.container_id[:12]}: {what}its cgroup was changed "
                                     f"behind the plugin's back ({found}), put back to cpus={wanted.cpus} "
                                     f"mems={CPUSet(wanted.mems)} quota={cpu_max_text(quota)}",
                       error=shared_on_exclusive)
        return fields

    def _log_once(self, drift: ContainerDrift, found: str, message: str, *, error: bool = False) -> None:
        key = (drift.container_id, ",".join(drift.names), found)
        if key in self._logged:
            return
        self._logged.add(key)
        (log.error if error else log.warning)("{what}", what=message, container=drift.container_id)


def _on_exclusive(drift: ContainerDrift, snapshot: NodeSnapshot) -> bool:
    """The drifted container's cgroup holds CPUs another container has to itself."""
    taken = CPUSet.union_of(settings.cpus for other, settings in snapshot.placement.applied.items()
                            if other != drift.container_id and settings.assignment.exclusive)
    return bool(drift.found.in_force.cpus & taken)
