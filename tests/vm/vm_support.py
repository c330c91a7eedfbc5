"""What the guest-only tests share: the guest's shape, cgroup file helpers, a cgroup member process, what
the kernel enforces on a container, and the pods sized for every guest shape `make vm` boots."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

from podlevel.engine.cpuset import CPUSet
from podlevel.engine.pod import Pod
from podlevel.podspec.workloads import load_pods
from testbed import cgroupfs
from testbed.cri import CRI

CGROUP_ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = "+cpuset +cpu +memory"
SHAPE_VARIABLES = ("VM_NUMA_NODES", "VM_CPUS", "VM_THREADS_PER_CORE", "VM_MEMORY")


@dataclass(frozen=True)
class GuestShape:
    """The machine `hack/vm-run` was asked for."""

    numa_nodes: int
    cpus: int
    threads_per_core: int
    memory: int

    @property
    def memory_per_node(self) -> int:
        return self.memory // self.numa_nodes

    @classmethod
    def from_environment(cls) -> GuestShape:
        return cls(*(int(os.environ[v]) for v in SHAPE_VARIABLES))


def read(path: Path) -> str:
    return path.read_text().strip()


def write(path: Path, value: str) -> None:
    path.write_text(value + "\n")


def mkcgroup(path: Path, enable: bool = False) -> Path:
    """Create a cgroup; with `enable`, hand cpuset, cpu and memory down to its children."""
    path.mkdir()
    if enable:
        write(path / "cgroup.subtree_control", CONTROLLERS)
    return path


def remove_cgroup(cgroup: Path) -> None:
    """Remove a cgroup tree, deepest first; its processes must have ended (the `member` fixture ends them)."""
    for child in (p for p in cgroup.iterdir() if p.is_dir()):
        remove_cgroup(child)
    cgroup.rmdir()


class Member:
    """A Python child process that joins a cgroup, then waits for commands on stdin.

    Commands: `alloc N` touches N MiB of anonymous memory, `spin S` burns CPU for S seconds; each answers
    "ok" when done. Closing stdin ends it. Every wait is on its answer, never on a clock.
    """

    SCRIPT = """
import os, sys, time
with open(sys.argv[1], "w") as procs:
    procs.write(str(os.getpid()))
held = []
print("joined", flush=True)
for line in sys.stdin:
    verb, arg = line.split()
    if verb == "alloc":
        held.append(bytearray(b"\\x01") * (int(arg) << 20))
    elif verb == "spin":
        end = time.monotonic() + float(arg)
        while time.monotonic() < end:
            pass
    print("ok", flush=True)
"""

    def __init__(self, cgroup: Path) -> None:
        self.cgroup = cgroup
        self.proc = subprocess.Popen(
            [sys.executable, "-c", self.SCRIPT, str(cgroup / "cgroup.procs")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        self._expect("joined")

    def _expect(self, answer: str) -> None:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        assert line == answer, f"member process answered {line!r} (exit status {self.proc.poll()})"

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def ask(self, command: str) -> None:
        self.send(command)
        self._expect("ok")

    def status(self, field: str) -> str:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key == field:
                return value.strip()
        raise KeyError(field)

    def close(self) -> int:
        """End the process (closing stdin) and return its exit status (-9 when the OOM killer got it)."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            with contextlib.suppress(BrokenPipeError):  # the OOM killer may have ended it already
                self.proc.stdin.close()
        return self.proc.wait(timeout=60)


def node_cpus(guest: GuestShape) -> dict[int, CPUSet]:
    return {
        node: CPUSet.parse(read(Path(f"/sys/devices/system/node/node{node}/cpulist")))
        for node in range(guest.numa_nodes)
    }


def in_force(cri: CRI, container_id: str) -> tuple[CPUSet, str, str]:
    """(effective cpus, effective mems, cpu.max quota) of a running container, as the kernel has them."""
    info = cri.container_status(container_id)
    values = cgroupfs.read_cgroup(info.cgroups_path)
    assert CPUSet.parse(cgroupfs.cpus_allowed_list(info.pid)) == CPUSet.parse(values.effective_cpus)
    quota = read(CGROUP_ROOT / info.cgroups_path.lstrip("/") / "cpu.max").split()[0]
    return CPUSet.parse(values.effective_cpus), values.effective_mems, quota


PODS: Final = """
apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  containers:
  - {name: server, image: busybox, resources: {requests: {cpu: 100m, memory: 32Mi}}}
---
apiVersion: v1
kind: Pod
metadata: {name: fast-path}
spec:
  resources: {requests: {cpu: "2", memory: 256Mi}, limits: {cpu: "2", memory: 256Mi}}
  initContainers:
  - {name: logger, image: busybox, restartPolicy: Always}
  containers:
  - name: main-app
    image: busybox
    resources: {requests: {cpu: "1", memory: 128Mi}, limits: {cpu: "1", memory: 128Mi}}
---
apiVersion: v1
kind: Pod
metadata: {name: no-room}
spec:
  resources: {requests: {cpu: "2", memory: 256Mi}, limits: {cpu: "2", memory: 256Mi}}
  initContainers:
  - {name: logger, image: busybox, restartPolicy: Always}
  containers:
  - name: main-app
    image: busybox
    resources: {requests: {cpu: "2", memory: 128Mi}, limits: {cpu: "2", memory: 128Mi}}
"""


def pod(name: str) -> Pod:
    """One of PODS under a fresh uid, so its pod cgroup is its own."""
    [found] = [p for p in load_pods(PODS) if p.name == name]
    return replace(found, uid=str(uuid.uuid4()))
