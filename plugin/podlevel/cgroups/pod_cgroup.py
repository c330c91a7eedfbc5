"""Write a pod's bubble and CFS quota into its pod cgroup, and read back what the kernel has in force.

NRI adjusts containers only, so the pod cgroup's `cpuset.cpus`/`cpuset.mems` are written here directly.

Order. cgroup v1 refuses a parent's cpuset that would leave a child outside it (EBUSY) and a child's that lies
outside its parent (EINVAL); v2 refuses neither (a child's effective set is clipped instead), but the same
order is kept on both. A write is planned over the pod cgroup and every cgroup below it (the containers'):

1. top down, each cgroup with children is widened to the union of what it has and what it should have, and
   each leaf is written its target (its parent is already wide enough);
2. bottom up, each cgroup with children is shrunk to its target (its children already are).

So a pure widening writes the parent before the children, a pure shrinking the children before the parent,
and a change that does both widens the parent to the union, writes the children, then shrinks the parent. A
container cgroup the caller gives a target for gets exactly that target; any other cgroup below the pod keeps
what it has inside the new bubble (the whole bubble when that is nothing, as v2 does for a disjoint set). On
v2 an empty `cpuset.cpus`/`cpuset.mems` means "the parent's": such a field of a cgroup without a target is
never written, and the pod's own empty field is planned from its `.effective` value. What is in force is
read from the `.effective` files (v1 `cpuset.effective_cpus`/`cpuset.effective_mems`).

Failures. Every read and write is one system call on one file; a failure raises `CgroupWriteError` or
`CgroupReadError` carrying the path and errno, and the steps after it are not made. Every step made leaves
the tree valid, so the caller logs the error once and simply asks again at the next event.

The pod's CFS quota, as the kubelet sets it (kubernetes/kubernetes). `podContainerManagerImpl.EnsureExists`
(`pkg/kubelet/cm/pod_container_manager_linux.go`) creates the pod cgroup once, with the values of
`ResourceConfigForPod` (`pkg/kubelet/cm/helpers_linux.go`). Before that call, when the feature gate
`DisableCPUQuotaWithExclusiveCPUs` is on (beta and on by default since 1.33) and `PodHasExclusiveCPUs`
(`pkg/kubelet/cm/container_manager_linux.go`, through `podHasExclusiveCPUs` and `containerHasExclusiveCPUs` in
`pkg/kubelet/cm/container_manager.go`) says that some init or app container holds exclusive CPUs, it turns off
`enforceCPULimits` for that pod; `ResourceConfigForPod` then gives the quota -1 and keeps the period (the
kubelet's `cpuCFSQuotaPeriod`, 100 ms by default), which the runtime writes as `max <period>` on v2 and
`cpu.cfs_quota_us` -1 on v1. Every pod with exclusive CPUs is Guaranteed, and for Guaranteed pods the
quota and period are always set. Without exclusive CPUs the pod's quota is its CPU limit (`MilliCPUToQuota`).
With the pod-level resource managers (KEP-5526, gate `PodLevelResourceManagers`, 1.36 and 1.37) a container
counts as exclusive only at isolation level `container` (the CPU manager's `GetResourceIsolationLevel`:
an equivalent-Guaranteed container with an integer CPU limit that has its own CPUs); containers of the
pod's shared pool are at level `pod` and keep both their quota and the pod's
(`TestContainerHasExclusiveCPUs` in `pkg/kubelet/cm/container_manager_linux_test.go` pins this). So: when at
least one container of the pod has CPUs of its own, `write_cpu_max(pod, None, period)` does what the kubelet
would have done; otherwise the kubelet's own pod quota is already right and is left alone.
"""

from __future__ import annotations

import errno as errno_codes
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from podlevel.cgroups.paths import Cgroup, CgroupError, PodCgroup, UnsafeCgroupPath, contained
from podlevel.engine.cfs import CFS_PERIOD_US, MIN_CFS_QUOTA_US
from podlevel.engine.cpuset import CPUSet

MAX_CFS_PERIOD_US: Final = 1_000_000
"""The longest CFS period the kernel accepts (1 s); the shortest is `MIN_CFS_QUOTA_US` (1 ms)."""


