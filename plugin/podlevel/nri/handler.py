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
for a later answer (a reply the transport cannot send fails the event with ResourceExhausted). Updates of
many containers moving to the same settings are best returned as an `UpdateBatch`: it builds no message
per container and encodes each distinct setting once.
Raising fails the event: for CreateContainer, RunPodSandbox, StartContainer and UpdateContainer the runtime
fails the CRI operation with the message; for the others it only logs it. Raise
`podlevel.nri.RpcError` with a `podlevel.nri.Code` to choose the status code; any other exception, or a
result that makes no valid reply, answers Internal naming it. Either way only that event fails: the
connection stays.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeAlias, TypeVar, overload

from google.protobuf.message import Message

from podlevel._proto.nri import api_pb2 as api
from podlevel.nri.runtime import Event, RuntimeInfo, mask_of
from podlevel.ttrpc.codec import MAX_RESPONSE_PAYLOAD

T = TypeVar("T")
MaybeAwaitable: TypeAlias = T | Awaitable[T]
Updates: TypeAlias = Sequence[api.ContainerUpdate]

MAX_REPLY_BYTES: Final = MAX_RESPONSE_PAYLOAD
"""The most an event's reply message may take, encoded."""


def _varint_size(value: int) -> int:
    return max(1, (value.bit_length() + 6) // 7)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field_size(length: int) -> int:
    """Bytes a length-delimited field of `length` bytes takes (field numbers below 16): tag, length, body."""
    return 1 + _varint_size(length) + length


def field_size(message: Message) -> int:
    """Bytes `message` takes as a field of a reply (field numbers below 16)."""
    return _field_size(message.ByteSize())


class _Group:
    """Containers that take one and the same update; `shared` is that update encoded, without an id."""

    __slots__ = ("ids", "shared", "template", "uniform")

    def __init__(self, ids: list[str], template: api.ContainerUpdate, shared: bytes) -> None:
        self.ids = ids
        self.template = template
        self.shared = shared
        lengths = set(map(len, ids))
        self.uniform = lengths.pop() if len(lengths) == 1 and "".join(ids).isascii() else None
        """The length of every id, when all are ASCII (a byte each) and of one length: container ids are."""

    def sizes(self) -> Iterator[tuple[int, int]]:
        """(count, field size of each) over the group's ids in order: runs of ids of one encoded length."""
        if self.uniform is not None:
            runs: Iterable[tuple[int, int]] = [(self.uniform, len(self.ids))]
        else:
            encoded = itertools.groupby(len(cid.encode()) for cid in self.ids)
            runs = [(length, sum(1 for _ in run)) for length, run in encoded]
        for length, count in runs:
            body = (_field_size(length) if length else 0) + len(self.shared)
            yield count, _field_size(body)

    def encoded(self, tag: bytes) -> bytes:
        """The group's updates as entries of the repeated field whose tag is `tag`, in order."""
        if self.uniform:
            # Every entry is the same head, the id, the shared part: one join. Latin-1 maps each byte to the
            # character of the same number and back, so the ASCII ids stand for their own UTF-8 bytes.
            length = self.uniform
            body = _field_size(length) + len(self.shared)
            head = tag + _varint(body) + b"\x0a" + _varint(length)
            joined = (self.shared + head).decode("latin-1").join(self.ids)
            return head + joined.encode("latin-1") + self.shared
        # Otherwise each entry is the head for its id's length (protobuf leaves an empty id out), the id, the
        # shared part.
        shared = self.shared
        ids = [cid.encode() for cid in self.ids]
        heads = {}
        for length in set(map(len, ids)):
            id_head = b"\x0a" + _varint(length) if length else b""
            heads[length] = tag + _varint(len(id_head) + length + len(shared)) + id_head
        return b"".join([heads[len(cid)] + cid + shared for cid in ids])


class UpdateBatch(Sequence[api.ContainerUpdate]):
    """Updates of many containers, grouped by the update they share: `UpdateBatch([(ids, update), ...])`,
    each `update` an `api.ContainerUpdate` naming no container.

    It reads as the sequence of each group's ids in order, each with its update (a message built when read,
    so read as few as possible), and a reply carries it as the bytes protobuf would write for that
    sequence, with each group's update encoded once: a node shared pool that moves for 400 containers
    costs one encoding and 400 ids, not 400 messages built, sized, copied and encoded.
    """

    __slots__ = ("_ends", "_groups")

    def __init__(self, groups: Iterable[tuple[Sequence[str], api.ContainerUpdate]] = ()) -> None:
        self._groups: list[_Group] = []
        self._ends: list[int] = []
        for ids, template in groups:
            if template.container_id:
                raise ValueError(f"the update shared by a group names container {template.container_id!r}")
            self._add(_Group(list(ids), template, template.SerializeToString()))

    def _add(self, group: _Group) -> None:
        if group.ids:
            self._groups.append(group)
            self._ends.append((self._ends[-1] if self._ends else 0) + len(group.ids))

    @property
    def container_ids(self) -> list[str]:
        """The ids the updates are for, in order."""
        return [cid for group in self._groups for cid in group.ids]

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    @overload
    def __getitem__(self, index: int) -> api.ContainerUpdate: ...

    @overload
    def __getitem__(self, index: slice) -> UpdateBatch: ...

    def __getitem__(self, index: int | slice) -> api.ContainerUpdate | UpdateBatch:
        if isinstance(index, slice):
            return self._slice(*index.indices(len(self)))
        position = index + len(self) if index < 0 else index
        if not 0 <= position < len(self):
            raise IndexError("UpdateBatch index out of range")
        group, offset = self._locate(position)
        update = api.ContainerUpdate()
        update.CopyFrom(group.template)
        update.container_id = group.ids[offset]
        return update

    def _locate(self, position: int) -> tuple[_Group, int]:
        number = bisect.bisect_right(self._ends, position)
        return self._groups[number], position - (self._ends[number - 1] if number else 0)

    def _slice(self, start: int, stop: int, step: int) -> UpdateBatch:
        batch = UpdateBatch()
        if step == 1:
            begin = 0
            for group, end in zip(self._groups, self._ends, strict=True):
                ids = group.ids[max(start - begin, 0) : max(stop - begin, 0)]
                batch._add(_Group(ids, group.template, group.shared))
                begin = end
            return batch
        for position in range(start, stop, step):
            group, offset = self._locate(position)
            batch._add(_Group([group.ids[offset]], group.template, group.shared))
        return batch

    def __eq__(self, other: object) -> bool:
        """Equal to any sequence of the same updates (`batch == []` when empty)."""
        if not isinstance(other, Sequence) or len(other) != len(self):
            return False
        return all(a == b for a, b in zip(self, other, strict=True))

    def __repr__(self) -> str:
        return f"UpdateBatch({[(group.ids, group.template) for group in self._groups]!r})"

    def within(self, budget: int) -> int:
        """How many of the updates, from the first, fit in `budget` bytes of a reply's repeated field."""
        fitting = 0
        for group in self._groups:
            for count, size in group.sizes():
                taken = min(count, max(budget, 0) // size)
                fitting += taken
                budget -= taken * size
                if taken < count:
                    return fitting
        return fitting

    def encoded(self, field_number: int) -> bytes:
        """Every update as an entry of the repeated field `field_number` of a reply."""
        tag = _varint(field_number << 3 | 2)
        return b"".join(group.encoded(tag) for group in self._groups)


def updates_within(updates: Updates, budget: int) -> int:
    """How many of `updates`, from the first, fit in `budget` bytes of a reply's repeated update field."""
    if isinstance(updates, UpdateBatch):
        return updates.within(budget)
    used = 0
    for count, update in enumerate(updates):
        used += field_size(update)
        if used > budget:
            return count
    return len(updates)


def with_updates(message: Message, field: str, updates: Updates) -> bytes:
    """`message` with `updates` in its repeated `field`, encoded. An UpdateBatch is appended as the bytes
    it encodes to: protobuf readers take a repeated field's entries wherever they stand in the message."""
    if isinstance(updates, UpdateBatch):
        return message.SerializeToString() + updates.encoded(message.DESCRIPTOR.fields_by_name[field].number)
    getattr(message, field).extend(updates)
    return message.SerializeToString()


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


def _create_reply(result: CreateResult | None) -> bytes:
    result = result or CreateResult()
    reply = api.CreateContainerResponse(adjust=result.adjust, evict=result.evictions)
    return with_updates(reply, "update", result.updates)


def _update_reply(result: UpdateResult | None) -> bytes:
    result = result or UpdateResult()
    return with_updates(api.UpdateContainerResponse(evict=result.evictions), "update", result.updates)


def _stop_reply(updates: Updates | None) -> bytes:
    return with_updates(api.StopContainerResponse(), "update", updates or ())


def _validate_reply(reason: str | None) -> bytes:
    reply = api.ValidateContainerAdjustmentResponse(reject=reason is not None, reason=reason or "")
    return reply.SerializeToString()


@dataclass(frozen=True, slots=True)
class EventRoute:
    """How one event reaches a handler and what goes back.

    `method` serves the event and `rpc` is its dedicated RPC (NRI >= v0.12.0), taking `request`. `unpack`
    takes the method's arguments out of the request when they are not (pod, container) or (pod). `reply`
    encodes the response from the method's result; without one the reply is empty.
    """

    method: Callable[..., object]
    rpc: str
    request: type[Message]
    unpack: Callable[[Any], tuple[object, ...]] | None = None
    reply: Callable[[Any], bytes] | None = None

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
