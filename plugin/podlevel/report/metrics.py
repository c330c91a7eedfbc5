"""Prometheus metrics of the plugin, served as `/metrics` on the report endpoint.

The kubelet's pod-level resource manager metrics, counted where the kubelet counts them (per resource
manager, `cpu` and `memory`):
- `resource_manager_allocations_total{resource_name, source}`: on the pod-level path (`source="pod"`) one per
  container of an admitted pod; on the node path (`source="node"`) one per container given resources of its
  own from the node (exclusive CPUs; NUMA-pinned memory).
- `resource_manager_allocation_errors_total{resource_name, source}`: one per refusal by that manager's
  allocation; a refusal by the topology manager (TopologyAffinityError) allocates nothing and is counted
  only in `nri_podlevel_admissions_refused_total`.
- `resource_manager_container_assignments{resource_name, assignment_type}`: containers granted
  `node_exclusive`, `pod_exclusive` or `pod_shared` resources, cumulative. The kubelet registers it as a
  counter without the `_total` suffix, which this client cannot expose; it is a gauge that only grows here,
  so queries written for the kubelet's name find it.
Counting happens at admissions (RunPodSandbox, or the first container of a pod admitted late); pods a
restarted plugin takes back allocate nothing new.

The plugin's own, prefixed `nri_podlevel_`: refusals by error type, NRI handler latency per event (from the
request's arrival, as the runtime's timeout sees it), checkpoint and pod cgroup write failures, runtime
connections, redials and whether it is connected now, and, computed from the latest snapshot at scrape
time, free CPUs and free memory per NUMA node.

The counting runs on the NRI event thread, so it is a prepared child's `inc()`: every labelled child is
created once up front (or at its first use, for handler names) and kept, never looked up by label values
per event. Each `PluginMetrics` has its own registry, so tests can build several.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from http import HTTPStatus
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from podlevel.agent.events import INVALID_POD_SHAPE, Observer, error_type
from podlevel.agent.snapshot import NodeSnapshot
from podlevel.build import NRI_API, python_version, version
from podlevel.engine.errors import (
    EMPTY_POD_SHARED_POOL_ERROR,
    SMT_ALIGNMENT_ERROR,
    TOPOLOGY_AFFINITY_ERROR,
    UNEXPECTED_ADMISSION_ERROR,
    AdmissionError,
    InputError,
)
from podlevel.engine.manager import Assignment, NodeState, PodDecision
from podlevel.engine.pod import CPU, MEMORY
from podlevel.httpd import Query, Reply, Route
from podlevel.nri import StubObserver

RESOURCES: Final = (CPU, MEMORY)
REPAIRED_FIELDS: Final = ("cpus", "mems", "quota")
SOURCES: Final = ("pod", "node")
ASSIGNMENT_TYPES: Final = (Assignment.NODE_EXCLUSIVE, Assignment.POD_EXCLUSIVE, Assignment.POD_SHARED)
ERROR_TYPES: Final = (
    TOPOLOGY_AFFINITY_ERROR, SMT_ALIGNMENT_ERROR, EMPTY_POD_SHARED_POOL_ERROR, UNEXPECTED_ADMISSION_ERROR,
    INVALID_POD_SHAPE,
)
LATENCY_BUCKETS: Final = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0,
)
"""Seconds: a CreateContainer takes ~100 us on a small node; 2 s is containerd's default request timeout."""

_SOURCE_OF: Final = {
    Assignment.POD_EXCLUSIVE: "pod", Assignment.POD_SHARED: "pod", Assignment.NODE_EXCLUSIVE: "node",
}


