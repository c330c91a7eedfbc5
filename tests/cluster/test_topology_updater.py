"""NUMA the scheduler can see: node-feature-discovery's own nfd-topology-updater (v0.19.0, built from the Go
module proxy), deployed from NFD's own manifests (its CRD, RBAC and DaemonSet, from the module) with
deploy/topology-updater/daemonset-patch.yaml pointing it at the agent's PodResources socket, publishes the
node's NodeResourceTopology; per NUMA zone, its CPUs and memory set beside what `nri-podlevel show` says,
before a bubble, with one, and after it is released.

With no bubble the two agree exactly. With one, the updater subtracts only what containers hold
(PodResources' container-level `cpu_ids` and `memory`): v0.19 predates the pod-level fields (4 and 5) that
carry a bubble, so it publishes a bubble's pod shared pool as available (README, "NUMA the scheduler can
see"). The test holds it to exactly that.

The test bed's own patch (no registry, no kube-proxy here): the updater's binary from the build cache in
the test bed's busybox image, host network, and the API server's address in place of the service's."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest
import yaml

from podlevel.engine.cpuset import CPUSet
from podlevel.engine.quantity import bytes_of, milli_cpu
from testbed.cluster import API_PORT, GUEST_IP, NODE_NAME
from testbed.go_tools import build_tools
from testbed.images import BUSYBOX_IMAGE
from testbed.manifests import CHECKOUT
from testbed.wait import wait_until

from .conftest import Kube
from .test_rollout import PLACED

pytestmark = pytest.mark.cluster

NFD_VERSION: Final = "v0.19.0"
NFD_NAMESPACE: Final = "node-feature-discovery"
RECIPE: Final = CHECKOUT / "deploy" / "topology-updater" / "daemonset-patch.yaml"
UPDATE_TIMEOUT_S: Final = 180.0


def nfd_deployment() -> Path:
    """NFD's deployment/ directory in the Go module cache (the module the updater was built from)."""
    module = Path(os.environ.get("NRI_PODLEVEL_GO_CACHE", "/var/cache/nri-podlevel-go")) / "mod"
    return module / "sigs.k8s.io" / f"node-feature-discovery@{NFD_VERSION}" / "deployment"


def bed_patch(binary_dir: Path) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "nfd-topology-updater"},
            "spec": {"template": {"spec": {
                "hostNetwork": True,
                "containers": [{
                    "name": "nfd-topology-updater", "image": BUSYBOX_IMAGE,
                    "command": ["/nfd/nfd-topology-updater"],
                    "env": [{"name": "KUBERNETES_SERVICE_HOST", "value": GUEST_IP},
                            {"name": "KUBERNETES_SERVICE_PORT", "value": str(API_PORT)}],
                    "volumeMounts": [{"name": "nfd-binary", "mountPath": "/nfd", "readOnly": True}]}],
                "volumes": [{"name": "nfd-binary",
                             "hostPath": {"path": str(binary_dir), "type": "Directory"}}],
            }}}}


