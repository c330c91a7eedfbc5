"""What the runtime sends a plugin about a pod, with what a kubelet-created sandbox and container carry
besides what the plugin reads (labels, annotations, args, env, mounts): the same bytes to both plugins."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Final

from google.protobuf.message import Message

from benchmark.stats import FIRST, LATER
from podlevel.engine.pod import Container, Pod
from podlevel.nri import api
from podlevel.nri.runtime import Event
from podlevel.podspec.manifest import SHAPE_ANNOTATION, to_annotation
from podlevel.podspec.runtime import container_resources, sandbox_resources
from support.builders import linux_resources


def sandbox_message(pod: Pod) -> api.PodSandbox:
    """A sandbox with what a kubelet-created one carries besides the shape: labels, annotations, cgroup."""
    message = api.PodSandbox(
        id=f"sandbox-{pod.uid}",
        name=pod.name,
        uid=pod.uid,
        namespace=pod.namespace,
        labels={"app": pod.name, "io.kubernetes.pod.name": pod.name, "io.kubernetes.pod.uid": pod.uid},
        annotations={
            SHAPE_ANNOTATION: to_annotation(pod),
            "kubernetes.io/config.source": "api",
            "kubernetes.io/config.seen": "2025-01-01T00:00:00.000000000Z",
        },
        runtime_handler="runc",
    )
    message.linux.cgroup_parent = f"/kubepods/burstable/pod{pod.uid}"
    message.linux.pod_resources.CopyFrom(linux_resources(sandbox_resources(pod)))
    return message


def container_message(pod: Pod, sandbox: api.PodSandbox, container: Container) -> api.Container:
    """A running container with what the runtime reports besides its name: args, env, mounts, resources."""
    message = api.Container(
        id=f"{sandbox.id}-{container.name}",
        pod_sandbox_id=sandbox.id,
        name=container.name,
        state=api.CONTAINER_RUNNING,
        labels={"io.kubernetes.container.name": container.name, "io.kubernetes.pod.name": sandbox.name},
        args=["/bin/server", "--port=8080"],
        env=[f"VARIABLE_{i}=value-{i}" for i in range(10)],
        mounts=[
            api.Mount(destination=f"/mnt/volume-{i}", type="bind", source=f"/var/lib/kubelet/pods/{i}",
                      options=["rbind", "rprivate", "rw"])
            for i in range(4)
        ],
    )
    message.linux.resources.CopyFrom(linux_resources(container_resources(pod, container)))
    message.linux.cgroups_path = f"{sandbox.linux.cgroup_parent}/{message.id}"
    return message


@dataclass(frozen=True)
class Call:
    """One message the runtime sends a plugin about a pod; `label` is what its round trip is counted as
    (FIRST or LATER for CreateContainer, else the event's name)."""

    method: str
    message: Message
    pod: str
    label: str
    last: bool = False
    """The last event of the pod's lifecycle."""


def _notification(event: Event, sandbox: api.PodSandbox, container: api.Container | None = None) -> Message:
    """A notification as containerd before NRI v0.12 sends it: StateChange."""
    return api.StateChangeEvent(event=api.Event.Name(event), pod=sandbox, container=container)


def pod_start(mask: int, pod: Pod) -> list[Call]:
    """What a runtime sends a plugin subscribed to `mask` while a pod starts, in the runtime's order."""
    sandbox = sandbox_message(pod)
    calls = []
    if mask & Event.RUN_POD_SANDBOX.bit:
        calls.append(Call("StateChange", _notification(Event.RUN_POD_SANDBOX, sandbox), pod.uid,
                          Event.RUN_POD_SANDBOX.name))
    for index, spec in enumerate(pod.all_containers):
        container = container_message(pod, sandbox, spec)
        if mask & Event.CREATE_CONTAINER.bit:
            calls.append(Call("CreateContainer", api.CreateContainerRequest(pod=sandbox, container=container),
                              pod.uid, LATER if index else FIRST))
        for event in (Event.POST_CREATE_CONTAINER, Event.START_CONTAINER, Event.POST_START_CONTAINER):
            if mask & event.bit:
                notification = _notification(event, sandbox, container)
                calls.append(Call("StateChange", notification, pod.uid, event.name))
    return calls


def pod_stop(mask: int, pod: Pod) -> list[Call]:
    """What a runtime sends a plugin subscribed to `mask` while a pod stops and is removed."""
    sandbox = sandbox_message(pod)
    calls = []
    for spec in pod.all_containers:
        container = container_message(pod, sandbox, spec)
        if mask & Event.STOP_CONTAINER.bit:
            calls.append(Call("StopContainer", api.StopContainerRequest(pod=sandbox, container=container),
                              pod.uid, Event.STOP_CONTAINER.name))
        if mask & Event.REMOVE_CONTAINER.bit:
            notification = _notification(Event.REMOVE_CONTAINER, sandbox, container)
            calls.append(Call("StateChange", notification, pod.uid, Event.REMOVE_CONTAINER.name))
    for event in (Event.STOP_POD_SANDBOX, Event.REMOVE_POD_SANDBOX):
        if mask & event.bit:
            calls.append(Call("StateChange", _notification(event, sandbox), pod.uid, event.name))
    if calls:
        calls[-1] = dataclasses.replace(calls[-1], last=True)
    return calls


REPLY_TYPES: Final[dict[str, type[Message]]] = {
    "CreateContainer": api.CreateContainerResponse,
    "StopContainer": api.StopContainerResponse,
    "StateChange": api.Empty,
}
