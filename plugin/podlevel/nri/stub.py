"""The NRI stub: connects a `Handler` to the runtime and keeps it connected.

Per connection: dial (or take the launch socket), call RegisterPlugin, and let a fresh `Session` answer
Configure, Synchronize and the events. The runtime never sends Shutdown; it just goes away (EOF), and any
framing error closes the connection too. Either way the stub redials with exponential backoff and
registers, configures and synchronizes again, since the runtime keeps no plugin state. A plugin the
runtime launched cannot redial its inherited socket, so its `serve` returns instead.

Invariants kept here:
- Handler methods run one at a time, in the event loop's thread (one lock for every session).
- UpdateContainers refuses to run from inside a handler (released NRI holds its lock during events, so
  the call would block until the request timeout and get the plugin disconnected).
- Nothing escapes the event loop: protocol and I/O errors end the connection with a logged reason.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Final

from podlevel._proto.nri import api_pb2 as api
from podlevel.eventlog import logger
from podlevel.nri.handler import Handler, Updates, subscribed_events, with_updates
from podlevel.nri.identity import PluginIdentity, launched_socket_fd, resolve_identity
from podlevel.nri.runtime import RuntimeInfo
from podlevel.nri.session import RUNTIME_SERVICE, Session, decode, running_handler
from podlevel.ttrpc.codec import Code
from podlevel.ttrpc.transport import RequestHandler, RpcError, Transport

log = logger(__name__)

DEFAULT_SOCKET_PATH: Final = "/var/run/nri/nri.sock"

# How long to wait for the RegisterPlugin reply. The runtime may hold it back until Configure and
# Synchronize are done, and a too-short plugin-side timeout showed up as misleading "ttrpc: closed"
# failures on busy nodes (containerd/nri#292); containerd itself gives up after 5 s by default.
REGISTER_TIMEOUT: Final = 30.0

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


class StubObserver:
    """What the stub tells about its connection and the events it serves (the metrics count them); every
    method is a no-op here. Each runs on the event loop's thread, so it must only record."""

    def connected(self) -> None:
        """Registered with the runtime and synchronized."""

    def reconnecting(self) -> None:
        """The connection ended or could not be made; the stub redials after a delay."""

    def event_handled(self, method: str, seconds: float) -> None:
        """The handler `method` answered `seconds` after its request arrived."""


class UpdateFromHandlerError(RuntimeError):
    """UpdateContainers was called from inside an event handler; return the updates from it instead."""


class Stub:
    """Runs `handler` as NRI plugin `index-name` against the runtime at `socket_path` (or on `socket_fd`).

    `run()` blocks the calling thread (use it from a background thread in tests); `serve()` is the same
    as a coroutine. `stop()` and `wait_ready()` may be called from any thread. `sleep` waits out a redial
    delay and `clock` times handlers; a test passes ones that record the schedule or move only when told.
    `observer` hears of connections, redials and handler times.
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
        observer: StubObserver | None = None,
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
        self.observer = observer or StubObserver()
        self.synchronizations = 0
        self._session: Session | None = None
        self._ready = threading.Event()
        self._stop_requested = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._stopping: asyncio.Event | None = None

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
        observer: StubObserver | None = None,
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
            observer=observer,
        )

    @property
    def runtime(self) -> RuntimeInfo | None:
        """The runtime of the current connection, once it sent Configure."""
        return self._session.runtime if self._session is not None else None

    def run(self) -> None:
        """Serve until `stop()` (or, for a launched plugin, until the runtime closes the socket)."""
        asyncio.run(self.serve())

    def stop(self) -> None:
        """Ask `serve()` to close the connection and return. Thread-safe; idempotent."""
        self._stop_requested.set()
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None:
            loop.call_soon_threadsafe(stopping.set)

    @property
    def ready(self) -> bool:
        """Registered and synchronized with the runtime now (false again while redialling)."""
        return self._ready.is_set()

    def wait_ready(self, timeout: float) -> bool:
        """Block until the stub is registered and synchronized with the runtime; False on timeout."""
        return self._ready.wait(timeout)

    async def serve(self) -> None:
        """Connect, register, serve; redial with backoff whenever the connection ends, until stopped."""
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._stopping = asyncio.Event()
        handler_lock = asyncio.Lock()
        if self._stop_requested.is_set():
            return
        delay = self.backoff_initial
        while not self._stopping.is_set():
            session = Session(
                self.handler,
                self.identity,
                self.events,
                lock=handler_lock,
                clock=self._clock,
                on_synchronized=self._synchronized,
                on_handled=self.observer.event_handled,
            )
            self._session = session
            transport = await self._connect(session.rpc_handlers())
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
                    log.info("NRI plugin {plugin}: launch socket closed, exiting", plugin=self.identity)
                    return
            if self._stopping.is_set():
                break
            if session.synchronized:
                delay = self.backoff_initial
            log.info("NRI plugin {plugin}: reconnecting in {delay:.1f} s", plugin=self.identity, delay=delay)
            self.observer.reconnecting()
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
        method = running_handler()
        if method is not None:
            raise UpdateFromHandlerError(
                f"UpdateContainers called from inside the {method} handler: the runtime holds its "
                "event lock until the handler returns, so the call would time out and disconnect the "
                f"plugin; return the updates from {method} instead"
            )
        session = self._session
        transport = session.transport if session is not None and session.synchronized else None
        if transport is None:
            raise RpcError(Code.UNAVAILABLE, "not connected to the runtime (not registered and synchronized)")
        request = with_updates(api.UpdateContainersRequest(evict=evictions), "update", updates)
        payload = await transport.call(RUNTIME_SERVICE, "UpdateContainers", request, timeout=timeout)
        return list(decode(api.UpdateContainersResponse, payload).failed)

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

    def _synchronized(self) -> None:
        self.synchronizations += 1
        self._ready.set()
        self.observer.connected()

    async def _connect(self, handlers: Mapping[tuple[str, str], RequestHandler]) -> Transport | None:
        name = f"nri {self.identity}"
        try:
            if self.socket_fd is not None:
                sock = socket.socket(fileno=self.socket_fd)
                return await Transport.from_socket(sock, handlers, name=name)
            return await Transport.open_unix(self.socket_path, handlers, name=name)
        except OSError as exc:
            where = f"fd {self.socket_fd}" if self.socket_fd is not None else self.socket_path
            log.warning("NRI plugin {plugin}: cannot connect to the runtime at {where}: {error}",
                        plugin=self.identity, where=where, error=exc)
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
