"""report.metrics: the counters against decisions a real engine makes through the NRI handler, read back
from the text exposition with prometheus-client's own parser."""

from __future__ import annotations

import errno
import http.client
import platform
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from podlevel.agent.placement import Placement
from podlevel.agent.plugin import PodLevelPlugin
from podlevel.agent.pod_cgroups import PodCgroups
from podlevel.build import NRI_API, version
from podlevel.engine.topology_manager import Scope
from podlevel.httpd import Server
from podlevel.nri import RpcError
from podlevel.nri.session import PLUGIN_SERVICE
from podlevel.podspec.manifest import SHAPE_ANNOTATION
from podlevel.report.metrics import PluginMetrics, metrics_route
from podlevel.state.store import StateDir
from support.builders import (
    GI,
    MI,
    all_exclusive,
    app,
    container,
    fast_path,
    guaranteed,
    new_engine,
    pod,
    sandbox,
    v2_root,
)
from support.scrape import Samples, samples_of, value


def samples(metrics: PluginMetrics) -> Samples:
    return samples_of(metrics.exposition().decode())


def allocations(seen: Samples, resource: str, source: str) -> float:
    return value(seen, "resource_manager_allocations_total", resource_name=resource, source=source)


def errors(seen: Samples, resource: str, source: str) -> float:
    return value(seen, "resource_manager_allocation_errors_total", resource_name=resource, source=source)


def assignments(seen: Samples, resource: str, kind: str) -> float:
    return value(seen, "resource_manager_container_assignments", resource_name=resource, assignment_type=kind)


def refused(seen: Samples, kind: str) -> float:
    return value(seen, "nri_podlevel_admissions_refused_total", error_type=kind)


