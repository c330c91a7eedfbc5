"""The kustomize install removed and the chart installed in its place (README, Installing with Helm), with a
placed pod running throughout: `helm install`, `helm upgrade` with a changed value (the agents roll on the
configuration's checksum), `helm uninstall`. The pod never moves. Runs last (file order): it replaces the
install the other modules use."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import yaml

from podlevel.podspec.manifest import SHAPE_ANNOTATION
from testbed import cluster as testcluster
from testbed import helm
from testbed.cluster import NAMESPACE
from testbed.manifests import CHECKOUT

from .conftest import Kube
from .test_rollout import PLACED, wait_rolled

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def charted(kube: Kube) -> Iterator[dict[str, tuple[str, str]]]:
    """The chart installed instead of the kustomize objects; pod-scope-mixed placed through its webhook."""
    overlay = CHECKOUT / "deploy" / "overlays" / "script-certs"
    kube("delete", "-k", str(overlay), "--wait=true", "--timeout=300s")
    kube("create", "namespace", NAMESPACE)
    kube("label", "namespace", NAMESPACE, "pod-security.kubernetes.io/enforce=privileged")
    install(kube, "install")
    kube.apply(PLACED)
    pod = kube.settle("pod-scope-mixed")
    assert SHAPE_ANNOTATION in pod["metadata"]["annotations"], "the chart's webhook did not annotate the pod"
    yield kube.container_cgroup_files(pod)
    kube.delete_pod("pod-scope-mixed")


def helm_env(kube: Kube) -> dict[str, str]:
    return dict(os.environ, KUBECONFIG=str(kube.layout.kubeconfig))


def install(kube: Kube, verb: str, values: dict[str, object] | None = None) -> None:
    """`helm install` or `upgrade`; after an install, the webhook's certificate (its pods wait for the Secret,
    so no `--wait` before it); then both workloads rolled out."""
    helm.run_helm(verb, "nri-podlevel", str(helm.CHART), "--namespace", NAMESPACE, "--timeout", "10m",
                  values=values or {}, env=helm_env(kube))
    if verb == "install":
        testcluster.webhook_certificate(kube.layout)
    wait_rolled(kube)
    kube("-n", NAMESPACE, "rollout", "status", "deployment/nri-podlevel-webhook",
         f"--timeout={testcluster.ROLLOUT_TIMEOUT}")


def test_helm_install_places_pods(kube: Kube, charted: dict[str, tuple[str, str]]) -> None:
    assert charted["main-app"][1].startswith("max "), charted
    release = kube.json("-n", NAMESPACE, "get", "daemonset", "nri-podlevel")["metadata"]["labels"]
    assert release["app.kubernetes.io/managed-by"] == "Helm"
    kube.in_agent("nri-podlevel", "check")


def test_helm_upgrade_with_a_changed_value_rolls_the_agent_and_moves_nothing(
        kube: Kube, charted: dict[str, tuple[str, str]]) -> None:
    before = kube.agent()
    install(kube, "upgrade", {"agent": {"config": {**helm_default_config(), "log-level": "debug"}}})
    assert kube.agent() != before, "the changed configuration did not roll the agent"
    webhook = kube.json("get", "mutatingwebhookconfiguration", "nri-podlevel")["webhooks"][0]
    assert webhook["clientConfig"].get("caBundle"), "the upgrade dropped the caBundle hack/webhook-certs set"
    assert kube.container_cgroup_files(kube.json("get", "pod", "pod-scope-mixed")) == charted
    kube.in_agent("nri-podlevel", "check")


def test_helm_uninstall_removes_the_agent_and_leaves_the_pod_running(
        kube: Kube, charted: dict[str, tuple[str, str]]) -> None:
    helm.run_helm("uninstall", "nri-podlevel", "--namespace", NAMESPACE, "--wait", env=helm_env(kube))
    assert kube.json("-n", NAMESPACE, "get", "daemonsets")["items"] == []
    assert kube.json("get", "mutatingwebhookconfigurations")["items"] == []
    assert kube.json("get", "pod", "pod-scope-mixed")["status"]["phase"] == "Running"
    assert charted


def helm_default_config() -> dict[str, object]:
    return dict(yaml.safe_load((helm.CHART / "values.yaml").read_text())["agent"]["config"])
