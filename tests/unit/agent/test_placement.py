"""agent.placement with a real Engine on described nodes: managed pods get the engine's decisions, everything
else follows the node shared pool, refusals change nothing, restarts keep allocations, Synchronize rebuilds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import pytest

from podlevel.agent.placement import Placement
from podlevel.agent.records import Observed, Sandbox, Settings
from podlevel.engine.cfs import CFS_PERIOD_US, UNLIMITED_QUOTA
from podlevel.engine.cpuset import CPUSet
from podlevel.engine.errors import AdmissionError, EmptyPodSharedPoolError, InputError, TopologyAffinityError
from podlevel.engine.manager import Assignment
from podlevel.engine.pod import Container, ContainerKind, Pod, Resources
from podlevel.podspec.manifest import SHAPE_ANNOTATION
from podlevel.podspec.runtime import RuntimeResources, container_resources, linux_resources, sandbox_resources
from podlevel.podspec.shape_check import claimed_container, claimed_sandbox
from support.builders import GI, MI, app, burstable, fast_path, guaranteed, new_engine
from support.builders import pod as make_pod
from support.kubelet_cri_cases import KUBELET_CASES, Case, pod_of
from support.placements import classic, holding, sandbox_of, start, unmanaged

ALL_CPUS = CPUSet.parse("0-15")
BOTH_NODES = (0, 1)


def shared_only() -> Pod:
    """A 3-CPU bubble whose containers are all fractional: every one runs in the pod shared pool."""
    return Pod(
        uid="uid-shared",
        name="shared",
        resources=guaranteed(3000, 512 * MI),
        containers=(Container("a", resources=burstable(500)), Container("b")),
    )


def classic_burstable(name: str = "burstable") -> Pod:
    """No pod-level resources, Burstable: no exclusive CPUs, the node shared pool."""
    return Pod(uid=f"uid-{name}", name=name, containers=(Container("burst", resources=burstable(250)),))


def empty_shared_pool() -> Pod:
    """The app's slice takes the whole budget while the sidecar needs the pod shared pool."""
    return Pod(
        uid="uid-no-room",
        name="no-room",
        resources=guaranteed(2000, 512 * MI),
        init_containers=(Container("log", ContainerKind.SIDECAR),),
        containers=(Container("app", resources=guaranteed(2000, 256 * MI)),),
    )


def too_big() -> Pod:
    """9 CPUs fit on neither NUMA node (6 and 8 assignable): single-numa-node refuses the bubble."""
    return Pod(
        uid="uid-big",
        name="big",
        resources=guaranteed(9000, 512 * MI),
        containers=(Container("app", resources=burstable(500)),),
    )


def snapshot(placement: Placement) -> tuple[object, ...]:
    return placement.state, dict(placement.applied), placement.container_ids()


# -- a managed pod's containers get the engine's decisions --------------------------------------------------


@dataclass(frozen=True)
class Expected:
    pod: Callable[[], Pod]
    container: str
    assignment: Assignment
    quota: int | None
    cpus: int
    """How many CPUs the container's cpuset holds."""
    single_node: bool
    """cpus and mems on one NUMA node (the engine's single-numa-node alignment)."""


DECISIONS = {
    "bubble app gets its exclusive slice, quota off": Expected(
        fast_path, "app", Assignment.POD_EXCLUSIVE, UNLIMITED_QUOTA, 2, True
    ),
    "bubble sidecar gets the pod shared pool, quota = budget - slices": Expected(
        fast_path, "log", Assignment.POD_SHARED, 2 * CFS_PERIOD_US, 2, True
    ),
    "fractional container in a bubble, quota = budget": Expected(
        shared_only, "a", Assignment.POD_SHARED, 3 * CFS_PERIOD_US, 3, True
    ),
    "empty container in a bubble, quota = budget": Expected(
        shared_only, "b", Assignment.POD_SHARED, 3 * CFS_PERIOD_US, 3, True
    ),
    "classic Guaranteed container gets node CPUs, quota off": Expected(
        classic, "exclusive", Assignment.NODE_EXCLUSIVE, UNLIMITED_QUOTA, 2, True
    ),
    "classic burstable container stays in the node shared pool": Expected(
        classic_burstable, "burst", Assignment.NODE_SHARED, None, 16, False
    ),
}


@pytest.mark.parametrize("case", DECISIONS.values(), ids=DECISIONS.keys())
def test_managed_pod_containers_get_the_engine_decision(case: Expected) -> None:
    pod = case.pod()
    placement = Placement(new_engine())
    settings = start(placement, pod)[case.container]

    assert (settings.assignment, settings.cpu_quota_us, len(settings.cpus)) == (
        case.assignment, case.quota, case.cpus
    )
    assert settings.cpu_period_us == CFS_PERIOD_US
    topology = placement.engine.topology
    if case.single_node:
        assert settings.mems == topology.numa_nodes_of(settings.cpus)
        assert len(settings.mems) == 1
    else:
        assert settings.mems == BOTH_NODES
    # What a separate engine decides for the same pod on an empty node is what the container got.
    engine = new_engine()
    _, decision = engine.admit(engine.initial_state(), pod)
    [expected] = [c for c in decision.containers if c.name == case.container]
    assert (settings.cpus, settings.mems) == (expected.cpus, expected.mems)
    if decision.bubble_cpus is not None:
        assert settings.cpus.is_subset(decision.bubble_cpus)


