"""The plugin's view of the node: which runtime containers hold which engine decisions, and what each
container's cgroup settings should be now.

The engine decides per pod; the runtime speaks of sandbox and container ids and sends one container at a
time. `Placement` bridges the two and keeps what it told the runtime last (`applied`), so every answer can
carry the updates for *other* containers whose settings moved (the node shared pool shrinks when a bubble
is carved, and grows when a pod goes).

Rules:
- A pod is managed when its sandbox carries the pod-shape annotation (`podspec.manifest.SHAPE_ANNOTATION`);
  it is admitted by the engine when its sandbox starts (`run_sandbox`, before the kubelet pulls its images
  and creates its containers, which then only look their settings up), all or nothing, and released when
  the sandbox stops or disappears from a Synchronize. A pod refused there, or whose sandbox the plugin
  never saw start (it was down then), is admitted at its first container instead: a refused pod fails that
  container's creation with the kubelet's admission type and message; nothing is reserved.
- The annotation is checked against what the runtime itself carries (the kubelet's pod-level CPU shares,
  quota and memory limit, and each container's): a shape that claims more than the scheduler accounted for
  is refused with InputError naming both values.
- Every other container runs in the node shared pool and follows it as it changes; so do containers of a
  managed pod that its shape does not list (ephemeral and debug containers are never in the partition).
- Container restarts keep the pod's allocations (the kubelet releases only when the pod terminates).
- Synchronize reconciles: pods already admitted keep their allocations, pods gone are released, new ones
  are admitted. A restarted plugin takes each running pod back where it was: onto the CPUs and memory its
  checkpoints recorded (`recorded`, the bubble included, each exclusive container on exactly its CPUs, its
  memory blocks as they were), or without a checkpoint record onto the CPUs the runtime shows its containers
  on; when its memory no longer fits there under the current settings, onto its CPUs with memory where
  today's rules put it; when its CPUs no longer fit, on those CPUs' NUMA nodes, then anywhere; and each move
  is reported.

No I/O: the NRI handler (`agent.plugin`) feeds it runtime data and turns its answers into NRI messages.
What it keeps are frozen `agent.records`; a restart's plan is `agent.resync` (Synchronize applies it),
the shape check `podspec.shape_check`, the groups of pool followers `agent.pool_followers`. The ~700 lines
left are one job held together by one invariant (the class docstring): which containers' settings an event
changed, found without looking at every container, and every change of a `create` recorded so its answer
stands all or nothing (`_Undo`, which keeps the sandbox's frozen record); split further, each half would
read the other's tables.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import replace
from itertools import repeat
from typing import Any, Final, NamedTuple

from podlevel.agent.decisions import DecisionLog
from podlevel.agent.pool_followers import Follows, PoolFollowers
from podlevel.agent.records import (
    Observed,
    PlacementView,
    PodCgroupSettings,
    Sandbox,
    SandboxRecord,
    Settings,
)
from podlevel.agent.resync import Resynced, Running, plan
from podlevel.engine.cfs import CFS_PERIOD_US
from podlevel.engine.errors import AdmissionError, InputError
from podlevel.engine.limits import shown
from podlevel.engine.manager import AdmissionPath, Assignment, Engine, NodeState, PodDecision
from podlevel.engine.pod import Pod
from podlevel.engine.restore import Checkpointed
from podlevel.podspec.manifest import SHAPE_ANNOTATION, check_annotated_identity, from_annotation
from podlevel.podspec.runtime import RuntimeResources
from podlevel.podspec.shape_check import claimed_container, claimed_sandbox, kubelet_quota, verify_shape


class _PodCgroupWants(Mapping[str, PodCgroupSettings]):
    """sandbox id -> what its pod cgroup should hold: a read-only view of the records that have one."""

    __slots__ = ("_records",)

    def __init__(self, records: Mapping[str, SandboxRecord]) -> None:
        self._records = records

    def __getitem__(self, sandbox_id: str) -> PodCgroupSettings:
        cgroup = self._records[sandbox_id].cgroup
        if cgroup is None:
            raise KeyError(sandbox_id)
        return cgroup

    def __iter__(self) -> Iterator[str]:
        return (sid for sid, record in self._records.items() if record.cgroup is not None)

    def __len__(self) -> int:
        return sum(record.cgroup is not None for record in self._records.values())


class Placed(NamedTuple):
    """What one `create` decided."""

    settings: Settings
    changed: dict[str, Settings]
    """The other containers whose settings moved (to be sent as updates with the answer)."""
    admitted: PodDecision | None
    """The pod's decision when this creation admitted it (its sandbox was not admitted at its start)."""


