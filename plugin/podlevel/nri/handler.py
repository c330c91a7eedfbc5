"""The plugin-facing API: subclass `Handler`, override the events you need.

The stub subscribes to exactly the events whose methods a subclass overrides (`subscribed_events`), so the
subscription can never disagree with the code. Every method may be a plain function or an `async def`;
the stub awaits whatever is awaitable, calls handlers one at a time, and must answer within the runtime's
request timeout (2 s by default), so handlers must be quick.

Arguments are the generated protobuf messages (`podlevel.nri.api`): `api.PodSandbox`, `api.Container`,
`api.LinuxResources`. Treat them as read-only. Results name what the runtime does with them:
- `adjust` changes the container being created;
- `updates` change resources of *other* existing containers (never the one being created);
- `evictions` ask the runtime to evict containers.
An answer is one ttrpc message and the runtime takes none over 4 MiB; a handler that may return many
updates fits them with `updates_within(updates, MAX_REPLY_BYTES - field_size(rest))` and keeps the others
for a later answer (a reply the transport cannot send fails the event with ResourceExhausted).
Raising fails the event: for CreateContainer, RunPodSandbox, StartContainer and UpdateContainer the runtime
fails the CRI operation with the message; for the others it only logs it. Raise
`podlevel.nri.RpcError` with a `podlevel.nri.Code` to choose the status code; any other exception, or a
result that makes no valid reply, answers Internal naming it. Either way only that event fails: the
connection stays.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeAlias, TypeVar

from google.protobuf.message import Message

from podlevel._proto.nri import api_pb2 as api
from podlevel.nri.runtime import Event, RuntimeInfo, mask_of
from podlevel.ttrpc.codec import MAX_RESPONSE_PAYLOAD

T = TypeVar("T")
MaybeAwaitable: TypeAlias = T | Awaitable[T]
Updates: TypeAlias = Sequence[api.ContainerUpdate]

MAX_REPLY_BYTES: Final = MAX_RESPONSE_PAYLOAD
"""The most an event's reply message may take, encoded."""


