"""Start a pod from a Kubernetes manifest the way a kubelet would, through CRI.

What the kubelet sends is what the plugin sees, so this follows it: the sandbox carries the pod-level
resources (`PodSandboxConfig.linux.resources`: the pod's `.spec.resources`, else the sum of its containers)
and its cgroup parent names the QoS class; standard init containers run to completion one after the other,
then sidecars and app containers start in declaration order. The pod-shape annotation that lets the plugin
see the whole pod (`podspec.manifest.SHAPE_ANNOTATION`) is added as an admission webhook would add it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from podlevel.engine.pod import CPU, MEMORY, Container, ContainerKind, Pod, QOSClass, Resources
from podlevel.podspec.manifest import SHAPE_ANNOTATION, to_annotation
from podlevel.testbed.cri import CRI, pod_cgroup_parent
from podlevel.testbed.cri import Resources as CRIResources
from podlevel.testbed.wait import wait_until

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
    """The kubelet's CRI form of requests/limits: shares from the CPU request, quota from the limit."""
    cpu_request = resources.requests.get(CPU)
    cpu_limit = resources.limits.get(CPU)
    memory = resources.limits.get(MEMORY)
    return CRIResources.kubelet(
        cpu_request=f"{cpu_request}m" if cpu_request is not None else None,
        cpu_limit=f"{cpu_limit}m" if cpu_limit is not None else None,
        memory_limit=memory,
    )


def _pod_level(pod: Pod) -> Resources:
    """`.spec.resources`, else what the kubelet derives from the containers: the KEP-753 peak of the
    requests, and of the limits when every container sets one."""
    if pod.resources is not None:
        return pod.resources
    names = {n for c in pod.all_containers for n in (*c.resources.requests, *c.resources.limits)}
    requests = {n: pod.aggregate_request(n) for n in names}
    limited = [n for n in names if all(n in c.resources.limits for c in pod.all_containers)]
    as_requests = Pod(pod.uid, pod.name, pod.namespace, None, *(
        tuple(replace(c, resources=Resources(c.resources.limits)) for c in group)
        for group in (pod.init_containers, pod.containers)
    ))
    return Resources(requests, {n: as_requests.aggregate_request(n) for n in limited})


def start_pod(cri: CRI, pod: Pod, *, with_shape: bool = True) -> StartedPod:
    """Run the sandbox and every container of `pod`; raises CRIError as soon as one step fails."""
    qos = _QOS_TIER.get(pod.qos_class(), "besteffort")
    annotations = {SHAPE_ANNOTATION: to_annotation(pod)} if with_shape else {}
    sandbox_id = cri.run_pod(
        pod.name, namespace=pod.namespace, uid=pod.uid, resources=cri_resources(_pod_level(pod)),
        annotations=annotations,
        cgroup_parent=pod_cgroup_parent(cri.cgroup_root, pod.uid, qos) if cri.cgroup_root else None,
    )
    started = StartedPod(sandbox_id)
    for container in pod.init_containers + pod.containers:
        started.containers[container.name] = _start(cri, sandbox_id, container)
    return started


def _start(cri: CRI, sandbox_id: str, container: Container) -> str:
    command = RUN_TO_COMPLETION if container.kind is ContainerKind.INIT else LONG_RUNNING
    container_id = cri.run_container(
        sandbox_id, container.name, command=list(command), resources=cri_resources(container.resources)
    )
    if container.kind is ContainerKind.INIT:
        wait_until(
            lambda: cri.container_status(container_id).state == "CONTAINER_EXITED",
            INIT_TIMEOUT_S,
            f"init container {container.name} to finish",
        )
    return container_id
