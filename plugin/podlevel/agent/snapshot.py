"""What the plugin holds after each event, frozen for readers on other threads.

The PodResources service, the metrics and the operator endpoints answer from a `NodeSnapshot`, never from
the live objects: a reader asks `PodLevelPlugin.snapshot` once, which copies the node between two events
(the first reader after a change does; the others get the same snapshot), and reads a consistent node from
it. The copy is made under the lock the event handlers hold, so an event that arrives meanwhile waits for
it; events themselves copy nothing for readers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from podlevel.agent.decisions import DecisionLog
from podlevel.agent.records import PlacementView, PodCgroupSettings, RefusedSandbox
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
    """Counts the snapshots made."""
    decisions: DecisionLog = field(default_factory=DecisionLog)
    """The last decisions, for `explain`: the live log, not a copy (its one lookup is safe from any thread,
    see `agent.decisions`), so a snapshot costs nothing more for it."""
    refused_sandboxes: Mapping[str, RefusedSandbox] = field(default_factory=dict)
    """pod uid -> its last sandbox refused and removed by the runtime, oldest refusal first."""
