"""The NRI handler of `nri-podlevel run`: runtime events in, container cgroup settings out.

Every CreateContainer waits on this code, so a pod's work is done before its first container: RunPodSandbox
parses the shape, admits the pod and records it while the kubelet still pulls the pod's images,
and CreateContainer checks the container's claim and looks its settings up. A pod refused there is refused at
RunPodSandbox only where the runtime then shuts the sandbox down (containerd 2.2.6, 2.3.3, 2.4 and later,
`RuntimeInfo.rolls_back_refused_sandbox`): the CRI RunPodSandbox fails with the kubelet's admission type and
message and nothing of the pod runs, as at the kubelet's admission. Older containerd 2.x leaves the sandbox
it had already started running (its pause container outlives the failed call, and the kubelet retries the
pod with new sandboxes), so there the refused pod's first CreateContainer decides again and fails with that
type and message, as does the first CreateContainer of a sandbox the plugin did not see start (it was down
then), which admits its pod.

Updates for other containers ride on the answers of the events that can carry them (CreateContainer,
UpdateContainer, StopContainer, Synchronize), never through a separate UpdateContainers call from inside a
handler. RunPodSandbox answers nothing (a notification): the node shared pool its admission shrinks reaches
the other containers with the next such answer, the pod's own first CreateContainer's at the latest, which
the runtime applies before it creates that container. Where the runtime serves a plugin's own
UpdateContainers while events are in flight (NRI v0.12.1 and later, `RuntimeInfo.serves_unsolicited_updates`)
and `send_updates` is set, the CPUs a released pod frees reach the containers that follow the node shared
pool at once, in such a call made right after the StopPodSandbox handler returns.

No decision stands unless the answer that applies it can be sent. An answer holds as many updates as fit
under the runtime's message limit (`MAX_REPLY_BYTES`, measured encoded); the rest stay pending in
`Placement` and ride on the next answers. A container's own adjustment goes first; should even it not fit,
its pod's admission is rolled back and the event fails with ResourceExhausted.

What is decided is recorded before it is applied: an event that changed the node's allocations (an
admission or a release, never a container of an admitted pod) hands the whole state to the checkpoint
writer with the journal record of what it changed (`state.journal`: appended at once, the files written
within `FOLD_WITHIN_S` on the writer's thread), and every answer that applies decisions (CreateContainer,
UpdateContainer, StopContainer, Synchronize) waits until what was handed over is recorded, which the append
already did (until the files hold a first state to build on, the write itself), so a plugin killed at any
moment restarts from a state at least as new as what the runtime enforces. The notifications
(RunPodSandbox, StopPodSandbox, RemovePodSandbox) wait for nothing. A failed write is logged and retried at
the next event; the container is placed all the same (the kubelet would refuse the pod, but a plugin that
fails containers because its disk is full turns a degraded node into a broken one). Pod cgroups follow
the state (`agent.pod_cgroups`).

Each decision is logged once, as a sentence built from its fields (`podlevel.eventlog`), and reported to
the `Observer` (the metrics) where the kubelet counts it. The snapshot readers on other threads use
(`agent.snapshot`) is made when a reader asks for it after an event changed something it holds, not at
every event: it copies every table, which costs more the more containers the node runs. The handlers and
the snapshot's maker take one lock, so a reader sees the node between two events.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Concatenate, Final, ParamSpec, TypeVar

from podlevel.agent.events import Observer, error_type
from podlevel.agent.nri_messages import (
    by_settings,
    linux_cpu,
    observed_of,
    runtime_resources,
    sandbox_of,
    updates_of,
)
from podlevel.agent.placement import Placement
from podlevel.agent.pod_cgroups import PodCgroupSink
from podlevel.agent.records import Observed, RefusedSandbox, Sandbox, Settings, runtime_pod_key
from podlevel.agent.snapshot import NodeSnapshot
from podlevel.engine.cfs import quota_text
from podlevel.engine.cpuset import CPUSet
from podlevel.engine.errors import AdmissionError, InputError
from podlevel.engine.limits import shown
from podlevel.engine.manager import NodeState
from podlevel.eventlog import logger
from podlevel.nri import (
    MAX_REPLY_BYTES,
    Code,
    CreateResult,
    Handler,
    RpcError,
    RuntimeInfo,
    UpdateBatch,
    UpdateResult,
    Updates,
    api,
    field_size,
    updates_within,
)
from podlevel.state.engine_state import checkpoints_of
from podlevel.state.journal import delta_of, encode_record
from podlevel.state.store import StateDir
from podlevel.state.writer import CheckpointWriter

log = logger(__name__)

ADMISSION_WRITTEN_WITHIN_S: Final = 0.002
"""An admission at RunPodSandbox the journal could not record is written by then at the latest (the pod's
first CreateContainer, which waits for it, comes later: the kubelet pulls images in between), not while its
own answer is on its way: the write would take the interpreter from the answer."""
RELEASE_WRITTEN_WITHIN_S: Final = 0.1
"""A release the journal could not record is written by then at the latest, or with the next decision: a pod
that goes is often replaced at once, and one write of both serves them."""
REFUSED_SANDBOX_KEPT_S: Final = 300.0
"""How long a pod refused at its sandbox, on a runtime that removes the sandbox, stays listed as refused after
its last refusal. The kubelet tries a new sandbox while the pod exists: a failed pod sync is retried after
10 s (with up to half again of jitter), and never later than its sync frequency (1 minute by default) with
the same jitter allows; so a pod no longer tried (deleted, or bound elsewhere) leaves the list by then."""
REFUSED_SANDBOXES_KEPT: Final = 256
"""At most this many such pods are listed, the most recently refused."""
POD_CGROUP_WAIT_S: Final = 5.0
"""How long a container's creation waits for its pod's cgroup to be written before it goes on without (the
write is logged and retried as any failed one)."""


def _log_moved(groups: Mapping[Settings, list[str]]) -> None:
    if not groups or not log.isEnabledFor(logging.INFO):
        return
    for settings, ids in groups.items():
        shown = ", ".join(cid[:12] for cid in ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")
        log.info("updated {containers} containers ({ids}): {assignment} cpus={cpus}", containers=len(ids),
                 ids=shown, assignment=settings.assignment.value, cpus=settings.cpus)


def _key(pod: api.PodSandbox) -> str:
    return runtime_pod_key(pod.namespace, pod.name)


P = ParamSpec("P")
R = TypeVar("R")


def _locked(
    handler: Callable[Concatenate[PodLevelPlugin, P], R],
) -> Callable[Concatenate[PodLevelPlugin, P], R]:
    """A handler that runs holding the plugin's lock (see `PodLevelPlugin.snapshot`)."""

    @functools.wraps(handler)
    def locked(self: PodLevelPlugin, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with self._lock:
            return handler(self, *args, **kwargs)

    return locked


class PodLevelPlugin(Handler):
    """Places containers with the engine; see `agent.placement` for the rules."""

    def __init__(
        self,
        placement: Placement,
        *,
        state: StateDir | None = None,
        pod_cgroups: PodCgroupSink | None = None,
        observer: Observer | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.placement = placement
        self.clock = clock
        self.state = state
        self.pod_cgroups = pod_cgroups
        self.observer = observer or Observer()
        self._writer = None if state is None else CheckpointWriter(state, self._write_failed, self._written)
        self._submitted: NodeState = placement.state
        """The engine state last handed to the writer (state objects are immutable), which the next
        submission's journal record is taken against."""
        self._resubmit = False
        """The last write failed: the next `_commit` submits even an unchanged state."""
        self._save_error: str | None = None
        self._cgroups_paths: dict[str, str] = {}
        self._refusals: dict[str, str] = {}
        """sandbox id -> the last refusal of its pod, while the runtime keeps the sandbox."""
        self._refused_sandboxes: dict[str, RefusedSandbox] = {}
        """pod uid -> its last sandbox refused at RunPodSandbox where the runtime then removes it, oldest
        refusal first; dropped once the pod is admitted, or `REFUSED_SANDBOX_KEPT_S` after its refusal."""
        self._refuse_sandboxes = False
        self._push_released = False
        self.send_updates: Callable[[Updates], Awaitable[Sequence[api.ContainerUpdate]]] | None = None
        """The stub's `update_containers`, for the updates a release makes (see the module docstring)."""
        self._pushes: set[asyncio.Task[int]] = set()
        self._synchronized = False
        self._lock = threading.RLock()
        """Held by every handler while it changes the node, and by `snapshot` while it copies it."""
        self._snapshot = NodeSnapshot(placement.engine, placement.view(), decisions=placement.decisions)
        self._published = placement.generation
        """`placement.generation` when the snapshot was taken."""
        self._stale = False
        """Something the snapshot holds besides placement changed (checkpoint error, pod cgroup failures)."""
        self._cgroups_version = 0
        """`pod_cgroups.version` when the snapshot was taken."""

    @property
    def snapshot(self) -> NodeSnapshot:
        """The node as of the last event; a new snapshot when anything it holds changed since the last one
        was made, the same otherwise (never changed: see `agent.snapshot`)."""
        with self._lock:
            placement = self.placement
            cgroups = self.pod_cgroups
            cgroups_version = cgroups.version if cgroups is not None else 0
            self._expire_refused_sandboxes()
            if (placement.generation == self._published and not self._stale
                    and cgroups_version == self._cgroups_version):
                return self._snapshot
            self._published, self._stale = placement.generation, False
            self._cgroups_version = cgroups_version
            self._snapshot = NodeSnapshot(
                placement.engine,
                placement.view(),
                dict(self._cgroups_paths),
                dict(placement.pod_cgroups),
                cgroups.failed if cgroups is not None else {},
                dict(self._refusals),
                self._save_error,
                self._synchronized,
                self._snapshot.generation + 1,
                placement.decisions,
                dict(self._refused_sandboxes),
            )
            return self._snapshot

    def _expire_refused_sandboxes(self) -> None:
        horizon = self.clock() - REFUSED_SANDBOX_KEPT_S
        kept = self._refused_sandboxes
        while kept:
            oldest = next(iter(kept))
            if kept[oldest].at >= horizon:
                return
            del kept[oldest]
            self._stale = True

    @property
    def handler_lock(self) -> threading.RLock:
        """What every event handler holds while it changes the node (for `agent.drift`'s writes)."""
        return self._lock

    def applied(self, container_id: str) -> Settings | None:
        """What the container was last told (its settings as the runtime has them), under the lock; None when
        it is unknown or its update was deferred (no answer has carried it yet)."""
        with self._lock:
            if self.placement.is_unsent(container_id):
                return None
            return self.placement.applied.get(container_id)

    def _commit(self, *, force: bool = False, within: float = 0.0) -> None:
        """Hand the allocations to the checkpoint writer if they changed (to be written at once, or within
        `within` seconds), and hand the pod cgroups' changes to their writer. Answers that apply a decision
        call `_durable` before they leave."""
        current = self.placement.state
        if self._writer is not None and (force or self._resubmit or current is not self._submitted):
            before, self._submitted, self._resubmit = self._submitted, current, False
            self._writer.submit(*checkpoints_of(self.placement.engine, current), within=within,
                                record=lambda: encode_record(delta_of(before, current)))
        changed = self.placement.take_pod_cgroup_changes()  # taken even unused: the set would only grow
        cgroups = self.pod_cgroups
        if cgroups is not None and (changed or cgroups.pending):
            wanted = self.placement.pod_cgroups
            cgroups.submit({sandbox_id: wanted.get(sandbox_id) for sandbox_id in changed})

    def _pod_cgroup_written(self, sandbox_id: str) -> None:
        """Wait until the sandbox's pod cgroup holds what was decided (its bubble before any of its containers
        starts), or its write failed; at most `POD_CGROUP_WAIT_S`."""
        cgroups = self.pod_cgroups
        if cgroups is not None and not cgroups.wait(sandbox_id, POD_CGROUP_WAIT_S):
            log.warning("pod cgroup of sandbox {sandbox} not written within {seconds} s; its container is "
                        "created meanwhile", sandbox=sandbox_id, seconds=POD_CGROUP_WAIT_S)

    def _durable(self) -> None:
        """Wait until every decision so far is recorded (journaled, or written, or its write failed): the
        answer applies them."""
        if self._writer is not None:
            self._writer.wait()

    # `_write_failed` and `_written` run on the writer's (or the sync) thread and take no lock: an event
    # handler holds `_lock` while `_durable` waits for that very thread, so taking it here would deadlock.
    # They are safe without it because each sets `_stale` last, after the fields it changed, and `snapshot`
    # clears `_stale` before it reads them: a snapshot either sees the new values or is made again.
    # `_resubmit` is only ever set True here, which makes the next `_commit` write again; the worst a race
    # costs is one extra write.
    def _write_failed(self, err: Exception) -> None:
        """From the writer's thread: count, log a new error once, and write again at the next event."""
        self._resubmit = True
        self.observer.checkpoint_failed()
        if str(err) != self._save_error:
            path = self.state.path if self.state is not None else None
            log.error("checkpoint not written to {path}, will retry at the next event: {error}", path=path,
                      error=err)
            self._save_error, self._stale = str(err), True

    def _written(self) -> None:
        if self._save_error is not None:
            self._save_error, self._stale = None, True

    def close(self) -> None:
        """Write what is still pending; the plugin handles no event afterwards."""
        if self._writer is not None:
            self._writer.close()
        if self.pod_cgroups is not None:
            self.pod_cgroups.close()

    def configure(self, runtime: RuntimeInfo, config: str) -> None:
        self._refuse_sandboxes = runtime.rolls_back_refused_sandbox
        self._push_released = runtime.serves_unsolicited_updates
        refusals = "RunPodSandbox" if self._refuse_sandboxes else "the first CreateContainer"
        log.info("runtime {runtime} {version}; engine on {node}; pods are refused at {refusals}",
                 runtime=runtime.name, version=runtime.version,
                 node=self.placement.engine.topology.describe(), refusals=refusals)

    @_locked
    def synchronize(
        self, pods: Sequence[api.PodSandbox], containers: Sequence[api.Container]
    ) -> Updates:
        """Reconcile with everything the runtime runs. The cyclic garbage collector is paused meanwhile: the
        handler builds tens of thousands of objects that live on (the node's placement), none of them garbage,
        and the collector would walk them dozens of times (a quarter of a 2,000-container Synchronize)."""
        paused = gc.isenabled()
        gc.disable()
        try:
            return self._synchronize(pods, containers)
        finally:
            if paused:
                gc.enable()

    def _synchronize(
        self, pods: Sequence[api.PodSandbox], containers: Sequence[api.Container]
    ) -> Updates:
        live = (api.CONTAINER_CREATED, api.CONTAINER_RUNNING, api.CONTAINER_PAUSED)
        running = [c for c in containers if c.state in live]
        topology = self.placement.engine.topology
        cpus, nodes = topology.all_cpus, CPUSet(topology.numa_node_ids)
        current: list[Observed] = []
        unreadable: list[str] = []
        for container in running:
            seen, problem = observed_of(container, cpus, nodes)
            current.append(seen)
            if problem is not None:
                unreadable.append(f"container {shown(container.id, 64)}: {problem}")
        if unreadable:
            count, first = len(unreadable), unreadable[0]
            more = f" and {count - 1} more" if count > 1 else ""
            log.warning("ignoring the runtime's cpusets of {containers} containers, taken as unset: "
                        "{reason}{more}", containers=count, reason=first, more=more)
        self._cgroups_paths = {c.id: c.linux.cgroups_path for c in running}
        self._refusals = {}
        self._synchronized = True
        resynced = self.placement.synchronize([sandbox_of(p) for p in pods], current)
        resync = resynced.tally
        for sandbox_id, reason in resync.moved:
            log.warning("pod sandbox {sandbox} moved after resync: {reason}", sandbox=shown(sandbox_id),
                        reason=reason)
        for sandbox_id, reason in resynced.kept_out:
            log.warning("pod sandbox {sandbox} kept in the node shared pool after resync: {reason}",
                        sandbox=shown(sandbox_id), reason=reason)
        if resync.restored or resync.released:
            log.info("restored {restored} pods from the checkpoint, released {released} it held that are "
                     "gone", restored=resync.restored, released=resync.released)
        if resync.readopted:
            log.info("took back {readopted} pods the checkpoint did not hold, onto the CPUs they run on",
                     readopted=resync.readopted)
        log.info("synchronized {pods} pods, {containers} containers; {updates} updates", pods=len(pods),
                 containers=len(current), updates=len(resynced.updates))
        self._commit(force=True)
        self._durable()
        return self._fit(resynced.updates, MAX_REPLY_BYTES)[0]

    @_locked
    def run_pod_sandbox(self, pod: api.PodSandbox) -> None:
        """Admit the pod before any of its containers; it is recorded before the answer. A
        refusal fails the event where the runtime then shuts the sandbox down; elsewhere it answers nothing
        (see the module docstring) and the pod's first CreateContainer decides again, logs, counts and
        answers it."""
        sandbox = sandbox_of(pod)
        try:
            decision = self.placement.run_sandbox(sandbox)
        except (AdmissionError, InputError) as err:
            if not self._refuse_sandboxes:
                return
            refusal = self._refusal(pod, sandbox, err)
            self._keep_refused_sandbox(sandbox, refusal.message)
            raise refusal from None
        if self._refused_sandboxes.pop(sandbox.uid, None) is not None:
            self._stale = True
        if decision is not None:
            self.observer.admitted(self.placement.state, decision)
        self._commit(within=ADMISSION_WRITTEN_WITHIN_S)
        if decision is not None and log.isEnabledFor(logging.INFO):
            bubble = "none" if decision.bubble_cpus is None else str(decision.bubble_cpus)
            log.info("admitted {pod}: bubble {bubble}", pod=_key(pod), bubble=bubble)

    def _keep_refused_sandbox(self, sandbox: Sandbox, refusal: str) -> None:
        """Keep the pod's refused sandbox for the views: the runtime removes it, and the kubelet tries a new
        one while the pod exists."""
        kept = self._refused_sandboxes
        kept.pop(sandbox.uid, None)
        kept[sandbox.uid] = RefusedSandbox(sandbox, refusal, self.clock())
        if len(kept) > REFUSED_SANDBOXES_KEPT:
            del kept[next(iter(kept))]

    @_locked
    def create_container(self, pod: api.PodSandbox, container: api.Container) -> CreateResult:
        placement = self.placement
        # The record of a sandbox seen before: its fields are the runtime's for the sandbox's whole life.
        sandbox = placement.sandbox(pod.id) or sandbox_of(pod)
        name = shown(container.name)  # for log lines: the runtime's names are any text
        try:
            settings, changed, admitted = placement.create(
                sandbox, container.id, container.name, runtime_resources(container.linux.resources)
            )
        except (AdmissionError, InputError) as err:
            raise self._refusal(pod, sandbox, err, name) from None
        adjust = api.ContainerAdjustment()
        adjust.linux.resources.cpu.CopyFrom(linux_cpu(settings))
        room = MAX_REPLY_BYTES - field_size(adjust)
        if room < 0:
            placement.rollback_create()
            raise RpcError(Code.RESOURCE_EXHAUSTED, f"the adjustment of {name} takes "
                           f"{field_size(adjust)} bytes, over the {MAX_REPLY_BYTES}-byte answer limit")
        if admitted is not None:
            self.observer.admitted(placement.state, admitted)
        self._cgroups_paths[container.id] = container.linux.cgroups_path
        if self._refusals.pop(pod.id, None) is not None:
            self._stale = True
        updates, moved = self._fit(changed, room)
        self._commit()
        self._durable()
        self._pod_cgroup_written(pod.id)
        if log.isEnabledFor(logging.INFO):
            log.info(
                "placed {pod} container {container}: {assignment} cpus={cpus} mems={mems} quota={quota}",
                pod=_key(pod), container=name, assignment=settings.assignment.value, cpus=settings.cpus,
                mems=str(CPUSet(settings.mems)), quota=quota_text(settings.cpu_quota_us),
            )
        _log_moved(moved)
        return CreateResult(adjust=adjust, updates=updates)

    def _fit(self, changed: dict[str, Settings], room: int) -> tuple[UpdateBatch, dict[Settings, list[str]]]:
        """The updates of `changed` that fit in `room` bytes of an answer, and the containers they move
        grouped by their settings (for the log). The others are deferred to the next answers and dropped from
        `changed`, which then holds what the answer carries."""
        groups = by_settings(changed)
        updates = updates_of(groups)
        fitting = updates_within(updates, room)
        if fitting == len(updates):
            return updates, groups
        deferred = updates.container_ids[fitting:]
        for container_id in deferred:
            del changed[container_id]
        self.placement.defer(deferred)
        log.warning("answer carries {carried} of {updates} container updates (runtime message limit); "
                    "{deferred} wait for the next answers", carried=fitting, updates=len(updates),
                    deferred=len(deferred))
        return updates[:fitting], by_settings(changed)

    @_locked
    def update_container(
        self, pod: api.PodSandbox, container: api.Container, resources: api.LinuxResources
    ) -> UpdateResult:
        """Keep our placement through a resize or another agent's update: the runtime applies the last
        update for the target container as its new resources, so it carries the requested resources with
        our CPU fields laid over them."""
        changed = self.placement.take_pending_updates()
        # The container's own new settings, if the pool moved, go into its update below, not a second one.
        changed.pop(container.id, None)
        settings = self.placement.applied.get(container.id)
        own = None
        if settings is not None:
            own = api.ContainerUpdate(container_id=container.id)
            own.linux.resources.CopyFrom(resources)
            own.linux.resources.cpu.MergeFrom(linux_cpu(settings))
        updates, _ = self._fit(changed, MAX_REPLY_BYTES - (field_size(own) if own is not None else 0))
        self._commit()
        self._durable()
        return UpdateResult(updates=[*updates, own] if own is not None else updates)

    @_locked
    def stop_container(self, pod: api.PodSandbox, container: api.Container) -> Updates:
        updates, _ = self._fit(self.placement.take_pending_updates(), MAX_REPLY_BYTES)
        self._commit()
        self._durable()
        return updates

    def _refusal(
        self, pod: api.PodSandbox, sandbox: Sandbox, err: AdmissionError | InputError,
        container: str | None = None,
    ) -> RpcError:
        """Log, count and keep a refusal of the pod (at `container`'s creation, or at its sandbox's start);
        returns the error that fails the event."""
        where = {} if container is None else {"container": container}
        if isinstance(err, AdmissionError):
            refused = "refused {pod}: {error_type}: {reason}" if container is None else (
                "refused {pod} container {container}: {error_type}: {reason}")
            log.warning(refused, pod=_key(pod), error_type=err.type, resource=err.resource,
                        reason=err.message, **where)
            self.observer.refused(self.placement.is_pod_level(sandbox), err)
            text, code = f"{err.type}: {err.message}", Code.FAILED_PRECONDITION
        else:
            log.warning("bad pod shape for {pod}: {error}", pod=_key(pod), error=err,
                        error_type=error_type(err), rule=err.rule, reason=err.message, **where)
            self.observer.refused(False, err)
            text, code = str(err), Code.INVALID_ARGUMENT
        self._refusals[pod.id] = text
        self._stale = True
        return RpcError(code, text)

    @_locked
    def remove_container(self, pod: api.PodSandbox, container: api.Container) -> None:
        self.placement.remove_container(container.id)
        self._cgroups_paths.pop(container.id, None)

    @_locked
    def stop_pod_sandbox(self, pod: api.PodSandbox) -> None:
        released = self._forget(pod.id)
        self._commit(within=RELEASE_WRITTEN_WITHIN_S)
        if released:
            log.info("released {pod}", pod=_key(pod))
            if self._push_released and self.send_updates is not None:
                task = asyncio.get_running_loop().create_task(self.push_pending())
                self._pushes.add(task)
                task.add_done_callback(self._pushes.discard)

    async def pushes_done(self) -> list[int]:
        """Wait for the release pushes in flight; how many containers each moved."""
        return list(await asyncio.gather(*self._pushes))

    async def push_pending(self) -> int:
        """Send the pending updates in an UpdateContainers call of the plugin's own, outside any handler;
        returns how many containers it moved. What the runtime did not take stays pending for the next
        answer."""
        sender = self.send_updates
        if sender is None:
            return 0
        with self._lock:
            changed = self.placement.take_pending_updates()
            updates, groups = self._fit(changed, MAX_REPLY_BYTES)
            self._commit()
            self._durable()
        if not changed:
            return 0
        try:
            failed = await sender(updates)
        except RpcError as err:
            with self._lock:
                self.placement.defer(changed)
            log.warning("freed CPUs wait for the next answer: UpdateContainers failed: {error}", error=err)
            return 0
        if failed:
            with self._lock:
                self.placement.defer(u.container_id for u in failed)
        moved = len(changed) - len(failed)
        log.info("updated {count} containers after a release: {settings}", count=moved,
                 settings="; ".join(f"{s.assignment.value} cpus={s.cpus}" for s in groups))
        return moved

    @_locked
    def remove_pod_sandbox(self, pod: api.PodSandbox) -> None:
        self._forget(pod.id)
        self._commit(within=RELEASE_WRITTEN_WITHIN_S)

    def _forget(self, sandbox_id: str) -> bool:
        """Forget a sandbox and its containers; whether it held an admitted pod."""
        for container_id in self.placement.containers_of(sandbox_id):
            self._cgroups_paths.pop(container_id, None)
        if self._refusals.pop(sandbox_id, None) is not None:
            self._stale = True
        return self.placement.remove_sandbox(sandbox_id)
