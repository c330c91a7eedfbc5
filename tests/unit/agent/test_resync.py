"""agent.resync: a restarted plugin's plan for the pods it finds running (each pod's step and why,
table-tested on the engine alone), where a pod may go back to, and restarts through the `Placement` that
applies it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import pytest

from podlevel.agent.placement import Placement
from podlevel.agent.records import Observed, Sandbox
from podlevel.agent.resync import Confinement, Resync, Resynced, Running, Step, held_cpus, plan
from podlevel.engine.cfs import UNLIMITED_QUOTA
from podlevel.engine.cpu_policy import CPUState
from podlevel.engine.cpuset import CPUSet
from podlevel.engine.manager import Assignment, Engine, NodeState
from podlevel.engine.memory_policy import MemoryBlock
from podlevel.engine.pod import Pod
from podlevel.engine.restore import Checkpointed
from podlevel.engine.topology import from_spec
from podlevel.engine.topology_manager import Scope, TopologyPolicyName
from support.builders import GI, MI, app, fast_path, guaranteed, init, new_engine, sidecar
from support.builders import pod as make_pod
from support.memory_state import check_memory_state
from support.placements import classic, holding, sandbox_of, start

BOTH_NODES = (0, 1)
TWO_NODES = from_spec("sockets=1,nodes-per-socket=2,cores-per-node=4,threads-per-core=1")


def test_confinements_are_tried_from_its_cpus_to_anywhere() -> None:
    held = CPUSet.parse("1-2")
    assert [c.within(held, TWO_NODES) for c in Confinement] == [held, held, CPUSet.parse("0-3"), None]
    assert [c.within(None, TWO_NODES) for c in Confinement] == [None, None, None, None]


def test_held_cpus_count_every_container_of_a_pod_level_pod_and_only_exclusive_ones_otherwise() -> None:
    pod = fast_path()
    rows = [Observed("a", "s", "app", CPUSet.parse("2"), (0,), UNLIMITED_QUOTA),
            Observed("b", "s", "log", CPUSet.parse("3"), (0,), 50_000),
            Observed("c", "s", "debugger", CPUSet.parse("7"), (1,), None)]
    assert held_cpus(pod, rows, pod_level=True) == CPUSet.parse("2-3")
    assert held_cpus(pod, rows, pod_level=False) == CPUSet.parse("2")
    assert held_cpus(pod, [], pod_level=True) is None


def test_a_pods_cpus_are_its_bubble_else_its_exclusive_slices() -> None:
    recorded = CPUState(default=CPUSet.parse("0-7"),
                        entries={"p": {"a": CPUSet.parse("4"), "b": CPUSet.parse("6")}},
                        pod_entries={"q": CPUSet.parse("1-2")})
    assert (recorded.pod_cpus("q"), recorded.pod_cpus("p"), recorded.pod_cpus("r")) == (
        CPUSet.parse("1-2"), CPUSet.parse("4,6"), None)



# -- the plan, on the engine alone -------------------------------------------------------------------------

FIRST, SECOND, THIRD = fast_path("first", 2, 1), fast_path("second", 4, 2), classic("third")
"""Admitted in this order on SMALL: first's bubble 1,9 and second's 2-3,10-11 on node 0, third's exclusive
CPUs 4,12 on node 1."""
FREED = "it holds no exclusive CPUs under the current settings; its recorded ones were freed"
UNMANAGED = "memory is no longer managed (memory policy None); its recorded blocks are freed"
REFUSED = "TopologyAffinityError: Pod Scope Resources cannot be allocated with Topology locality"


def admitted(engine: Engine, *pods: Pod) -> NodeState:
    state = engine.initial_state()
    for pod in pods:
        state, _ = engine.admit(state, pod)
    return state


def running(engine: Engine, state: NodeState, *pods: Pod, shown: bool) -> list[Running]:
    """The pods as the runtime lists them: their containers on the CPUs `state` gives them when `shown`,
    with no cpusets otherwise."""
    rows = []
    for pod in pods:
        sandbox_id = f"sb-{pod.name}"
        rows.append(Running(sandbox_id, pod, [
            Observed(f"{pod.name}-{d.name}", sandbox_id, d.name,
                     *((d.cpus, d.mems, d.cpu_quota_us) if shown else ()))
            for d in engine.decision(state, pod.uid).containers
        ]))
    return rows


PLANS = {
    "kept as recorded": ({}, True, (FIRST, SECOND, THIRD), False, [
        ("uid-first", Step.KEPT, None), ("uid-second", Step.KEPT, None), ("uid-third", Step.KEPT, None)]),
    "taken back where it runs": ({}, False, (THIRD, SECOND, FIRST), True, [
        ("uid-third", Step.TAKEN_BACK, None), ("uid-second", Step.TAKEN_BACK, None),
        ("uid-first", Step.TAKEN_BACK, None)]),
    "released": ({}, True, (SECOND, THIRD), False, [
        ("uid-second", Step.KEPT, None), ("uid-third", Step.KEPT, None), ("uid-first", Step.RELEASED, None)]),
    "cpu policy none": ({"cpu_policy": "none"}, True, (FIRST, SECOND, THIRD), False, [
        ("uid-first", Step.MOVED, FREED), ("uid-second", Step.MOVED, FREED),
        ("uid-third", Step.MOVED, FREED)]),
    "memory policy None": ({"memory_policy": "None"}, True, (FIRST, THIRD), False, [
        ("uid-first", Step.MOVED, UNMANAGED), ("uid-third", Step.MOVED, UNMANAGED),
        ("uid-second", Step.RELEASED, None)]),
    "its NUMA node": ({"reserved": "0-1,8-9"}, True, (FIRST, SECOND, THIRD), False, [
        ("uid-second", Step.KEPT, None), ("uid-third", Step.KEPT, None), ("uid-first", Step.MOVED, REFUSED)]),
    "nowhere": ({"reserved": "0-1,4-7,8-9,12-15"}, True, (FIRST, SECOND, THIRD), False, [
        ("uid-second", Step.KEPT, None), ("uid-first", Step.KEPT_OUT, REFUSED),
        ("uid-third", Step.KEPT_OUT, "TopologyAffinityError")]),
}


@pytest.mark.parametrize(("settings", "recorded", "pods", "shown", "steps"), PLANS.values(), ids=PLANS.keys())
def test_the_plan_gives_each_pod_its_step_and_why(
    settings: dict[str, str], recorded: bool, pods: tuple[Pod, ...], shown: bool,
    steps: list[tuple[str, Step, str | None]],
) -> None:
    """Recorded on today's defaults, restarted under `settings`, with or without the checkpoints; pods listed
    in `pods`' order, their cpusets `shown` or not."""
    before = new_engine()
    live = admitted(before, FIRST, SECOND, THIRD)
    checkpointed = Checkpointed(live.cpu, live.memory) if recorded else None
    engine = new_engine(**settings)
    initial = engine.initial_state()

    result = plan(checkpointed, running(before, live, *pods, shown=shown), engine, initial)

    assert [(s.pod_uid, s.step) for s in result.steps] == [(uid, step) for uid, step, _ in steps]
    for step, (_, _, why) in zip(result.steps, steps, strict=True):
        assert (step.why is None) if why is None else (step.why or "").startswith(why), step.why
    placed = {s.pod_uid for s in result.steps if s.decision is not None}
    assert result.state.pods.keys() == placed
    assert all((s.decision is not None) == (s.step in (Step.KEPT, Step.TAKEN_BACK, Step.MOVED))
               for s in result.steps)
    assert engine.initial_state() == initial, "the plan changes nothing it is given"
    assert plan(checkpointed, running(before, live, *pods, shown=shown), engine, initial) == result


