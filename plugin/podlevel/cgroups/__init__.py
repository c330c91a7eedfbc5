"""The pod cgroup: where it is (`paths`), and its bubble and CFS quota written and read back (`pod_cgroup`).

The agent locates a pod's cgroup from its sandbox with `locate_pod_cgroup`, then calls `write_bubble` (and,
when a container of the pod holds CPUs of its own, `write_cpu_max(pod, None, period)`). Errors are typed:
`UnsafeCgroupPath` for a refused runtime value, `CgroupWriteError`/`CgroupReadError` (path and errno) for a
failed file operation, all `CgroupError`.
"""

from podlevel.cgroups.paths import (
    DEFAULT_CGROUP_ROOT,
    CgroupError,
    Driver,
    NoCgroupHierarchy,
    PodCgroup,
    UnsafeCgroupPath,
    kubelet_cgroup_parent,
    locate_pod_cgroup,
)
from podlevel.cgroups.pod_cgroup import (
    CgroupIOError,
    CgroupReadError,
    CgroupWriteError,
    Cpuset,
    read_cpu_max,
    read_effective,
    write_bubble,
    write_cpu_max,
)

__all__ = [
    "DEFAULT_CGROUP_ROOT",
    "CgroupError",
    "CgroupIOError",
    "CgroupReadError",
    "CgroupWriteError",
    "Cpuset",
    "Driver",
    "NoCgroupHierarchy",
    "PodCgroup",
    "UnsafeCgroupPath",
    "kubelet_cgroup_parent",
    "locate_pod_cgroup",
    "read_cpu_max",
    "read_effective",
    "write_bubble",
    "write_cpu_max",
]
