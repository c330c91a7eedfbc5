"""deploy/ installed on a real cluster as README's Installing says, and what a pod meets there: the real API
server calls the webhook over TLS as shipped, the DaemonSet's pod is Ready through its own probes, the
scheduler places pods on the node and the kubelet runs them through containerd and the agent."""

from __future__ import annotations

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from podlevel.engine.errors import EMPTY_POD_SHARED_POOL_ERROR
from podlevel.podspec.manifest import SHAPE_ANNOTATION
from testbed.cluster import NAMESPACE, NODE_NAME
from testbed.kind import compare
from testbed.manifests import CHECKOUT, find, render

from .conftest import Kube

pytestmark = pytest.mark.cluster

EXAMPLES = CHECKOUT / "deploy" / "examples"
PLAIN_POD = """
apiVersion: v1
kind: Pod
metadata: {name: plain}
spec:
  containers:
  - {name: app, image: registry.k8s.io/pause:3.9, resources: {requests: {cpu: 100m}, limits: {cpu: 500m}}}
"""
FORGED_POD = f"""
apiVersion: v1
kind: Pod
metadata: {{name: forged, annotations: {{{SHAPE_ANNOTATION}: '{{"version": 1}}'}}}}
spec:
  containers:
  - {{name: app, image: registry.k8s.io/pause:3.9}}
"""
WEBHOOK_METRICS_PORT = 9810


def webhook_reviews(kube: Kube) -> dict[str, float]:
    """Reviews the webhook's replicas answered, by outcome: their /metrics, read through the API server."""
    reviews: dict[str, float] = {}
    pods = kube.json("-n", NAMESPACE, "get", "pods", "-l", "app.kubernetes.io/component=webhook")["items"]
    for pod in pods:
        name = pod["metadata"]["name"]
        proxy = f"/api/v1/namespaces/{NAMESPACE}/pods/{name}:{WEBHOOK_METRICS_PORT}/proxy/metrics"
        text = kube("get", "--raw", proxy)
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "nri_podlevel_webhook_reviews_total":
                    outcome = sample.labels["outcome"]
                    reviews[outcome] = reviews.get(outcome, 0.0) + sample.value
    return reviews


def test_the_agent_is_ready_through_its_probes(kube: Kube) -> None:
    daemonset = kube.json("-n", NAMESPACE, "get", "daemonset", "nri-podlevel")
    assert daemonset["status"]["numberReady"] == daemonset["status"]["desiredNumberScheduled"] == 1
    pod = kube.json("-n", NAMESPACE, "get", "pod", kube.agent())
    assert pod["spec"]["nodeName"] == NODE_NAME
    (status,) = pod["status"]["containerStatuses"]
    assert status["ready"] and status["restartCount"] == 0


def test_the_webhook_serves_the_api_server_as_shipped(kube: Kube) -> None:
    shipped = find(render("script-certs"), "MutatingWebhookConfiguration", "nri-podlevel")[0]["webhooks"][0]
    served = kube.json("get", "mutatingwebhookconfiguration", "nri-podlevel")["webhooks"][0]
    fields = ("failurePolicy", "namespaceSelector", "objectSelector", "matchConditions", "sideEffects",
              "reinvocationPolicy")
    for field in fields:
        assert served.get(field) == shipped.get(field), field
    assert served["clientConfig"]["caBundle"], "hack/webhook-certs set no caBundle"
    deployment = kube.json("-n", NAMESPACE, "get", "deployment", "nri-podlevel-webhook")
    assert deployment["status"].get("availableReplicas") == deployment["spec"]["replicas"]


def test_a_pod_level_pod_is_annotated_and_placed(kube: Kube) -> None:
    manifest = EXAMPLES / "pod-scope-mixed.yaml"
    decision = json.loads(kube.in_agent("nri-podlevel", "simulate", "--node", "--topology", "sysfs=/host/sys",
                                        "--json", "-", stdin=manifest.read_text()))["pods"][0]
    kube.apply(manifest)
    try:
        pod = kube.settle("pod-scope-mixed")
        assert SHAPE_ANNOTATION in pod["metadata"]["annotations"], "the webhook did not annotate the pod"
        assert decision["admitted"] and decision["bubble"], decision
        assert compare(kube, pod, decision) == []
        files = kube.container_cgroup_files(pod)
        assert files["main-app"][1].startswith("max "), f"main-app holds a slice: quota off, got {files}"
        show = kube.in_agent("nri-podlevel", "show")
        assert "pod-scope-mixed" in show
        print(kube("get", "pods", "-o", "wide"))
        print(kube("describe", "pod", "pod-scope-mixed").partition("Events:")[2])
    finally:
        kube.delete_pod("pod-scope-mixed")


def test_a_pod_without_pod_level_resources_is_left_alone(kube: Kube) -> None:
    reviews = webhook_reviews(kube)
    kube.apply(PLAIN_POD)
    try:
        pod = kube.settle("plain")
        assert webhook_reviews(kube) == reviews, "matchConditions: the API server sent a plain pod"
        assert SHAPE_ANNOTATION not in pod["metadata"].get("annotations", {})
        cpus, quota = kube.container_cgroup_files(pod)["app"]
        assert quota == "50000 100000", "the kubelet's quota for a 500m limit"
        shown = {p["name"]: p for p in json.loads(kube.in_agent("nri-podlevel", "show", "--json"))["pods"]}
        assert shown.get("plain", {}).get("bubble") is None
        assert cpus, "a node-shared container keeps a cpuset"
    finally:
        kube.delete_pod("plain")


def test_a_forged_shape_is_sent_to_the_webhook_and_removed(kube: Kube) -> None:
    removed = webhook_reviews(kube).get("removed", 0.0)
    kube.apply(FORGED_POD)
    try:
        pod = kube.json("get", "pod", "forged")
        assert SHAPE_ANNOTATION not in pod["metadata"].get("annotations", {}), "the forged shape was kept"
        assert webhook_reviews(kube).get("removed", 0.0) == removed + 1
    finally:
        kube.delete_pod("forged")


def test_the_empty_shared_pool_pod_ends_in_create_container_error_naming_the_rule(kube: Kube) -> None:
    kube.apply(EXAMPLES / "empty-shared-pool.yaml")
    try:
        pod = kube.settle("empty-shared-pool")
        waiting = [s["state"]["waiting"] for s in pod["status"].get("initContainerStatuses", [])
                   + pod["status"].get("containerStatuses", []) if "waiting" in s["state"]]
        assert any(w.get("reason") == "CreateContainerError" for w in waiting), waiting
        events = kube.json("get", "events", "--field-selector", "involvedObject.name=empty-shared-pool")
        messages = [e["message"] for e in events["items"] if e["reason"] == "Failed"]
        assert any(EMPTY_POD_SHARED_POOL_ERROR in m for m in messages), messages
        print(kube("get", "pods", "-o", "wide"))
        print(kube("describe", "pod", "empty-shared-pool").partition("Events:")[2])
    finally:
        kube.delete_pod("empty-shared-pool")


def test_show_and_check_run_in_the_agent(kube: Kube) -> None:
    assert "node" in kube.in_agent("nri-podlevel", "show").lower()
    kube.in_agent("nri-podlevel", "check")  # exits non-zero (CalledProcessError) on any finding


def test_the_agent_logs_json_lines(kube: Kube) -> None:
    lines = [line for line in kube("-n", NAMESPACE, "logs", kube.agent()).splitlines() if line.strip()]
    assert lines
    records = [json.loads(line) for line in lines]
    assert all("event" in r and "level" in r for r in records)
