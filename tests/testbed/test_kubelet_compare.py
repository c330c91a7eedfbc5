"""The comparison's pure parts: scenarios as a node runs them, the field-by-field difference, and which
differences README explains. The runs themselves need the guest (`hack/kubelet-compare`, `make test`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from testbed.images import BUSYBOX_IMAGE
from testbed.kubelet_compare import (
    MANAGER_KEYS,
    differences,
    explained_fields,
    plugin_kubelet_settings,
    reference_settings,
)
from testbed.node_record import POD, Field
from testbed.scenario import ScenarioError, load, load_all, static_pod


def test_every_scenario_loads_and_the_quick_ones_are_a_subset() -> None:
    scenarios = load_all()
    assert len(scenarios) >= 12
    assert {s.name for s in load_all(quick=True)} < {s.name for s in scenarios}
    for scenario in scenarios:
        added = [s.argument for s in scenario.steps if s.kind == "add"]
        assert added and set(added) <= scenario.manifests.keys(), scenario.name


def test_a_manifest_runs_the_test_beds_busybox_on_the_host_network() -> None:
    name, text = static_pod(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n"
        "  initContainers: [{name: setup, image: x}, {name: proxy, image: x, restartPolicy: Always}]\n"
        "  containers: [{name: app, image: x, resources: {limits: {cpu: '1'}}}]\n", "p.yaml")
    spec = yaml.safe_load(text)["spec"]
    assert name == "p" and spec["hostNetwork"] is True
    setup, proxy = spec["initContainers"]
    [app] = spec["containers"]
    assert (setup["command"], proxy["command"], app["command"]) == (["true"], ["sleep", "86400"],
                                                                   ["sleep", "86400"])
    assert {c["image"] for c in (setup, proxy, app)} == {BUSYBOX_IMAGE}
    assert app["resources"] == {"limits": {"cpu": "1"}}, "resources are the manifest's own"


def test_a_step_of_an_unknown_kind_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / "scenario.yaml").write_text("steps: [{wait: 10}]\n")
    with pytest.raises(ScenarioError, match="unknown step 'wait'"):
        load(tmp_path)


def test_the_plugins_kubelet_has_every_manager_off_and_the_plugin_gets_the_reference_settings() -> None:
    [scenario] = [s for s in load_all() if s.name == "03-container-scope-mixed"]
    reference, plugin = reference_settings(scenario), plugin_kubelet_settings(scenario)
    assert reference["topologyManagerScope"] == "container"
    assert reference["featureGates"] == {"PodLevelResources": True, "PodLevelResourceManagers": True}
    assert (plugin["cpuManagerPolicy"], plugin["memoryManagerPolicy"], plugin["topologyManagerPolicy"]) == (
        "none", "None", "none")
    assert not set(plugin) & (set(MANAGER_KEYS) - {"cpuManagerPolicy", "memoryManagerPolicy",
                                                   "topologyManagerPolicy"})
    assert plugin["reservedSystemCPUs"] == reference["reservedSystemCPUs"], "the same allocatable CPUs"


def test_differences_name_the_stage_and_a_quota_both_sides_limit() -> None:
    field = Field("p", "log", "cgroup cpu.max")
    kubelet = {"end": {field: "200000 100000", Field("p", POD, "admission"): "admitted"},
               "both-running": {field: "max 100000"}}
    plugin = {"end": {field: "100000 100000", Field("p", POD, "admission"): "admitted"},
              "both-running": {field: "100000 100000"}}
    compared, found = differences("s", kubelet, plugin)
    assert compared == 3
    assert [(d["field"], d["explains"]) for d in found] == [
        ("cgroup cpu.max", "cgroup cpu.max (both limited)"),
        ("both-running: cgroup cpu.max", "cgroup cpu.max")]


def test_a_field_only_one_run_has_is_a_difference() -> None:
    _, found = differences("s", {"end": {Field("p", POD, "admission"): "admitted"}}, {"end": {}})
    assert [(d["kubelet"], d["plugin"]) for d in found] == [("admitted", "(none)")]


def test_readme_explains_fields_in_its_table_only(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("### Where the plugin differs from the kubelet\n\n| field | why |\n|---|---|\n"
                      "| `refused as` | a plugin fails a runtime call |\nsee `admission`\n"
                      "### Security\n\n| `cgroup cpu.max` | elsewhere |\n")
    assert explained_fields(readme) == {"refused as"}
    assert {"refused as", "refusal rule", "pod cgroup cpuset.cpus.effective"} <= explained_fields()


def test_a_pod_admitted_on_one_side_only_differs_by_its_admission_alone() -> None:
    """kubelet v1.37.2 refuses its own running pods when it restarts (kubernetes#140989): that is one
    difference, not one per field the plugin still records for the pod."""
    kubelet = {"after-restart": {Field("p", POD, "admission"): "refused",
                                 Field("p", POD, "refusal rule"): "UnexpectedAdmissionError",
                                 Field("q", "app", "cgroup cpu.max"): "max 100000"},
               "writes": {Field("q", "app", "writes of cpu.max"): "0"}}
    plugin = {"after-restart": {Field("p", POD, "admission"): "admitted",
                                Field("p", "app", "cgroup cpu.max"): "max 100000",
                                Field("q", "app", "cgroup cpu.max"): "max 100000"},
              "writes": {Field("p", "app", "writes of cpu.max"): "0",
                         Field("q", "app", "writes of cpu.max"): "0"}}
    _, found = differences("s", kubelet, plugin)
    assert [(d["pod"], d["field"], d["kubelet"], d["plugin"]) for d in found] == [
        ("p", "after-restart: admission", "refused", "admitted"),
        ("p", "after-restart: refusal rule", "UnexpectedAdmissionError", "(none)"),
        ("p", "writes: running", "no", "yes")]