def test_exclusive_slice_and_pod_shared_pool_split_the_bubble() -> None:
    placement = Placement(new_engine())
    settings = start(placement, fast_path())
    app, log = settings["app"], settings["log"]
    assert app.cpus.is_disjoint(log.cpus)
    bubble = placement.engine.decision(placement.state, "uid-fast").bubble_cpus
    assert app.cpus | log.cpus == bubble
    assert app.mems == log.mems
    assert placement.applied == {"fast-app": app, "fast-log": log}


# -- unmanaged containers follow the node shared pool ------------------------------------------------------


def test_unmanaged_container_follows_the_node_shared_pool() -> None:
    placement = Placement(new_engine())
    web, others, _ = placement.create(unmanaged(), "web-1", "server")
    assert web == Settings(ALL_CPUS, BOTH_NODES, None, CFS_PERIOD_US, Assignment.NODE_SHARED)
    assert others == {}

    pod = fast_path()
    _, moved, _ = placement.create(sandbox_of(pod), "fast-app", "app")
    bubble = placement.engine.decision(placement.state, pod.uid).bubble_cpus
    assert bubble is not None and len(bubble) == 4
    shrunk = Settings(ALL_CPUS - bubble, BOTH_NODES, None, CFS_PERIOD_US, Assignment.NODE_SHARED)
    assert moved == {"web-1": shrunk}
    assert placement.applied["web-1"] == shrunk
    # The second container of the same pod changes nothing for the others.
    _, moved, _ = placement.create(sandbox_of(pod), "fast-log", "log")
    assert moved == {}
    assert placement.take_pending_updates() == {}

    placement.remove_sandbox("sb-fast")
    assert placement.container_ids() == ["web-1"]
    assert pod.uid not in placement.state.pods
    assert placement.take_pending_updates() == {"web-1": web}
    assert placement.take_pending_updates() == {}, "updates are handed out once"


def test_pool_back_where_it_was_before_anyone_was_told_moves_nobody() -> None:
    """A pod replaced by one of the same shape between two answers: its bubble lands where the old one was."""
    placement = Placement(new_engine())
    placement.create(unmanaged(), "web-1", "server")
    start(placement, fast_path("old"))
    placement.remove_sandbox("sb-old")
    settings, moved, _ = placement.create(sandbox_of(fast_path("new")), "new-app", "app")
    assert moved == {}
    assert placement.take_pending_updates() == {}
    bubble = placement.engine.decision(placement.state, "uid-new").bubble_cpus
    assert bubble is not None and placement.applied["web-1"].cpus == ALL_CPUS - bubble
    assert placement.applied["new-app"] == settings


def test_unmanaged_container_is_never_admitted() -> None:
    placement = Placement(new_engine())
    before = placement.state
    placement.create(unmanaged(), "web-1", "server")
    assert placement.state is before


def test_classic_pod_node_shared_container_follows_later_bubbles() -> None:
    placement = Placement(new_engine())
    start(placement, classic())
    first = start(placement, classic_burstable())
    _, moved, _ = placement.create(sandbox_of(fast_path()), "fast-app", "app")
    assert set(moved) == {"burstable-burst"}
    assert moved["burstable-burst"].cpus == placement.engine.node_shared_pool(placement.state)
    assert moved["burstable-burst"].assignment is Assignment.NODE_SHARED
    assert len(moved["burstable-burst"].cpus) == len(first["burst"].cpus) - 4 == 16 - 2 - 4


# -- refused pods change nothing ---------------------------------------------------------------------------

REFUSALS: dict[str, tuple[Callable[[], Pod], type[AdmissionError], str]] = {
    "empty pod shared pool": (empty_shared_pool, EmptyPodSharedPoolError, "EmptyPodSharedPoolError"),
    "no NUMA node fits the bubble": (too_big, TopologyAffinityError, "TopologyAffinityError"),
}


def web_and_a_bubble() -> Placement:
    """web in the node shared pool, fast-path's bubble beside it."""
    placement = Placement(new_engine())
    placement.create(unmanaged(), "web-1", "server")
    start(placement, fast_path())
    return placement


