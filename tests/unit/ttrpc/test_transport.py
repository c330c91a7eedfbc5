"""asyncio transport over a real unix socketpair: calls both ways, error statuses, closing on bad input."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import socket
import struct
from collections.abc import Coroutine
from typing import Any

import pytest

from podlevel.ttrpc.codec import MAX_OUTBOUND_MESSAGE, Code, Connection, Request, Response, Role
from podlevel.ttrpc.mux import encode_frame
from podlevel.ttrpc.transport import MAX_STATUS_MESSAGE, RequestHandler, RpcError, Transport
from support.ttrpc_peer import Peer

PLUGIN = "test.Plugin"
RUNTIME = "test.Runtime"


def run(coro: Coroutine[Any, Any, None]) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(10):
            await coro

    asyncio.run(bounded())


def echo(prefix: bytes) -> RequestHandler:
    async def handler(request: Request) -> bytes:
        return prefix + request.payload

    return handler


async def transports(
    plugin_handlers: dict[tuple[str, str], RequestHandler],
    runtime_handlers: dict[tuple[str, str], RequestHandler],
) -> tuple[Transport, Transport]:
    a, b = socket.socketpair()
    plugin = await Transport.from_socket(a, plugin_handlers, role=Role.PLUGIN, name="plugin")
    runtime = await Transport.from_socket(b, runtime_handlers, role=Role.RUNTIME, name="runtime")
    return plugin, runtime


async def peer_and_transport(handlers: dict[tuple[str, str], RequestHandler]) -> tuple[Peer, Transport]:
    """A codec-level runtime peer and the plugin-side transport under test."""
    a, b = socket.socketpair()
    transport = await Transport.from_socket(a, handlers, name="plugin")
    return await Peer.over(b, role=Role.RUNTIME), transport


def test_calls_in_both_directions() -> None:
    async def main() -> None:
        plugin, runtime = await transports(
            {(PLUGIN, "Configure"): echo(b"plugin:")}, {(RUNTIME, "Register"): echo(b"runtime:")}
        )
        assert await runtime.call(PLUGIN, "Configure", b"a", timeout=5) == b"plugin:a"
        assert await plugin.call(RUNTIME, "Register", b"b", timeout=5) == b"runtime:b"
        assert await plugin.call(RUNTIME, "Register", b"c", timeout=5) == b"runtime:c"
        plugin.close("test done")
        assert await plugin.wait_closed() == "test done"
        assert await runtime.wait_closed() == "peer closed the connection (EOF)"

    run(main())


def test_large_payloads_cross_in_both_directions() -> None:
    async def main() -> None:
        plugin, runtime = await transports({(PLUGIN, "Big"): echo(b"")}, {})
        payload = bytes(range(256)) * (3 << 12)
        assert await runtime.call(PLUGIN, "Big", payload, timeout=5) == payload
        plugin.close("done")
        await runtime.wait_closed()

    run(main())


def test_responses_may_complete_out_of_order() -> None:
    async def main() -> None:
        release = asyncio.Event()

        async def slow(request: Request) -> bytes:
            await release.wait()
            return b"slow"

        async def fast(request: Request) -> bytes:
            release.set()
            return b"fast"

        plugin, runtime = await transports({(PLUGIN, "Slow"): slow, (PLUGIN, "Fast"): fast}, {})
        slow_call = asyncio.ensure_future(runtime.call(PLUGIN, "Slow", b"", timeout=5))
        assert await runtime.call(PLUGIN, "Fast", b"", timeout=5) == b"fast"
        assert await slow_call == b"slow"
        runtime.close("done")
        await plugin.wait_closed()

    run(main())


@pytest.mark.parametrize(
    ("service", "method", "text"),
    [
        pytest.param(PLUGIN, "Nope", f"method Nope of service {PLUGIN} is not implemented", id="method"),
        pytest.param("other.Service", "X", "service other.Service is not implemented", id="service"),
    ],
)
def test_unknown_method_or_service_answers_unimplemented(service: str, method: str, text: str) -> None:
    async def main() -> None:
        plugin, runtime = await transports({(PLUGIN, "Configure"): echo(b"")}, {})
        with pytest.raises(RpcError) as info:
            await runtime.call(service, method, b"", timeout=5)
        assert (info.value.code, info.value.message) == (Code.UNIMPLEMENTED, text)
        assert not plugin.closed
        runtime.close("done")
        await plugin.wait_closed()

    run(main())


def raising(exc: Exception) -> RequestHandler:
    async def handler(request: Request) -> bytes:
        raise exc

    return handler


@pytest.mark.parametrize(
    ("exc", "code", "text"),
    [
        pytest.param(RpcError(Code.FAILED_PRECONDITION, "no room"), 9, "no room", id="rpc-error"),
        pytest.param(
            ValueError("bad value"), 13, "M: internal error: ValueError: bad value", id="plain-exception"
        ),
        pytest.param(
            RpcError(Code.INVALID_ARGUMENT, "name 'a\ud800\x07'"), 3, "name 'a\\ud800\\x07'", id="unprintable"
        ),
        pytest.param(
            RpcError(Code.INVALID_ARGUMENT, "x" * (MAX_STATUS_MESSAGE + 1)),
            3,
            "x" * (MAX_STATUS_MESSAGE - 30) + " ... (16385 characters in all)",
            id="too-long",
        ),
    ],
)
def test_handler_errors_become_statuses(exc: Exception, code: int, text: str) -> None:
    async def main() -> None:
        plugin, runtime = await transports({(PLUGIN, "M"): raising(exc)}, {})
        with pytest.raises(RpcError) as info:
            await runtime.call(PLUGIN, "M", b"", timeout=5)
        assert (info.value.code, info.value.message) == (code, text)
        assert not plugin.closed
        runtime.close("done")
        await plugin.wait_closed()

    run(main())


def test_oversized_reply_answers_resource_exhausted() -> None:
    async def main() -> None:
        async def huge(request: Request) -> bytes:
            return b"x" * MAX_OUTBOUND_MESSAGE

        plugin, runtime = await transports({(PLUGIN, "Huge"): huge}, {})
        with pytest.raises(RpcError) as info:
            await runtime.call(PLUGIN, "Huge", b"", timeout=5)
        assert info.value.code == Code.RESOURCE_EXHAUSTED
        assert f"{MAX_OUTBOUND_MESSAGE}-byte limit" in info.value.message
        runtime.close("done")
        await plugin.wait_closed()

    run(main())


def test_oversized_request_is_refused_before_sending() -> None:
    async def main() -> None:
        plugin, runtime = await transports({}, {})
        with pytest.raises(RpcError) as info:
            await plugin.call(RUNTIME, "M", b"x" * MAX_OUTBOUND_MESSAGE, timeout=5)
        assert info.value.code == Code.RESOURCE_EXHAUSTED
        assert "M request: ttrpc message of" in info.value.message
        assert not plugin.closed
        plugin.close("done")
        await runtime.wait_closed()

    run(main())


def test_call_timeout_raises_deadline_exceeded_and_late_reply_is_dropped() -> None:
    async def main() -> None:
        release = asyncio.Event()
        answered = asyncio.Event()

        async def stuck(request: Request) -> bytes:
            await release.wait()
            answered.set()
            return b"late"

        plugin, runtime = await transports({}, {(RUNTIME, "Stuck"): stuck, (RUNTIME, "Echo"): echo(b"")})
        with pytest.raises(RpcError) as info:
            await plugin.call(RUNTIME, "Stuck", b"", timeout=0.05)
        assert info.value.code == Code.DEADLINE_EXCEEDED
        assert "no response within 0.05 s" in info.value.message
        release.set()
        await answered.wait()
        assert await plugin.call(RUNTIME, "Echo", b"next", timeout=5) == b"next"
        plugin.close("done")
        await runtime.wait_closed()

    run(main())


def test_call_timeout_covers_a_write_blocked_by_a_peer_that_does_not_read() -> None:
    async def main() -> None:
        a, b = socket.socketpair()
        transport = await Transport.from_socket(a, {}, name="plugin")
        # Far more than the socket buffers and the stream's high-water mark hold, so drain() blocks.
        payload = b"x" * (MAX_OUTBOUND_MESSAGE // 2)
        with pytest.raises(RpcError) as info:
            async with asyncio.timeout(5):
                await transport.call(RUNTIME, "M", payload, timeout=0.05)
        assert info.value.code == Code.DEADLINE_EXCEEDED
        assert "M: request not written (peer not reading) within 0.05 s" in info.value.message
        transport.close("done")
        await transport.wait_closed()
        b.close()

    run(main())


def test_close_does_not_wait_for_a_peer_that_does_not_read() -> None:
    async def main() -> None:
        replying = asyncio.Event()

        async def big(request: Request) -> bytes:
            replying.set()
            return b"x" * (MAX_OUTBOUND_MESSAGE // 2)

        a, b = socket.socketpair()
        transport = await Transport.from_socket(a, {(PLUGIN, "Big"): big}, name="plugin")
        b.sendall(Connection(Role.RUNTIME).encode(Request(1, PLUGIN, "Big", b"")))
        # The reply is far larger than the socket buffers, so its write stays queued: b never reads.
        await replying.wait()
        transport.close("done")
        async with asyncio.timeout(5):
            assert await transport.wait_closed() == "done"
        b.close()

    run(main())


def test_peer_eof_fails_pending_and_later_calls() -> None:
    async def main() -> None:
        never = asyncio.Event()
        started = asyncio.Event()

        async def stuck(request: Request) -> bytes:
            started.set()
            await never.wait()
            return b""

        plugin, runtime = await transports({}, {(RUNTIME, "Stuck"): stuck})
        pending = asyncio.ensure_future(plugin.call(RUNTIME, "Stuck", b"", timeout=30))
        await started.wait()
        runtime.close("runtime stopping")
        with pytest.raises(RpcError) as info:
            await pending
        assert info.value.code == Code.UNAVAILABLE
        assert "EOF" in info.value.message
        assert await plugin.wait_closed() == "peer closed the connection (EOF)"
        with pytest.raises(RpcError, match="UNAVAILABLE"):
            await plugin.call(RUNTIME, "Stuck", b"", timeout=1)

    run(main())


BAD_INPUTS = [
    pytest.param(
        encode_frame(1, struct.pack(">IIBB", 4, 1, 1, 0) + b"\x0a\x05ab"), "undecodable", id="payload"
    ),
    pytest.param(encode_frame(1, struct.pack(">IIBB", 0, 1, 2, 0)), "message type 2", id="wrong-type"),
    pytest.param(struct.pack(">II", 1, 0xFFFFFFFF), "mux frame for conn 1 declares", id="oversized-frame"),
]


@pytest.mark.parametrize(("data", "reason"), BAD_INPUTS)
def test_bad_input_closes_with_logged_reason(
    data: bytes, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        peer, transport = await peer_and_transport({(PLUGIN, "M"): echo(b"")})
        await peer.send_raw(data)
        closed_with = await transport.wait_closed()
        assert closed_with.startswith("protocol error:")
        assert reason in closed_with
        await peer.wait_eof()
        peer.close()

    with caplog.at_level(logging.WARNING, logger="podlevel.ttrpc.transport"):
        run(main())
    assert any("protocol error" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)


def test_even_and_reused_stream_ids_answered_invalid_argument_connection_stays() -> None:
    async def main() -> None:
        peer, transport = await peer_and_transport({(PLUGIN, "M"): echo(b"ok:")})

        async def ask(stream_id: int) -> Response:
            return await peer.send_request(Request(stream_id, PLUGIN, "M", b"x"))

        assert (await ask(4)).code == Code.INVALID_ARGUMENT
        assert (await ask(3)).payload == b"ok:x"
        reused = await ask(3)
        assert (reused.code, reused.message) == (
            Code.INVALID_ARGUMENT,
            "stream id 3 must be greater than the last one, 3",
        )
        assert (await ask(5)).payload == b"ok:x"
        assert not transport.closed
        transport.close("done")
        peer.close()
        await transport.wait_closed()

    run(main())


def test_unknown_conn_frames_are_ignored() -> None:
    async def main() -> None:
        peer, transport = await peer_and_transport({(PLUGIN, "M"): echo(b"")})
        await peer.send_raw(encode_frame(5, b"whatever"))
        response = await peer.call(PLUGIN, "M", b"y")
        assert response.payload == b"y"
        assert transport.dropped_frames == 1
        transport.close("done")
        peer.close()

    run(main())


def test_unencodable_reply_answers_internal_and_keeps_the_connection() -> None:
    async def main() -> None:
        async def not_bytes(request: Request) -> bytes:
            return "text"  # type: ignore[return-value]

        peer, transport = await peer_and_transport({(PLUGIN, "M"): not_bytes, (PLUGIN, "Echo"): echo(b"")})
        response = await peer.call(PLUGIN, "M", b"")
        assert response.code == Code.INTERNAL
        assert response.message.startswith("M: reply not encodable: ")
        assert (await peer.call(PLUGIN, "Echo", b"still here")).payload == b"still here"
        assert not transport.closed
        transport.close("done")
        peer.close()

    run(main())


def test_open_unix_dials_a_listening_socket(tmp_path: Any) -> None:
    async def main() -> None:
        path = str(tmp_path / "s.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen()
        listener.setblocking(False)
        dialled = asyncio.ensure_future(Transport.open_unix(path, {}, role=Role.RUNTIME))
        accepted, _ = await asyncio.get_running_loop().sock_accept(listener)
        server = await Transport.from_socket(accepted, {(PLUGIN, "M"): echo(b"srv:")}, role=Role.PLUGIN)
        client = await dialled
        assert await client.call(PLUGIN, "M", b"z", timeout=5) == b"srv:z"
        client.close("done")
        assert await server.wait_closed() == "peer closed the connection (EOF)"
        listener.close()

    run(main())


def test_a_handler_that_does_not_wait_runs_without_a_task_of_its_own() -> None:
    async def main() -> None:
        tasks: list[asyncio.Task[Any] | None] = []

        async def direct(request: Request) -> bytes:
            tasks.append(asyncio.current_task())
            return request.payload

        peer, transport = await peer_and_transport({(PLUGIN, "M"): direct})
        assert (await peer.call(PLUGIN, "M", b"x")).payload == b"x"
        assert tasks == [None]
        transport.close("done")
        peer.close()

    run(main())


def test_handlers_that_wait_go_on_each_in_its_own_context() -> None:
    seen: contextvars.ContextVar[bytes] = contextvars.ContextVar("seen")

    async def main() -> None:
        release = asyncio.Event()

        async def waiting(request: Request) -> bytes:
            seen.set(request.payload)
            await release.wait()
            return seen.get()

        async def releasing(request: Request) -> bytes:
            release.set()
            return b""

        peer, transport = await peer_and_transport({(PLUGIN, "Wait"): waiting, (PLUGIN, "Go"): releasing})
        requests = [Request(1, PLUGIN, "Wait", b"first"), Request(3, PLUGIN, "Wait", b"second"),
                    Request(5, PLUGIN, "Go")]
        responses = await peer.send_requests(requests)
        assert [response.payload for response in responses] == [b"first", b"second", b""]
        transport.close("done")
        peer.close()

    run(main())


def test_a_handler_may_call_the_peer_before_its_first_wait() -> None:
    """A handler runs in the socket's callback until it first waits, with no task of its own: a call to the
    runtime made there must work as it does from a task (no `asyncio.timeout`, which needs one)."""
    async def main() -> None:
        transport: Transport | None = None

        async def calling_back(request: Request) -> bytes:
            assert transport is not None and asyncio.current_task() is None
            return await transport.call(RUNTIME, "Update", request.payload, timeout=5)

        plugin, runtime = await transports({(PLUGIN, "M"): calling_back}, {(RUNTIME, "Update"): echo(b"ok:")})
        transport = plugin
        assert await runtime.call(PLUGIN, "M", b"x", timeout=5) == b"ok:x"
        plugin.close("done")
        await runtime.wait_closed()

    run(main())


def test_a_continuation_cancelled_before_its_first_step_runs_the_handlers_finally() -> None:
    """Two requests in one read: the first handler waits (its continuation is scheduled, not yet run), the
    second closes the connection, which cancels that continuation before its first step. The first
    handler's `finally` (releasing what it holds) must still run, as for a task cancelled while waiting."""
    async def main() -> None:
        released: list[str] = []
        transport: Transport | None = None

        async def holding(request: Request) -> bytes:
            try:
                await asyncio.get_running_loop().create_future()
                return b""
            finally:
                released.append("released")

        async def closing(request: Request) -> bytes:
            assert transport is not None
            transport.close("closed under the waiting handler")
            return b""

        peer, transport = await peer_and_transport({(PLUGIN, "Hold"): holding, (PLUGIN, "Close"): closing})
        frames = Connection(Role.RUNTIME)
        hold, close = Request(1, PLUGIN, "Hold"), Request(3, PLUGIN, "Close")
        await peer.send_raw(frames.encode(hold) + frames.encode(close))
        assert await transport.wait_closed() == "closed under the waiting handler"
        assert released == ["released"]
        peer.close()

    run(main())
