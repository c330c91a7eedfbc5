"""The operator commands as a process (`nri-podlevel show|check|explain|simulate --node`) against the live
plugin on real containerd (both flavours), the cgroup files read by the command itself.

The demo pods on the 2-CPU host (CPU 0 reserved, CPU 1 assignable): `web` in the node shared pool, moved to
CPU 0 when `fast-path` takes CPU 1 as its bubble and `main-app`'s exclusive slice, `no-room` refused by the
empty-shared-pool rule. A drift is made by writing a container's cgroup file behind the plugin's back.
Where the plugin refuses a pod at its sandbox (containerd 2.4), the runtime removes the sandbox at once, so
`no-room` is not on the node for `show` to list; `explain` still tells why, as do the kubelet's events.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest

from podlevel.engine.errors import EMPTY_POD_SHARED_POOL_ERROR, TOPOLOGY_AFFINITY_ERROR
from support.demo_node import ASSIGNABLE, PODS, RESERVED, demo_pod, wait_applied
from testbed import cgroupfs
from testbed.containerd import Containerd
from testbed.cri import CRI, CRIError
from testbed.kubelet import start_pod
from testbed.plugin_process import PluginProcess

pytestmark = pytest.mark.integration

COMMAND_TIMEOUT_S: Final = 60.0


def nri_podlevel(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "podlevel.cli.main", *args], capture_output=True, text=True,
                          timeout=COMMAND_TIMEOUT_S, check=False)


@dataclass
class DemoNode:
    plugin: PluginProcess
    web: str
    """The web pod's server container id (node shared pool, on CPU 0 once fast-path has CPU 1)."""
    main_app: str

    def args(self) -> list[str]:
        return ["--address", self.plugin.debug_address, "--state-dir", str(self.plugin.state_dir)]


@pytest.fixture
def demo(containerd: Containerd, cri: CRI, tmp_path: Path) -> Iterator[DemoNode]:
    # No repair: the drifts these tests write must stay for `check` to find (test_agent tests the repair).
    plugin = PluginProcess(containerd.nri_socket, ["--reconcile-period", "0"], state_dir=tmp_path / "state")
    try:
        plugin.wait_registered()
        web = start_pod(cri, demo_pod("web"), with_shape=False).containers["server"]
        main_app = start_pod(cri, demo_pod("fast-path")).containers["main-app"]
        with pytest.raises(CRIError):
            start_pod(cri, demo_pod("no-room"))
        wait_applied(cri, web, RESERVED)
        wait_applied(cri, main_app, ASSIGNABLE)
        yield DemoNode(plugin, web, main_app)
    finally:
        plugin.stop()


def shown(demo: DemoNode) -> dict[str, Any]:
    done = nri_podlevel("show", "--json", *demo.args())
    assert done.returncode == 0, done.stderr
    document: dict[str, Any] = json.loads(done.stdout)
    return document


def test_show_lists_the_demo_pods_with_their_cgroups_and_check_agrees(demo: DemoNode) -> None:
    node = shown(demo)
    assert node["source"] == "plugin" and node["drifts"] == []
    assert node["numa_nodes"][0]["cpus"] == {"all": "0-1", "reserved": "0", "bubbles": "1", "exclusive": "1",
                                             "free": ""}
    pods = {pod["title"]: pod for pod in node["pods"]}
    # no-room is listed refused whether the runtime keeps its sandbox (refused at its first container) or
    # removed it (refused at its sandbox: the last one is listed).
    assert {title: pod["status"] for title, pod in pods.items()} == {
        "default/web": "unmanaged", "default/fast-path": "admitted", "default/no-room": "refused"}
    [server] = pods["default/web"]["containers"]
    assert server["cgroup"]["found"] == {"cpus": RESERVED, "mems": "0", "quota": "max", "error": None,
                                         "drifted": []}
    [main_app] = pods["default/fast-path"]["containers"]
    found = main_app["cgroup"]["found"]
    assert (main_app["assignment"], found["cpus"], found["quota"]) == ("pod_exclusive", ASSIGNABLE, "max")
    assert pods["default/fast-path"]["pod_cgroup"]["found"]["cpus"] == ASSIGNABLE
    assert pods["default/no-room"]["refusal"].startswith(f"{EMPTY_POD_SHARED_POOL_ERROR}: ")

    table = nri_podlevel("show", *demo.args())
    assert table.returncode == 0 and table.stdout.splitlines()[-1] == "no drift"
    assert "default/fast-path" in table.stdout and "  main-app" in table.stdout

    check = nri_podlevel("check", *demo.args())
    assert check.returncode == 0, check.stdout
    agree = "the plugin, its checkpoints and the cgroups agree: 3 pods, 2 containers"
    assert check.stdout.splitlines()[-1] == agree


