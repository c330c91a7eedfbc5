"""An in-test NRI runtime: listens like containerd and plays the runtime's side of the plugin protocol.

Built on the codec-level `Peer`, so each test scripts the exact order of RegisterPlugin, Configure,
Synchronize and events, and can send bytes no real runtime would.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Sequence
from typing import Any, TypeVar

from google.protobuf.message import Message

from podlevel.nri import api
from podlevel.ttrpc.codec import Request, Response, Role
from support.ttrpc_peer import TIMEOUT, Peer

PLUGIN = "nri.pkg.api.v1alpha1.Plugin"
RUNTIME = "nri.pkg.api.v1alpha1.Runtime"

M = TypeVar("M", bound=Message)


class RuntimeSide:
    """The runtime's end of one plugin connection."""

    def __init__(self, peer: Peer) -> None:
        self.peer = peer

    @classmethod
    async def over(cls, sock: socket.socket) -> RuntimeSide:
        return cls(await Peer.over(sock, role=Role.RUNTIME))

    async def expect(self, method: str) -> Request:
        request = await self.peer.next_request()
        assert (request.service, request.method) == (RUNTIME, method)
        return request

    async def call_raw(self, method: str, message: Message) -> Response:
        return await self.peer.call(PLUGIN, method, message.SerializeToString())

    async def call_together(self, calls: Sequence[tuple[str, Message]]) -> list[Response]:
        """Plugin calls sent in one write: the plugin reads them at once, so they queue for its handlers."""
        requests = [
            self.peer.request(PLUGIN, method, message.SerializeToString()) for method, message in calls
        ]
        return await self.peer.send_requests(requests)

    async def call(self, method: str, message: Message, reply_type: type[M]) -> M:
        response = await self.call_raw(method, message)
        assert response.code == 0, (response.code, response.message)
        return reply_type.FromString(response.payload)

    async def configure(
        self,
        *,
        runtime_name: str = "containerd",
        runtime_version: str = "2.1.9",
        nri_version: str = "",
        registration_timeout_ms: int = 5000,
        request_timeout_ms: int = 2000,
        config: str = "",
    ) -> api.ConfigureResponse:
        request = api.ConfigureRequest(
            config=config,
            runtime_name=runtime_name,
            runtime_version=runtime_version,
            registration_timeout=registration_timeout_ms,
            request_timeout=request_timeout_ms,
            NRI_version=nri_version,
        )
        return await self.call("Configure", request, api.ConfigureResponse)

    async def synchronize(
        self,
        pods: Sequence[api.PodSandbox] = (),
        containers: Sequence[api.Container] = (),
        *,
        chunks: int = 1,
    ) -> list[api.SynchronizeResponse]:
        """Send pods and containers split into `chunks` requests, all but the last with more=true."""
        replies = []
        for i in range(chunks):
            request = api.SynchronizeRequest(
                pods=pods[i::chunks], containers=containers[i::chunks], more=i < chunks - 1
            )
            replies.append(await self.call("Synchronize", request, api.SynchronizeResponse))
        return replies

    async def handshake(self, **configure: Any) -> api.ConfigureResponse:
        """Register, configure, synchronize; the register reply comes last, as containerd may send it."""
        register = await self.expect("RegisterPlugin")
        reply = await self.configure(**configure)
        await self.synchronize()
        await self.peer.reply(register, api.Empty().SerializeToString())
        return reply

    def close(self) -> None:
        self.peer.close()


class FakeRuntime:
    """Listens on a unix socket; every plugin that dials in is queued for `accept()`."""

    def __init__(self) -> None:
        self._accepted: asyncio.Queue[RuntimeSide] = asyncio.Queue()
        self._server: asyncio.Server | None = None
        self._sides: list[RuntimeSide] = []

    async def listen(self, path: str) -> None:
        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            side = RuntimeSide(Peer(reader, writer, role=Role.RUNTIME))
            self._sides.append(side)
            self._accepted.put_nowait(side)

        self._server = await asyncio.start_unix_server(on_connect, path)

    async def accept(self) -> RuntimeSide:
        async with asyncio.timeout(TIMEOUT):
            return await self._accepted.get()

    def accepted(self) -> int:
        """How many plugin connections were made so far."""
        return len(self._sides)

    async def close(self) -> None:
        for side in self._sides:
            side.close()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(OSError):
                await self._server.wait_closed()