def test_a_plan_keeps_what_was_recorded_and_tallies_its_steps() -> None:
    engine = new_engine()
    live = admitted(engine, FIRST, SECOND, THIRD)

    result = plan(Checkpointed(live.cpu, live.memory), running(engine, live, SECOND, THIRD, shown=False),
                  engine, engine.initial_state())

    assert result.state.cpu.pod_entries == {"uid-second": live.cpu.pod_entries["uid-second"]}
    assert result.state.cpu.entries["uid-third"] == live.cpu.entries["uid-third"]
    assert result.tally() == Resync(restored=2, released=1)

# -- a restarted plugin without a checkpoint ----------------------------------------------------------------


def test_restarted_plugin_takes_each_pod_back_where_it_runs() -> None:
    """No checkpoint, and the runtime lists pods in another order: placements survive all the same."""
    live = Placement(new_engine())
    pods = [fast_path("first", 2, 1), fast_path("second", 4, 2), classic("third")]
    for p in pods:
        start(live, p)
    live.take_pending_updates()
    rows = [
        holding(Observed(cid, f"sb-{cid.split('-')[0]}", cid.split("-", 1)[1]), s)
        for cid, s in live.applied.items()
    ]
    sandboxes = [sandbox_of(p) for p in pods]

    in_order = Placement(new_engine())
    resynced = in_order.synchronize(sandboxes, rows)
    in_order_updates = resynced.updates
    restarted = Placement(new_engine())
    resynced = restarted.synchronize(list(reversed(sandboxes)), list(reversed(rows)))
    updates, refused = resynced.updates, resynced.kept_out

    assert in_order_updates == {}
    assert (updates, refused) == ({}, [])
    assert restarted.applied == live.applied
    assert restarted.state.cpu == live.state.cpu
    # Without the runtime's view, the reverse order would have placed them differently.
    blind = Placement(new_engine())
    blind_rows = [row._replace(cpus=None, cpu_quota_us=None) for row in reversed(rows)]
    blind.synchronize(list(reversed(sandboxes)), blind_rows)
    assert blind.state.cpu != live.state.cpu


