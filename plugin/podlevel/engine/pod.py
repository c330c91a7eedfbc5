"""The engine's own pod model: what the managers need to know of a pod, in exact integer units.

Resource maps use the Kubernetes resource names: `cpu` in millicores, `memory` and `hugepages-<size>` in
bytes. Built from a Pod manifest (`podlevel.podspec`) or from runtime data (the NRI side); the engine does not
care which.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Final, NamedTuple

CPU: Final = "cpu"
MEMORY: Final = "memory"
HUGEPAGES_PREFIX: Final = "hugepages-"


def is_memory_resource(name: str) -> bool:
    """Resources the memory manager accounts per NUMA node."""
    return name == MEMORY or name.startswith(HUGEPAGES_PREFIX)


class ContainerKind(StrEnum):
    INIT = "init"
    """A standard init container: runs to completion before the next one starts."""
    SIDECAR = "sidecar"
    """A restartable init container (`restartPolicy: Always`): runs for the pod's whole life."""
    APP = "app"


class QOSClass(StrEnum):
    GUARANTEED = "Guaranteed"
    BURSTABLE = "Burstable"
    BEST_EFFORT = "BestEffort"


def _frozen(values: Mapping[str, int] | None = None) -> Mapping[str, int]:
    return MappingProxyType(dict(values or {}))


@dataclass(frozen=True, slots=True)
class Resources:
    requests: Mapping[str, int] = field(default_factory=_frozen)
    limits: Mapping[str, int] = field(default_factory=_frozen)
    _equivalent_guaranteed: bool = field(init=False, repr=False, compare=False)
    """Computed once: admission asks it of each container several times."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "_equivalent_guaranteed", self._compute_equivalent_guaranteed())

    def request(self, name: str) -> int:
        """The request, defaulting to the limit as the API server does when only a limit is given."""
        return self.requests.get(name, self.limits.get(name, 0))

    def is_empty(self) -> bool:
        return not self.requests and not self.limits

    def is_equivalent_guaranteed(self) -> bool:
        """CPU and memory requests non-zero and equal to their limits, as the kubelet's
        `IsContainerEquivalentQOSGuaranteed` has it."""
        return self._equivalent_guaranteed

    def _compute_equivalent_guaranteed(self) -> bool:
        for name in (CPU, MEMORY):
            request, limit = self.request(name), self.limits.get(name, 0)
            if request == 0 or request != limit:
                return False
        return True


@dataclass(frozen=True, slots=True)
class Container:
    name: str
    kind: ContainerKind = ContainerKind.APP
    resources: Resources = field(default_factory=Resources)


class Phase(NamedTuple):
    """Containers that run at the same time (KEP-753).

    A pod goes through one phase per standard init container, which runs beside the sidecars declared before
    it, and then a last phase in which every sidecar and every app container run together.
    """

    sidecars: tuple[Container, ...]
    """The sidecars running in this phase, in declaration order."""
    init: Container | None
    """The standard init container of this phase; None in the last phase."""
    containers: tuple[Container, ...]
    """Everything running in this phase: the sidecars, then the init container or the app containers."""


@dataclass(frozen=True, slots=True)
class Pod:
    uid: str
    name: str
    namespace: str = "default"
    resources: Resources | None = None
    """Pod-level `.spec.resources`; None when the pod declares none."""
    init_containers: tuple[Container, ...] = ()
    """Standard init containers and sidecars, in declaration order (their kind tells them apart)."""
    containers: tuple[Container, ...] = ()
    _qos: QOSClass = field(init=False, repr=False, compare=False)
    _phases: tuple[Phase, ...] | None = field(default=None, init=False, repr=False, compare=False)
    """The QoS class and the phases are computed once (the phases on first use): every admission asks for them
    several times, and the pod never changes."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "_qos", self._compute_qos())

    @property
    def all_containers(self) -> tuple[Container, ...]:
        return self.init_containers + self.containers

    @property
    def key(self) -> str:
        """`namespace/name`, as Kubernetes names a pod in its messages."""
        return f"{self.namespace}/{self.name}"

    def phases(self) -> tuple[Phase, ...]:
        """The pod's phases in the order they run; the last one (sidecars and apps) is always there."""
        phases = self._phases
        if phases is None:
            phases = tuple(self._walk_phases())
            object.__setattr__(self, "_phases", phases)
        return phases

    def _walk_phases(self) -> Iterator[Phase]:
        sidecars: tuple[Container, ...] = ()
        for container in self.init_containers:
            if container.kind is ContainerKind.SIDECAR:
                sidecars += (container,)
            else:
                yield Phase(sidecars, container, (*sidecars, container))
        yield Phase(sidecars, None, sidecars + self.containers)

    def aggregate_request(self, resource: str) -> int:
        """What the containers need at once: the largest phase's total. The API server's pod budget rule and
        the kubelet's pod-scope hints both compare against this."""
        return max(sum(c.resources.request(resource) for c in phase.containers) for phase in self.phases())

    def container(self, name: str) -> Container | None:
        for container in self.all_containers:
            if container.name == name:
                return container
        return None

    def qos_class(self) -> QOSClass:
        """QoS from pod-level resources when set (KEP-5526), else from the containers, as `GetPodQOS` does."""
        return self._qos

    def _compute_qos(self) -> QOSClass:
        pod_level = self.resources
        sources = [pod_level] if pod_level is not None else [c.resources for c in self.all_containers]
        if all(r.is_empty() for r in sources):
            return QOSClass.BEST_EFFORT
        for r in sources:
            if not r.is_equivalent_guaranteed():
                return QOSClass.BURSTABLE
            for name in r.requests.keys() | r.limits.keys():
                if r.request(name) != r.limits.get(name, 0):
                    return QOSClass.BURSTABLE
        return QOSClass.GUARANTEED
