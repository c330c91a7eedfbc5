"""`nri-podlevel release` on a real containerd (every flavour): once the agent is gone, every container it
shaped and the pod cgroup it wrote hold what the kubelet leaves them, read back from cgroupfs, and the
checkpoints are set aside so that an agent installed again starts from the runtime."""

from __future__ import annotations

import subprocess
import sys
from typing import Final

import pytest

from podlevel.podspec.runtime import container_resources, sandbox_resources
from podlevel.state.store import CPU_STATE_FILE, MEMORY_STATE_FILE, journal_files
from support.demo_node import ALL, ASSIGNABLE, Applied, applied, web_and_fast_path
from testbed import cgroupfs
from testbed.containerd import Containerd
from testbed.cri import CRI
from testbed.plugin_process import PluginProcess

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("demo_node_cpus")]

RELEASE_TIMEOUT_S: Final = 60.0


def release(containerd: Containerd, plugin: PluginProcess) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "podlevel.cli.main", "release", "--nri-socket",
               str(containerd.nri_socket), "--state-dir", str(plugin.state_dir), "--address",
               plugin.debug_address, "--timeout", "30"]
    return subprocess.run(command, capture_output=True, text=True, timeout=RELEASE_TIMEOUT_S, check=False)


def test_release_puts_every_container_and_the_pod_cgroup_back(
    containerd: Containerd, cri: CRI, plugin: PluginProcess
) -> None:
    fast_path, containers, before = web_and_fast_path(cri)
    pod_parent = containerd.pod_cgroup_parent(fast_path.uid, "guaranteed")
    assert cgroupfs.read_cgroup(pod_parent).effective_cpus == ASSIGNABLE

    refused = release(containerd, plugin)
    assert refused.returncode == 2 and "the agent still answers" in refused.stderr
    assert applied(cri, containers["main-app"]) == before["main-app"], "a refused release changes nothing"

    plugin.stop()
    done = release(containerd, plugin)

    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 containers given CPUs 0-1" in done.stdout and "1 pod cgroups widened" in done.stdout
    period = 100_000
    kubelet_quota = container_resources(fast_path, fast_path.container("main-app"), period).cpu_quota
    assert applied(cri, containers["main-app"]) == Applied(ALL, "0", str(kubelet_quota), ALL)
    web = applied(cri, containers["web"])
    assert (web.cpus, web.allowed, web.quota) == (ALL, ALL, before["web"].quota), "web's quota left alone"
    pod_cgroup = cgroupfs.read_cgroup(pod_parent)
    assert (pod_cgroup.effective_cpus, pod_cgroup.cpu_quota_us) == (
        ALL, sandbox_resources(fast_path, period).cpu_quota or None)
    for name in (CPU_STATE_FILE, MEMORY_STATE_FILE):
        assert not (plugin.state_dir / name).exists()
        assert len(list(plugin.state_dir.glob(f"{name}.released-*"))) == 1
    assert journal_files(plugin.state_dir) == [], "no journal left to replay over a later install's files"
