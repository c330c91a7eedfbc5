"""The plugin's last admissions and refusals, so an operator can ask why a pod got what it got.

Each record is what the engine decided on: the NodeState before the decision and the Pod (plus the CPUs a
re-admission was confined to). Both are immutable, so recording keeps references and copies nothing: O(1) on
the event path. Consecutive states share most of their per-pod tables (`engine.shared_map`), so the records
together hold little more than one state. The explanation itself (`engine.explain`) is recomputed on the
reader's thread.

Bounded: per pod (namespace/name) only the latest record, and at most `LIMIT` pods, the oldest dropped first.
Readers on other threads call `latest`, a single OrderedDict lookup; CPython runs each OrderedDict operation
whole under the GIL, so a reader sees a record or none, never a half-made one, and takes no lock the event
path could wait on.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Final

from podlevel.engine.cpuset import CPUSet
from podlevel.engine.manager import NodeState
from podlevel.engine.pod import Pod

LIMIT: Final = 256


@dataclass(frozen=True, slots=True)
class Recorded:
    state: NodeState
    """The node as the engine saw it just before the decision."""
    pod: Pod
    within: CPUSet | None
    """The CPUs a re-admission after a restart was confined to; None: the whole node."""


class DecisionLog:
    def __init__(self, limit: int = LIMIT) -> None:
        self.limit = limit
        self._records: OrderedDict[str, Recorded] = OrderedDict()

    def record(self, state: NodeState, pod: Pod, within: CPUSet | None = None) -> None:
        key = pod.key
        self._records[key] = Recorded(state, pod, within)
        self._records.move_to_end(key)
        if len(self._records) > self.limit:
            self._records.popitem(last=False)

    def latest(self, pod: str) -> Recorded | None:
        """The last decision about pod `namespace/name`, if it is still kept."""
        return self._records.get(pod)

    def __len__(self) -> int:
        return len(self._records)
