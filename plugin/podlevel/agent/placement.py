"""The plugin's view of the node: which runtime containers hold which engine decisions, and what each
container's cgroup settings should be now.

The engine decides per pod; the runtime speaks of sandbox and container ids and sends one container at a
time. `Placement` bridges the two and keeps what it told the runtime last (`applied`), so every answer can
carry the updates for *other* containers whose settings moved (the node shared pool shrinks when a bubble
is carved, and grows when a pod goes).

Rules:
- A pod is managed when its sandbox carries the pod-shape annotation (`podspec.manifest.SHAPE_ANNOTATION`);
  it is admitted by the engine at its first container, all or nothing, and released when the sandbox stops
  or disappears from a Synchronize. A refused pod fails that container's creation with the kubelet's
  admission type and message; nothing is reserved.
- The annotation is checked against what the runtime itself carries (the kubelet's pod-level CPU shares,
  quota and memory limit, and each container's): a shape that claims more than the scheduler accounted for
  is refused with InputError naming both values.
- Every other container runs in the node shared pool and follows it as it changes; so do containers of a
  managed pod that its shape does not list (ephemeral and debug containers are never in the partition).
- Container restarts keep the pod's allocations (the kubelet releases only when the pod terminates).
- Synchronize reconciles: pods already admitted keep their allocations, pods gone are released, new ones
  are admitted. A plugin that starts with nothing (a restart; there are no checkpoints yet) admits each pod
  on the CPUs the runtime shows its containers on when it still fits there, so its placement survives.

No I/O: the NRI handler (`agent.plugin`) feeds it runtime data and turns its answers into NRI messages.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import NamedTuple

from podlevel.engine.cfs import CFS_PERIOD_US, milli_cpu_to_quota, milli_cpu_to_shares
from podlevel.engine.cpuset import CPUSet
from podlevel.engine.errors import AdmissionError, InputError
from podlevel.engine.manager import UNLIMITED_QUOTA, Assignment, Engine, NodeState, PodDecision
from podlevel.engine.pod import CPU, MEMORY, Pod, Resources
from podlevel.podspec.manifest import SHAPE_ANNOTATION, from_annotation


@dataclass(frozen=True, slots=True)
class RuntimeResources:
    """CPU and memory settings as the kubelet hands them to the runtime; 0 means not set."""

    cpu_shares: int = 0
    cpu_quota: int = 0
    cpu_period: int = 0
    memory_limit: int = 0


@dataclass(frozen=True, slots=True)
class Sandbox:
    """What the plugin needs of a runtime pod sandbox."""

    id: str
    uid: str
    name: str
    namespace: str
    annotations: Mapping[str, str]
    resources: RuntimeResources = RuntimeResources()
    """The sandbox's Linux pod resources (the pod's budget as the kubelet computed it)."""


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

    @property
    def mems_text(self) -> str:
        return ",".join(str(node) for node in self.mems)


@dataclass(frozen=True, slots=True)
class _Tracked:
    sandbox_id: str
    name: str


def pod_shape(sandbox: Sandbox) -> Pod | None:
    """The engine pod a sandbox's shape annotation describes, or None when it has none.

    Raises InputError when the annotation is present but malformed: an operator asked for pod-level
    management and must learn why it did not happen.
    """
    text = sandbox.annotations.get(SHAPE_ANNOTATION)
    if text is None:
        return None
    return from_annotation(text, name=sandbox.name, namespace=sandbox.namespace, uid=sandbox.uid)


def expected_runtime(resources: Resources, period: int) -> RuntimeResources:
    """What a kubelet with CFS quota on passes to the runtime for these requests and limits
    (`MilliCPUToShares`, `MilliCPUToQuota`)."""
    limit = resources.limits.get(CPU, 0)
    return RuntimeResources(
        milli_cpu_to_shares(resources.request(CPU)),
        milli_cpu_to_quota(limit, period),
        period if limit else 0,
        resources.limits.get(MEMORY, 0),
    )


def verify_shape(claimed: Resources, actual: RuntimeResources, what: str) -> None:
    """Refuse a shape whose CPU or memory differs from what the runtime carries for the same pod or container.

    Only values the runtime actually carries are compared (a runtime or test harness may leave some unset).
    """
    period = actual.cpu_period or CFS_PERIOD_US
    expected = expected_runtime(claimed, period)
    for field_name, unit in (("cpu_shares", ""), ("cpu_quota", " us"), ("memory_limit", " bytes")):
        have, want = getattr(actual, field_name), getattr(expected, field_name)
        if have and have != want:
            raise InputError(
                "pod shape",
                f"{what}: the {SHAPE_ANNOTATION} annotation implies {field_name} {want}{unit}, but the "
                f"runtime carries {have}{unit}; the annotation must describe the pod the scheduler admitted",
            )


class Placement:
    """Runtime containers ⇄ engine decisions, plus what was last applied to each container.

    Invariants: `applied` holds the desired settings of every tracked container whenever the node shared
    pool equals `_flushed_pool`, so an event that leaves the pool alone finds no updates without looking at
    every container. That holds because a pod's own decision is fixed from admission to release (the engine
    changes it only through `remove_container`, which placement never calls: restarts keep allocations), and
    other pods come and go only through the node shared pool, the one thing a decision shares with the rest
    of the node. `_pods` caches each admitted pod's decision accordingly.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.state: NodeState = engine.initial_state()
        self._containers: dict[str, _Tracked] = {}
        self._sandbox_pods: dict[str, str] = {}
        """sandbox id -> uid of its admitted pod, for managed pods only."""
        self._pods: dict[str, dict[str, Settings]] = {}
        self.applied: dict[str, Settings] = {}
        self._flushed_pool = engine.node_shared_pool(self.state)

    # -- events --------------------------------------------------------------------------------------------

    def create(
        self, sandbox: Sandbox, container_id: str, name: str, resources: RuntimeResources | None = None
    ) -> tuple[Settings, dict[str, Settings]]:
        """Place a new container; returns its settings and the changed settings of other containers.

        Raises AdmissionError (pod refused) or InputError (bad or untruthful shape annotation); state is
        unchanged then.
        """
        self._admit(sandbox, name, resources)
        self._containers[container_id] = _Tracked(sandbox.id, name)
        settings = self.desired(container_id)
        self.applied[container_id] = settings
        return settings, self.pending_updates()

    def _admit(
        self, sandbox: Sandbox, name: str, resources: RuntimeResources | None, held: CPUSet | None = None
    ) -> None:
        """Admit the sandbox's pod if it is managed and not admitted yet; `held`: the CPUs the runtime
        already runs it on, to take back if they still hold it."""
        pod = pod_shape(sandbox)
        if pod is None:
            return
        where = f"pod {sandbox.namespace}/{sandbox.name}"
        if pod.resources is not None:
            verify_shape(pod.resources, sandbox.resources, where)
        container = pod.container(name)
        if container is not None and resources is not None:
            verify_shape(container.resources, resources, f"{where} container {name}")
        if pod.uid not in self._pods:
            self.state, decision = self._admit_pod(pod, held)
            self._pods[pod.uid] = {
                d.name: Settings(d.cpus, d.mems, d.cpu_quota_us, d.cpu_period_us, d.assignment)
                for d in decision.containers
            }
        self._sandbox_pods[sandbox.id] = pod.uid

    def _admit_pod(self, pod: Pod, held: CPUSet | None) -> tuple[NodeState, PodDecision]:
        """Where the pod runs already (its CPUs, then anywhere on their NUMA nodes), else where it fits."""
        if held:
            topology = self.engine.topology
            home = CPUSet.from_mask(0)
            for node in topology.numa_nodes_of(held):
                home = home | topology.cpus_by_numa[node]
            for within in (held, home):
                try:
                    return self.engine.admit(self.state, pod, within=within)
                except AdmissionError:
                    continue
        return self.engine.admit(self.state, pod)

    def remove_container(self, container_id: str) -> None:
        """Forget a container; its pod's allocations stay until the pod goes."""
        self._containers.pop(container_id, None)
        self.applied.pop(container_id, None)

    def remove_sandbox(self, sandbox_id: str) -> None:
        """Release a pod's allocations: its sandbox stopped or is gone."""
        uid = self._sandbox_pods.pop(sandbox_id, None)
        for container_id in [cid for cid, t in self._containers.items() if t.sandbox_id == sandbox_id]:
            self.remove_container(container_id)
        if uid is not None and uid in self.state.pods and uid not in self._sandbox_pods.values():
            self.state = self.engine.remove_pod(self.state, uid)
            del self._pods[uid]

    def synchronize(
        self, sandboxes: Iterable[Sandbox], containers: Iterable[Observed | tuple[object, ...]]
    ) -> tuple[dict[str, Settings], list[tuple[str, str]]]:
        """Reconcile with everything the runtime runs (`Observed` rows; plain tuples in the same order).

        Pods of sandboxes no longer given are released; admitted pods keep their allocations; the others
        are admitted in the order their containers are given, each on the CPUs its containers hold now
        when it still fits there (a restarted plugin takes its placement back instead of reshuffling). A
        pod the engine refuses now is left in the node shared pool and reported once in the second result
        as (sandbox id, reason). Returns the settings of every container whose cpuset, memory nodes or
        quota differ from what they should be. Containers of sandboxes not given are ignored.
        """
        by_id = {s.id: s for s in sandboxes}
        for sandbox_id in [sid for sid in self._sandbox_pods if sid not in by_id]:
            self.remove_sandbox(sandbox_id)
        self._containers.clear()
        observed: dict[str, Observed] = {}
        by_sandbox: dict[str, list[Observed]] = {}
        for row in containers:
            seen = row if isinstance(row, Observed) else Observed(*row)  # type: ignore[arg-type]
            if seen.sandbox_id in by_id:
                observed[seen.container_id] = seen
                by_sandbox.setdefault(seen.sandbox_id, []).append(seen)
        refused: dict[str, str] = {}
        for sandbox_id, rows in by_sandbox.items():
            sandbox = by_id[sandbox_id]
            try:
                self._admit(sandbox, rows[0].name, None, _held(pod_shape(sandbox), rows))
            except (InputError, AdmissionError) as err:
                refused[sandbox_id] = str(err)
            for seen in rows:
                self._containers[seen.container_id] = _Tracked(sandbox_id, seen.name)
        # Settings are computed once, after every pod is back: per container they would cost quadratic time.
        shared = self._node_shared()
        self.applied = {cid: self._settings(tracked, shared) for cid, tracked in self._containers.items()}
        self._flushed_pool = shared.cpus
        updates = {cid: s for cid, s in self.applied.items() if _differs(observed[cid], s)}
        return updates, list(refused.items())

    # -- views ---------------------------------------------------------------------------------------------

    def desired(self, container_id: str) -> Settings:
        tracked = self._containers.get(container_id)
        if tracked is None:
            return self._node_shared()
        return self._settings(tracked, self._node_shared())

    def pending_updates(self) -> dict[str, Settings]:
        """Containers whose desired settings differ from the last applied; marks them applied. Never the
        container `create` just placed: it is applied already."""
        shared = self._node_shared()
        if shared.cpus == self._flushed_pool:
            return {}
        changed: dict[str, Settings] = {}
        for container_id, tracked in self._containers.items():
            settings = self._settings(tracked, shared)
            if self.applied.get(container_id) != settings:
                changed[container_id] = settings
                self.applied[container_id] = settings
        self._flushed_pool = shared.cpus
        return changed

    def _settings(self, tracked: _Tracked, shared: Settings) -> Settings:
        uid = self._sandbox_pods.get(tracked.sandbox_id)
        pod = self._pods.get(uid) if uid is not None else None
        settings = pod.get(tracked.name) if pod is not None else None
        if settings is None:
            return shared
        if settings.assignment is Assignment.NODE_SHARED and settings.cpus != shared.cpus:
            # A managed container outside any bubble follows the pool; its memory nodes stay its own.
            return replace(settings, cpus=shared.cpus)
        return settings

    def _node_shared(self) -> Settings:
        return Settings(
            self.engine.node_shared_pool(self.state),
            self.engine.topology.numa_node_ids,
            None,
            self.engine.config.cpu_period_us,
            Assignment.NODE_SHARED,
        )

    def container_ids(self) -> list[str]:
        return list(self._containers)


def _held(pod: Pod | None, rows: Iterable[Observed]) -> CPUSet | None:
    """The CPUs a managed pod's containers hold now: all of them for a pod bubble, the exclusive ones
    (CFS quota off) otherwise; None when the runtime shows none."""
    if pod is None:
        return None
    held = CPUSet.from_mask(0)
    for seen in rows:
        if seen.cpus is None or pod.container(seen.name) is None:
            continue
        if pod.resources is not None or seen.cpu_quota_us == UNLIMITED_QUOTA:
            held = held | seen.cpus
    return held or None


def _differs(seen: Observed, settings: Settings) -> bool:
    """Whether the runtime's view of a container is off what it should hold (an unset quota it may keep)."""
    if seen.cpus != settings.cpus or (seen.mems is not None and seen.mems != settings.mems):
        return True
    return settings.cpu_quota_us is not None and seen.cpu_quota_us != settings.cpu_quota_us