# -- a restarted plugin with a checkpoint -------------------------------------------------------------------


def running_pods() -> tuple[Placement, list[Sandbox], list[Observed]]:
    """Three pods admitted in this order, and the runtime's rows without any cpuset: only a checkpoint
    says where they ran."""
    live = Placement(new_engine())
    pods = [fast_path("first", 2, 1), fast_path("second", 4, 2), classic("third")]
    for p in pods:
        start(live, p)
    live.take_pending_updates()
    rows = [Observed(cid, f"sb-{cid.split('-')[0]}", cid.split("-", 1)[1]) for cid in live.applied]
    return live, [sandbox_of(p) for p in pods], rows


def checkpoints(live: Placement) -> Checkpointed:
    """What the checkpoints of a running plugin record."""
    return Checkpointed(live.state.cpu, live.state.memory)


def test_restart_restores_bubbles_and_slices_exactly_from_the_checkpoint() -> None:
    """Listed in reverse and with no cpusets from the runtime, every pod comes back to its recorded CPUs,
    bubble CPUs no container runs on included."""
    live, sandboxes, rows = running_pods()
    restarted = Placement(new_engine(), recorded=checkpoints(live))

    resynced = restarted.synchronize(list(reversed(sandboxes)), list(reversed(rows)))
    updates, refused = resynced.updates, resynced.kept_out

    assert refused == []
    assert updates == live.applied, "the runtime showed no cpusets, so every container is told its own"
    assert restarted.state.cpu == live.state.cpu
    memory, recorded_memory = restarted.state.memory, live.state.memory
    assert (memory.machine, memory.entries, memory.pod_entries) == (
        recorded_memory.machine, recorded_memory.entries, recorded_memory.pod_entries)
    assert restarted.applied == live.applied
    assert resynced.tally == Resync(restored=3)
    # The checkpoint is for the first Synchronize only: a reconnect keeps the live state.
    again = restarted.synchronize(sandboxes, rows)
    assert again.kept_out == [] and again.tally == Resync()


