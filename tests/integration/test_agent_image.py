"""The agent as a cluster runs it: the image hack/image builds, imported into a real containerd, started from
the DaemonSet of the rendered manifests (deploy/overlays/script-certs) the way a kubelet starts it
(`testbed.workload`: its args, uid 0 with every capability dropped, read-only root, the host paths as bind
mounts, the ConfigMap as its config file, its own network namespace, probes on the pod's address).

Then the demo's pods are placed by the agent in the container (bubble in the pod cgroup, exclusive slice
with quota off, the node shared pool moved, a refusal), `nri-podlevel show`/`check` run inside the agent's
container agree with the cgroups, PodResources answers through the mounted socket directory; a rollout's
stop (SIGTERM, SIGKILL after the grace period) ends it cleanly; and an upgrade to a version bump and the
rollback keep every running pod where it is, taking in the pod created while no agent ran.

Sized for the 2-CPU host, like test_agent (CPU 0 reserved, CPU 1 assignable).
"""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import grpc
import pytest
import yaml
from packaging.utils import canonicalize_name

from podlevel._proto.podresources import api_pb2 as podresources_pb
from podlevel._proto.podresources import api_pb2_grpc as podresources_grpc
from podlevel.engine.errors import EMPTY_POD_SHARED_POOL_ERROR
from podlevel.podspec.manifest import SHAPE_ANNOTATION, to_annotation
from podlevel.state.store import CPU_STATE_FILE
from support.demo_node import (
    ALL,
    ASSIGNABLE,
    PODS,
    RESERVED,
    Applied,
    applied,
    demo_pod,
    quota_off,
    wait_applied,
)
from testbed import agent_image, cgroupfs, workload
from testbed.agent_image import BuiltImage
from testbed.agent_node import AGENT, READY_TIMEOUT_S, AgentNode
from testbed.apiserver import RemoteWebhook, create_pod
from testbed.containerd import Containerd
from testbed.cri import CRIError
from testbed.kubelet import start_pod
from testbed.manifests import CHECKOUT, find, render
from testbed.wait import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("demo_node_cpus")]

UPGRADE_VERSION: Final = "0.1.1"
WEBHOOK: Final = "nri-podlevel-webhook"
WEBHOOK_SECRET: Final = "nri-podlevel-webhook-tls"


@pytest.fixture(scope="session")
def image() -> BuiltImage:
    """The current tree's image, built once for the session."""
    return agent_image.build()


@pytest.fixture
def node(containerd_flavour: str, image: BuiltImage,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentNode]:
    work = tmp_path_factory.mktemp("agent-image")
    with Containerd(containerd_flavour, work / "ctrd", pod_network=True) as ctrd, ctrd.cri() as cri:
        node = AgentNode(ctrd, cri, work, render("script-certs"))
        node.import_image(image)
        yield node


def test_the_daemonset_pod_places_the_demo_pods(node: AgentNode, image: BuiltImage) -> None:
    agent = node.start_agent(image)
    assert agent.probe("livenessProbe")
    # What the runtime was asked for and applied: the DaemonSet's security context, the agent as PID 1.
    spec = node.cri.container_status(agent.container_id).spec
    process = spec["process"]
    assert process["user"]["uid"] == 0
    assert not any(process.get("capabilities", {}).values()), process.get("capabilities")
    assert process["noNewPrivileges"] is True and spec["root"]["readonly"] is True
    assert "seccomp" in spec["linux"]
    pid = node.cri.container_status(agent.container_id).pid
    assert cgroupfs.status_field(pid, "NSpid").split()[-1] == "1", "the agent is its container's PID 1"
    assert agent.ip and agent.ip != "127.0.0.1"
    # The pod network carries the probes and /metrics, never the views that name every pod and its CPUs.
    assert agent.get("metrics", "/metrics")[0] == 200
    assert agent.get("metrics", "/debug/node")[0] == 404
    assert agent.get(9809, "/debug/node")[0] == 0, "the operator views listen on the pod's loopback only"
    node.wait_logged(agent, "registered with containerd")

    web = start_pod(node.cri, demo_pod("web"), with_shape=False)
    fast_path = demo_pod("fast-path")
    fast = start_pod(node.cri, fast_path)
    assert applied(node.cri, fast.containers["main-app"]) == Applied(ASSIGNABLE, "0", quota_off(), ASSIGNABLE)
    assert wait_applied(node.cri, web.containers["server"], RESERVED).cpus == RESERVED
    pod_cgroup = cgroupfs.read_cgroup(node.containerd.pod_cgroup_parent(fast_path.uid, "guaranteed"))
    assert (pod_cgroup.cpus, pod_cgroup.effective_mems, pod_cgroup.cpu_quota_us) == (ASSIGNABLE, "0", None)
    node.wait_logged(agent, f"pod{fast_path.uid}: cpus={ASSIGNABLE} mems=0 quota=off")
    with pytest.raises(CRIError) as refused:
        start_pod(node.cri, demo_pod("no-room"))
    assert f"{EMPTY_POD_SHARED_POOL_ERROR}: " in refused.value.details

    # The operator commands inside the agent's container (its cgroup mount is /host/cgroup there).
    check = node.operator(agent, "check")
    assert check.exit_code == 0, check.stdout + check.stderr
    show = node.operator(agent, "show", "--json")
    assert show.exit_code == 0, show.stderr
    pods = json.loads(show.stdout)["pods"]
    shown = {(pod["name"], c["name"]): c for pod in pods for c in pod["containers"]}
    for key, cpus in ((("fast-path", "main-app"), ASSIGNABLE), (("web", "server"), RESERVED)):
        cgroup = shown[key]["cgroup"]
        found = cgroup["found"]
        assert (cgroup["expected"]["cpus"], found["cpus"], found["drifted"]) == (cpus, cpus, [])

    # PodResources through the directory the DaemonSet mounts from the node.
    with grpc.insecure_channel(f"unix:{node.podresources_dir / 'pod-resources.sock'}") as channel:
        listed = podresources_grpc.PodResourcesListerStub(channel).List(
            podresources_pb.ListPodResourcesRequest(), timeout=10)
    [fast_listed] = [p for p in listed.pod_resources if p.name == "fast-path"]
    assert list(fast_listed.cpu_ids) == [int(ASSIGNABLE)]


