"""The crash torture's oracle: what must hold between the plugin's checkpoint and the cgroups, whatever
crashed.

Pure: it is given what was read (the checkpoint files' bytes, each running container's effective cpuset and
whether its CFS quota is off, each pod cgroup's effective cpuset) and returns the violations, one per broken
fact, each naming the CPUs, pods and containers involved. The kinds:

- (a) `double`: a CPU held by two owners that must not share it: two bubbles, two exclusive entries, an
  exclusive entry and a bubble it is not in, any of them and the node shared pool or the reserved CPUs;
- (b) `unowned`: a CPU in no set (the reserved CPUs, the node shared pool, the bubbles and the exclusive
  entries outside bubbles together must be every online CPU), or a CPU in the checkpoint that is not online;
- (c) `drift`: a running container whose cgroup differs from its assignment: an exclusive entry is exactly
  its cpuset with CFS quota off; a container of a pod with a bubble and no exclusive entry runs on the pod
  shared pool (the bubble minus the pod's exclusive entries, which the checkpoint entry of such a container
  must also say when there is one); every other container runs on the node shared pool;
- (d) `checkpoint`: a checkpoint file that does not verify, is missing while pod-level pods run, or was
  moved aside as corrupt by the plugin;
- (e) `pod cgroup`: a pod cgroup whose effective cpuset differs from the pod's bubble;
- (f) `stale`: a checkpoint entry for a pod the runtime no longer has (its CPUs are lost to every pod).

Which containers of a pod-level pod are exclusive is the pod's own business (equivalent-Guaranteed with an
integer CPU request, the kubelet's rule); the caller says so in `PodState`. Standard init containers have
exited and their CPUs are reused by the app containers, so their entries take part in no overlap check.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import combinations
from typing import Final

from podlevel.engine.cpuset import CPUSet
from podlevel.state.formats import CorruptCheckpoint, CPUCheckpoint, Decoded, Kind, decode

DOUBLE: Final = "a"
UNOWNED: Final = "b"
DRIFT: Final = "c"
CHECKPOINT: Final = "d"
POD_CGROUP: Final = "e"
STALE: Final = "f"
KINDS: Final = {DOUBLE: "double", UNOWNED: "unowned", DRIFT: "drift", CHECKPOINT: "checkpoint",
                POD_CGROUP: "pod cgroup", STALE: "stale"}


@dataclass(frozen=True)
class Violation:
    kind: str
    """One of the KINDS keys."""
    text: str

    def __str__(self) -> str:
        return f"({self.kind}) {KINDS[self.kind]}: {self.text}"


@dataclass(frozen=True)
class PodState:
    """A pod the runtime has, as the driver knows it."""

    uid: str
    name: str
    pod_level: bool = False
    """Started with the pod-shape annotation and pod-level resources: the plugin manages it."""
    exclusive: frozenset[str] = frozenset()
    """Containers that qualify for exclusive CPUs inside a bubble."""
    standard_init: frozenset[str] = frozenset()
    cgroup_cpus: CPUSet | None = None
    """The pod cgroup's effective cpuset; None when it was not read."""


@dataclass(frozen=True)
class ContainerState:
    """A running container as its cgroup shows it."""

    pod_uid: str
    name: str
    container_id: str
    cpus: CPUSet
    """The effective cpuset."""
    quota_off: bool


@dataclass(frozen=True)
class Observation:
    online: CPUSet
    reserved: CPUSet
    cpu_file: bytes | None
    memory_file: bytes | None
    pods: Mapping[str, PodState]
    """pod UID -> pod, every pod the runtime has (running or stopped)."""
    containers: tuple[ContainerState, ...] = ()
    corrupt_files: tuple[str, ...] = ()
    """Files the plugin moved aside as corrupt (`<name>.corrupt-<time>`)."""


@dataclass(frozen=True)
class Checks:
    """Which optional kinds to evaluate; the caller reports the others as skipped."""

    pod_cgroups: bool = True


