"""hack/bench's pure parts: percentiles, the A/B interleaving, the events a pod's lifecycle sends and the keys
of the comparison. Nothing here runs a plugin or asserts a time."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from podlevel.engine.manager import Assignment
from podlevel.nri.runtime import Event, mask_of

BENCH = Path(__file__).resolve().parents[3] / "hack" / "bench.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench"] = module  # dataclasses resolve their module's annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def test_percentile_is_nearest_rank_in_microseconds(bench: ModuleType) -> None:
    values = [i * 1000 for i in range(1, 101)]  # 1..100 µs, shuffled order must not matter
    assert bench.percentile(list(reversed(values)), 0.50) == 51.0
    assert bench.percentile(values, 0.90) == 91.0
    assert bench.percentile(values, 0.99) == 100.0
    assert bench.percentile([7000], 0.99) == 7.0


def test_blocks_alternate_which_plugin_goes_first(bench: ModuleType) -> None:
    orders = [bench.block_order(block) for block in range(4)]
    assert orders == [(0, 1), (1, 0), (0, 1), (1, 0)]


def test_comparison_has_both_sides_and_ratios_for_every_figure(bench: ModuleType) -> None:
    trip = bench.Trip
    trips = [
        trip("fill-pod", bench.FIRST, False, False, 9000, 1000, 400),  # moves 400 others while filling
        trip("pod-a", "RUN_POD_SANDBOX", True, False, 3000, 1000, 0),
        trip("pod-a", bench.FIRST, True, False, 4000, 1000, 0),
        trip("pod-a", bench.LATER, True, False, 2000, 1000, 0),
        trip("pod-a", "STOP_CONTAINER", True, True, 1000, 500, 0),
        trip("fill-pod", "REMOVE_POD_SANDBOX", True, True, 100, 100, 0),  # started in the fill: not whole
    ]
    numbers = bench.comparison(trips)
    for what in ("roundtrip", "first_container_roundtrip", "later_container_roundtrip",
                 "moving_others_roundtrip", "pod_lifecycle", "run_pod_sandbox_roundtrip"):
        for name in ("p50", "p90", "p99"):
            assert f"nri_{what}_us_{name}" in numbers
            assert f"go_noop_{what}_us_{name}" in numbers
            assert f"{what}_ratio_{name}" in numbers
    assert numbers["roundtrip_samples"] == 2
    assert numbers["first_container_roundtrip_ratio_p50"] == 4.0
    assert numbers["moving_others_roundtrip_samples"] == 1
    assert numbers["moving_others_updates_mean"] == 400
    assert numbers["pod_lifecycle_samples"] == 1
    assert numbers["nri_pod_lifecycle_us_p50"] == 10.0
    assert numbers["go_noop_pod_lifecycle_us_p50"] == 3.5
    assert numbers["run_pod_sandbox_roundtrip_ratio_p50"] == 3.0


def test_a_figure_without_samples_reports_only_its_count(bench: ModuleType) -> None:
    assert bench.compared("pod_lifecycle", [], []) == {"pod_lifecycle_samples": 0}


def test_a_pod_sends_only_the_subscribed_events_first_and_later_containers_labelled(
    bench: ModuleType,
) -> None:
    pod = bench._pod_level("uid-1")
    mask = mask_of([Event.CREATE_CONTAINER, Event.STOP_CONTAINER, Event.REMOVE_POD_SANDBOX])
    start = bench.pod_start(mask, pod)
    assert [(c.method, c.label) for c in start] == [
        ("CreateContainer", bench.FIRST), ("CreateContainer", bench.LATER)
    ]
    stop = bench.pod_stop(mask, pod)
    assert [c.label for c in stop] == ["STOP_CONTAINER", "STOP_CONTAINER", "REMOVE_POD_SANDBOX"]
    assert [c.last for c in stop] == [False, False, True]
    with_sandbox = bench.pod_start(mask | Event.RUN_POD_SANDBOX.bit, pod)
    assert with_sandbox[0].label == "RUN_POD_SANDBOX"


def test_the_go_plugin_takes_the_same_subscription_by_name(bench: ModuleType) -> None:
    mask = mask_of([Event.STOP_POD_SANDBOX, Event.CREATE_CONTAINER])
    assert bench.go_event_names(mask) == "stoppodsandbox,createcontainer"


def test_the_runtime_messages_pass_the_plugins_shape_check(bench: ModuleType) -> None:
    """The bench sends what a kubelet sends; a pod the plugin refused would time the refusal instead."""
    plugin = bench.PodLevelPlugin(bench.Placement(bench.bench_engine()))
    for index, shape in enumerate((bench._pod_level, bench._classic, bench._burstable)):
        for call in bench.pod_start(mask_of([Event.CREATE_CONTAINER]), shape(f"pod-{index}")):
            plugin.create_container(call.message.pod, call.message.container)
    assignments = {s.assignment for s in plugin.placement.applied.values()}
    assert {Assignment.POD_EXCLUSIVE, Assignment.NODE_EXCLUSIVE, Assignment.NODE_SHARED} <= assignments
    assert len(plugin.placement.state.pods) == 3, "every pod the bench sends is admitted, none refused"