@dataclass(frozen=True)
class Cpuset:
    """The CPUs and memory nodes of a cgroup's cpuset."""

    cpus: CPUSet
    mems: CPUSet

    def __or__(self, other: Cpuset) -> Cpuset:
        return Cpuset(self.cpus | other.cpus, self.mems | other.mems)

    def __str__(self) -> str:
        return f"cpus {self.cpus or '-'} mems {self.mems or '-'}"


class CgroupIOError(CgroupError):
    """A cgroup file that could not be read or written; `errno` is the system's error number."""

    def __init__(self, operation: str, path: Path, err: int, value: str | None = None) -> None:
        self.operation = operation
        self.path = path
        self.errno = err
        self.value = value
        what = f"writing {value!r} to" if value is not None else "reading"
        super().__init__(f"{what} {path} failed: [Errno {err}] {os.strerror(err)}")


class CgroupWriteError(CgroupIOError):
    def __init__(self, path: Path, err: int, value: str) -> None:
        super().__init__("write", path, err, value)


class CgroupReadError(CgroupIOError):
    def __init__(self, path: Path, err: int) -> None:
        super().__init__("read", path, err)


class CgroupFiles:
    """The only file I/O: one read or write of an existing cgroup file, never creating or following one."""

    def read(self, path: Path) -> str:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as err:
            raise CgroupReadError(path, err.errno or errno_codes.EIO) from err
        try:
            return os.read(fd, 1 << 16).decode().strip()
        except OSError as err:
            raise CgroupReadError(path, err.errno or errno_codes.EIO) from err
        finally:
            os.close(fd)

    def write(self, path: Path, value: str) -> None:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as err:
            raise CgroupWriteError(path, err.errno or errno_codes.EIO, value) from err
        try:
            data = value.encode()
            if os.write(fd, data) != len(data):
                raise CgroupWriteError(path, errno_codes.EIO, value)
        except OSError as err:
            raise CgroupWriteError(path, err.errno or errno_codes.EIO, value) from err
        finally:
            os.close(fd)


FILES: Final = CgroupFiles()


@dataclass(frozen=True)
class CpusetFileNames:
    """The cpuset files of one cgroup version: configured, and in force (`effective_*`)."""

    cpus: str
    mems: str
    effective_cpus: str
    effective_mems: str


_V2: Final = CpusetFileNames("cpuset.cpus", "cpuset.mems", "cpuset.cpus.effective", "cpuset.mems.effective")
_CPUSET_FILES: Final = {
    1: CpusetFileNames("cpuset.cpus", "cpuset.mems", "cpuset.effective_cpus", "cpuset.effective_mems"),
    2: _V2,
}


@dataclass
class CpusetNode:
    """One cgroup of the planned tree: what it has configured and what it should have."""

    directory: Path
    current: Cpuset
    target: Cpuset
    children: list[CpusetNode] = field(default_factory=list)


@dataclass(frozen=True)
class CpusetWrite:
    """One step: the fields to write into one cgroup (None leaves a field alone)."""

    directory: Path
    cpus: CPUSet | None
    mems: CPUSet | None


def _step(directory: Path, have: Cpuset, want: Cpuset) -> CpusetWrite | None:
    if have == want:
        return None
    cpus = want.cpus if want.cpus != have.cpus else None
    return CpusetWrite(directory, cpus, want.mems if want.mems != have.mems else None)


def plan_cpuset_writes(root: CpusetNode) -> list[CpusetWrite]:
    """The writes that take the tree from `current` to `target`, none of them refused (see above)."""
    steps: list[CpusetWrite] = []
    after_widening: dict[Path, Cpuset] = {}

    def widen(node: CpusetNode) -> None:
        want = node.current | node.target if node.children else node.target
        if (step := _step(node.directory, node.current, want)) is not None:
            steps.append(step)
        after_widening[node.directory] = want
        for child in node.children:
            widen(child)

    def shrink(node: CpusetNode) -> None:
        for child in node.children:
            shrink(child)
        if node.children and (step := _step(node.directory, after_widening[node.directory], node.target)):
            steps.append(step)

    widen(root)
    shrink(root)
    return steps


