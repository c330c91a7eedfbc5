"""The test bed itself, on both containerd flavours: CRI answers, resources reach cgroupfs, exec and updates
work, containers survive a containerd restart, and stop() leaves no process, mount, cgroup or shim socket
behind, also after containerd crashed with pods running."""

from __future__ import annotations

import os
import re
import signal
import uuid
from pathlib import Path

import pytest

from testbed import cgroupfs
from testbed.containerd import Containerd
from testbed.cri import CRI, Resources
from testbed.images import BUSYBOX_IMAGE, PAUSE_IMAGE
from testbed.wait import wait_until

pytestmark = pytest.mark.integration

MiB = 1024 * 1024
# The highest CPU this process may use: pinning there differs from the default (all CPUs) on 2+ CPUs.
PIN_CPU = max(os.sched_getaffinity(0))


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _mounted_under(base: Path) -> list[str]:
    with open("/proc/self/mounts") as mounts:
        return [line.split()[1] for line in mounts if line.split()[1].startswith(f"{base}/")]


def _cgroups_under(root: str) -> list[Path]:
    """The cgroup `root` in a pure v2 tree or in any v1/hybrid hierarchy."""
    candidates = [Path("/sys/fs/cgroup" + root), *Path("/sys/fs/cgroup").glob("*" + root)]
    return [path for path in candidates if path.exists()]


def _run_pinned_pod(ctrd: Containerd, cri: CRI) -> tuple[str, str]:
    uid = str(uuid.uuid4())
    pod = cri.run_pod("testbed", uid=uid, cgroup_parent=ctrd.pod_cgroup_parent(uid),
                      resources=Resources.kubelet("1", "1", "256Mi"))
    resources = Resources.kubelet("500m", "500m", "64Mi", cpuset_cpus=str(PIN_CPU))
    container = cri.run_container(pod, "work", command=["/bin/sh", "-c", "sleep 3600"], resources=resources)
    return pod, container


def test_cri_version_status_and_images(containerd: Containerd, cri: CRI) -> None:
    version = cri.version()
    assert version.runtime_name == "containerd"
    assert version.runtime_version.removeprefix("v").startswith(f"{containerd.flavour.name}.")
    assert version.api_version == "v1"
    assert re.search(rf" v?{re.escape(containerd.flavour.name)}\.", containerd.versions["containerd"])
    assert containerd.versions["runc"].startswith("runc version ")
    status = cri.status()
    assert (status["RuntimeReady"], status["NetworkReady"]) == (True, False), "no CNI: host-network pods only"
    assert {PAUSE_IMAGE, BUSYBOX_IMAGE} <= set(cri.image_tags())


def test_container_resources_reach_cgroupfs(containerd: Containerd, cri: CRI) -> None:
    pod, container = _run_pinned_pod(containerd, cri)
    info = cri.container_status(container)
    assert info.state == "CONTAINER_RUNNING"
    assert info.pid > 0
    assert info.cgroups_path.startswith(containerd.cgroup_root + "/kubepods/pod")
    assert info.cgroups_path.endswith("/" + container)
    assert info.resources == Resources(cpu_shares=512, cpu_quota=50_000, cpu_period=100_000,
                                       memory_limit=64 * MiB, cpuset_cpus=str(PIN_CPU))
    values = cgroupfs.read_cgroup(info.cgroups_path)
    assert (values.cpus, values.effective_cpus) == (str(PIN_CPU), str(PIN_CPU))
    assert (values.cpu_quota_us, values.cpu_period_us) == (50_000, 100_000)
    assert values.memory_limit == 64 * MiB
    if values.version == 1:
        assert values.cpu_shares == 512
    assert cgroupfs.cpus_allowed_list(info.pid) == str(PIN_CPU)
    assert [p.id for p in cri.list_pods()] == [pod]
    listed = [(c.id, c.name, c.state) for c in cri.list_containers(pod)]
    assert listed == [(container, "work", "CONTAINER_RUNNING")]


def test_exec_sync_runs_inside_the_container(containerd: Containerd, cri: CRI) -> None:
    _, container = _run_pinned_pod(containerd, cri)
    status = cri.exec_sync(container, ["cat", "/proc/self/status"])
    assert status.exit_code == 0
    assert f"Cpus_allowed_list:\t{PIN_CPU}" in status.stdout.splitlines()
    failing = cri.exec_sync(container, ["sh", "-c", "echo oops >&2; exit 3"])
    assert (failing.exit_code, failing.stderr) == (3, "oops\n")


def test_update_container_resources_reaches_the_live_cgroup(containerd: Containerd, cri: CRI) -> None:
    _, container = _run_pinned_pod(containerd, cri)
    cri.update_container_resources(container, Resources.kubelet("250m", "250m", "96Mi", cpuset_cpus="0"))
    info = cri.container_status(container)
    values = cgroupfs.read_cgroup(info.cgroups_path)
    assert (values.cpus, values.cpu_quota_us, values.memory_limit) == ("0", 25_000, 96 * MiB)
    assert cgroupfs.cpus_allowed_list(info.pid) == "0"
    assert info.resources.cpuset_cpus == "0"


def test_restart_keeps_containers_and_stop_leaves_nothing(containerd_flavour: str,
                                                          tmp_path_factory: pytest.TempPathFactory) -> None:
    with Containerd(containerd_flavour, tmp_path_factory.mktemp("restart")) as ctrd:
        with ctrd.cri() as cri:
            _, container = _run_pinned_pod(ctrd, cri)
            before = cri.container_status(container)
            old_pid = ctrd.pid
            assert old_pid is not None
            ctrd.restart()
            assert ctrd.pid not in (None, old_pid)
            assert not _running(old_pid)
            after = cri.container_status(container)
            assert (after.state, after.pid) == ("CONTAINER_RUNNING", before.pid)
            assert cri.exec_sync(container, ["true"]).exit_code == 0
        processes = [ctrd.pid, *ctrd.shim_pids(), *ctrd.runc_containers().values()]
        sockets = ctrd.shim_sockets()
        assert len(processes) >= 4 and sockets and all(s.exists() for s in sockets)
        ctrd.stop()
        assert [pid for pid in processes if pid and _running(pid)] == []
        assert _mounted_under(ctrd.base) == []
        assert _cgroups_under(ctrd.cgroup_root) == []
        assert [s for s in sockets if s.exists()] == []
        assert ctrd.leftovers() == []


def test_stop_cleans_up_after_containerd_crashed(containerd_flavour: str,
                                                 tmp_path_factory: pytest.TempPathFactory) -> None:
    with Containerd(containerd_flavour, tmp_path_factory.mktemp("crash")) as ctrd:
        with ctrd.cri() as cri:
            _run_pinned_pod(ctrd, cri)
        processes = [*ctrd.shim_pids(), *ctrd.runc_containers().values()]
        sockets = ctrd.shim_sockets()
        crashed = ctrd.pid
        assert crashed is not None
        os.kill(crashed, signal.SIGKILL)
        wait_until(lambda: not ctrd.running, 10, "containerd gone after SIGKILL")
        assert all(_running(pid) for pid in processes), "containers outlive containerd"
        ctrd.stop()
        assert [pid for pid in [crashed, *processes] if _running(pid)] == []
        assert _mounted_under(ctrd.base) == []
        assert _cgroups_under(ctrd.cgroup_root) == []
        assert [s for s in sockets if s.exists()] == []
