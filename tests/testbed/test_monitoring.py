"""deploy/monitoring: it renders with kustomize; the PodMonitor finds the agent's pods and port; the rules
load in promtool and pass their own tests (which can fail); every metric a rule or a panel uses is one the
plugin exports, with the type its query assumes; the dashboard is one Grafana loads."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from podlevel.agent.placement import Placement
from podlevel.agent.plugin import PodLevelPlugin
from podlevel.report.metrics import PluginMetrics
from podlevel.webhook.metrics import WebhookMetrics
from support.builders import CHECKOUT, new_engine
from testbed.manifests import DEPLOY, Manifest, check, find, render, render_directory
from testbed.monitoring import (
    JOB,
    RULES_TEST,
    alerts,
    check_rules,
    dashboard,
    dashboard_queries,
    expected_type,
    exposed,
    metric_names,
    missing,
    render_monitoring,
    rules_spec,
    run_rule_tests,
)

SEVERITIES = {"warning", "critical"}
README = CHECKOUT / "README.md"


@pytest.fixture(scope="module")
def monitoring() -> list[Manifest]:
    return render_monitoring()


@pytest.fixture(scope="module")
def spec(monitoring: list[Manifest]) -> dict[str, Any]:
    return rules_spec(monitoring)


@pytest.fixture(scope="module")
def board(monitoring: list[Manifest]) -> dict[str, Any]:
    return dashboard(monitoring)


def plugin_exposition() -> str:
    """The exposition of `nri-podlevel run`'s metrics on the test engine, after one handled event (a
    histogram's labelled series appear at their first observation)."""
    plugins: list[PodLevelPlugin] = []
    metrics = PluginMetrics(lambda: plugins[0].snapshot)
    plugins.append(PodLevelPlugin(Placement(new_engine()), observer=metrics))
    metrics.event_handled("create_container", 0.001)
    return metrics.exposition().decode()


def used_names(spec: dict[str, Any], board: dict[str, Any]) -> set[str]:
    exprs = [rule["expr"] for group in spec["groups"] for rule in group["rules"]] + dashboard_queries(board)
    return set().union(*(metric_names(expr) for expr in exprs))


