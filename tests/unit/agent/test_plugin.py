"""agent.plugin: what the NRI handler answers, built from Placement on a real engine (no socket)."""

from __future__ import annotations

import pytest

from podlevel.agent.placement import Placement, Settings
from podlevel.agent.plugin import PodLevelPlugin, updates_of
from podlevel.engine.cfs import CFS_PERIOD_US, UNLIMITED_QUOTA
from podlevel.engine.cpuset import CPUSet
from podlevel.engine.manager import Assignment
from podlevel.engine.pod import Pod
from podlevel.nri import Code, RpcError, api
from podlevel.podspec.manifest import SHAPE_ANNOTATION, to_annotation
from support.builders import MI, fast_path, new_engine


def sandbox(pod: Pod | None, name: str = "web") -> api.PodSandbox:
    if pod is None:
        return api.PodSandbox(id=f"sb-{name}", name=name, uid=f"uid-{name}", namespace="default")
    return api.PodSandbox(
        id=f"sb-{pod.name}", name=pod.name, uid=pod.uid, namespace="default",
        annotations={SHAPE_ANNOTATION: to_annotation(pod)},
    )


def container(
    pod: api.PodSandbox, name: str, state: api.ContainerState = api.CONTAINER_RUNNING
) -> api.Container:
    return api.Container(id=f"{pod.name}-{name}", pod_sandbox_id=pod.id, name=name, state=state)


@pytest.fixture
def plugin() -> PodLevelPlugin:
    return PodLevelPlugin(Placement(new_engine()))


def test_create_answers_with_the_adjustment_and_moves_the_node_shared_pool(plugin: PodLevelPlugin) -> None:
    web = sandbox(None)
    first = plugin.create_container(web, container(web, "server"))
    assert first.adjust is not None and list(first.updates) == []
    assert (first.adjust.linux.resources.cpu.cpus, first.adjust.linux.resources.cpu.mems) == ("0-15", "0,1")
    assert not first.adjust.linux.resources.cpu.HasField("quota"), "the node shared pool keeps its quota"

    fast = sandbox(fast_path())
    result = plugin.create_container(fast, container(fast, "app"))

    assert result.adjust is not None
    cpu = result.adjust.linux.resources.cpu
    app = plugin.placement.applied["fast-app"]
    assert app.assignment is Assignment.POD_EXCLUSIVE
    assert (cpu.cpus, cpu.mems, cpu.quota.value, cpu.period.value) == (
        str(app.cpus), app.mems_text, UNLIMITED_QUOTA, CFS_PERIOD_US
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
    updates = updates_of({f"c{i}": settings for i in range(300)})
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
