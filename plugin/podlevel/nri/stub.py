"""The NRI stub: connects a `Handler` to the runtime and keeps it connected.

Per connection: dial (or take the launch socket), call RegisterPlugin, answer Configure with the handler's
subscription clipped to the runtime's valid events, answer Synchronize (collecting `more` chunks into one
handler call), then serve events — each both as its dedicated RPC (NRI >= v0.12.0) and as StateChange
(older runtimes, and newer ones after an Unimplemented answer). The runtime never sends Shutdown; it just
goes away (EOF), and any framing error closes the connection too. Either way the stub redials with
exponential backoff and registers, configures and synchronizes again, since the runtime keeps no plugin
state. A plugin the runtime launched cannot redial its inherited socket, so its `serve` returns instead.

Invariants kept here:
- Handler methods run one at a time, in the event loop's thread, never concurrently with each other.
- UpdateContainers refuses to run from inside a handler (released NRI holds its lock during events, so
  the call would block until the request timeout and get the plugin disconnected).
- A handler answering later than half the announced request timeout after its request arrived is logged
  with the time taken.
- Nothing escapes the event loop: protocol and I/O errors end the connection with a logged reason.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar, cast

from google.protobuf.message import DecodeError, Message

from podlevel._proto.nri import api_pb2 as api
from podlevel.nri.handler import (
    EVENT_ROUTES,
    CreateResult,
    Handler,
    MaybeAwaitable,
    UpdateResult,
    Updates,
    subscribed_events,
)
from podlevel.nri.identity import PluginIdentity, launched_socket_fd, resolve_identity
from podlevel.nri.runtime import Event, RuntimeInfo, describe_mask
from podlevel.ttrpc.codec import Code, Request
from podlevel.ttrpc.transport import Handler as RpcHandler
from podlevel.ttrpc.transport import RpcError, Transport

log = logging.getLogger(__name__)

DEFAULT_SOCKET_PATH: Final = "/var/run/nri/nri.sock"
PLUGIN_SERVICE: Final = "nri.pkg.api.v1alpha1.Plugin"
RUNTIME_SERVICE: Final = "nri.pkg.api.v1alpha1.Runtime"

# How long to wait for the RegisterPlugin reply. The runtime may hold it back until Configure and
# Synchronize are done, and a too-short plugin-side timeout showed up as misleading "ttrpc: closed"
# failures on busy nodes (containerd/nri#292); containerd itself gives up after 5 s by default.
REGISTER_TIMEOUT: Final = 30.0

# containerd's default plugin_request_timeout, used until Configure announces the real one.
DEFAULT_REQUEST_TIMEOUT: Final = 2.0

# UpdateContainers goes through CRI UpdateContainerResources for every container named; give a batch
# several request timeouts' worth.
UPDATE_CONTAINERS_TIMEOUT: Final = 10.0

# Redial delays: start quickly (containerd recreates its socket within about 0.1 s of starting), double
# on each failure, and reset once a session got as far as Synchronize.
BACKOFF_INITIAL: Final = 0.5
# The cap bounds how long containers keep being created without the plugin once the runtime is back from
# a long outage (the runtime fails open: it creates them unadjusted). Dialing an absent unix socket costs
# next to nothing, so a few seconds is cheap; a cap of half a minute would leave pods unplaced that long.
BACKOFF_MAX: Final = 5.0

M = TypeVar("M", bound=Message)
T = TypeVar("T")


class UpdateFromHandlerError(RuntimeError):
    """UpdateContainers was called from inside an event handler; return the updates from it instead."""


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


def _seconds(timeout: float) -> str:
    # containerd 1.7 sends no timeouts (0): it runs with its defaults, 5 s and 2 s.
    return f"{timeout:.3f} s" if timeout else "none (runtime default)"


def _decode(cls: type[M], payload: bytes) -> M:
    try:
        return cls.FromString(payload)
    except DecodeError as exc:
        raise RpcError(Code.INVALID_ARGUMENT, f"undecodable {cls.__name__}: {exc}") from exc


@dataclass
class _Session:
    """What one connection to the runtime has learnt so far."""

    transport: Transport | None = None
    runtime: RuntimeInfo | None = None
    sync_pods: list[api.PodSandbox] = field(default_factory=list)
    sync_containers: list[api.Container] = field(default_factory=list)
    synchronized: bool = False


# Serves one event whose reply carries the handler's answer; takes the event's request message (its type is
# the event route's `request`).
_Answer = Callable[[Any], Awaitable[Message]]


class Stub:
    """Runs `handler` as NRI plugin `index-name` against the runtime at `socket_path` (or on `socket_fd`).

    `run()` blocks the calling thread (use it from a background thread in tests); `serve()` is the same
    as a coroutine. `stop()` and `wait_ready()` may be called from any thread. `sleep` waits out a redial
    delay and `clock` times handlers; a test passes ones that record the schedule or move only when told.
    """

    def __init__(
        self,
        handler: Handler,
        name: str,
        index: str,
        socket_path: str = DEFAULT_SOCKET_PATH,
        *,
        socket_fd: int | None = None,
        register_timeout: float = REGISTER_TIMEOUT,
        backoff_initial: float = BACKOFF_INITIAL,
        backoff_max: float = BACKOFF_MAX,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.identity = PluginIdentity(name, index)
        self.events = subscribed_events(handler)
        if self.events == 0:
            raise ValueError(
                f"{type(handler).__name__} overrides no event method; NRI reads an empty subscription as "
                "'all events', so a plugin must subscribe to at least one"
            )
        self.handler = handler
        self.socket_path = socket_path
        self.socket_fd = socket_fd
        self.register_timeout = register_timeout
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self._sleep = sleep
        self._clock = clock
        self.synchronizations = 0
        self._session = _Session()
        self._ready = threading.Event()
        self._stop_requested = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._stopping: asyncio.Event | None = None
        self._handler_lock: asyncio.Lock | None = None
        # The events whose reply carries the handler's answer. Every other event is a notification,
        # answered with an empty reply once its handler returns.
        self._answers: Mapping[Event, _Answer] = {
            Event.CREATE_CONTAINER: self._create_container,
            Event.UPDATE_CONTAINER: self._update_container,
            Event.STOP_CONTAINER: self._stop_container,
            Event.UPDATE_POD_SANDBOX: self._update_pod_sandbox,
            Event.VALIDATE_CONTAINER_ADJUSTMENT: self._validate_container_adjustment,
        }

    @classmethod
    def from_environment(
        cls,
        handler: Handler,
        *,
        name: str | None = None,
        index: str | None = None,
        socket_path: str = DEFAULT_SOCKET_PATH,
        environ: Mapping[str, str] | None = None,
        argv0: str | None = None,
        register_timeout: float = REGISTER_TIMEOUT,
    ) -> Stub:
        """A stub for either launch mode: the runtime's socket fd if it launched us, else `socket_path`.

        Identity: explicit values first, then NRI_PLUGIN_NAME/NRI_PLUGIN_IDX, then argv0 as `NN-name`.
        """
        env = os.environ if environ is None else environ
        identity = resolve_identity(name, index, env, sys.argv[0] if argv0 is None else argv0)
        return cls(
            handler,
            identity.name,
            identity.index,
            socket_path,
            socket_fd=launched_socket_fd(env),
            register_timeout=register_timeout,
        )

    @property
    def runtime(self) -> RuntimeInfo | None:
        """The runtime of the current connection, once it sent Configure."""
        return self._session.runtime

    def run(self) -> None:
        """Serve until `stop()` (or, for a launched plugin, until the runtime closes the socket)."""
        asyncio.run(self.serve())

    def stop(self) -> None:
        """Ask `serve()` to close the connection and return. Thread-safe; idempotent."""
        self._stop_requested.set()
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None:
            loop.call_soon_threadsafe(stopping.set)

    def wait_ready(self, timeout: float) -> bool:
        """Block until the stub is registered and synchronized with the runtime; False on timeout."""
        return self._ready.wait(timeout)

    async def serve(self) -> None:
        """Connect, register, serve; redial with backoff whenever the connection ends, until stopped."""
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._stopping = asyncio.Event()
        self._handler_lock = asyncio.Lock()
        if self._stop_requested.is_set():
            return
        delay = self.backoff_initial
        while not self._stopping.is_set():
            session = _Session()
            self._session = session
            transport = await self._connect(session)
            if transport is None and self.socket_fd is not None:
                return
            if transport is not None:
                session.transport = transport
                # Registration runs alongside: stopping closes the transport, which ends a pending call.
                registration = asyncio.ensure_future(self._register(transport))
                await self._wait_closed_or_stopped(transport)
                await registration
                self._ready.clear()
                if self.socket_fd is not None:
                    log.info("NRI plugin %s: launch socket closed, exiting", self.identity)
                    return
            if self._stopping.is_set():
                break
            if session.synchronized:
                delay = self.backoff_initial
            log.info("NRI plugin %s: reconnecting in %.1f s", self.identity, delay)
            await self._sleep_unless_stopped(delay)
            delay = min(delay * 2, self.backoff_max)

    async def update_containers(
        self,
        updates: Updates,
        evictions: Sequence[api.ContainerEviction] = (),
        *,
        timeout: float = UPDATE_CONTAINERS_TIMEOUT,
    ) -> list[api.ContainerUpdate]:
        """Unsolicited updates and evictions; returns the updates the runtime failed to apply.

        Raises UpdateFromHandlerError inside an event handler, RpcError when the runtime refuses or is
        not connected.
        """
        call = _current_call.get()
        if call is not None and call.active:
            raise UpdateFromHandlerError(
                f"UpdateContainers called from inside the {call.method} handler: the runtime holds its "
                "event lock until the handler returns, so the call would time out and disconnect the "
                f"plugin; return the updates from {call.method} instead"
            )
        transport = self._session.transport
        if transport is None or not self._session.synchronized:
            raise RpcError(Code.UNAVAILABLE, "not connected to the runtime (not registered and synchronized)")
        request = api.UpdateContainersRequest(update=updates, evict=evictions)
        payload = await transport.call(
            RUNTIME_SERVICE, "UpdateContainers", request.SerializeToString(), timeout=timeout
        )
        return list(_decode(api.UpdateContainersResponse, payload).failed)

    def update_containers_blocking(
        self,
        updates: Updates,
        evictions: Sequence[api.ContainerEviction] = (),
        *,
        timeout: float = UPDATE_CONTAINERS_TIMEOUT,
    ) -> list[api.ContainerUpdate]:
        """`update_containers` from a thread other than the stub's (e.g. a test running `run()` in one)."""
        loop = self._loop
        if loop is None:
            raise RpcError(Code.UNAVAILABLE, "the stub is not running")
        if threading.get_ident() == self._loop_thread:
            raise UpdateFromHandlerError(
                "update_containers_blocking called on the stub's event loop thread (from a handler?); "
                "return updates from the handler, or await update_containers outside of handlers"
            )
        coro = self.update_containers(updates, evictions, timeout=timeout)
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    async def _connect(self, session: _Session) -> Transport | None:
        handlers = self._rpc_handlers(session)
        name = f"nri {self.identity}"
        try:
            if self.socket_fd is not None:
                sock = socket.socket(fileno=self.socket_fd)
                return await Transport.from_socket(sock, handlers, name=name)
            return await Transport.open_unix(self.socket_path, handlers, name=name)
        except OSError as exc:
            where = f"fd {self.socket_fd}" if self.socket_fd is not None else self.socket_path
            log.warning("NRI plugin %s: cannot connect to the runtime at %s: %s", self.identity, where, exc)
            return None

    async def _register(self, transport: Transport) -> None:
        request = api.RegisterPluginRequest(plugin_name=self.identity.name, plugin_idx=self.identity.index)
        try:
            await transport.call(
                RUNTIME_SERVICE, "RegisterPlugin", request.SerializeToString(), timeout=self.register_timeout
            )
        except RpcError as exc:
            transport.close(f"registration failed: {exc}", error=True)

    async def _wait_closed_or_stopped(self, transport: Transport) -> None:
        assert self._stopping is not None
        closed = asyncio.ensure_future(transport.wait_closed())
        stopping = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait({closed, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
            if not closed.done():
                transport.close("plugin stopping")
            await closed

    async def _sleep_unless_stopped(self, delay: float) -> None:
        assert self._stopping is not None
        sleeping = asyncio.ensure_future(self._sleep(delay))
        stopping = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait({sleeping, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeping.cancel()
            stopping.cancel()

    def _rpc_handlers(self, session: _Session) -> dict[tuple[str, str], RpcHandler]:
        def serve(method: str, fn: Callable[[_Session, bytes], Awaitable[Message]]) -> RpcHandler:
            async def handle(request: Request) -> bytes:
                _arrival.set(self._clock())
                return (await fn(session, request.payload)).SerializeToString()

            return handle

        handlers: dict[str, Callable[[_Session, bytes], Awaitable[Message]]] = {
            "Configure": self._configure,
            "Synchronize": self._synchronize,
            "Shutdown": self._shutdown,
            "StateChange": self._state_change,
        }
        for event, route in EVENT_ROUTES.items():
            handlers[route.rpc] = self._event_rpc(event, route.request)
        return {(PLUGIN_SERVICE, method): serve(method, fn) for method, fn in handlers.items()}

    async def _invoke(self, method: str, call: Callable[[], MaybeAwaitable[T]]) -> T:
        """Run one handler method: serialized, marked as 'inside a handler', timed.

        Timed from the request's arrival, not from taking the lock: the runtime's request timeout runs
        while the request waits for earlier handlers too.
        """
        assert self._handler_lock is not None
        arrived = _arrival.get()
        async with self._handler_lock:
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
                self._check_elapsed(method, self._clock() - arrived)

    def _check_elapsed(self, method: str, elapsed: float) -> None:
        runtime = self._session.runtime
        budget = runtime.request_timeout if runtime and runtime.request_timeout else DEFAULT_REQUEST_TIMEOUT
        if elapsed > budget / 2:
            log.warning(
                "NRI plugin %s: handler %s took %.3f s (waiting for earlier handlers included), over half "
                "the runtime's %.3f s request timeout",
                self.identity,
                method,
                elapsed,
                budget,
            )

    async def _configure(self, session: _Session, payload: bytes) -> Message:
        request = _decode(api.ConfigureRequest, payload)
        runtime = RuntimeInfo.from_configure(request)
        session.runtime = runtime
        log.info(
            "NRI plugin %s: runtime %s %s (NRI %s) announced registration timeout %s, request timeout %s",
            self.identity,
            runtime.name,
            runtime.version,
            runtime.nri_version or "< v0.12, not reported",
            _seconds(runtime.registration_timeout),
            _seconds(runtime.request_timeout),
        )
        events = self.events & runtime.valid_events
        if events != self.events:
            log.warning(
                "NRI plugin %s: runtime does not offer %s; not subscribing to them",
                self.identity,
                describe_mask(self.events & ~runtime.valid_events),
            )
        if events == 0:
            raise RpcError(
                Code.FAILED_PRECONDITION,
                f"plugin {self.identity} subscribes to {describe_mask(self.events)}, none of which "
                f"{runtime.name} {runtime.version} offers ({describe_mask(runtime.valid_events)})",
            )
        await self._invoke("configure", lambda: self.handler.configure(runtime, request.config))
        return api.ConfigureResponse(events=events)

    async def _synchronize(self, session: _Session, payload: bytes) -> Message:
        request = _decode(api.SynchronizeRequest, payload)
        session.sync_pods.extend(request.pods)
        session.sync_containers.extend(request.containers)
        if request.more:
            return api.SynchronizeResponse(more=True)
        pods, containers = session.sync_pods, session.sync_containers
        session.sync_pods, session.sync_containers = [], []
        updates = await self._invoke("synchronize", lambda: self.handler.synchronize(pods, containers))
        session.synchronized = True
        self.synchronizations += 1
        runtime = session.runtime
        log.info(
            "NRI plugin %s: registered with %s %s, events %s; synchronized %d pods, %d containers",
            self.identity,
            runtime.name if runtime else "runtime",
            runtime.version if runtime else "",
            describe_mask(self.events & runtime.valid_events if runtime else self.events),
            len(pods),
            len(containers),
        )
        self._ready.set()
        return api.SynchronizeResponse(update=updates or (), more=False)

    async def _shutdown(self, session: _Session, payload: bytes) -> Message:
        log.info("NRI plugin %s: runtime announced shutdown", self.identity)
        return api.Empty()

    async def _notify(self, event: Event, pod: api.PodSandbox, container: api.Container) -> None:
        if event in self._answers:
            raise RpcError(Code.INVALID_ARGUMENT, f"event {event.name} cannot arrive as a notification")
        route = EVENT_ROUTES[event]
        name = route.method.__name__
        method = getattr(self.handler, name)
        args = (pod, container) if route.about_container else (pod,)
        await self._invoke(name, lambda: method(*args))

    async def _state_change(self, session: _Session, payload: bytes) -> Message:
        request = _decode(api.StateChangeEvent, payload)
        try:
            event = Event(request.event)
        except ValueError:
            raise RpcError(Code.INVALID_ARGUMENT, f"unknown event number {request.event}") from None
        await self._notify(event, request.pod, request.container)
        return api.Empty()

    def _event_rpc(
        self, event: Event, request_type: type[Message]
    ) -> Callable[[_Session, bytes], Awaitable[Message]]:
        """The dedicated RPC of `event`: its answer, or for a notification an empty reply."""
        answer = self._answers.get(event)

        async def handle(session: _Session, payload: bytes) -> Message:
            request = _decode(request_type, payload)
            if answer is not None:
                return await answer(request)
            pod = getattr(request, "pod", api.PodSandbox())
            await self._notify(event, pod, getattr(request, "container", api.Container()))
            return api.Empty()

        return handle

    async def _create_container(self, request: api.CreateContainerRequest) -> Message:
        result = await self._invoke(
            "create_container", lambda: self.handler.create_container(request.pod, request.container)
        )
        result = result or CreateResult()
        return api.CreateContainerResponse(
            adjust=result.adjust, update=result.updates, evict=result.evictions
        )

    async def _update_container(self, request: api.UpdateContainerRequest) -> Message:
        result = await self._invoke(
            "update_container",
            lambda: self.handler.update_container(request.pod, request.container, request.linux_resources),
        )
        result = result or UpdateResult()
        return api.UpdateContainerResponse(update=result.updates, evict=result.evictions)

    async def _stop_container(self, request: api.StopContainerRequest) -> Message:
        updates = await self._invoke(
            "stop_container", lambda: self.handler.stop_container(request.pod, request.container)
        )
        return api.StopContainerResponse(update=updates or ())

    async def _update_pod_sandbox(self, request: api.UpdatePodSandboxRequest) -> Message:
        await self._invoke(
            "update_pod_sandbox",
            lambda: self.handler.update_pod_sandbox(
                request.pod, request.overhead_linux_resources, request.linux_resources
            ),
        )
        return api.Empty()

    async def _validate_container_adjustment(
        self, request: api.ValidateContainerAdjustmentRequest
    ) -> Message:
        reason = await self._invoke(
            "validate_container_adjustment", lambda: self.handler.validate_container_adjustment(request)
        )
        return api.ValidateContainerAdjustmentResponse(reject=reason is not None, reason=reason or "")
