"""`hack/kind-e2e`: nri-podlevel installed from deploy/ on a kind cluster, checked against the engine.

It creates the cluster of deploy/kind/cluster.yaml, builds the image with hack/image, loads its OCI archive
into the nodes, applies the rendered script-certs overlay (the very objects validated first) and the
webhook certificate from hack/webhook-certs, then applies deploy/examples one pod at a time, without any
annotation: the webhook adds it. Before each pod it asks every node's agent what `nri-podlevel simulate
--node` would decide there; once the pod has landed, every container's cgroup files (cpuset.cpus,
cpuset.mems, cpu.max) and its pod cgroup's cpuset are read inside that node's container (`docker exec`)
and compared with the decision for that node. A refused pod must show the refusal on its containers.

Needs docker, kind, buildah and registry access. `--dry-run` runs no tool: it renders and validates every
config the run would apply (kustomize render, examples, kind cluster config, certificate Secret and caBundle
patch) and prints every step.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from podlevel.cgroups.paths import cgroups_path_components
from podlevel.engine.cpuset import CPUSet
from testbed.agent_image import image_archive
from testbed.manifests import (
    CHECKOUT,
    EXAMPLES,
    KIND_CLUSTER,
    Manifest,
    ManifestError,
    check,
    containerd_snippet,
    find,
    kubectl,
    kubelet_fragment,
    load,
    render,
)

OVERLAY: Final = "script-certs"
NAMESPACE: Final = "nri-podlevel"
ENABLED_LABEL: Final = "nri-podlevel.io/enabled"
KUBELET_MANAGERS: Final = ("cpuManagerPolicy", "memoryManagerPolicy", "topologyManagerPolicy")
POD_TIMEOUT_S: Final = 180.0


class E2EError(Exception):
    """A step failed or a cgroup file disagrees with the engine's decision."""


def check_cluster_config(path: Path = KIND_CLUSTER) -> dict[str, Any]:
    """The kind config, once its patches agree with deploy/node: NRI on with the node snippet's settings,
    the kubelet's managers off as the node fragment says, the PodLevelResources gate, two agent workers."""
    cluster: dict[str, Any] = yaml.safe_load(path.read_text())
    if (cluster.get("apiVersion"), cluster.get("kind")) != ("kind.x-k8s.io/v1alpha4", "Cluster"):
        raise ManifestError(f"{path}: not a kind v1alpha4 Cluster")
    node_nri = containerd_snippet("2")["plugins"]["io.containerd.nri.v1.nri"]
    patches = [tomllib.loads(p) for p in cluster.get("containerdConfigPatches", [])]
    nri = [p["plugins"]["io.containerd.nri.v1.nri"] for p in patches if "io.containerd.nri.v1.nri" in
           p.get("plugins", {})]
    agrees = len(nri) == 1 and all(node_nri[k] == v for k, v in nri[0].items())
    if not agrees or nri[0].get("disable") is not False:
        raise ManifestError(f"{path}: the NRI patch must enable NRI with deploy/node/containerd-2.toml's "
                            "values")
    fragment = kubelet_fragment()
    kubelet = [p for p in map(yaml.safe_load, cluster.get("kubeadmConfigPatches", []))
               if p.get("kind") == "KubeletConfiguration"]
    if len(kubelet) != 1 or any(kubelet[0].get(k) != fragment[k] for k in KUBELET_MANAGERS):
        raise ManifestError(f"{path}: the KubeletConfiguration patch must set {', '.join(KUBELET_MANAGERS)} "
                            "as deploy/node/kubelet-config.yaml does")
    if cluster.get("featureGates") != fragment["featureGates"]:
        raise ManifestError(f"{path}: featureGates must be deploy/node/kubelet-config.yaml's")
    workers = [n for n in cluster["nodes"] if n["role"] == "worker" and
               n.get("labels", {}).get(ENABLED_LABEL) == "true"]
    if len(workers) < 2:
        raise ManifestError(f"{path}: needs at least two workers labelled {ENABLED_LABEL}=true")
    return cluster


def webhook_certificate(objects: list[Manifest], out: Path) -> list[Manifest]:
    """Run hack/webhook-certs --output `out`; its Secret, and the webhook configuration with its caBundle
    patch applied, both validated. The Secret must be the one the webhook Deployment mounts."""
    subprocess.run([str(CHECKOUT / "hack" / "webhook-certs"), "--output", str(out)], check=True,
                   capture_output=True, timeout=60)
    secret = check(load(out / "secret.yaml"), "hack/webhook-certs Secret")[0]
    deployment = find(objects, "Deployment", "nri-podlevel-webhook")[0]
    mounted = {v["secret"]["secretName"] for v in deployment["spec"]["template"]["spec"]["volumes"]
               if "secret" in v}
    if mounted != {secret["metadata"]["name"]} or deployment["metadata"]["namespace"] != \
            secret["metadata"]["namespace"]:
        raise ManifestError(f"hack/webhook-certs writes {secret['metadata']}, the webhook mounts {mounted}")
    configuration = json.loads(json.dumps(find(objects, "MutatingWebhookConfiguration")[0]))
    for op in json.loads((out / "caBundle-patch.json").read_text()):
        _, webhooks, index, client, field = op["path"].split("/")
        configuration[webhooks][int(index)][client][field] = op["value"]
    return [secret, *check([configuration], "webhook configuration with its caBundle")]


