"""Builders for placement tests: sandboxes as the runtime shows them, pods started container by container,
containers as Synchronize reports them."""

from __future__ import annotations

from podlevel.agent.placement import Placement
from podlevel.agent.records import Observed, Sandbox, Settings
from podlevel.engine.pod import Container, Pod
from podlevel.podspec.manifest import SHAPE_ANNOTATION, to_annotation
from podlevel.podspec.runtime import sandbox_resources
from support.builders import MI, guaranteed


def sandbox_of(pod: Pod) -> Sandbox:
    annotations = {SHAPE_ANNOTATION: to_annotation(pod)}
    return Sandbox(f"sb-{pod.name}", pod.uid, pod.name, pod.namespace, annotations, sandbox_resources(pod))


def unmanaged(name: str = "web") -> Sandbox:
    return Sandbox(f"sb-{name}", f"uid-{name}", name, "default", {"other": "annotation"})


def start(placement: Placement, pod: Pod) -> dict[str, Settings]:
    """Create every container of `pod` (id `<pod>-<container>`); returns each one's settings."""
    sandbox = sandbox_of(pod)
    return {c.name: placement.create(sandbox, f"{pod.name}-{c.name}", c.name)[0] for c in pod.all_containers}


def classic(name: str = "classic") -> Pod:
    """No pod-level resources, Guaranteed: the kubelet's per-container way gives the container node CPUs."""
    exclusive = Container("exclusive", resources=guaranteed(2000, 128 * MI))
    return Pod(uid=f"uid-{name}", name=name, containers=(exclusive,))


def holding(row: Observed, settings: Settings) -> Observed:
    """The row as the runtime reports a container that holds `settings`."""
    return row._replace(cpus=settings.cpus, mems=settings.mems, cpu_quota_us=settings.cpu_quota_us)