def plugin_with_metrics(
    scope: Scope = Scope.POD, *, state: StateDir | None = None, cgroup_root: Path | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[PodLevelPlugin, PluginMetrics]:
    """A plugin on the 2x8-CPU test engine whose events the metrics count, as `nri-podlevel run` wires it."""
    plugins: list[PodLevelPlugin] = []
    metrics = PluginMetrics(lambda: plugins[0].snapshot)
    cgroups = PodCgroups(cgroup_root, metrics, clock) if cgroup_root is not None else None
    plugins.append(
        PodLevelPlugin(Placement(new_engine(scope=scope)), state=state, pod_cgroups=cgroups, observer=metrics)
    )
    return plugins[0], metrics


def test_a_pod_level_pod_counts_once_per_container_on_the_pod_path() -> None:
    plugin, metrics = plugin_with_metrics()
    fast = sandbox(fast_path())  # a 4-CPU bubble: app with 2 exclusive CPUs and 256Mi, sidecar "log" shared

    plugin.create_container(fast, container(fast, "log"))
    plugin.create_container(fast, container(fast, "app"))
    plugin.stop_pod_sandbox(fast)
    plugin.create_container(fast, container(fast, "log"))  # a restart after release: admitted again

    seen = samples(metrics)
    assert [allocations(seen, r, s) for r in ("cpu", "memory") for s in ("pod", "node")] == [4, 0, 4, 0]
    assert [assignments(seen, r, k) for r in ("cpu", "memory") for k in ("pod_exclusive", "pod_shared")] == [
        2, 2, 2, 2
    ]
    assert assignments(seen, "cpu", "node_exclusive") == assignments(seen, "memory", "node_exclusive") == 0


def test_container_scope_allocates_exclusive_containers_from_the_node() -> None:
    plugin, metrics = plugin_with_metrics(Scope.CONTAINER)
    fast = sandbox(fast_path())

    plugin.create_container(fast, container(fast, "app"))
    plugin.create_container(fast, container(fast, "log"))

    seen = samples(metrics)
    assert (allocations(seen, "cpu", "node"), assignments(seen, "cpu", "node_exclusive")) == (1, 1)
    assert (allocations(seen, "memory", "node"), assignments(seen, "memory", "node_exclusive")) == (1, 1)
    assert allocations(seen, "cpu", "pod") == allocations(seen, "memory", "pod") == 0
    assert assignments(seen, "cpu", "pod_shared") == 0


def test_a_guaranteed_pod_without_a_budget_takes_the_node_path() -> None:
    plugin, metrics = plugin_with_metrics()
    main, helper = app("main", guaranteed(2000, 512 * MI)), app("helper", guaranteed(500, 64 * MI))
    classic = sandbox(pod("classic", main, helper, uid="uid-classic"))

    plugin.create_container(classic, container(classic, "main"))
    plugin.create_container(classic, container(classic, "helper"))

    seen = samples(metrics)
    assert (allocations(seen, "cpu", "node"), assignments(seen, "cpu", "node_exclusive")) == (1, 1), (
        "a fractional CPU request runs in the node shared pool"
    )
    assert (allocations(seen, "memory", "node"), assignments(seen, "memory", "node_exclusive")) == (2, 2), (
        "the memory manager pins every container of a Guaranteed pod"
    )
    assert allocations(seen, "cpu", "pod") == allocations(seen, "memory", "pod") == 0


def test_refusals_count_by_error_type_and_allocation_errors_by_the_manager_that_refused() -> None:
    plugin, metrics = plugin_with_metrics()
    no_room = sandbox(fast_path("no-room", 2, 2))  # exclusive slices take the whole bubble
    huge = sandbox(fast_path("huge", 64, 2))  # more CPUs than the node has
    liar = sandbox(fast_path("liar"))
    liar.linux.pod_resources.memory.limit.value = GI // 2  # the shape claims 1Gi

    for refused_pod in (no_room, no_room, huge, liar):
        with pytest.raises(RpcError):
            plugin.create_container(refused_pod, container(refused_pod, "app"))

    seen = samples(metrics)
    kinds = ("EmptyPodSharedPoolError", "TopologyAffinityError", "InvalidPodShape")
    assert [refused(seen, kind) for kind in kinds] == [2, 1, 1]
    assert refused(seen, "SMTAlignmentError") == refused(seen, "UnexpectedAdmissionError") == 0
    assert errors(seen, "cpu", "pod") == 2, "the topology manager's refusal allocates nothing"
    assert errors(seen, "memory", "pod") == errors(seen, "cpu", "node") == errors(seen, "memory", "node") == 0
    assert allocations(seen, "cpu", "pod") == 0
    assert SHAPE_ANNOTATION in plugin.snapshot.refusals[liar.id]


def test_checkpoint_and_pod_cgroup_write_failures_are_counted(tmp_path: Path) -> None:
    def full(fd: int, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    shape = all_exclusive("fast")
    root = v2_root(tmp_path, shape)
    (root / "kubepods" / f"pod{shape.uid}" / "cpu.max").unlink()
    now = [0.0]
    plugin, metrics = plugin_with_metrics(state=StateDir(tmp_path / "state", writer=full), cgroup_root=root,
                                          clock=lambda: now[0])
    fast = sandbox(shape)
    fast.linux.cgroup_parent = f"/kubepods/pod{shape.uid}"

    plugin.create_container(fast, container(fast, "app"))
    now[0] += 1.0  # the pod cgroup's first retry is due
    plugin.stop_container(fast, container(fast, "app"))

    seen = samples(metrics)
    assert value(seen, "nri_podlevel_checkpoint_write_failures_total") == 2, "retried at every event"
    assert value(seen, "nri_podlevel_pod_cgroup_write_failures_total") == 2, "retried when due"


def test_free_cpus_and_memory_per_numa_node_follow_the_latest_snapshot() -> None:
    plugin, metrics = plugin_with_metrics()
    engine = plugin.placement.engine

    def free() -> tuple[list[float], list[float]]:
        seen = samples(metrics)
        nodes = [str(n) for n in engine.topology.numa_node_ids]
        memory = "nri_podlevel_free_memory_bytes"
        return (
            [value(seen, "nri_podlevel_free_cpus", numa_node=n) for n in nodes],
            [value(seen, memory, numa_node=n, resource_name="memory") for n in nodes],
        )

    cpus_before, memory_before = free()
    assert cpus_before == [6, 8], "CPUs 0-3,8-11 on node 0, 4-7,12-15 on node 1; CPUs 0 and 8 reserved"
    fast = sandbox(fast_path())
    plugin.create_container(fast, container(fast, "app"))

    cpus_after, memory_after = free()
    [node] = plugin.placement.state.memory.pod_entries[fast.uid][0].numa_affinity
    assert sum(cpus_before) - sum(cpus_after) == 4 and cpus_after[node] == cpus_before[node] - 4
    assert memory_before[node] - memory_after[node] == GI
    assert memory_after[1 - node] == memory_before[1 - node]


def test_runtime_connections_and_event_latency() -> None:
    _, metrics = plugin_with_metrics()
    metrics.connected()
    metrics.reconnecting()
    metrics.reconnecting()
    metrics.connected()
    for seconds in (0.00004, 0.0003, 0.0003, 3.0):
        metrics.event_handled("create_container", seconds)
    metrics.event_handled("synchronize", 0.02)

    seen = samples(metrics)
    assert value(seen, "nri_podlevel_runtime_connections_total") == 2
    assert value(seen, "nri_podlevel_runtime_reconnects_total") == 2
    assert value(seen, "nri_podlevel_runtime_connected") == 1
    bucket = "nri_podlevel_event_duration_seconds_bucket"
    bounds = ("5e-05", "0.0005", "2.0", "+Inf")
    assert [value(seen, bucket, event="create_container", le=le) for le in bounds] == [1, 3, 3, 4]
    assert value(seen, "nri_podlevel_event_duration_seconds_count", event="synchronize") == 1


def test_every_instance_has_its_own_registry() -> None:
    (first, first_metrics), (_, second_metrics) = plugin_with_metrics(), plugin_with_metrics()
    fast = sandbox(fast_path())
    first.create_container(fast, container(fast, "app"))

    assert allocations(samples(first_metrics), "cpu", "pod") == 2
    assert allocations(samples(second_metrics), "cpu", "pod") == 0


def test_the_metrics_route_serves_the_text_format() -> None:
    _, metrics = plugin_with_metrics()
    server = Server("127.0.0.1:0", {"/metrics": metrics_route(metrics)})
    server.start()
    try:
        connection = http.client.HTTPConnection(*server.address, timeout=5)
        connection.request("GET", "/metrics")
        response = connection.getresponse()
        body = response.read().decode()
    finally:
        server.stop()
    assert response.status == 200
    assert response.getheader("Content-Type", "").startswith("text/plain; version=")
    names = {family.name for family in text_string_to_metric_families(body)}
    assert {"resource_manager_allocations", "resource_manager_container_assignments"} <= names
    assert "process_cpu_seconds" in names


def test_the_build_is_named_by_its_version_python_and_nri_api() -> None:
    _, metrics = plugin_with_metrics()
    seen = samples(metrics)
    labels = {"version": version(), "python": platform.python_version(), "nri": NRI_API}
    assert value(seen, "nri_podlevel_build_info", **labels) == 1
    assert NRI_API in PLUGIN_SERVICE  # the package the plugin's calls are addressed to