@pytest.mark.parametrize(("make", "error", "type_"), REFUSALS.values(), ids=REFUSALS.keys())
def test_refused_pod_leaves_everything_as_it_was(
    make: Callable[[], Pod], error: type[AdmissionError], type_: str
) -> None:
    placement = web_and_a_bubble()
    before = snapshot(placement)
    pod = make()

    with pytest.raises(error) as raised:
        placement.create(sandbox_of(pod), f"{pod.name}-app", "app")

    assert raised.value.type == type_
    assert snapshot(placement) == before
    assert placement.take_pending_updates() == {}
    # Nothing was reserved: a pod that fits in what is left is still admitted beside the first bubble.
    placement.create(sandbox_of(shared_only()), "shared-a", "a")
    engine = placement.engine
    bubbles = [engine.decision(placement.state, uid).bubble_cpus for uid in ("uid-fast", "uid-shared")]
    assert bubbles[0] is not None and bubbles[1] is not None and bubbles[0].is_disjoint(bubbles[1])


def test_refused_pod_runtime_undo_events_are_harmless() -> None:
    """After a refused CreateContainer the runtime sends StopContainer/RemoveContainer, then stops the pod."""
    placement = Placement(new_engine())
    start(placement, fast_path())
    before = snapshot(placement)
    with pytest.raises(EmptyPodSharedPoolError):
        placement.create(sandbox_of(empty_shared_pool()), "no-room-log", "log")
    placement.remove_container("no-room-log")
    placement.remove_sandbox("sb-no-room")
    assert snapshot(placement) == before


def test_container_missing_from_the_shape_runs_in_the_node_shared_pool() -> None:
    """Ephemeral and debug containers are never in the partition (KEP-5526): the node pool, no refusal."""
    placement = Placement(new_engine())
    start(placement, fast_path())
    settings, _, _ = placement.create(sandbox_of(fast_path()), "fast-debug", "debug")
    assert settings.assignment is Assignment.NODE_SHARED
    assert settings.cpus == placement.engine.node_shared_pool(placement.state)
    assert settings.cpu_quota_us is None


def test_shape_claiming_more_than_the_runtime_carries_is_an_input_error() -> None:
    """A pod author cannot claim a bubble or a slice the kubelet (and the scheduler) never accounted for."""
    placement = Placement(new_engine())
    placement.create(unmanaged(), "web-1", "server")
    before = snapshot(placement)
    pod = fast_path()
    honest = linux_resources(pod.resources, 100_000)
    two_cpus_less = replace(honest, cpu_quota=honest.cpu_quota - 200_000)
    with pytest.raises(InputError) as raised:
        placement.create(replace(sandbox_of(pod), resources=two_cpus_less), "fast-app", "app")
    assert raised.value.rule == "pod shape"
    assert SHAPE_ANNOTATION in str(raised.value) and "cpu_quota" in str(raised.value)
    assert f"{honest.cpu_quota} us" in str(raised.value)
    assert f"{two_cpus_less.cpu_quota} us" in str(raised.value)
    assert snapshot(placement) == before

    app = pod.container("app")
    assert app is not None
    lying = replace(linux_resources(app.resources, 100_000), memory_limit=1)
    with pytest.raises(InputError, match=r"container app: .* memory_limit"):
        placement.create(replace(sandbox_of(pod), resources=honest), "fast-app", "app", lying)
    assert snapshot(placement) == before

    truthful = linux_resources(app.resources, 100_000)
    settings, _, _ = placement.create(replace(sandbox_of(pod), resources=honest), "fast-app", "app", truthful)
    assert settings.assignment is Assignment.POD_EXCLUSIVE


@pytest.mark.parametrize("case", KUBELET_CASES.values(), ids=KUBELET_CASES.keys())
def test_pod_as_a_kubelet_sends_it_is_admitted(case: Case) -> None:
    """Whatever the kubelet derives (pod-level limits handed to bare containers, partial pod-level budgets,
    partial container limits summed on the sandbox), a truthful shape passes the check."""
    pod = pod_of(case.spec)
    placement = Placement(new_engine())
    sandbox = replace(sandbox_of(pod), resources=sandbox_resources(pod))
    for container in pod.all_containers:
        sent = container_resources(pod, container)
        settings, _, _ = placement.create(sandbox, f"{pod.name}-{container.name}", container.name, sent)
        assert settings.cpus
    assert pod.uid in placement.state.pods


@pytest.mark.parametrize("case", KUBELET_CASES.values(), ids=KUBELET_CASES.keys())
def test_pod_whose_runtime_values_differ_from_its_shape_is_refused(case: Case) -> None:
    """Every value the check compares has teeth: one unit off on the sandbox, or on a container that sets
    its own CPU and memory limits, and the pod is refused before anything is reserved."""
    pod = pod_of(case.spec)
    honest = sandbox_resources(pod)
    claimed = claimed_sandbox(pod, 100_000)
    compared = [f for f in ("cpu_shares", "cpu_quota", "memory_limit") if getattr(claimed, f)]
    first = pod.all_containers[0]
    for field_name in compared:
        placement = Placement(new_engine())
        off = replace(honest, **{field_name: getattr(honest, field_name) + 1})
        with pytest.raises(InputError, match=rf"pod default/p: .* {field_name}"):
            placement.create(replace(sandbox_of(pod), resources=off), "p-first", first.name)
        assert not placement.state.pods
    for container in pod.all_containers:
        if claimed_container(pod, container.name, 100_000) is None:
            continue
        sent = container_resources(pod, container)
        placement = Placement(new_engine())
        with pytest.raises(InputError, match=rf"container {container.name}: .* memory_limit"):
            placement.create(replace(sandbox_of(pod), resources=honest), "p-c", container.name,
                             replace(sent, memory_limit=sent.memory_limit * 2))
        assert not placement.state.pods


