"""Pod bubble and CFS quota writes on fake v1 and v2 trees.

`StrictV1Files` refuses cpuset writes the way cgroup v1 does (EINVAL for a child outside its parent, EBUSY for
a parent that would leave a child outside it), so every ordering test also proves no step would be refused.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from podlevel.cgroups.paths import PodCgroup, UnsafeCgroupPath, locate_cgroup, locate_pod_cgroup
from podlevel.cgroups.pod_cgroup import (
    CgroupFiles,
    CgroupReadError,
    CgroupWriteError,
    Cpuset,
    CpusetNode,
    cpu_max_file,
    plan_cpuset_writes,
    read_configured,
    read_cpu_max,
    read_effective,
    write_bubble,
    write_cpu_max,
)
from podlevel.engine.cpuset import CPUSet

UID = "0e5a"
POD = f"kubepods/burstable/pod{UID}"
V1_FILES = ("cpuset.cpus", "cpuset.mems", "cpuset.effective_cpus", "cpuset.effective_mems")
V2_FILES = ("cpuset.cpus", "cpuset.mems", "cpuset.cpus.effective", "cpuset.mems.effective")
EFFECTIVE = {"cpuset.cpus": ("cpuset.effective_cpus", "cpuset.cpus.effective"),
             "cpuset.mems": ("cpuset.effective_mems", "cpuset.mems.effective")}


def cs(cpus: str, mems: str = "0") -> Cpuset:
    return Cpuset(CPUSet.parse(cpus), CPUSet.parse(mems))


class RecordingFiles(CgroupFiles):
    """Real file I/O on the fake tree, recording `(directory relative to the hierarchy, file, value)`."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.writes: list[tuple[str, str, str]] = []

    def write(self, path: Path, value: str) -> None:
        self.check(path, value)
        super().write(path, value)
        self.writes.append((str(path.parent.relative_to(self.base)), path.name, value))
        for effective in EFFECTIVE.get(path.name, ()):
            if (path.parent / effective).exists():
                (path.parent / effective).write_text(value + "\n")

    def check(self, path: Path, value: str) -> None:
        """Accept everything, as cgroup v2 does."""


class StrictV1Files(RecordingFiles):
    def check(self, path: Path, value: str) -> None:
        if path.name not in ("cpuset.cpus", "cpuset.mems"):
            return
        new = CPUSet.parse(value)
        parent = path.parent.parent / path.name
        if parent.exists() and not new.is_subset(CPUSet.parse(parent.read_text())):
            raise CgroupWriteError(path, errno.EINVAL, value)
        for child in (c / path.name for c in path.parent.iterdir()):
            if child.exists() and not CPUSet.parse(child.read_text()).is_subset(new):
                raise CgroupWriteError(path, errno.EBUSY, value)


def make_cgroup(directory: Path, names: tuple[str, ...], value: Cpuset | None) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    cpus, mems = ("", "") if value is None else (str(value.cpus), str(value.mems))
    for name, text in zip(names, (cpus, mems, cpus, mems), strict=True):
        (directory / name).write_text(text + "\n")


def v1_tree(tmp_path: Path, pod: Cpuset, containers: dict[str, Cpuset]) -> tuple[PodCgroup, StrictV1Files]:
    root = tmp_path / "v1"
    base = root / "cpuset"
    whole = cs("0-7", "0-1")
    make_cgroup(base, V1_FILES, whole)
    for level in ("kubepods", "kubepods/burstable"):
        make_cgroup(base / level, V1_FILES, whole)
    make_cgroup(base / POD, V1_FILES, pod)
    for name, value in containers.items():
        make_cgroup(base / POD / name, V1_FILES, value)
    (root / "cpu,cpuacct" / POD).mkdir(parents=True)
    return locate_pod_cgroup(pod_uid=UID, cgroup_parent="/" + POD, cgroup_root=root), StrictV1Files(base)


def v2_tree(
    tmp_path: Path, pod: Cpuset | None, containers: dict[str, Cpuset | None]
) -> tuple[PodCgroup, RecordingFiles]:
    root = tmp_path / "v2"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu memory\n")
    make_cgroup(root / POD, V2_FILES, pod)
    if pod is None:  # an empty cpuset inherits: the effective files show the parent's
        (root / POD / "cpuset.cpus.effective").write_text("0-7\n")
        (root / POD / "cpuset.mems.effective").write_text("0-1\n")
    for name, value in containers.items():
        make_cgroup(root / POD / name, V2_FILES, value)
    return locate_pod_cgroup(pod_uid=UID, cgroup_parent="/" + POD, cgroup_root=root), RecordingFiles(root)


