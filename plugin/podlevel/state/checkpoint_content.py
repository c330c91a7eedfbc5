"""What the checkpoint files hold, as the plugin reads and writes them, and how a file can fail to be read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

from podlevel.engine.cpuset import CPUSet
from podlevel.engine.memory_policy import MemoryBlock, NUMANodeState

Kind = Literal["cpu", "memory"]

EMPTY: Final = "empty"
TRUNCATED: Final = "truncated"
NOT_JSON: Final = "not JSON"
NOT_A_FILE: Final = "not a regular file"
BAD_CHECKSUM: Final = "bad checksum"
BAD_CONTENT: Final = "bad content"
FUTURE_VERSION: Final = "unknown future version"
UNKNOWN_KIND: Final = "unknown kind"


class CorruptCheckpoint(Exception):
    """A file no layout reads. `reason` is one of the constants above; `detail` names what failed."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class MigrationError(ValueError):
    """A conversion between layouts that would lose information, or needs information the file lacks."""


Entries = Mapping[str, Mapping[str, CPUSet]]


@dataclass(frozen=True)
class CPUCheckpoint:
    """What a CPU checkpoint holds from V2 on, keyed by pod UID and container name as the kubelet keys it."""

    policy_name: str
    default: CPUSet
    entries: Mapping[str, Mapping[str, CPUSet]] = field(default_factory=dict)
    pod_entries: Mapping[str, CPUSet] = field(default_factory=dict)
    """pod UID -> the pod's bubble (KEP-5526)."""


@dataclass(frozen=True)
class LegacyCPUCheckpoint:
    """A V1 CPU checkpoint: entries keyed by container ID, which the file cannot map to a pod."""

    policy_name: str
    default: CPUSet
    container_entries: Mapping[str, CPUSet] = field(default_factory=dict)

    def migrate(self, containers: Mapping[str, tuple[str, str]]) -> CPUCheckpoint:
        """The V2+ content, given container ID -> (pod UID, container name) for every entry."""
        unknown = sorted(set(self.container_entries) - set(containers))
        if unknown:
            raise MigrationError(
                f"V1 entries are keyed by container ID and {', '.join(unknown)} "
                "is not a known container: cannot tell its pod and container name"
            )
        entries: dict[str, dict[str, CPUSet]] = {}
        for container_id, cpus in self.container_entries.items():
            pod_uid, name = containers[container_id]
            entries.setdefault(pod_uid, {})[name] = cpus
        return CPUCheckpoint(self.policy_name, self.default, entries)


@dataclass(frozen=True)
class MemoryCheckpoint:
    policy_name: str
    machine: Mapping[int, NUMANodeState]
    entries: Mapping[str, Mapping[str, tuple[MemoryBlock, ...]]] = field(default_factory=dict)
    pod_entries: Mapping[str, tuple[MemoryBlock, ...]] = field(default_factory=dict)


Content = CPUCheckpoint | LegacyCPUCheckpoint | MemoryCheckpoint


@dataclass(frozen=True)
class Check:
    """One verified part of a file: `part` names it (`checksum`, `data`, `legacy part`, `pod entries`)."""

    part: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class Decoded:
    kind: Kind
    version: int
    content: Content
    checks: tuple[Check, ...]
    notes: tuple[str, ...] = ()

    @property
    def valid(self) -> bool:
        """Every checksum in the file is valid in a layout the plugin reads."""
        return all(check.ok for check in self.checks)
