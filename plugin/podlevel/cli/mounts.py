"""What `run` needs of the node before it starts, named as the DaemonSet mounts it.

In a cluster every path the agent uses is a volume of deploy/base/agent/daemonset.yaml. A missing or
read-only one is an installation mistake that no restart fixes, so the agent does not exit (a crash loop
says nothing the operator can read in `kubectl get pods`, and each restart re-reads the checkpoints for
nothing): with `--on-missing-mount=wait`, as the DaemonSet runs it, it logs one line naming the path, its
flag and the DaemonSet volume, answers `/readyz` 503 with the same words, and waits for its stop. The
checkpoints are never touched meanwhile. Run by hand it exits 2 with that sentence, as for any bad setting.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from podlevel.cgroups.paths import NoCgroupHierarchy, cgroup_version


@dataclass(frozen=True)
class Mount:
    flag: str
    volume: str
    """The volume of deploy/base/agent/daemonset.yaml that holds the flag's path."""
    check: Callable[[Path], str | None]
    dest: str
    directory_of: bool = False
    """The flag names a file in the mounted directory (a socket), not the directory itself."""


def writable_directory(path: Path) -> str | None:
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            return None
    except OSError as err:
        return f"not a writable directory ({err.strerror})"


def existing_directory(path: Path) -> str | None:
    return None if path.is_dir() else "no such directory"


def cgroup_hierarchy(path: Path) -> str | None:
    try:
        cgroup_version(path)
    except NoCgroupHierarchy:
        return "not a cgroup v2 root, and no cgroup v1 cpuset hierarchy under it"
    return None


def sysfs(path: Path) -> str | None:
    online = path / "devices/system/cpu/online"
    return None if online.is_file() else "not a sysfs (no devices/system/cpu/online)"


MOUNTS: Final = (
    Mount("--state-dir", "state", writable_directory, "state_dir"),
    Mount("--cgroup-root", "cgroup", cgroup_hierarchy, "cgroup_root"),
    Mount("--sysfs-root", "sys", sysfs, "sysfs_root"),
    Mount("--nri-socket", "nri-socket", existing_directory, "nri_socket", directory_of=True),
    Mount("--podresources-socket", "pod-resources", writable_directory, "podresources_socket",
          directory_of=True),
)


def problems(args: argparse.Namespace, *, launched: bool) -> Iterator[str]:
    """One sentence per path that is not what `run` needs; a setting left empty (off) is not checked, nor the
    NRI socket of a plugin the runtime launched (it passes a connected socket)."""
    for mount in MOUNTS:
        value = getattr(args, mount.dest)
        if not value or (launched and mount.flag == "--nri-socket"):
            continue
        path = Path(value).parent if mount.directory_of else Path(value)
        reason = mount.check(path)
        if reason is not None:
            yield (f"{path} ({mount.flag}): {reason}; the DaemonSet mounts it as volume {mount.volume!r} "
                   f"(deploy/base/agent/daemonset.yaml: spec.template.spec.volumes)")