def test_restart_keeps_recorded_slices_the_rules_would_choose_otherwise() -> None:
    """The checkpoint has the app's slice and the pod shared pool the other way round inside the bubble (as
    an earlier release of the rules might have placed them): they stay as recorded."""
    live, sandboxes, rows = running_pods()
    now = live.state.cpu.entries["uid-second"]
    swapped = {"app": now["log"], "log": now["app"]}
    recorded = replace(live.state.cpu, entries={**live.state.cpu.entries, "uid-second": swapped})

    restarted = Placement(new_engine(), recorded=Checkpointed(recorded, live.state.memory))
    resynced = restarted.synchronize(sandboxes, rows)

    assert restarted.state.cpu.entries["uid-second"] == swapped != now
    assert restarted.state.cpu.pod_entries == live.state.cpu.pod_entries
    assert resynced.tally.restored == 3


def test_restart_releases_what_the_checkpoint_holds_for_pods_that_are_gone() -> None:
    live, sandboxes, rows = running_pods()
    restarted = Placement(new_engine(), recorded=checkpoints(live))

    resynced = restarted.synchronize(sandboxes[1:], [r for r in rows if r.sandbox_id != "sb-first"])

    assert resynced.tally == Resync(restored=2, released=1)
    first = live.state.cpu.pod_entries["uid-first"]
    assert first.is_subset(restarted.state.cpu.default)


def test_restart_under_new_settings_moves_only_what_no_longer_fits_and_says_why() -> None:
    """CPUs 2 and 10 became reserved: the pod whose bubble holds them is re-placed, the others stay exactly
    where they were, and the move is reported with the rule that refused the old place."""
    live, sandboxes, rows = running_pods()
    restarted = Placement(new_engine(reserved="0,8,2,10"), recorded=checkpoints(live))

    resynced = restarted.synchronize(sandboxes, rows)
    refused = resynced.kept_out

    assert refused == []
    [(sandbox_id, reason)] = resynced.tally.moved
    assert sandbox_id == "sb-second" and "TopologyAffinityError" in reason
    assert not restarted.state.cpu.pod_entries["uid-second"] & CPUSet([2, 10])
    assert restarted.state.cpu.pod_entries["uid-first"] == live.state.cpu.pod_entries["uid-first"]
    assert restarted.state.cpu.entries["uid-third"] == live.state.cpu.entries["uid-third"]
    assert resynced.tally.restored == 2


def test_restart_under_the_cpu_policy_none_frees_recorded_cpus_and_says_so() -> None:
    live, sandboxes, rows = running_pods()
    restarted = Placement(new_engine(cpu_policy="none"), recorded=checkpoints(live))

    resynced = restarted.synchronize(sandboxes, rows)
    refused = resynced.kept_out

    assert refused == [] and not restarted.state.cpu.pod_entries
    reasons = dict(resynced.tally.moved)
    assert set(reasons) == {"sb-first", "sb-second", "sb-third"}
    assert all("holds no exclusive CPUs under the current settings" in why for why in reasons.values())
    assert {cid: (str(s.cpus), s.assignment, s.cpu_quota_us) for cid, s in restarted.applied.items()} == {
        cid: ("0-15", Assignment.NODE_SHARED, None)
        for cid in ("first-log", "first-app", "second-log", "second-app", "third-exclusive")
    }


# -- a restarted plugin with a memory checkpoint ------------------------------------------------------------

NO_ALIGNMENT = TopologyPolicyName.NONE
FILLER = 16220 * MI
"""Leaves 64Mi of node 0's memory free (16Gi, 100Mi of it reserved)."""