def test_quota_lifted_for_exclusive_cpus_is_not_a_claim() -> None:
    """A kubelet with `DisableCPUQuotaWithExclusiveCPUs` sends quota -1 for a pod or container holding
    exclusive CPUs; the shape is still checked on shares and memory."""
    pod = fast_path()
    app = pod.container("app")
    assert pod.resources is not None and app is not None
    lifted = replace(linux_resources(pod.resources, 100_000), cpu_quota=-1)
    app_lifted = replace(linux_resources(app.resources, 100_000), cpu_quota=-1)
    settings, _, _ = Placement(new_engine()).create(
        replace(sandbox_of(pod), resources=lifted), "fast-app", "app", app_lifted
    )
    assert settings.assignment is Assignment.POD_EXCLUSIVE
    with pytest.raises(InputError, match="cpu_shares"):
        Placement(new_engine()).create(
            replace(sandbox_of(pod), resources=replace(lifted, cpu_shares=2)), "fast-app", "app", app_lifted
        )


def test_malformed_shape_annotation_is_an_input_error() -> None:
    placement = Placement(new_engine())
    sandbox = replace(sandbox_of(fast_path()), annotations={SHAPE_ANNOTATION: "{not json"})
    with pytest.raises(InputError, match=SHAPE_ANNOTATION):
        placement.create(sandbox, "fast-app", "app")
    assert placement.container_ids() == [] and placement.state.pods == {}


# -- restarts keep allocations -----------------------------------------------------------------------------


@pytest.mark.parametrize("container", ["app", "log"])
def test_container_restart_keeps_the_allocation(container: str) -> None:
    placement = Placement(new_engine())
    placement.create(unmanaged(), "web-1", "server")
    first = start(placement, fast_path())
    state = placement.state

    placement.remove_container(f"fast-{container}")
    assert placement.state is state, "a removed container keeps its pod's allocations"
    settings, moved, _ = placement.create(sandbox_of(fast_path()), f"fast-{container}-restarted", container)

    assert settings == first[container]
    assert moved == {}
    assert placement.state is state
    other = "log" if container == "app" else "app"
    assert sorted(placement.container_ids()) == sorted(
        ["web-1", f"fast-{other}", f"fast-{container}-restarted"]
    )


def test_remove_sandbox_releases_and_forgets_every_container() -> None:
    placement = Placement(new_engine())
    empty = placement.state
    start(placement, fast_path())
    placement.remove_sandbox("sb-fast")
    assert placement.container_ids() == [] and placement.applied == {}
    assert placement.state.pods == {}
    assert placement.engine.node_shared_pool(placement.state) == placement.engine.node_shared_pool(empty)
    placement.remove_sandbox("sb-fast")
    assert placement.state.pods == {}


# -- synchronize -------------------------------------------------------------------------------------------

Row = Observed


def busy_node() -> tuple[Placement, list[Sandbox], list[Row]]:
    """A node with an unmanaged pod, a bubble pod and two classic pods; what the runtime would report."""
    placement = Placement(new_engine())
    sandboxes = [unmanaged(), sandbox_of(fast_path()), sandbox_of(classic()), sandbox_of(classic_burstable())]
    rows: list[Row] = []
    names = {
        "sb-web": ["server"],
        "sb-fast": ["log", "app"],
        "sb-classic": ["exclusive"],
        "sb-burstable": ["burst"],
    }
    by_id = {s.id: s for s in sandboxes}
    for sandbox_id, container_names in names.items():
        for name in container_names:
            container_id = f"{sandbox_id[3:]}-{name}"
            placement.create(by_id[sandbox_id], container_id, name)
            rows.append(Observed(container_id, sandbox_id, name))
    placement.take_pending_updates()
    rows = [holding(row, placement.applied[row.container_id]) for row in rows]
    return placement, sandboxes, rows


def test_synchronize_with_everything_in_place_updates_nothing() -> None:
    live, sandboxes, rows = busy_node()
    restarted = Placement(new_engine())
    resynced = restarted.synchronize(sandboxes, rows)
    updates, refused = resynced.updates, resynced.kept_out
    assert (updates, refused) == ({}, [])
    assert restarted.applied == live.applied
    assert restarted.state.pods.keys() == live.state.pods.keys()
    assert restarted.take_pending_updates() == {}


