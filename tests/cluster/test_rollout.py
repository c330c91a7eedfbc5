"""Rolling the agent as operators do, with placed pods running: `kubectl rollout restart`, an image of another
version, `kubectl delete -k` and apply again, and the webhook scaled to zero (fail-open). Nothing placed
moves; a pod created while no agent runs is taken in at Synchronize; a pod created while no webhook serves
runs unannotated in the node shared pool, as README's Admission webhook says."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from podlevel.podspec.manifest import SHAPE_ANNOTATION
from testbed import cluster as testcluster
from testbed.cluster import NAMESPACE
from testbed.manifests import CHECKOUT
from testbed.wait import wait_until

from .conftest import SECOND_VERSION, Kube

pytestmark = pytest.mark.cluster

PLACED = CHECKOUT / "deploy" / "examples" / "pod-scope-mixed.yaml"
SMALL_POD = """
apiVersion: v1
kind: Pod
metadata: {name: NAME}
spec:
  resources: {requests: {cpu: "2", memory: 256Mi}, limits: {cpu: "2", memory: 256Mi}}
  containers:
  - name: app
    image: registry.k8s.io/pause:3.9
    resources: {requests: {cpu: "1", memory: 128Mi}, limits: {cpu: "1", memory: 128Mi}}
  - {name: sidecar, image: registry.k8s.io/pause:3.9}
"""


def small_pod(name: str) -> str:
    return SMALL_POD.replace("NAME", name)


def placed_pods(kube: Kube) -> dict[str, Any]:
    """The agent's own view: pod name -> what `show --json` says of it."""
    view = json.loads(kube.in_agent("nri-podlevel", "show", "--json"))
    return {pod["name"]: pod for pod in view["pods"]}


def roll(kube: Kube, *change: str) -> float:
    """Apply `change` to the DaemonSet and wait for its rollout; seconds it took."""
    started = time.monotonic()
    kube(*change)
    wait_rolled(kube)
    return time.monotonic() - started


def wait_rolled(kube: Kube) -> None:
    kube("-n", NAMESPACE, "rollout", "status", "daemonset/nri-podlevel",
         f"--timeout={testcluster.ROLLOUT_TIMEOUT}")
    wait_until(lambda: _one_ready_agent(kube), 300, "one Ready agent after the roll")


def _one_ready_agent(kube: Kube) -> bool:
    try:
        kube.agent()
    except AssertionError:
        return False
    return True


@pytest.fixture(scope="module")
def placed(kube: Kube) -> Iterator[dict[str, tuple[str, str]]]:
    """pod-scope-mixed placed; its containers' (cpuset.cpus, cpu.max) as placed."""
    kube.apply(PLACED)
    pod = kube.settle("pod-scope-mixed")
    assert SHAPE_ANNOTATION in pod["metadata"]["annotations"]
    files = kube.container_cgroup_files(pod)
    yield files
    kube.delete_pod("pod-scope-mixed")


def assert_unmoved(kube: Kube, placed: dict[str, tuple[str, str]]) -> None:
    assert kube.container_cgroup_files(kube.json("get", "pod", "pod-scope-mixed")) == placed
    kube.in_agent("nri-podlevel", "check")


def test_a_rollout_restart_moves_nothing_and_takes_in_pods_created_meanwhile(
        kube: Kube, placed: dict[str, tuple[str, str]]) -> None:
    old_agent = kube.agent()
    started = time.monotonic()
    kube("-n", NAMESPACE, "rollout", "restart", "daemonset/nri-podlevel")
    # With maxSurge 0 the old agent goes first: wait until it is gone, then create a pod no agent sees.
    wait_until(lambda: old_agent not in kube("-n", NAMESPACE, "get", "pods", "-o", "name"), 300,
               f"{old_agent} gone")
    kube.apply(small_pod("during-roll"))
    wait_rolled(kube)
    print(f"rollout restart: {time.monotonic() - started:.1f} s")
    try:
        kube.settle("during-roll")
        taken_in = placed_pods(kube).get("during-roll", {})
        assert taken_in.get("status") == "admitted" and taken_in.get("bubble"), taken_in
        assert_unmoved(kube, placed)
    finally:
        kube.delete_pod("during-roll")


def test_an_image_of_another_version_rolls_without_moving_anything(
        kube: Kube, placed: dict[str, tuple[str, str]]) -> None:
    took = roll(kube, "-n", NAMESPACE, "set", "image", "daemonset/nri-podlevel",
                f"nri-podlevel=nri-podlevel:{SECOND_VERSION}")
    print(f"image change to {SECOND_VERSION}: {took:.1f} s")
    assert SECOND_VERSION in kube.in_agent("nri-podlevel", "--version")
    assert_unmoved(kube, placed)


def test_delete_and_apply_again_keeps_the_placed_pods(kube: Kube, placed: dict[str, tuple[str, str]]) -> None:
    overlay = str(CHECKOUT / "deploy" / "overlays" / "script-certs")
    kube("delete", "-k", overlay, "--wait=true", "--timeout=300s")
    assert kube.json("get", "pod", "pod-scope-mixed")["status"]["phase"] == "Running"
    testcluster.install_deploy(kube.layout)
    assert placed_pods(kube)["pod-scope-mixed"]["status"] == "admitted"
    assert_unmoved(kube, placed)


def test_with_the_webhook_down_pods_run_unannotated_in_the_node_shared_pool(kube: Kube) -> None:
    deployment = ("-n", NAMESPACE, "deployment/nri-podlevel-webhook")
    kube("scale", *deployment, "--replicas=0")
    kube("-n", NAMESPACE, "wait", "--for=delete", "pod", "-l", "app.kubernetes.io/component=webhook",
         "--timeout=300s")
    try:
        kube.apply(small_pod("while-webhook-down"))
        pod = kube.settle("while-webhook-down")
        assert SHAPE_ANNOTATION not in pod["metadata"].get("annotations", {}), "annotated with no webhook?"
        assert placed_pods(kube).get("while-webhook-down", {}).get("bubble") is None
    finally:
        kube.delete_pod("while-webhook-down")
        kube("scale", *deployment, "--replicas=2")
        kube("-n", NAMESPACE, "rollout", "status", "deployment/nri-podlevel-webhook", "--timeout=300s")

