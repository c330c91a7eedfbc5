"""cli.config: `config check FILE` says whether `run` would start with FILE on a node (a sysfs tree written
for a described machine), with `run`'s own message when it would not."""

from __future__ import annotations

from pathlib import Path

import pytest

from podlevel.cli.main import main
from podlevel.engine.topology import from_spec
from podlevel.sysfs.writer import write_tree
from support.builders import CHECKOUT, SMALL

SHIPPED = CHECKOUT / "deploy" / "base" / "agent" / "config.yaml"
FOUR_NODES = "sockets=2,nodes-per-socket=2,cores-per-node=4,threads-per-core=2"


def node(tmp_path: Path, spec: str = SMALL) -> Path:
    return write_tree(from_spec(spec), tmp_path / "sys")


def check(path: Path, sysfs: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main(["config", "check", str(path), "--sysfs-root", str(sysfs)])
    out, err = capsys.readouterr()
    return status, out, err


def test_the_shipped_configuration_is_valid_and_says_what_run_would_run_with(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = check(SHIPPED, node(tmp_path), capsys)
    assert (status, err) == (0, "")
    assert out.splitlines() == [
        f"nri-podlevel config check: {SHIPPED} is valid on this node (1 socket(s), 2 NUMA node(s), 8 cores, "
        "16 CPUs):",
        "  scope pod, topology policy single-numa-node, CPU policy static, memory policy Static",
        "  reserved CPUs 0,8; reserved memory node 0 memory=100Mi",
        "  CPU manager options none; topology manager options none",
    ]


def test_a_value_wrong_for_this_node_fails_with_runs_own_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Right for a node pool of four NUMA nodes, wrong for this one: `run` would exit 2 with the same line."""
    config = tmp_path / "config.yaml"
    config.write_text('reserved-cpus: "0,8"\nreserved-memory: ["0:memory=100Mi", "3:memory=100Mi"]\n')
    assert check(config, node(tmp_path / "big", FOUR_NODES), capsys)[0] == 0

    status, out, err = check(config, node(tmp_path), capsys)

    assert (status, out) == (2, "")
    assert err == (
        "nri-podlevel config check: bad configuration: --reserved-memory: '3:memory=100Mi' must start with a "
        f"NUMA node id of this machine ((0, 1)) and ':' (--reserved-memory from the config file {config})\n"
    )
    state = tmp_path / "state"
    state.mkdir()
    argv = ["--config", str(config), "--sysfs-root", str(node(tmp_path / "again")), "--state-dir", str(state),
            "--nri-socket", str(tmp_path / "nri.sock"), "--cgroup-root=", "--podresources-socket=",
            "--metrics-address=", "--debug-address="]
    assert main(["run", *argv]) == 2
    assert capsys.readouterr().err == err.replace("config check", "run")


def test_a_kubelet_configuration_is_read_as_run_reads_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "kubelet.yaml"
    config.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
                      'reservedSystemCPUs: "0-1"\ncpuManagerPolicyOptions:\n  full-pcpus-only: "true"\n'
                      "topologyManagerPolicy: restricted\n")
    status, out, _ = check(config, node(tmp_path), capsys)
    assert status == 0
    assert "topology policy restricted" in out
    assert "reserved CPUs 0-1" in out and "CPU manager options full-pcpus-only=true" in out


def test_a_missing_file_or_node_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert check(tmp_path / "nowhere.yaml", node(tmp_path), capsys)[0] == 2
    assert check(SHIPPED, tmp_path / "no-sysfs", capsys)[0] == 2