def pushed_to_node_1() -> tuple[Placement, list[Sandbox], list[Observed]]:
    """Under the topology policy none, a pod that fills node 0's memory, then a classic Guaranteed pod and a
    pod-level one, whose memory it pushed to node 1. The runtime's rows (no cpusets) are the last two pods'
    only: the first stopped while the plugin was down, so today's rules would put their memory on node 0."""
    live = Placement(new_engine(topology_policy=NO_ALIGNMENT))
    pods = [classic("solo"), fast_path("bubbled")]
    for p in (make_pod("filler", app("app", guaranteed(1000, FILLER)), uid="uid-filler"), *pods):
        start(live, p)
    live.take_pending_updates()
    rows = [Observed(cid, f"sb-{cid.split('-')[0]}", cid.split("-", 1)[1]) for cid in live.applied
            if not cid.startswith("filler-")]
    return live, [sandbox_of(p) for p in pods], rows


def check_memory(placement: Placement) -> None:
    """The kubelet's check of a restored memory state: every block charged once, nothing else."""
    policy = placement.engine.memory_policy
    assert policy is not None
    check_memory_state(policy, placement.state.memory)


def test_restart_keeps_recorded_memory_on_a_node_todays_rules_would_not_choose() -> None:
    live, sandboxes, rows = pushed_to_node_1()
    restarted = Placement(new_engine(topology_policy=NO_ALIGNMENT), recorded=checkpoints(live))

    resynced = restarted.synchronize(sandboxes, rows)

    recorded = live.state.memory.entries["uid-solo"]
    assert [b.numa_affinity for b in recorded["exclusive"]] == [(1,)]
    assert restarted.state.memory.entries["uid-solo"] == recorded
    assert restarted.applied["solo-exclusive"].mems == (1,)
    assert restarted.state.cpu.entries["uid-solo"] == live.state.cpu.entries["uid-solo"]
    assert resynced.tally == Resync(restored=2, released=1)
    check_memory(restarted)


def test_restart_keeps_a_pod_level_pods_recorded_pod_and_container_blocks() -> None:
    live, sandboxes, rows = pushed_to_node_1()
    restarted = Placement(new_engine(topology_policy=NO_ALIGNMENT), recorded=checkpoints(live))

    resynced = restarted.synchronize(sandboxes, rows)

    memory, recorded = restarted.state.memory, live.state.memory
    assert [b.numa_affinity for b in recorded.pod_entries["uid-bubbled"]] == [(1,)]
    assert memory.pod_entries["uid-bubbled"] == recorded.pod_entries["uid-bubbled"]
    assert memory.entries["uid-bubbled"] == recorded.entries["uid-bubbled"]
    assert {restarted.applied[cid].mems for cid in ("bubbled-app", "bubbled-log")} == {(1,)}
    assert restarted.pod_cgroups["sb-bubbled"].mems == (1,)
    assert restarted.state.cpu.pod_entries["uid-bubbled"] == live.state.cpu.pod_entries["uid-bubbled"]
    assert resynced.tally == Resync(restored=2, released=1)
    check_memory(restarted)


def test_restart_with_more_memory_reserved_moves_only_the_memory_that_no_longer_fits_and_says_why() -> None:
    """Node 1 now reserves all but 512Mi: the 128Mi pod keeps its blocks there, the 1Gi bubble's memory is
    re-placed (on node 0) with its CPUs kept, and the move names the rule that refused the recorded blocks."""
    live, sandboxes, rows = pushed_to_node_1()
    reserved = {0: {"memory": 100 * MI}, 1: {"memory": 16 * GI - 512 * MI}}
    engine = new_engine(topology_policy=NO_ALIGNMENT, reserved_memory=reserved)
    restarted = Placement(engine, recorded=checkpoints(live))

    resynced = restarted.synchronize(sandboxes, rows)
    refused = resynced.kept_out

    assert refused == []
    [(sandbox_id, reason)] = resynced.tally.moved
    assert sandbox_id == "sb-bubbled"
    assert "NUMA node 1" in reason and "after reserved memory" in reason
    assert [b.numa_affinity for b in restarted.state.memory.pod_entries["uid-bubbled"]] == [(0,)]
    assert restarted.state.cpu.pod_entries["uid-bubbled"] == live.state.cpu.pod_entries["uid-bubbled"]
    assert restarted.state.memory.entries["uid-solo"] == live.state.memory.entries["uid-solo"]
    assert resynced.tally.restored == 1
    check_memory(restarted)