@pytest.fixture(scope="module")
def updater(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    binary_dir = build_tools("nfd")["nfd"]
    directory = CHECKOUT / ".cache" / f"nfd-{tmp_path_factory.mktemp('nfd').name}"
    directory.mkdir(parents=True)
    try:
        deployment = nfd_deployment()
        shutil.copy(RECIPE, directory / "daemonset-patch.yaml")
        (directory / "testbed-patch.yaml").write_text(yaml.safe_dump(bed_patch(binary_dir)))
        (directory / "namespace.yaml").write_text(yaml.safe_dump(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NFD_NAMESPACE}}))
        bases = ("rbac-topologyupdater", "noderesourcetopologies-crd", "topologyupdater-daemonset")
        (directory / "kustomization.yaml").write_text(yaml.safe_dump({
            "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "namespace": NFD_NAMESPACE,
            "resources": ["namespace.yaml",
                          *(os.path.relpath(deployment / "base" / name, directory) for name in bases)],
            "components": [os.path.relpath(deployment / "components" / name, directory) for name in
                           ("common", "topology-updater", "topology-updater-config")],
            "patches": [{"path": "daemonset-patch.yaml"}, {"path": "testbed-patch.yaml"}]}))
        kube("apply", "-k", str(directory))
        kube("-n", NFD_NAMESPACE, "rollout", "status", "daemonset/nfd-topology-updater", "--timeout=600s")
        yield
        kube("delete", "-k", str(directory), "--wait=true", "--timeout=300s")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def zones(kube: Kube) -> dict[str, dict[str, dict[str, int]]]:
    """The NodeResourceTopology: zone -> resource -> {allocatable, available}."""
    topology = kube.json("get", "noderesourcetopologies.topology.node.k8s.io", NODE_NAME)
    def amount(resource: str, quantity: str) -> int:  # Kubernetes quantities: "4", "4192256k"
        return milli_cpu(quantity) // 1000 if resource == "cpu" else bytes_of(quantity)

    return {zone["name"]: {r["name"]: {"allocatable": amount(r["name"], r["allocatable"]),
                                       "available": amount(r["name"], r["available"])}
                           for r in zone.get("resources", []) if r["name"] in ("cpu", "memory")}
            for zone in topology["zones"]}


def shown(kube: Kube, *, containers_only: bool = False) -> dict[str, dict[str, dict[str, int]]]:
    """`nri-podlevel show --json` in the same shape: node-N -> cpu / memory -> {allocatable, available};
    with `containers_only`, available is allocatable less what containers hold exclusively (no bubble)."""
    view = json.loads(kube.in_agent("nri-podlevel", "show", "--json"))
    out = {}
    for numa in view["numa_nodes"]:
        cpus = numa["cpus"]
        memory = numa["memory"]["memory"]
        allocatable = CPUSet.parse(cpus["all"]) - CPUSet.parse(cpus["reserved"] or "")
        if containers_only:
            available_cpus = len(allocatable - CPUSet.parse(cpus["exclusive"] or ""))
            available_memory = memory["allocatable"] - memory["exclusive"]
        else:
            available_cpus, available_memory = len(CPUSet.parse(cpus["free"])), memory["free"]
        out[f"node-{numa['node']}"] = {
            "cpu": {"allocatable": len(allocatable), "available": available_cpus},
            "memory": {"allocatable": memory["allocatable"], "available": available_memory}}
    return out


def settled(kube: Kube, *, containers_only: bool = False) -> dict[str, Any]:
    """Both views once the updater has published what `show` says (or the last pair seen)."""
    seen: dict[str, Any] = {}

    def same() -> bool:
        try:
            seen["nrt"], seen["show"] = zones(kube), shown(kube, containers_only=containers_only)
        except Exception:
            return False
        return bool(seen["nrt"] == seen["show"])

    try:
        wait_until(same, UPDATE_TIMEOUT_S, "the NodeResourceTopology to match `show`")
    except Exception as exc:
        raise AssertionError(f"NodeResourceTopology {seen.get('nrt')} != show {seen.get('show')}") from exc
    return seen


def test_the_node_resource_topology_is_what_show_says_free(kube: Kube, updater: None) -> None:
    before = settled(kube)
    print("NodeResourceTopology before a bubble:", json.dumps(before["nrt"]))
    kube.apply(PLACED)
    try:
        kube.settle("pod-scope-mixed")
        placed = settled(kube, containers_only=True)
        print("NodeResourceTopology with pod-scope-mixed's bubble:", json.dumps(placed["nrt"]))
        print("show's free with it:", json.dumps(shown(kube)))
        assert placed["nrt"] != before["nrt"], "the bubble changed nothing the updater published"
        assert placed["nrt"] != shown(kube), "the updater reads the pod-level fields now: README must say so"
    finally:
        kube.delete_pod("pod-scope-mixed")
    after = settled(kube)
    assert after["nrt"] == before["nrt"]
