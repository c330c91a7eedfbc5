"""Start a pod from a Kubernetes manifest the way a kubelet would, through CRI.

The plugin sees what the kubelet sends, so this sends the same. Containers start in declaration order, init
containers and sidecars first; each standard init container runs to completion before the next container
starts. The sandbox's cgroup parent is the pod cgroup a kubelet makes in the pod's QoS tier. The CRI resources
are the kubelet's, from the one model in `podspec.runtime`. The pod-shape annotation
(`podspec.manifest.SHAPE_ANNOTATION`), which lets the plugin see the whole pod, is either added here as the
admission webhook would add it (`start_pod`) or comes from the real webhook through `testbed.apiserver`
(`start_annotated_pod`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from podlevel.engine.pod import Container, ContainerKind, Pod, QOSClass
from podlevel.podspec.manifest import SHAPE_ANNOTATION, to_annotation
from podlevel.podspec.runtime import container_resources, sandbox_resources
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


def qos_tier(pod: Pod) -> str:
    """The kubepods tier a kubelet puts the pod cgroup in (`guaranteed` sits right under kubepods)."""
    return _QOS_TIER.get(pod.qos_class(), "besteffort")


def cgroup_parent(cri: CRI, pod: Pod) -> str | None:
    """The pod cgroup `start_pod` gives the sandbox: under the client's cgroup root, in the QoS tier."""
    if not cri.cgroup_root:
        return None
    return pod_cgroup_parent(cri.cgroup_root, pod.uid, qos_tier(pod))


def start_pod(cri: CRI, pod: Pod, *, with_shape: bool = True) -> StartedPod:
    """Run the sandbox and every container of `pod` with the pod-shape annotation (as the admission webhook
    sets it) or none; raises CRIError as soon as one step fails."""
    return start_annotated_pod(cri, pod, {SHAPE_ANNOTATION: to_annotation(pod)} if with_shape else {})


def start_annotated_pod(cri: CRI, pod: Pod, annotations: Mapping[str, str]) -> StartedPod:
    """`start_pod` with the pod's annotations as the API server stored them (`testbed.apiserver`)."""
    sandbox_id = cri.run_pod(
        pod.name, namespace=pod.namespace, uid=pod.uid, resources=CRIResources.of(sandbox_resources(pod)),
        annotations=annotations, cgroup_parent=cgroup_parent(cri, pod),
    )
    started = StartedPod(sandbox_id)
    for container in pod.init_containers + pod.containers:
        started.containers[container.name] = start_container(cri, sandbox_id, pod, container)
    return started


def start_container(cri: CRI, sandbox_id: str, pod: Pod, container: Container, *, attempt: int = 0) -> str:
    """Create and start one container of `pod` (again, after a restart, with a higher `attempt`); a
    standard init container is waited on until it exited."""
    command = RUN_TO_COMPLETION if container.kind is ContainerKind.INIT else LONG_RUNNING
    container_id = cri.run_container(
        sandbox_id, container.name, command=list(command),
        resources=CRIResources.of(container_resources(pod, container)), attempt=attempt,
    )
    if container.kind is ContainerKind.INIT:
        wait_until(
            lambda: cri.container_status(container_id).state == "CONTAINER_EXITED",
            INIT_TIMEOUT_S,
            f"init container {container.name} to finish",
        )
    return container_id
