"""Restart restore as one plan: what a Synchronize does with the pods a restarted plugin finds running, each
pod's step and why (`plan` → `ResyncPlan`), and the tally of it (`Resync`, logged and exported).

A pod goes back onto the CPUs and memory its checkpoints recorded (its bubble, else its containers' exclusive
CPUs: `CPUState.pod_cpus`; its memory blocks), or without a record onto the CPUs the runtime shows its
containers on; when its recorded memory no longer fits under the current settings, onto its CPUs with memory
where today's rules put it; when its CPUs no longer fit, onto those CPUs' NUMA nodes, then anywhere. Every pod
is tried at one confinement before any is tried at the next, so a pod that had to move never takes CPUs or
memory another pod still holds. A pod that fits nowhere is kept out (it runs in the node shared pool); a pod
the checkpoints hold that the runtime no longer runs is released. This is the kubelet's `validateState` and
re-allocation, pod by pod.

No I/O and no `Placement`: the plan is a value, tested on its own; `Placement.synchronize` applies it. Why a
pod's recorded memory could not stay is the engine's sentence (`engine.restore`); why its exclusive CPUs
changed is written here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

from podlevel.agent.records import Observed, Settings
from podlevel.engine.cfs import UNLIMITED_QUOTA
from podlevel.engine.cpuset import CPUSet
from podlevel.engine.errors import AdmissionError
from podlevel.engine.manager import AdmissionPath, Engine, NodeState, PodDecision
from podlevel.engine.pod import Pod
from podlevel.engine.restore import Checkpointed, restore
from podlevel.engine.topology import Topology


class Step(Enum):
    """What the plan does with one pod."""

    KEPT = "kept as recorded"
    """Taken back exactly onto the CPUs (and memory) its checkpoints recorded."""
    TAKEN_BACK = "taken back where it runs"
    """Without a checkpoint record, taken back onto the CPUs the runtime shows it on."""
    MOVED = "re-placed"
    """Admitted again, but not exactly where it was; `why` says what changed."""
    KEPT_OUT = "kept out"
    """Fits nowhere under today's settings: left in the node shared pool; `why` is the admission's refusal."""
    RELEASED = "released"
    """The checkpoints held it, the runtime no longer runs it."""


@dataclass(frozen=True, slots=True)
class PodStep:
    """One pod's step. An admitted pod (kept, taken back, moved) carries its decision, the node state it was
    decided on and the CPUs it was confined to (for `explain`)."""

    step: Step
    pod_uid: str
    sandbox_id: str = ""
    """"" for a released pod: no sandbox runs it."""
    why: str | None = None
    pod: Pod | None = None
    decision: PodDecision | None = None
    decided_on: NodeState | None = None
    within: CPUSet | None = None


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


@dataclass(frozen=True, slots=True)
class ResyncPlan:
    """Each running pod's step in the order they were decided, then the released ones; `state` is the node
    with every admitted pod in it."""

    state: NodeState
    steps: tuple[PodStep, ...]

    def tally(self) -> Resync:
        counts = {step: 0 for step in Step}
        for pod in self.steps:
            counts[pod.step] += 1
        moved = tuple((s.sandbox_id, s.why or "") for s in self.steps if s.step is Step.MOVED)
        return Resync(counts[Step.KEPT], counts[Step.TAKEN_BACK], counts[Step.RELEASED], moved)


@dataclass(frozen=True, slots=True)
class Resynced:
    """What one `Placement.synchronize` did."""

    updates: dict[str, Settings]
    """The settings of every container whose cpuset, memory nodes or quota differ from what they should be."""
    kept_out: list[tuple[str, str]]
    """(sandbox id, why) of each managed pod left in the node shared pool: refused by today's rules, or its
    shape annotation unreadable."""
    tally: Resync


class Running(NamedTuple):
    """A managed pod the runtime runs that no admitted pod accounts for, and its containers as reported."""

    sandbox_id: str
    pod: Pod
    containers: Sequence[Observed]


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


def plan(
    recorded: Checkpointed | None, running: Sequence[Running], engine: Engine, state: NodeState
) -> ResyncPlan:
    """Each running pod's step, admitted onto `state` in the order given, narrowest confinement first."""
    held = _recorded_pods(recorded)
    waiting = [(pod, _where(pod, recorded, engine)) for pod in running]
    steps: list[PodStep] = []
    failed: dict[str, str] = {}
    """sandbox id -> why the first, narrowest attempt refused the pod."""
    for confinement in Confinement:
        still: list[tuple[Running, CPUSet | None]] = []
        for entry in waiting:
            (sandbox_id, pod, _), where = entry
            within = confinement.within(where, engine.topology)
            restoring = recorded is not None and confinement.restores and pod.uid in held
            # A pod its checkpoints hold without exclusive CPUs (its memory alone) holds none to stay on.
            if not restoring and (confinement is Confinement.ITS_RECORD
                                  or (within is None and confinement is not Confinement.ANYWHERE)):
                still.append(entry)
                continue
            try:
                if recorded is not None and restoring:
                    restored = restore(engine, state, pod, recorded, within)
                    if confinement is Confinement.ITS_RECORD and restored.memory_moved is not None:
                        failed.setdefault(sandbox_id, restored.memory_moved)
                        still.append(entry)
                        continue
                    new, decision = restored.state, restored.decision
                    on = recorded.cpu.pod_cpus(pod.uid) or within
                else:
                    new, decision = engine.admit(state, pod, within=within)
                    on = within
            except AdmissionError as err:
                failed.setdefault(sandbox_id, str(err))
                still.append(entry)
                continue
            step, why = _step(pod.uid, new, recorded if restoring else None, failed.get(sandbox_id))
            steps.append(PodStep(step, pod.uid, sandbox_id, why, pod, decision, state, on))
            state = new
        waiting = still
    steps += [PodStep(Step.KEPT_OUT, pod.uid, sid, failed[sid], pod) for (sid, pod, _), _ in waiting]
    gone = held - {pod.pod.uid for pod in running}
    steps += [PodStep(Step.RELEASED, uid) for uid in sorted(gone)]
    return ResyncPlan(state, tuple(steps))