def test_check_names_a_cpuset_written_behind_the_plugins_back(cri: CRI, demo: DemoNode) -> None:
    """web's container runs in the node shared pool on CPU 0; its pod cgroup allows 0-1, so writing CPU 1
    into the container's own cpuset is accepted by the kernel, and is a drift."""
    relative = cri.container_status(demo.web).cgroups_path.strip("/")
    hierarchy = cgroupfs.CGROUP_MOUNT if cgroupfs.is_cgroup2() else cgroupfs.CGROUP_MOUNT / "cpuset"
    written = hierarchy / relative / "cpuset.cpus"
    written.write_text(ASSIGNABLE)

    check = nri_podlevel("check", *demo.args())

    assert check.returncode == 1, check.stdout
    assert (f"drift (plugin and cgroup): {written}: expected {RESERVED}, found {ASSIGNABLE}"
            in check.stdout.splitlines())
    assert check.stdout.splitlines()[-1] == "1 drift"
    [drift] = shown(demo)["drifts"]
    assert drift["file"] == str(written)


def test_with_the_plugin_down_show_and_check_read_the_checkpoints(demo: DemoNode) -> None:
    demo.plugin.stop()
    show = nri_podlevel("show", *demo.args())
    assert show.returncode == 0, show.stderr
    assert "does not answer" in show.stdout.splitlines()[0]
    assert "from the checkpoint files in" in show.stdout.splitlines()[0]
    check = nri_podlevel("check", *demo.args())
    assert check.returncode == 0, check.stdout
    assert check.stdout.splitlines()[-1] == "the checkpoints and the pod cgroups agree: 1 pods, 1 containers"


def test_explain_an_admitted_and_a_refused_pod(demo: DemoNode) -> None:
    admitted = nri_podlevel("explain", "default/fast-path", "--address", demo.plugin.debug_address)
    assert admitted.returncode == 0, admitted.stderr
    lines = admitted.stdout.splitlines()
    assert lines[0].startswith("default/fast-path (uid ") and lines[0].endswith("): admitted")
    assert lines[3].startswith("    NUMA node 0: CPUs 1 (1 CPU), ") and " memory " in lines[3]
    assert "  merge for the pod, requested cpu=1, memory=256Mi:" in lines
    assert "    CPU manager: cpu node 0 (preferred)" in lines
    # single-numa-node reports a hint over every node of a one-node machine as "any node"
    assert "    merged: any node (preferred) -> admitted by single-numa-node" in lines
    assert "    main-app: pod_exclusive cpus 1 mems 0 quota off" in lines

    # explain keeps the newest decisions: a pod refused at its sandbox, gone from the node, is explained too
    refused = nri_podlevel("explain", "default/no-room", "--address", demo.plugin.debug_address)
    assert refused.returncode == 0, refused.stderr
    assert refused.stdout.splitlines()[0].endswith("): refused")
    assert f"  refused by {EMPTY_POD_SHARED_POOL_ERROR}: pod default/no-room: " in refused.stdout

    as_json = nri_podlevel("explain", "default/no-room", "--json", "--address", demo.plugin.debug_address)
    assert json.loads(as_json.stdout)["error"]["type"] == EMPTY_POD_SHARED_POOL_ERROR


def test_simulate_node_says_a_second_bubble_would_not_fit(demo: DemoNode) -> None:
    """fast-path holds CPU 1, the only assignable CPU: the live node has no room for another one."""
    done = nri_podlevel("simulate", "--node", "--address", demo.plugin.debug_address, str(PODS))
    assert done.returncode == 1, done.stderr
    assert "pods admitted there: default/fast-path" in done.stdout
    assert f"  default/fast-path  REFUSED  {TOPOLOGY_AFFINITY_ERROR}: " in done.stdout
    assert "  default/web  admitted" in done.stdout
