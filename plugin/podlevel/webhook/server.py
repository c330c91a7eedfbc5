"""HTTPS for the admission webhook: `POST /mutate` (AdmissionReview v1), `GET /healthz`.

The certificate and key are files (a Secret mounted in the pod, rotated by cert-manager or by hand); each
new connection's handshake uses the pair as it is on disk then: the files' identity (inode, size, mtime)
is compared per connection and a changed pair is loaded into a fresh SSL context. A pair that does not load
(a rotation caught halfway) keeps the previous context until the files change again.

Limits: a body over `MAX_REVIEW_BYTES` is not read, and every socket operation (handshake included) times
out after `timeout` seconds (default `REQUEST_TIMEOUT_S`); both are answered like any other review the
webhook cannot read, by allowing the pod unchanged and logging why. Handshakes happen on the connection's
own thread, never in the accept loop, so a slow client delays only itself.

Stopping is the server's `drain` (`podlevel.httpd`), on SIGTERM, within `DRAIN_TIMEOUT_S`: below the
Deployment's grace period, so a rollout never cuts a review the API server is waiting for.
"""

from __future__ import annotations

import os
import ssl
import sys
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from podlevel.eventlog import logger
from podlevel.httpd import JSON, Handler, Query, Reply, Server, not_found
from podlevel.podspec.admission import MAX_REVIEW_BYTES, NOTE_LIMIT, Action, Answer, review, unreadable
from podlevel.webhook.metrics import WebhookMetrics
from podlevel.webhook.x509 import CertificateError, not_after

log = logger(__name__)

MUTATE_PATH: Final = "/mutate"
HEALTH_PATH: Final = "/healthz"
REQUEST_TIMEOUT_S: Final = 10.0
"""The API server's default (and largest) webhook `timeoutSeconds`: an answer later than that is useless."""
DRAIN_TIMEOUT_S: Final = 4.0
"""How long a stop waits for the reviews in flight: within the Deployment's grace period (5 s)."""


class CertificateReloader:
    """The SSL context for the next handshake, reloaded when the certificate or key file changes;
    `on_load` hears each loaded certificate's expiry (its notAfter, Unix time)."""

    def __init__(self, cert_file: Path, key_file: Path,
                 on_load: Callable[[float], None] | None = None) -> None:
        self.cert_file, self.key_file = cert_file, key_file
        self._on_load = on_load
        self._lock = threading.Lock()
        self._stamp = self._files_stamp()
        self._context = self._load()  # a pair that does not load at start is the caller's error

    def context(self) -> ssl.SSLContext:
        with self._lock:
            try:
                stamp = self._files_stamp()
            except OSError as err:
                log.warning("cannot stat the TLS files, serving the loaded certificate: {error}", error=err)
                return self._context
            if stamp != self._stamp:
                self._stamp = stamp
                try:
                    self._context = self._load()
                except (OSError, ssl.SSLError) as err:
                    log.warning("TLS files changed but do not load, keeping the old certificate: {error}",
                                error=err)
                else:
                    log.info("TLS certificate reloaded from {cert_file}", cert_file=self.cert_file)
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
        if self._on_load is not None:
            try:
                self._on_load(not_after(self.cert_file))
            except (OSError, CertificateError) as err:
                log.warning("cannot tell when the certificate expires: {error}", error=err)
        return context


class WebhookServer(Server):
    """The HTTPS server (`podlevel.httpd`): TLS per connection, `/healthz`, and the reviews on POST."""

    def __init__(self, address: str, certificates: CertificateReloader, *,
                 timeout: float = REQUEST_TIMEOUT_S, metrics: WebhookMetrics | None = None,
                 required_plugins: tuple[str, ...] = ()) -> None:
        self.certificates = certificates
        self.metrics = metrics
        self.required_plugins = required_plugins
        super().__init__(address, {HEALTH_PATH: _healthz}, handler=_Handler, request_timeout=timeout,
                         name="webhook")

    @property
    def url(self) -> str:
        return super().url.replace("http://", "https://", 1) + MUTATE_PATH

    def get_request(self) -> tuple[Any, Any]:
        connection, peer = super().get_request()
        wrapped = self.certificates.context().wrap_socket(
            connection, server_side=True, do_handshake_on_connect=False
        )
        return wrapped, peer

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One bounded line, not a traceback: a client that fails its handshake or hangs up is routine."""
        error = " ".join(str(sys.exc_info()[1]).split())[:NOTE_LIMIT]
        log.warning("connection from {client} failed: {error}", client=client_address[0], error=error)


def _healthz(_: Query) -> Reply:
    return Reply(HTTPStatus.OK, b"ok\n")


class _Handler(Handler):
    protocol_version = "HTTP/1.1"  # the API server keeps its connections to a webhook open
    server: WebhookServer

    def opened(self) -> None:
        self.request.do_handshake()  # on the connection's own thread, within its timeout

    def do_POST(self) -> None:
        if urlsplit(self.path).path != MUTATE_PATH:
            self.close_connection = True
            self.send(not_found(urlsplit(self.path).path))
            return
        started = time.perf_counter()
        answer = self._review()
        _log(answer)
        self.send(Reply(HTTPStatus.OK, answer.body, JSON))
        metrics = self.server.metrics
        if metrics is not None:
            metrics.reviewed(answer, time.perf_counter() - started)

    def _review(self) -> Answer:
        length = self.headers.get("Content-Length", "")
        if not (length.isascii() and length.isdigit()):
            self.close_connection = True
            return unreadable(f"request without a usable Content-Length ({length[:20]!r})")
        if int(length) > MAX_REVIEW_BYTES:
            self.close_connection = True  # the body is left unread
            return unreadable(f"review of {length} bytes is over the {MAX_REVIEW_BYTES}-byte limit")
        try:
            body = self.rfile.read(int(length))
        except (TimeoutError, OSError) as err:
            self.close_connection = True
            return unreadable(f"cannot read the review: {err or type(err).__name__}")
        if len(body) < int(length):
            self.close_connection = True
            return unreadable(f"review truncated: {len(body)} of {length} bytes")
        return review(body, self.server.required_plugins)


def _log(answer: Answer) -> None:
    if answer.note is not None:
        log.warning("pod {pod}: pod-shape annotation {action}: {note}", pod=answer.pod, action=answer.action,
                    note=answer.note)
    elif answer.action is not Action.UNCHANGED:
        log.info("pod {pod}: pod-shape annotation {action}", pod=answer.pod, action=answer.action)
    else:
        log.debug("pod {pod}: nothing to change", pod=answer.pod)
