"""hack/bench's pure parts: percentiles, the A/B interleaving, the events a pod's lifecycle sends and the keys
of the comparison, and the cgroup tree the runtime's end keeps. Nothing here runs a plugin or asserts a
time."""

from __future__ import annotations

from pathlib import Path

from benchmark.cgroup_tree import CgroupTree
from benchmark.messages import pod_start, pod_stop
from benchmark.node import bench_engine, burstable_pod, classic, pod_level
from benchmark.runtime_peer import go_event_names
from benchmark.stats import (
    FIRST,
    LATER,
    SCALE_ROWS,
    Trip,
    block_order,
    compared,
    comparison,
    percentile,
    scale_table,
)

from podlevel.agent.placement import Placement
from podlevel.agent.plugin import PodLevelPlugin
from podlevel.engine.manager import Assignment
from podlevel.nri import api
from podlevel.nri.runtime import Event, mask_of


def test_percentile_is_nearest_rank_in_microseconds() -> None:
    values = [i * 1000 for i in range(1, 101)]  # 1..100 µs, shuffled order must not matter
    assert percentile(list(reversed(values)), 0.50) == 51.0
    assert percentile(values, 0.90) == 91.0
    assert percentile(values, 0.99) == 100.0
    assert percentile([7000], 0.99) == 7.0


def test_blocks_alternate_which_plugin_goes_first() -> None:
    orders = [block_order(block) for block in range(4)]
    assert orders == [(0, 1), (1, 0), (0, 1), (1, 0)]


def test_comparison_has_both_sides_and_ratios_for_every_figure() -> None:
    trip = Trip
    trips = [
        trip("fill-pod", FIRST, False, False, 9000, 1000, 400),  # moves 400 others while filling
        trip("pod-a", "RUN_POD_SANDBOX", True, False, 3000, 1000, 0),
        trip("pod-a", FIRST, True, False, 4000, 1000, 0),
        trip("pod-a", LATER, True, False, 2000, 1000, 0),
        trip("pod-a", "STOP_CONTAINER", True, True, 1000, 500, 0),
        trip("fill-pod", "REMOVE_POD_SANDBOX", True, True, 100, 100, 0),  # started in the fill: not whole
    ]
    numbers = comparison(trips)
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


def test_a_figure_without_samples_reports_only_its_count() -> None:
    assert compared("pod_lifecycle", [], []) == {"pod_lifecycle_samples": 0}


def test_a_pod_sends_only_the_subscribed_events_first_and_later_containers_labelled() -> None:
    pod = pod_level("uid-1")
    mask = mask_of([Event.CREATE_CONTAINER, Event.STOP_CONTAINER, Event.REMOVE_POD_SANDBOX])
    start = pod_start(mask, pod)
    assert [(c.method, c.label) for c in start] == [
        ("CreateContainer", FIRST), ("CreateContainer", LATER)
    ]
    stop = pod_stop(mask, pod)
    assert [c.label for c in stop] == ["STOP_CONTAINER", "STOP_CONTAINER", "REMOVE_POD_SANDBOX"]
    assert [c.last for c in stop] == [False, False, True]
    with_sandbox = pod_start(mask | Event.RUN_POD_SANDBOX.bit, pod)
    assert with_sandbox[0].label == "RUN_POD_SANDBOX"


def test_the_go_plugin_takes_the_same_subscription_by_name() -> None:
    mask = mask_of([Event.STOP_POD_SANDBOX, Event.CREATE_CONTAINER])
    assert go_event_names(mask) == "stoppodsandbox,createcontainer"


def test_the_runtime_messages_pass_the_plugins_shape_check() -> None:
    """The bench sends what a kubelet sends; a pod the plugin refused would time the refusal instead."""
    plugin = PodLevelPlugin(Placement(bench_engine()))
    for index, shape in enumerate((pod_level, classic, burstable_pod)):
        for call in pod_start(mask_of([Event.CREATE_CONTAINER]), shape(f"pod-{index}")):
            plugin.create_container(call.message.pod, call.message.container)
    assignments = {s.assignment for s in plugin.placement.applied.values()}
    assert {Assignment.POD_EXCLUSIVE, Assignment.NODE_EXCLUSIVE, Assignment.NODE_SHARED} <= assignments
    assert len(plugin.placement.state.pods) == 3, "every pod the bench sends is admitted, none refused"


def test_the_cgroup_tree_is_kept_as_the_runtime_keeps_it(tmp_path: Path) -> None:
    """A container's cgroup is made with the plugin's adjustment, updates land in the files (and in force),
    a removed container's cgroup goes."""
    tree = CgroupTree(tmp_path, "0-255", "0-7")
    [create, *_] = pod_start(mask_of([Event.CREATE_CONTAINER]), pod_level("uid-1"))
    request = create.message
    assert isinstance(request, api.CreateContainerRequest)
    tree.pods([request.pod])
    adjusted = api.CreateContainerResponse()
    adjusted.adjust.linux.resources.cpu.cpus = "2-3"
    adjusted.adjust.linux.resources.cpu.quota.value = 50000
    tree.answered("CreateContainer", request, adjusted)
    directory = tmp_path / request.container.linux.cgroups_path.lstrip("/")
    assert [(directory / n).read_text() for n in ("cpuset.cpus", "cpuset.mems", "cpu.max")] == [
        "2-3\n", "0-7\n", "50000 100000\n"]

    moved = api.StopContainerResponse(update=[api.ContainerUpdate(container_id=request.container.id)])
    moved.update[0].linux.resources.cpu.cpus = "4"
    tree.answered("StopContainer", api.StopContainerRequest(), moved)
    assert (directory / "cpuset.cpus.effective").read_text() == "4\n"

    removed = api.StateChangeEvent(event=api.REMOVE_CONTAINER, container=request.container)
    tree.answered("StateChange", removed, api.Empty())
    assert not directory.exists()


def test_the_scale_table_puts_each_size_beside_synchronize_of_the_same_size() -> None:
    def churn(us: float, ratio: float) -> dict[str, object]:
        keys: dict[str, object] = {"nri_cpu_us_per_pod": 4000, "go_noop_cpu_us_per_pod": 800,
                                   "cpu_per_pod_ratio": 5.0, "nri_rss_mb_steady": 41.5,
                                   "go_noop_rss_mb_steady": 16.0}
        for _, key in SCALE_ROWS:
            keys |= {f"nri_{key}_us_p50": us, f"nri_{key}_us_p99": 2 * us,
                     f"go_noop_{key}_us_p50": us / ratio, f"{key}_ratio_p50": ratio}
        return keys

    synchronize = {"nri_synchronize_400_cgroups_ms": 75.0, "go_noop_synchronize_400_ms": 11.0,
                   "synchronize_400_cgroups_ratio": 6.8, "nri_plugin_rss_after_synchronize_400_kib": 41677}
    table = scale_table({5000: churn(1023.4, 10.7), 400: churn(1037.0, 10.3)}, synchronize).splitlines()
    assert table[0] == "| live containers | 400 | 5,000 |"
    assert table[2] == "| RunPodSandbox | 1,037 µs (2,074); Go 101; 10.3x | 1,023 µs (2,047); Go 96; 10.7x |"
    assert table[-2] == "| Synchronize of that many | 75.0 ms; Go 11.0 ms; 6.8x | - |"
    assert table[-1] == ("| RSS after the churn / after Synchronize | 41.5 / 40.7 MiB; Go 16.0 | "
                         "41.5 / - MiB; Go 16.0 |")