def test_restart_under_a_topology_policy_moves_memory_its_alignment_puts_elsewhere() -> None:
    """Recorded under the topology policy none, the classic pod's CPUs are on node 0 and its memory on node 1;
    single-numa-node aligns them: its CPUs stay, its memory moves, and the move says why."""
    live, sandboxes, rows = pushed_to_node_1()
    slice_ = live.state.cpu.entries["uid-solo"]["exclusive"]
    assert slice_.is_subset(new_engine().topology.cpus_by_numa[0])
    restarted = Placement(new_engine(), recorded=checkpoints(live))

    resynced = restarted.synchronize(sandboxes, rows)

    reasons = dict(resynced.tally.moved)
    assert "topology alignment" in reasons["sb-solo"]
    assert [b.numa_affinity for b in restarted.state.memory.entries["uid-solo"]["exclusive"]] == [(0,)]
    assert restarted.state.cpu.entries["uid-solo"]["exclusive"] == slice_
    check_memory(restarted)


def test_restart_under_the_memory_policy_none_restores_cpus_and_says_memory_is_no_longer_managed() -> None:
    """As a pod that holds no exclusive CPUs under the current settings: its recorded memory is freed, and
    the pod counts as moved."""
    live, sandboxes, rows = running_pods()
    restarted = Placement(new_engine(memory_policy="None"), recorded=checkpoints(live))

    resynced = restarted.synchronize(sandboxes, rows)
    refused = resynced.kept_out

    assert refused == []
    assert restarted.state.cpu == live.state.cpu
    assert not restarted.state.memory.entries and not restarted.state.memory.pod_entries
    reasons = dict(resynced.tally.moved)
    assert set(reasons) == {"sb-first", "sb-second", "sb-third"}
    assert all("memory is no longer managed" in why for why in reasons.values())
    assert resynced.tally.restored == 0
    assert {s.mems for s in restarted.applied.values()} == {BOTH_NODES}


def restarted_after_filler(*pods: Pod, engine: Engine, recorded_under: Engine,
                           filler: int = FILLER) -> tuple[Placement, Placement, Resynced]:
    """The pods started after a pod that fills node 0's memory, then restarted on `engine` from the
    checkpoints, the filler gone meanwhile (so today's rules would put their memory on node 0); and the
    what the restart did."""
    live = Placement(recorded_under)
    for p in (make_pod("filler", app("app", guaranteed(1000, filler)), uid="uid-filler"), *pods):
        start(live, p)
    live.take_pending_updates()
    rows = [Observed(cid, f"sb-{cid.split('-')[0]}", cid.split("-", 1)[1]) for cid in live.applied
            if not cid.startswith("filler-")]
    restarted = Placement(engine, recorded=checkpoints(live))
    return live, restarted, restarted.synchronize([sandbox_of(p) for p in pods], rows)


def nodes_of(entries: Mapping[str, tuple[MemoryBlock, ...]]) -> set[tuple[int, ...]]:
    return {block.numa_affinity for blocks in entries.values() for block in blocks}


@pytest.mark.parametrize(("cpu_policy", "cpu"), [("static", 500), ("none", 2000)],
                         ids=["fractional-cpu", "cpu-policy-none"])
