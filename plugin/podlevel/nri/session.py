"""One connection's NRI protocol: what the plugin answers the runtime between dial and hang-up.

`Stub` makes a `Session` for every connection and serves the transport with `rpc_handlers()`. Configure
is answered with the handler's subscription clipped to the runtime's valid events; Synchronize chunks
(`more`) are collected into one handler call; each event is served both as its dedicated RPC (NRI >=
v0.12.0) and, if it is a notification, as StateChange (older runtimes, and newer ones after an
Unimplemented answer), all as the event table `EVENT_ROUTES` says.

Invariants kept here:
- Handler methods run one at a time, in the event loop's thread, never concurrently with each other: every
  call takes the lock the stub hands to all of its sessions.
- A handler answering later than half the announced request timeout after its request arrived is logged
  with the time taken; every handler's time is handed to `on_handled` (the metrics' latency histogram).
  Timing here, where every handler is called, rather than in the handler measures what the runtime's
  request timeout measures (the wait for earlier handlers included) and takes no code in each handler.
- While a handler runs, `running_handler()` names it, so the stub can refuse UpdateContainers from it.
- A Synchronize collects at most `MAX_SYNC_OBJECTS` pods and containers and `MAX_SYNC_BYTES` over its
  chunks; past either it answers ResourceExhausted and closes the connection (the stub redials, and the
  runtime synchronizes again from scratch).
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, TypeVar, cast

from google.protobuf.message import DecodeError, EncodeError, Message

from podlevel._proto.nri import api_pb2 as api
from podlevel.build import NRI_API
from podlevel.eventlog import logger
from podlevel.nri.handler import EVENT_ROUTES, EventRoute, Handler, MaybeAwaitable, with_updates
from podlevel.nri.identity import PluginIdentity
from podlevel.nri.runtime import Event, RuntimeInfo, describe_mask
from podlevel.ttrpc.codec import Code, Request
from podlevel.ttrpc.transport import RequestHandler, RpcError, Transport

# The stub's logger: a session is part of the stub, and operators filter its messages by one name.
log = logger(__name__)

PLUGIN_SERVICE: Final = f"nri.pkg.api.{NRI_API}.Plugin"
RUNTIME_SERVICE: Final = f"nri.pkg.api.{NRI_API}.Runtime"

# What one Synchronize may collect over its `more` chunks: a runtime whose chunks never end must not make
# the plugin buffer without bound. Far above a real node (a few thousand containers; a runtime chunks near
# its 4 MiB message limit), far below what would exhaust the plugin's memory.
MAX_SYNC_OBJECTS: Final = 250_000
"""Pods and containers together."""
MAX_SYNC_BYTES: Final = 256 << 20
"""Request payload bytes; a chunk counts as at least `SYNC_CHUNK_MIN_BYTES`, so empty chunks end too."""
SYNC_CHUNK_MIN_BYTES: Final = 4 << 10
TRIM_AFTER_SYNC_BYTES: Final = 1 << 20
"""A Synchronize this large leaves enough freed heap behind to be worth handing back (`release_free_heap`)."""

# containerd's default plugin_request_timeout, used until Configure announces the real one.
DEFAULT_REQUEST_TIMEOUT: Final = 2.0

M = TypeVar("M", bound=Message)
T = TypeVar("T")

# Serves one plugin RPC: its request payload in, its reply message out, encoded.
_Method = Callable[[bytes], Awaitable[bytes]]

_EMPTY: Final = api.Empty().SerializeToString()


@dataclass
class _HandlerCall:
    """Marks the context of one running handler; `active` turns False once it returned."""

    method: str
    active: bool = True


_current_call: contextvars.ContextVar[_HandlerCall | None] = contextvars.ContextVar(
    "podlevel_nri_handler_call", default=None
)

# When the request being served reached the stub (the stub's clock). The transport serves each request in
# its own task, so each request sees its own value.
_arrival: contextvars.ContextVar[float] = contextvars.ContextVar("podlevel_nri_request_arrival")


def running_handler() -> str | None:
    """The handler method running in this context, if any.

    A task a handler started sees the handler's context too, but only while the handler has not returned.
    """
    call = _current_call.get()
    return call.method if call is not None and call.active else None


def decode(cls: type[M], payload: bytes) -> M:
    """`payload` as a `cls` message; an undecodable one is the caller's fault (InvalidArgument)."""
    try:
        return cls.FromString(payload)
    except DecodeError as exc:
        raise RpcError(Code.INVALID_ARGUMENT, f"undecodable {cls.__name__}: {exc}") from exc