def test_synchronize_updates_only_containers_whose_cpuset_differs() -> None:
    live, sandboxes, rows = busy_node()
    # The runtime lost one pinning (None: no cpuset) and holds a stale one for another.
    rows = [
        row._replace(cpus=None) if row.container_id == "fast-app"
        else row._replace(cpus=CPUSet([1])) if row.container_id == "web-server"
        else row
        for row in rows
    ]
    resynced = Placement(new_engine()).synchronize(sandboxes, rows)
    updates, refused = resynced.updates, resynced.kept_out
    assert refused == []
    assert updates == {"fast-app": live.applied["fast-app"], "web-server": live.applied["web-server"]}


def test_synchronize_after_a_bubble_came_unmanaged_first_sends_no_spurious_update() -> None:
    """An unmanaged container listed before the bubble pod already sits in the shrunk pool."""
    _, sandboxes, rows = busy_node()
    assert rows[0][0] == "web-server"
    resynced = Placement(new_engine()).synchronize(sandboxes, rows)
    updates = resynced.updates
    assert "web-server" not in updates


def test_synchronize_rebuilds_from_scratch() -> None:
    placement = Placement(new_engine())
    start(placement, fast_path("gone"))
    placement.create(unmanaged("old"), "old-1", "server")
    _, sandboxes, rows = busy_node()

    resynced = placement.synchronize(sandboxes, rows)
    updates, refused = resynced.updates, resynced.kept_out

    assert refused == []
    assert "uid-gone" not in placement.state.pods and "gone-app" not in placement.container_ids()
    assert sorted(placement.container_ids()) == sorted(cid for cid, *_ in rows)
    # "gone" held CPUs while the runtime's cpusets were computed without it: nothing moved in the rebuild.
    assert updates == {}


def test_synchronize_skips_containers_of_unknown_sandboxes() -> None:
    _, sandboxes, rows = busy_node()
    placement = Placement(new_engine())
    resynced = placement.synchronize(sandboxes, [*rows, Observed("orphan", "sb-nowhere", "x")])
    updates, refused = resynced.updates, resynced.kept_out
    assert "orphan" not in placement.container_ids() and "orphan" not in updates
    assert refused == []


def test_synchronize_reports_pods_it_can_no_longer_admit() -> None:
    """The plugin came back with more reserved CPUs: "first" (on node 0) fits nowhere now; "second" still
    fits where it runs and keeps its place, whatever the listing order."""
    placement = Placement(new_engine())
    first, second = fast_path("first", 6, 2), fast_path("second", 6, 2)
    web = unmanaged()
    placement.create(web, "web-server", "server")
    start(placement, first)
    start(placement, second)
    placement.take_pending_updates()
    sandboxes = [web, sandbox_of(first), sandbox_of(second)]
    rows = [
        Observed(cid, f"sb-{cid.split('-')[0]}", cid.split("-")[1], s.cpus)
        for cid, s in placement.applied.items()
    ]

    restarted = Placement(new_engine(reserved="0-1,8-9"))
    resynced = restarted.synchronize(sandboxes, rows)
    updates, refused = resynced.updates, resynced.kept_out

    assert [sandbox_id for sandbox_id, _ in refused] == ["sb-first"], "each refused pod is reported once"
    assert "TopologyAffinityError" in refused[0][1]
    assert restarted.state.pods.keys() == {"uid-second"}
    assert restarted.applied["second-app"] == placement.applied["second-app"]
    pool = restarted.engine.node_shared_pool(restarted.state)
    for container_id in ("first-log", "first-app", "web-server"):
        assert restarted.applied[container_id].assignment is Assignment.NODE_SHARED
        assert restarted.applied[container_id].cpus == pool
    assert {"first-log", "first-app", "web-server"} <= updates.keys()
    # The refused pod's containers get the kubelet's own quota back: its budget for the sidecar, its limit
    # for the app that had its CPUs exclusively (quota off), not "unlimited" in the shared pool.
    assert restarted.applied["first-app"].cpu_quota_us == 2 * CFS_PERIOD_US
    assert restarted.applied["first-log"].cpu_quota_us == 6 * CFS_PERIOD_US

    assert all(updates[cid] == restarted.applied[cid] for cid in updates)
    assert restarted.take_pending_updates() == {}

    # A refused running pod's container restarts: it stays in the node shared pool, it is not failed.
    restarted.remove_container("first-app")
    settings, _, _ = restarted.create(sandbox_of(first), "first-app-2", "app")
    assert settings.assignment is Assignment.NODE_SHARED and settings.cpu_quota_us == 2 * CFS_PERIOD_US