class _Tracked(NamedTuple):
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


class Placement:
    """Runtime containers ⇄ engine decisions, plus what was last applied to each container.

    Invariants: `applied` holds the desired settings of every tracked container not in `_unsent` or
    `_regrouped` whenever the node shared pool equals `_flushed_pool`, so an event that leaves the pool alone
    finds no updates without looking at every container. That holds because a pod's own decision is fixed
    from admission to release (the engine changes it only through `remove_container`, which placement never
    calls: restarts keep allocations), and other pods come and go only through the node shared pool, the one
    thing a decision shares with the rest of the node. `_pods` caches each admitted pod's decision
    accordingly. `_unsent` holds the containers whose updates were handed out but did not fit an answer
    (`defer`): they are handed out again until an answer carries them.

    `_followers` files every tracked container whose settings the pool moves (plain node-shared ones,
    managed ones outside any bubble, those of pods a Synchronize could not admit again), grouped by what
    each keeps of its own; the others hold settings the pool never changes. So when the pool moves, each
    group's new settings are made once and handed out to all its containers, which all differ from
    `applied` (their CPUs were the old pool), and no other container is looked at. Compared with `applied`
    one by one instead: the unsent, the container `create` just placed (on the new pool already), and
    `_regrouped`, the containers whose group changed after their `applied` was set (their pod was admitted
    or attached after they were tracked, as a pod a Synchronize could not admit is once there is room).
    """

    def __init__(self, engine: Engine, recorded: Checkpointed | None = None) -> None:
        self.engine = engine
        self.state: NodeState = engine.initial_state()
        self._recorded = recorded
        """The checkpoints a restarted plugin found, used by the first Synchronize only."""
        self._containers: dict[str, _Tracked] = {}
        self._by_sandbox: dict[str, dict[str, None]] = {}
        """sandbox id -> ids of its tracked containers (an ordered set), kept with `_containers`."""
        self._records: dict[str, SandboxRecord] = {}
        """What placement knows of each sandbox the runtime has shown, managed or not, by id: one frozen
        record, replaced on change (so an undo restores it whole)."""
        self._sandboxes_of: dict[str, set[str]] = {}
        """pod uid -> the ids of the sandboxes whose record holds it (`pod_uid`), kept with `_records`: a
        sandbox event finds its pod's other sandboxes without looking at every record."""
        self._pods: dict[str, dict[str, Settings | Follows]] = {}
        """pod uid -> container name -> its decided settings, or what it keeps when it follows the pool."""
        self.applied: dict[str, Settings] = {}
        """container id -> the settings last handed out for it; those `is_unsent` names did not fit an answer
        yet (the runtime has older ones), every other is what the runtime has."""
        self._plain = Follows(engine.topology.numa_node_ids, None, engine.config.cpu_period_us)
        """What a container in the node shared pool keeps: the node's own settings (`_node_shared`)."""
        self._followers = PoolFollowers()
        """The tracked containers that follow the pool, by what they keep; kept with `_containers`."""
        self._regrouped: set[str] = set()
        """Replaced, never changed in place: an `_Undo` holds the set it found."""
        self.pod_cgroups = _PodCgroupWants(self._records)
        """sandbox id -> what its pod cgroup should hold, for every admitted pod (a view of the records)."""
        self._pod_cgroups_changed: set[str] = set()
        """Sandbox ids whose `pod_cgroups` entry was set or dropped since `take_pod_cgroup_changes`."""
        self._shared_of: NodeState | None = None
        self._shared = self._node_shared()
        self._flushed_pool = self._shared.cpus
        """The node shared pool the last handed-out updates followed."""
        self._unsent: set[str] = set()
        """Replaced, never changed in place: an `_Undo` holds the set it found."""
        self._undo: _Undo | None = None
        """Takes back the last `create`, until the next one."""
        self.generation = 0
        """Counts the events that changed what `view` shows (a reader republishes only then)."""
        self.decisions = DecisionLog()
        """Every admission and refusal, on the state it was decided on (for `explain`)."""
        self._shapes = _Shapes()

    def sandbox(self, sandbox_id: str) -> Sandbox | None:
        record = self._records.get(sandbox_id)
        return record.sandbox if record is not None else None

    def _seen(self, sandbox: Sandbox) -> SandboxRecord:
        """The sandbox's record, started or with the runtime's latest view of the sandbox."""
        record = self._records.get(sandbox.id)
        return SandboxRecord(sandbox) if record is None else record.seen_as(sandbox)

    # -- events --------------------------------------------------------------------------------------------

    def run_sandbox(self, sandbox: Sandbox) -> PodDecision | None:
        """The runtime starts a sandbox: admit its pod now, so that its containers' creations are lookups.
        Returns the pod's decision when this admitted it.

        Raises AdmissionError (pod refused) or InputError (bad or untruthful shape annotation); nothing is
        reserved then, and the pod's first `create` decides again. The updates of other containers an
        admission makes necessary are handed out by the next `create` or `take_pending_updates`.
        """
        self.generation += 1
        self._records[sandbox.id] = self._seen(sandbox)
        pod = self._shapes.of(sandbox)
        if pod is None:
            return None
        if pod.uid in self._pods:
            self._attach(sandbox, pod.uid)
            return None
        self._verify_sandbox(sandbox, pod)
        return self._admit(sandbox, pod)

    def create(
        self, sandbox: Sandbox, container_id: str, name: str, resources: RuntimeResources | None = None
    ) -> Placed:
        """Place a new container: its settings, the changed settings of other containers, and the pod's
        decision when this creation admitted it.

        A container of a pod admitted at its sandbox's start (or by an earlier container) has its claim
        checked at its first creation and its settings looked up. Otherwise the pod is admitted now, as at
        `run_sandbox`. Raises AdmissionError (pod refused) or InputError (bad or untruthful shape annotation);
        state is unchanged then. `rollback_create` takes it back when its answer cannot be sent.
        """
        self.generation += 1
        undo = self._undo = _Undo(self, sandbox.id)
        undo.keep(self._records, sandbox.id)
        if sandbox.id not in self._records:
            self._records[sandbox.id] = SandboxRecord(sandbox)
        uid = self._records[sandbox.id].pod_uid
        admitted = None
        if uid is not None:
            self._verify_container(sandbox, self.state.pods[uid], name, resources, undo)
        else:
            admitted = self._place_first(sandbox, name, resources, undo)
        admitted_uid = self._records[sandbox.id].pod_uid
        if admitted_uid is not None:
            self.state = self.engine.container_added(self.state, admitted_uid, name)
        undo.keep(self.applied, container_id)
        undo.track(self._containers.get(container_id), container_id)
        settings = self.applied[container_id] = self._track(container_id, _Tracked(sandbox.id, name))
        if container_id in self._unsent:
            self._unsent = self._unsent - {container_id}
        return Placed(settings, self._hand_out(undo, container_id), admitted)

    def _place_first(
        self, sandbox: Sandbox, name: str, resources: RuntimeResources | None, undo: _Undo
    ) -> PodDecision | None:
        """A container of a sandbox whose pod is not admitted: admit the pod now when it has a shape (its
        sandbox was refused at its start, started while the plugin was down, or a Synchronize could not
        admit it). Returns the decision when it admitted the pod."""
        pod = self._shapes.of(sandbox)
        if pod is None:
            return None
        if pod.uid in self._pods:
            self._verify_container(sandbox, pod, name, resources, undo)
            self._attach(sandbox, pod.uid)
            return None
        self._verify_sandbox(sandbox, pod)
        self._verify_container(sandbox, pod, name, resources, undo)
        undo.keep(self._pods, pod.uid)
        try:
            return self._admit(sandbox, pod)
        except AdmissionError:
            if self._records[sandbox.id].kept_out is None:
                raise
            return None

    def rollback_create(self) -> None:
        """Take back the last `create`: its answer could not be sent, so nothing it decided may stand."""
        undo, self._undo = self._undo, None
        if undo is not None:
            self.generation += 1
            undo.run(self)

    def defer(self, container_ids: Iterable[str]) -> None:
        """Updates handed out for these containers did not fit their answer: hand them out again. Until an
        answer carries them, `applied` holds settings the runtime does not have yet (`is_unsent`)."""
        self._unsent = self._unsent | {cid for cid in container_ids if cid in self._containers}

    def _verify_sandbox(self, sandbox: Sandbox, pod: Pod) -> None:
        """Check the shape against the sandbox before the pod is admitted (never later: an in-place resize
        must not make a running pod's restarts fail)."""
        period = sandbox.resources.cpu_period or CFS_PERIOD_US
        verify_shape(claimed_sandbox(pod, period), sandbox.resources, _pod_text(sandbox),
                     required=pod.resources is not None)

    def _verify_container(
        self, sandbox: Sandbox, pod: Pod, name: str, resources: RuntimeResources | None, undo: _Undo | None
    ) -> None:
        """Check a container's own claim against its runtime resources at its first creation in the
        sandbox, whether it admits the pod or comes later; its restarts are not checked again."""
        record = self._records[sandbox.id]
        if name in record.checked:
            return
        claimed = claimed_container(pod, name, sandbox.resources.cpu_period or CFS_PERIOD_US)
        if claimed is not None and resources is not None:
            verify_shape(claimed, resources, f"{_pod_text(sandbox)} container {shown(name)}", required=True)
        self._records[sandbox.id] = record.checking(record.checked | {name})

    def _admit(self, sandbox: Sandbox, pod: Pod) -> PodDecision:
        """Admit the sandbox's pod by today's rules (AdmissionError: nothing changes)."""
        self.decisions.record(self.state, pod)
        self.state, decision = self.engine.admit(self.state, pod)
        self._install(sandbox, pod, decision)
        return decision

    def _install(self, sandbox: Sandbox, pod: Pod, decision: PodDecision) -> None:
        """Keep an admitted pod's decision: its containers' settings, its sandbox's record and pod cgroup."""
        self._pods[pod.uid] = {
            d.name: Settings(d.cpus, d.mems, d.cpu_quota_us, d.cpu_period_us, d.assignment)
            if d.assignment is not Assignment.NODE_SHARED
            else Follows(d.mems, d.cpu_quota_us, d.cpu_period_us)
            for d in decision.containers
        }
        exclusive = bool(decision.containers) and all(d.assignment.exclusive for d in decision.containers)
        cgroup = PodCgroupSettings(
            _pod_text(sandbox), pod.uid, sandbox.cgroup_parent, decision.bubble_cpus,
            decision.bubble_mems or self.engine.topology.numa_node_ids, exclusive,
            self.engine.config.cpu_period_us,
        )
        self._records[sandbox.id] = self._records[sandbox.id].admitted(pod.uid, cgroup)
        self._sandboxes_of.setdefault(pod.uid, set()).add(sandbox.id)
        self._regroup(sandbox.id)
        self._pod_cgroups_changed.add(sandbox.id)

    def _attach(self, sandbox: Sandbox, uid: str) -> None:
        """A sandbox of a pod admitted through another sandbox (the kubelet recreated it): it shares the pod's
        allocations, and its pod cgroup (named by the pod's uid) is wanted as the other sandbox's."""
        record = self._records[sandbox.id]
        self._records[sandbox.id] = record.attached(uid, record.cgroup)
        siblings = self._sandboxes_of.setdefault(uid, set())
        siblings.add(sandbox.id)
        self._regroup(sandbox.id)
        if record.cgroup is not None:
            return
        known = next((cgroup for sid in siblings if (cgroup := self._records[sid].cgroup) is not None), None)
        if known is not None:
            cgroup = replace(known, cgroup_parent=sandbox.cgroup_parent)
            self._records[sandbox.id] = record.attached(uid, cgroup)
            self._pod_cgroups_changed.add(sandbox.id)

    def _unindex(self, sandbox_id: str, uid: str) -> bool:
        """Drop the sandbox from its pod's sandboxes; whether the pod has others left."""
        siblings = self._sandboxes_of.get(uid)
        if siblings is None:
            return False
        siblings.discard(sandbox_id)
        if not siblings:
            del self._sandboxes_of[uid]
        return bool(siblings)

    def take_pod_cgroup_changes(self) -> set[str]:
        """The sandbox ids whose pod cgroup wants changed since the last call (and forget them)."""
        changed, self._pod_cgroups_changed = self._pod_cgroups_changed, set()
        return changed

    def remove_container(self, container_id: str) -> None:
        """Forget a container; its pod's allocations stay until the pod goes."""
        if self._untrack(container_id) is None:
            return
        self.generation += 1
        self.applied.pop(container_id, None)
        if container_id in self._unsent:
            self._unsent = self._unsent - {container_id}

    def remove_sandbox(self, sandbox_id: str) -> bool:
        """Release a pod's allocations: its sandbox stopped or is gone. Returns whether it held an admitted
        pod."""
        if sandbox_id not in self._records and sandbox_id not in self._by_sandbox:
            return False
        self.generation += 1
        record = self._records.pop(sandbox_id, None)
        uid = record.pod_uid if record is not None else None
        if record is not None and record.cgroup is not None:
            self._pod_cgroups_changed.add(sandbox_id)
        for container_id in self.containers_of(sandbox_id):
            self.remove_container(container_id)
        if uid is not None and not self._unindex(sandbox_id, uid) and uid in self.state.pods:
            self.state = self.engine.remove_pod(self.state, uid)
            del self._pods[uid]
        return uid is not None

    def synchronize(self, sandboxes: Iterable[Sandbox], containers: Iterable[Observed]) -> Resynced:
        """Reconcile with everything the runtime runs.

        Pods of sandboxes no longer given are released; admitted pods keep their allocations; the others
        are taken back as `resync.plan` says (a restarted plugin takes its placement back instead of
        reshuffling). A pod refused everywhere is left in the node shared pool and reported once in
        `kept_out`. Containers of sandboxes not given are ignored.
        """
        self.generation += 1
        by_id = {s.id: s for s in sandboxes}
        for sandbox_id in [sid for sid, r in self._records.items() if sid not in by_id and r.pod_uid]:
            self.remove_sandbox(sandbox_id)
        self._records = {sid: self._seen(box) for sid, box in by_id.items()}
        self.pod_cgroups = _PodCgroupWants(self._records)
        self._containers.clear()
        self._by_sandbox.clear()
        self._followers.clear()
        observed: dict[str, Observed] = {}
        by_sandbox: dict[str, list[Observed]] = {}
        for seen in containers:
            if seen.sandbox_id in by_id:
                observed[seen.container_id] = seen
                by_sandbox.setdefault(seen.sandbox_id, []).append(seen)
        kept_out: list[tuple[str, str]] = []
        running: list[Running] = []
        for sandbox_id, rows in by_sandbox.items():
            names = frozenset(seen.name for seen in rows)
            self._records[sandbox_id] = self._records[sandbox_id].checking(names)
            try:
                pod = self._shapes.of(by_id[sandbox_id])
            except InputError as err:
                kept_out.append((sandbox_id, str(err)))
                continue
            if pod is not None and pod.uid in self._pods:
                self._attach(by_id[sandbox_id], pod.uid)
            elif pod is not None:
                running.append(Running(sandbox_id, pod, rows))
        recorded, self._recorded = self._recorded, None
        resync = plan(recorded, running, self.engine, self.state)
        self.state = resync.state
        for step in resync.steps:
            if step.pod is None:
                continue
            if step.decision is not None and step.decided_on is not None:
                self.decisions.record(step.decided_on, step.pod, step.within)
                self._install(by_id[step.sandbox_id], step.pod, step.decision)
            else:
                kept_out.append((step.sandbox_id, step.why or ""))
                self._records[step.sandbox_id] = self._records[step.sandbox_id].keeping_out(step.pod)
        # Each container that ran had the memory manager forget the standard init containers before it
        # (`AddContainer`), before the restart as now.
        for sandbox_id, rows in by_sandbox.items():
            if (uid := self._records[sandbox_id].pod_uid) is not None:
                for seen in rows:
                    self.state = self.engine.container_added(self.state, uid, seen.name)
        # Containers are tracked, and their settings computed, once every pod is back: per pod they would
        # cost quadratic time.
        self.applied = {
            seen.container_id: self._track(seen.container_id, _Tracked(sandbox_id, seen.name))
            for sandbox_id, rows in by_sandbox.items() for seen in rows
        }
        self._flushed_pool = self._node_shared().cpus
        self._unsent = set()
        self._regrouped = set()
        updates = {cid: s for cid, s in self.applied.items() if _differs(observed[cid], s)}
        return Resynced(updates, kept_out, resync.tally())

    # -- views ---------------------------------------------------------------------------------------------

    def desired(self, container_id: str) -> Settings:
        tracked = self._containers.get(container_id)
        if tracked is None:
            return self._node_shared()
        return self._settings(tracked, self._node_shared())

    def take_pending_updates(self) -> dict[str, Settings]:
        """Containers whose desired settings differ from the last applied, or whose update was deferred;
        marks them applied. Never the container `create` just placed: it is applied already."""
        return self._hand_out(None)

    def _hand_out(self, undo: _Undo | None, fresh: str | None = None) -> dict[str, Settings]:
        """`take_pending_updates`, keeping in `undo` what each marked container held before; `fresh` is the
        container `create` just placed (applied already, on the pool as it is now)."""
        shared = self._node_shared()
        unsent = self._unsent
        # The containers the groups cannot vouch for, compared one by one: those whose pod was admitted
        # (or attached, or put back) since, whether or not the pool moved, and the deferred ones.
        loose = self._regrouped | unsent
        moved = shared.cpus != self._flushed_pool
        if not (moved or loose):
            return {}
        changed: dict[str, Settings] = {}
        if moved:
            changed.update(self._followers.at_pool(lambda kept: self._at(kept, shared)))
            if fresh is not None:
                loose.add(fresh)
        for container_id in loose:
            settings = self._settings(self._containers[container_id], shared)
            if container_id in unsent or self.applied.get(container_id) != settings:
                changed[container_id] = settings
            else:
                changed.pop(container_id, None)
        if self._regrouped:
            self._regrouped = set()
        if changed:
            if undo is not None:
                undo.keep_all(self.applied, changed)
            self.applied.update(changed)
            self.generation += 1
        self._unsent = set()
        self._flushed_pool = shared.cpus
        return changed

    def _settings(self, tracked: _Tracked, shared: Settings) -> Settings:
        """What a tracked container should hold now, the node shared pool being `shared`."""
        own = self._own(tracked)
        return own if isinstance(own, Settings) else self._at(own, shared)

    def _own(self, tracked: _Tracked) -> Settings | Follows:
        """A tracked container's settings when the node shared pool cannot move them, else what it keeps of
        its own while its CPUs follow the pool: a managed container outside any bubble its memory nodes and
        quota, one of a pod a Synchronize could not admit again the kubelet's quota."""
        record = self._records.get(tracked.sandbox_id)
        uid = record.pod_uid if record is not None else None
        pod = self._pods.get(uid) if uid is not None else None
        own = pod.get(tracked.name) if pod is not None else None
        if own is not None:
            return own
        refused = record.kept_out if record is not None else None
        if refused is None:
            return self._plain
        period = self._plain.cpu_period_us
        return self._plain._replace(cpu_quota_us=kubelet_quota(refused, tracked.name, period))

    def _at(self, kept: Follows, shared: Settings) -> Settings:
        """The settings of a container that keeps `kept` and follows the node shared pool `shared`."""
        if kept == self._plain:
            return shared
        return Settings(shared.cpus, kept.mems, kept.cpu_quota_us, kept.cpu_period_us, Assignment.NODE_SHARED)

    def _node_shared(self) -> Settings:
        """The settings of a container in the node shared pool; made once per node state."""
        if self._shared_of is not self.state:
            self._shared = Settings(
                self.engine.node_shared_pool(self.state),
                self.engine.topology.numa_node_ids,
                None,
                self.engine.config.cpu_period_us,
                Assignment.NODE_SHARED,
            )
            self._shared_of = self.state
        return self._shared

    def _track(self, container_id: str, tracked: _Tracked) -> Settings:
        """Track a container (again) and file it under its group; returns what it should hold now."""
        self._containers[container_id] = tracked
        self._by_sandbox.setdefault(tracked.sandbox_id, {})[container_id] = None
        return self._group(container_id, tracked)

    def _untrack(self, container_id: str) -> _Tracked | None:
        tracked = self._containers.pop(container_id, None)
        if tracked is not None:
            siblings = self._by_sandbox[tracked.sandbox_id]
            del siblings[container_id]
            if not siblings:
                del self._by_sandbox[tracked.sandbox_id]
            self._followers.drop(container_id)
            if container_id in self._regrouped:
                self._regrouped = self._regrouped - {container_id}
        return tracked

    def _group(self, container_id: str, tracked: _Tracked) -> Settings:
        """File a tracked container among the followers when the pool moves it; returns its settings now."""
        own = self._own(tracked)
        if isinstance(own, Settings):
            self._followers.file(container_id, None)
            return own
        self._followers.file(container_id, own)
        return self._at(own, self._node_shared())

    def _regroup(self, sandbox_id: str) -> None:
        """The sandbox's pod was admitted, attached or put back: its tracked containers change group, and
        what they should hold changed without the pool moving (`_regrouped`)."""
        ids = self._by_sandbox.get(sandbox_id)
        if ids:
            for container_id in ids:
                self._group(container_id, self._containers[container_id])
            self._regrouped = self._regrouped | ids.keys()

    def is_unsent(self, container_id: str) -> bool:
        """The container's `applied` settings were deferred: no answer has carried them yet."""
        return container_id in self._unsent

    def container_ids(self) -> list[str]:
        return list(self._containers)

    def containers_of(self, sandbox_id: str) -> list[str]:
        return list(self._by_sandbox.get(sandbox_id, ()))

    def view(self) -> PlacementView:
        """Copies of what placement holds now, for readers on other threads; cheap (a few dict copies)."""
        return PlacementView(
            self.state,
            {sid: r.sandbox for sid, r in self._records.items()},
            dict(self._containers),
            dict(self.applied),
            {sid: r.pod_uid for sid, r in self._records.items() if r.pod_uid is not None},
            frozenset(sid for sid, r in self._records.items() if r.kept_out is not None),
            {sandbox_id: tuple(ids) for sandbox_id, ids in self._by_sandbox.items()},
            frozenset(self._unsent),
        )

    def is_pod_level(self, sandbox: Sandbox) -> bool:
        """Whether the sandbox's pod takes the pod-level path (pod-level resources under pod scope); raises
        InputError, as `pod_shape`, when its annotation is malformed."""
        pod = self._shapes.of(sandbox)
        return pod is not None and self.engine.admission_path(pod) is AdmissionPath.POD_LEVEL

