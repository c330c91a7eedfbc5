"""The pod cgroup: where it is (`paths`), checked to stay under the cgroup root.

The agent locates a pod's cgroup from its sandbox with `locate_pod_cgroup`. A refused runtime value raises
`UnsafeCgroupPath`, naming the value and the rule; all errors are `CgroupError`.
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

__all__ = [
    "DEFAULT_CGROUP_ROOT",
    "CgroupError",
    "Driver",
    "NoCgroupHierarchy",
    "PodCgroup",
    "UnsafeCgroupPath",
    "kubelet_cgroup_parent",
    "locate_pod_cgroup",
]
