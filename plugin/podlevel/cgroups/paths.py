"""Where a pod's cgroup is, from what the runtime says about the pod sandbox, checked to stay under the root.

The kubelet creates the pod cgroup and hands its name to the runtime as the sandbox's cgroup parent. With the
cgroupfs driver that is a path (`/kubepods/burstable/pod<uid>`, `/kubepods/pod<uid>` for Guaranteed,
`/kubepods/besteffort/pod<uid>`); with the systemd driver a slice name
(`kubepods-burstable-pod<uid_with_underscores>.slice`) that systemd expands into nested directories, one per
dash-separated prefix (`kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice`). The
sandbox container's own cgroups path (`/.../pod<uid>/<id>`, or `<slice>:<prefix>:<id>` for systemd) has the
pod cgroup as its parent and is the fallback when no cgroup parent is given.

cgroup v2 keeps every controller in one tree directly under the root; v1 (and the v1/v2 hybrid) has one
hierarchy per controller (`<root>/cpuset/<path>`, `<root>/cpu,cpuacct/<path>` or `<root>/cpu/<path>`). The
root tells which: a v2 root has `cgroup.controllers`, a v1 root a `cpuset` hierarchy.

Every value here comes from the runtime, so every path is checked before anything opens it: no NUL, line
break or other control character; no `..` component; an absolute path is always taken relative to the
hierarchy (it never replaces it); the directory, symlinks resolved, lies strictly below the resolved
hierarchy root; and the pod cgroup's last component names the pod's UID, so that a wrong or crafted parent
can never make the plugin rewrite a QoS-level or node-level cgroup. A refusal is an `UnsafeCgroupPath` naming
the value and the rule it broke.
"""

from __future__ import annotations

import enum
import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

DEFAULT_CGROUP_ROOT: Final = Path("/sys/fs/cgroup")
V1_CPU_HIERARCHIES: Final = ("cpu,cpuacct", "cpu")
"""Where v1 mounts the `cpu` controller, in order of preference (co-mounted with cpuacct on most hosts)."""

_UID: Final = re.compile(r"[A-Za-z0-9._-]+")
_QOS_TIERS: Final = {"guaranteed": (), "burstable": ("burstable",), "besteffort": ("besteffort",)}
_SLICE_SUFFIX: Final = ".slice"
_SEARCH_DEPTH: Final = 6
"""How deep `find_pod_cgroup` looks: the kubelet's pod cgroups sit 2-3 levels down, a test bed's one more."""


class CgroupError(Exception):
    """Base of the errors of the pod cgroup library."""


class UnsafeCgroupPath(CgroupError):
    """A runtime-supplied value that would address a cgroup outside the allowed place."""

    def __init__(self, what: str, value: str, rule: str) -> None:
        self.what = what
        self.value = value
        self.rule = rule
        super().__init__(f"{what} {value!r} refused: {rule}")


class NoCgroupHierarchy(CgroupError):
    """The cgroup root is neither a cgroup v2 tree nor has a v1 cpuset hierarchy."""


class Driver(enum.Enum):
    """The kubelet's cgroup driver, which decides how a cgroup name is spelt."""

    CGROUPFS = "cgroupfs"
    SYSTEMD = "systemd"


def _check_text(what: str, value: str) -> None:
    if "\x00" in value:
        raise UnsafeCgroupPath(what, value, "contains a NUL byte")
    if "\n" in value or "\r" in value:
        raise UnsafeCgroupPath(what, value, "contains a line break")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise UnsafeCgroupPath(what, value, "contains a control character")


