"""The NRI handler of `nri-podlevel run`: runtime events in, container cgroup settings out.

Every CreateContainer waits on this code, so it does the engine work once and answers; updates for other
containers ride on the answers of the events that can carry them (CreateContainer, UpdateContainer,
StopContainer, Synchronize), never through a separate UpdateContainers call from inside a handler.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from podlevel.agent.placement import Observed, Placement, Sandbox, Settings
from podlevel.engine.cfs import UNLIMITED_QUOTA
from podlevel.engine.cpuset import CPUSet
from podlevel.engine.errors import AdmissionError, InputError
from podlevel.nri import Code, CreateResult, Handler, RpcError, RuntimeInfo, UpdateResult, api
from podlevel.podspec.runtime import RuntimeResources

log = logging.getLogger("podlevel.agent")


def runtime_resources(resources: api.LinuxResources) -> RuntimeResources:
    return RuntimeResources(
        cpu_shares=resources.cpu.shares.value,
        cpu_quota=max(0, resources.cpu.quota.value),
        cpu_period=resources.cpu.period.value,
        memory_limit=max(0, resources.memory.limit.value),
    )


def sandbox_of(pod: api.PodSandbox) -> Sandbox:
    return Sandbox(
        pod.id, pod.uid, pod.name, pod.namespace, dict(pod.annotations),
        runtime_resources(pod.linux.pod_resources),
    )


def observed_of(container: api.Container) -> Observed:
    cpu = container.linux.resources.cpu
    return Observed(
        container.id,
        container.pod_sandbox_id,
        container.name,
        _cpus(cpu.cpus, container.id),
        tuple(_cpus(cpu.mems, container.id) or ()) or None,
        cpu.quota.value if cpu.HasField("quota") else None,
    )


def linux_cpu(settings: Settings) -> api.LinuxCPU:
    cpu = api.LinuxCPU(cpus=str(settings.cpus), mems=settings.mems_text)
    if settings.cpu_quota_us is not None:
        cpu.quota.value = settings.cpu_quota_us
        cpu.period.value = settings.cpu_period_us
    return cpu


def container_update(container_id: str, cpu: api.LinuxCPU) -> api.ContainerUpdate:
    update = api.ContainerUpdate(container_id=container_id)
    update.linux.resources.cpu.CopyFrom(cpu)
    # A container may be gone by the time the runtime applies this; that is not worth failing an event.
    update.ignore_failure = True
    return update


def _cpus(text: str, container_id: str) -> CPUSet | None:
    """A cpuset or memory-node list the runtime reports; an unreadable one counts as unknown."""
    try:
        return CPUSet.parse(text) if text else None
    except InputError as err:
        log.warning("container %s: ignoring the runtime's cpuset: %s", container_id[:12], err)
        return None


def by_settings(changed: Mapping[str, Settings]) -> dict[Settings, list[str]]:
    """Container ids grouped by their new settings: when the node shared pool moves, hundreds of containers
    move to one and the same place."""
    groups: dict[Settings, list[str]] = {}
    for container_id, settings in changed.items():
        groups.setdefault(settings, []).append(container_id)
    return groups


def updates_of(changed: Mapping[str, Settings]) -> list[api.ContainerUpdate]:
    """One update per container; each distinct setting is formatted once (a 256-CPU list takes ~30 us)."""
    updates: list[api.ContainerUpdate] = []
    for settings, ids in by_settings(changed).items():
        cpu = linux_cpu(settings)
        updates.extend(container_update(cid, cpu) for cid in ids)
    return updates


def _log_moved(changed: Mapping[str, Settings]) -> None:
    for settings, ids in by_settings(changed).items():
        shown = ", ".join(cid[:12] for cid in ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")
        log.info("updated %d containers (%s): %s cpus=%s", len(ids), shown, settings.assignment.value,
                 settings.cpus)


def _quota_text(quota: int | None) -> str:
    return "untouched" if quota is None else "off" if quota == UNLIMITED_QUOTA else str(quota)


class PodLevelPlugin(Handler):
    """Places containers with the engine; see `agent.placement` for the rules."""

    def __init__(self, placement: Placement) -> None:
        self.placement = placement

    def configure(self, runtime: RuntimeInfo, config: str) -> None:
        log.info("runtime %s %s; engine on %s", runtime.name, runtime.version,
                 self.placement.engine.topology.describe())

    def synchronize(
        self, pods: Sequence[api.PodSandbox], containers: Sequence[api.Container]
    ) -> list[api.ContainerUpdate]:
        live = (api.CONTAINER_CREATED, api.CONTAINER_RUNNING, api.CONTAINER_PAUSED)
        current = [observed_of(c) for c in containers if c.state in live]
        changed, refused = self.placement.synchronize([sandbox_of(p) for p in pods], current)
        for sandbox_id, reason in refused:
            log.warning("pod sandbox %s kept in the node shared pool after resync: %s", sandbox_id, reason)
        log.info("synchronized %d pods, %d containers; %d updates", len(pods), len(current), len(changed))
        return updates_of(changed)

    def create_container(self, pod: api.PodSandbox, container: api.Container) -> CreateResult:
        try:
            settings, changed = self.placement.create(
                sandbox_of(pod), container.id, container.name, runtime_resources(container.linux.resources)
            )
        except AdmissionError as err:
            log.warning("refused %s/%s container %s: %s", pod.namespace, pod.name, container.name, err)
            raise RpcError(Code.FAILED_PRECONDITION, f"{err.type}: {err.message}") from None
        except InputError as err:
            log.warning("bad pod shape for %s/%s: %s", pod.namespace, pod.name, err)
            raise RpcError(Code.INVALID_ARGUMENT, str(err)) from None
        adjust = api.ContainerAdjustment()
        adjust.linux.resources.cpu.CopyFrom(linux_cpu(settings))
        log.info(
            "placed %s/%s container %s: %s cpus=%s mems=%s quota=%s",
            pod.namespace, pod.name, container.name, settings.assignment.value, settings.cpus,
            settings.mems_text, _quota_text(settings.cpu_quota_us),
        )
        _log_moved(changed)
        return CreateResult(adjust=adjust, updates=updates_of(changed))

    def update_container(
        self, pod: api.PodSandbox, container: api.Container, resources: api.LinuxResources
    ) -> UpdateResult:
        """Keep our placement through a resize or another agent's update: the runtime applies the last
        update for the target container as its new resources, so it carries the requested resources with
        our CPU fields laid over them."""
        changed = self.placement.pending_updates()
        # The container's own new settings, if the pool moved, go into its update below, not a second one.
        changed.pop(container.id, None)
        updates = updates_of(changed)
        settings = self.placement.applied.get(container.id)
        if settings is not None:
            own = api.ContainerUpdate(container_id=container.id)
            own.linux.resources.CopyFrom(resources)
            own.linux.resources.cpu.MergeFrom(linux_cpu(settings))
            updates.append(own)
        return UpdateResult(updates=updates)

    def stop_container(self, pod: api.PodSandbox, container: api.Container) -> list[api.ContainerUpdate]:
        return updates_of(self.placement.pending_updates())

    def remove_container(self, pod: api.PodSandbox, container: api.Container) -> None:
        self.placement.remove_container(container.id)

    def stop_pod_sandbox(self, pod: api.PodSandbox) -> None:
        self.placement.remove_sandbox(pod.id)
        log.info("released %s/%s", pod.namespace, pod.name)

    def remove_pod_sandbox(self, pod: api.PodSandbox) -> None:
        self.placement.remove_sandbox(pod.id)