def test_the_fake_refuses_what_v1_refuses(tmp_path: Path) -> None:
    pod, files = v1_tree(tmp_path, cs("0-7"), {"ctr": cs("4-7")})
    with pytest.raises(CgroupWriteError) as busy:
        files.write(pod.cpuset_dir / "cpuset.cpus", "0-3")  # parent first: the child would be outside
    assert busy.value.errno == errno.EBUSY
    files.write(pod.cpuset_dir / "ctr" / "cpuset.cpus", "0-3")
    with pytest.raises(CgroupWriteError) as invalid:
        files.write(pod.cpuset_dir / "ctr" / "cpuset.cpus", "0-7,9")  # a child beyond its parent
    assert invalid.value.errno == errno.EINVAL


def test_v1_shrinking_writes_the_children_before_the_pod(tmp_path: Path) -> None:
    pod, files = v1_tree(tmp_path, cs("0-7"), {"a": cs("0-7"), "b": cs("4-5"), "c": cs("1,6")})
    effective = write_bubble(pod, cs("0-3"), files=files)
    assert effective == cs("0-3")
    # a keeps what lies inside, b had nothing inside so gets the whole bubble, c keeps CPU 1
    assert files.writes == [
        (f"{POD}/a", "cpuset.cpus", "0-3"),
        (f"{POD}/b", "cpuset.cpus", "0-3"),
        (f"{POD}/c", "cpuset.cpus", "1"),
        (POD, "cpuset.cpus", "0-3"),
    ]
    assert read_effective(pod.cpuset_dir / "c", 1) == cs("1")


def test_v1_widening_writes_the_pod_before_the_children(tmp_path: Path) -> None:
    pod, files = v1_tree(tmp_path, cs("0-3"), {"a": cs("0-1"), "b": cs("2-3")})
    containers = {f"/{POD}/a": cs("0-1,6-7")}
    assert write_bubble(pod, cs("0-7"), containers, files=files) == cs("0-7")
    assert files.writes == [(POD, "cpuset.cpus", "0-7"), (f"{POD}/a", "cpuset.cpus", "0-1,6-7")]


def test_v1_both_widens_to_the_union_then_children_then_shrinks(tmp_path: Path) -> None:
    pod, files = v1_tree(tmp_path, cs("0-3", "0"), {"a": cs("0-1", "0"), "b": cs("2-3", "0")})
    containers = {f"/{POD}/a": cs("4-5", "1")}
    assert write_bubble(pod, cs("2-5", "1"), containers, files=files) == cs("2-5", "1")
    assert files.writes == [
        (POD, "cpuset.cpus", "0-5"),
        (POD, "cpuset.mems", "0-1"),
        (f"{POD}/a", "cpuset.cpus", "4-5"),
        (f"{POD}/a", "cpuset.mems", "1"),
        (f"{POD}/b", "cpuset.mems", "1"),  # b keeps its CPUs 2-3; its node 0 left the bubble
        (POD, "cpuset.cpus", "2-5"),
        (POD, "cpuset.mems", "1"),
    ]


def test_v1_a_cgroup_below_a_container_shrinks_first_and_widens_last(tmp_path: Path) -> None:
    pod, files = v1_tree(tmp_path, cs("0-3"), {"a": cs("0-3"), "a/inner": cs("2-3")})
    write_bubble(pod, cs("4-7"), files=files)
    assert files.writes == [
        (POD, "cpuset.cpus", "0-7"),
        (f"{POD}/a", "cpuset.cpus", "0-7"),
        (f"{POD}/a/inner", "cpuset.cpus", "4-7"),
        (f"{POD}/a", "cpuset.cpus", "4-7"),
        (POD, "cpuset.cpus", "4-7"),
    ]


def test_nothing_to_change_writes_nothing(tmp_path: Path) -> None:
    pod, files = v1_tree(tmp_path, cs("0-3"), {"a": cs("1")})
    assert write_bubble(pod, cs("0-3"), files=files) == cs("0-3")
    assert files.writes == []


def test_v2_same_order_and_inherit_is_left_alone(tmp_path: Path) -> None:
    pod, files = v2_tree(tmp_path, None, {"sandbox": None, "a": cs("0-7")})
    assert write_bubble(pod, cs("0-3", "1"), files=files) == cs("0-3", "1")
    assert files.writes == [
        (f"{POD}/a", "cpuset.cpus", "0-3"),
        (f"{POD}/a", "cpuset.mems", "1"),
        (POD, "cpuset.cpus", "0-3"),
        (POD, "cpuset.mems", "1"),
    ]
    assert (pod.cpuset_dir / "sandbox" / "cpuset.cpus").read_text().strip() == ""


def test_v2_a_named_target_is_written_although_the_cgroup_inherits_it(tmp_path: Path) -> None:
    pod, files = v2_tree(tmp_path, cs("0-3", "1"), {"ctr": None})
    write_bubble(pod, cs("0-3", "1"), {f"/{POD}/ctr": cs("2", "1")}, files=files)
    assert files.writes == [(f"{POD}/ctr", "cpuset.cpus", "2"), (f"{POD}/ctr", "cpuset.mems", "1")]


