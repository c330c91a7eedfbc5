"""HTTPS for the admission webhook: `POST /mutate` (AdmissionReview v1), `GET /healthz`.

The certificate and key are files (a Secret mounted in the pod, rotated by cert-manager or by hand); each
new connection's handshake uses the pair as it is on disk then: the files' identity (inode, size, mtime)
is compared per connection and a changed pair is loaded into a fresh SSL context. A pair that does not load
(a rotation caught halfway) keeps the previous context until the files change again.

Limits: a body over `MAX_REVIEW_BYTES` is not read, and every socket operation (handshake included) times
out after `timeout` seconds (default `REQUEST_TIMEOUT_S`); both are answered like any other review the
webhook cannot read, by allowing the pod unchanged and logging why. Handshakes happen on the connection's
own thread, never in the accept loop, so a slow client delays only itself.

Stopping (`drain`, on SIGTERM): no new connection is accepted, an idle kept-alive connection is closed, a
review being read or answered is finished and its answer says `Connection: close`, all within a bound below
the Deployment's grace period, so a rollout never cuts a review the API server is waiting for.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import ssl
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from podlevel.podspec.admission import MAX_REVIEW_BYTES, NOTE_LIMIT, Answer, review, unchanged

log = logging.getLogger("podlevel.webhook")

MUTATE_PATH: Final = "/mutate"
HEALTH_PATH: Final = "/healthz"
REQUEST_TIMEOUT_S: Final = 10.0
"""The API server's default (and largest) webhook `timeoutSeconds`: an answer later than that is useless."""
DRAIN_TIMEOUT_S: Final = 4.0
"""How long a stop waits for the reviews in flight: within the Deployment's grace period (5 s)."""


class CertificateReloader:
    """The SSL context for the next handshake, reloaded when the certificate or key file changes."""

    def __init__(self, cert_file: Path, key_file: Path) -> None:
        self.cert_file, self.key_file = cert_file, key_file
        self._lock = threading.Lock()
        self._stamp = self._files_stamp()
        self._context = self._load()  # a pair that does not load at start is the caller's error

    def context(self) -> ssl.SSLContext:
        with self._lock:
            try:
                stamp = self._files_stamp()
            except OSError as err:
                log.warning("cannot stat the TLS files, serving the loaded certificate: %s", err)
                return self._context
            if stamp != self._stamp:
                self._stamp = stamp
                try:
                    self._context = self._load()
                except (OSError, ssl.SSLError) as err:
                    log.warning("TLS files changed but do not load, keeping the old certificate: %s", err)
                else:
                    log.info("TLS certificate reloaded from %s", self.cert_file)
            return self._context

    def _files_stamp(self) -> tuple[int, ...]:
        return tuple(
            value
            for path in (self.cert_file, self.key_file)
            for stat in [os.stat(path)]
            for value in (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        )

    def _load(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert_file, self.key_file)
        return context


class WebhookServer(ThreadingHTTPServer):
    """The threaded HTTPS server: `serve_forever()` until `shutdown()`; one thread per connection."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], certificates: CertificateReloader, *,
                 timeout: float = REQUEST_TIMEOUT_S) -> None:
        self.certificates = certificates
        self.draining = False
        self._connections: dict[socket.socket, bool] = {}
        """Open connections -> whether a review is being read or answered on it."""
        self._changed = threading.Condition()
        super().__init__(address, type("Handler", (_Handler,), {"timeout": timeout}))

    def track(self, connection: socket.socket, busy: bool) -> None:
        """A connection opened, started or finished a review; closed at once when idle while draining."""
        with self._changed:
            self._connections[connection] = busy
            if self.draining and not busy:
                _close_reading(connection)

    def connections(self) -> tuple[int, int]:
        """How many connections are open, and how many of them have a review in flight."""
        with self._changed:
            return len(self._connections), sum(self._connections.values())

    def untrack(self, connection: socket.socket) -> None:
        with self._changed:
            self._connections.pop(connection, None)
            self._changed.notify_all()

    def drain(self, timeout: float = DRAIN_TIMEOUT_S) -> int:
        """Stop accepting, close the idle connections, let the reviews in flight finish (each answer closes
        its connection); returns how many connections were still open when `timeout` ran out."""
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

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"https://{host!s}:{port}{MUTATE_PATH}"

    def get_request(self) -> tuple[Any, Any]:
        connection, peer = super().get_request()
        wrapped = self.certificates.context().wrap_socket(
            connection, server_side=True, do_handshake_on_connect=False
        )
        return wrapped, peer

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One bounded line, not a traceback: a client that fails its handshake or hangs up is routine."""
        error = " ".join(str(sys.exc_info()[1]).split())[:NOTE_LIMIT]
        log.warning("connection from %s failed: %s", client_address[0], error)


def _close_reading(connection: socket.socket) -> None:
    """End the wait for a next request on an idle connection (its thread reads EOF and finishes)."""
    with contextlib.suppress(OSError):  # already closed by the peer
        connection.shutdown(socket.SHUT_RD)


class _Handler(BaseHTTPRequestHandler):
    server_version = "nri-podlevel"
    protocol_version = "HTTP/1.1"  # the API server keeps its connections to a webhook open
    timeout = REQUEST_TIMEOUT_S

    server: WebhookServer

    def setup(self) -> None:
        super().setup()
        self.request.do_handshake()
        self.server.track(self.request, busy=False)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.untrack(self.request)

    def parse_request(self) -> bool:
        self.server.track(self.request, busy=True)  # a request line arrived: this review is in flight
        return super().parse_request()

    def do_GET(self) -> None:
        if urlsplit(self.path).path == HEALTH_PATH:
            self._send(HTTPStatus.OK, b"ok\n", "text/plain; charset=utf-8")
        else:
            self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain; charset=utf-8")

    def do_POST(self) -> None:
        if urlsplit(self.path).path != MUTATE_PATH:
            self.close_connection = True
            self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain; charset=utf-8")
            return
        answer = self._review()
        _log(answer)
        self._send(HTTPStatus.OK, answer.body, "application/json")

    def _review(self) -> Answer:
        length = self.headers.get("Content-Length", "")
        if not (length.isascii() and length.isdigit()):
            self.close_connection = True
            return unchanged("", "-", f"request without a usable Content-Length ({length[:20]!r})")
        if int(length) > MAX_REVIEW_BYTES:
            self.close_connection = True  # the body is left unread
            return unchanged("", "-", f"review of {length} bytes is over the {MAX_REVIEW_BYTES}-byte limit")
        try:
            body = self.rfile.read(int(length))
        except (TimeoutError, OSError) as err:
            self.close_connection = True
            return unchanged("", "-", f"cannot read the review: {err or type(err).__name__}")
        if len(body) < int(length):
            self.close_connection = True
            return unchanged("", "-", f"review truncated: {len(body)} of {length} bytes")
        return review(body)

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        if self.server.draining:
            self.close_connection = True
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        if not self.close_connection:
            self.server.track(self.request, busy=False)

    def log_message(self, format: str, *args: object) -> None:
        log.debug("%s " + format, self.address_string(), *args)


def _log(answer: Answer) -> None:
    if answer.note is not None:
        log.warning("pod %s: pod-shape annotation %s: %s", answer.pod, answer.action, answer.note)
    elif answer.action != "unchanged":
        log.info("pod %s: pod-shape annotation %s", answer.pod, answer.action)
    else:
        log.debug("pod %s: nothing to change", answer.pod)
