"""A node running the agent as its DaemonSet does (`testbed.workload`), for the tests on the host and in the
guest: a containerd with a pod network, the image imported, and the host directories the DaemonSet mounts
mapped to private ones, so a test never touches the node's real /var/lib/nri-podlevel or /run/nri-podlevel.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from podlevel.state.store import CPU_STATE_FILE, MEMORY_STATE_FILE
from testbed import cgroupfs, workload
from testbed.agent_image import BuiltImage
from testbed.containerd import Containerd
from testbed.cri import CRI, ExecResult
from testbed.manifests import Manifest
from testbed.wait import wait_until

READY_TIMEOUT_S: Final = 60.0
LOG_TIMEOUT_S: Final = 15.0
AGENT: Final = "nri-podlevel"


@dataclass
class AgentNode:
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
        wait_until(lambda: agent.probe("readinessProbe"), READY_TIMEOUT_S,
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

    def operator(self, agent: workload.RunningPod, *command: str) -> ExecResult:
        """`nri-podlevel COMMAND` run by CRI exec inside the agent's container, on its mounts (the node's
        cgroups at /host/cgroup, the state directory at its node path), as an operator runs it with
        `kubectl exec`."""
        flags = ["--cgroup-root", "/host/cgroup", "--state-dir", "/var/lib/nri-podlevel"]
        return self.cri.exec_sync(agent.container_id, ["nri-podlevel", *command, *flags], timeout_s=60)

    def verify_checkpoints(self) -> None:
        for name in (CPU_STATE_FILE, MEMORY_STATE_FILE):
            done = subprocess.run([sys.executable, "-m", "podlevel.cli.main", "checkpoint", "verify",
                                   str(self.state_dir / name)],
                                  capture_output=True, text=True, timeout=60, check=False)
            assert done.returncode == 0, done.stdout + done.stderr