_ABSENT = object()
"""A table entry that was not there."""


class _Undo:
    """What one `Placement.create` changed, to put back when its answer cannot be sent.

    Built on every create, so it copies nothing up front: it holds the node state and the pending-update
    bookkeeping (`_unsent` and `_regrouped` are replaced, never changed in place) as they were, and `create`
    records table entries just before changing them: the sandbox's record (frozen, so keeping it is keeping a
    reference), the pod's decision when it admits, in one record the `applied` entries of the containers it
    hands updates out for. A create in an admitted pod records three.
    """

    __slots__ = ("_container", "_entries", "_flushed_pool", "_regrouped", "_sandbox_id", "_state", "_unsent")

    def __init__(self, placement: Placement, sandbox_id: str) -> None:
        self._sandbox_id = sandbox_id
        self._state = placement.state
        self._flushed_pool = placement._flushed_pool
        self._unsent = placement._unsent
        self._regrouped = placement._regrouped
        self._entries: list[tuple[dict[str, Any], dict[str, object]]] = []
        self._container: tuple[str, _Tracked | None] | None = None

    def keep(self, table: dict[str, Any], key: str) -> None:
        """Remember `table[key]` as it is now (or its absence)."""
        self._entries.append((table, {key: table.get(key, _ABSENT)}))

    def keep_all(self, table: dict[str, Any], keys: Collection[str]) -> None:
        """`keep` each key, in one record made in C (hundreds of keys when the node shared pool moves)."""
        self._entries.append((table, dict(zip(keys, map(table.get, keys, repeat(_ABSENT)), strict=True))))

    def track(self, before: _Tracked | None, container_id: str) -> None:
        """Remember what `container_id` was tracked as before `create` tracked it."""
        self._container = (container_id, before)

    def run(self, placement: Placement) -> None:
        record = placement._records.get(self._sandbox_id)
        made = record.pod_uid if record is not None else None
        placement.state = self._state
        for table, before in reversed(self._entries):
            for key, value in before.items():
                if value is _ABSENT:
                    table.pop(key, None)
                else:
                    table[key] = value
        # The index and the groups follow the tables just put back.
        record = placement._records.get(self._sandbox_id)
        kept = record.pod_uid if record is not None else None
        if made is not None and made != kept:
            placement._unindex(self._sandbox_id, made)
        if kept is not None:
            placement._sandboxes_of.setdefault(kept, set()).add(self._sandbox_id)
        if self._container is not None:
            container_id, before_tracked = self._container
            placement._untrack(container_id)
            if before_tracked is not None:
                placement._track(container_id, before_tracked)
        placement._regroup(self._sandbox_id)
        placement._flushed_pool = self._flushed_pool
        placement._unsent = self._unsent
        placement._regrouped = self._regrouped
        placement._pod_cgroups_changed.add(self._sandbox_id)


