"""Cgroups, a pod's and its containers': where they are (`paths`), their cpusets and CFS quota written and
read back (`pod_cgroup`), and drift defined once (`compare`).

The agent locates a pod's cgroup from its sandbox with `locate_pod_cgroup`, then calls `write_bubble` (and,
when a container of the pod holds CPUs of its own, `write_cpu_max(pod, None, period)`). Errors are typed:
`UnsafeCgroupPath` for a refused runtime value, `CgroupWriteError`/`CgroupReadError` (path and errno) for a
failed file operation, all `CgroupError`. Operator commands read any cgroup back: `locate_cgroup` from a
container's cgroups path, `find_pod_cgroup` from a pod UID alone, `read_configured`/`read_effective` and
`read_cpu_max` (files named by `cpuset_file_names` and `cpu_max_file`). What counts as drift is `compare`'s
one rule, for the operator commands and for the agent, which puts a container's drifted cgroup back with
`write_cpuset` and `write_cpu_max`.
"""

from podlevel.cgroups.compare import FieldDrift, Found, Wanted, compare, limit_of
from podlevel.cgroups.paths import (
    DEFAULT_CGROUP_ROOT,
    Cgroup,
    CgroupError,
    Driver,
    NoCgroupHierarchy,
    PodCgroup,
    UnsafeCgroupPath,
    find_pod_cgroup,
    kubelet_cgroup_parent,
    locate_cgroup,
    locate_pod_cgroup,
)
from podlevel.cgroups.pod_cgroup import (
    CgroupIOError,
    CgroupReadError,
    CgroupWriteError,
    Cpuset,
    CpusetFileNames,
    cpu_max_file,
    cpu_max_text,
    cpuset_file_names,
    read_configured,
    read_cpu_max,
    read_effective,
    write_bubble,
    write_cpu_max,
    write_cpuset,
)

__all__ = [
    "DEFAULT_CGROUP_ROOT",
    "Cgroup",
    "CgroupError",
    "CgroupIOError",
    "CgroupReadError",
    "CgroupWriteError",
    "Cpuset",
    "CpusetFileNames",
    "Driver",
    "FieldDrift",
    "Found",
    "NoCgroupHierarchy",
    "PodCgroup",
    "UnsafeCgroupPath",
    "Wanted",
    "compare",
    "cpu_max_file",
    "cpu_max_text",
    "cpuset_file_names",
    "find_pod_cgroup",
    "kubelet_cgroup_parent",
    "limit_of",
    "locate_cgroup",
    "locate_pod_cgroup",
    "read_configured",
    "read_cpu_max",
    "read_effective",
    "write_bubble",
    "write_cpu_max",
    "write_cpuset",
]
