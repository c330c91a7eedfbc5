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

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import grpc
import pytest

from podlevel._proto.podresources import api_pb2 as podresources_pb
from podlevel._proto.podresources import api_pb2_grpc as podresources_grpc
from podlevel.engine.errors import EMPTY_POD_SHARED_POOL_ERROR
from podlevel.state.store import CPU_STATE_FILE, MEMORY_STATE_FILE
from support.demo_node import ALL, ASSIGNABLE, RESERVED, Applied, applied, demo_pod, quota_off, wait_applied
from testbed import agent_image, cgroupfs, workload
from testbed.agent_image import BuiltImage
from testbed.containerd import Containerd
from testbed.cri import CRI, CRIError
from testbed.kubelet import start_pod
from testbed.manifests import Manifest, render
from testbed.wait import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("demo_node_cpus")]

READY_TIMEOUT_S: Final = 60.0
LOG_TIMEOUT_S: Final = 15.0
AGENT: Final = "nri-podlevel"
UPGRADE_VERSION: Final = "0.1.1"


@pytest.fixture(scope="session")
def image() -> BuiltImage:
    """The current tree's image, built once for the session."""
    return agent_image.build()


@dataclass
class Node:
    """A containerd with a pod network, the image in it, and the host directories the DaemonSet mounts."""

    containerd: Containerd
    cri: CRI
    work: Path
    objects: list[Manifest]

    @property
    def state_dir(self) -> Path:
        return self.work / "state"

    @property
    def podresources_dir(self) -> Path:
        return self.work / "podresources"

    def host_paths(self) -> dict[str, Path]:
        """The DaemonSet's hostPath volumes on this test bed: the runtime's NRI directory, the real sysfs and
        cgroup mounts (pods' cgroups lie under the test bed's own root there), a private state directory and
        PodResources directory."""
        return {"/var/run/nri": self.containerd.nri_socket.parent, "/sys": Path("/sys"),
                "/sys/fs/cgroup": cgroupfs.CGROUP_MOUNT, "/var/lib/nri-podlevel": self.state_dir,
                "/run/nri-podlevel": self.podresources_dir}

    def import_image(self, built: BuiltImage) -> None:
        subprocess.run([*self.containerd.ctr_command(), "images", "import", str(built.archive)],
                       check=True, capture_output=True, timeout=300)

    def start_agent(self, built: BuiltImage) -> workload.RunningPod:
        agent = workload.run(self.cri, self.objects, "DaemonSet", AGENT, image=built.reference,
                             work=self.work, host_paths=self.host_paths())
        wait_until(lambda: agent.probe("readinessProbe") == 200, READY_TIMEOUT_S,
                   f"the agent's readiness probe on {agent.ip}")
        return agent

    def agent_log(self, agent: workload.RunningPod) -> list[str]:
        """The agent container's log lines (CRI log files: `TIME STREAM TAG message`), messages only."""
        lines = agent.log_path.read_text().splitlines()
        return [line.split(" ", 3)[3] for line in lines if line.count(" ") >= 3]

    def wait_logged(self, agent: workload.RunningPod, text: str) -> str:
        def found() -> str | None:
            return next((line for line in self.agent_log(agent) if text in line), None)
        return wait_until(found, LOG_TIMEOUT_S, f"agent log line {text!r}")

    def verify_checkpoints(self) -> None:
        for name in (CPU_STATE_FILE, MEMORY_STATE_FILE):
            done = subprocess.run([sys.executable, "-m", "podlevel.cli.main", "checkpoint", "verify",
                                   str(self.state_dir / name)],
                                  capture_output=True, text=True, timeout=60, check=False)
            assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture
def node(containerd_flavour: str, image: BuiltImage,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    work = tmp_path_factory.mktemp("agent-image")
    with Containerd(containerd_flavour, work / "ctrd", pod_network=True) as ctrd, ctrd.cri() as cri:
        node = Node(ctrd, cri, work, render("script-certs"))
        node.import_image(image)
        yield node


def test_the_daemonset_pod_places_the_demo_pods(node: Node, image: BuiltImage) -> None:
    agent = node.start_agent(image)
    assert agent.probe("livenessProbe") == 200
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
    check = node.cri.exec_sync(agent.container_id, ["nri-podlevel", "check", "--cgroup-root", "/host/cgroup",
                                                    "--state-dir", "/var/lib/nri-podlevel"], timeout_s=30)
    assert check.exit_code == 0, check.stdout + check.stderr
    show = node.cri.exec_sync(agent.container_id, ["nri-podlevel", "show", "--json", "--cgroup-root",
                                                   "/host/cgroup", "--state-dir", "/var/lib/nri-podlevel"],
                              timeout_s=30)
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


def test_a_rollout_stop_ends_the_agent_cleanly(node: Node, image: BuiltImage) -> None:
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


def test_upgrade_and_rollback_with_pods_running(node: Node, image: BuiltImage, tmp_path: Path) -> None:
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
