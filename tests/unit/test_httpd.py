"""httpd: routing, limits and the stop of the project's HTTP server, with the probes on it, over a real socket
on loopback."""

from __future__ import annotations

import http.client
import logging
import socket
from collections.abc import Iterator

import pytest

from podlevel.httpd import JSON, Query, Reply, Server, parse_address
from podlevel.report.probes import probes
from testbed.wait import wait_until


@pytest.fixture
def ready() -> list[str | None]:
    return ["not registered and synchronized with the runtime"]


@pytest.fixture
def server(ready: list[str | None]) -> Iterator[Server]:
    def echo(query: Query) -> Reply:
        return Reply(200, repr(sorted(query.items())).encode(), JSON)

    def broken(_: Query) -> Reply:
        raise RuntimeError("view failed")

    running = Server("127.0.0.1:0", {**probes(lambda: ready[0]), "/echo": echo, "/broken": broken},
                     request_timeout=0.5)
    running.start()
    try:
        yield running
    finally:
        running.stop()


def get(server: Server, path: str, method: str = "GET") -> tuple[int, str, str]:
    connection = http.client.HTTPConnection(*server.address, timeout=5)
    try:
        connection.request(method, path)
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type", ""), response.read().decode()
    finally:
        connection.close()


def test_healthz_answers_while_readyz_waits_for_the_runtime(
    server: Server, ready: list[str | None]
) -> None:
    assert get(server, "/healthz")[::2] == (200, "ok\n")
    waiting = "not ready: not registered and synchronized with the runtime\n"
    assert get(server, "/readyz")[::2] == (503, waiting)
    ready[0] = None
    assert get(server, "/readyz")[::2] == (200, "ok\n")


def test_routes_get_the_query_and_their_content_type(server: Server) -> None:
    assert get(server, "/echo?pod=a&pod=b") == (200, JSON, "[('pod', ['a', 'b'])]")
    assert get(server, "/echo", "HEAD") == (200, JSON, "")


def test_unknown_paths_other_methods_and_broken_views_answer_without_killing_the_server(
    server: Server,
) -> None:
    assert get(server, "/nowhere")[::2] == (404, "no such path: /nowhere\n")
    assert get(server, "/healthz", "POST")[0] == 501
    assert get(server, "/broken")[::2] == (500, "/broken failed: view failed\n")
    assert get(server, "/healthz")[0] == 200


@pytest.mark.parametrize("address", ["9808", "host:", "host:port", "host:70000", "host:\u00b2"])
def test_a_bad_address_is_refused_naming_it(address: str) -> None:
    with pytest.raises(ValueError, match="is not HOST:PORT"):
        parse_address(address)


def test_ipv6_addresses_in_brackets() -> None:
    assert parse_address("[::1]:9808") == ("::1", 9808)


def test_a_silent_client_is_cut_off_after_the_request_timeout(server: Server) -> None:
    """A connection that never sends its request holds its thread only for `request_timeout`."""
    with socket.create_connection(server.address, timeout=10) as silent:
        assert silent.recv(1) == b"", "closed by the server, not by the client's own 10 s timeout"
    wait_until(lambda: server.connections() == (0, 0), 5, "the silent connection forgotten")


def test_a_drain_closes_idle_connections_and_stops_accepting(server: Server) -> None:
    with socket.create_connection(server.address, timeout=10) as idle:
        wait_until(lambda: server.connections() == (1, 0), 5, "the connection accepted")
        assert server.drain(timeout=5) == 0
        assert idle.recv(1) == b""
    with pytest.raises(OSError):
        socket.create_connection(server.address, timeout=2).close()


def test_a_client_gone_before_its_answer_is_a_debug_line_and_nothing_is_a_traceback_on_stderr(
    server: Server, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """A probe that gave up (its timeout) closes before the answer: socketserver would print a traceback on
    stderr, in the middle of the JSON log lines."""
    caplog.set_level(logging.DEBUG, logger="podlevel.httpd")
    for error in (BrokenPipeError(32, "Broken pipe"), ConnectionResetError(104, "reset"), ValueError("odd")):
        try:
            raise error
        except (OSError, ValueError):
            server.handle_error(None, ("10.233.0.1", 5555))
    assert capsys.readouterr().err == ""
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("DEBUG", "('10.233.0.1', 5555) went away before its answer: [Errno 32] Broken pipe"),
        ("DEBUG", "('10.233.0.1', 5555) went away before its answer: [Errno 104] reset"),
        ("ERROR", "serving ('10.233.0.1', 5555) failed"),
    ]
