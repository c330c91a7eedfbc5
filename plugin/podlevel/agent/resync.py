"""What a Synchronize does with the pods a restarted plugin finds running: where each may go back to, tried
narrowest first, and the tally of what happened to them (`Resync`, logged and exported).

A pod goes back onto the CPUs and memory its checkpoints recorded (its bubble, else its containers' exclusive
CPUs; its memory blocks), or without a record onto the CPUs the runtime shows its containers on; when its
recorded memory no longer fits under the current settings, onto its CPUs with memory where today's rules put
it; when its CPUs no longer fit, onto those CPUs' NUMA nodes, then anywhere. Every pod is tried at one
confinement before any is tried at the next, so a pod that had to move never takes CPUs or memory another
pod still holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from podlevel.agent.records import Observed
from podlevel.engine.cfs import UNLIMITED_QUOTA
from podlevel.engine.cpu_policy import CPUState
from podlevel.engine.cpuset import CPUSet
from podlevel.engine.manager import Checkpointed
from podlevel.engine.pod import Pod
from podlevel.engine.topology import Topology


@dataclass(frozen=True, slots=True)
class Resync:
    """What the last Synchronize did with the pods a restarted plugin found running."""

    restored: int = 0
    """Pods taken back exactly onto the CPUs (and memory) their checkpoints recorded."""
    readopted: int = 0
    """Pods without a checkpoint record, taken back onto the CPUs the runtime showed them on."""
    released: int = 0
    """Pods the checkpoint held that the runtime no longer runs."""
    moved: tuple[tuple[str, str], ...] = ()
    """(sandbox id, why) for each pod that could not stay exactly where it was."""


class Confinement(Enum):
    """Where a re-admitted pod may go, in the order they are tried. `ITS_RECORD` is for pods with a checkpoint
    record only: its CPUs, and its memory where the record has it."""

    ITS_RECORD = "its recorded CPUs and memory"
    ITS_CPUS = "its CPUs"
    ITS_NUMA_NODES = "its NUMA nodes"
    ANYWHERE = "anywhere"

    @property
    def restores(self) -> bool:
        """A pod with a checkpoint record is taken back from it here (else it is admitted again)."""
        return self in (Confinement.ITS_RECORD, Confinement.ITS_CPUS)

    def within(self, held: CPUSet | None, topology: Topology) -> CPUSet | None:
        """The CPUs a pod that holds `held` may be admitted on; None: anywhere."""
        if held is None or self is Confinement.ANYWHERE:
            return None
        if self is Confinement.ITS_NUMA_NODES:
            return CPUSet.union_of(topology.cpus_by_numa[node] for node in topology.numa_nodes_of(held))
        return held


def held_cpus(pod: Pod, rows: Iterable[Observed], *, pod_level: bool) -> CPUSet | None:
    """The CPUs a managed pod's containers hold now: all of them when the pod takes the pod-level path (it
    has a bubble), else the exclusive ones (CFS quota off); None when the runtime shows none."""
    held = CPUSet.from_mask(0)
    for seen in rows:
        if seen.cpus is None or pod.container(seen.name) is None:
            continue
        if pod_level or seen.cpu_quota_us == UNLIMITED_QUOTA:
            held = held | seen.cpus
    return held or None


def recorded_cpus(recorded: CPUState, pod_uid: str) -> CPUSet | None:
    """The CPUs a checkpoint recorded for a pod: its bubble, else its containers' exclusive CPUs."""
    bubble = recorded.pod_entries.get(pod_uid)
    if bubble is not None:
        return bubble
    slices = recorded.entries.get(pod_uid)
    return CPUSet.union_of(slices.values()) if slices else None


class ResyncCount:
    """Tallies one Synchronize's re-admissions into a `Resync`."""

    def __init__(self, recorded: Checkpointed | None, running: set[str]) -> None:
        self._recorded = recorded.cpu if recorded is not None else None
        self._held: set[str] = set()
        """The pods the checkpoints hold: by their CPUs, or by their memory alone (no exclusive CPUs)."""
        if recorded is not None:
            self._held = {*recorded.cpu.pod_entries, *recorded.cpu.entries}
            if recorded.memory is not None:
                self._held |= {*recorded.memory.pod_entries, *recorded.memory.entries}
        self._released = len(self._held - running)
        self._restored = self._readopted = 0
        self._moved: list[tuple[str, str]] = []

    def has_record(self, pod_uid: str) -> bool:
        return pod_uid in self._held

    def placed(
        self, sandbox_id: str, pod_uid: str, now: CPUState, failed: str | None, restoring: bool
    ) -> None:
        """Count a pod just admitted; `failed` is why an earlier, narrower attempt refused it."""
        recorded = self._recorded.entries.get(pod_uid, {}) if self._recorded is not None else {}
        if failed is not None:
            self._moved.append((sandbox_id, failed))
        elif not restoring:
            self._readopted += 1
        elif now.entries.get(pod_uid, {}) != recorded:
            if not recorded:
                why = "it holds exclusive CPUs under the current settings that its checkpoint did not record"
            elif now.entries.get(pod_uid):
                why = "its exclusive CPUs were re-placed inside its recorded CPUs"
            else:
                why = "it holds no exclusive CPUs under the current settings; its recorded ones were freed"
            self._moved.append((sandbox_id, why))
        else:
            self._restored += 1

    def report(self) -> Resync:
        return Resync(self._restored, self._readopted, self._released, tuple(self._moved))
