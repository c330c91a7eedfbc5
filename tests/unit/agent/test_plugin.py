"""agent.plugin: what the NRI handler answers, built from Placement on a real engine (no socket)."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import threading
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from podlevel.agent.events import Observer, error_type
from podlevel.agent.nri_messages import by_settings, sandbox_of, updates_of
from podlevel.agent.placement import Placement
from podlevel.agent.plugin import REFUSED_SANDBOX_KEPT_S, REFUSED_SANDBOXES_KEPT, PodLevelPlugin
from podlevel.agent.pod_cgroups import PodCgroups, PodCgroupWorker
from podlevel.agent.records import Settings
from podlevel.agent.startup import restored_state
from podlevel.engine.cfs import CFS_PERIOD_US, UNLIMITED_QUOTA
from podlevel.engine.cpuset import CPUSet
from podlevel.engine.errors import AdmissionError, InputError
from podlevel.engine.manager import Assignment, NodeState, PodDecision
from podlevel.engine.restore import Checkpointed
from podlevel.engine.topology_manager import TopologyPolicyName
from podlevel.nri import MAX_REPLY_BYTES, Code, RpcError, api
from podlevel.nri.runtime import EVENTS_FROM_V0_10, RuntimeInfo
from podlevel.podspec.manifest import SHAPE_ANNOTATION
from podlevel.report.views import views
from podlevel.state.engine_state import checkpoints_of
from podlevel.state.formats import CPUCheckpoint
from podlevel.state.store import StateDir, journal_files
from support.builders import (
    GI,
    MI,
    CheckpointGate,
    Gated,
    all_exclusive,
    container,
    fast_path,
    new_engine,
    sandbox,
    v2_root,
)


@pytest.fixture
def plugin() -> PodLevelPlugin:
    return PodLevelPlugin(Placement(new_engine()))


def test_create_answers_with_the_adjustment_and_moves_the_node_shared_pool(plugin: PodLevelPlugin) -> None:
    web = sandbox(None)
    first = plugin.create_container(web, container(web, "server"))
    assert first.adjust is not None and list(first.updates) == []
    assert (first.adjust.linux.resources.cpu.cpus, first.adjust.linux.resources.cpu.mems) == ("0-15", "0-1")
    assert not first.adjust.linux.resources.cpu.HasField("quota"), "the node shared pool keeps its quota"

    fast = sandbox(fast_path())
    result = plugin.create_container(fast, container(fast, "app"))

    assert result.adjust is not None
    cpu = result.adjust.linux.resources.cpu
    app = plugin.placement.applied["fast-app"]
    assert app.assignment is Assignment.POD_EXCLUSIVE
    assert (cpu.cpus, cpu.mems, cpu.quota.value, cpu.period.value) == (
        str(app.cpus), str(CPUSet(app.mems)), UNLIMITED_QUOTA, CFS_PERIOD_US
    )
    [update] = result.updates
    pool = plugin.placement.engine.node_shared_pool(plugin.placement.state)
    assert len(pool) == 12
    assert (update.container_id, update.linux.resources.cpu.cpus, update.ignore_failure) == (
        "web-server", str(pool), True
    )


def test_refused_pod_fails_create_with_the_kubelet_reason(plugin: PodLevelPlugin) -> None:
    no_room = sandbox(fast_path("no-room", 2, 2))
    before = plugin.placement.state
    with pytest.raises(RpcError) as raised:
        plugin.create_container(no_room, container(no_room, "app"))
    assert raised.value.code == Code.FAILED_PRECONDITION
    assert raised.value.message.startswith("EmptyPodSharedPoolError: ")
    assert plugin.placement.state is before


def test_shape_the_runtime_contradicts_is_an_invalid_argument(plugin: PodLevelPlugin) -> None:
    fast = sandbox(fast_path())
    fast.linux.pod_resources.memory.limit.value = 1
    with pytest.raises(RpcError) as raised:
        plugin.create_container(fast, container(fast, "app"))
    assert raised.value.code == Code.INVALID_ARGUMENT
    assert SHAPE_ANNOTATION in raised.value.message and "memory_limit" in raised.value.message


def test_update_container_carries_its_own_moved_settings_once(plugin: PodLevelPlugin) -> None:
    web = sandbox(None)
    plugin.create_container(web, container(web, "server"))
    plugin.create_container(web, container(web, "sidecar"))
    fast = sandbox(fast_path())
    plugin.create_container(fast, container(fast, "app"))
    plugin.stop_pod_sandbox(fast)
    requested = api.LinuxResources()
    requested.memory.limit.value = 64 * MI
    requested.cpu.shares.value = 512

    result = plugin.update_container(web, container(web, "server"), requested)

    by_id = {u.container_id: u for u in result.updates}
    assert sorted(by_id) == ["web-server", "web-sidecar"] and len(result.updates) == 2
    own = by_id["web-server"].linux.resources
    assert (own.cpu.cpus, own.cpu.shares.value, own.memory.limit.value) == ("0-15", 512, 64 * MI)
    assert by_id["web-sidecar"].linux.resources.cpu.cpus == "0-15"
    assert plugin.stop_container(web, container(web, "server")) == []


def test_synchronize_reads_live_containers_and_their_cpusets(plugin: PodLevelPlugin) -> None:
    web = sandbox(None)
    running = container(web, "server")
    running.linux.resources.cpu.cpus = "0-15"
    unpinned = container(web, "sidecar", api.CONTAINER_CREATED)
    stopped = container(web, "old", api.CONTAINER_STOPPED)

    updates = plugin.synchronize([web], [running, unpinned, stopped])

    assert [u.container_id for u in updates] == ["web-sidecar"]
    assert sorted(plugin.placement.container_ids()) == ["web-server", "web-sidecar"]


def test_updates_of_many_containers_moving_together() -> None:
    settings = Settings(CPUSet.parse("1-7,9-15"), (0, 1), None, CFS_PERIOD_US, Assignment.NODE_SHARED)
    updates = updates_of(by_settings({f"c{i}": settings for i in range(300)}))
    assert [u.container_id for u in updates] == [f"c{i}" for i in range(300)]
    assert {u.linux.resources.cpu.cpus for u in updates} == {"1-7,9-15"}



def test_synchronize_survives_an_unreadable_cpuset(
    plugin: PodLevelPlugin, caplog: pytest.LogCaptureFixture
) -> None:
    """One container with a cpuset string the plugin cannot read must not fail the whole Synchronize."""
    web = sandbox(None)
    garbled = container(web, "server")
    garbled.linux.resources.cpu.cpus = "0-x"
    fine = container(web, "sidecar")
    fine.linux.resources.cpu.cpus = "0-15"

    updates = plugin.synchronize([web], [garbled, fine])

    assert [u.container_id for u in updates] == ["web-server"], "treated as unknown, so it is set again"
    assert "ignoring the runtime's cpuset" in caplog.text and "'0-x'" in caplog.text


def test_runtime_ids_beyond_the_machine_cost_nothing_and_log_one_bounded_line(
    plugin: PodLevelPlugin, caplog: pytest.LogCaptureFixture
) -> None:
    """`mems` 0-300000 once took seconds; ids this machine does not have (16 CPUs, 2 nodes) are unknown."""
    web = sandbox(None)
    containers = []
    for index, (cpus, mems) in enumerate([("0-15", "0-300000"), ("0-4000000000", "0"), ("0-16", "0"),
                                          ("0-15", "2"), ("0-15", "0-1")]):
        created = container(web, f"c{index}")
        created.linux.resources.cpu.cpus, created.linux.resources.cpu.mems = cpus, mems
        containers.append(created)

    updates = plugin.synchronize([web], containers)

    # An unknown cpuset is set again; unknown memory nodes are left as the runtime has them, as unset ones.
    assert sorted(u.container_id for u in updates) == ["web-c1", "web-c2"]
    lines = [r.getMessage() for r in caplog.records if "ignoring the runtime's cpusets" in r.getMessage()]
    assert len(lines) == 1 and "of 4 containers" in lines[0] and "and 3 more" in lines[0]
    assert len(lines[0]) < 400


def test_a_huge_name_does_not_make_a_huge_log_line(caplog: pytest.LogCaptureFixture) -> None:
    plugin = PodLevelPlugin(Placement(new_engine()))
    web = sandbox(None)
    web.name = "n" * (1 << 20)
    shaped = sandbox(fast_path())
    app = container(shaped, "app")
    shaped.name = "p" * (1 << 20)
    plugin.create_container(web, container(web, "c" * (1 << 20)))
    with pytest.raises(RpcError) as refused:
        plugin.create_container(shaped, app)
    assert refused.value.code is Code.INVALID_ARGUMENT and "DNS-1123 subdomain" in str(refused.value)
    assert len(str(refused.value)) < 1000
    assert caplog.records and all(len(r.getMessage()) < 1000 for r in caplog.records)


def test_a_restart_logs_a_pod_whose_recorded_memory_no_longer_fits(caplog: pytest.LogCaptureFixture) -> None:
    """Node 0 now reserves all but 512Mi: the bubble's 1Gi recorded there is re-placed, its CPUs kept."""
    none = TopologyPolicyName.NONE
    live = PodLevelPlugin(Placement(new_engine(topology_policy=none)))
    fast = sandbox(fast_path())
    running = [container(fast, "app"), container(fast, "log")]
    for created in running:
        live.create_container(fast, created)
    state = live.placement.state
    reserved = {0: {"memory": 16 * GI - 512 * MI}}
    engine = new_engine(topology_policy=none, reserved_memory=reserved)
    restarted = PodLevelPlugin(Placement(engine, recorded=Checkpointed(state.cpu, state.memory)))

    restarted.synchronize([fast], running)

    [line] = [r.getMessage() for r in caplog.records if "moved after resync" in r.getMessage()]
    assert "sb-fast" in line and "NUMA node 0" in line and "after reserved memory" in line
    assert restarted.placement.state.cpu.pod_entries == state.cpu.pod_entries


