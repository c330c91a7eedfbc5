"""Start a pod from a Kubernetes manifest the way a kubelet would, through CRI.

What the kubelet sends is what the plugin sees, so this follows it: standard init containers run to
completion one after the other, then sidecars and app containers start in declaration order; the sandbox's
cgroup parent names the QoS class. The pod-shape annotation that lets the plugin see the whole pod
(`podspec.manifest.SHAPE_ANNOTATION`) is added as an admission webhook would add it.

The CRI resources follow a kubelet 1.34+ with `PodLevelResources` on, CFS quota on, the default period and
no exclusive CPUs of its own (kubernetes/kubernetes):
- One conversion serves sandbox and containers (`calculateLinuxResources`,
  pkg/kubelet/kuberuntime/kuberuntime_container_linux.go): `cpu_shares` is `MilliCPUToShares` of the CPU
  request when one is present, else of the CPU limit (2 when neither is set); `cpu_quota` is
  `MilliCPUToQuota` of the CPU limit (0 without one); `cpu_period` is the period (100000 us) always, limit
  or not; `memory_limit_in_bytes` is the memory limit, unset without one. With
  `DisableCPUQuotaWithExclusiveCPUs` a container (or sandbox) holding exclusive CPUs gets quota -1.
- Sandbox, `PodSandboxConfig.linux.resources` (`calculateSandboxResources`/`applySandboxResources`,
  pkg/kubelet/kuberuntime/kuberuntime_sandbox_linux.go): the request is `PodRequests` and the limit
  `PodLimits` (staging/src/k8s.io/component-helpers/resource/helpers.go), overhead excluded. Both start from
  the containers' KEP-753 aggregate (apps plus sidecars, or the peak init container plus the sidecars
  before it, whichever is larger) of whatever each container declares, limits included: containers without
  a limit simply add nothing, so the sandbox's limit is a sum even when only some containers set one. Then
  each resource the pod-level `.spec.resources` names replaces the aggregate for that resource alone
  (requests from `.spec.resources.requests`, limits from `.spec.resources.limits`); a pod-level budget of
  only memory leaves CPU to the containers, and the other way round. A CPU request exists when the
  aggregate or the pod level has one; otherwise shares come from the CPU limit.
- Container, `LinuxContainerResources` (`generateLinuxContainerResources`, `getCPULimit`, `getMemoryLimit`,
  same file): the CPU request is the container's own, if it has one. When the pod sets pod-level resources
  (`IsPodLevelResourcesSet`: `.spec.resources` names cpu, memory or hugepages) a container without its own
  CPU limit takes the pod-level CPU limit, and one without its own memory limit the pod-level memory limit
  (zero when the pod level has none). So a container with no resources in a pod with pod-level limits gets
  shares and quota from the pod's CPU limit and the pod's memory limit; with only a pod-level memory limit
  it gets shares 2, no quota and that memory limit; with only a pod-level CPU limit, shares and quota from
  it and no memory limit. A container with its own limits keeps them.
- API defaulting, which runs before the kubelet sees the pod (pkg/apis/core/v1/defaults.go): a container's
  limit without a request becomes its request too; a pod-level limit without a pod-level request becomes
  that request. `engine.pod.Resources.request` applies the same rule, so the engine pod is the defaulted one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from podlevel.engine.cfs import CFS_PERIOD_US, milli_cpu_to_quota, milli_cpu_to_shares
from podlevel.engine.pod import CPU, MEMORY, Container, ContainerKind, Pod, QOSClass, Resources
from podlevel.podspec.manifest import SHAPE_ANNOTATION, to_annotation
from testbed.cri import CRI, pod_cgroup_parent
from testbed.cri import Resources as CRIResources
from testbed.wait import wait_until

LONG_RUNNING = ("sleep", "86400")
RUN_TO_COMPLETION = ("true",)
INIT_TIMEOUT_S = 30.0
_QOS_TIER = {QOSClass.GUARANTEED: "guaranteed", QOSClass.BURSTABLE: "burstable"}


@dataclass
class StartedPod:
    sandbox_id: str
    containers: dict[str, str] = field(default_factory=dict)
    """container name -> container id, in start order."""


def cri_resources(resources: Resources) -> CRIResources:
    """The kubelet's conversion of one set of requests and limits (`calculateLinuxResources`); a CPU
    request absent here falls back to the CPU limit, as the kubelet's shares do."""
    return CRIResources(
        cpu_shares=milli_cpu_to_shares(resources.request(CPU)),
        cpu_quota=milli_cpu_to_quota(resources.limits.get(CPU, 0), CFS_PERIOD_US),
        cpu_period=CFS_PERIOD_US,
        memory_limit=resources.limits.get(MEMORY, 0),
    )


def sandbox_resources(pod: Pod) -> CRIResources:
    """`PodSandboxConfig.linux.resources`: the containers' aggregate, each resource the pod level names
    replaced by its pod-level value."""
    declared = {n for c in pod.all_containers for n in (*c.resources.requests, *c.resources.limits)}
    requests = {n: pod.aggregate_request(n) for n in declared}
    limited = {n for c in pod.all_containers for n in c.resources.limits}
    as_requests = Pod(pod.uid, pod.name, pod.namespace, None, *(
        tuple(replace(c, resources=Resources(c.resources.limits)) for c in group)
        for group in (pod.init_containers, pod.containers)
    ))
    limits = {n: as_requests.aggregate_request(n) for n in limited}
    if pod.resources is not None:
        requests |= {n: pod.resources.request(n) for n in (*pod.resources.requests, *pod.resources.limits)}
        limits |= pod.resources.limits
    return cri_resources(Resources(requests, limits))


def container_resources(pod: Pod, container: Container) -> CRIResources:
    """A container's `LinuxContainerResources`: its own request and limits, a missing CPU or memory limit
    taken from the pod level when the pod sets pod-level resources."""
    own = container.resources
    if pod.resources is None or pod.resources.is_empty():
        return cri_resources(own)
    return cri_resources(Resources(own.requests, {**pod.resources.limits, **own.limits}))


def start_pod(cri: CRI, pod: Pod, *, with_shape: bool = True) -> StartedPod:
    """Run the sandbox and every container of `pod`; raises CRIError as soon as one step fails."""
    qos = _QOS_TIER.get(pod.qos_class(), "besteffort")
    annotations = {SHAPE_ANNOTATION: to_annotation(pod)} if with_shape else {}
    sandbox_id = cri.run_pod(
        pod.name, namespace=pod.namespace, uid=pod.uid, resources=sandbox_resources(pod),
        annotations=annotations,
        cgroup_parent=pod_cgroup_parent(cri.cgroup_root, pod.uid, qos) if cri.cgroup_root else None,
    )
    started = StartedPod(sandbox_id)
    for container in pod.init_containers + pod.containers:
        started.containers[container.name] = _start(cri, sandbox_id, pod, container)
    return started


def _start(cri: CRI, sandbox_id: str, pod: Pod, container: Container) -> str:
    command = RUN_TO_COMPLETION if container.kind is ContainerKind.INIT else LONG_RUNNING
    container_id = cri.run_container(
        sandbox_id, container.name, command=list(command), resources=container_resources(pod, container)
    )
    if container.kind is ContainerKind.INIT:
        wait_until(
            lambda: cri.container_status(container_id).state == "CONTAINER_EXITED",
            INIT_TIMEOUT_S,
            f"init container {container.name} to finish",
        )
    return container_id