def test_reconnect_keeps_allocations_whatever_order_the_runtime_lists() -> None:
    """containerd restarted: the plugin's state is right, so nothing moves even in reverse order."""
    placement = Placement(new_engine())
    first, second = fast_path("first", 6, 2), fast_path("second", 6, 2)
    start(placement, first)
    start(placement, second)
    placement.take_pending_updates()
    nodes = {p.name: placement.state.cpu.pod_entries[p.uid] for p in (first, second)}
    assert nodes["first"].is_disjoint(nodes["second"])
    held = dict(placement.applied)
    rows = [
        holding(Observed(cid, f"sb-{cid.split('-')[0]}", cid.split("-")[1]), s) for cid, s in held.items()
    ]

    resynced = placement.synchronize([sandbox_of(second), sandbox_of(first)], list(reversed(rows)))
    updates, refused = resynced.updates, resynced.kept_out

    assert (updates, refused) == ({}, [])
    assert placement.applied == held
    assert {p.name: placement.state.cpu.pod_entries[p.uid] for p in (first, second)} == nodes


def test_synchronize_releases_pods_whose_sandboxes_are_gone() -> None:
    placement = Placement(new_engine())
    start(placement, fast_path("gone"))
    placement.create(unmanaged(), "web-server", "server")
    web_before = placement.applied["web-server"]
    row = Observed("web-server", "sb-web", "server", web_before.cpus)
    resynced = placement.synchronize([unmanaged()], [row])
    updates = resynced.updates
    assert "uid-gone" not in placement.state.pods
    assert updates["web-server"].cpus == ALL_CPUS, "the freed bubble is back in the pool at once"


def test_synchronize_corrects_memory_nodes_and_quota_not_just_cpus() -> None:
    placement = Placement(new_engine())
    start(placement, fast_path())
    app = placement.applied["fast-app"]
    base = holding(Observed("fast-app", "sb-fast", "app"), app)
    other_mems = (0, 1) if app.mems == (0,) else (0,)
    for drifted in (base._replace(mems=other_mems), base._replace(cpu_quota_us=50_000)):
        resynced = placement.synchronize([sandbox_of(fast_path())], [drifted])
        updates = resynced.updates
        assert updates == {"fast-app": app}
    resynced = placement.synchronize([sandbox_of(fast_path())], [base])
    updates = resynced.updates
    assert updates == {}


def test_synchronize_reads_each_pod_of_a_shared_shape_with_its_own_identity() -> None:
    """Pods of one workload carry the same annotation text: each is admitted as itself, and a pod whose
    name the API server would refuse is refused with the message naming it, wherever it is listed."""
    pods = [classic_burstable(f"replica-{index}") for index in range(3)]
    bad = replace(sandbox_of(classic_burstable("replica-bad")), name="Not_A_Name")
    sandboxes = [sandbox_of(pods[0]), bad, *(sandbox_of(pod) for pod in pods[1:])]
    rows = [Observed(f"{s.name}-burst", s.id, "burst") for s in sandboxes]
    placement = Placement(new_engine())

    resynced = placement.synchronize(sandboxes, rows)
    refused = resynced.kept_out

    assert placement.state.pods == {pod.uid: pod for pod in pods}
    assert [sandbox_id for sandbox_id, _ in refused] == [bad.id]
    assert "Not_A_Name" in refused[0][1] and "DNS-1123 subdomain" in refused[0][1]


def test_pod_refused_at_synchronize_is_admitted_later_for_all_its_containers() -> None:
    """A sibling listed while its pod could not be admitted follows the pod once it is."""
    crowded = Placement(new_engine())
    blocker = fast_path("blocker", 7, 2)  # only node 1 has 7 assignable CPUs; "late" needs 8, also node 1
    start(crowded, blocker)
    late = fast_path("late", 8, 2)
    rows = [Observed("late-log", "sb-late", "log")]
    resynced = crowded.synchronize([sandbox_of(blocker), sandbox_of(late)], rows)
    refused = resynced.kept_out
    assert [sid for sid, _ in refused] == ["sb-late"]
    assert crowded.applied["late-log"].assignment is Assignment.NODE_SHARED

    crowded.remove_sandbox("sb-blocker")
    settings, moved, _ = crowded.create(sandbox_of(late), "late-app", "app")
    assert settings.assignment is Assignment.POD_EXCLUSIVE
    assert moved["late-log"].assignment is Assignment.POD_SHARED


def test_a_pod_admitted_at_a_later_container_moves_its_running_containers_in_that_answer() -> None:
    """The refused pod takes exactly the CPUs the released one held, so the node shared pool ends where it
    was last handed out: its running container must get its pod-level settings all the same, with the
    answer that admits the pod, not at some later pool move."""
    crowded = Placement(new_engine())
    blocker = fast_path("blocker", 7, 2)
    start(crowded, blocker)
    crowded.take_pending_updates()
    late = fast_path("late", 7, 2)  # needs node 1 too
    resynced = crowded.synchronize([sandbox_of(blocker), sandbox_of(late)],
                                     [Observed("late-log", "sb-late", "log")])
    refused = resynced.kept_out
    assert [sid for sid, _ in refused] == ["sb-late"]
    crowded.take_pending_updates()

    crowded.remove_sandbox("sb-blocker")
    settings, moved, _ = crowded.create(sandbox_of(late), "late-app", "app")

    assert settings.assignment is Assignment.POD_EXCLUSIVE
    assert moved["late-log"].assignment is Assignment.POD_SHARED
    assert crowded.take_pending_updates() == {}


