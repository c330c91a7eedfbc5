"""The plugin's NRI messages: what it keeps of the runtime's sandboxes and containers (`agent.records`), and
the container updates it answers with, each distinct setting encoded once. Conversions only: no state."""

from __future__ import annotations

import functools
from collections.abc import Mapping

from podlevel.agent.records import Observed, Sandbox, Settings
from podlevel.engine.cpuset import CPUSet
from podlevel.engine.errors import InputError
from podlevel.engine.limits import quote
from podlevel.nri import UpdateBatch, api
from podlevel.podspec.manifest import SHAPE_ANNOTATION
from podlevel.podspec.runtime import RuntimeResources


def runtime_resources(resources: api.LinuxResources) -> RuntimeResources:
    return RuntimeResources(
        cpu_shares=resources.cpu.shares.value,
        cpu_quota=max(0, resources.cpu.quota.value),
        cpu_period=resources.cpu.period.value,
        memory_limit=max(0, resources.memory.limit.value),
    )


def sandbox_of(pod: api.PodSandbox) -> Sandbox:
    """What the plugin keeps of a sandbox: of its annotations only the shape (pods often carry kilobytes of
    others, `last-applied-configuration` among them, and the plugin keeps every sandbox it was shown)."""
    shape = pod.annotations.get(SHAPE_ANNOTATION)
    return Sandbox(
        pod.id, pod.uid, pod.name, pod.namespace, {} if shape is None else {SHAPE_ANNOTATION: shape},
        runtime_resources(pod.linux.pod_resources), pod.linux.cgroup_parent,
    )


def observed_of(container: api.Container, cpus: CPUSet, nodes: CPUSet) -> tuple[Observed, str | None]:
    """A container as the runtime reports it, and why its cpuset or memory nodes were unreadable (None when
    both were read). Ids are held to the machine's (`cpus`, NUMA `nodes`): a list naming CPUs or NUMA nodes
    this machine does not have is unknown, as if the runtime had set none, and costs no more than parsing
    the machine's own."""
    cpu = container.linux.resources.cpu
    cpu_ids, cpus_problem = _ids(cpu.cpus, cpus, "CPU")
    mems, mems_problem = _ids(cpu.mems, nodes, "NUMA node")
    observed = Observed(
        container.id,
        container.pod_sandbox_id,
        container.name,
        cpu_ids,
        tuple(mems) if mems else None,
        cpu.quota.value if cpu.HasField("quota") else None,
    )
    return observed, cpus_problem or mems_problem


def linux_cpu(settings: Settings) -> api.LinuxCPU:
    cpu = api.LinuxCPU(cpus=str(settings.cpus), mems=str(CPUSet(settings.mems)))
    if settings.cpu_quota_us is not None:
        cpu.quota.value = settings.cpu_quota_us
        cpu.period.value = settings.cpu_period_us
    return cpu


def container_update(cpu: api.LinuxCPU) -> api.ContainerUpdate:
    """The update to `cpu`, naming no container: an UpdateBatch gives it to each container of a group."""
    update = api.ContainerUpdate()
    update.linux.resources.cpu.CopyFrom(cpu)
    # A container may be gone by the time the runtime applies this; that is not worth failing an event.
    update.ignore_failure = True
    return update


@functools.lru_cache(maxsize=1024)
def _ids(text: str, machine: CPUSet, what: str) -> tuple[CPUSet | None, str | None]:
    """A CPU or NUMA node list the runtime reports, or None and why it is unreadable. Cached: the
    containers of a node share a few dozen distinct lists, and a Synchronize reads thousands."""
    if not text:
        return None, None
    try:
        ids = CPUSet.parse(text, bound=machine.mask.bit_length(), what=what)
    except InputError as err:
        return None, err.message
    if not ids.is_subset(machine):
        return None, f"{quote(text)} names {what} ids this machine does not have"
    return ids, None


def by_settings(changed: Mapping[str, Settings]) -> dict[Settings, list[str]]:
    """Container ids grouped by their new settings: when the node shared pool moves, hundreds of containers
    move to one and the same place (one Settings object, hashed once for its run, not per container)."""
    groups: dict[Settings, list[str]] = {}
    last: Settings | None = None
    ids: list[str] = []
    for container_id, settings in changed.items():
        if settings is not last:
            ids = groups.setdefault(settings, [])
            last = settings
        ids.append(container_id)
    return groups


def updates_of(groups: Mapping[Settings, list[str]]) -> UpdateBatch:
    """One update per container of `by_settings` groups, each distinct setting formatted (a 256-CPU list
    takes ~30 us) and encoded once."""
    return UpdateBatch((ids, container_update(linux_cpu(settings))) for settings, ids in groups.items())
