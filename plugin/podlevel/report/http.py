"""The plugin's HTTP endpoint (`--metrics-address`, default 127.0.0.1:9808): probes and read-only views.

Routes are plain functions from the request's query to a `Reply`; each runs on the server's own thread and
reads only what it is given (a snapshot getter), never the live agent. Built-in routes:
- `/healthz`: 200 while the process serves requests (the DaemonSet's liveness probe);
- `/readyz`: 200 once the plugin is registered with the runtime and synchronized, else 503 saying which
  (its readiness probe).
Unknown paths answer 404; methods other than GET and HEAD 501 (http.server's answer).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Final
from urllib.parse import parse_qs, urlsplit

log = logging.getLogger("podlevel.report")

TEXT: Final = "text/plain; charset=utf-8"
JSON: Final = "application/json"


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: bytes
    content_type: str = TEXT


Query = Mapping[str, list[str]]
Route = Callable[[Query], Reply]


def parse_address(address: str) -> tuple[str, int]:
    """`HOST:PORT` (`[::1]:9808` for IPv6); raises ValueError naming the address."""
    host, sep, port = address.rpartition(":")
    if not sep or not (port.isascii() and port.isdigit()) or not 0 <= int(port) <= 65535:
        raise ValueError(f"address {address!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def probes(ready: Callable[[], str | None]) -> dict[str, Route]:
    """`/healthz` and `/readyz`; `ready()` returns None when ready, else what is still missing."""

    def healthz(_: Query) -> Reply:
        return Reply(HTTPStatus.OK, b"ok\n")

    def readyz(_: Query) -> Reply:
        missing = ready()
        if missing is None:
            return Reply(HTTPStatus.OK, b"ok\n")
        return Reply(HTTPStatus.SERVICE_UNAVAILABLE, f"not ready: {missing}\n".encode())

    return {"/healthz": healthz, "/readyz": readyz}


class ReportServer:
    """A threaded HTTP server over `routes`, serving from a daemon thread until `stop()`."""

    def __init__(self, address: str, routes: Mapping[str, Route]) -> None:
        host, port = parse_address(address)
        self._server = ThreadingHTTPServer((host, port), _handler_class(dict(routes)))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="report-http", daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def start(self) -> None:
        self._thread.start()
        log.info("serving %s on http://%s:%d", ", ".join(sorted(self.routes)), *self.address)

    @property
    def routes(self) -> list[str]:
        return list(self._server.RequestHandlerClass.routes)  # type: ignore[attr-defined]

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread.is_alive():
            self._thread.join()


def _handler_class(routes: dict[str, Route]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "nri-podlevel"

        def do_GET(self) -> None:
            self._answer(include_body=True)

        def do_HEAD(self) -> None:
            self._answer(include_body=False)

        def _answer(self, *, include_body: bool) -> None:
            url = urlsplit(self.path)
            route = routes.get(url.path)
            if route is None:
                reply = Reply(HTTPStatus.NOT_FOUND, f"no such path: {url.path}\n".encode())
            else:
                try:
                    reply = route(parse_qs(url.query))
                except Exception as err:  # a broken view must not take the server down
                    log.exception("%s failed", url.path)
                    reply = Reply(HTTPStatus.INTERNAL_SERVER_ERROR, f"{url.path} failed: {err}\n".encode())
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            if include_body:
                self.wfile.write(reply.body)

        def log_message(self, format: str, *args: object) -> None:
            log.debug("%s " + format, self.address_string(), *args)

    Handler.routes = routes  # type: ignore[attr-defined]
    return Handler