def test_v2_a_cgroup_without_the_cpuset_controller_is_skipped(tmp_path: Path) -> None:
    pod, files = v2_tree(tmp_path, cs("0-7"), {})
    (pod.cpuset_dir / "bare").mkdir()
    (pod.cpuset_dir / "cgroup.procs").write_text("")
    write_bubble(pod, cs("0-3"), files=files)
    assert files.writes == [(POD, "cpuset.cpus", "0-3")]


def test_container_targets_must_lie_in_the_bubble_and_below_the_pod(tmp_path: Path) -> None:
    pod, files = v1_tree(tmp_path, cs("0-3"), {"a": cs("0-1")})
    with pytest.raises(ValueError, match="outside the bubble"):
        write_bubble(pod, cs("0-3"), {f"/{POD}/a": cs("4")}, files=files)
    with pytest.raises(UnsafeCgroupPath, match="not below the pod cgroup"):
        write_bubble(pod, cs("0-3"), {"/kubepods/besteffort/podx/a": cs("1")}, files=files)
    with pytest.raises(ValueError, match="needs CPUs and memory nodes"):
        write_bubble(pod, cs(""), files=files)
    assert files.writes == []


def test_a_container_not_created_yet_is_skipped(tmp_path: Path) -> None:
    pod, files = v1_tree(tmp_path, cs("0-3"), {})
    write_bubble(pod, cs("0-1"), {f"/{POD}/later": cs("0")}, files=files)
    assert files.writes == [(POD, "cpuset.cpus", "0-1")]


def test_a_symlinked_child_is_refused(tmp_path: Path) -> None:
    pod, files = v1_tree(tmp_path, cs("0-3"), {})
    (pod.cpuset_dir / "evil").symlink_to(tmp_path)
    with pytest.raises(UnsafeCgroupPath, match="is a symlink"):
        write_bubble(pod, cs("0-1"), files=files)
    assert files.writes == []


def test_a_missing_pod_cgroup_is_a_read_error_with_path_and_errno(tmp_path: Path) -> None:
    root = tmp_path / "v2"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset\n")
    pod = locate_pod_cgroup(pod_uid=UID, cgroup_parent="/" + POD, cgroup_root=root)
    with pytest.raises(CgroupReadError) as missing:
        write_bubble(pod, cs("0"))
    assert missing.value.errno == errno.ENOENT
    assert missing.value.path.parent == pod.cpuset_dir


def test_a_failed_step_raises_with_path_and_errno_and_stops(tmp_path: Path) -> None:
    pod, _ = v1_tree(tmp_path, cs("0-7"), {"a": cs("0-7")})

    class Refusing(StrictV1Files):
        def check(self, path: Path, value: str) -> None:
            if path.parent.name == "a":
                raise CgroupWriteError(path, errno.EACCES, value)

    files = Refusing(pod.cpuset_base)
    with pytest.raises(CgroupWriteError) as refused:
        write_bubble(pod, cs("0-3"), files=files)
    assert (refused.value.path, refused.value.errno, refused.value.value) == (
        pod.cpuset_dir / "a" / "cpuset.cpus", errno.EACCES, "0-3")
    assert "Permission denied" in str(refused.value)
    assert files.writes == []  # the pod was not shrunk below a child that kept its set


def test_the_real_writer_reports_errno_of_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(CgroupWriteError) as missing:
        CgroupFiles().write(tmp_path / "cpuset.cpus", "0")
    assert missing.value.errno == errno.ENOENT
    assert not (tmp_path / "cpuset.cpus").exists()  # never created


def _v2_cpu(tmp_path: Path) -> PodCgroup:
    pod, _ = v2_tree(tmp_path, cs("0-1"), {})
    (pod.cpu_dir / "cpu.max").write_text("200000 100000\n")
    return pod


@pytest.mark.parametrize(("quota", "period", "written"), [
    (None, 100_000, "max 100000"), (50_000, 100_000, "50000 100000"), (None, 50_000, "max 50000"),
])
def test_v2_cpu_max(tmp_path: Path, quota: int | None, period: int, written: str) -> None:
    pod = _v2_cpu(tmp_path)
    write_cpu_max(pod, quota, period)
    assert (pod.cpu_dir / "cpu.max").read_text() == written
    assert read_cpu_max(pod) == (quota, period)


def _v1_cpu(tmp_path: Path) -> PodCgroup:
    pod, _ = v1_tree(tmp_path, cs("0-1"), {})
    (pod.cpu_dir / "cpu.cfs_quota_us").write_text("200000\n")
    (pod.cpu_dir / "cpu.cfs_period_us").write_text("100000\n")
    return pod


