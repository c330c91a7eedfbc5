"""asyncio transport: the codec driven over one unix stream socket, as ttrpc client and server at once.

`Transport` is the socket's asyncio protocol. The socket is read into one buffer allocated once (a fresh
256 KiB buffer per read costs glibc an mmap and page faults: ~13 us a read); every chunk read is fed to
`codec.Connection` in the same callback, and what comes out is dispatched there: responses complete the
matching `call`, and requests go to the handler registered for (service, method). A handler runs at once,
and when it returns without waiting for anything (every NRI event handler does), its reply is written
before the next message is looked at: no task, no extra turn of the event loop. A handler that waits goes
on in a task of its own from where it stopped, since a peer may answer out of order and may call us while
waiting for our own call (NRI's Configure arrives before the RegisterPlugin reply); handlers start in
arrival order either way, each in a copy of the context it was called in.

Invariants kept here:
- Nothing raises out of the event loop: a ProtocolError or an I/O error ends in `close(reason)` with the
  reason logged; whatever goes wrong while serving one request (the handler raises, its reply cannot be
  encoded or is too large) ends in an error status for that request, and the connection stays: one bad
  request must not fail every other call in flight.
- Once closed, a transport stays closed: pending and later calls fail with RpcError(UNAVAILABLE), and
  `wait_closed()` returns the reason. Reconnecting means building a new transport.
- An unknown service or method is answered with status Unimplemented (12), a handler's RpcError with its
  code, any other handler exception or an unencodable reply with Internal (13), an oversized reply with
  ResourceExhausted (8). Status messages are printable and at most `MAX_STATUS_MESSAGE` characters: the
  runtime logs them verbatim, and text from the peer (a pod's name) may hold anything.
- While the peer does not take what is written (over the write buffer's high-water mark), nothing more is
  read from it: a peer that only sends cannot make replies pile up without bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import logging
import socket
from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping
from types import TracebackType
from typing import Any, Final, cast

from podlevel.eventlog import logger
from podlevel.ttrpc.codec import Code, Connection, Rejected, Request, Response, Role, code_name
from podlevel.ttrpc.errors import MessageTooLarge, ProtocolError

log = logger(__name__)

# Bytes asked of the socket per read: large enough that a multi-megabyte Synchronize arrives in a few
# reads, small enough not to matter for memory.
READ_CHUNK: Final = 256 << 10

# Longest status message sent; the runtime logs it verbatim, and it must never push a reply over the
# outbound size limit.
MAX_STATUS_MESSAGE: Final = 16 << 10


def status_message(text: str) -> str:
    """`text` as a status message: non-printable characters (lone surrogates, which UTF-8 cannot carry,
    control characters) escaped, and cut to `MAX_STATUS_MESSAGE` characters with the cut said."""
    head = text[: MAX_STATUS_MESSAGE + 1]
    if not head.isprintable():
        head = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in head)
    if len(head) <= MAX_STATUS_MESSAGE:
        return head
    cut = f" ... ({len(text)} characters in all)"
    return head[: MAX_STATUS_MESSAGE - len(cut)] + cut


RequestHandler = Callable[[Request], Awaitable[bytes]]
"""Serves one request: returns the serialized reply message, or raises RpcError to answer with a status."""


class RpcError(Exception):
    """A call that did not succeed: the peer's (or this side's) status code and message.

    Raised by a handler with `close_connection`, the status is sent and the connection then closed: for a
    peer whose conversation cannot go on (it sent more than this side will hold).
    """

    def __init__(self, code: int, message: str, *, close_connection: bool = False) -> None:
        super().__init__(f"{code_name(code)}: {message}")
        self.code = code
        self.message = message
        self.close_connection = close_connection


class _Continued:
    """The rest of a coroutine that has run up to its first wait, awaited from a task.

    Passes on what the coroutine yields (the future it waits for, or None) and what the task sends or
    throws back, exactly as `await` would had the task run it from the start.
    """

    def __init__(self, coro: Coroutine[Any, Any, Any], waiting: Any) -> None:
        self._coro = coro
        self._waiting = waiting

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, waiting = self._coro, self._waiting
        while True:
            try:
                sent = yield waiting
            except BaseException as exc:  # the task's cancellation, or what the awaited future raised
                try:
                    waiting = coro.throw(exc)
                except StopIteration as done:
                    return done.value
            else:
                try:
                    waiting = coro.send(sent)
                except StopIteration as done:
                    return done.value


def _expire(future: asyncio.Future[Response]) -> None:
    if not future.done():
        future.set_exception(TimeoutError())


def _settle(coro: Coroutine[Any, Any, None], context: contextvars.Context, _: asyncio.Task[None]) -> None:
    """A handler's continuation cancelled before its first step never resumed the handler: give it the
    cancellation there, so its `except`/`finally` run as they would in a task cancelled while waiting."""
    if inspect.getcoroutinestate(coro) != inspect.CORO_SUSPENDED:
        return
    with contextlib.suppress(StopIteration, asyncio.CancelledError):
        context.run(coro.throw, asyncio.CancelledError())
        coro.close()  # it waited again while cancelled: nothing will resume it


class Transport(asyncio.BufferedProtocol):
    """Both ttrpc roles over one connected socket. Create it with `open_unix` or `from_socket`."""

    def __init__(
        self,
        handlers: Mapping[tuple[str, str], RequestHandler],
        *,
        role: Role = Role.PLUGIN,
        name: str = "ttrpc",
    ) -> None:
        self.name = name
        self.close_reason: str | None = None
        self._handlers = dict(handlers)
        self._services = {service for service, _ in self._handlers}
        self._conn = Connection(role)
        self._pending: dict[int, asyncio.Future[Response]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop = asyncio.get_running_loop()
        self._closed = asyncio.Event()
        self._lost = self._loop.create_future()
        self._transport: asyncio.Transport | None = None
        self._writable: asyncio.Future[None] | None = None
        """Set while the write buffer is over its high-water mark; done once it drained."""
        self._read_buffer = memoryview(bytearray(READ_CHUNK))

    @classmethod
    async def open_unix(
        cls,
        path: str,
        handlers: Mapping[tuple[str, str], RequestHandler],
        *,
        role: Role = Role.PLUGIN,
        name: str = "ttrpc",
    ) -> Transport:
        """Dial the unix socket at `path`. Raises OSError when nobody listens there."""
        transport = cls(handlers, role=role, name=name)
        await transport._loop.create_unix_connection(lambda: transport, path)
        return transport

    @classmethod
    async def from_socket(
        cls,
        sock: socket.socket,
        handlers: Mapping[tuple[str, str], RequestHandler],
        *,
        role: Role = Role.PLUGIN,
        name: str = "ttrpc",
    ) -> Transport:
        """Use an already connected stream socket (an inherited fd, one end of a socketpair)."""
        transport = cls(handlers, role=role, name=name)
        await transport._loop.create_unix_connection(lambda: transport, sock=sock)
        return transport

    @property
    def closed(self) -> bool:
        return self.close_reason is not None

    @property
    def dropped_frames(self) -> int:
        """Frames received for conn ids this side does not use."""
        return self._conn.dropped_frames

    async def call(self, service: str, method: str, payload: bytes, *, timeout: float) -> bytes:
        """Call `service`/`method` on the peer; return its reply payload.

        Raises RpcError: the peer's non-OK status, DEADLINE_EXCEEDED when the request is not written and
        answered within `timeout` seconds (a peer that stops reading blocks the write, and must not hang
        the caller past its deadline), UNAVAILABLE when the connection is or gets closed,
        RESOURCE_EXHAUSTED when `payload` is too large.
        """
        if self.close_reason is not None:
            raise RpcError(Code.UNAVAILABLE, f"connection closed: {self.close_reason}")
        request = self._conn.request(service, method, payload, timeout_nano=int(timeout * 1e9))
        try:
            data = self._conn.encode(request)
        except MessageTooLarge as exc:
            raise RpcError(Code.RESOURCE_EXHAUSTED, f"{service}/{method} request: {exc}") from exc
        future: asyncio.Future[Response] = self._loop.create_future()
        self._pending[request.stream_id] = future
        # A timer on the answer's future, not `asyncio.timeout`: a handler calls from the socket's callback,
        # with no task, until it first waits (`_serve`).
        deadline = self._loop.call_later(timeout, _expire, future)
        sent = False
        try:
            self._write(data)
            writable = self._writable
            if writable is not None:
                await asyncio.wait((writable, future), return_when=asyncio.FIRST_COMPLETED)
            sent = writable is None or writable.done()
            response = await future
        except TimeoutError:
            # A write cut short leaves the rest of the message queued in the socket's transport, so framing
            # stays intact.
            what = "no response" if sent else "request not written (peer not reading)"
            raise RpcError(
                Code.DEADLINE_EXCEEDED, f"{service}/{method}: {what} within {timeout:g} s"
            ) from None
        finally:
            deadline.cancel()
            self._pending.pop(request.stream_id, None)
        if response.code != Code.OK:
            raise RpcError(response.code, response.message)
        return response.payload

    def close(self, reason: str, *, error: bool = False) -> None:
        """Close the socket and fail pending calls; logs `reason` (as a warning when `error`). Idempotent."""
        if self.close_reason is not None:
            return
        self.close_reason = reason
        log.log(logging.WARNING if error else logging.INFO, "{connection}: connection closed: {reason}",
                connection=self.name, reason=reason)
        for future in self._pending.values():
            if not future.done():
                future.set_exception(RpcError(Code.UNAVAILABLE, f"connection closed: {reason}"))
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        # Abort, not close: a graceful close first flushes what is still queued, which never ends when the
        # peer stopped reading, and would leave the socket open and `wait_closed` hanging.
        if self._transport is not None:
            self._transport.abort()
        elif not self._lost.done():
            self._lost.set_result(None)
        self._closed.set()

    async def wait_closed(self) -> str:
        """Wait until the transport is closed and its tasks are done; return the close reason."""
        await self._closed.wait()
        current = asyncio.current_task()
        await asyncio.gather(*(t for t in list(self._tasks) if t is not current), return_exceptions=True)
        await self._lost
        assert self.close_reason is not None
        return self.close_reason

    # -- asyncio.BufferedProtocol: what the socket's transport calls ------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is None:
            self.close("peer closed the connection (EOF)")
        else:
            self.close(f"connection failed: {exc}", error=True)
        if not self._lost.done():
            self._lost.set_result(None)

    def eof_received(self) -> bool:
        self.close("peer closed the connection (EOF)")
        return False

    def pause_writing(self) -> None:
        if self._writable is None:
            self._writable = self._loop.create_future()
            if self._transport is not None:
                self._transport.pause_reading()

    def resume_writing(self) -> None:
        writable, self._writable = self._writable, None
        if writable is not None and not writable.done():
            writable.set_result(None)
        if self._transport is not None and self.close_reason is None:
            self._transport.resume_reading()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._read_buffer

    def buffer_updated(self, nbytes: int) -> None:
        if self.close_reason is not None:
            return
        try:
            messages = self._conn.feed(self._read_buffer[:nbytes])
        except ProtocolError as exc:
            self.close(f"protocol error: {exc}", error=True)
            return
        try:
            for message in messages:
                if self.close_reason is not None:
                    return
                if isinstance(message, Request):
                    self._serve(message)
                elif isinstance(message, Rejected):
                    log.warning("{connection}: rejected request: {reason}", connection=self.name,
                                reason=message.message)
                    self._write(self._conn.encode(message.response()))
                else:
                    self._complete(message)
        except Exception as exc:  # a bug here must close the connection, not the event loop
            log.error("{connection}: internal error", connection=self.name, exc_info=_exc_info(exc))
            self.close(f"internal error: {exc!r}", error=True)

    # -- serving ------------------------------------------------------------------------------------------

    def _complete(self, response: Response) -> None:
        future = self._pending.get(response.stream_id)
        if future is None or future.done():
            log.debug("{connection}: dropped response for stream {stream}: no call waits",
                      connection=self.name, stream=response.stream_id)
            return
        future.set_result(response)

    def _serve(self, request: Request) -> None:
        """Run the request's handler now; should it wait for something, finish it in a task."""
        context = contextvars.copy_context()
        coro = self._answer(request)
        try:
            waiting = context.run(coro.send, None)
        except StopIteration:
            return
        task = self._loop.create_task(self._finish(coro, waiting), context=context)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        task.add_done_callback(functools.partial(_settle, coro, context))

    @staticmethod
    async def _finish(coro: Coroutine[Any, Any, None], waiting: Any) -> None:
        await _Continued(coro, waiting)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("{connection}: internal error", connection=self.name, exc_info=_exc_info(exc))
            self.close(f"internal error: {exc!r}", error=True)

    async def _answer(self, request: Request) -> None:
        response, close_reason = await self._run_handler(request)
        try:
            data = self._conn.encode(response)
        except MessageTooLarge as exc:
            log.error("{connection}: {service}/{method} reply not sent: {error}", connection=self.name,
                      service=request.service, method=request.method, error=exc)
            data = self._error(request, Code.RESOURCE_EXHAUSTED, f"reply: {exc}")
        except Exception as exc:  # whatever the reply holds, the request gets a status
            log.error("{connection}: {service}/{method} reply not encodable: {error}", connection=self.name,
                      service=request.service, method=request.method, error=exc)
            data = self._error(request, Code.INTERNAL, f"{request.method}: reply not encodable: {exc}")
        self._write(data)
        if close_reason is not None:
            self.close(close_reason, error=True)

    def _error(self, request: Request, code: Code, message: str) -> bytes:
        return self._conn.encode(Response(request.stream_id, code=code, message=status_message(message)))

    async def _run_handler(self, request: Request) -> tuple[Response, str | None]:
        """The response to `request`, and why to close the connection once it is sent (None: keep it)."""
        handler = self._handlers.get((request.service, request.method))
        if handler is None:
            what = (
                f"method {request.method} of service {request.service}"
                if request.service in self._services
                else f"service {request.service}"
            )
            log.debug("{connection}: answering Unimplemented for {what}", connection=self.name, what=what)
            unimplemented = f"{what} is not implemented"
            return Response(request.stream_id, code=Code.UNIMPLEMENTED, message=unimplemented), None
        try:
            payload = await handler(request)
        except RpcError as exc:
            message = status_message(exc.message)
            close = f"{request.method}: {code_name(exc.code)}: {message}" if exc.close_connection else None
            return Response(request.stream_id, code=exc.code, message=message), close
        except Exception as exc:  # a handler's bug fails its request, not the connection
            log.exception("{connection}: handler for {service}/{method} failed", connection=self.name,
                          service=request.service, method=request.method)
            message = f"{request.method}: internal error: {type(exc).__name__}: {exc}"
            return Response(request.stream_id, code=Code.INTERNAL, message=status_message(message)), None
        return Response(request.stream_id, payload=payload), None

    def _write(self, data: bytes) -> None:
        if self.close_reason is not None or self._transport is None:
            return
        self._transport.write(data)


def _exc_info(exc: BaseException) -> tuple[type[BaseException], BaseException, TracebackType | None]:
    return type(exc), exc, exc.__traceback__
