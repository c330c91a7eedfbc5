"""Read back what runc (or the plugin) wrote into a cgroup, on cgroup v1 (incl. hybrid) or pure v2.

This is the tests' independent oracle: it reads the files directly and shares no code with the plugin.
Paths are cgroup paths as runc uses them (the OCI spec's cgroupsPath or a pod's cgroup parent, e.g.
`/nri-podlevel-test-1a2b3c4d.slice/kubepods/pod<uid>/<container id>`). On v1 each controller has its own
hierarchy under /sys/fs/cgroup/<controller>; on v2 (/sys/fs/cgroup is cgroup2) one tree holds every file.
Unlimited values read as None, whichever version spells them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

CGROUP_MOUNT: Final = Path("/sys/fs/cgroup")
# cgroup v1 reports "no memory limit" as PAGE_COUNTER_MAX pages, a value just below 2**63.
V1_MEMORY_UNLIMITED_FROM: Final = 2**62


@dataclass(frozen=True)
class CgroupValues:
    """CPU and memory settings of one cgroup.

    `cpus`/`mems` are the configured cpuset (empty on v2 when unset, meaning "inherit"); the effective
    ones are what the kernel applies after intersecting with the ancestors. `cpu_quota_us` is None for
    no quota. `cpu_shares` exists on v1 only, `cpu_weight` on v2 only.
    """

    path: str
    version: int
    cpus: str
    effective_cpus: str
    mems: str
    effective_mems: str
    cpu_quota_us: int | None
    cpu_period_us: int
    cpu_shares: int | None
    cpu_weight: int | None
    memory_limit: int | None


def is_cgroup2(mount: Path = CGROUP_MOUNT) -> bool:
    """True when `mount` is a pure cgroup v2 tree (v1 and hybrid hosts have controller directories)."""
    return (mount / "cgroup.controllers").exists()


def _read(path: Path) -> str:
    return path.read_text().strip()


def read_cgroup(cgroup_path: str, mount: Path = CGROUP_MOUNT) -> CgroupValues:
    """The settings of `cgroup_path`; raises FileNotFoundError naming the file if the cgroup is missing."""
    relative = cgroup_path.strip("/")
    if is_cgroup2(mount):
        d = mount / relative
        quota, period = _read(d / "cpu.max").split()
        memory = _read(d / "memory.max")
        return CgroupValues(
            path=cgroup_path, version=2, cpus=_read(d / "cpuset.cpus"),
            effective_cpus=_read(d / "cpuset.cpus.effective"), mems=_read(d / "cpuset.mems"),
            effective_mems=_read(d / "cpuset.mems.effective"),
            cpu_quota_us=None if quota == "max" else int(quota), cpu_period_us=int(period), cpu_shares=None,
            cpu_weight=int(_read(d / "cpu.weight")), memory_limit=None if memory == "max" else int(memory))
    cpuset, cpu, memory_dir = (mount / controller / relative for controller in ("cpuset", "cpu", "memory"))
    quota_v1 = int(_read(cpu / "cpu.cfs_quota_us"))
    limit = int(_read(memory_dir / "memory.limit_in_bytes"))
    return CgroupValues(
        path=cgroup_path, version=1, cpus=_read(cpuset / "cpuset.cpus"),
        effective_cpus=_read(cpuset / "cpuset.effective_cpus"), mems=_read(cpuset / "cpuset.mems"),
        effective_mems=_read(cpuset / "cpuset.effective_mems"),
        cpu_quota_us=None if quota_v1 < 0 else quota_v1, cpu_period_us=int(_read(cpu / "cpu.cfs_period_us")),
        cpu_shares=int(_read(cpu / "cpu.shares")), cpu_weight=None,
        memory_limit=None if limit >= V1_MEMORY_UNLIMITED_FROM else limit)


def status_field(pid: int, name: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key == name:
            return value.strip()
    raise KeyError(f"/proc/{pid}/status has no {name} field")


def cpus_allowed_list(pid: int) -> str:
    """The CPUs the kernel lets `pid` run on (`Cpus_allowed_list`), the end result of every cpuset."""
    return status_field(pid, "Cpus_allowed_list")


def mems_allowed_list(pid: int) -> str:
    """The memory nodes `pid` may allocate from (`Mems_allowed_list`)."""
    return status_field(pid, "Mems_allowed_list")