def _components(what: str, value: str) -> list[str]:
    """The directory names of a cgroup path, relative to its hierarchy whether written absolute or not."""
    _check_text(what, value)
    parts = [p for p in value.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UnsafeCgroupPath(what, value, "has a '..' component")
    return parts


def check_pod_uid(uid: str) -> str:
    """Return `uid` if it can be part of a cgroup name: non-empty, only `[A-Za-z0-9._-]`."""
    _check_text("pod UID", uid)
    if not _UID.fullmatch(uid):
        raise UnsafeCgroupPath("pod UID", uid, "may only contain [A-Za-z0-9._-] and must not be empty")
    return uid


def expand_slice(name: str) -> list[str]:
    """The directories of a systemd slice: `a-b.slice` is `a.slice/a-b.slice`; `-.slice` is the root."""
    _check_text("systemd slice", name)
    if "/" in name or not name.endswith(_SLICE_SUFFIX):
        raise UnsafeCgroupPath("systemd slice", name, "must be a single name ending in .slice")
    if name == "-" + _SLICE_SUFFIX:
        return []
    words = name[: -len(_SLICE_SUFFIX)].split("-")
    if "" in words:
        raise UnsafeCgroupPath("systemd slice", name, "has an empty dash-separated part")
    return ["-".join(words[: i + 1]) + _SLICE_SUFFIX for i in range(len(words))]


def kubelet_cgroup_parent(uid: str, qos: str, driver: Driver) -> str:
    """The cgroup parent a kubelet with `driver` and the default `kubepods` root gives a pod's sandbox."""
    check_pod_uid(uid)
    if qos not in _QOS_TIERS:
        raise ValueError(f"QoS class {qos!r} is not one of {sorted(_QOS_TIERS)}")
    names = ["kubepods", *_QOS_TIERS[qos], f"pod{uid}"]
    if driver is Driver.CGROUPFS:
        return "/" + "/".join(names)
    return "-".join(n.replace("-", "_") for n in names) + _SLICE_SUFFIX


def _is_slice_name(value: str) -> bool:
    return "/" not in value and value.endswith(_SLICE_SUFFIX)


def _split_systemd_cgroups_path(value: str) -> tuple[str, str, str] | None:
    """`(slice, prefix, name)` of the systemd form `slice:prefix:name`, None for a cgroupfs path."""
    if value.startswith("/") or value.count(":") != 2:
        return None
    slice_name, prefix, name = value.split(":")
    return slice_name, prefix, name


def cgroups_path_components(cgroups_path: str) -> list[str]:
    """The directories of a container's cgroup from its OCI `cgroupsPath`, in either driver's form."""
    systemd = _split_systemd_cgroups_path(cgroups_path)
    if systemd is None:
        return _components("cgroups path", cgroups_path)
    slice_name, prefix, name = systemd
    _check_text("cgroups path", cgroups_path)
    if not name or "/" in name or "/" in prefix or name in (".", ".."):
        raise UnsafeCgroupPath("cgroups path", cgroups_path, "the unit name must be a single name")
    unit = name if name.endswith(_SLICE_SUFFIX) else (f"{prefix}-{name}.scope" if prefix else f"{name}.scope")
    return [*expand_slice(slice_name or "-" + _SLICE_SUFFIX), unit]


def pod_cgroup_components(*, pod_uid: str, cgroup_parent: str = "", cgroups_path: str = "") -> list[str]:
    """The pod cgroup's directories from the sandbox's cgroup parent, else from its own cgroups path's parent.

    Refused unless the last directory names the pod: `pod<uid>` (cgroupfs) or
    `...pod<uid_with_underscores>.slice` (systemd), so a QoS or node cgroup can never be taken for the pod's.
    """
    check_pod_uid(pod_uid)
    if cgroup_parent:
        what, value = "cgroup parent", cgroup_parent
        parts = expand_slice(value) if _is_slice_name(value) else _components(what, value)
    elif cgroups_path:
        what, value = "cgroups path", cgroups_path
        parts = cgroups_path_components(cgroups_path)[:-1]
    else:
        raise UnsafeCgroupPath("pod sandbox", pod_uid, "gives neither a cgroup parent nor a cgroups path")
    leaf = parts[-1] if parts else ""
    systemd_leaf = f"pod{pod_uid.replace('-', '_')}{_SLICE_SUFFIX}"
    if leaf != f"pod{pod_uid}" and leaf != systemd_leaf and not leaf.endswith("-" + systemd_leaf):
        raise UnsafeCgroupPath(what, value, f"its last directory {leaf!r} does not name pod {pod_uid}")
    return parts


def contained(base: Path, parts: list[str], what: str, value: str) -> Path:
    """`base/parts...`, refused unless it resolves (symlinks followed) strictly below the resolved `base`.
    On strings: every pod's first container pays for it, and `pathlib` triples the cost."""
    resolved_base = os.path.realpath(base)
    path = os.path.realpath(os.path.join(resolved_base, *parts))
    if not path.startswith(resolved_base.rstrip(os.sep) + os.sep):
        raise UnsafeCgroupPath(what, value, f"resolves to {path}, outside {resolved_base}")
    return Path(path)


def cgroup_version(cgroup_root: Path) -> int:
    """2 for a unified root (`cgroup.controllers`), 1 for a v1 or hybrid root with a cpuset hierarchy."""
    if (cgroup_root / "cgroup.controllers").is_file():
        return 2
    if (cgroup_root / "cpuset" / "cpuset.cpus").is_file():
        return 1
    raise NoCgroupHierarchy(f"{cgroup_root} is neither a cgroup v2 root nor has a v1 cpuset hierarchy")


def _v1_cpu_hierarchy(cgroup_root: Path) -> Path:
    for name in V1_CPU_HIERARCHIES:
        if (cgroup_root / name).is_dir():
            return cgroup_root / name
    return cgroup_root / V1_CPU_HIERARCHIES[-1]


@dataclass(frozen=True)
class Cgroup:
    """A cgroup's directories, checked: the cpuset one and the cpu one (the same directory on v2)."""

    version: int
    cpuset_dir: Path
    cpu_dir: Path


@dataclass(frozen=True)
class PodCgroup(Cgroup):
    """A pod cgroup: its directories, where its hierarchies are, and its path from their roots."""

    components: tuple[str, ...]
    cpuset_base: Path
    cpu_base: Path

    @property
    def path(self) -> str:
        """The cgroup path, `/`-separated from the hierarchy root, for logs."""
        return "/" + "/".join(self.components)

    def container_cpuset_dir(self, cgroups_path: str) -> Path:
        """A container's cpuset directory from its cgroups path; refused unless it lies below this pod's."""
        parts = cgroups_path_components(cgroups_path)
        if len(parts) <= len(self.components) or tuple(parts[: len(self.components)]) != self.components:
            raise UnsafeCgroupPath("cgroups path", cgroups_path, f"is not below the pod cgroup {self.path}")
        directory = contained(self.cpuset_base, parts, "cgroups path", cgroups_path)
        if self.cpuset_dir not in directory.parents:
            raise UnsafeCgroupPath("cgroups path", cgroups_path, f"resolves to {directory}, outside the pod")
        return directory


def locate_pod_cgroup(
    *, pod_uid: str, cgroup_parent: str = "", cgroups_path: str = "", cgroup_root: Path = DEFAULT_CGROUP_ROOT
) -> PodCgroup:
    """The pod cgroup of a sandbox (NRI `PodSandbox.uid`, `.linux.cgroup_parent`, `.linux.cgroups_path`).

    The directories need not exist yet: a write into a missing one fails with ENOENT and is retried.
    """
    parts = pod_cgroup_components(pod_uid=pod_uid, cgroup_parent=cgroup_parent, cgroups_path=cgroups_path)
    what, value = ("cgroup parent", cgroup_parent) if cgroup_parent else ("cgroups path", cgroups_path)
    version, cpuset_base, cpu_base = _hierarchies(cgroup_root)
    cpuset_dir = contained(cpuset_base, parts, what, value)
    return PodCgroup(
        version=version,
        components=tuple(parts),
        cpuset_base=cpuset_base,
        cpu_base=cpu_base,
        cpuset_dir=cpuset_dir,
        cpu_dir=cpuset_dir if cpu_base == cpuset_base else contained(cpu_base, parts, what, value),
    )


def locate_cgroup(cgroups_path: str, cgroup_root: Path = DEFAULT_CGROUP_ROOT) -> Cgroup:
    """Any cgroup (a container's, as the runtime reports its `cgroupsPath`, in either driver's form), checked
    to lie strictly below the hierarchies' roots. For reading: nothing here proves it belongs to a pod."""
    parts = cgroups_path_components(cgroups_path)
    version, cpuset_base, cpu_base = _hierarchies(cgroup_root)
    cpuset_dir = contained(cpuset_base, parts, "cgroups path", cgroups_path)
    return Cgroup(
        version=version,
        cpuset_dir=cpuset_dir,
        cpu_dir=(cpuset_dir if cpu_base == cpuset_base
                 else contained(cpu_base, parts, "cgroups path", cgroups_path)),
    )


@functools.lru_cache(maxsize=8)
def _hierarchies(cgroup_root: Path) -> tuple[int, Path, Path]:
    """The cgroup version, and where the cpuset and the cpu controllers' hierarchies are (resolved). Looked
    up once per root: what is mounted there does not change under a running plugin, and every pod cgroup
    written asked for it again (a stat and a realpath of every component)."""
    version = cgroup_version(cgroup_root)
    if version == 2:
        root = Path(os.path.realpath(cgroup_root))
        return version, root, root
    return (version, Path(os.path.realpath(cgroup_root / "cpuset")),
            Path(os.path.realpath(_v1_cpu_hierarchy(cgroup_root))))


def find_pod_cgroup(pod_uid: str, cgroup_root: Path = DEFAULT_CGROUP_ROOT) -> PodCgroup | None:
    """A pod's cgroup found by its UID alone (`pod<uid>`, or systemd's `...pod<uid_>.slice`), for a reader
    that knows no cgroup parent (a plugin that is down left only its checkpoint); None when there is none."""
    check_pod_uid(pod_uid)
    _, cpuset_base, _ = _hierarchies(cgroup_root)
    names = (f"pod{pod_uid}", f"pod{pod_uid.replace('-', '_')}{_SLICE_SUFFIX}")
    base_depth = len(cpuset_base.parts)
    for directory, subdirectories, _ in os.walk(cpuset_base):
        depth = len(Path(directory).parts) - base_depth
        for name in subdirectories:
            if name == names[0] or name == names[1] or name.endswith("-" + names[1]):
                parent = "/" + str(Path(directory, name).relative_to(cpuset_base))
                return locate_pod_cgroup(pod_uid=pod_uid, cgroup_parent=parent, cgroup_root=cgroup_root)
        if depth >= _SEARCH_DEPTH:
            subdirectories.clear()
    return None