def test_a_rollout_stop_ends_the_agent_cleanly(node: AgentNode, image: BuiltImage) -> None:
    """SIGTERM to PID 1, SIGKILL once the grace period runs out: it must exit 0 before that, with its last
    checkpoint written and its socket removed."""
    agent = node.start_agent(image)
    start_pod(node.cri, demo_pod("fast-path"))
    socket = node.podresources_dir / "pod-resources.sock"
    assert socket.is_socket()

    took, exit_code = workload.stop(node.cri, agent)

    print(f"clean stop: {took:.2f} s (grace period {agent.grace_s} s), exit code {exit_code}")
    assert exit_code == 0, "a SIGKILL after the grace period, or a failed stop"
    assert not socket.exists()
    node.verify_checkpoints()
    assert "stopped: last checkpoint written, sockets removed" in node.agent_log(agent)[-1]


def test_upgrade_and_rollback_with_pods_running(node: AgentNode, image: BuiltImage, tmp_path: Path) -> None:
    """A (this tree) -> B (a version bump) -> A, each replaced as a DaemonSet rollout replaces its pod. The
    running pods stay where they are, the checkpoints verify at every step, and a pod created while no agent
    runs starts unplaced (on every CPU) and is moved into the node shared pool by the next agent's
    Synchronize."""
    bumped = agent_image.build(agent_image.copy_with_version(tmp_path / "bumped", UPGRADE_VERSION))
    assert bumped.reference == f"nri-podlevel:{UPGRADE_VERSION}" and bumped.image_id != image.image_id
    node.import_image(bumped)
    agent = node.start_agent(image)
    fast = start_pod(node.cri, demo_pod("fast-path"))
    main_app = applied(node.cri, fast.containers["main-app"])
    assert main_app == Applied(ASSIGNABLE, "0", quota_off(), ASSIGNABLE)

    for version in (bumped, image):
        took, exit_code = workload.stop(node.cri, agent)
        assert exit_code == 0
        node.verify_checkpoints()
        between = start_pod(node.cri, demo_pod("web"), with_shape=False)
        assert applied(node.cri, between.containers["server"]).cpus == ALL, "created unadjusted"

        agent = node.start_agent(version)

        node.wait_logged(agent, "restored 1 pods from the checkpoint")
        assert wait_applied(node.cri, between.containers["server"], RESERVED).cpus == RESERVED
        assert applied(node.cri, fast.containers["main-app"]) == main_app, "nothing moves"
        node.verify_checkpoints()
        print(f"{version.reference}: replaced in a stop of {took:.2f} s; running pods kept, "
              f"the pod created meanwhile taken in at Synchronize")


BROKEN = {
    "read-only-state": ("state", "--state-dir", "Read-only file system"),
    "no-cgroup-mount": ("cgroup", "--cgroup-root", "not a cgroup v2 root"),
    "no-nri-directory": ("nri-socket", "--nri-socket", "no such directory"),
}


