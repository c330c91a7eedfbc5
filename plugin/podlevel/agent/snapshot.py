"""What the plugin holds after each event, frozen for readers on other threads.

The PodResources service, the metrics and the operator endpoints answer from a `NodeSnapshot`, never from
the live objects: the NRI event thread replaces `PodLevelPlugin.snapshot` (one reference assignment) at the
end of every event, and a reader takes that reference once and reads a consistent node from it. No reader
takes a lock the event path waits on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from podlevel.agent.placement import PlacementView, PodCgroupSettings
from podlevel.engine.manager import Engine


@dataclass(frozen=True, slots=True)
class NodeSnapshot:
    engine: Engine
    placement: PlacementView
    cgroups_paths: Mapping[str, str] = field(default_factory=dict)
    """container id -> its cgroups path as the runtime reports it."""
    pod_cgroups: Mapping[str, PodCgroupSettings] = field(default_factory=dict)
    """sandbox id -> what its pod cgroup should hold."""
    pod_cgroup_failures: Mapping[str, str] = field(default_factory=dict)
    """sandbox id -> why its pod cgroup does not hold it yet."""
    refusals: Mapping[str, str] = field(default_factory=dict)
    """sandbox id -> the last CreateContainer refusal of its pod (type: message)."""
    checkpoint_error: str | None = None
    synchronized: bool = False
    """The runtime has synchronized with the plugin since it started."""
    generation: int = 0
    """Counts published snapshots."""
