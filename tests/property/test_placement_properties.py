"""Invariants of the agent's Placement over random pods and random create / remove / restart sequences.

A restart is a new Placement that learns the node only from what the runtime shows (each container's
cpuset, memory nodes and quota, listed in a random order) — the plugin has no checkpoint — and must end
with the same allocations the live one had. A restart from both checkpoints, with some pods stopped and a
node's reserved memory grown, keeps every pod's recorded memory blocks unless it reports the pod moved,
charges each block once, and comes out the same every time.

When the node shared pool moves, the updates Placement hands out from its groups of pool-following
containers must be exactly those a brute-force reference gives: every tracked container whose `desired`
settings differ from what the runtime was last told (or whose update was deferred), recomputed through the
public methods after each event.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from podlevel.agent.placement import Placed, Placement
from podlevel.agent.records import Observed, Sandbox, Settings
from podlevel.agent.resync import Resynced
from podlevel.engine.cpuset import CPUSet
from podlevel.engine.errors import AdmissionError, InputError
from podlevel.engine.manager import Assignment
from podlevel.engine.pod import Pod
from podlevel.engine.restore import Checkpointed
from podlevel.engine.topology_manager import Scope, TopologyPolicyName
from podlevel.podspec.manifest import SHAPE_ANNOTATION, to_annotation
from podlevel.podspec.runtime import RuntimeResources, sandbox_resources
from support.builders import GI, MI, app, burstable, guaranteed, new_engine, pod, sidecar
from support.fuzzing import fuzz_settings
from support.memory_state import check_memory_state


@st.composite
def pods(draw: st.DrawFn, index: int) -> Pod | None:
    """A bubble with a slice and a pod-shared sidecar, a classic Guaranteed pod, or unmanaged (None)."""
    kind = draw(st.sampled_from(["bubble", "classic", "unmanaged"]))
    if kind == "unmanaged":
        return None
    if kind == "bubble":
        budget = draw(st.integers(2, 5))
        exclusive = draw(st.integers(1, budget - 1))
        return pod(
            f"p{index}",
            sidecar("log"),
            app("app", guaranteed(exclusive * 1000, 256 * MI)),
            budget=guaranteed(budget * 1000, 512 * MI),
            uid=f"uid-{index}",
        )
    cpus = draw(st.integers(1, 3))
    return pod(f"p{index}", app("app", guaranteed(cpus * 1000, 256 * MI)), uid=f"uid-{index}")


def sandbox(index: int, shape: Pod | None) -> Sandbox:
    annotations = {SHAPE_ANNOTATION: to_annotation(shape)} if shape else {}
    sent = sandbox_resources(shape) if shape else RuntimeResources()
    return Sandbox(f"sb-{index}", f"uid-{index}", f"p{index}", "default", annotations, sent)


def _holding(container_id: str, sandbox_id: str, name: str, settings: Settings) -> Observed:
    """A container as Synchronize reports it, holding `settings`."""
    return Observed(container_id, sandbox_id, name, settings.cpus, settings.mems, settings.cpu_quota_us)


def check(placement: Placement) -> None:
    """Every container holds what it should; no exclusive CPU is in two pods; the node pool is shared."""
    placement.take_pending_updates()
    owners: dict[int, str] = {}
    pool = placement.engine.node_shared_pool(placement.state)
    for cid in placement.container_ids():
        settings = placement.applied[cid]
        assert settings == placement.desired(cid)
        if settings.assignment.exclusive:
            owner = cid.split("/")[0]
            for cpu in settings.cpus:
                held_by = owners.setdefault(cpu, owner)
                assert held_by == owner, f"CPU {cpu} exclusive in {owner} and {held_by}"
        elif settings.assignment is Assignment.NODE_SHARED:
            assert settings.cpus == pool
    assert pool.is_disjoint(CPUSet([c for c in owners]))


@settings(deadline=None, max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_sequences_and_restarts(data: st.DataObject) -> None:
    scope = data.draw(st.sampled_from(list(Scope)))
    live = Placement(new_engine(scope=scope))
    running: dict[int, tuple[Sandbox, Pod | None]] = {}
    partial: set[str] = set()
    """Pods some of whose containers exited: the runtime shows less than their bubble."""
    for step in range(data.draw(st.integers(1, 16))):
        action = data.draw(st.sampled_from(["create", "create", "remove", "restart"]))
        if action == "create":
            drawn = data.draw(pods(step))
            box = sandbox(step, drawn)
            names = [c.name for c in drawn.all_containers] if drawn else ["app"]
            before = (live.state, dict(live.applied), live.container_ids())
            try:
                for name in names:
                    live.create(box, f"p{step}/{name}", name)
            except AdmissionError:
                assert names.index(name) == 0, "a pod is refused at its first container or not at all"
                assert (live.state, dict(live.applied), live.container_ids()) == before
                continue
            running[step] = (box, drawn)
        elif action == "remove" and running:
            index = data.draw(st.sampled_from(sorted(running)))
            live.remove_sandbox(running.pop(index)[0].id)
        elif action == "restart":
            live.take_pending_updates()
            rows = [
                _holding(cid, f"sb-{cid.split('/')[0][1:]}", cid.split("/")[1], s)
                for cid, s in live.applied.items()
            ]
            # Some sidecars may have exited: the runtime no longer lists them, so those pods show the
            # runtime less than their whole bubble. Pods shown whole must still not move (the node shared
            # pool may: it gives way where a pod shown in part lands).
            sidecars = [r.container_id for r in rows if r.name == "log"] or [""]
            gone = data.draw(st.sets(st.sampled_from(sidecars)))
            rows = data.draw(st.permutations([r for r in rows if r.container_id not in gone]))
            partial |= {cid.split("/")[0] for cid in gone if cid}
            sandboxes = data.draw(st.permutations([box for box, _ in running.values()]))
            restarted = Placement(new_engine(scope=scope))
            resynced = restarted.synchronize(sandboxes, rows)
            updates, refused = resynced.updates, resynced.kept_out
            assert refused == []
            whole = [
                r.container_id for r in rows
                if r.container_id.split("/")[0] not in partial
                and live.applied[r.container_id].assignment is not Assignment.NODE_SHARED
            ]
            assert not updates.keys() & set(whole), "a restart moves no pod the runtime shows whole"
            assert all(restarted.applied[cid] == live.applied[cid] for cid in whole)
            if not partial:
                assert restarted.state.cpu.pod_entries == live.state.cpu.pod_entries
                assert restarted.state.cpu.default == live.state.cpu.default
            event(f"restart with {len(running)} pods, {min(len(partial), 1)}+ shown in part")
            live = restarted
            for cid in gone:
                live.remove_container(cid)
        check(live)


# -- handing out updates when the node shared pool moves -------------------------------------------------


@st.composite
def any_pods(draw: st.DrawFn, index: int) -> Pod | None:
    """`pods`, or a managed pod outside any bubble without CPUs of its own (it follows the pool)."""
    if draw(st.booleans()):
        return draw(pods(index))
    return pod(f"p{index}", app("app", burstable(draw(st.integers(100, 900)))), uid=f"uid-{index}")


class Step(NamedTuple):
    """One runtime event, with what the reference needs to know of it."""

    kind: str
    run: Callable[[Placement], object]
    container_id: str = ""
    """The container a `create` places."""
    deferred: frozenset[str] = frozenset()


def events(data: st.DataObject, step: int, live: Placement, boxes: dict[str, tuple[Sandbox, Pod | None]],
           handed: Mapping[str, Settings]) -> list[Step]:
    """One runtime event (two for a restart, a create and its rollback), drawn from what `live` tracks;
    `boxes` are the sandboxes the runtime runs, kept up to date; `handed` the updates last handed out."""
    kinds = ["run", "create", "create", "restart", "stop", "defer", "pending", "sync"]
    action = data.draw(st.sampled_from(kinds))
    view = live.view()
    tracked = live.container_ids()
    if action == "run" and boxes and data.draw(st.booleans()):
        box, _ = boxes[data.draw(st.sampled_from(sorted(boxes)))]
        return [Step("run", lambda p: p.run_sandbox(box))]  # the runtime starts it again
    if action == "run" or (action == "create" and (not boxes or data.draw(st.booleans()))):
        shape = data.draw(any_pods(step))
        box = sandbox(step, shape)
        boxes[box.id] = (box, shape)
        if action == "run":
            return [Step("run", lambda p: p.run_sandbox(box))]
    if action == "create":
        # Often in a pod a Synchronize refused: admitted now, its running containers change group.
        refused = sorted(view.kept_out & boxes.keys())
        box, shape = boxes[data.draw(st.sampled_from(refused or sorted(boxes)))]
        names = [c.name for c in shape.all_containers] if shape else ["app"]
        name = data.draw(st.sampled_from([*names, "debug"]))  # a debug container is in no shape
        again = [cid for cid in live.containers_of(box.id) if cid.split("/")[1] == name]
        fresh = not again or data.draw(st.booleans())
        cid = f"{box.name}/{name}/{step}" if fresh else data.draw(st.sampled_from(again))
        created = [Step("create", lambda p: p.create(box, cid, name), cid)]
        if data.draw(st.booleans()):
            return [*created, Step("rollback", lambda p: p.rollback_create())]
        return created
    if action == "restart" and tracked:
        cid = data.draw(st.sampled_from(tracked))
        removed = [Step("remove", lambda p: p.remove_container(cid))]
        sandbox_id, name = view.containers[cid]
        if sandbox_id not in boxes or data.draw(st.booleans()):
            return removed
        box = boxes[sandbox_id][0]
        again_id = f"{box.name}/{name}/{step}"
        return [*removed, Step("create", lambda p: p.create(box, again_id, name), again_id)]
    if action == "stop" and boxes:
        admitted = sorted(boxes.keys() - view.kept_out)  # room for the refused ones
        sandbox_id = data.draw(st.sampled_from(admitted or sorted(boxes)))
        del boxes[sandbox_id]
        return [Step("stop", lambda p: p.remove_sandbox(sandbox_id))]
    if action == "defer" and handed:
        deferred = frozenset(data.draw(st.sets(st.sampled_from(sorted(handed)))))
        return [Step("defer", lambda p: p.defer(deferred), deferred=deferred)]
    if action == "sync":
        # The runtime lists what it runs, and pods the plugin never saw (started while it was down): those
        # that no longer fit are refused and left in the node shared pool.
        rows = [_holding(cid, *view.containers[cid], s) for cid, s in view.applied.items()
                if view.containers[cid][0] in boxes]
        for n in range(data.draw(st.integers(0, 4))):
            index = 100 + step * 10 + n
            shape = data.draw(pods(index))
            boxes[f"sb-{index}"] = (sandbox(index, shape), shape)
            rows.append(Observed(f"p{index}/app/{step}", f"sb-{index}", "app"))
        listed = [box for box, _ in boxes.values()]
        return [Step("sync", lambda p: p.synchronize(listed, rows))]
    return [Step("pending", lambda p: p.take_pending_updates())]


def outcome(step: Step, placement: Placement) -> object:
    try:
        return step.run(placement)
    except (AdmissionError, InputError) as err:
        return type(err)


def differs(seen: Observed, settings: Settings) -> bool:
    """What a Synchronize counts as off: CPUs, memory nodes when shown, a quota the plugin sets."""
    return (seen.cpus != settings.cpus or (seen.mems is not None and seen.mems != settings.mems)
            or (settings.cpu_quota_us is not None and seen.cpu_quota_us != settings.cpu_quota_us))


class Runtime:
    """What the runtime was told, and the reference for what the next answer must hand out: every tracked
    container whose `desired` settings differ from what it was told, or whose update was deferred."""

    def __init__(self) -> None:
        self.told: dict[str, Settings] = {}
        self.deferred: set[str] = set()
        self._before_create: tuple[dict[str, Settings], set[str]] = ({}, set())

    def due(self, placement: Placement, fresh: str = "") -> dict[str, Settings]:
        desired = {cid: placement.desired(cid) for cid in placement.container_ids() if cid != fresh}
        return {cid: s for cid, s in desired.items() if cid in self.deferred or self.told.get(cid) != s}

    def follow(self, step: Step, result: object, placement: Placement) -> None:
        """Check one event's hand-out against the reference, then record what the runtime now holds."""
        handed: dict[str, Settings] | None = None
        if step.kind == "create":
            self._before_create = (dict(self.told), set(self.deferred))
        if step.kind == "rollback":
            self.told, self.deferred = self._before_create
        elif step.kind == "create" and isinstance(result, Placed):
            assert result.changed == self.due(placement, step.container_id)
            self.told[step.container_id] = result.settings
            self.deferred.discard(step.container_id)
            handed = result.changed
        elif step.kind == "pending":
            assert result == self.due(placement)
            handed = result
        elif step.kind == "sync":
            assert isinstance(result, Resynced)
            updates = result.updates
            self.deferred = set()
            rows = {cid: self.told.get(cid) for cid in placement.container_ids()}
            expected = {cid: placement.desired(cid) for cid, told in rows.items()
                        if told is None or differs(_holding(cid, "", "", told),
                                                   placement.desired(cid))}
            assert updates == expected
            self.told = {cid: told for cid, told in rows.items() if told is not None}
            handed = updates
        elif step.kind == "defer":
            self.deferred |= step.deferred & set(placement.container_ids())
        if handed:
            self.told.update(handed)
            self.deferred -= handed.keys()
        tracked = set(placement.container_ids())
        self.told = {cid: s for cid, s in self.told.items() if cid in tracked}
        self.deferred &= tracked
        if step.kind == "sync":
            # What the runtime shows and was not told again it keeps; the plugin recorded its desired state.
            self.told = {cid: placement.desired(cid) for cid in tracked}
        assert placement.applied == self.told


