"""Invariants of the agent's Placement over random pods and random create / remove / restart sequences.

A restart is a new Placement that learns the node only from what the runtime shows (each container's
cpuset, memory nodes and quota, listed in a random order) — the plugin has no checkpoint — and must end
with the same allocations the live one had.
"""

from __future__ import annotations

from types import MappingProxyType

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from podlevel.agent.placement import Observed, Placement, Sandbox, Settings
from podlevel.engine.cpuset import CPUSet
from podlevel.engine.errors import AdmissionError
from podlevel.engine.manager import Assignment, Engine, EngineConfig
from podlevel.engine.pod import Container, ContainerKind, Pod, Resources
from podlevel.engine.topology import from_spec
from podlevel.engine.topology_manager import Scope
from podlevel.podspec.manifest import SHAPE_ANNOTATION, to_annotation

MI = 2**20
EXCLUSIVE = (Assignment.POD_EXCLUSIVE, Assignment.NODE_EXCLUSIVE)


def engine(scope: Scope) -> Engine:
    return Engine(
        from_spec("sockets=1,nodes-per-socket=2,cores-per-node=4,threads-per-core=2"),
        EngineConfig(
            scope=scope,
            reserved_cpus=CPUSet.parse("0,8"),
            reserved_memory=MappingProxyType({0: MappingProxyType({"memory": 100 * MI})}),
        ),
    )


def guaranteed(cpus: int, memory_mi: int) -> Resources:
    values = {"cpu": cpus * 1000, "memory": memory_mi * MI}
    return Resources(MappingProxyType(values), MappingProxyType(dict(values)))


@st.composite
def pods(draw: st.DrawFn, index: int) -> Pod | None:
    """A bubble with a slice and a pod-shared sidecar, a classic Guaranteed pod, or unmanaged (None)."""
    kind = draw(st.sampled_from(["bubble", "classic", "unmanaged"]))
    if kind == "unmanaged":
        return None
    if kind == "bubble":
        budget = draw(st.integers(2, 5))
        exclusive = draw(st.integers(1, budget - 1))
        return Pod(
            f"uid-{index}", f"p{index}", resources=guaranteed(budget, 512),
            init_containers=(Container("log", ContainerKind.SIDECAR),),
            containers=(Container("app", resources=guaranteed(exclusive, 256)),),
        )
    return Pod(f"uid-{index}", f"p{index}", containers=(Container("app", resources=guaranteed(
        draw(st.integers(1, 3)), 256)),))


def sandbox(index: int, pod: Pod | None) -> Sandbox:
    annotations = {SHAPE_ANNOTATION: to_annotation(pod)} if pod else {}
    return Sandbox(f"sb-{index}", f"uid-{index}", f"p{index}", "default", annotations)


def _held(settings: Settings) -> tuple[CPUSet, tuple[int, ...], int | None]:
    return settings.cpus, settings.mems, settings.cpu_quota_us


def check(placement: Placement) -> None:
    """Every container holds what it should; no exclusive CPU is in two pods; the node pool is shared."""
    placement.pending_updates()
    owners: dict[int, str] = {}
    pool = placement.engine.node_shared_pool(placement.state)
    for cid in placement.container_ids():
        settings = placement.applied[cid]
        assert settings == placement.desired(cid)
        if settings.assignment in EXCLUSIVE:
            pod = cid.split("/")[0]
            for cpu in settings.cpus:
                assert owners.setdefault(cpu, pod) == pod, f"CPU {cpu} exclusive in {pod} and {owners[cpu]}"
        elif settings.assignment is Assignment.NODE_SHARED:
            assert settings.cpus == pool
    assert pool.is_disjoint(CPUSet([c for c in owners]))


@settings(deadline=None, max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_sequences_and_restarts(data: st.DataObject) -> None:
    scope = data.draw(st.sampled_from(list(Scope)))
    live = Placement(engine(scope))
    running: dict[int, tuple[Sandbox, Pod | None]] = {}
    partial: set[str] = set()
    """Pods some of whose containers exited: the runtime shows less than their bubble."""
    for step in range(data.draw(st.integers(1, 16))):
        action = data.draw(st.sampled_from(["create", "create", "remove", "restart"]))
        if action == "create":
            pod = data.draw(pods(step))
            box = sandbox(step, pod)
            names = [c.name for c in pod.all_containers] if pod else ["app"]
            before = (live.state, dict(live.applied), live.container_ids())
            try:
                for name in names:
                    live.create(box, f"p{step}/{name}", name)
            except AdmissionError:
                assert names.index(name) == 0, "a pod is refused at its first container or not at all"
                assert (live.state, dict(live.applied), live.container_ids()) == before
                continue
            running[step] = (box, pod)
        elif action == "remove" and running:
            index = data.draw(st.sampled_from(sorted(running)))
            live.remove_sandbox(running.pop(index)[0].id)
        elif action == "restart":
            live.pending_updates()
            rows = [
                Observed(cid, f"sb-{cid.split('/')[0][1:]}", cid.split("/")[1], *_held(s))
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
            restarted = Placement(engine(scope))
            updates, refused = restarted.synchronize(sandboxes, rows)
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