def test_v1_unlimited_writes_the_quota_first(tmp_path: Path) -> None:
    pod = _v1_cpu(tmp_path)
    files = RecordingFiles(pod.cpu_base)
    write_cpu_max(pod, None, files=files)
    assert [(name, value) for _, name, value in files.writes] == [
        ("cpu.cfs_quota_us", "-1"), ("cpu.cfs_period_us", "100000")]
    assert read_cpu_max(pod) == (None, 100_000)


def test_v1_a_limit_writes_the_period_first_and_the_quota_first_when_refused(tmp_path: Path) -> None:
    pod = _v1_cpu(tmp_path)
    files = RecordingFiles(pod.cpu_base)
    write_cpu_max(pod, 30_000, 100_000, files=files)
    assert [name for _, name, _ in files.writes] == ["cpu.cfs_period_us", "cpu.cfs_quota_us"]

    class PeriodRefusedOnce(RecordingFiles):
        refused = False

        def check(self, path: Path, value: str) -> None:
            if path.name == "cpu.cfs_period_us" and not self.refused:
                self.refused = True
                raise CgroupWriteError(path, errno.EINVAL, value)

    files = PeriodRefusedOnce(pod.cpu_base)
    write_cpu_max(pod, 20_000, 50_000, files=files)
    assert [(name, value) for _, name, value in files.writes] == [
        ("cpu.cfs_quota_us", "20000"), ("cpu.cfs_period_us", "50000")]
    assert read_cpu_max(pod) == (20_000, 50_000)


@pytest.mark.parametrize(("quota", "period"), [(999, 100_000), (50_000, 999), (50_000, 1_000_001)])
def test_cpu_max_out_of_kernel_range_is_refused_before_writing(
    tmp_path: Path, quota: int, period: int
) -> None:
    pod = _v2_cpu(tmp_path)
    with pytest.raises(ValueError, match="CFS"):
        write_cpu_max(pod, quota, period)
    assert (pod.cpu_dir / "cpu.max").read_text() == "200000 100000\n"


_SETS = st.integers(min_value=1, max_value=255).map(CPUSet.from_mask)


@st.composite
def trees(draw: st.DrawFn) -> CpusetNode:
    """A pod with up to three containers (one maybe with a child), each inside its parent before and after."""

    def node(name: str, parent_current: CPUSet, parent_target: CPUSet, depth: int) -> CpusetNode:
        current = draw(_SETS) & parent_current or parent_current
        target = draw(_SETS) & parent_target or parent_target
        children = [node(f"{name}/{i}", current, target, depth + 1)
                    for i in range(draw(st.integers(0, 3 if depth == 0 else 1 if depth == 1 else 0)))]
        return CpusetNode(Path(name), Cpuset(current, current), Cpuset(target, target), children)

    return node("pod", CPUSet(range(8)), CPUSet(range(8)), 0)


@given(trees())
def test_every_plan_is_accepted_by_v1_rules_and_ends_at_the_targets(tree: CpusetNode) -> None:
    state: dict[Path, Cpuset] = {}
    parent: dict[Path, Path | None] = {}
    children: dict[Path, list[Path]] = {}

    def index(n: CpusetNode, up: Path | None) -> None:
        state[n.directory], parent[n.directory] = n.current, up
        children[n.directory] = [c.directory for c in n.children]
        for c in n.children:
            index(c, n.directory)

    index(tree, None)
    for step in plan_cpuset_writes(tree):
        new = Cpuset(step.cpus if step.cpus is not None else state[step.directory].cpus,
                     step.mems if step.mems is not None else state[step.directory].mems)
        up = parent[step.directory]
        if up is not None:
            assert new.cpus.is_subset(state[up].cpus) and new.mems.is_subset(state[up].mems), step
        for c in children[step.directory]:
            assert state[c].cpus.is_subset(new.cpus) and state[c].mems.is_subset(new.mems), step
        state[step.directory] = new

    def targets(n: CpusetNode) -> None:
        assert state[n.directory] == n.target
        for c in n.children:
            targets(c)

    targets(tree)


def test_a_container_cgroup_reads_back_configured_effective_and_quota(tmp_path: Path) -> None:
    pod, _ = v2_tree(tmp_path, cs("0-3"), {"ctr": None})
    container = pod.cpuset_dir / "ctr"
    (container / "cpuset.cpus.effective").write_text("0-3\n")
    (container / "cpuset.mems.effective").write_text("0\n")
    (container / "cpu.max").write_text("max 100000\n")
    assert read_configured(container, 2) == Cpuset(CPUSet(), CPUSet())
    assert read_effective(container, 2) == cs("0-3")
    ctr = locate_cgroup(f"/{POD}/ctr", tmp_path / "v2")
    assert cpu_max_file(ctr) == container / "cpu.max" and read_cpu_max(ctr) == (None, 100_000)
