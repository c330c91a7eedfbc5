"""`/metrics` of `nri-podlevel run` on a real containerd, scraped during a small churn and read with
prometheus-client's own parser; the counters are checked against the decisions the plugin made (and logged,
as JSON lines: its stderr is not a terminal).

Sized for the 2-CPU host, with the demo pods (deploy/demo/pods-2cpu.yaml): CPU 0 reserved, CPU 1 the one
bubble that fits.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final

import pytest

from podlevel.engine.errors import EMPTY_POD_SHARED_POOL_ERROR, TOPOLOGY_AFFINITY_ERROR
from support.demo_node import REFUSED_AT_SANDBOX, demo_pod
from support.scrape import Samples, exposition, samples_of, value
from testbed.containerd import Containerd
from testbed.cri import CRI, CRIError
from testbed.kubelet import start_pod
from testbed.plugin_process import PluginProcess
from testbed.wait import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("demo_node_cpus")]

LOG_TIMEOUT_S: Final = 15.0


def scrape(plugin: PluginProcess) -> Samples:
    return samples_of(exposition(plugin.metrics_address))


def resource_counts(seen: Samples) -> dict[str, float]:
    """The kubelet's three metrics, every series with a value, as `name{label values}`."""
    counts: dict[str, float] = {}
    for (name, labels), number in seen.items():
        if name.startswith("resource_manager_") and number:
            counts[f"{name}{{{','.join(v for _, v in sorted(labels))}}}"] = number
    return counts


def test_counters_follow_a_churn_of_pods(containerd: Containerd, cri: CRI, tmp_path: Path) -> None:
    plugin = PluginProcess(containerd.nri_socket, state_dir=tmp_path / "state")
    try:
        plugin.wait_registered()
        wait_until(lambda: value(scrape(plugin), "nri_podlevel_runtime_connected") == 1, LOG_TIMEOUT_S,
                   "the plugin to count its connection")
        start = scrape(plugin)
        assert resource_counts(start) == {}
        assert value(start, "nri_podlevel_free_cpus", numa_node="0") == 1

        start_pod(cri, demo_pod("web"), with_shape=False)  # unmanaged: allocates nothing
        first = start_pod(cri, demo_pod("fast-path"))  # the bubble of CPU 1; main-app its exclusive slice
        with pytest.raises(CRIError):
            start_pod(cri, demo_pod("no-room"))  # empty pod shared pool: refused by the CPU manager
        with pytest.raises(CRIError):
            start_pod(cri, demo_pod("fast-path"))  # no CPU left: refused by the topology manager
        busy = scrape(plugin)
        cri.stop_pod(first.sandbox_id)
        plugin.wait_for_line("released default/fast-path", LOG_TIMEOUT_S)
        start_pod(cri, demo_pod("fast-path"))  # CPU 1 is free again
        end = scrape(plugin)
    finally:
        plugin.stop()

    assert value(busy, "nri_podlevel_free_cpus", numa_node="0") == 0
    assert value(busy, "nri_podlevel_free_memory_bytes", numa_node="0", resource_name="memory") == (
        value(start, "nri_podlevel_free_memory_bytes", numa_node="0", resource_name="memory") - 256 * 2**20
    )
    assert resource_counts(end) == {
        # Each fast-path admission: one container on the pod-level path, an exclusive slice of both.
        "resource_manager_allocations_total{cpu,pod}": 2,
        "resource_manager_allocations_total{memory,pod}": 2,
        "resource_manager_container_assignments{pod_exclusive,cpu}": 2,
        "resource_manager_container_assignments{pod_exclusive,memory}": 2,
        # no-room, refused in the CPU manager's pod allocation; the second fast-path never got that far.
        "resource_manager_allocation_errors_total{cpu,pod}": 1,
    }
    refused = {kind: value(end, "nri_podlevel_admissions_refused_total", error_type=kind)
               for kind in (EMPTY_POD_SHARED_POOL_ERROR, TOPOLOGY_AFFINITY_ERROR)}
    assert refused == {EMPTY_POD_SHARED_POOL_ERROR: 1, TOPOLOGY_AFFINITY_ERROR: 1}
    # CreateContainer: web's server, fast-path's main-app twice, and where pods are refused at their first
    # container, the refused sidecar and main-app.
    creations = 3 if containerd.flavour.name in REFUSED_AT_SANDBOX else 5
    assert value(end, "nri_podlevel_event_duration_seconds_count", event="create_container") == creations
    assert value(end, "nri_podlevel_event_duration_seconds_count", event="run_pod_sandbox") == 5
    assert value(end, "nri_podlevel_event_duration_seconds_count", event="stop_pod_sandbox") >= 1
    assert value(end, "nri_podlevel_runtime_connections_total") == 1
    assert value(end, "nri_podlevel_checkpoint_write_failures_total") == 0

    decisions = [json.loads(line) for line in plugin.lines if line.startswith("{")]
    placed = [d for d in decisions if d["event"].startswith("placed default/fast-path")]
    assert [(d["container"], d["assignment"], d["cpus"], d["quota"]) for d in placed] == 2 * [
        ("main-app", "pod_exclusive", "1", "off")
    ]
    refusals = [(d["error_type"], d["resource"]) for d in decisions if d["event"].startswith("refused ")]
    assert refusals == [(EMPTY_POD_SHARED_POOL_ERROR, "cpu"), (TOPOLOGY_AFFINITY_ERROR, None)]