def test_renders_into_the_agents_namespace(monitoring: list[Manifest]) -> None:
    check(monitoring, "deploy/monitoring")
    kinds = ["ConfigMap", "PodMonitor", "PodMonitor", "PrometheusRule"]
    assert sorted(o["kind"] for o in monitoring) == kinds
    assert all(o["metadata"]["namespace"] == "nri-podlevel" for o in monitoring)
    (config_map,) = find(monitoring, "ConfigMap")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["name"] == "nri-podlevel-dashboard", "no hash: one ConfigMap per uid"


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A label selector's `matchLabels` and `In` expressions against a pod's labels."""
    wanted = selector.get("matchLabels", {}).items() <= labels.items()
    for expression in selector.get("matchExpressions", []):
        assert expression["operator"] == "In", expression
        wanted = wanted and labels.get(expression["key"]) in expression["values"]
    return bool(wanted)


def test_pod_monitor_scrapes_the_agents_metrics_port(monitoring: list[Manifest]) -> None:
    """Its selector matches the DaemonSet's pods and a node pool's (not the webhook's), its port is the
    agent's `--metrics-address` port, and the job and node labels the rules and the dashboard select by are
    the ones it sets."""
    rendered = render("script-certs")
    (daemonset,) = find(rendered, "DaemonSet")
    (pool,) = find(render_directory(DEPLOY / "pools" / "example"), "DaemonSet")
    (webhook,) = find(rendered, "Deployment")
    template = daemonset["spec"]["template"]
    (container,) = template["spec"]["containers"]
    (monitor,) = find(monitoring, "PodMonitor", "nri-podlevel")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    selector = monitor["spec"]["selector"]
    assert selects(selector, template["metadata"]["labels"])
    assert selects(selector, pool["spec"]["template"]["metadata"]["labels"])
    assert not selects(selector, webhook["spec"]["template"]["metadata"]["labels"])
    assert template["metadata"]["labels"][monitor["spec"]["jobLabel"]] == JOB
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    (port,) = [p for p in container["ports"] if p["name"] == endpoint["port"]]
    assert f"--metrics-address=0.0.0.0:{port['containerPort']}" in container["args"]
    assert endpoint["path"] == "/metrics"
    assert {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"} in \
        endpoint["relabelings"]


def test_the_webhooks_pod_monitor_scrapes_its_metrics_port_as_a_job_of_its_own(
    monitoring: list[Manifest],
) -> None:
    (webhook,) = find(render("script-certs"), "Deployment")
    template = webhook["spec"]["template"]
    (container,) = template["spec"]["containers"]
    (monitor,) = find(monitoring, "PodMonitor", "nri-podlevel-webhook")
    assert selects(monitor["spec"]["selector"], template["metadata"]["labels"])
    assert "jobLabel" not in monitor["spec"], "the agents' job, nri-podlevel, stays theirs"
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    (port,) = [p for p in container["ports"] if p["name"] == endpoint["port"]]
    assert f"--metrics-address=0.0.0.0:{port['containerPort']}" in container["args"]


def test_rules_load_in_promtool(spec: dict[str, Any], tmp_path: Path) -> None:
    done = check_rules(spec, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {sum(len(g['rules']) for g in spec['groups'])} rules found" in done.stdout
    broken = copy.deepcopy(spec)
    broken["groups"][0]["rules"][0]["expr"] = "rate(nri_podlevel_runtime_connected[5m]"
    assert check_rules(broken, tmp_path).returncode != 0


def test_every_alert_says_how_bad_and_what_to_do(spec: dict[str, Any]) -> None:
    names = [alert["alert"] for alert in alerts(spec)]
    assert len(names) == len(set(names))
    for alert in alerts(spec):
        assert alert["labels"]["severity"] in SEVERITIES, alert["alert"]
        assert {"summary", "description"} <= alert["annotations"].keys(), alert["alert"]
    jobs = {job for alert in alerts(spec) for job in re.findall(r'\bjob="([^"]*)"', alert["expr"])}
    assert jobs == {JOB}
    headings = README.read_text().splitlines()
    runbooks = {line[5:].strip().lower() for line in headings if line.startswith("#### ")}
    for alert in alerts(spec):
        assert alert["annotations"]["runbook_url"] == f"README.md#{alert['alert'].lower()}", alert["alert"]
        assert alert["alert"].lower() in runbooks, f"README has no runbook section {alert['alert']}"


def test_rules_pass_their_tests_and_a_wrong_expectation_fails(spec: dict[str, Any], tmp_path: Path) -> None:
    """Every alert has a case where it fires and one where it stays quiet; promtool passes them all, and
    fails once one expectation is wrong."""
    suite = yaml.safe_load(RULES_TEST.read_text())
    cases = [case for test in suite["tests"] for case in test["alert_rule_test"]]
    names = {alert["alert"] for alert in alerts(spec)}
    assert {c["alertname"] for c in cases if c["exp_alerts"]} == names
    assert {c["alertname"] for c in cases if not c["exp_alerts"]} == names

    done = run_rule_tests(spec, suite, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout

    firing = next(c for c in cases if c["alertname"] == "NriPodlevelEventsOverTimeout" and c["exp_alerts"])
    firing["exp_alerts"][0]["exp_labels"]["severity"] = "warning"
    wrong = run_rule_tests(spec, suite, tmp_path)
    assert wrong.returncode != 0
    assert "alertname: NriPodlevelEventsOverTimeout" in wrong.stdout + wrong.stderr


def test_metric_names_of_a_query() -> None:
    expr = ('histogram_quantile(0.99, sum by (event, le) (rate(a_bucket{node=~"$node", x="y{z}"}'
            '[$__rate_interval]))) > 1e3 and on (node) absent(b offset 5m) or c:recorded unless d == bool 0')
    assert metric_names(expr) == {"a_bucket", "b", "c:recorded", "d"}


def test_every_metric_used_is_exported_with_its_type(spec: dict[str, Any], board: dict[str, Any]) -> None:
    types = {**exposed(plugin_exposition()), **exposed(WebhookMetrics().exposition_text())}
    names = used_names(spec, board)
    assert missing(names, types) == []
    assert {"nri_podlevel_event_duration_seconds_bucket", "nri_podlevel_runtime_connected",
            "resource_manager_allocation_errors_total", "nri_podlevel_free_cpus", "up"} <= names
    assert missing({"nri_podlevel_runtime_connected_total", "nri_podlevel_free_cpus_bucket",
                    "nri_podlevel_checkpoint_write_failures"}, types) == [
        "nri_podlevel_checkpoint_write_failures: not exposed",
        "nri_podlevel_free_cpus_bucket: not exposed",
        "nri_podlevel_runtime_connected_total: not exposed",
    ]
    assert expected_type("resource_manager_container_assignments") == types[
        "resource_manager_container_assignments"] == "gauge"


SHARED_NAMES = re.compile(r"\bresource_manager_\w+")
"""Metric names the kubelet exports too (with PodLevelResourceManagers on)."""


def test_every_selector_of_a_name_the_kubelet_shares_names_the_job(
    spec: dict[str, Any], board: dict[str, Any]
) -> None:
    """A rule or a panel that selects `resource_manager_*` without the job counts the kubelet's series too."""
    exprs = [rule["expr"] for group in spec["groups"] for rule in group["rules"]] + dashboard_queries(board)
    selectors = [m for expr in exprs for m in re.finditer(SHARED_NAMES.pattern + r"(\{[^}]*\})?", expr)]
    assert len(selectors) >= 4, "the allocation error alert and three panels"
    assert [m[0] for m in selectors if f'job="{JOB}"' not in (m[1] or "")] == []


def test_dashboard_loads_in_grafana(board: dict[str, Any]) -> None:
    """Schema 39 with a data source variable every query goes through and a node variable every query
    filters by; each panel has a query, unique ids and a place of its own."""
    assert board["uid"] == "nri-podlevel" and board["schemaVersion"] == 39
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert (variables["datasource"]["type"], variables["datasource"]["query"]) == ("datasource", "prometheus")
    assert variables["node"]["datasource"]["uid"] == "${datasource}"
    panels = board["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    assert len({p["title"] for p in panels}) == len(panels)
    cells = [(x, y) for p in panels for x in range(p["gridPos"]["x"], p["gridPos"]["x"] + p["gridPos"]["w"])
             for y in range(p["gridPos"]["y"], p["gridPos"]["y"] + p["gridPos"]["h"])]
    assert len(cells) == len(set(cells)), "panels overlap"
    for panel in panels:
        assert panel["targets"], panel["title"]
        assert len({t["refId"] for t in panel["targets"]}) == len(panel["targets"]), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
            assert 'node=~"$node"' in target["expr"], panel["title"]