def _name(pods: Mapping[str, PodState], uid: str) -> str:
    pod = pods.get(uid)
    return f"pod {pod.name} ({uid})" if pod is not None else f"pod {uid}"


def _overlaps(owners: Mapping[str, CPUSet]) -> Iterable[Violation]:
    for (first, a), (second, b) in combinations(owners.items(), 2):
        if not a.is_disjoint(b):
            yield Violation(DOUBLE, f"CPU {a & b} held by {first} and by {second}")


def _decode(data: bytes, kind: Kind, violations: list[Violation]) -> Decoded | None:
    name = f"{kind}_manager_state"
    try:
        decoded = decode(data, kind)
    except CorruptCheckpoint as err:
        violations.append(Violation(CHECKPOINT, f"{name} does not decode: {err}"))
        return None
    if not decoded.valid:
        failed = "; ".join(f"{c.part}: {c.detail}" for c in decoded.checks if not c.ok)
        violations.append(Violation(CHECKPOINT, f"{name} does not verify: {failed}"))
    return decoded


def _exclusive_entries(state: CPUCheckpoint, pods: Mapping[str, PodState], uid: str) -> dict[str, CPUSet]:
    """The container entries of a pod that hold CPUs of their own (not the pod shared pool, not an exited
    standard init container's reusable slice)."""
    pod = pods.get(uid)
    entries = state.entries.get(uid, {})
    if uid not in state.pod_entries:
        return {n: cpus for n, cpus in entries.items() if pod is None or n not in pod.standard_init}
    if pod is None:
        return {}
    return {n: cpus for n, cpus in entries.items() if n in pod.exclusive and n not in pod.standard_init}


def pod_shared_pool(state: CPUCheckpoint, pods: Mapping[str, PodState], uid: str) -> CPUSet:
    bubble = state.pod_entries[uid]
    held = CPUSet()
    for cpus in _exclusive_entries(state, pods, uid).values():
        held = held | cpus
    return bubble - held


def check_checkpoint(obs: Observation, state: CPUCheckpoint) -> list[Violation]:
    """(a), (b) and (f): the CPU partition the checkpoint describes."""
    pods = obs.pods
    violations: list[Violation] = []
    owners: dict[str, CPUSet] = {}
    for uid, bubble in sorted(state.pod_entries.items()):
        owners[f"{_name(pods, uid)} bubble"] = bubble
        inside = {}
        for name, cpus in sorted(_exclusive_entries(state, pods, uid).items()):
            if not cpus.is_subset(bubble):
                violations.append(Violation(DOUBLE, f"exclusive entry {name} of {_name(pods, uid)} holds CPU "
                                                    f"{cpus - bubble} outside the pod's bubble {bubble}"))
            inside[f"container {name} of {_name(pods, uid)}"] = cpus
        violations += _overlaps(inside)
    for uid in sorted(set(state.entries) - set(state.pod_entries)):
        for name, cpus in sorted(_exclusive_entries(state, pods, uid).items()):
            owners[f"container {name} of {_name(pods, uid)}"] = cpus
    violations += _overlaps(owners)
    for owner, cpus in owners.items():
        if not cpus.is_disjoint(state.default):
            violations.append(Violation(DOUBLE, f"CPU {cpus & state.default} held by {owner} and in the node "
                                                f"shared pool {state.default}"))
        if not cpus.is_disjoint(obs.reserved):
            violations.append(Violation(DOUBLE, f"reserved CPU {cpus & obs.reserved} held by {owner}"))
    covered = obs.reserved | state.default
    for cpus in [*owners.values(), *(c for entries in state.entries.values() for c in entries.values())]:
        covered = covered | cpus
    if obs.online - covered:
        held = ", ".join(f"{owner} {cpus}" for owner, cpus in owners.items()) or "nothing"
        violations.append(Violation(UNOWNED, f"CPU {obs.online - covered} is in no set: reserved "
                                             f"{obs.reserved}, node shared pool {state.default}, "
                                             f"held {held}"))
    if covered - obs.online:
        violations.append(Violation(UNOWNED, f"CPU {covered - obs.online} is in the checkpoint but not "
                                             f"online ({obs.online})"))
    for uid in sorted((set(state.entries) | set(state.pod_entries)) - set(pods)):
        violations.append(Violation(STALE, f"the checkpoint holds pod {uid}, which the runtime no longer "
                                           "has"))
    return violations