def _inherited(current: CPUSet, parent_target: CPUSet) -> CPUSet:
    """What a cgroup the caller named no target for keeps when its parent becomes `parent_target`."""
    if not current:
        return current
    return (current & parent_target) or parent_target


def _read_configured(
    directory: Path, names: CpusetFileNames, files: CgroupFiles, inherits: Cpuset | None
) -> Cpuset:
    """A cgroup's configured cpuset; with `inherits` (v2), an empty field is what it inherits instead."""
    cpus = CPUSet.parse(files.read(directory / names.cpus))
    mems = CPUSet.parse(files.read(directory / names.mems))
    if inherits is None:
        return Cpuset(cpus, mems)
    return Cpuset(cpus or inherits.cpus, mems or inherits.mems)


def _below(
    directory: Path,
    parent_target: Cpuset,
    targets: Mapping[Path, Cpuset],
    names: CpusetFileNames,
    files: CgroupFiles,
) -> list[CpusetNode]:
    """The cpuset cgroups directly below `directory`, each with its subtree; symlinks are refused."""
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError as err:
        raise CgroupReadError(directory, err.errno or errno_codes.EIO) from err
    nodes: list[CpusetNode] = []
    for entry in entries:
        if entry.is_symlink():
            raise UnsafeCgroupPath("cgroup directory", entry.path, "is a symlink")
        if not entry.is_dir() or not os.path.isfile(os.path.join(entry.path, names.cpus)):
            continue  # a file, or (v2) a cgroup below one that does not hand the cpuset controller down
        child = contained(directory, [entry.name], "cgroup directory", entry.path)
        if child in targets:  # a named target is written unless the cgroup configures exactly that
            current, target = _read_configured(child, names, files, None), targets[child]
        else:
            # on v2 an empty field follows the parent: it is planned as already holding the parent's target
            current = _read_configured(child, names, files, parent_target if names is _V2 else None)
            cpus = _inherited(current.cpus, parent_target.cpus)
            target = Cpuset(cpus, _inherited(current.mems, parent_target.mems))
        nodes.append(CpusetNode(child, current, target, _below(child, target, targets, names, files)))
    return nodes


def cpuset_file_names(version: int) -> CpusetFileNames:
    return _CPUSET_FILES[version]


def read_configured(directory: Path, version: int, files: CgroupFiles = FILES) -> Cpuset:
    """What the cgroup at `directory` configures (on v2 an empty field: it takes its parent's)."""
    return _read_configured(directory, _CPUSET_FILES[version], files, None)


def read_effective(directory: Path, version: int, files: CgroupFiles = FILES) -> Cpuset:
    """What the kernel has in force for the cgroup at `directory` (a pod's `cpuset_dir` or a container's)."""
    names = _CPUSET_FILES[version]
    return Cpuset(
        CPUSet.parse(files.read(directory / names.effective_cpus)),
        CPUSet.parse(files.read(directory / names.effective_mems)),
    )


def write_bubble(
    pod: PodCgroup,
    bubble: Cpuset,
    containers: Mapping[str, Cpuset] | None = None,
    *,
    files: CgroupFiles = FILES,
) -> Cpuset:
    """Give the pod cgroup `bubble` and return the pod's effective cpuset read back afterwards.

    `containers` maps a container's cgroups path (as the runtime reports it) to the cpuset its cgroup must
    have; each must lie inside the bubble, and one whose cgroup does not exist yet is skipped (the runtime
    creates it with its settings). Raises `CgroupWriteError`/`CgroupReadError` (path and errno) on a failed
    step, `UnsafeCgroupPath` for a container path outside the pod.
    """
    if not bubble.cpus or not bubble.mems:
        raise ValueError(f"a pod bubble needs CPUs and memory nodes, got {bubble}")
    targets: dict[Path, Cpuset] = {}
    for cgroups_path, target in (containers or {}).items():
        if not (target.cpus.is_subset(bubble.cpus) and target.mems.is_subset(bubble.mems)):
            raise ValueError(f"container cgroup {cgroups_path!r}: {target} lies outside the bubble {bubble}")
        targets[pod.container_cpuset_dir(cgroups_path)] = target
    names = _CPUSET_FILES[pod.version]
    root = CpusetNode(
        pod.cpuset_dir,
        _read_configured(
            pod.cpuset_dir, names, files, read_effective(pod.cpuset_dir, 2, files) if names is _V2 else None
        ),
        bubble,
        _below(pod.cpuset_dir, bubble, targets, names, files),
    )
    for step in plan_cpuset_writes(root):
        if step.cpus is not None:
            files.write(step.directory / names.cpus, str(step.cpus))
        if step.mems is not None:
            files.write(step.directory / names.mems, str(step.mems))
    return read_effective(pod.cpuset_dir, pod.version, files)


