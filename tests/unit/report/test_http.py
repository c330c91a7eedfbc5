"""report.http: the probes and the routing of the plugin's HTTP endpoint, over a real socket on loopback."""

from __future__ import annotations

import http.client
from collections.abc import Iterator

import pytest

from podlevel.report.http import JSON, Query, Reply, ReportServer, parse_address, probes


@pytest.fixture
def ready() -> list[str | None]:
    return ["not registered and synchronized with the runtime"]


@pytest.fixture
def server(ready: list[str | None]) -> Iterator[ReportServer]:
    def echo(query: Query) -> Reply:
        return Reply(200, repr(sorted(query.items())).encode(), JSON)

    def broken(_: Query) -> Reply:
        raise RuntimeError("view failed")

    running = ReportServer("127.0.0.1:0", {**probes(lambda: ready[0]), "/echo": echo, "/broken": broken})
    running.start()
    try:
        yield running
    finally:
        running.stop()


def get(server: ReportServer, path: str, method: str = "GET") -> tuple[int, str, str]:
    connection = http.client.HTTPConnection(*server.address, timeout=5)
    try:
        connection.request(method, path)
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type", ""), response.read().decode()
    finally:
        connection.close()


def test_healthz_answers_while_readyz_waits_for_the_runtime(
    server: ReportServer, ready: list[str | None]
) -> None:
    assert get(server, "/healthz")[::2] == (200, "ok\n")
    waiting = "not ready: not registered and synchronized with the runtime\n"
    assert get(server, "/readyz")[::2] == (503, waiting)
    ready[0] = None
    assert get(server, "/readyz")[::2] == (200, "ok\n")


def test_routes_get_the_query_and_their_content_type(server: ReportServer) -> None:
    assert get(server, "/echo?pod=a&pod=b") == (200, JSON, "[('pod', ['a', 'b'])]")
    assert get(server, "/echo", "HEAD") == (200, JSON, "")


def test_unknown_paths_other_methods_and_broken_views_answer_without_killing_the_server(
    server: ReportServer,
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
