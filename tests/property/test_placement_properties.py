"""Invariants of the agent's Placement over random pods and random create / remove / restart sequences.

A restart is a new Placement that learns the node only from what the runtime shows (each container's
cpuset, memory nodes and quota, listed in a random order) — the plugin has no checkpoint — and must end
with the same allocations the live one had.
"""

from __future__ import annotations

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from podlevel.agent.placement import Observed, Placement, Sandbox, Settings
from podlevel.engine.cpuset import CPUSet
from podlevel.engine.errors import AdmissionError
from podlevel.engine.manager import Assignment
from podlevel.engine.pod import Pod
from podlevel.engine.topology_manager import Scope
from podlevel.podspec.manifest import SHAPE_ANNOTATION, to_annotation
from podlevel.podspec.runtime import RuntimeResources, sandbox_resources
from support.builders import MI, app, guaranteed, new_engine, pod, sidecar

EXCLUSIVE = (Assignment.POD_EXCLUSIVE, Assignment.NODE_EXCLUSIVE)


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
            restarted = Placement(new_engine(scope=scope))
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