def expected_cpus(state: CPUCheckpoint, pods: Mapping[str, PodState], container: ContainerState
                  ) -> tuple[CPUSet, bool, str]:
    """What the container's cgroup must hold: its cpuset, whether its quota must be off, and what that is."""
    uid, name = container.pod_uid, container.name
    entry = state.entries.get(uid, {}).get(name)
    if uid in state.pod_entries:
        if name in _exclusive_entries(state, pods, uid):
            assert entry is not None
            return entry, True, "its exclusive entry"
        return pod_shared_pool(state, pods, uid), False, "the pod shared pool"
    if entry is not None:
        return entry, True, "its exclusive entry"
    return state.default, False, "the node shared pool"


def check_containers(obs: Observation, state: CPUCheckpoint) -> list[Violation]:
    """(c): every running container against its assignment."""
    violations: list[Violation] = []
    for container in obs.containers:
        cpus, quota_off, what = expected_cpus(state, obs.pods, container)
        who = (f"container {container.name} ({container.container_id[:12]}) of "
               f"{_name(obs.pods, container.pod_uid)}")
        if container.cpus != cpus:
            violations.append(Violation(DRIFT, f"{who} runs on CPUs {container.cpus}, {what} is {cpus}"))
        if quota_off and not container.quota_off:
            violations.append(Violation(DRIFT, f"{who} holds {what} {cpus} but its CFS quota is on"))
        entry = state.entries.get(container.pod_uid, {}).get(container.name)
        if what == "the pod shared pool" and entry is not None and entry != cpus:
            violations.append(Violation(DRIFT, f"the checkpoint entry {entry} of {who} is not the pod shared "
                                               f"pool {cpus}"))
    return violations


def check_pod_cgroups(obs: Observation, state: CPUCheckpoint) -> list[Violation]:
    """(e): the pod cgroup of every pod with a bubble holds the bubble."""
    violations: list[Violation] = []
    for uid, bubble in sorted(state.pod_entries.items()):
        pod = obs.pods.get(uid)
        if pod is not None and pod.cgroup_cpus is not None and pod.cgroup_cpus != bubble:
            violations.append(Violation(POD_CGROUP, f"the pod cgroup of {_name(obs.pods, uid)} holds CPUs "
                                                    f"{pod.cgroup_cpus}, its bubble is {bubble}"))
    return violations


def check(obs: Observation, checks: Checks = Checks()) -> list[Violation]:
    """Every violation in `obs` among the enabled checks."""
    violations = [Violation(CHECKPOINT, f"the plugin moved {name} aside as corrupt")
                  for name in obs.corrupt_files]
    if obs.memory_file is not None:
        _decode(obs.memory_file, "memory", violations)
    if obs.cpu_file is None:
        if any(obs.pods[c.pod_uid].pod_level for c in obs.containers if c.pod_uid in obs.pods):
            violations.append(Violation(CHECKPOINT, "cpu_manager_state is missing while pod-level pods run"))
        return violations
    decoded = _decode(obs.cpu_file, "cpu", violations)
    if decoded is None:
        return violations
    state = decoded.content
    if not isinstance(state, CPUCheckpoint):
        violations.append(Violation(CHECKPOINT, f"cpu_manager_state is a V{decoded.version} file keyed by "
                                                 "container ID, which the plugin never writes"))
        return violations
    violations += check_checkpoint(obs, state)
    violations += check_containers(obs, state)
    if checks.pod_cgroups:
        violations += check_pod_cgroups(obs, state)
    return violations
