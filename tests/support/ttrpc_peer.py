"""A scriptable ttrpc peer for tests, written directly on the sans-I/O codec (not on the transport).

The test decides when to answer each inbound request and may write arbitrary bytes, so it can play a
runtime that answers out of order, slowly, with errors, or with garbage. `wait_until` is the test bed's
wait for conditions the event loop itself brings about.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Sequence
from typing import TypeVar

from podlevel.ttrpc.codec import Connection, Rejected, Request, Response, Role
from testbed.wait import POLL_INTERVAL_S, DeadlineExceeded

TIMEOUT = 5.0

T = TypeVar("T")


async def wait_until(condition: Callable[[], T | None], timeout: float, what: str) -> T:
    """`testbed.wait.wait_until` inside an event loop: polls with asyncio.sleep, since the test
    bed's blocking sleep would stall the loop that has to make `condition` true."""
    try:
        async with asyncio.timeout(timeout):
            while not (result := condition()):
                await asyncio.sleep(POLL_INTERVAL_S)
    except TimeoutError:
        raise DeadlineExceeded(f"{what}: not reached within {timeout:g}s") from None
    return result


class Peer:
    """One end of a socket: serves nothing by itself, queues inbound requests for the test."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, role: Role) -> None:
        self.reader = reader
        self.writer = writer
        self.conn = Connection(role)
        self.requests: asyncio.Queue[Request | Rejected] = asyncio.Queue()
        self.eof = asyncio.Event()
        self._pending: dict[int, asyncio.Future[Response]] = {}
        self._task = asyncio.ensure_future(self._read())

    @classmethod
    async def over(cls, sock: socket.socket, *, role: Role) -> Peer:
        reader, writer = await asyncio.open_unix_connection(sock=sock)
        return cls(reader, writer, role=role)

    async def _read(self) -> None:
        try:
            while data := await self.reader.read(65536):
                for message in self.conn.feed(data):
                    if isinstance(message, Response):
                        self._pending.pop(message.stream_id).set_result(message)
                    else:
                        self.requests.put_nowait(message)
        except ConnectionError:
            pass
        finally:
            self.eof.set()

    async def send_raw(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def send_requests(self, requests: Sequence[Request]) -> list[Response]:
        """Send `requests` (any stream ids) in one write, so the other side reads them together; wait for
        the response on each stream id."""
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[Response]] = []
        for request in requests:
            futures.append(loop.create_future())
            self._pending[request.stream_id] = futures[-1]
        await self.send_raw(b"".join(self.conn.encode(request) for request in requests))
        async with asyncio.timeout(TIMEOUT):
            return list(await asyncio.gather(*futures))

    async def send_request(self, request: Request) -> Response:
        (response,) = await self.send_requests([request])
        return response

    def request(self, service: str, method: str, payload: bytes) -> Request:
        return self.conn.request(service, method, payload, timeout_nano=2_000_000_000)

    async def call(self, service: str, method: str, payload: bytes) -> Response:
        return await self.send_request(self.request(service, method, payload))

    async def next_request(self) -> Request:
        async with asyncio.timeout(TIMEOUT):
            message = await self.requests.get()
        assert isinstance(message, Request), message
        return message

    async def reply(
        self, request: Request, payload: bytes = b"", *, code: int = 0, message: str = ""
    ) -> None:
        await self.send_raw(self.conn.encode(Response(request.stream_id, payload, code, message)))

    async def wait_eof(self) -> None:
        async with asyncio.timeout(TIMEOUT):
            await self.eof.wait()

    def close(self) -> None:
        self.writer.close()