# -- what is decided is on disk before it is applied ---------------------------------------------------------


def test_an_admission_is_checkpointed_before_the_answer(tmp_path: Path) -> None:
    state = StateDir(tmp_path / "state")
    plugin = PodLevelPlugin(Placement(new_engine()), state=state)
    fast = sandbox(fast_path())

    plugin.create_container(fast, container(fast, "app"))

    loaded = state.load()
    assert loaded.cpu.content is not None and loaded.memory.content is not None
    assert loaded.cpu.content.pod_entries == plugin.placement.state.cpu.pod_entries
    assert loaded.cpu.content.entries == plugin.placement.state.cpu.entries
    assert loaded.memory.content.pod_entries == plugin.placement.state.memory.pod_entries
    # A release answers nothing: it is on disk before the next answer that applies anything.
    web = sandbox(None)
    plugin.stop_pod_sandbox(fast)
    plugin.stop_container(web, container(web, "server"))
    assert state.load().cpu.content == CPUCheckpoint("static", CPUSet.parse("0-15"))


def test_a_restart_takes_back_what_only_the_journal_held(tmp_path: Path) -> None:
    """The files lag (their write is held) when the plugin is killed after answering an admission: the
    journal holds it, a restart replays it and writes it into the files."""
    gate = CheckpointGate()
    plugin = PodLevelPlugin(Placement(new_engine()), state=StateDir(tmp_path / "state", writer=gate))
    plugin.synchronize([], [])  # the files' first write, which the records build on
    gate.open.clear()
    fast = sandbox(fast_path())
    plugin.run_pod_sandbox(fast)
    plugin.create_container(fast, container(fast, "app"))
    engine, answered = plugin.placement.engine, plugin.placement.state
    try:
        assert journal_files(tmp_path / "state"), "the admission was answered from the journal"
        restored = restored_state(StateDir(tmp_path / "state"), engine)
        assert restored is not None and restored.cpu.pod_entries == answered.cpu.pod_entries
        assert restored.memory is not None and restored.memory.pod_entries == answered.memory.pod_entries
        loaded = StateDir(tmp_path / "state").load()
        assert (loaded.cpu.content, loaded.memory.content) == checkpoints_of(engine, answered)
        assert loaded.journal.files == (), "the restart wrote the journal into the files"
    finally:
        gate.open.set()
        plugin.close()