@fuzz_settings(300)
@given(st.data())
def test_groups_hand_out_what_recomputing_every_container_gives(data: st.DataObject) -> None:
    """Random runtime events through a Placement: after each, what it hands out is exactly what comparing
    every container's `desired` settings with what the runtime was told gives, and `applied` is that."""
    scope = data.draw(st.sampled_from(list(Scope)))
    reserved = data.draw(st.sampled_from(["0,8", "0-2,8-10"]))  # a crowded node refuses more pods
    live = Placement(new_engine(reserved, scope=scope))
    runtime = Runtime()
    boxes: dict[str, tuple[Sandbox, Pod | None]] = {}
    handed: dict[str, Settings] = {}
    for step in range(data.draw(st.integers(1, 24))):
        for event_ in events(data, step, live, boxes, handed):
            if live.view().kept_out:
                event("a pod a Synchronize refused runs")
            result = outcome(event_, live)
            runtime.follow(event_, result, live)
            # A pod holds its allocations exactly while a sandbox of it is known (undone creates included).
            assert set(live.view().admitted.values()) == set(live.state.pods)
            handed = handed_out(result) or handed
            if len(handed_out(result) or ()) > 1:
                event("an event moves several containers")


def handed_out(result: object) -> dict[str, Settings] | None:
    """The updates an event's result hands out (`create`, `take_pending_updates` and `synchronize` do)."""
    if isinstance(result, Placed):
        return result.changed
    if isinstance(result, dict):
        return result
    if isinstance(result, Resynced):
        return result.updates
    return None