@dataclass(frozen=True)
class Plan:
    """What a run applies, rendered and validated: written under `work` so that exactly this is applied."""

    work: Path
    image: str
    cluster: dict[str, Any]

    @property
    def rendered(self) -> Path:
        return self.work / "nri-podlevel.yaml"


def prepare(work: Path) -> Plan:
    objects = check(render(OVERLAY), f"deploy/overlays/{OVERLAY}")
    images = {c["image"] for o in objects if o["kind"] in ("DaemonSet", "Deployment")
              for c in o["spec"]["template"]["spec"]["containers"]}
    if len(images) != 1:
        raise ManifestError(f"the agent and the webhook must run one image, not {sorted(images)}")
    webhook_certificate(objects, work / "certs")
    for example in EXAMPLES:
        check(load(example), str(example.relative_to(CHECKOUT)))
    (work / "nri-podlevel.yaml").write_text(yaml.safe_dump_all(objects, sort_keys=False))
    return Plan(work, images.pop(), check_cluster_config())


class Runner:
    """Runs commands, or with `dry_run` prints them and runs nothing."""

    def __init__(self, dry_run: bool) -> None:
        self.dry_run = dry_run
        self.steps = 0

    def step(self, title: str, argv: Sequence[str] = (), stdin: str | None = None) -> str:
        self.steps += 1
        print(f"[{self.steps}] {title}" + (f"\n    $ {shlex.join(argv)}" if argv else ""), flush=True)
        if self.dry_run or not argv:
            return ""
        done = subprocess.run(list(argv), input=stdin, capture_output=True, text=True, check=False,
                              cwd=CHECKOUT, timeout=900)
        allowed = (0, 1) if "simulate" in argv else (0,)  # simulate exits 1 for a refused pod
        if done.returncode not in allowed:
            raise E2EError(f"{shlex.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
        return done.stdout


def _json(text: str) -> Any:
    return json.loads(text)


class Cluster:
    def __init__(self, runner: Runner, name: str) -> None:
        self.run = runner
        self.name = name
        self.kubectl = (kubectl(), "--context", f"kind-{name}")

    def agents(self) -> dict[str, str]:
        """node name -> the agent pod on it."""
        pods = _json(self.run.step("the agent pods", [*self.kubectl, "-n", NAMESPACE, "get", "pods", "-l",
                                                      "app.kubernetes.io/component=agent", "-o", "json"]))
        return {p["spec"]["nodeName"]: p["metadata"]["name"] for p in pods["items"]}

    def predict(self, agent: str, node: str, manifest: str) -> dict[str, Any]:
        out = self.run.step(f"what {node}'s engine decides for the pod", [
            *self.kubectl, "-n", NAMESPACE, "exec", "-i", agent, "--", "nri-podlevel", "simulate", "--node",
            "--topology", "sysfs=/host/sys", "--json", "-"], stdin=manifest)
        decision: dict[str, Any] = _json(out)["pods"][0]
        return decision

    def settle(self, name: str) -> dict[str, Any]:
        """The pod once every container runs, or once one cannot be created."""
        deadline = time.monotonic() + POD_TIMEOUT_S
        while time.monotonic() < deadline:
            pod: dict[str, Any] = _json(self.run.step(f"pod {name}'s status",
                                                      [*self.kubectl, "get", "pod", name, "-o", "json"]))
            statuses = pod["status"].get("containerStatuses", [])
            if statuses and all("running" in s["state"] for s in statuses):
                return pod
            if any(s["state"].get("waiting", {}).get("reason") == "CreateContainerError"
                   for s in [*statuses, *pod["status"].get("initContainerStatuses", [])]):
                return pod
            time.sleep(3)
        raise E2EError(f"pod {name} neither ran nor failed creation in {POD_TIMEOUT_S:.0f}s")

    def cgroup(self, node: str, container_id: str) -> Path:
        info = _json(self.run.step(f"cgroups path of {container_id[:12]} on {node}",
                                   ["docker", "exec", node, "crictl", "inspect", container_id]))
        cgroups_path = info["info"]["runtimeSpec"]["linux"]["cgroupsPath"]
        return Path("/sys/fs/cgroup", *cgroups_path_components(cgroups_path))

    def read(self, node: str, path: Path) -> str:
        return self.run.step(f"read {path} on {node}", ["docker", "exec", node, "cat", str(path)]).strip()


def compare(cluster: Cluster, pod: dict[str, Any], decision: dict[str, Any]) -> list[str]:
    """Every disagreement between the node's cgroup files and the engine's decision for `pod`."""
    node = pod["spec"]["nodeName"]
    statuses = {s["name"]: s for s in [*pod["status"].get("containerStatuses", []),
                                       *pod["status"].get("initContainerStatuses", [])]}
    if not decision["admitted"]:
        kind = decision["error"]["type"]
        shown = [s["state"].get("waiting", {}).get("message", "") for s in statuses.values()]
        return [] if any(kind in m for m in shown) else [f"refused with {kind}, the pod shows {shown}"]
    wrong = []
    for container in decision["containers"]:
        status = statuses.get(container["name"])
        if container["kind"] == "init" or status is None or "running" not in status["state"]:
            continue  # a standard init container has finished and its cgroup is gone
        where = cluster.cgroup(node, status["containerID"].split("://", 1)[1])
        quota = "max" if container["cpu_quota_us"] == -1 else str(container["cpu_quota_us"])
        expected = {"cpuset.cpus": container["cpus"], "cpuset.mems": container["mems"],
                    "cpu.max": f"{quota} {container['cpu_period_us']}"}
        if decision["bubble"]:
            expected["../cpuset.cpus"] = decision["bubble"]["cpus"]
        for name, want in expected.items():
            got = cluster.read(node, (where / name).resolve() if name.startswith("..") else where / name)
            same = got == want if name == "cpu.max" else CPUSet.parse(got) == CPUSet.parse(want)
            if not same:
                wrong.append(f"{pod['metadata']['name']}/{container['name']} on {node}: {name} {got!r}, "
                             f"the engine decided {want!r}")
    return wrong


def run(args: argparse.Namespace, work: Path) -> int:
    plan = prepare(work)
    print(f"validated: deploy/overlays/{OVERLAY} rendered ({plan.rendered}), the webhook certificate, "
          f"{len(EXAMPLES)} example pods, {KIND_CLUSTER.relative_to(CHECKOUT)}")
    runner = Runner(args.dry_run)
    cluster = Cluster(runner, args.name)
    create = ["kind", "create", "cluster", "--name", args.name, "--config", str(KIND_CLUSTER)]
    runner.step("create the kind cluster", create + (["--image", args.node_image] if args.node_image else []))
    try:
        runner.step("build the image (its OCI archive: hack/image)", [str(CHECKOUT / "hack" / "image")])
        runner.step("load it into the nodes",
                    ["kind", "load", "image-archive", str(image_archive(plan.image)), "--name", args.name])
        runner.step("install deploy/ (the validated render)",
                    [*cluster.kubectl, "apply", "-f", str(plan.rendered)])
        runner.step("the webhook's certificate", [str(CHECKOUT / "hack" / "webhook-certs")])
        for workload in ("daemonset/nri-podlevel", "deployment/nri-podlevel-webhook"):
            runner.step(f"wait for {workload}", [*cluster.kubectl, "-n", NAMESPACE, "rollout", "status",
                                                 workload, "--timeout=300s"])
        wrong: list[str] = []
        for example in EXAMPLES:
            name = load(example)[0]["metadata"]["name"]
            if args.dry_run:
                runner.step(f"{example.name}: ask every agent's engine, apply the pod (the webhook annotates "
                            "it), then compare each container's cgroup files on its node with that node's "
                            "decision")
                continue
            decisions = {node: cluster.predict(agent, node, example.read_text())
                         for node, agent in cluster.agents().items()}
            runner.step(f"apply {example.name}", [*cluster.kubectl, "apply", "-f", str(example)])
            pod = cluster.settle(name)
            wrong += compare(cluster, pod, decisions[pod["spec"]["nodeName"]])
    finally:
        if not args.keep:
            runner.step("delete the cluster", ["kind", "delete", "cluster", "--name", args.name])
    for line in wrong if not args.dry_run else []:
        print(f"MISMATCH {line}")
    if args.dry_run:
        print(f"dry run: {runner.steps} steps printed, nothing run")
        return 0
    print(f"kind-e2e: {len(EXAMPLES)} pods, {len(wrong)} mismatches")
    return 1 if wrong else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hack/kind-e2e", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true", help="validate and print every step; run nothing")
    parser.add_argument("--name", default="nri-podlevel", help="kind cluster name (%(default)s)")
    parser.add_argument("--node-image", default="", help="kind node image (default: kind's own)")
    parser.add_argument("--keep", action="store_true", help="leave the cluster running afterwards")
    args = parser.parse_args(argv)
    try:
        with tempfile.TemporaryDirectory(prefix="nri-podlevel-kind-") as work:
            return run(args, Path(work))
    except (ManifestError, E2EError, subprocess.CalledProcessError) as err:
        print(f"kind-e2e: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
