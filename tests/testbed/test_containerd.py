"""Test bed containerd config: both layouts keep every path under the base directory and carry the settings
this machine needs (host runc pinned, cgroupfs, restrict_oom_score_adj, NRI on, the local pause image)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from testbed.containerd import Containerd, ContainerdError, shim_socket
from testbed.images import PAUSE_IMAGE


def _strings(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [s for value in node.values() for s in _strings(value)]
    if isinstance(node, list):
        return [s for value in node for s in _strings(value)]
    return [node] if isinstance(node, str) else []


@pytest.mark.parametrize(
    ("flavour", "version", "cri", "runtime"),
    [
        ("2", 3, "io.containerd.cri.v1.runtime", "io.containerd.cri.v1.runtime"),
        ("1.7", 2, "io.containerd.grpc.v1.cri", "io.containerd.grpc.v1.cri"),
    ],
)
def test_config(tmp_path: Path, flavour: str, version: int, cri: str, runtime: str) -> None:
    ctrd = Containerd(flavour, tmp_path)
    config = tomllib.loads(ctrd.config())
    plugins = config["plugins"]
    assert config["version"] == version
    assert plugins[cri]["restrict_oom_score_adj"] is True
    runc = plugins[runtime]["containerd"]["runtimes"]["runc"]
    assert runc["runtime_type"] == "io.containerd.runc.v2"
    assert runc["options"] == {
        "BinaryName": "/usr/sbin/runc",
        "Root": f"{tmp_path}/runc",
        "SystemdCgroup": False,
    }
    nri = plugins["io.containerd.nri.v1.nri"]
    assert nri["disable"] is False and nri["socket_path"] == str(ctrd.nri_socket)
    assert config["grpc"]["address"] == str(ctrd.cri_socket)
    assert PAUSE_IMAGE in _strings(config)
    paths = [s for s in _strings(config) if s.startswith("/")]
    assert paths and all(p.startswith(f"{tmp_path}/") for p in paths if p != "/usr/sbin/runc")


def test_cgroup_root_is_per_base(tmp_path: Path) -> None:
    one, other = Containerd("2", tmp_path / "a"), Containerd("2", tmp_path / "b")
    assert one.cgroup_root != other.cgroup_root
    assert one.cgroup_root == Containerd("1.7", tmp_path / "a").cgroup_root
    assert one.pod_cgroup_parent("u1") == f"{one.cgroup_root}/kubepods/podu1"


def test_refuses_socket_paths_too_long_for_unix_sockets(tmp_path: Path) -> None:
    with pytest.raises(ContainerdError, match="longer than the 107 bytes"):
        Containerd("2", tmp_path / ("x" * 100))


def test_shim_socket_is_named_from_its_command_line() -> None:
    argv = ["containerd-shim-runc-v2", "-namespace", "k8s.io", "-id", "abc", "-address", "/b/containerd.sock"]
    path = shim_socket(argv)
    assert path is not None and path.parent == Path("/run/containerd/s") and len(path.name) == 64
    assert shim_socket(argv[:3]) is None
