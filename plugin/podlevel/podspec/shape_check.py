"""Whether a pod-shape annotation describes the pod the scheduler admitted: the values the kubelet sends over
CRI for the pod the shape describes, set beside what the runtime actually carries. Pure, no I/O.

The annotation is written by the webhook from the pod's spec, but the runtime's values come from the kubelet:
a shape that claims more than the scheduler accounted for (edited by hand, or forged) is refused with
InputError naming both values. The kubelet's CRI cases (`tests/support/kubelet_cri_cases.py`) are the table
the check is tested on.
"""

from __future__ import annotations

from podlevel.engine.errors import InputError
from podlevel.engine.pod import CPU, MEMORY, Pod
from podlevel.podspec.manifest import SHAPE_ANNOTATION
from podlevel.podspec.runtime import RuntimeResources, container_resources, sandbox_resources


def claimed_sandbox(pod: Pod, period: int) -> RuntimeResources:
    """The sandbox values the check compares, of what the kubelet sends for the pod a shape describes: the
    fields the pod level decides (CPU shares and quota from a pod-level CPU budget, the memory limit from a
    pod-level memory limit). Without pod-level resources only the shares, the containers' peak CPU request.
    The other fields stay 0 (not compared): the kubelet takes them from the containers' sums, and the check
    trusts only what the pod's own budget fixes."""
    sent = sandbox_resources(pod, period)
    if pod.resources is None:
        return RuntimeResources(cpu_shares=sent.cpu_shares)
    cpu = CPU in pod.resources.requests or CPU in pod.resources.limits
    return RuntimeResources(
        cpu_shares=sent.cpu_shares if cpu else 0,
        cpu_quota=sent.cpu_quota if CPU in pod.resources.limits else 0,
        memory_limit=sent.memory_limit if MEMORY in pod.resources.limits else 0,
    )


def claimed_container(pod: Pod, name: str, period: int) -> RuntimeResources | None:
    """What the kubelet sends for a container that declares its own CPU and memory limits (the ones that can
    claim exclusive CPUs); None for the others, whose values the kubelet derives from the pod's."""
    container = pod.container(name)
    if container is None or not {CPU, MEMORY} <= container.resources.limits.keys():
        return None
    return container_resources(pod, container, period)


def kubelet_quota(pod: Pod, name: str, period: int) -> int | None:
    """The CFS quota the kubelet gives a container; None (leave it) when it sets none."""
    return container_resources(pod, pod.container(name), period).cpu_quota or None


def verify_shape(claimed: RuntimeResources, actual: RuntimeResources, what: str, *, required: bool) -> None:
    """Refuse a shape whose CPU or memory differs from what the runtime carries for the same pod or container.

    Only values both sides carry are compared (a quota of -1 is the kubelet's
    `DisableCPUQuotaWithExclusiveCPUs` lifting it, which says nothing of the limit). When the runtime
    carries nothing at all and the claim is `required` (a bubble, or a container's own CPUs), the claim is
    unverifiable and refused: the kubelet always sends CPU shares, so their absence means the values that
    would confirm the claim never reached the plugin, and honouring it would hand out CPUs the scheduler
    never accounted for.
    """
    if required and claimed != RuntimeResources() and not (
        actual.cpu_shares or actual.cpu_quota or actual.memory_limit
    ):
        raise InputError(
            "pod shape",
            f"{what}: the {SHAPE_ANNOTATION} annotation claims resources the runtime carries none of (no CPU "
            "shares, quota or memory limit), so the claim cannot be checked against what the scheduler "
            "admitted",
        )
    for field_name, unit in (("cpu_shares", ""), ("cpu_quota", " us"), ("memory_limit", " bytes")):
        have, want = getattr(actual, field_name), getattr(claimed, field_name)
        if have > 0 and want > 0 and have != want:
            raise InputError(
                "pod shape",
                f"{what}: the {SHAPE_ANNOTATION} annotation implies {field_name} {want}{unit}, but the "
                f"runtime carries {have}{unit}; the annotation must describe the pod the scheduler admitted",
            )
