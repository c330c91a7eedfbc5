"""`nri-podlevel show`, `check`, `explain` and `simulate --node` against a real plugin object served by the
real endpoint, its real checkpoint files, and a cgroup v1 tree on disk that holds what the runtime would have
written; then with the endpoint gone (the checkpoint fallback)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from podlevel.agent.plugin import PodLevelPlugin
from podlevel.cli.drift import Drift, Expected, Found
from podlevel.cli.inspection import CgroupRow, ContainerRow, Inspection, PodRow
from podlevel.cli.layout import Style
from podlevel.cli.main import main
from podlevel.cli.show import render
from podlevel.engine.cpuset import CPUSet
from podlevel.engine.errors import EMPTY_POD_SHARED_POOL_ERROR, TOPOLOGY_AFFINITY_ERROR
from podlevel.engine.topology import from_spec
from podlevel.httpd import Server
from podlevel.report.views import views
from podlevel.state.engine_state import checkpoints_of
from podlevel.state.store import StateDir
from podlevel.sysfs import write_tree
from support.builders import SMALL, three_pods

SYSFS = "/nonexistent-sysfs"


@dataclass
class Node:
    plugin: PodLevelPlugin
    server: Server
    state_dir: Path
    cgroup_root: Path

    @property
    def address(self) -> str:
        return "{}:{}".format(*self.server.address)

    def args(self) -> list[str]:
        return ["--address", self.address, "--state-dir", str(self.state_dir), "--cgroup-root",
                str(self.cgroup_root), "--sysfs-root", SYSFS]

    def cpuset(self, cgroup: str) -> Path:
        return self.cgroup_root / "cpuset" / cgroup.strip("/")


def write_cgroup(root: Path, cgroup: str, cpus: str, mems: str, quota: int) -> None:
    """What runc (or the plugin, for a pod cgroup) leaves in a v1 cgroup."""
    cpuset, cpu = root / "cpuset" / cgroup.strip("/"), root / "cpu,cpuacct" / cgroup.strip("/")
    for directory in (cpuset, cpu):
        directory.mkdir(parents=True, exist_ok=True)
    for name, value in (("cpuset.cpus", cpus), ("cpuset.effective_cpus", cpus), ("cpuset.mems", mems),
                        ("cpuset.effective_mems", mems)):
        (cpuset / name).write_text(value + "\n")
    (cpu / "cpu.cfs_quota_us").write_text(f"{quota}\n")
    (cpu / "cpu.cfs_period_us").write_text("100000\n")


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    """web (no shape) in the node shared pool, fast with a 4-CPU bubble, no-room refused; every cgroup holds
    what it should."""
    root = tmp_path / "cgroup"
    write_cgroup(root, "/", "0-15", "0-1", -1)
    plugin = three_pods(StateDir(tmp_path / "state"))
    view = plugin.snapshot.placement
    for container_id, settings in view.applied.items():
        quota = -1 if settings.cpu_quota_us is None else settings.cpu_quota_us
        path = plugin.snapshot.cgroups_paths[container_id]
        write_cgroup(root, path, str(settings.cpus), str(CPUSet(settings.mems)), quota)
    for wanted in plugin.snapshot.pod_cgroups.values():
        write_cgroup(root, wanted.cgroup_parent, str(wanted.cpus), "0", -1)
    write_cgroup(root, "/kubepods/poduid-web", "0-15", "0-1", -1)
    server = Server("127.0.0.1:0", views(lambda: plugin.snapshot, {"cgroup_root": str(root)}))
    server.start()
    try:
        yield Node(plugin, server, tmp_path / "state", root)
    finally:
        server.stop()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_check_agrees_then_names_a_cpuset_written_behind_the_plugins_back(
    node: Node, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = run(capsys, "check", *node.args())
    assert status == 0, out
    assert out.splitlines()[-1] == "the plugin, its checkpoints and the cgroups agree: 3 pods, 2 containers"

    server_cgroup = node.cpuset("/kubepods/poduid-web/web-server")
    (server_cgroup / "cpuset.cpus").write_text("3\n")
    status, out, _ = run(capsys, "check", *node.args())

    assert status == 1
    pool = str(node.plugin.placement.engine.node_shared_pool(node.plugin.placement.state))
    assert (f"drift (plugin and cgroup): {server_cgroup / 'cpuset.cpus'}: expected {pool}, found 3"
            in out.splitlines())
    assert out.splitlines()[-1] == "1 drift"


def test_without_cgroup_root_the_commands_read_the_cgroups_where_the_plugin_does(
    node: Node, capsys: pytest.CaptureFixture[str]
) -> None:
    """In the agent's container (`kubectl exec`) /sys/fs/cgroup is the container's own cgroup namespace; the
    node's tree is where the plugin's --cgroup-root says, which /debug/node tells."""
    status, out, _ = run(capsys, "check", "--address", node.address, "--state-dir", str(node.state_dir))
    assert status == 0, out
    assert f"cgroups under {node.cgroup_root}" in out.splitlines()[0]


def test_check_names_a_stale_checkpoint_and_a_lifted_quota(
    node: Node, capsys: pytest.CaptureFixture[str]
) -> None:
    quota = node.cgroup_root / "cpu,cpuacct" / "kubepods" / "poduid-fast" / "fast-app" / "cpu.cfs_quota_us"
    quota.write_text("50000\n")
    engine = node.plugin.placement.engine
    StateDir(node.state_dir).write(*checkpoints_of(engine, engine.initial_state()))  # from before any pod
    status, out, _ = run(capsys, "check", *node.args())
    assert status == 1
    assert f"drift (plugin and cgroup): {quota}: expected max, found 50000" in out
    cpu_file = node.state_dir / "cpu_manager_state"
    assert (f"drift (plugin and checkpoint): {cpu_file}: expected defaultCpuSet = 0,3-8,11-15, "
            "found defaultCpuSet = 0-15") in out
    assert (f"drift (plugin and checkpoint): {cpu_file}: expected pods.uid-fast.bubble = 1-2,9-10, "
            "found pods.uid-fast.bubble = absent") in out


def test_show_lists_pods_and_containers_beside_their_cgroups(
    node: Node, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = run(capsys, "show", *node.args())
    assert status == 0
    lines = out.splitlines()
    assert lines[0].startswith(f"nri-podlevel show: plugin at {node.address} (generation ")
    assert lines[2].split() == ["NUMA", "CPUS", "RESERVED", "BUBBLES", "EXCLUSIVE", "FREE", "MEMORY",
                                "RESERVED", "BUBBLES", "EXCLUSIVE", "FREE"]
    assert lines[3].split()[:6] == ["0", "0-3,8-11", "0,8", "1-2,9-10", "1,9", "3,11"]
    rows = {line.split()[0]: line.split() for line in lines if line.startswith("  ")}
    assert rows["app"] == ["app", "pod_exclusive", "1,9", "0", "max", "1,9", "0", "max"]
    # the pod limit stays: its log sidecar runs in the pod shared pool
    assert rows["(pod"][2:] == ["bubble", "1-2,9-10", "0", "-", "1-2,9-10", "0", "max"]
    assert rows["server"] == ["server", "node_shared", "0,3-8,11-15", "0-1", "-", "0,3-8,11-15", "0-1", "max"]
    assert any(line.startswith(f"default/no-room refused: {EMPTY_POD_SHARED_POOL_ERROR}:") for line in lines)
    assert lines[-1] == "no drift"


def test_show_json_has_the_documented_shape(node: Node, capsys: pytest.CaptureFixture[str]) -> None:
    (node.cpuset("/kubepods/poduid-fast/fast-app") / "cpuset.effective_mems").write_text("1\n")
    status, out, _ = run(capsys, "show", "--json", *node.args())
    assert status == 0
    shown = json.loads(out)
    assert shown["source"] == "plugin" and shown["node_shared_pool"] == "0,3-8,11-15"
    pods = {pod["title"]: pod for pod in shown["pods"]}
    [app] = pods["default/fast"]["containers"]
    assert app["assignment"] == "pod_exclusive"
    assert app["cgroup"]["expected"] == {"cpus": "1,9", "mems": "0", "quota": "max"}
    assert app["cgroup"]["found"] == {"cpus": "1,9", "mems": "1", "quota": "max", "error": None,
                                      "drifted": ["mems"]}
    [drift] = shown["drifts"]
    assert drift == {"file": str(node.cpuset("/kubepods/poduid-fast/fast-app") / "cpuset.effective_mems"),
                     "expected": "0", "found": "1", "between": "plugin and cgroup"}


def test_with_the_plugin_down_show_and_check_fall_back_to_the_checkpoints(
    node: Node, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    node.server.stop()
    write_tree(from_spec(SMALL), tmp_path / "sysfs")
    args = ["--address", node.address, "--state-dir", str(node.state_dir), "--cgroup-root",
            str(node.cgroup_root), "--sysfs-root", str(tmp_path / "sysfs")]
    status, out, _ = run(capsys, "show", *args)
    assert status == 0
    assert "does not answer" in out.splitlines()[0] and "from the checkpoint files in" in out.splitlines()[0]
    assert "pod uid-fast" in out
    status, out, _ = run(capsys, "check", *args)
    assert status == 0
    assert out.splitlines()[-1] == "the checkpoints and the pod cgroups agree: 1 pods, 2 containers"


def test_explain_an_admitted_and_a_refused_pod(node: Node, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "explain", "default/fast", "--address", node.address)
    assert status == 0
    assert out.splitlines()[:4] == [
        "default/fast (uid uid-fast): admitted",
        "  path: pod-level resources; topology manager scope pod, policy single-numa-node",
        "  free before the decision:",
        "    NUMA node 0: CPUs 1-3,9-11 (6 CPUs), memory 16284Mi",
    ]
    assert "  merge for the pod, requested cpu=4, memory=1Gi:" in out
    assert "    merged: node 0 (preferred) -> admitted by single-numa-node" in out
    assert "    app: pod_exclusive cpus 1,9 mems 0 quota off" in out

    status, out, _ = run(capsys, "explain", "default/no-room", "--address", node.address)
    assert status == 0
    assert f"  refused by {EMPTY_POD_SHARED_POOL_ERROR}: pod default/no-room: exclusive containers" in out

    assert run(capsys, "explain", "default/web", "--address", node.address)[0] == 1
    assert run(capsys, "explain", "web", "--address", node.address)[0] == 2


def pod_manifest(path: Path, name: str, cpus: int) -> str:
    budget = {"cpu": str(cpus), "memory": "1Gi"}
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"resources": {"requests": budget, "limits": budget},
                 "containers": [{"name": "app", "image": "x"}]},
    }))
    return str(path)


def test_simulate_node_starts_from_the_live_node(
    node: Node, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    live = ["simulate", "--node", "--address", node.address, "--topology", SMALL]
    fits = pod_manifest(tmp_path / "seven.yaml", "seven", 7)
    status, out, _ = run(capsys, *live, "--json", fits)
    shown: dict[str, Any] = json.loads(out)
    assert status == 0 and shown["live_node"]["pods"] == ["default/fast"], "web has no shape: unmanaged"
    assert shown["pods"][0]["bubble"] == {"cpus": "4-7,12-14", "mems": "1"}, "node 0 has 2 CPUs left"

    status, out, _ = run(capsys, *live, pod_manifest(tmp_path / "nine.yaml", "nine", 9))
    assert status == 1
    assert f"default/nine  REFUSED  {TOPOLOGY_AFFINITY_ERROR}:" in out
    assert "default/fast app (pod_exclusive)" in out, "the live pods hold their CPUs in the table"

    assert run(capsys, *live, "--policy", "none", fits)[0] == 2
    other = "sockets=1,nodes-per-socket=1,cores-per-node=2,threads-per-core=1"
    assert run(capsys, *live, "--topology", other, fits)[0] == 2


def test_formatting_highlights_drifts_in_colour_or_with_a_mark() -> None:
    row = CgroupRow(Expected("0", "0", None), "/c", Found("1", "0", "max", None, ("cpus",)),
                    [Drift("/c/cpuset.cpus", "0", "1", "plugin and cgroup")])
    server = ContainerRow("server", "id", "node_shared", row)
    pod = PodRow("default", "web", "u", "unmanaged", None, None, None, [server])
    numa = [{"node": 0, "cpus": {"all": "0-1", "reserved": "0", "bubbles": "", "exclusive": "", "free": "1"},
             "memory": {}}]
    shown = Inspection("plugin", "test", numa, "0-1", None, [pod], row.drifts)
    plain = render(shown, Style(False))
    [server] = [line.split() for line in plain.splitlines() if line.startswith("  server")]
    assert server == ["server", "node_shared", "0", "0", "-", "1!", "0", "max"]
    coloured = render(shown, Style(True))
    assert "\x1b[1;31m1\x1b[0m" in coloured
    assert plain.splitlines()[-1] == "drift (plugin and cgroup): /c/cpuset.cpus: expected 0, found 1"


@pytest.mark.parametrize("command", ["show", "check", "explain", "simulate"])
def test_an_operator_command_loads_none_of_the_daemon(command: str) -> None:
    """A command an operator runs by hand (or a probe runs often) starts without the agent, NRI, ttrpc or the
    checkpoint writer: it reads the endpoint, the files and the cgroups, nothing more."""
    daemon = ("podlevel.cli.run", "podlevel.agent.plugin", "podlevel.nri", "podlevel.ttrpc",
              "podlevel.state.writer")
    probe = (f"import sys, podlevel.cli.{command}; "
             f"print(' '.join(m for m in {daemon!r} if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                            check=True)
    assert loaded.stdout.split() == []
