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
- Every other container runs in the node shared pool and follows it as it changes.
- Container restarts keep the pod's allocations (the kubelet releases only when the pod terminates).

No I/O: the NRI handler (`agent.plugin`) feeds it runtime data and turns its answers into NRI messages.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from podlevel.engine.cpuset import CPUSet
from podlevel.engine.errors import AdmissionError, InputError
from podlevel.engine.manager import Assignment, Engine, NodeState
from podlevel.engine.pod import Pod
from podlevel.podspec.manifest import SHAPE_ANNOTATION, from_annotation


@dataclass(frozen=True, slots=True)
class Sandbox:
    """What the plugin needs of a runtime pod sandbox."""

    id: str
    uid: str
    name: str
    namespace: str
    annotations: Mapping[str, str]


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
    pod_uid: str
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
        self._pods: dict[str, dict[str, Settings]] = {}
        self.applied: dict[str, Settings] = {}
        self._flushed_pool = engine.node_shared_pool(self.state)

    # -- events --------------------------------------------------------------------------------------------

    def create(self, sandbox: Sandbox, container_id: str, name: str) -> tuple[Settings, dict[str, Settings]]:
        """Place a new container; returns its settings and the changed settings of other containers.

        Raises AdmissionError (pod refused) or InputError (bad shape annotation); state is unchanged then.
        """
        self._containers[container_id] = _Tracked(sandbox.id, self._admit(sandbox, name), name)
        settings = self.desired(container_id)
        self.applied[container_id] = settings
        return settings, self.pending_updates()

    def _admit(self, sandbox: Sandbox, name: str) -> str:
        """Admit the sandbox's pod if it is managed (idempotent); its uid, or "" for the node shared pool."""
        pod = pod_shape(sandbox)
        if pod is None:
            return ""
        if pod.container(name) is None:
            raise InputError(
                "pod shape", f"container {name!r} of pod {sandbox.namespace}/{sandbox.name} is not in "
                f"its {SHAPE_ANNOTATION} annotation"
            )
        if pod.uid not in self._pods:
            self.state, decision = self.engine.admit(self.state, pod)
            self._pods[pod.uid] = {
                d.name: Settings(d.cpus, d.mems, d.cpu_quota_us, d.cpu_period_us, d.assignment)
                for d in decision.containers
            }
        self._sandbox_pods[sandbox.id] = pod.uid
        return pod.uid

    def remove_container(self, container_id: str) -> None:
        """Forget a container; its pod's allocations stay until the pod goes."""
        self._containers.pop(container_id, None)
        self.applied.pop(container_id, None)

    def remove_sandbox(self, sandbox_id: str) -> None:
        """Release a pod's allocations: its sandbox stopped or is gone."""
        uid = self._sandbox_pods.pop(sandbox_id, None)
        for container_id in [cid for cid, t in self._containers.items() if t.sandbox_id == sandbox_id]:
            self.remove_container(container_id)
        if uid is not None and uid in self.state.pods:
            self.state = self.engine.remove_pod(self.state, uid)
            del self._pods[uid]

    def synchronize(
        self, sandboxes: Iterable[Sandbox], containers: Iterable[tuple[str, str, str, CPUSet | None]]
    ) -> tuple[dict[str, Settings], list[tuple[str, str]]]:
        """Rebuild from everything the runtime runs: (container id, sandbox id, name, current cpus).

        Pods are re-admitted in the order their containers are given; a pod the engine now refuses is left
        in the node shared pool and reported once in the second result as (sandbox id, reason). Returns the
        settings of every container whose current cpuset differs from what it should be. Containers of
        sandboxes not given are ignored.
        """
        self.state = self.engine.initial_state()
        self._containers.clear()
        self._sandbox_pods.clear()
        self._pods.clear()
        by_id = {s.id: s for s in sandboxes}
        refused: dict[str, str] = {}
        current: dict[str, CPUSet | None] = {}
        for container_id, sandbox_id, name, cpus in containers:
            sandbox = by_id.get(sandbox_id)
            if sandbox is None:
                continue
            try:
                uid = self._admit(sandbox, name)
            except (InputError, AdmissionError) as err:
                refused.setdefault(sandbox_id, str(err))
                uid = ""
            self._containers[container_id] = _Tracked(sandbox_id, uid, name)
            current[container_id] = cpus
        # Settings are computed once, after every pod is back: per container they would cost quadratic time.
        shared = self._node_shared()
        self.applied = {cid: self._settings(tracked, shared) for cid, tracked in self._containers.items()}
        self._flushed_pool = shared.cpus
        updates = {cid: s for cid, s in self.applied.items() if current[cid] != s.cpus}
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
        pod = self._pods.get(tracked.pod_uid)
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
