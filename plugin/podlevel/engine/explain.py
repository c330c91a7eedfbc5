"""Why a pod got what it got, or why it was refused: admission replayed on the state it was decided on.

`explain` runs the engine's own `admit` on the recorded state with a trace, so every hint, every merge and
the refusal are the ones admission itself computes, never a second implementation that could drift. The
result says which admission path the pod took, under which scope and topology policy, what each NUMA node had
free before the decision, each merge (per resource provider its hints, the merged hint, whether the policy
admitted it), and either the decision or the AdmissionError (the kubelet's type and its message with the
numbers).
"""

from __future__ import annotations

from dataclasses import dataclass

from podlevel.engine.cpuset import CPUSet
from podlevel.engine.errors import AdmissionError
from podlevel.engine.manager import AdmissionPath, Engine, NodeState, NumaFree, PodDecision
from podlevel.engine.pod import Pod
from podlevel.engine.topology_manager import Alignment, Scope, TopologyPolicyName


@dataclass(frozen=True, slots=True)
class Explanation:
    pod: Pod
    path: AdmissionPath
    scope: Scope
    policy: TopologyPolicyName
    within: CPUSet | None
    """The CPUs admission was confined to (a pod taken back after a restart), None: the whole node."""
    free: tuple[NumaFree, ...]
    """Per NUMA node, what was free before the decision."""
    alignments: tuple[Alignment, ...]
    """Every merge admission made, in order; none under the `none` topology policy."""
    decision: PodDecision | None
    error: AdmissionError | None


def explain(engine: Engine, state: NodeState, pod: Pod, *, within: CPUSet | None = None) -> Explanation:
    """Admit `pod` on `state` again (nothing is kept: the engine is pure) and say how it went."""
    trace: list[Alignment] = []
    decision: PodDecision | None = None
    error: AdmissionError | None = None
    try:
        _, decision = engine.admit(state, pod, within=within, trace=trace)
    except AdmissionError as err:
        error = err
    return Explanation(
        pod=pod,
        path=engine.admission_path(pod),
        scope=engine.config.scope,
        policy=engine.config.topology_policy,
        within=within,
        free=engine.free_per_numa(state),
        alignments=tuple(trace),
        decision=decision,
        error=error,
    )
