"""The node's cgroups as regular files on a tmpfs (cgroupfs is memory), laid out as the kubelet and the
runtime lay out cgroup v2, kept as they keep them: the benchmark plays both, so the plugin's pod cgroup writer
and its drift repair find, read and write what they would on a node.

Each pod's cgroup (and the QoS cgroups above it) is made before its RunPodSandbox, as the kubelet makes it,
as wide as the node. Each container's cgroup is made as the runtime creates the container, holding what the
plugin's answer adjusted (or the runtime's listing, for the containers a Synchronize reports), and every
update an answer carries is written into the container's files, as runc writes them; a removed container's
cgroup goes. Every `.effective` file is a hard link to the configured one: the parents are as wide as the
node, so what was written is what is in force.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from google.protobuf.message import Message

from podlevel.nri import api

PERIOD_US: Final = 100_000


class CgroupTree:
    """The cgroup tree under `root`, on a node of `cpus` and NUMA nodes `mems` (Linux list syntax)."""

    def __init__(self, root: Path, cpus: str, mems: str) -> None:
        self.root = root
        self.cpus = cpus
        self.mems = mems
        self._containers: dict[str, Path] = {}
        (root / "cgroup.controllers").write_text("cpuset cpu memory\n")

    def pods(self, sandboxes: Iterable[api.PodSandbox]) -> None:
        """The cgroups of these pods (`cgroup_parent`), and the ancestors not made yet."""
        for sandbox in sandboxes:
            directory = self.root / sandbox.linux.cgroup_parent.lstrip("/")
            fresh = [d for d in (directory, *directory.parents) if self.root in d.parents and not d.exists()]
            directory.mkdir(parents=True)
            for cgroup in fresh:
                self._files(cgroup, self.cpus, self.mems, f"max {PERIOD_US}")

    def containers(self, containers: Iterable[api.Container]) -> None:
        """The cgroups of running containers as the runtime lists them (their cpuset, else the node's)."""
        for container in containers:
            self._create(container, container.linux.resources.cpu)

    def answered(self, method: str, request: Message, reply: Message) -> None:
        """Do what the runtime does with the plugin's answer to `request`: create the container with its
        adjustment, apply the updates, remove a removed container's cgroup."""
        if isinstance(request, api.CreateContainerRequest) and isinstance(reply, api.CreateContainerResponse):
            cpu = api.LinuxCPU()
            cpu.CopyFrom(request.container.linux.resources.cpu)
            cpu.MergeFrom(reply.adjust.linux.resources.cpu)
            self._create(request.container, cpu)
        answers = (api.CreateContainerResponse, api.StopContainerResponse, api.SynchronizeResponse)
        if isinstance(reply, answers):
            self.updated(reply.update)
        if (isinstance(request, api.StateChangeEvent) and request.event == api.REMOVE_CONTAINER
                and (directory := self._containers.pop(request.container.id, None)) is not None):
            shutil.rmtree(directory)

    def updated(self, updates: Iterable[api.ContainerUpdate]) -> None:
        for update in updates:
            directory = self._containers.get(update.container_id)
            if directory is not None:
                self._write(directory, update.linux.resources.cpu)

    def _create(self, container: api.Container, cpu: api.LinuxCPU) -> None:
        directory = self.root / container.linux.cgroups_path.lstrip("/")
        directory.mkdir(exist_ok=True)
        self._containers[container.id] = directory
        self._files(directory, cpu.cpus or self.cpus, cpu.mems or self.mems, _cpu_max(cpu))

    def _write(self, directory: Path, cpu: api.LinuxCPU) -> None:
        if cpu.cpus:
            (directory / "cpuset.cpus").write_text(cpu.cpus + "\n")
        if cpu.mems:
            (directory / "cpuset.mems").write_text(cpu.mems + "\n")
        if cpu.HasField("quota"):
            (directory / "cpu.max").write_text(_cpu_max(cpu) + "\n")

    @staticmethod
    def _files(directory: Path, cpus: str, mems: str, cpu_max: str) -> None:
        for name, text in (("cpuset.cpus", cpus), ("cpuset.mems", mems), ("cpu.max", cpu_max)):
            (directory / name).write_text(text + "\n")
        for name in ("cpuset.cpus", "cpuset.mems"):
            effective = directory / f"{name}.effective"
            if not effective.exists():
                os.link(directory / name, effective)


def _cpu_max(cpu: api.LinuxCPU) -> str:
    quota = cpu.quota.value if cpu.HasField("quota") else 0
    period = cpu.period.value or PERIOD_US
    return f"{quota} {period}" if quota > 0 else f"max {period}"
