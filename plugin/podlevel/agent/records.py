"""The records the agent keeps of what the runtime runs and what each container and pod cgroup should hold:
frozen values, shared by the placement, the NRI handler, the pod cgroup writer, drift repair and the readers
of snapshots."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from podlevel.engine.cpuset import CPUSet
from podlevel.engine.limits import shown
from podlevel.engine.manager import Assignment, NodeState
from podlevel.engine.pod import Pod
from podlevel.podspec.runtime import RuntimeResources


@dataclass(frozen=True, slots=True)
class Sandbox:
    """What the plugin needs of a runtime pod sandbox."""

    id: str
    uid: str
    name: str
    namespace: str
    annotations: Mapping[str, str]
    """The annotations the plugin reads (the pod-shape annotation, when the sandbox carries it)."""
    resources: RuntimeResources = field(default_factory=RuntimeResources)
    """The sandbox's Linux pod resources (the pod's budget as the kubelet computed it)."""
    cgroup_parent: str = ""
    """The pod cgroup the kubelet made (`linux.cgroup_parent`); the pod's bubble is written there."""

    @property
    def key(self) -> str:
        return runtime_pod_key(self.namespace, self.name)


@dataclass(frozen=True, slots=True)
class RefusedSandbox:
    """A pod's last sandbox refused at its RunPodSandbox, on a runtime that then removes the sandbox: kept
    for a while so that the operator views still list the pod as refused (see `PodLevelPlugin`)."""

    sandbox: Sandbox
    refusal: str
    """What the runtime was answered (type: message)."""
    at: float
    """When, in the plugin's clock (monotonic seconds)."""


def runtime_pod_key(namespace: str, name: str) -> str:
    """`namespace/name` of a pod as the runtime names it, bounded for messages (the runtime's names are any
    text; the engine's `Pod.key` names a pod already checked)."""
    return f"{shown(namespace)}/{shown(name)}"


class Observed(NamedTuple):
    """A container as Synchronize reports it; what it holds now (None: not set or unreadable)."""

    container_id: str
    sandbox_id: str
    name: str
    cpus: CPUSet | None = None
    mems: tuple[int, ...] | None = None
    cpu_quota_us: int | None = None


@dataclass(frozen=True, slots=True)
class Settings:
    """The cgroup settings one container should have. `cpu_quota_us` None leaves the quota alone."""

    cpus: CPUSet
    mems: tuple[int, ...]
    cpu_quota_us: int | None
    cpu_period_us: int
    assignment: Assignment


@dataclass(frozen=True, slots=True)
class PodCgroupSettings:
    """What an admitted pod's own cgroup should hold, which NRI cannot set."""

    what: str
    """`pod namespace/name`, for messages."""
    pod_uid: str
    cgroup_parent: str
    cpus: CPUSet | None
    """The bubble's CPUs; None: the pod has no bubble, so its cgroup is as wide as its parent's (as the
    kubelet made it; a pod narrowed by an earlier run under other settings is widened back)."""
    mems: tuple[int, ...]
    unlimited_quota: bool
    """Every container holds CPUs of its own: only then does the kubelet (v1.37, `PodHasExclusiveCPUs` with
    pod-level resources) lift the pod's CFS quota; one container in a shared pool keeps the pod limit."""
    cpu_period_us: int


@dataclass(frozen=True, slots=True)
class PlacementView:
    """A consistent copy of placement after one event: nothing in it changes afterwards."""

    state: NodeState
    sandboxes: Mapping[str, Sandbox]
    containers: Mapping[str, tuple[str, str]]
    """container id -> (sandbox id, container name)."""
    applied: Mapping[str, Settings]
    admitted: Mapping[str, str]
    """sandbox id -> uid of its admitted pod."""
    kept_out: frozenset[str]
    """Sandboxes of running managed pods a Synchronize could not admit again (left in the node pool)."""
    by_sandbox: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """sandbox id -> its containers' ids, in the order they were tracked (so a pod's are not searched for)."""
    unsent: frozenset[str] = frozenset()
    """Containers whose `applied` settings did not fit an answer yet: the runtime still has older ones."""


@dataclass(frozen=True, slots=True)
class SandboxRecord:
    """What placement knows of one sandbox; replaced whole when any of it changes."""

    sandbox: Sandbox
    pod_uid: str | None = None
    """The uid of its admitted pod (managed pods only)."""
    checked: frozenset[str] = frozenset()
    """Its containers whose claim was checked against the runtime at their first creation (a restart is not
    checked again: an in-place resize must not make it fail)."""
    kept_out: Pod | None = None
    """The shape of a running pod a Synchronize could not admit again: its containers stay in the node shared
    pool (the kubelet never re-admits a running pod), with the kubelet's own quota."""
    cgroup: PodCgroupSettings | None = None
    """What its pod cgroup should hold, for an admitted pod."""

    # Each change of state as its own constructor: `dataclasses.replace` costs several times as much, and a
    # restart's Synchronize makes a few of these per pod.

    def seen_as(self, sandbox: Sandbox) -> SandboxRecord:
        return SandboxRecord(sandbox, self.pod_uid, self.checked, self.kept_out, self.cgroup)

    def checking(self, names: frozenset[str]) -> SandboxRecord:
        return SandboxRecord(self.sandbox, self.pod_uid, names, self.kept_out, self.cgroup)

    def admitted(self, pod_uid: str, cgroup: PodCgroupSettings) -> SandboxRecord:
        return SandboxRecord(self.sandbox, pod_uid, self.checked, None, cgroup)

    def attached(self, pod_uid: str, cgroup: PodCgroupSettings | None) -> SandboxRecord:
        return SandboxRecord(self.sandbox, pod_uid, self.checked, self.kept_out, cgroup)

    def keeping_out(self, pod: Pod) -> SandboxRecord:
        return SandboxRecord(self.sandbox, self.pod_uid, self.checked, pod, self.cgroup)