class PluginMetrics(Observer, StubObserver):
    """The plugin's metrics: the agent's and the stub's observer, and a registry to scrape.

    `snapshot` returns the agent's latest `NodeSnapshot` (read at scrape time, on the HTTP thread).
    """

    def __init__(self, snapshot: Callable[[], NodeSnapshot]) -> None:
        self.registry = CollectorRegistry()
        registry = self.registry
        allocations = Counter(
            "resource_manager_allocations", "Exclusive resource allocations by a resource manager.",
            ["resource_name", "source"], registry=registry,
        )
        errors = Counter(
            "resource_manager_allocation_errors", "Errors of exclusive resource allocations.",
            ["resource_name", "source"], registry=registry,
        )
        assignments = Gauge(
            "resource_manager_container_assignments",
            "Containers granted each type of resource assignment, cumulative.",
            ["resource_name", "assignment_type"], registry=registry,
        )
        self._allocations = {(r, s): allocations.labels(r, s) for r in RESOURCES for s in SOURCES}
        self._errors = {(r, s): errors.labels(r, s) for r in RESOURCES for s in SOURCES}
        self._assignments = {
            (r, a): assignments.labels(r, a.value) for r in RESOURCES for a in ASSIGNMENT_TYPES
        }
        self._refusals = Counter(
            "nri_podlevel_admissions_refused", "CreateContainer requests refused, by error type.",
            ["error_type"], registry=registry,
        )
        self._refused = {t: self._refusals.labels(t) for t in ERROR_TYPES}
        self._latency = Histogram(
            "nri_podlevel_event_duration_seconds",
            "Time from an NRI request's arrival to its handler's answer, by handler.",
            ["event"], buckets=LATENCY_BUCKETS, registry=registry,
        )
        self._handled: dict[str, Histogram] = {}
        self._checkpoint_failures = Counter(
            "nri_podlevel_checkpoint_write_failures", "Failed checkpoint writes (retried at the next event).",
            registry=registry,
        )
        self._pod_cgroup_failures = Counter(
            "nri_podlevel_pod_cgroup_write_failures", "Failed pod cgroup writes.", registry=registry
        )
        self._repairs = Counter(
            "nri_podlevel_cgroup_repairs",
            "Container cgroup values changed behind the plugin's back and put back, by field.",
            ["field"], registry=registry,
        )
        for field in REPAIRED_FIELDS:  # exported at 0 from the start, so an increase() sees the first one
            self._repairs.labels(field)
        self._connections = Counter(
            "nri_podlevel_runtime_connections", "Registrations with the runtime that got synchronized.",
            registry=registry,
        )
        self._reconnects = Counter(
            "nri_podlevel_runtime_reconnects", "Redials after the runtime connection ended or failed.",
            registry=registry,
        )
        self._connected = Gauge(
            "nri_podlevel_runtime_connected", "1 while registered with the runtime and synchronized.",
            registry=registry,
        )
        build = Gauge("nri_podlevel_build_info", "1, labelled with this build's version, Python and NRI API.",
                      ["version", "python", "nri"], registry=registry)
        build.labels(version(), python_version(), NRI_API).set(1)
        registry.register(_FreeResources(snapshot))
        ProcessCollector(registry=registry)

    # -- the agent's events --------------------------------------------------------------------------------

    def admitted(self, state: NodeState, decision: PodDecision) -> None:
        for container in decision.containers:
            source = _SOURCE_OF.get(container.assignment)
            if source is not None:
                self._allocations[CPU, source].inc()
                self._assignments[CPU, container.assignment].inc()
        if decision.pod.uid in state.memory.pod_entries:
            for container in decision.containers:
                self._allocations[MEMORY, "pod"].inc()
                kind = Assignment.POD_EXCLUSIVE if container.memory_own else Assignment.POD_SHARED
                self._assignments[MEMORY, kind].inc()
            return
        for container in decision.containers:
            if container.memory_own:
                self._allocations[MEMORY, "node"].inc()
                self._assignments[MEMORY, Assignment.NODE_EXCLUSIVE].inc()

    def refused(self, pod_level: bool, error: AdmissionError | InputError) -> None:
        kind = error_type(error)
        child = self._refused.get(kind)
        if child is None:
            child = self._refused[kind] = self._refusals.labels(kind)
        child.inc()
        resource = error.resource if isinstance(error, AdmissionError) else None
        if resource in RESOURCES:
            self._errors[resource, "pod" if pod_level else "node"].inc()

    def checkpoint_failed(self) -> None:
        self._checkpoint_failures.inc()

    def pod_cgroup_failed(self) -> None:
        self._pod_cgroup_failures.inc()

    def cgroup_repaired(self, field: str) -> None:
        self._repairs.labels(field).inc()

    # -- the stub's events ---------------------------------------------------------------------------------

    def connected(self) -> None:
        self._connections.inc()
        self._connected.set(1)

    def reconnecting(self) -> None:
        self._reconnects.inc()
        self._connected.set(0)

    def event_handled(self, method: str, seconds: float) -> None:
        child = self._handled.get(method)
        if child is None:
            child = self._handled[method] = self._latency.labels(method)
        child.observe(seconds)

    # -- exposition ----------------------------------------------------------------------------------------

    def exposition(self) -> bytes:
        """The registry in Prometheus text format."""
        return generate_latest(self.registry)


def metrics_route(metrics: PluginMetrics) -> Route:
    """`/metrics`: the text exposition, for Prometheus' scrapes."""

    def route(_: Query) -> Reply:
        return Reply(HTTPStatus.OK, metrics.exposition(), CONTENT_TYPE_LATEST)

    return route


class _FreeResources(Collector):
    """Free CPUs and free memory per NUMA node, from the snapshot of the moment of the scrape."""

    def __init__(self, snapshot: Callable[[], NodeSnapshot]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        snapshot = self._snapshot()
        engine, state = snapshot.engine, snapshot.placement.state
        cpus = GaugeMetricFamily(
            "nri_podlevel_free_cpus", "Assignable CPUs in the node shared pool, per NUMA node.",
            labels=["numa_node"],
        )
        free = engine.node_shared_pool(state) - engine.reserved_cpus
        for node, node_cpus in sorted(engine.topology.cpus_by_numa.items()):
            cpus.add_metric([str(node)], len(free & node_cpus))
        yield cpus
        memory = GaugeMetricFamily(
            "nri_podlevel_free_memory_bytes",
            "Allocatable memory and hugepages not allocated, per NUMA node (the memory manager's tables).",
            labels=["numa_node", "resource_name"],
        )
        for node, numa in sorted(state.memory.machine.items()):
            for name, table in sorted(numa.memory_map.items()):
                memory.add_metric([str(node), name], table.free)
        yield memory