@pytest.mark.parametrize("case", BROKEN)
def test_a_broken_mount_is_named_once_and_waited_on_not_crash_looped(node: AgentNode, image: BuiltImage,
                                                                      case: str) -> None:
    """The DaemonSet with one volume read-only or missing: the agent stays up, alive and not ready, its
    readiness and one log line naming the path, the flag and the volume; the state directory is untouched."""
    volume, flag, reason = BROKEN[case]
    objects = copy.deepcopy(node.objects)
    [daemonset] = find(objects, "DaemonSet", AGENT)
    pod_spec = daemonset["spec"]["template"]["spec"]
    mounts = pod_spec["containers"][0]["volumeMounts"]
    [mount] = [m for m in mounts if m["name"] == volume]
    if reason == "Read-only file system":
        mount["readOnly"] = True
    else:
        mounts.remove(mount)
        pod_spec["volumes"] = [v for v in pod_spec["volumes"] if v["name"] != volume]
    node.state_dir.mkdir(parents=True, exist_ok=True)
    (node.state_dir / CPU_STATE_FILE).write_text("left by an earlier agent\n")

    agent = workload.run(node.cri, objects, "DaemonSet", AGENT, image=image.reference, work=node.work,
                         host_paths=node.host_paths())

    status, body = wait_until(lambda: (got := agent.get("metrics", "/readyz"))[0] and got, READY_TIMEOUT_S,
                              "the agent's readiness answer")
    assert status == 503 and flag in body and f"volume {volume!r}" in body and reason in body, body
    assert agent.probe("livenessProbe"), "alive: no restart would fix a mount"
    said = [line for line in node.agent_log(agent) if "cannot start:" in line]
    assert len(said) == 1 and flag in said[0] and f"volume {volume!r}" in said[0], said
    assert node.cri.container_status(agent.container_id).state == "CONTAINER_RUNNING"
    assert sorted(p.name for p in node.state_dir.iterdir()) == [CPU_STATE_FILE]
    assert (node.state_dir / CPU_STATE_FILE).read_text() == "left by an earlier agent\n"
    assert workload.stop(node.cri, agent)[1] == 0


def test_the_webhook_deployment_annotates_pods_over_tls_and_drains_on_stop(node: AgentNode, image: BuiltImage,
                                                                            tmp_path: Path) -> None:
    """The webhook from the same image as its Deployment runs it (uid 65532, no capabilities, read-only root),
    with the certificate and key hack/webhook-certs makes, projected as its Secret would be: the stand-in API
    server's pods go through it over TLS and arrive annotated; a stop ends it with status 0."""
    certificates = tmp_path / "certs"
    subprocess.run([str(CHECKOUT / "hack" / "webhook-certs"), "--output", str(certificates)], check=True,
                   capture_output=True, timeout=120)
    webhook = workload.run(node.cri, node.objects, "Deployment", WEBHOOK, image=image.reference,
                           work=node.work, host_paths={}, secret_dirs={WEBHOOK_SECRET: certificates})
    wait_until(lambda: webhook.probe("readinessProbe"), READY_TIMEOUT_S, f"the webhook on {webhook.ip}")
    process = node.cri.container_status(webhook.container_id).spec["process"]
    assert (process["user"]["uid"], process["user"]["gid"]) == (65532, 65532)
    endpoint = RemoteWebhook((webhook.ip, webhook.port("https")), certificates / "ca.crt")

    [fast_path] = [d for d in yaml.safe_load_all(PODS.read_text()) if d["metadata"]["name"] == "fast-path"]
    create_pod(node.cri, endpoint, fast_path)

    shapes = {p.name: p.annotations.get(SHAPE_ANNOTATION) for p in node.cri.list_pods()}
    assert shapes["fast-path"] == to_annotation(demo_pod("fast-path"))
    took, exit_code = workload.stop(node.cri, webhook)
    print(f"webhook stop: {took:.2f} s, exit code {exit_code}")
    assert exit_code == 0


def test_the_image_says_what_it_is(image: BuiltImage) -> None:
    """Its OCI labels give the version, the commit it was built from and where that commit can be fetched
    (`crictl inspecti` on a node)."""
    head = subprocess.run(["git", "-C", str(CHECKOUT), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=False)
    found = agent_image.labels(image.archive)
    assert found["org.opencontainers.image.version"] == agent_image.version()
    assert found["org.opencontainers.image.revision"] == (head.stdout.strip() or "unknown")
    assert (found["org.opencontainers.image.title"], found["org.opencontainers.image.licenses"]) == (
        "nri-podlevel", "Apache-2.0")
    origin = subprocess.run(["git", "-C", str(CHECKOUT), "remote", "get-url", "origin"], capture_output=True,
                            text=True, check=False).stdout.strip()
    source = subprocess.run([str(CHECKOUT / "hack" / "image"), "--source-of", origin], capture_output=True,
                            text=True, check=True).stdout.strip()
    assert found.get("org.opencontainers.image.source") == (source or None), f"origin {origin!r}"


def test_beside_the_image_is_an_sbom_of_what_it_holds(image: BuiltImage) -> None:
    """CycloneDX, made by cyclonedx-py from the distributions the image's Python finds installed: the pins it
    was built from (pip installs them and is not kept), the package itself as the SBOM's subject."""
    sbom = json.loads(image.archive.with_suffix(".cdx.json").read_text())
    assert (sbom["bomFormat"], sbom["specVersion"]) == ("CycloneDX", "1.6")
    subject = sbom["metadata"]["component"]
    assert (subject["name"], subject["version"]) == ("nri-podlevel", agent_image.version())
    held = {canonicalize_name(c["name"]): c["version"] for c in sbom["components"]}
    assert held == {name: version for name, (version, _) in agent_image.pins().items() if name != "pip"}
    for component in sbom["components"]:
        assert component["purl"] == f"pkg:pypi/{canonicalize_name(component['name'])}@{component['version']}"