def test_closing_writes_what_a_notification_decided(tmp_path: Path) -> None:
    state = StateDir(tmp_path / "state")
    plugin = PodLevelPlugin(Placement(new_engine()), state=state)
    fast = sandbox(fast_path())
    plugin.run_pod_sandbox(fast)
    plugin.close()
    saved = state.load().cpu.content
    assert saved is not None and saved.pod_entries == plugin.placement.state.cpu.pod_entries


def test_a_failed_checkpoint_write_places_the_container_and_is_retried(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    full = True

    def writer(fd: int, data: bytes) -> None:
        if full:
            raise OSError(errno.ENOSPC, "No space left on device")
        os.write(fd, data)

    state = StateDir(tmp_path / "state", writer=writer)
    plugin = PodLevelPlugin(Placement(new_engine()), state=state)
    fast, web = sandbox(fast_path()), sandbox(None)

    result = plugin.create_container(fast, container(fast, "app"))
    plugin.create_container(web, container(web, "server"))

    assert result.adjust is not None
    assert state.load().cpu.content is None
    failures = [r for r in caplog.records if "checkpoint not written" in r.getMessage()]
    assert len(failures) == 1 and "No space left on device" in failures[0].getMessage()
    full = False
    plugin.stop_container(web, container(web, "server"))
    saved = state.load().cpu.content
    assert saved is not None and saved.pod_entries == plugin.placement.state.cpu.pod_entries


def test_the_pod_cgroup_gets_the_bubble_and_a_failed_write_is_retried(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pod = all_exclusive("fast")
    root = v2_root(tmp_path, pod)
    pod_dir = root / "kubepods" / f"pod{pod.uid}"
    now = [0.0]
    cgroups = PodCgroups(root, clock=lambda: now[0])
    plugin = PodLevelPlugin(Placement(new_engine()), pod_cgroups=cgroups)
    fast = sandbox(pod)
    fast.linux.cgroup_parent = f"/kubepods/pod{pod.uid}"
    (pod_dir / "cpu.max").unlink()

    plugin.create_container(fast, container(fast, "app"))

    bubble = plugin.placement.state.cpu.pod_entries[pod.uid]
    assert (pod_dir / "cpuset.cpus").read_text().strip() == str(bubble)
    assert fast.id in cgroups.failed and "cpu.max" in cgroups.failed[fast.id]
    (pod_dir / "cpu.max").write_text("200000 100000\n")
    plugin.stop_container(fast, container(fast, "app"))
    assert fast.id in cgroups.failed, "retried with backoff, not at every event"
    now[0] += 1.0
    plugin.stop_container(fast, container(fast, "app"))
    assert cgroups.failed == {}
    assert (pod_dir / "cpu.max").read_text().split()[0] == "max"
    assert len([r for r in caplog.records if "pod cgroup not written" in r.getMessage()]) == 1


def test_a_cgroup_parent_outside_the_root_is_refused_for_good(tmp_path: Path) -> None:
    pod = fast_path()
    cgroups = PodCgroups(v2_root(tmp_path, pod))
    plugin = PodLevelPlugin(Placement(new_engine()), pod_cgroups=cgroups)
    fast = sandbox(pod)
    fast.linux.cgroup_parent = f"/kubepods/../../etc/pod{pod.uid}"

    plugin.create_container(fast, container(fast, "app"))

    assert "'..'" in cgroups.failed[fast.id]
    assert not (tmp_path / "etc").exists()


def test_a_snapshot_stays_as_taken_and_is_made_anew_only_after_a_change(plugin: PodLevelPlugin) -> None:
    fast, no_room = sandbox(fast_path()), sandbox(fast_path("no-room", 2, 2))
    app = container(fast, "app")
    app.linux.cgroups_path = "/kubepods/poduid-fast/fast-app"
    plugin.create_container(fast, app)
    after_create = plugin.snapshot
    assert plugin.snapshot is after_create  # nothing changed in between

    with pytest.raises(RpcError):
        plugin.create_container(no_room, container(no_room, "app"))
    plugin.stop_pod_sandbox(fast)

    assert after_create.placement.containers == {"fast-app": ("sb-fast", "app")}
    assert after_create.placement.admitted == {"sb-fast": "uid-fast"}
    assert after_create.cgroups_paths == {"fast-app": "/kubepods/poduid-fast/fast-app"}
    assert after_create.placement.applied["fast-app"].assignment is Assignment.POD_EXCLUSIVE
    now = plugin.snapshot
    assert now.generation == after_create.generation + 1
    assert now.refusals["sb-no-room"].startswith("EmptyPodSharedPoolError: ")
    assert now.placement.containers == {} and now.cgroups_paths == {}
    assert "sb-fast" not in now.placement.sandboxes


def test_a_pod_without_a_bubble_gets_its_parent_cpuset_back(tmp_path: Path) -> None:
    """A run under the static policy narrowed the pod cgroup to a bubble; under the CPU policy `none` the pod
    has no bubble, so its cgroup is widened back to its parent's, or its containers could not follow the
    node shared pool."""
    pod = fast_path()
    root = v2_root(tmp_path, pod)
    kubepods, pod_dir = root / "kubepods", root / "kubepods" / f"pod{pod.uid}"
    (kubepods / "cpuset.cpus.effective").write_text("0-15\n")
    (kubepods / "cpuset.mems.effective").write_text("0-1\n")
    (pod_dir / "cpuset.cpus.effective").write_text("4-7\n")
    (pod_dir / "cpuset.mems.effective").write_text("1\n")
    cgroups = PodCgroups(root)
    plugin = PodLevelPlugin(Placement(new_engine(cpu_policy="none")), pod_cgroups=cgroups)
    fast = sandbox(pod)
    fast.linux.cgroup_parent = f"/kubepods/pod{pod.uid}"

    plugin.create_container(fast, container(fast, "app"))

    assert cgroups.failed == {}
    assert (pod_dir / "cpuset.cpus").read_text().strip() == "0-15"
    assert (pod_dir / "cpuset.mems").read_text().strip() == "0-1"


# -- answers under the runtime's message limit ---------------------------------------------------------------


def shared_node(plugin: PodLevelPlugin, count: int) -> list[api.Container]:
    """`count` running node-shared containers with long ids, as a Synchronize reports them."""
    pods = [sandbox(None, f"web{i}") for i in range(count)]
    running = [
        api.Container(id=f"{i:064x}", pod_sandbox_id=pod.id, name="server", state=api.CONTAINER_RUNNING)
        for i, pod in enumerate(pods)
    ]
    for ctr in running:
        ctr.linux.resources.cpu.cpus = "0-15"
    assert plugin.synchronize(pods, running) == []
    return running


def test_updates_over_the_message_limit_ride_on_the_next_answers(plugin: PodLevelPlugin) -> None:
    """A bubble on a node with 50,000 node-shared containers: each answer stays under 4 MiB, the updates
    that do not fit wait and the next answers carry them, every container exactly once."""
    running = shared_node(plugin, 50_000)
    fast = sandbox(fast_path())
    created = plugin.create_container(fast, container(fast, "app"))
    reply = api.CreateContainerResponse(adjust=created.adjust, update=created.updates)
    assert MAX_REPLY_BYTES - 200 < reply.ByteSize() <= MAX_REPLY_BYTES
    assert 0 < len(created.updates) < len(running)
    # The bubble stands: what was answered applies it, and what was not is still due.
    pool = str(plugin.placement.engine.node_shared_pool(plugin.placement.state))
    later = drain(plugin)
    moved = [u.container_id for u in [*created.updates, *later]]
    assert sorted(moved) == sorted(c.id for c in running)
    assert {u.linux.resources.cpu.cpus for u in [*created.updates, *later]} == {pool}


def test_an_update_answer_keeps_room_for_the_containers_own_update(
    plugin: PodLevelPlugin, monkeypatch: pytest.MonkeyPatch
) -> None:
    running = shared_node(plugin, 40)
    fast = sandbox(fast_path())
    monkeypatch.setattr("podlevel.agent.plugin.MAX_REPLY_BYTES", 1000)
    created = plugin.create_container(fast, container(fast, "app"))
    assert 0 < len(created.updates) < 40
    result = plugin.update_container(sandbox(None, "web39"), running[39], api.LinuxResources())
    assert api.UpdateContainerResponse(update=result.updates).ByteSize() <= 1000
    assert result.updates[-1].container_id == running[39].id
    sent = [u.container_id for u in [*created.updates, *result.updates, *drain(plugin)]]
    assert sorted(sent) == sorted(c.id for c in running)


def drain(plugin: PodLevelPlugin) -> list[api.ContainerUpdate]:
    """What the next StopContainer answers carry, until one carries nothing."""
    updates: list[api.ContainerUpdate] = []
    while more := plugin.stop_container(sandbox(None, "any"), api.Container(id="gone")):
        updates.extend(more)
    return updates


def test_an_adjustment_that_cannot_be_sent_rolls_the_admission_back(
    plugin: PodLevelPlugin, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared_node(plugin, 3)
    before = plugin.placement.view()
    fast = sandbox(fast_path())
    monkeypatch.setattr("podlevel.agent.plugin.MAX_REPLY_BYTES", 8)
    with pytest.raises(RpcError) as raised:
        plugin.create_container(fast, container(fast, "app"))
    assert raised.value.code == Code.RESOURCE_EXHAUSTED
    assert "over the 8-byte answer limit" in raised.value.message
    after = plugin.placement.view()
    assert after == before
    assert plugin.placement.pod_cgroups == {}
    monkeypatch.undo()
    # Nothing was reserved, and nobody is told to move: the retry decides anew, its claim checked again.
    assert drain(plugin) == []
    untruthful = container(fast, "app")
    untruthful.linux.resources.cpu.shares.value = 2
    with pytest.raises(RpcError) as refused:
        plugin.create_container(fast, untruthful)
    assert refused.value.code == Code.INVALID_ARGUMENT
    retried = plugin.create_container(fast, container(fast, "app"))
    assert len(retried.updates) == 3


def test_a_synchronize_answer_over_the_limit_defers_the_rest(
    plugin: PodLevelPlugin, monkeypatch: pytest.MonkeyPatch
) -> None:
    pods = [sandbox(None, f"web{i}") for i in range(30)]
    running = [container(pod, "server") for pod in pods]
    for ctr in running:
        ctr.linux.resources.cpu.cpus = "3"
    monkeypatch.setattr("podlevel.agent.plugin.MAX_REPLY_BYTES", 500)
    first = plugin.synchronize(pods, running)
    assert 0 < len(first) < 30
    assert api.SynchronizeResponse(update=first).ByteSize() <= 500
    assert sorted(u.container_id for u in [*first, *drain(plugin)]) == sorted(c.id for c in running)


# -- admission at RunPodSandbox ------------------------------------------------------------------------------


class Counted(Observer):
    def __init__(self) -> None:
        self.admissions: list[str] = []
        self.refusals: list[str] = []

    def admitted(self, state: NodeState, decision: PodDecision) -> None:
        self.admissions.append(decision.pod.name)

    def refused(self, pod_level: bool, error: AdmissionError | InputError) -> None:
        self.refusals.append(error_type(error))


def test_the_sandbox_admits_and_checkpoints_so_creations_write_nothing(tmp_path: Path) -> None:
    writes: list[int] = []

    def writer(fd: int, data: bytes) -> None:
        writes.append(len(data))
        os.write(fd, data)

    counted = Counted()
    state = StateDir(tmp_path / "state", writer=writer)
    plugin = PodLevelPlugin(Placement(new_engine()), state=state, observer=counted)
    web, fast = sandbox(None), sandbox(fast_path())
    plugin.run_pod_sandbox(web)
    plugin.create_container(web, container(web, "server"))
    assert writes == []

    plugin.run_pod_sandbox(fast)
    assert counted.admissions == ["fast"]
    app = plugin.create_container(fast, container(fast, "app"))

    # Admitted at the sandbox, written before the first answer that applies it; creations write nothing.
    saved = state.load().cpu.content
    assert saved is not None and saved.pod_entries == plugin.placement.state.cpu.pod_entries
    written = len(writes)
    log = plugin.create_container(fast, container(fast, "log"))
    assert len(writes) == written and counted.admissions == ["fast"]
    # The shrunk node shared pool rides on the pod's first answer, before its container exists.
    assert [u.container_id for u in app.updates] == ["web-server"] and list(log.updates) == []
    assert app.adjust is not None and app.adjust.linux.resources.cpu.quota.value == UNLIMITED_QUOTA


def test_a_pod_refused_at_its_sandbox_fails_its_first_container_with_the_kubelet_reason() -> None:
    """Failing RunPodSandbox would leave the started sandbox running on containerd 2.x before 2.2.6: the
    refusal is answered, logged and counted at the pod's first CreateContainer, once."""
    counted = Counted()
    plugin = PodLevelPlugin(Placement(new_engine()), observer=counted)
    no_room = sandbox(fast_path("no-room", 2, 2))
    before = plugin.placement.state

    plugin.run_pod_sandbox(no_room)

    assert plugin.placement.state is before and counted.refusals == []
    with pytest.raises(RpcError) as raised:
        plugin.create_container(no_room, container(no_room, "app"))
    assert raised.value.code == Code.FAILED_PRECONDITION
    assert raised.value.message.startswith("EmptyPodSharedPoolError: pod default/no-room: ")
    assert counted.refusals == ["EmptyPodSharedPoolError"] and plugin.placement.container_ids() == []
    assert plugin.snapshot.refusals == {"sb-no-room": raised.value.message}
    plugin.stop_pod_sandbox(no_room)
    assert plugin.snapshot.refusals == {} and plugin.snapshot.placement.sandboxes == {}


def test_where_the_runtime_rolls_a_failed_sandbox_back_the_pod_is_refused_at_its_sandbox() -> None:
    """containerd 2.2.6, 2.3.3 and 2.4 shut a sandbox down when a plugin fails RunPodSandbox: the refusal is
    answered there, logged and counted once, and nothing of the pod is kept but the refusal."""
    counted = Counted()
    plugin = PodLevelPlugin(Placement(new_engine()), observer=counted)
    plugin.configure(RuntimeInfo("containerd", "2.4.2", "0.12.3", 5.0, 2.0, EVENTS_FROM_V0_10,
                                 rolls_back_refused_sandbox=True), "")
    no_room = sandbox(fast_path("no-room", 2, 2))
    before = plugin.placement.state

    with pytest.raises(RpcError) as raised:
        plugin.run_pod_sandbox(no_room)

    assert raised.value.code == Code.FAILED_PRECONDITION
    assert raised.value.message.startswith("EmptyPodSharedPoolError: pod default/no-room: ")
    assert plugin.placement.state is before and counted.refusals == ["EmptyPodSharedPoolError"]
    assert plugin.snapshot.refusals == {"sb-no-room": raised.value.message}
    plugin.stop_pod_sandbox(no_room)
    plugin.remove_pod_sandbox(no_room)
    assert plugin.snapshot.refusals == {} and plugin.snapshot.placement.sandboxes == {}
    # The runtime removed the sandbox; explain still answers for the pod, with what the runtime was answered.
    explain = views(lambda: plugin.snapshot, {"cgroup_root": None})["/debug/explain"]
    explained = explain({"pod": ["default/no-room"]})
    answer = json.loads(explained.body)
    assert explained.status == 200 and answer["error"]["type"] == "EmptyPodSharedPoolError"
    assert raised.value.message == f"{answer['error']['type']}: {answer['error']['message']}"
    assert answer["refusal"] == raised.value.message


Listed = Callable[[], dict[str, tuple[str, Any]]]


def _rolling_back(clock: Callable[[], float]) -> tuple[PodLevelPlugin, Listed]:
    """A plugin on a runtime that removes a sandbox refused at its RunPodSandbox, and what /debug/node lists:
    pod name -> (status, refusal)."""
    plugin = PodLevelPlugin(Placement(new_engine()), clock=clock)
    plugin.configure(RuntimeInfo("containerd", "2.4.2", "0.12.3", 5.0, 2.0, EVENTS_FROM_V0_10,
                                 rolls_back_refused_sandbox=True), "")
    node = views(lambda: plugin.snapshot, {"cgroup_root": None})["/debug/node"]

    def listed() -> dict[str, tuple[str, Any]]:
        return {p["name"]: (p["status"], p["refusal"]) for p in json.loads(node({}).body)["pods"]}

    return plugin, listed


def _refused_and_removed(plugin: PodLevelPlugin, pod: api.PodSandbox) -> str:
    """Refused at its sandbox, which the runtime then removes; the refusal."""
    with pytest.raises(RpcError) as raised:
        plugin.run_pod_sandbox(pod)
    plugin.stop_pod_sandbox(pod)
    plugin.remove_pod_sandbox(pod)
    return raised.value.message


def test_a_pod_refused_at_a_sandbox_the_runtime_removes_is_listed_until_no_sandbox_is_refused_for_a_while(
) -> None:
    now = [0.0]
    plugin, listed = _rolling_back(lambda: now[0])
    no_room = sandbox(fast_path("no-room", 2, 2))
    refusal = _refused_and_removed(plugin, no_room)
    assert listed() == {"no-room": ("refused", refusal)}
    now[0] = REFUSED_SANDBOX_KEPT_S - 1
    retried = sandbox(fast_path("no-room", 2, 2))
    retried.id = "sb-no-room-retried"  # the kubelet's next try: a new sandbox of the same pod
    _refused_and_removed(plugin, retried)
    now[0] = REFUSED_SANDBOX_KEPT_S + 1
    assert listed() == {"no-room": ("refused", refusal)}, "listed once, from its last refusal"
    assert [p.sandbox.id for p in plugin.snapshot.refused_sandboxes.values()] == ["sb-no-room-retried"]
    now[0] = 2 * REFUSED_SANDBOX_KEPT_S
    assert listed() == {}, "no sandbox refused for REFUSED_SANDBOX_KEPT_S: the pod is no longer tried"


def test_a_pod_refused_at_a_removed_sandbox_leaves_the_list_once_admitted_and_the_list_is_bounded() -> None:
    plugin, listed = _rolling_back(lambda: 0.0)
    _refused_and_removed(plugin, sandbox(fast_path("no-room", 2, 2)))
    fits = sandbox(fast_path("no-room", 4, 2))
    fits.id = "sb-no-room-fits"
    plugin.run_pod_sandbox(fits)
    assert listed() == {"no-room": ("admitted", None)}
    for index in range(REFUSED_SANDBOXES_KEPT + 1):
        _refused_and_removed(plugin, sandbox(fast_path(f"p{index}", 2, 2)))
    refused = [name for name, (status, _) in listed().items() if status == "refused"]
    assert refused == [f"p{index}" for index in range(1, REFUSED_SANDBOXES_KEPT + 1)]


def test_a_shape_the_sandbox_contradicts_fails_the_first_container_as_an_invalid_argument() -> None:
    plugin = PodLevelPlugin(Placement(new_engine()))
    fast = sandbox(fast_path())
    fast.linux.pod_resources.cpu.shares.value = 102
    plugin.run_pod_sandbox(fast)
    with pytest.raises(RpcError) as raised:
        plugin.create_container(fast, container(fast, "app"))
    assert raised.value.code == Code.INVALID_ARGUMENT and "carries 102" in raised.value.message


def test_events_that_change_nothing_publish_no_snapshot(plugin: PodLevelPlugin) -> None:
    fast = sandbox(fast_path())
    plugin.run_pod_sandbox(fast)
    app = container(fast, "app")
    plugin.create_container(fast, app)
    published = plugin.snapshot

    assert plugin.stop_container(fast, app) == []
    plugin.remove_container(fast, api.Container(id="never-created"))
    assert plugin.snapshot is published

    plugin.stop_pod_sandbox(fast)
    released = plugin.snapshot
    assert released is not published and released.placement.sandboxes == {}
    plugin.remove_container(fast, app)
    plugin.remove_pod_sandbox(fast)
    assert plugin.snapshot is released


def test_a_sandbox_keeps_only_the_shape_of_its_annotations() -> None:
    shaped = sandbox(fast_path())
    shaped.annotations["kubectl.kubernetes.io/last-applied-configuration"] = "{" + "x" * 4096 + "}"
    kept = sandbox_of(shaped)
    assert dict(kept.annotations) == {SHAPE_ANNOTATION: shaped.annotations[SHAPE_ANNOTATION]}
    plain = sandbox(None)
    plain.annotations["team"] = "a"
    assert dict(sandbox_of(plain).annotations) == {}


def gated_fast_path(tmp_path: Path) -> tuple[PodLevelPlugin, Gated, api.PodSandbox, Path]:
    """A plugin whose pod cgroup worker writes only once the gate opens, fast-path's sandbox with its pod
    cgroup, and that cgroup's cpuset.cpus."""
    pod = fast_path()
    root = v2_root(tmp_path, pod)
    gated = Gated(root)
    plugin = PodLevelPlugin(Placement(new_engine()), pod_cgroups=PodCgroupWorker(gated))
    fast = sandbox(pod)
    fast.linux.cgroup_parent = f"/kubepods/pod{pod.uid}"
    return plugin, gated, fast, root / "kubepods" / f"pod{pod.uid}" / "cpuset.cpus"


def test_a_synchronize_answers_before_any_pod_cgroup_is_written(tmp_path: Path) -> None:
    """The pod cgroups are written by their worker, not inside the handler: a restarted plugin's Synchronize
    answers without waiting for any pod's cgroup."""
    plugin, gated, fast, cpuset = gated_fast_path(tmp_path)
    try:
        plugin.synchronize([fast], [container(fast, "app")])
        assert not cpuset.read_text().strip(), "answered before the pod cgroup was written"
    finally:
        gated.gate.set()
        plugin.close()
    assert cpuset.read_text().strip() == str(plugin.placement.state.cpu.pod_entries[fast.uid])


def test_a_container_is_created_only_once_its_pod_cgroup_holds_the_bubble(tmp_path: Path) -> None:
    """RunPodSandbox hands its pod cgroup to the worker and answers; the pod's first CreateContainer waits
    for that write, so no container of the pod starts outside its bubble."""
    plugin, gated, fast, cpuset = gated_fast_path(tmp_path)
    try:
        plugin.run_pod_sandbox(fast)
        assert not cpuset.read_text().strip()
        opener = threading.Timer(0.2, gated.gate.set)  # the write completes while the creation waits
        opener.start()
        plugin.create_container(fast, container(fast, "app"))
        assert cpuset.read_text().strip() == str(plugin.placement.state.cpu.pod_entries[fast.uid])
        opener.join()
    finally:
        gated.gate.set()
        plugin.close()


def test_failing_pod_cgroups_are_retried_with_backoff_not_at_every_event(tmp_path: Path) -> None:
    """A --cgroup-root where no pod cgroup can be written: each pod fails once, then waits 1 s, 2 s, 4 s...
    for its next try, however many events arrive meanwhile."""

    class Counting(Observer):
        failures = 0

        def pod_cgroup_failed(self) -> None:
            Counting.failures += 1

    (tmp_path / "cgroup.controllers").write_text("cpuset cpu memory\n")  # a root without the pods' cgroups
    now = [0.0]
    cgroups = PodCgroups(tmp_path, Counting(), clock=lambda: now[0])
    plugin = PodLevelPlugin(Placement(new_engine()), pod_cgroups=cgroups)
    boxes = []
    for index in range(3):
        box = sandbox(fast_path(f"pod{index}", 2, 1))
        box.linux.cgroup_parent = f"/kubepods/pod{box.uid}"
        plugin.run_pod_sandbox(box)
        boxes.append(box)
    assert Counting.failures == 3
    for _ in range(20):
        plugin.stop_container(boxes[0], container(boxes[0], "app"))
    assert Counting.failures == 3, "no retry before its time"
    for delay, total in ((1.0, 6), (1.0, 6), (1.0, 9), (4.0, 12)):
        now[0] += delay
        plugin.stop_container(boxes[0], container(boxes[0], "app"))
        assert Counting.failures == total


Sender = Callable[[Sequence[api.ContainerUpdate]], Awaitable[Sequence[api.ContainerUpdate]]]


def released_fast_path(sender: Sender, *, unsolicited: bool) -> tuple[PodLevelPlugin, CPUSet]:
    """web in the node shared pool, fast-path's bubble, then fast-path stopped on a runtime that serves the
    plugin's own updates or not: the plugin, and the CPUs web held beside the bubble."""
    plugin = PodLevelPlugin(Placement(new_engine()))
    plugin.configure(RuntimeInfo("containerd", "2.4.2", "v0.12.3", 5.0, 2.0, EVENTS_FROM_V0_10,
                                 rolls_back_refused_sandbox=True, serves_unsolicited_updates=unsolicited), "")
    plugin.send_updates = sender
    web, fast = sandbox(None), sandbox(fast_path())
    plugin.create_container(web, container(web, "server"))
    plugin.create_container(fast, container(fast, "app"))
    narrowed = plugin.placement.applied["web-server"].cpus
    plugin.stop_pod_sandbox(fast)
    return plugin, narrowed


@pytest.mark.parametrize("unsolicited", [True, False], ids=["nri-0.12.1-and-later", "older-nri"])
def test_freed_cpus_reach_the_node_shared_pool_at_once_where_the_runtime_serves_a_plugins_own_update(
        unsolicited: bool) -> None:
    """After a release, an UpdateContainers call of the plugin's own widens the node-shared containers at
    once, made outside the StopPodSandbox handler; an older runtime gets them with the next answer."""
    sent: list[list[str]] = []

    async def sender(updates: Sequence[api.ContainerUpdate]) -> list[api.ContainerUpdate]:
        sent.append([u.container_id for u in updates])
        return []

    async def scenario() -> None:
        plugin, narrowed = released_fast_path(sender, unsolicited=unsolicited)
        await plugin.pushes_done()

        assert sent == ([["web-server"]] if unsolicited else [])
        web = sandbox(None)
        later = plugin.stop_container(web, container(web, "server"))
        assert [u.container_id for u in later] == ([] if unsolicited else ["web-server"])
        widened = plugin.placement.applied["web-server"].cpus
        assert narrowed.is_subset(widened) and narrowed != widened, "the pod's CPUs went back to the pool"

    asyncio.run(scenario())


def test_an_update_the_runtime_refused_rides_on_the_next_answer() -> None:
    async def refusing(updates: Sequence[api.ContainerUpdate]) -> list[api.ContainerUpdate]:
        raise RpcError(Code.UNAVAILABLE, "not connected to the runtime")

    async def scenario() -> None:
        plugin, _ = released_fast_path(refusing, unsolicited=True)
        assert await plugin.pushes_done() == [0]
        web = sandbox(None)
        later = plugin.stop_container(web, container(web, "server"))
        assert [u.container_id for u in later] == ["web-server"]

    asyncio.run(scenario())