def unencodable(rpc: str, exc: Exception) -> RpcError:
    """The status for a handler result that makes no valid reply (a field of the wrong type, text that
    UTF-8 cannot carry): the handler's fault, not the runtime's."""
    return RpcError(Code.INTERNAL, f"{rpc}: the handler's answer cannot be encoded: {exc}")


def release_free_heap() -> None:
    """Give the C heap's free pages back to the system (glibc's `malloc_trim`; nothing elsewhere).

    Decoding a Synchronize allocates and frees megabytes, interleaved with what the handler keeps, and glibc
    returns only the free top of its heap by itself: after 2,000 containers the process would keep ~10 MiB
    it no longer uses. Trimming walks the heap once, which costs well under a millisecond.
    """
    import ctypes

    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is not None:
        trim(0)


def _seconds(timeout: float) -> str:
    # containerd 1.7 sends no timeouts (0): it runs with its defaults, 5 s and 2 s.
    return f"{timeout:.3f} s" if timeout else "none (runtime default)"


class Session:
    """What one connection to the runtime has learnt so far, and how it answers the runtime.

    `events` is the handler's subscription; `lock` serialises handler calls across sessions; `clock`
    times handlers; `on_synchronized` runs once the handler has synchronized; `on_handled(method, seconds)`
    after every handler call, with the time since its request arrived.
    """

    def __init__(
        self,
        handler: Handler,
        identity: PluginIdentity,
        events: int,
        *,
        lock: asyncio.Lock,
        clock: Callable[[], float],
        on_synchronized: Callable[[], None],
        on_handled: Callable[[str, float], None],
    ) -> None:
        self.handler = handler
        self.identity = identity
        self.events = events
        self.transport: Transport | None = None
        self.runtime: RuntimeInfo | None = None
        self.synchronized = False
        self._lock = lock
        self._clock = clock
        self._on_synchronized = on_synchronized
        self._on_handled = on_handled
        self._sync_pods: list[api.PodSandbox] = []
        self._sync_containers: list[api.Container] = []
        self._sync_bytes = 0

    def rpc_handlers(self) -> dict[tuple[str, str], RequestHandler]:
        """The plugin service as the transport serves it: every RPC the runtime may call."""
        methods: dict[str, _Method] = {
            "Configure": self._configure,
            "Synchronize": self._synchronize,
            "Shutdown": self._shutdown,
            "StateChange": self._state_change,
        }
        for route in EVENT_ROUTES.values():
            methods[route.rpc] = self._event_rpc(route)
        return {(PLUGIN_SERVICE, name): self._request_handler(method) for name, method in methods.items()}

    def _request_handler(self, method: _Method) -> RequestHandler:
        async def handle(request: Request) -> bytes:
            _arrival.set(self._clock())
            return await method(request.payload)

        return handle

    async def _invoke(self, method: str, call: Callable[[], MaybeAwaitable[T]]) -> T:
        """Run one handler method: serialized, marked as 'inside a handler', timed.

        Timed from the request's arrival, not from taking the lock: the runtime's request timeout runs
        while the request waits for earlier handlers too.
        """
        arrived = _arrival.get()
        async with self._lock:
            marker = _HandlerCall(method)
            token = _current_call.set(marker)
            try:
                result = call()
                if inspect.isawaitable(result):
                    return cast(T, await result)
                return result
            finally:
                marker.active = False
                _current_call.reset(token)
                elapsed = self._clock() - arrived
                self._on_handled(method, elapsed)
                self._check_elapsed(method, elapsed)

    def _check_elapsed(self, method: str, elapsed: float) -> None:
        runtime = self.runtime
        budget = runtime.request_timeout if runtime and runtime.request_timeout else DEFAULT_REQUEST_TIMEOUT
        if elapsed > budget / 2:
            log.warning(
                "NRI plugin {plugin}: handler {method} took {elapsed:.3f} s (waiting for earlier handlers "
                "included), over half the runtime's {budget:.3f} s request timeout",
                plugin=self.identity,
                method=method,
                elapsed=elapsed,
                budget=budget,
            )

    async def _configure(self, payload: bytes) -> bytes:
        request = decode(api.ConfigureRequest, payload)
        runtime = RuntimeInfo.from_configure(request)
        self.runtime = runtime
        log.info(
            "NRI plugin {plugin}: runtime {runtime} {version} (NRI {nri}) announced registration timeout "
            "{registration_timeout}, request timeout {request_timeout}",
            plugin=self.identity,
            runtime=runtime.name,
            version=runtime.version,
            nri=runtime.nri_version or "< v0.12, not reported",
            registration_timeout=_seconds(runtime.registration_timeout),
            request_timeout=_seconds(runtime.request_timeout),
        )
        events = self.events & runtime.valid_events
        if events != self.events:
            log.warning(
                "NRI plugin {plugin}: runtime does not offer {events}; not subscribing to them",
                plugin=self.identity,
                events=describe_mask(self.events & ~runtime.valid_events),
            )
        if events == 0:
            raise RpcError(
                Code.FAILED_PRECONDITION,
                f"plugin {self.identity} subscribes to {describe_mask(self.events)}, none of which "
                f"{runtime.name} {runtime.version} offers ({describe_mask(runtime.valid_events)})",
            )
        await self._invoke("configure", lambda: self.handler.configure(runtime, request.config))
        return api.ConfigureResponse(events=events).SerializeToString()

    async def _synchronize(self, payload: bytes) -> bytes:
        request = decode(api.SynchronizeRequest, payload)
        self._sync_pods.extend(request.pods)
        self._sync_containers.extend(request.containers)
        self._sync_bytes += max(len(payload), SYNC_CHUNK_MIN_BYTES)
        pods, containers = self._sync_pods, self._sync_containers
        if len(pods) + len(containers) > MAX_SYNC_OBJECTS or self._sync_bytes > MAX_SYNC_BYTES:
            self._sync_pods, self._sync_containers, self._sync_bytes = [], [], 0
            raise RpcError(
                Code.RESOURCE_EXHAUSTED,
                f"Synchronize chunks hold over {MAX_SYNC_OBJECTS} pods and containers or {MAX_SYNC_BYTES} "
                f"bytes ({len(pods)} pods, {len(containers)} containers so far); closing to start over",
                close_connection=True,
            )
        if request.more:
            return api.SynchronizeResponse(more=True).SerializeToString()
        if self._sync_bytes >= TRIM_AFTER_SYNC_BYTES:
            # After the handler (a callback the loop runs once this step ends: for a plain handler, once the
            # answer is written): the request's messages are garbage by then either way.
            asyncio.get_running_loop().call_soon(release_free_heap)
        self._sync_pods, self._sync_containers, self._sync_bytes = [], [], 0
        updates = await self._invoke("synchronize", lambda: self.handler.synchronize(pods, containers))
        self.synchronized = True
        runtime = self.runtime
        log.info(
            "NRI plugin {plugin}: registered with {runtime} {version}, events {events}; synchronized {pods} "
            "pods, {containers} containers",
            plugin=self.identity,
            runtime=runtime.name if runtime else "runtime",
            version=runtime.version if runtime else "",
            events=describe_mask(self.events & runtime.valid_events if runtime else self.events),
            pods=len(pods),
            containers=len(containers),
        )
        self._on_synchronized()
        try:
            return with_updates(api.SynchronizeResponse(), "update", updates or ())
        except (EncodeError, TypeError, ValueError) as exc:
            raise unencodable("Synchronize", exc) from exc

    async def _shutdown(self, payload: bytes) -> bytes:
        log.info("NRI plugin {plugin}: runtime announced shutdown", plugin=self.identity)
        return _EMPTY

    async def _state_change(self, payload: bytes) -> bytes:
        request = decode(api.StateChangeEvent, payload)
        try:
            event = Event(request.event)
        except ValueError:
            raise RpcError(Code.INVALID_ARGUMENT, f"unknown event number {request.event}") from None
        route = EVENT_ROUTES[event]
        if not route.is_notification:
            raise RpcError(Code.INVALID_ARGUMENT, f"event {event.name} cannot arrive as a notification")
        await self._call(route, request)
        return _EMPTY

    def _event_rpc(self, route: EventRoute) -> _Method:
        """The dedicated RPC of `route`'s event: the reply built from the handler's result, or empty."""

        async def handle(payload: bytes) -> bytes:
            result = await self._call(route, decode(route.request, payload))
            if route.reply is None:
                return _EMPTY
            try:
                return route.reply(result)
            except (EncodeError, TypeError, ValueError) as exc:
                raise unencodable(route.rpc, exc) from exc

        return handle

    async def _call(self, route: EventRoute, request: Any) -> Any:
        name = route.method.__name__
        method = getattr(self.handler, name)
        arguments = route.arguments(request)
        return await self._invoke(name, lambda: method(*arguments))