def field_size(message: Message) -> int:
    """Bytes `message` takes as a field of a reply (field numbers below 16): tag, length, body."""
    size = message.ByteSize()
    return 1 + max(1, (size.bit_length() + 6) // 7) + size


def updates_within(updates: Updates, budget: int) -> int:
    """How many of `updates`, from the first, fit in `budget` bytes of a reply's repeated update field."""
    used = 0
    for count, update in enumerate(updates):
        used += field_size(update)
        if used > budget:
            return count
    return len(updates)


@dataclass(frozen=True, slots=True)
class CreateResult:
    """Answer to CreateContainer."""

    adjust: api.ContainerAdjustment | None = None
    updates: Updates = ()
    evictions: Sequence[api.ContainerEviction] = ()


@dataclass(frozen=True, slots=True)
class UpdateResult:
    """Answer to UpdateContainer; an update for the container being updated replaces its new resources."""

    updates: Updates = ()
    evictions: Sequence[api.ContainerEviction] = ()


class Handler:
    """Base class of an NRI plugin. Default methods do nothing and are not subscribed to."""

    def configure(self, runtime: RuntimeInfo, config: str) -> MaybeAwaitable[None]:
        """The runtime describes itself; `config` is the plugin's config file text (launched plugins only)."""

    def synchronize(
        self, pods: Sequence[api.PodSandbox], containers: Sequence[api.Container]
    ) -> MaybeAwaitable[Updates | None]:
        """Every pod and container the runtime knows, on each (re)connect; reconcile and return updates."""

    def run_pod_sandbox(self, pod: api.PodSandbox) -> MaybeAwaitable[None]: ...

    def update_pod_sandbox(
        self, pod: api.PodSandbox, overhead: api.LinuxResources, resources: api.LinuxResources
    ) -> MaybeAwaitable[None]:
        """NRI >= v0.10.0 only (containerd >= 2.2); never subscribed to on older runtimes."""

    def post_update_pod_sandbox(self, pod: api.PodSandbox) -> MaybeAwaitable[None]:
        """NRI >= v0.10.0 only (containerd >= 2.2); never subscribed to on older runtimes."""

    def stop_pod_sandbox(self, pod: api.PodSandbox) -> MaybeAwaitable[None]: ...

    def remove_pod_sandbox(self, pod: api.PodSandbox) -> MaybeAwaitable[None]: ...

    def create_container(
        self, pod: api.PodSandbox, container: api.Container
    ) -> MaybeAwaitable[CreateResult | None]: ...

    def post_create_container(
        self, pod: api.PodSandbox, container: api.Container
    ) -> MaybeAwaitable[None]: ...

    def start_container(self, pod: api.PodSandbox, container: api.Container) -> MaybeAwaitable[None]: ...

    def post_start_container(self, pod: api.PodSandbox, container: api.Container) -> MaybeAwaitable[None]: ...

    def update_container(
        self, pod: api.PodSandbox, container: api.Container, resources: api.LinuxResources
    ) -> MaybeAwaitable[UpdateResult | None]:
        """`resources` are the container's requested new resources (in-place resize, CPU manager)."""

    def post_update_container(
        self, pod: api.PodSandbox, container: api.Container
    ) -> MaybeAwaitable[None]: ...

    def stop_container(self, pod: api.PodSandbox, container: api.Container) -> MaybeAwaitable[Updates | None]:
        """Also sent for a container whose creation failed, and when a task exits by itself."""

    def remove_container(self, pod: api.PodSandbox, container: api.Container) -> MaybeAwaitable[None]: ...

    def validate_container_adjustment(
        self, request: api.ValidateContainerAdjustmentRequest
    ) -> MaybeAwaitable[str | None]:
        """NRI >= v0.10.0 only: return a reason to reject the merged adjustments, None to accept them."""


def _create_reply(result: CreateResult | None) -> Message:
    result = result or CreateResult()
    return api.CreateContainerResponse(adjust=result.adjust, update=result.updates, evict=result.evictions)


def _update_reply(result: UpdateResult | None) -> Message:
    result = result or UpdateResult()
    return api.UpdateContainerResponse(update=result.updates, evict=result.evictions)


def _stop_reply(updates: Updates | None) -> Message:
    return api.StopContainerResponse(update=updates or ())


def _validate_reply(reason: str | None) -> Message:
    return api.ValidateContainerAdjustmentResponse(reject=reason is not None, reason=reason or "")


@dataclass(frozen=True, slots=True)
class EventRoute:
    """How one event reaches a handler and what goes back.

    `method` serves the event and `rpc` is its dedicated RPC (NRI >= v0.12.0), taking `request`. `unpack`
    takes the method's arguments out of the request when they are not (pod, container) or (pod). `reply`
    builds the response from the method's result; without one the reply is empty.
    """

    method: Callable[..., object]
    rpc: str
    request: type[Message]
    unpack: Callable[[Any], tuple[object, ...]] | None = None
    reply: Callable[[Any], Message] | None = None

    @property
    def about_container(self) -> bool:
        """The event names a container, so its method takes (pod, container); otherwise (pod) alone."""
        return "container" in self.request.DESCRIPTOR.fields_by_name

    @property
    def is_notification(self) -> bool:
        """Fed from pod and container alone and answered empty: all a StateChangeEvent can carry."""
        return self.unpack is None and self.reply is None

    def arguments(self, request: Any) -> tuple[object, ...]:
        """The method's arguments from `request`: the dedicated RPC's request, or a StateChangeEvent."""
        if self.unpack is not None:
            return self.unpack(request)
        return (request.pod, request.container) if self.about_container else (request.pod,)


# The one table of events: the stub subscribes to an event when its method is overridden, and serves its
# RPC (and StateChange, for events that are notifications) with that method.
EVENT_ROUTES: Final[Mapping[Event, EventRoute]] = {
    Event.RUN_POD_SANDBOX: EventRoute(Handler.run_pod_sandbox, "RunPodSandbox", api.RunPodSandboxRequest),
    Event.STOP_POD_SANDBOX: EventRoute(Handler.stop_pod_sandbox, "StopPodSandbox", api.StopPodSandboxRequest),
    Event.REMOVE_POD_SANDBOX: EventRoute(
        Handler.remove_pod_sandbox, "RemovePodSandbox", api.RemovePodSandboxRequest
    ),
    Event.CREATE_CONTAINER: EventRoute(
        Handler.create_container, "CreateContainer", api.CreateContainerRequest, reply=_create_reply
    ),
    Event.POST_CREATE_CONTAINER: EventRoute(
        Handler.post_create_container, "PostCreateContainer", api.PostCreateContainerRequest
    ),
    Event.START_CONTAINER: EventRoute(Handler.start_container, "StartContainer", api.StartContainerRequest),
    Event.POST_START_CONTAINER: EventRoute(
        Handler.post_start_container, "PostStartContainer", api.PostStartContainerRequest
    ),
    Event.UPDATE_CONTAINER: EventRoute(
        Handler.update_container,
        "UpdateContainer",
        api.UpdateContainerRequest,
        unpack=lambda request: (request.pod, request.container, request.linux_resources),
        reply=_update_reply,
    ),
    Event.POST_UPDATE_CONTAINER: EventRoute(
        Handler.post_update_container, "PostUpdateContainer", api.PostUpdateContainerRequest
    ),
    Event.STOP_CONTAINER: EventRoute(
        Handler.stop_container, "StopContainer", api.StopContainerRequest, reply=_stop_reply
    ),
    Event.REMOVE_CONTAINER: EventRoute(
        Handler.remove_container, "RemoveContainer", api.RemoveContainerRequest
    ),
    Event.UPDATE_POD_SANDBOX: EventRoute(
        Handler.update_pod_sandbox,
        "UpdatePodSandbox",
        api.UpdatePodSandboxRequest,
        unpack=lambda request: (request.pod, request.overhead_linux_resources, request.linux_resources),
    ),
    Event.POST_UPDATE_POD_SANDBOX: EventRoute(
        Handler.post_update_pod_sandbox, "PostUpdatePodSandbox", api.PostUpdatePodSandboxRequest
    ),
    Event.VALIDATE_CONTAINER_ADJUSTMENT: EventRoute(
        Handler.validate_container_adjustment,
        "ValidateContainerAdjustment",
        api.ValidateContainerAdjustmentRequest,
        unpack=lambda request: (request,),
        reply=_validate_reply,
    ),
}


def subscribed_events(handler: Handler) -> int:
    """The subscription mask of `handler`: the bits of the events whose methods its class overrides."""
    cls = type(handler)
    return mask_of(
        event
        for event, route in EVENT_ROUTES.items()
        if getattr(cls, route.method.__name__) is not route.method
    )
