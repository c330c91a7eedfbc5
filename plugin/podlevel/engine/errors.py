"""The engine's two kinds of failure.

`InputError` is bad input (a malformed quantity, cpuset or topology spec, a pod that breaks an API rule): the
caller gave something the engine cannot reason about. `AdmissionError` is a well-formed pod the node refuses;
it carries the kubelet's admission type string so operators see the same reason a kubelet would give.
Neither changes engine state: every engine operation either returns a new state or raises.
"""

from __future__ import annotations

from typing import Final

TOPOLOGY_AFFINITY_ERROR: Final = "TopologyAffinityError"
SMT_ALIGNMENT_ERROR: Final = "SMTAlignmentError"
EMPTY_POD_SHARED_POOL_ERROR: Final = "EmptyPodSharedPoolError"
UNEXPECTED_ADMISSION_ERROR: Final = "UnexpectedAdmissionError"


class InputError(ValueError):
    """Input that breaks a syntax or API rule; `rule` names the rule (e.g. "quantity", "cpuset")."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(f"{rule}: {message}")
        self.rule = rule
        self.message = message


class AdmissionError(Exception):
    """A pod the node refuses. `type` is the kubelet's admission reason string; `resource` names the manager
    whose allocation refused it ("cpu" or "memory"), None when the topology manager refused it before either
    allocated (the kubelet counts allocation errors per manager)."""

    def __init__(self, type_: str, message: str, resource: str | None = None) -> None:
        super().__init__(f"{type_}: {message}")
        self.type = type_
        self.message = message
        self.resource = resource


class TopologyAffinityError(AdmissionError):
    def __init__(self, message: str) -> None:
        super().__init__(TOPOLOGY_AFFINITY_ERROR, message)


class SMTAlignmentError(AdmissionError):
    def __init__(self, message: str) -> None:
        super().__init__(SMT_ALIGNMENT_ERROR, message, "cpu")


class EmptyPodSharedPoolError(AdmissionError):
    def __init__(self, message: str, resource: str | None = None) -> None:
        super().__init__(EMPTY_POD_SHARED_POOL_ERROR, message, resource)

    @classmethod
    def of(cls, pod: str, violation: str, resource: str) -> EmptyPodSharedPoolError:
        """The refusal of pod `namespace/name` for `violation`, the part of the rule it breaks, by the
        `resource` manager. Every place that finds a violation (either policy, or the engine asking them)
        words the refusal with this."""
        return cls(f"pod {pod}: {violation} (empty pod shared pool rule)", resource)


class UnexpectedAdmissionError(AdmissionError):
    def __init__(self, message: str, resource: str | None = None) -> None:
        super().__init__(UNEXPECTED_ADMISSION_ERROR, message, resource)