# -- claims the runtime cannot confirm ---------------------------------------------------------------------


def test_a_bubble_the_sandbox_carries_no_resources_for_is_refused_as_unverifiable() -> None:
    """Without the sandbox's pod resources nothing confirms the budget: the claim is refused, not trusted."""
    placement = Placement(new_engine())
    pod = fast_path(cpus=8)
    bare = replace(sandbox_of(pod), resources=RuntimeResources())
    before = snapshot(placement)
    with pytest.raises(InputError, match="carries none of") as raised:
        placement.create(bare, "fast-app", "app", container_resources(pod, pod.container("app")))
    assert raised.value.rule == "pod shape"
    assert snapshot(placement) == before


def test_a_pod_without_a_budget_needs_no_sandbox_resources() -> None:
    """Only a bubble needs the sandbox's confirmation; each exclusive container is checked on its own."""
    placement = Placement(new_engine())
    pod = make_pod("solo", app("c", guaranteed(2000, GI)), uid="uid-solo")
    bare = replace(sandbox_of(pod), resources=RuntimeResources())
    first = pod.containers[0]
    settings, _, _ = placement.create(bare, "c0", first.name, container_resources(pod, first))
    assert settings.cpu_quota_us is not None


def test_a_later_container_is_checked_against_its_own_runtime_resources() -> None:
    """A container BestEffort at runtime must not get the exclusive CPUs its shape claims."""
    placement = Placement(new_engine())
    pod = fast_path()
    sandbox = sandbox_of(pod)
    placement.create(sandbox, "fast-log", "log", container_resources(pod, pod.container("log")))
    best_effort = linux_resources(Resources(), 100_000)
    with pytest.raises(InputError, match=r"container app: .* cpu_shares") as raised:
        placement.create(sandbox, "fast-app", "app", best_effort)
    assert raised.value.rule == "pod shape"
    assert "fast-app" not in placement.applied
    honest = container_resources(pod, pod.container("app"))
    settings, _, _ = placement.create(sandbox, "fast-app", "app", honest)
    assert settings.assignment is Assignment.POD_EXCLUSIVE


def test_a_restart_after_a_resize_is_not_checked_again() -> None:
    placement = Placement(new_engine())
    pod = fast_path()
    sandbox = sandbox_of(pod)
    placement.create(sandbox, "fast-app", "app", container_resources(pod, pod.container("app")))
    resized = replace(container_resources(pod, pod.container("app")), memory_limit=512 * MI)
    settings, _, _ = placement.create(sandbox, "fast-app-2", "app", resized)
    assert settings.assignment is Assignment.POD_EXCLUSIVE


def test_a_recreated_sandbox_of_an_admitted_pod_keeps_its_pod_cgroup_wanted() -> None:
    """The kubelet recreates a sandbox of a running pod: the pod keeps its allocations, and its pod cgroup is
    still wanted after the old sandbox goes."""
    placement = Placement(new_engine())
    pod = fast_path()
    first = sandbox_of(pod)
    placement.create(first, "fast-app", "app", container_resources(pod, pod.container("app")))
    again = replace(first, id="sb-fast-again", cgroup_parent="/kubepods/poduid-fast")
    placement.take_pod_cgroup_changes()

    placement.create(again, "fast-app-2", "app", container_resources(pod, pod.container("app")))
    placement.remove_sandbox(first.id)

    assert pod.uid in placement.state.pods
    wanted = placement.pod_cgroups["sb-fast-again"]
    assert (wanted.pod_uid, wanted.cgroup_parent, wanted.cpus) == (
        pod.uid, "/kubepods/poduid-fast", placement.state.cpu.pod_entries[pod.uid])
    assert placement.take_pod_cgroup_changes() == {"sb-fast-again", first.id}


# -- admission when the sandbox starts ---------------------------------------------------------------------


def test_a_pod_admitted_at_its_sandbox_has_its_containers_looked_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """RunPodSandbox admits; CreateContainer reads neither the annotation nor the engine."""
    placement = Placement(new_engine())
    placement.create(unmanaged(), "web-1", "server")
    pod = fast_path()
    decision = placement.run_sandbox(sandbox_of(pod))
    assert decision is not None and decision.pod.uid == pod.uid
    assert placement.pod_cgroups["sb-fast"].cpus == decision.bubble_cpus
    assert placement.take_pod_cgroup_changes() == {"sb-fast"}
    monkeypatch.setattr(placement.engine, "admit", None)
    monkeypatch.setattr("podlevel.agent.placement.from_annotation", None)

    app_settings, moved, admitted = placement.create(replace(sandbox_of(pod), annotations={}), "fast-app",
                                                     "app")

    assert admitted is None
    assert app_settings.assignment is Assignment.POD_EXCLUSIVE
    # The node shared pool shrank at the sandbox: the pod's first container carries the move of the others.
    assert decision.bubble_cpus is not None
    assert moved == {"web-1": replace(placement.applied["web-1"], cpus=ALL_CPUS - decision.bubble_cpus)}
    assert placement.create(sandbox_of(pod), "fast-log", "log")[1] == {}


