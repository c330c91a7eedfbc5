"""What the agent tells whoever counts its decisions (the metrics), without knowing who that is.

The agent sits below the report layer and never imports it: `PodLevelPlugin` and `PodCgroups` call an
`Observer` at the moments the kubelet counts things, and the metrics implement one. Every method runs on
the NRI event thread inside the event it reports, except `checkpoint_failed`, which the checkpoint writer's
thread calls when a write fails, and `cgroup_repaired`, which the drift repair thread calls: so an
implementation does no more than bump a thread-safe counter (prometheus-client's are); the defaults do
nothing, for a plugin run without metrics.
"""

from __future__ import annotations

from typing import Final

from podlevel.engine.errors import AdmissionError, InputError
from podlevel.engine.manager import NodeState, PodDecision

INVALID_POD_SHAPE: Final = "InvalidPodShape"
"""The error type of a refusal for a malformed or untruthful pod-shape annotation (the kubelet has none: it
reads the pod itself)."""


def error_type(error: AdmissionError | InputError) -> str:
    """The refusal's type as logs and metrics name it: the kubelet's admission reason or INVALID_POD_SHAPE."""
    return error.type if isinstance(error, AdmissionError) else INVALID_POD_SHAPE


class Observer:
    """Receives the agent's countable events; every method is a no-op here."""

    def admitted(self, state: NodeState, decision: PodDecision) -> None:
        """A RunPodSandbox (or the first CreateContainer of a pod not admitted at its sandbox) admitted a
        new pod: `decision` is its placement, `state` the node right after (pods taken back by a
        Synchronize are not reported: a restart allocates nothing new)."""

    def refused(self, pod_level: bool, error: AdmissionError | InputError) -> None:
        """A CreateContainer was refused; `pod_level`: the pod would have taken the pod-level path (pod
        scope and pod-level resources), so its allocation came from the pod, else from the node."""

    def checkpoint_failed(self) -> None:
        """A checkpoint write failed (it is retried at the next event)."""

    def pod_cgroup_failed(self) -> None:
        """A pod cgroup write failed (retried with backoff unless refused for good)."""

    def cgroup_repaired(self, field: str) -> None:
        """A container's `field` (cpus, mems or quota) had been changed behind the plugin's back and was put
        back (`agent.drift`; called on the repair thread, not the event thread)."""