def write_cpuset(cgroup: Cgroup, cpuset: Cpuset, *, files: CgroupFiles = FILES) -> None:
    """Give a leaf cgroup (a container's) `cpuset`, which must lie within its parent's: the memory nodes
    first, so that on v1 the CPUs never ask for more than the parent allows at any step."""
    names = _CPUSET_FILES[cgroup.version]
    files.write(cgroup.cpuset_dir / names.mems, str(cpuset.mems))
    files.write(cgroup.cpuset_dir / names.cpus, str(cpuset.cpus))


def write_cpu_max(
    pod: Cgroup, quota_us: int | None, period_us: int = CFS_PERIOD_US, *, files: CgroupFiles = FILES
) -> None:
    """Set a cgroup's CFS bandwidth: `quota_us` None is no limit (v2 `max <period>`, v1 quota -1)."""
    if not MIN_CFS_QUOTA_US <= period_us <= MAX_CFS_PERIOD_US:
        raise ValueError(f"CFS period {period_us} us is outside [{MIN_CFS_QUOTA_US}, {MAX_CFS_PERIOD_US}]")
    if quota_us is not None and quota_us < MIN_CFS_QUOTA_US:
        raise ValueError(f"CFS quota {quota_us} us is below the kernel's minimum {MIN_CFS_QUOTA_US}")
    if pod.version == 2:
        files.write(pod.cpu_dir / "cpu.max", f"{'max' if quota_us is None else quota_us} {period_us}")
        return
    quota_file, period_file = pod.cpu_dir / "cpu.cfs_quota_us", pod.cpu_dir / "cpu.cfs_period_us"
    if quota_us is None:
        files.write(quota_file, "-1")  # no limit first: a period is then never checked against a quota
        files.write(period_file, str(period_us))
        return
    try:
        files.write(period_file, str(period_us))
    except CgroupWriteError as err:
        if err.errno != errno_codes.EINVAL:
            raise
        # the new period with the old quota broke a hierarchy limit; the new quota first makes it fit
        files.write(quota_file, str(quota_us))
        files.write(period_file, str(period_us))
        return
    files.write(quota_file, str(quota_us))


def cpu_max_file(cgroup: Cgroup) -> Path:
    """The file holding the cgroup's CFS quota: v2 `cpu.max`, v1 `cpu.cfs_quota_us`."""
    return cgroup.cpu_dir / ("cpu.max" if cgroup.version == 2 else "cpu.cfs_quota_us")


def cpu_max_text(quota_us: int | None) -> str:
    """A quota as the cgroup files show it (v2's spelling): `max` for no limit (None), else microseconds."""
    return "max" if quota_us is None else str(quota_us)


def read_cpu_max(cgroup: Cgroup, files: CgroupFiles = FILES) -> tuple[int | None, int]:
    """A cgroup's CFS `(quota_us, period_us)`; quota None is no limit, whichever version spells it."""
    path = cpu_max_file(cgroup)
    text = files.read(path)
    try:
        if cgroup.version == 2:
            quota, period = text.split()
            return (None if quota == "max" else int(quota)), int(period)
        quota_v1 = int(text)
        return (None if quota_v1 < 0 else quota_v1), int(files.read(cgroup.cpu_dir / "cpu.cfs_period_us"))
    except ValueError:
        raise CgroupError(f"{path} holds {text.strip()[:40]!r}, not a CFS quota and period") from None
