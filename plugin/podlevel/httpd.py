"""The project's one HTTP server (stdlib only), under the report endpoints and the admission webhook.

A `Server` is a threaded `http.server` whose handlers read what they serve from it, as the stdlib's own
handlers read `self.server`: `routes` (path -> a plain function from the query to a `Reply`, for GET and
HEAD), `request_timeout` (every socket operation of a connection, so a silent client holds only its own
thread). Unknown paths answer 404, a route that raises 500 with one log line, other methods 501 unless a
handler subclass adds them (the webhook's POST).

Connections are tracked (open, and whether a request is being read or answered on them) so a stop can be
the one a rollout needs: `drain()` accepts no new connection, closes the idle kept-alive ones, lets the
requests in flight finish with `Connection: close`, within a bound below the pod's grace period.

Its log lines (a failed route or connection, a debug line per request and per client gone before its
answer) go through the stdlib logger, not `eventlog`:
the two share the lowest layer, whose modules import none of each other.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Final
from urllib.parse import parse_qs, urlsplit

log = logging.getLogger(__name__)

TEXT: Final = "text/plain; charset=utf-8"
JSON: Final = "application/json"
REQUEST_TIMEOUT_S: Final = 10.0
"""The longest a connection may stay silent: no reader of these endpoints waits longer for an answer."""


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


def not_found(path: str) -> Reply:
    return Reply(HTTPStatus.NOT_FOUND, f"no such path: {path}\n".encode())


class Handler(BaseHTTPRequestHandler):
    """GET and HEAD by the server's routes; subclasses add methods and answer through `send`."""

    server_version = "nri-podlevel"
    server: Server

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.request_timeout)
        self.opened()
        self.server.track(self.connection, busy=False)

    def opened(self) -> None:
        """Runs once the connection is set up and before it counts as open (the webhook's TLS handshake)."""

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.untrack(self.connection)

    def parse_request(self) -> bool:
        self.server.track(self.connection, busy=True)  # a request line arrived: a request is in flight
        return super().parse_request()

    def do_GET(self) -> None:
        self.send(self._routed(), include_body=True)

    def do_HEAD(self) -> None:
        self.send(self._routed(), include_body=False)

    def _routed(self) -> Reply:
        url = urlsplit(self.path)
        route = self.server.routes.get(url.path)
        if route is None:
            return not_found(url.path)
        try:
            return route(parse_qs(url.query))
        except Exception as err:  # a broken view must not take the server down
            log.exception("%s failed", url.path)
            return Reply(HTTPStatus.INTERNAL_SERVER_ERROR, f"{url.path} failed: {err}\n".encode())

    def send(self, reply: Reply, *, include_body: bool = True) -> None:
        """The answer, closing the connection after it when the request asked or the server drains."""
        if self.server.draining:
            self.close_connection = True
        self.send_response(reply.status)
        self.send_header("Content-Type", reply.content_type)
        self.send_header("Content-Length", str(len(reply.body)))
        if self.close_connection and self.protocol_version != "HTTP/1.0":
            self.send_header("Connection", "close")
        self.end_headers()
        if include_body:
            self.wfile.write(reply.body)
        if not self.close_connection:
            self.server.track(self.connection, busy=False)

    def log_message(self, format: str, *args: object) -> None:
        log.debug("%s " + format, self.address_string(), *args)


class Server(ThreadingHTTPServer):
    """The threaded server over `routes`: `start()` serves from a daemon thread until `stop()`/`drain()`."""

    daemon_threads = True

    def __init__(self, address: str, routes: Mapping[str, Route], *, handler: type[Handler] = Handler,
                 request_timeout: float = REQUEST_TIMEOUT_S, name: str = "http") -> None:
        self.routes = dict(routes)
        self.request_timeout = request_timeout
        self.draining = False
        self._connections: dict[socket.socket, bool] = {}
        """Open connections -> whether a request is being read or answered on it."""
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self.serve_forever, name=name, daemon=True)
        super().__init__(parse_address(address), handler)

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that went away before its answer (a probe past its timeout) is a debug line; anything
        else one logged error, never socketserver's traceback on stderr, which is not a log line."""
        error = sys.exc_info()[1]
        if isinstance(error, (BrokenPipeError, ConnectionResetError)):
            log.debug("%s went away before its answer: %s", client_address, error)
        else:
            log.error("serving %s failed", client_address, exc_info=error)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop at once: connections in flight are left to their threads (daemons, ended with the process)."""
        if self._thread.is_alive():
            self.shutdown()
            self._thread.join()
        self.server_close()

    def drain(self, timeout: float) -> int:
        """Stop accepting, close the idle connections, let the requests in flight finish (each answer
        closes its connection); returns how many connections were still open when `timeout` ran out."""
        self.shutdown()
        with self._changed:
            self.draining = True
            for connection, busy in self._connections.items():
                if not busy:
                    _close_reading(connection)
            self._changed.wait_for(lambda: not self._connections, timeout)
            left = len(self._connections)
        self.server_close()
        return left

    def track(self, connection: socket.socket, busy: bool) -> None:
        """A connection opened, started or finished a request; closed at once when idle while draining."""
        with self._changed:
            self._connections[connection] = busy
            if self.draining and not busy:
                _close_reading(connection)

    def untrack(self, connection: socket.socket) -> None:
        with self._changed:
            self._connections.pop(connection, None)
            self._changed.notify_all()

    def connections(self) -> tuple[int, int]:
        """How many connections are open, and how many of them have a request in flight."""
        with self._changed:
            return len(self._connections), sum(self._connections.values())


def _close_reading(connection: socket.socket) -> None:
    """End the wait for a next request on an idle connection (its thread reads EOF and finishes)."""
    with contextlib.suppress(OSError):  # already closed by the peer
        connection.shutdown(socket.SHUT_RD)
