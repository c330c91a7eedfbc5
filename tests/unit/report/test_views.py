"""report.views: /debug/node and /debug/explain built from a real plugin's snapshot and decision log."""

from __future__ import annotations

import json
from typing import Any

import pytest

from podlevel.agent.plugin import PodLevelPlugin
from podlevel.engine.errors import EMPTY_POD_SHARED_POOL_ERROR
from podlevel.httpd import Route
from podlevel.podspec.manifest import from_annotation
from podlevel.report.views import views
from podlevel.state.engine_state import checkpoints_of
from podlevel.state.formats import decode
from support.builders import MI, fast_path, three_pods


@pytest.fixture
def plugin() -> PodLevelPlugin:
    return three_pods()


@pytest.fixture
def routes(plugin: PodLevelPlugin) -> dict[str, Route]:
    return views(lambda: plugin.snapshot, {"cgroup_root": "/host/cgroup"})


def get(routes: dict[str, Route], path: str, **query: str) -> tuple[int, Any]:
    reply = routes[path]({key: [value] for key, value in query.items()})
    return reply.status, json.loads(reply.body)


def test_node_lists_every_pod_with_its_status_bubble_and_containers(routes: dict[str, Route]) -> None:
    status, node = get(routes, "/debug/node")
    assert status == 200 and node["synchronized"] is False and node["checkpoint_error"] is None
    pods = {pod["name"]: pod for pod in node["pods"]}
    assert {name: pod["status"] for name, pod in pods.items()} == {
        "web": "unmanaged", "fast": "admitted", "no-room": "refused"}
    assert pods["no-room"]["refusal"].startswith(f"{EMPTY_POD_SHARED_POOL_ERROR}: ")
    fast = pods["fast"]
    assert fast["bubble"] == {"cpus": "1-2,9-10", "mems": "0"}
    assert fast["pod_cgroup"] == {"cpus": "1-2,9-10", "mems": "0", "unlimited_quota": False,
                                  "cpu_period_us": 100000, "failure": None}
    [app] = fast["containers"]
    assert (app["name"], app["assignment"], app["cpu_quota_us"]) == ("app", "pod_exclusive", -1)
    assert app["cgroups_path"] == f"/kubepods/pod{fast['uid']}/fast-app"
    [server] = pods["web"]["containers"]
    assert (server["assignment"], server["cpus"], server["cpu_quota_us"]) == ("node_shared", node[
        "node_shared_pool"], None)
    assert from_annotation(fast["shape"], name="fast", uid=fast["uid"]) == fast_path()
    assert pods["web"]["shape"] is None and pods["web"]["managed"] is False


def test_node_counts_per_numa_node_and_carries_the_checkpoints_and_settings(
    plugin: PodLevelPlugin, routes: dict[str, Route]
) -> None:
    _, node = get(routes, "/debug/node")
    first, second = node["numa_nodes"]
    assert first["cpus"] == {"all": "0-3,8-11", "reserved": "0,8", "bubbles": "1-2,9-10",
                             "exclusive": "1,9", "free": "3,11"}
    assert second["cpus"]["free"] == second["cpus"]["all"] == "4-7,12-15"
    memory = first["memory"]["memory"]
    assert (memory["reserved"], memory["bubbles"]) == (100 * MI, 1024 * MI)
    assert memory["exclusive"] == 256 * MI, "fast's app holds its own share, as PodResources says"
    assert memory["free"] == memory["allocatable"] - 1024 * MI
    cpu, mem = checkpoints_of(plugin.placement.engine, plugin.placement.state)
    assert decode(node["checkpoint"]["cpu"]).content == cpu
    assert decode(node["checkpoint"]["memory"]).content == mem
    assert node["paths"] == {"cgroup_root": "/host/cgroup"}, "where commands beside the plugin read cgroups"
    assert node["engine"] == {
        "scope": "pod", "topology_policy": "single-numa-node", "cpu_policy": "static",
        "memory_policy": "Static", "reserved_cpus": "0,8", "reserved_memory": {"0": {"memory": 100 * MI}},
        "cpu_options": {}, "topology_options": {}}


def test_explain_an_admitted_pod(routes: dict[str, Route]) -> None:
    status, explained = get(routes, "/debug/explain", pod="default/fast")
    assert status == 200 and explained["admitted"] and explained["error"] is None
    assert (explained["path"], explained["topology_policy"]) == ("pod-level resources", "single-numa-node")
    assert [(n["node"], n["cpus"]) for n in explained["free"]] == [(0, "1-3,9-11"), (1, "4-7,12-15")]
    [alignment] = explained["alignments"]
    assert alignment["container"] is None and alignment["requested"] == {"cpu": 4000, "memory": 1024 * MI}
    assert {"numa_nodes": [0], "preferred": True} in alignment["hints"]["cpu"]["cpu"]
    assert {"numa_nodes": [0], "preferred": True} in alignment["hints"]["memory"]["memory"]
    assert alignment["merged"] == {"numa_nodes": [0], "preferred": True} and alignment["admitted"]
    assert explained["decision"]["bubble"] == {"cpus": "1-2,9-10", "mems": "0"}
    assert explained["refusal"] is None


def test_explain_a_refused_pod_names_the_rule_and_what_the_runtime_was_told(routes: dict[str, Route]) -> None:
    status, explained = get(routes, "/debug/explain", pod="default/no-room")
    assert status == 200 and not explained["admitted"] and explained["decision"] is None
    assert explained["error"]["type"] == EMPTY_POD_SHARED_POOL_ERROR
    assert explained["refusal"] == f"{EMPTY_POD_SHARED_POOL_ERROR}: {explained['error']['message']}"
    assert [n["cpus"] for n in explained["free"]] == ["3,11", "4-7,12-15"]


def test_explain_without_a_decision_or_a_pod(routes: dict[str, Route]) -> None:
    assert get(routes, "/debug/explain", pod="default/web") == (
        404, {"error": "no decision about default/web is kept", "refusal": None})
    assert get(routes, "/debug/explain")[0] == 400
    assert get(routes, "/debug/explain", pod="web")[0] == 400