def test_the_move_an_admission_at_a_sandbox_makes_goes_out_with_the_next_answer() -> None:
    placement = Placement(new_engine())
    placement.create(unmanaged(), "web-1", "server")
    placement.run_sandbox(sandbox_of(fast_path()))
    moved = placement.take_pending_updates()
    assert list(moved) == ["web-1"] and len(moved["web-1"].cpus) == 12
    assert placement.create(sandbox_of(fast_path()), "fast-app", "app")[1] == {}


def test_a_container_of_an_admitted_sandbox_still_has_its_own_claim_checked() -> None:
    placement = Placement(new_engine())
    pod = fast_path()
    placement.run_sandbox(sandbox_of(pod))
    claimed = container_resources(pod, pod.container("app"))
    with pytest.raises(InputError, match="cpu_shares"):
        placement.create(sandbox_of(pod), "fast-app", "app", replace(claimed, cpu_shares=2))
    placement.create(sandbox_of(pod), "fast-app", "app", claimed)
    # Its restart is not checked again (an in-place resize must not make it fail).
    placement.create(sandbox_of(pod), "fast-app-2", "app", replace(claimed, cpu_shares=2))


@pytest.mark.parametrize(("make", "error", "type_"), REFUSALS.values(), ids=REFUSALS.keys())
def test_a_pod_refused_at_its_sandbox_reserves_nothing_and_its_first_container_decides_again(
    make: Callable[[], Pod], error: type[AdmissionError], type_: str
) -> None:
    placement = web_and_a_bubble()
    before = snapshot(placement)
    pod = make()

    with pytest.raises(error):
        placement.run_sandbox(sandbox_of(pod))

    assert snapshot(placement) == before and placement.take_pending_updates() == {}
    with pytest.raises(error) as again:
        placement.create(sandbox_of(pod), f"{pod.name}-app", "app")
    assert again.value.type == type_ and snapshot(placement) == before


def test_a_pod_refused_at_its_sandbox_is_admitted_by_a_creation_once_there_is_room() -> None:
    """The kubelet retries a failed CreateContainer in the same sandbox: each retry decides anew."""
    placement = Placement(new_engine())
    placement.run_sandbox(sandbox_of(fast_path("first", 8, 2)))
    second = sandbox_of(fast_path("second", 8, 2))
    with pytest.raises(TopologyAffinityError):
        placement.run_sandbox(second)
    with pytest.raises(TopologyAffinityError):
        placement.create(second, "second-app", "app")
    placement.remove_sandbox("sb-first")

    settings, _, admitted = placement.create(second, "second-app", "app")

    assert settings.assignment is Assignment.POD_EXCLUSIVE and admitted is not None


def test_a_recreated_sandbox_of_a_pod_admitted_at_its_start_shares_the_admission() -> None:
    placement = Placement(new_engine())
    pod = fast_path()
    placement.run_sandbox(sandbox_of(pod))
    state = placement.state
    assert placement.run_sandbox(replace(sandbox_of(pod), id="sb-fast-2")) is None
    assert placement.state is state
    placement.remove_sandbox("sb-fast")
    assert pod.uid in placement.state.pods, "the recreated sandbox still holds the pod"
    assert placement.create(replace(sandbox_of(pod), id="sb-fast-2"), "fast-app", "app")[0].assignment is (
        Assignment.POD_EXCLUSIVE)


def test_a_rolled_back_create_in_an_admitted_pod_keeps_the_admission_and_hands_the_move_out_again() -> None:
    placement = Placement(new_engine())
    placement.create(unmanaged(), "web-1", "server")
    pod = fast_path()
    placement.run_sandbox(sandbox_of(pod))
    before = placement.view()
    _, moved, _ = placement.create(sandbox_of(pod), "fast-app", "app")
    assert list(moved) == ["web-1"]

    placement.rollback_create()

    assert placement.view() == before
    assert placement.containers_of("sb-fast") == [] and placement.containers_of("sb-web") == ["web-1"]
    assert placement.create(sandbox_of(pod), "fast-app", "app")[1] == moved


def test_changes_count_in_the_generation_and_no_ops_do_not() -> None:
    placement = Placement(new_engine())
    placement.create(unmanaged(), "web-1", "server")
    counted = placement.generation
    assert placement.take_pending_updates() == {}
    placement.remove_container("gone")
    assert placement.remove_sandbox("sb-unknown") is False
    assert placement.generation == counted
    placement.run_sandbox(sandbox_of(fast_path()))
    placement.take_pending_updates()
    assert placement.generation == counted + 2