def test_restart_keeps_the_memory_of_a_pod_the_cpu_checkpoint_does_not_hold(
        cpu_policy: str, cpu: int) -> None:
    """A Guaranteed pod without exclusive CPUs has a memory record and no CPU record: it is taken back from
    the memory record as a pod with both is, not re-placed anywhere as a pod the checkpoints never held."""
    frac = make_pod("frac", app("c", guaranteed(cpu, 128 * MI)), uid="uid-frac")
    settings = {"topology_policy": NO_ALIGNMENT, "cpu_policy": cpu_policy}
    live, restarted, resynced = restarted_after_filler(frac, engine=new_engine(**settings),
                                                recorded_under=new_engine(**settings))

    assert "uid-frac" not in live.state.cpu.entries
    assert nodes_of(live.state.memory.entries["uid-frac"]) == {(1,)}
    assert restarted.state.memory.entries["uid-frac"] == live.state.memory.entries["uid-frac"]
    assert restarted.applied["frac-c"].mems == (1,)
    assert resynced.tally == Resync(restored=1, released=1)
    check_memory(restarted)


def test_restart_keeps_the_blocks_of_a_pod_whose_init_container_the_memory_manager_forgot() -> None:
    """Once the app starts, the memory manager forgets the standard init container before it (`AddContainer`),
    so the checkpoint holds the app's blocks only: a restart keeps them where they are."""
    staged = make_pod("p", init("setup", guaranteed(1000, GI)), app("app", guaranteed(2000, 2 * GI)),
                      uid="uid-p")
    live, restarted, resynced = restarted_after_filler(
        staged, engine=new_engine(topology_policy=NO_ALIGNMENT),
        recorded_under=new_engine(topology_policy=NO_ALIGNMENT), filler=16284 * MI - 1536 * MI)

    recorded = live.state.memory.entries["uid-p"]
    assert recorded.keys() == {"app"} and nodes_of(recorded) == {(1,)}
    assert restarted.state.memory.entries["uid-p"] == recorded
    assert resynced.tally.moved == () and resynced.tally.restored == 1
    assert resynced.updates["p-app"].mems == (1,)  # where it runs: the rows carry no memory nodes to compare
    check_memory(restarted)


def test_restart_under_pod_scope_alignment_moves_memory_split_across_nodes() -> None:
    """Recorded under the topology policy none, a two-container pod's memory is split over both nodes while
    its CPUs are on node 0; single-numa-node in pod scope aligns the pod on one node, which the blocks
    rebuilt as hints cannot show for several containers, so the split is refused by name."""
    two = make_pod("two", app("a", guaranteed(2000, 64 * MI)), app("b", guaranteed(2000, 64 * MI)),
                   uid="uid-two")
    live, restarted, resynced = restarted_after_filler(two, engine=new_engine(),
                                                recorded_under=new_engine(topology_policy=NO_ALIGNMENT))

    assert nodes_of(live.state.memory.entries["uid-two"]) == {(0,), (1,)}
    [(sandbox_id, reason)] = resynced.tally.moved
    assert sandbox_id == "sb-two" and "pod scope under the topology policy single-numa-node" in reason
    assert nodes_of(restarted.state.memory.entries["uid-two"]) == {(0,)}
    check_memory(restarted)


def test_restart_under_container_scope_keeps_an_init_containers_cpus_the_app_reuses() -> None:
    """The app reuses its standard init container's exclusive CPU, so their recorded slices overlap; they are
    taken back exactly as recorded (the rules, choosing again inside them, would give the init container
    another of the app's CPUs), not re-chosen and reported as moved."""
    staged = make_pod("p", init("setup", guaranteed(1000, 256 * MI)), sidecar("log"),
                      app("app", guaranteed(3000, 512 * MI)), budget=guaranteed(5000, GI), uid="uid-p")
    engine = new_engine(scope=Scope.CONTAINER, topology_policy=NO_ALIGNMENT)
    live = Placement(engine)
    start(live, staged)
    recorded = live.state.cpu.entries["uid-p"]
    assert recorded["setup"].is_subset(recorded["app"]), "the app reuses the init container's CPU"
    rows = [Observed(cid, "sb-p", cid.split("-", 1)[1]) for cid in live.applied]
    restarted = Placement(engine, recorded=checkpoints(live))

    resynced = restarted.synchronize([sandbox_of(staged)], rows)

    assert restarted.state.cpu.entries["uid-p"] == recorded
    assert resynced.tally == Resync(restored=1)
