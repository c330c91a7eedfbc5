"""How the kubelet turns a pod into the CPU and memory settings the runtime receives over CRI.

An NRI plugin sees the pod only through those settings, so two parts of the project must model the same
kubelet functions: the agent, to check a pod-shape annotation against what the kubelet really sent, and
the test bed's kubelet-like CRI driver, to send what a kubelet sends. This module is that one model. It
follows a kubelet 1.34+ with `PodLevelResources` on, CFS quota on and no exclusive CPUs of its own
(kubernetes/kubernetes):

- One conversion serves sandbox and containers (`calculateLinuxResources`,
  pkg/kubelet/kuberuntime/kuberuntime_container_linux.go): `cpu_shares` is `MilliCPUToShares` of the CPU
  request, which defaults to the CPU limit (2 when neither is set); `cpu_quota` is `MilliCPUToQuota` of the
  CPU limit (0 without one); `cpu_period` is always sent, limit or not; `memory_limit` is the memory limit,
  0 (unset) without one. With `DisableCPUQuotaWithExclusiveCPUs` a container holding exclusive CPUs gets
  quota -1 instead (`cfs.UNLIMITED_QUOTA`); that is the CPU manager's doing, not this conversion's.
- Sandbox, `PodSandboxConfig.linux.resources` (`calculateSandboxResources`,
  pkg/kubelet/kuberuntime/kuberuntime_sandbox_linux.go): requests and limits are `PodRequests` and
  `PodLimits` (staging/src/k8s.io/component-helpers/resource/helpers.go) without overhead. Both start from
  the containers' KEP-753 aggregate (`Pod.aggregate_request`: the larger of the peak init container with
  the sidecars before it and all that runs together) of whatever each container declares; containers
  without a limit add nothing, so the sandbox's limit is a sum even when only some containers set one.
  Then each resource the pod-level `.spec.resources` names replaces the aggregate for that resource alone.
- Container, `LinuxContainerResources` (`generateLinuxContainerResources`, `getCPULimit`,
  `getMemoryLimit`, same file): the container's own request and limits; when the pod sets pod-level
  resources (`IsPodLevelResourcesSet`: `.spec.resources` is not empty) a missing CPU or memory limit is
  taken from the pod level.
- API defaulting runs before the kubelet sees the pod (pkg/apis/core/v1/defaults.go): a limit without a
  request becomes the request too, which `engine.pod.Resources.request` applies.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from podlevel.engine.cfs import CFS_PERIOD_US, milli_cpu_to_quota, milli_cpu_to_shares
from podlevel.engine.pod import CPU, MEMORY, Container, Pod, Resources


@dataclass(frozen=True, slots=True)
class RuntimeResources:
    """The CPU and memory fields of CRI's `LinuxContainerResources`; 0 means not set, as in CRI."""

    cpu_shares: int = 0
    cpu_quota: int = 0
    cpu_period: int = 0
    memory_limit: int = 0


def linux_resources(resources: Resources, period: int = CFS_PERIOD_US) -> RuntimeResources:
    """The kubelet's conversion of one set of requests and limits (`calculateLinuxResources`)."""
    return RuntimeResources(
        cpu_shares=milli_cpu_to_shares(resources.request(CPU)),
        cpu_quota=milli_cpu_to_quota(resources.limits.get(CPU, 0), period),
        cpu_period=period,
        memory_limit=resources.limits.get(MEMORY, 0),
    )


def sandbox_resources(pod: Pod, period: int = CFS_PERIOD_US) -> RuntimeResources:
    """`PodSandboxConfig.linux.resources`: the containers' aggregate, each resource the pod level names
    replaced by its pod-level value."""
    declared = {n for c in pod.all_containers for n in (*c.resources.requests, *c.resources.limits)}
    requests = {n: pod.aggregate_request(n) for n in declared}
    limited = {n for c in pod.all_containers for n in c.resources.limits}
    # The limits aggregate the same way as the requests: the pod with every container's limits as its
    # requests (and no limits, so the request does not fall back to one).
    as_requests = Pod(pod.uid, pod.name, pod.namespace, None, *(
        tuple(replace(c, resources=Resources(c.resources.limits)) for c in group)
        for group in (pod.init_containers, pod.containers)
    ))
    limits = {n: as_requests.aggregate_request(n) for n in limited}
    if pod.resources is not None:
        requests |= {n: pod.resources.request(n) for n in (*pod.resources.requests, *pod.resources.limits)}
        limits |= pod.resources.limits
    return linux_resources(Resources(requests, limits), period)


def container_resources(
    pod: Pod, container: Container | None, period: int = CFS_PERIOD_US
) -> RuntimeResources:
    """A container's `LinuxContainerResources`: its own request and limits, a missing CPU or memory limit
    taken from the pod level when the pod sets pod-level resources. `None` stands for a container the pod
    does not declare (an ephemeral container), which declares nothing of its own."""
    own = container.resources if container is not None else Resources()
    if pod.resources is None or pod.resources.is_empty():
        return linux_resources(own, period)
    return linux_resources(Resources(own.requests, {**pod.resources.limits, **own.limits}), period)