def _recorded_pods(recorded: Checkpointed | None) -> set[str]:
    """The pods the checkpoints hold: by their CPUs, or by their memory alone (no exclusive CPUs)."""
    if recorded is None:
        return set()
    held = {*recorded.cpu.pod_entries, *recorded.cpu.entries}
    if recorded.memory is not None:
        held |= {*recorded.memory.pod_entries, *recorded.memory.entries}
    return held


def _where(running: Running, recorded: Checkpointed | None, engine: Engine) -> CPUSet | None:
    """The CPUs a pod is taken back around: what its checkpoint recorded, else what the runtime shows."""
    pod = running.pod
    mine = recorded.cpu.pod_cpus(pod.uid) if recorded is not None else None
    if mine:
        return mine
    pod_level = engine.admission_path(pod) is AdmissionPath.POD_LEVEL
    return held_cpus(pod, running.containers, pod_level=pod_level)


def _step(
    pod_uid: str, now: NodeState, recorded: Checkpointed | None, failed: str | None
) -> tuple[Step, str | None]:
    """An admitted pod's step: moved when a narrower attempt refused it (`failed`) or its exclusive CPUs are
    not the recorded ones; kept when restored (`recorded`) as it was; else taken back where it runs."""
    if failed is not None:
        return Step.MOVED, failed
    if recorded is None:
        return Step.TAKEN_BACK, None
    had = recorded.cpu.entries.get(pod_uid, {})
    has = now.cpu.entries.get(pod_uid, {})
    if has == had:
        return Step.KEPT, None
    if not had:
        return Step.MOVED, ("it holds exclusive CPUs under the current settings that its checkpoint did not "
                            "record")
    if has:
        return Step.MOVED, "its exclusive CPUs were re-placed inside its recorded CPUs"
    return Step.MOVED, "it holds no exclusive CPUs under the current settings; its recorded ones were freed"


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