class _Shapes:
    """Pod shapes by annotation text: a node's pods share a few dozen distinct shapes (one per workload's
    pod template), and reading one costs ~20-100 us on the way to a pod's first container, so each text is
    read once and the pods after the first take the shape with their own identity. The `LIMIT` texts read
    last are kept."""

    LIMIT: Final = 256

    def __init__(self) -> None:
        self._read: dict[str, Pod] = {}

    def of(self, sandbox: Sandbox) -> Pod | None:
        """`pod_shape(sandbox)`, the same pod or the same InputError."""
        text = sandbox.annotations.get(SHAPE_ANNOTATION)
        read = self._read.get(text) if text is not None else None
        if read is None or not sandbox.uid:
            pod = pod_shape(sandbox)  # the first of its text, or the error that names the pod
            if pod is not None and text is not None:
                if len(self._read) >= self.LIMIT:
                    del self._read[next(iter(self._read))]
                self._read[text] = pod
            return pod
        check_annotated_identity(sandbox.name, sandbox.namespace)  # as `from_annotation` checks it first
        return replace(read, uid=sandbox.uid, name=sandbox.name, namespace=sandbox.namespace)


def _pod_text(sandbox: Sandbox) -> str:
    return f"pod {sandbox.key}"


def _differs(seen: Observed, settings: Settings) -> bool:
    """Whether the runtime's view of a container is off what it should hold (an unset quota it may keep)."""
    if seen.cpus != settings.cpus or (seen.mems is not None and seen.mems != settings.mems):
        return True
    return settings.cpu_quota_us is not None and seen.cpu_quota_us != settings.cpu_quota_us
