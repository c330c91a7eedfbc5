"""Pod cgroup paths from sandbox data on fake v1 and v2 roots: both drivers, fallbacks, every escape."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podlevel.cgroups.paths import (
    Driver,
    NoCgroupHierarchy,
    UnsafeCgroupPath,
    cgroup_version,
    find_pod_cgroup,
    kubelet_cgroup_parent,
    locate_cgroup,
    locate_pod_cgroup,
)

UID = "6f1c2a4e-9b0d-4e57-8a3b-2c1d0e9f8a7b"
UID_ = UID.replace("-", "_")
SYSTEMD_POD = f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice"


def v2_root(tmp_path: Path) -> Path:
    root = tmp_path / "v2"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu memory\n")
    return root


def v1_root(tmp_path: Path, cpu_hierarchy: str = "cpu,cpuacct") -> Path:
    root = tmp_path / "v1"
    (root / "cpuset").mkdir(parents=True)
    (root / "cpuset" / "cpuset.cpus").write_text("0-7\n")
    (root / cpu_hierarchy).mkdir()
    (root / "unified").mkdir()  # the hybrid's empty v2 mount does not make it v2
    return root


@pytest.mark.parametrize(
    ("qos", "driver", "parent", "directory"),
    [
        ("guaranteed", Driver.CGROUPFS, f"/kubepods/pod{UID}", f"kubepods/pod{UID}"),
        ("burstable", Driver.CGROUPFS, f"/kubepods/burstable/pod{UID}", f"kubepods/burstable/pod{UID}"),
        ("besteffort", Driver.CGROUPFS, f"/kubepods/besteffort/pod{UID}", f"kubepods/besteffort/pod{UID}"),
        ("guaranteed", Driver.SYSTEMD, f"kubepods-pod{UID_}.slice",
         f"kubepods.slice/kubepods-pod{UID_}.slice"),
        ("burstable", Driver.SYSTEMD, f"kubepods-burstable-pod{UID_}.slice", SYSTEMD_POD),
        ("besteffort", Driver.SYSTEMD, f"kubepods-besteffort-pod{UID_}.slice",
         f"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice"),
    ],
)
def test_v2_puts_the_kubelet_pod_cgroup_directly_under_the_root(
    tmp_path: Path, qos: str, driver: Driver, parent: str, directory: str
) -> None:
    assert kubelet_cgroup_parent(UID, qos, driver) == parent
    root = v2_root(tmp_path)
    pod = locate_pod_cgroup(pod_uid=UID, cgroup_parent=parent, cgroup_root=root)
    assert pod.version == 2
    assert pod.cpuset_dir == pod.cpu_dir == root / directory
    assert pod.path == "/" + directory


def test_kubelet_cgroup_parent_refuses_an_unknown_qos_class() -> None:
    with pytest.raises(ValueError, match="QoS class"):
        kubelet_cgroup_parent(UID, "gold", Driver.CGROUPFS)


@pytest.mark.parametrize("cpu_hierarchy", ["cpu,cpuacct", "cpu"])
@pytest.mark.parametrize("driver", list(Driver))
def test_v1_has_one_hierarchy_per_controller(tmp_path: Path, cpu_hierarchy: str, driver: Driver) -> None:
    root = v1_root(tmp_path, cpu_hierarchy)
    pod = locate_pod_cgroup(
        pod_uid=UID, cgroup_parent=kubelet_cgroup_parent(UID, "burstable", driver), cgroup_root=root
    )
    directory = f"kubepods/burstable/pod{UID}" if driver is Driver.CGROUPFS else SYSTEMD_POD
    assert pod.version == 1
    assert pod.cpuset_dir == root / "cpuset" / directory
    assert pod.cpu_dir == root / cpu_hierarchy / directory


def test_the_root_decides_the_version(tmp_path: Path) -> None:
    assert cgroup_version(v2_root(tmp_path)) == 2
    assert cgroup_version(v1_root(tmp_path)) == 1
    with pytest.raises(NoCgroupHierarchy):
        cgroup_version(tmp_path)


@pytest.mark.parametrize(
    ("cgroups_path", "directory"),
    [
        (f"/kubepods/burstable/pod{UID}/0123abcd", f"kubepods/burstable/pod{UID}"),
        (f"kubepods-burstable-pod{UID_}.slice:cri-containerd:0123abcd", SYSTEMD_POD),
    ],
    ids=["cgroupfs", "systemd"],
)
def test_without_a_cgroup_parent_the_sandbox_cgroups_path_names_the_pod(
    tmp_path: Path, cgroups_path: str, directory: str
) -> None:
    root = v2_root(tmp_path)
    pod = locate_pod_cgroup(pod_uid=UID, cgroups_path=cgroups_path, cgroup_root=root)
    assert pod.cpuset_dir == root / directory


def test_a_test_bed_parent_below_its_own_top_cgroup(tmp_path: Path) -> None:
    root = v1_root(tmp_path)
    pod = locate_pod_cgroup(
        pod_uid=UID, cgroup_parent=f"/nri-podlevel-test-1a2b.slice/kubepods/pod{UID}", cgroup_root=root
    )
    assert pod.cpuset_dir == root / "cpuset" / f"nri-podlevel-test-1a2b.slice/kubepods/pod{UID}"


def test_an_absolute_parent_stays_under_the_root(tmp_path: Path) -> None:
    """`Path(root) / "/etc"` would be /etc; a cgroup path is always relative to its hierarchy."""
    root = v2_root(tmp_path)
    pod = locate_pod_cgroup(pod_uid=UID, cgroup_parent=f"//etc/./pod{UID}", cgroup_root=root)
    assert pod.cpuset_dir == root / "etc" / f"pod{UID}"


@pytest.mark.parametrize(
    ("parent", "rule"),
    [
        (f"/kubepods/../../../etc/pod{UID}", "'..' component"),
        (f"/kubepods/burstable/pod{UID}/..", "'..' component"),
        (f"../pod{UID}", "'..' component"),
        (f"/kubepods/pod{UID}\x00", "NUL byte"),
        (f"/kubepods/pod{UID}\n/kubepods", "line break"),
        (f"/kubepods/pod{UID}\r", "line break"),
        (f"/kubepods/\tpod{UID}", "control character"),
        ("/kubepods/burstable", "does not name pod"),
        ("/", "does not name pod"),
        (f"/kubepods/pod{UID}/sandbox", "does not name pod"),
        ("/kubepods/podsomeone-else", "does not name pod"),
        (f"kubepods--pod{UID_}.slice", "empty dash-separated part"),
        (f"-kubepods-pod{UID_}.slice", "empty dash-separated part"),
        ("-.slice", "does not name pod"),
        ("kubepods-burstable.slice", "does not name pod"),
    ],
)
def test_crafted_parents_are_refused_naming_value_and_rule(tmp_path: Path, parent: str, rule: str) -> None:
    with pytest.raises(UnsafeCgroupPath, match=rule) as refused:
        locate_pod_cgroup(pod_uid=UID, cgroup_parent=parent, cgroup_root=v2_root(tmp_path))
    assert refused.value.value == parent
    assert rule in refused.value.rule


@pytest.mark.parametrize(
    ("uid", "rule"),
    [
        ("", "must not be empty"),
        ("a/b", "may only contain"),
        ("a b", "may only contain"),
        ("pod\u00fc", "may only contain"),
        ("x\x00", "NUL byte"),
        ("x\ny", "line break"),
        ("*", "may only contain"),
    ],
)
def test_odd_uids_are_refused(tmp_path: Path, uid: str, rule: str) -> None:
    with pytest.raises(UnsafeCgroupPath, match=rule) as refused:
        locate_pod_cgroup(pod_uid=uid, cgroup_parent=f"/kubepods/pod{uid}", cgroup_root=v2_root(tmp_path))
    assert refused.value.what == "pod UID"


@pytest.mark.parametrize("uid", ["..", ".", "a.b_c-d", "0" * 32])
def test_odd_but_harmless_uids_stay_one_directory_under_the_root(tmp_path: Path, uid: str) -> None:
    root = v2_root(tmp_path)
    pod = locate_pod_cgroup(pod_uid=uid, cgroup_parent=f"/kubepods/pod{uid}", cgroup_root=root)
    assert pod.cpuset_dir == root / "kubepods" / f"pod{uid}"
    systemd = locate_pod_cgroup(
        pod_uid=uid, cgroup_parent=kubelet_cgroup_parent(uid, "guaranteed", Driver.SYSTEMD), cgroup_root=root
    )
    assert systemd.cpuset_dir.parent == root / "kubepods.slice"


def test_a_sandbox_without_cgroup_data_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UnsafeCgroupPath, match="neither a cgroup parent nor a cgroups path"):
        locate_pod_cgroup(pod_uid=UID, cgroup_root=v2_root(tmp_path))


@pytest.mark.parametrize(
    "cgroups_path",
    [
        f"kubepods-pod{UID_}.slice:cri-containerd:../x",
        f"kubepods-pod{UID_}.slice:cri/containerd:x",
        f"kubepods-pod{UID_}.slice:cri-containerd:",
        f"kubepods/pod{UID_}.slice:cri-containerd:x",
    ],
)
def test_crafted_systemd_cgroups_paths_are_refused(tmp_path: Path, cgroups_path: str) -> None:
    with pytest.raises(UnsafeCgroupPath):
        locate_pod_cgroup(pod_uid=UID, cgroups_path=cgroups_path, cgroup_root=v2_root(tmp_path))


def test_a_symlink_out_of_the_root_is_refused(tmp_path: Path) -> None:
    root = v2_root(tmp_path)
    outside = tmp_path / "outside"
    (outside / f"pod{UID}").mkdir(parents=True)
    (root / "kubepods").symlink_to(outside)
    with pytest.raises(UnsafeCgroupPath, match="outside") as refused:
        locate_pod_cgroup(pod_uid=UID, cgroup_parent=f"/kubepods/pod{UID}", cgroup_root=root)
    assert refused.value.value == f"/kubepods/pod{UID}"


def test_a_symlink_to_an_absolute_path_is_refused(tmp_path: Path) -> None:
    root = v2_root(tmp_path)
    (root / "kubepods").mkdir()
    (root / "kubepods" / f"pod{UID}").symlink_to("/etc")
    with pytest.raises(UnsafeCgroupPath, match="outside"):
        locate_pod_cgroup(pod_uid=UID, cgroup_parent=f"/kubepods/pod{UID}", cgroup_root=root)


def test_v1_a_symlink_from_the_cpuset_hierarchy_into_another_is_refused(tmp_path: Path) -> None:
    root = v1_root(tmp_path)
    (root / "cpu,cpuacct" / "kubepods").mkdir()
    (root / "cpuset" / "kubepods").symlink_to(root / "cpu,cpuacct" / "kubepods")
    with pytest.raises(UnsafeCgroupPath, match="outside"):
        locate_pod_cgroup(pod_uid=UID, cgroup_parent=f"/kubepods/pod{UID}", cgroup_root=root)


def test_a_symlink_that_stays_inside_is_followed(tmp_path: Path) -> None:
    root = v2_root(tmp_path)
    (root / "real" / f"pod{UID}").mkdir(parents=True)
    (root / "kubepods").symlink_to(root / "real")
    pod = locate_pod_cgroup(pod_uid=UID, cgroup_parent=f"/kubepods/pod{UID}", cgroup_root=root)
    assert pod.cpuset_dir == root / "real" / f"pod{UID}"


@pytest.mark.parametrize("driver", list(Driver))
def test_container_cgroups_lie_below_the_pod(tmp_path: Path, driver: Driver) -> None:
    root = v2_root(tmp_path)
    parent = kubelet_cgroup_parent(UID, "burstable", driver)
    pod = locate_pod_cgroup(pod_uid=UID, cgroup_parent=parent, cgroup_root=root)
    if driver is Driver.CGROUPFS:
        own, other = f"{parent}/abc123", "/kubepods/burstable/podother/abc123"
        expected = pod.cpuset_dir / "abc123"
    else:
        own = f"{parent}:cri-containerd:abc123"
        other = "kubepods-burstable-podother.slice:cri-containerd:abc123"
        expected = pod.cpuset_dir / "cri-containerd-abc123.scope"
    assert pod.container_cpuset_dir(own) == expected
    with pytest.raises(UnsafeCgroupPath, match="not below the pod cgroup"):
        pod.container_cpuset_dir(other)
    with pytest.raises(UnsafeCgroupPath, match="not below the pod cgroup"):
        pod.container_cpuset_dir(pod.path)


@pytest.mark.parametrize(
    ("container", "rule"),
    [
        (f"/kubepods/pod{UID}/../pod{UID}/x", "'..' component"),
        (f"/kubepods/pod{UID}/x\ny", "line break"),
        (f"/kubepods/pod{UID}/x\x00", "NUL byte"),
    ],
)
def test_crafted_container_paths_are_refused(tmp_path: Path, container: str, rule: str) -> None:
    pod = locate_pod_cgroup(pod_uid=UID, cgroup_parent=f"/kubepods/pod{UID}", cgroup_root=v2_root(tmp_path))
    with pytest.raises(UnsafeCgroupPath, match=rule):
        pod.container_cpuset_dir(container)


def test_a_container_cgroup_symlinked_out_of_the_pod_is_refused(tmp_path: Path) -> None:
    root = v2_root(tmp_path)
    pod = locate_pod_cgroup(pod_uid=UID, cgroup_parent=f"/kubepods/pod{UID}", cgroup_root=root)
    pod.cpuset_dir.mkdir(parents=True)
    (root / "elsewhere").mkdir()
    (pod.cpuset_dir / "abc").symlink_to(root / "elsewhere")
    with pytest.raises(UnsafeCgroupPath, match="outside the pod"):
        pod.container_cpuset_dir(f"/kubepods/pod{UID}/abc")


@pytest.mark.parametrize(
    ("cgroups_path", "directory"),
    [
        (f"/kubepods/pod{UID}/abc123", f"kubepods/pod{UID}/abc123"),
        (f"kubepods-burstable-pod{UID_}.slice:cri-containerd:abc123",
         f"{SYSTEMD_POD}/cri-containerd-abc123.scope"),
    ],
)
def test_any_cgroup_is_located_from_a_container_cgroups_path(
    tmp_path: Path, cgroups_path: str, directory: str
) -> None:
    v1 = locate_cgroup(cgroups_path, v1_root(tmp_path))
    assert (v1.version, v1.cpuset_dir, v1.cpu_dir) == (
        1, tmp_path / "v1" / "cpuset" / directory, tmp_path / "v1" / "cpu,cpuacct" / directory)
    v2 = locate_cgroup(cgroups_path, v2_root(tmp_path))
    assert v2.version == 2 and v2.cpuset_dir == v2.cpu_dir == tmp_path / "v2" / directory


@pytest.mark.parametrize("cgroups_path", ["/", "/a/../../etc", "a\nb"])
def test_a_cgroups_path_that_leaves_the_hierarchy_is_refused(tmp_path: Path, cgroups_path: str) -> None:
    with pytest.raises(UnsafeCgroupPath):
        locate_cgroup(cgroups_path, v2_root(tmp_path))


def test_a_pod_cgroup_is_found_by_its_uid_alone(tmp_path: Path) -> None:
    root = v1_root(tmp_path)
    assert find_pod_cgroup(UID, root) is None
    (root / "cpuset" / "test.slice" / "kubepods" / "burstable" / f"pod{UID}" / "ctr").mkdir(parents=True)
    found = find_pod_cgroup(UID, root)
    assert found is not None and found.path == f"/test.slice/kubepods/burstable/pod{UID}"
    v2 = v2_root(tmp_path)
    (v2 / SYSTEMD_POD).mkdir(parents=True)
    systemd = find_pod_cgroup(UID, v2)
    assert systemd is not None and systemd.cpuset_dir == v2 / SYSTEMD_POD


# Path pieces a runtime (or a pod that names its own cgroup parent) could send, and a symlink out of the tree.
PIECES = ["", ".", "..", "kubepods", f"pod{UID}", "escape", "escape/..", "a\x00b", "a\nb", "\x1b", "~", " "]


@settings(deadline=None, max_examples=150)
@given(
    st.lists(st.sampled_from(PIECES), max_size=6).map("/".join),
    st.sampled_from(["", "/", f"kubepods-burstable-pod{UID_}.slice:cri-containerd:"]),
)
def test_every_cgroup_path_from_runtime_data_stays_under_its_root(
    tmp_path_factory: pytest.TempPathFactory, path: str, prefix: str
) -> None:
    tmp_path = tmp_path_factory.mktemp("root")
    outside = tmp_path / "outside"
    outside.mkdir()
    for root in (v1_root(tmp_path), v2_root(tmp_path)):
        bases = [root / "cpuset", root / "cpu,cpuacct"] if (root / "cpuset").is_dir() else [root]
        for base in bases:
            (base / "kubepods" / f"pod{UID}").mkdir(parents=True)
            (base / "kubepods" / f"pod{UID}" / "escape").symlink_to(outside)
        value = prefix + path
        located = []
        with contextlib.suppress(UnsafeCgroupPath):
            found = locate_cgroup(value, root)
            located += [found.cpuset_dir, found.cpu_dir]
        with contextlib.suppress(UnsafeCgroupPath):
            pod = locate_pod_cgroup(pod_uid=UID, cgroup_parent=value, cgroup_root=root)
            located += [pod.cpuset_dir, pod.cpu_dir]
            with contextlib.suppress(UnsafeCgroupPath):
                located.append(pod.container_cpuset_dir(value + "/ctr"))
        for directory in located:
            assert any(base.resolve() in directory.parents for base in bases), (value, directory)
            assert outside not in directory.parents and directory != outside
