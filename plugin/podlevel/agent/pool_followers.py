"""The containers whose CPUs follow the node shared pool, grouped by what each keeps of its own.

When a pod is admitted or released the node shared pool moves, and every container that follows it (plain
node-shared ones, managed ones outside any bubble, those of pods a Synchronize could not admit again) needs
an update. Grouped by what they keep (memory nodes, quota, period), each group's new settings are made once
and handed to all its members, and no container that holds settings the pool never changes is looked at.
The groups are one of `Placement`'s indexes; what a container keeps, and whether it follows at all, is
`Placement`'s decision.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import NamedTuple

from podlevel.agent.records import Settings


class Follows(NamedTuple):
    """What a container whose CPUs follow the node shared pool keeps of its own: everything else."""

    mems: tuple[int, ...]
    cpu_quota_us: int | None
    cpu_period_us: int


class PoolFollowers:
    """Container ids filed under what they keep; each in at most one group."""

    def __init__(self) -> None:
        self._groups: dict[Follows, dict[str, None]] = {}
        """What they keep -> the ids that keep it (ordered sets)."""
        self._group_of: dict[str, Follows] = {}

    def file(self, container_id: str, kept: Follows | None) -> None:
        """The container now keeps `kept` while following the pool; None: it no longer follows."""
        if self._group_of.get(container_id) == kept:
            return
        self.drop(container_id)
        if kept is not None:
            self._groups.setdefault(kept, {})[container_id] = None
            self._group_of[container_id] = kept

    def drop(self, container_id: str) -> None:
        kept = self._group_of.pop(container_id, None)
        if kept is not None:
            peers = self._groups[kept]
            del peers[container_id]
            if not peers:
                del self._groups[kept]

    def clear(self) -> None:
        self._groups.clear()
        self._group_of.clear()

    def at_pool(self, settings_of: Callable[[Follows], Settings]) -> dict[str, Settings]:
        """Every follower's settings on a new pool, `settings_of` called once per group."""
        moved: dict[str, Settings] = {}
        for kept, ids in self._groups.items():
            moved.update(dict.fromkeys(ids, settings_of(kept)))
        return moved

    def groups(self) -> Mapping[Follows, Collection[str]]:
        """The groups as they stand (a view for checks; do not keep it across changes)."""
        return self._groups