@settings(deadline=None, max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_restart_from_both_checkpoints_keeps_the_memory_that_still_fits(data: st.DataObject) -> None:
    scope = data.draw(st.sampled_from(list(Scope)))
    policy = data.draw(st.sampled_from(list(TopologyPolicyName)))
    live = Placement(new_engine(scope=scope, topology_policy=policy))
    running: list[tuple[Sandbox, Pod]] = []
    for step in range(data.draw(st.integers(1, 12))):
        drawn = data.draw(pods(step))
        if drawn is None:
            continue
        box = sandbox(step, drawn)
        try:
            for container in drawn.all_containers:
                live.create(box, f"p{step}/{container.name}", container.name)
        except AdmissionError:
            continue
        running.append((box, drawn))
    stopped = data.draw(st.sets(st.sampled_from([box.id for box, _ in running]))) if running else set()
    shown = [(box, shape) for box, shape in running if box.id not in stopped]
    rows = [Observed(f"p{box.id[3:]}/{c.name}", box.id, c.name) for box, shape in shown
            for c in shape.all_containers]
    # The memory a node keeps free of reservation now: all of it (as before), or less than the pods held.
    node, left = data.draw(st.sampled_from([0, 1])), data.draw(st.sampled_from([None, 768 * MI, 256 * MI]))
    reserved = {0: {"memory": 100 * MI}}
    if left is not None:
        reserved[node] = {"memory": 16 * GI - left}
    engine = new_engine(scope=scope, topology_policy=policy, reserved_memory=reserved)
    recorded = Checkpointed(live.state.cpu, live.state.memory)

    restarted = Placement(engine, recorded=recorded)
    resynced = restarted.synchronize([box for box, _ in shown], rows)
    refused = resynced.kept_out

    memory = restarted.state.memory
    assert engine.memory_policy is not None
    check_memory_state(engine.memory_policy, memory)
    moved = dict(resynced.tally.moved)
    for box, _ in shown:
        if box.id not in moved and box.id not in dict(refused):
            assert memory.entries.get(box.uid) == live.state.memory.entries.get(box.uid)
            assert memory.pod_entries.get(box.uid) == live.state.memory.pod_entries.get(box.uid)
    if left is None:
        assert (moved, refused) == ({}, []), "under the same settings every pod keeps what it had"
    again = Placement(engine, recorded=recorded)
    again_resynced = again.synchronize([box for box, _ in shown], rows)
    assert again.state == restarted.state and again_resynced.tally == resynced.tally
    event(f"{len(shown)} pods shown, {len(moved)} moved, {len(refused)} refused")
