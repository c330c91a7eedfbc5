"""`nri-podlevel webhook` as a process over real TLS: reviews of pods as the API server sends them get a
patch that a JSON Patch library applies; malformed, truncated, oversized and non-Pod reviews get a clean
allow with a log line; a certificate rotated on disk is served at the next connection."""

from __future__ import annotations

import base64
import json
import platform
import socket
import ssl
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml
from cryptography import x509

from podlevel.build import version
from podlevel.podspec.admission import MAX_REVIEW_BYTES, REQUIRED_PLUGINS_ANNOTATION
from podlevel.podspec.manifest import SHAPE_ANNOTATION
from podlevel.webhook.server import DRAIN_TIMEOUT_S, CertificateReloader, WebhookServer
from support.builders import EXAMPLES
from support.scrape import samples_of, value
from testbed.apiserver import SERVICE_NAME, WebhookProcess, create_request, with_api_defaults
from testbed.plugin_process import free_port
from testbed.tls import TestCA
from testbed.wait import wait_until

LOG_TIMEOUT_S = 10.0
REQUEST_TIMEOUT_S = 1.0


@pytest.fixture(scope="module")
def webhook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebhookProcess]:
    process = WebhookProcess(tmp_path_factory.mktemp("webhook"), echo=False,
                             extra=("--request-timeout", str(REQUEST_TIMEOUT_S)))
    try:
        process.wait_serving()
        yield process
    finally:
        process.stop()


def sidecar_pod() -> dict[str, Any]:
    manifest: dict[str, Any] = yaml.safe_load((EXAMPLES / "pod-scope-mixed.yaml").read_text())
    manifest["metadata"] = {"generateName": "mixed-", "labels": {"app": "mixed"}}  # no annotations map
    return with_api_defaults(manifest, namespace="shop")


def raw_exchange(webhook: WebhookProcess, request: bytes) -> bytes:
    """Send `request` bytes over TLS and read whatever comes back until the server closes."""
    with socket.create_connection(webhook.address, timeout=15) as plain, \
            webhook.client_context().wrap_socket(plain) as tls:
        tls.sendall(request)
        chunks = []
        while chunk := tls.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def allowed_unchanged(answer: bytes) -> dict[str, Any]:
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    response: dict[str, Any] = json.loads(body)["response"]
    assert response["allowed"] is True and "patch" not in response
    return response


def test_a_pod_review_is_answered_with_a_patch_that_applies(webhook: WebhookProcess) -> None:
    pod = sidecar_pod()
    marker = len(webhook.lines)
    response = webhook.review(create_request(pod))
    assert response["patchType"] == "JSONPatch"
    after = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(response["patch"])))
    shape = json.loads(after["metadata"]["annotations"].pop(SHAPE_ANNOTATION))
    assert after == {**pod, "metadata": {**pod["metadata"], "annotations": {}}}
    assert shape["resources"]["limits"] == {"cpu": "4", "memory": "4Gi"}
    assert [c["name"] for c in shape["initContainers"]] == ["metrics-sidecar", "logging-sidecar"]
    logged = webhook.wait_for_line("pod shop/mixed-*: pod-shape annotation set", LOG_TIMEOUT_S, after=marker)
    assert json.loads(logged)["level"] == "info"


@pytest.mark.parametrize(
    ("request_bytes", "reason"),
    [
        (b"POST /mutate HTTP/1.1\r\nContent-Length: 9\r\n\r\n{not json", "body is not JSON"),
        (b"POST /mutate HTTP/1.1\r\nContent-Length: 400\r\n\r\n{\"apiVersion\": \"admission", "timed out"),
        (f"POST /mutate HTTP/1.1\r\nContent-Length: {MAX_REVIEW_BYTES + 1}\r\n\r\n".encode(), "over the"),
        (b"POST /mutate HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "Content-Length"),
    ],
    ids=["malformed", "short-then-silent", "oversized", "no-length"],
)
def test_unreadable_requests_get_a_clean_allow_and_a_log_line(
    webhook: WebhookProcess, request_bytes: bytes, reason: str
) -> None:
    marker = len(webhook.lines)
    assert allowed_unchanged(raw_exchange(webhook, request_bytes))["uid"] == ""
    line = webhook.wait_for_line(reason, LOG_TIMEOUT_S, after=marker)
    assert json.loads(line)["level"] == "warning" and "pod-shape annotation unchanged" in line


def test_a_client_that_hangs_up_mid_body_costs_one_log_line(webhook: WebhookProcess) -> None:
    marker = len(webhook.lines)
    with socket.create_connection(webhook.address, timeout=15) as plain, \
            webhook.client_context().wrap_socket(plain) as tls:
        tls.sendall(b"POST /mutate HTTP/1.1\r\nContent-Length: 400\r\n\r\n{\"apiVersion\"")
    line = webhook.wait_for_line("pod-shape annotation unchanged", LOG_TIMEOUT_S, after=marker)
    assert "truncated" in line or "cannot read the review" in line
    assert "patch" in webhook.review(create_request(sidecar_pod())), "and the webhook goes on serving"


def test_a_review_of_something_else_is_allowed_unchanged(webhook: WebhookProcess) -> None:
    request = create_request(sidecar_pod())
    request["kind"] = {"group": "apps", "version": "v1", "kind": "Deployment"}
    marker = len(webhook.lines)
    response = webhook.review(request)
    assert "patch" not in response
    webhook.wait_for_line("this webhook mutates Pods", LOG_TIMEOUT_S, after=marker)


def test_health_and_unknown_paths(webhook: WebhookProcess) -> None:
    answer = raw_exchange(webhook, b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"ok\n")
    answer = raw_exchange(webhook, b"POST /other HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 404")


def test_a_client_that_fails_the_handshake_costs_one_log_line(webhook: WebhookProcess) -> None:
    marker = len(webhook.lines)
    with socket.create_connection(webhook.address, timeout=15) as plain:
        plain.sendall(b"GET /healthz HTTP/1.1\r\n\r\n")  # plain HTTP on the TLS port
        plain.recv(1024)
    line = webhook.wait_for_line("failed", LOG_TIMEOUT_S, after=marker)
    assert "connection from 127.0.0.1 failed" in line and "Traceback" not in "\n".join(webhook.lines)
    assert "patch" in webhook.review(create_request(sidecar_pod())), "and the webhook goes on serving"


def served_certificate(webhook: WebhookProcess) -> x509.Certificate:
    with socket.create_connection(webhook.address, timeout=15) as plain, \
            webhook.client_context().wrap_socket(plain) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def test_a_certificate_rotated_on_disk_is_served_at_the_next_connection(tmp_path: Path) -> None:
    webhook = WebhookProcess(tmp_path, echo=False)
    try:
        webhook.wait_serving()
        first = served_certificate(webhook)
        rotated = webhook.ca.issue("rotated.nri-podlevel.svc")
        assert rotated == webhook.serving
        wait_until(lambda: served_certificate(webhook).serial_number != first.serial_number, LOG_TIMEOUT_S,
                   "the rotated certificate to be served")
        common_name = served_certificate(webhook).subject.rfc4514_string()
        assert common_name == "CN=rotated.nri-podlevel.svc"
        webhook.wait_for_line("TLS certificate reloaded", LOG_TIMEOUT_S)
        webhook.serving.key_file.write_text("not a key\n")  # a rotation caught halfway: keep serving
        assert served_certificate(webhook).subject.rfc4514_string() == common_name
        webhook.wait_for_line("do not load, keeping the old certificate", LOG_TIMEOUT_S)
        assert "patch" in webhook.review(create_request(sidecar_pod()))
    finally:
        webhook.stop()
    assert webhook.process.returncode == 0, "SIGTERM stops it cleanly"


def test_bad_tls_files_exit_2(tmp_path: Path) -> None:
    missing = tmp_path / "missing.pem"
    done = subprocess.run(
        [sys.executable, "-m", "podlevel.cli.main", "webhook", "--address", "127.0.0.1:0",
         "--tls-cert-file", str(missing), "--tls-private-key-file", str(missing)],
        capture_output=True, text=True, timeout=30, check=False,
    )
    assert done.returncode == 2 and "nri-podlevel webhook:" in done.stderr and str(missing) in done.stderr


def test_the_client_really_verifies(webhook: WebhookProcess) -> None:
    """The tests' trust is real: a client without the CA refuses the webhook's certificate."""
    with socket.create_connection(webhook.address, timeout=15) as plain, \
            pytest.raises(ssl.SSLCertVerificationError):
        ssl.create_default_context().wrap_socket(plain, server_hostname="127.0.0.1")


def test_a_stop_finishes_the_review_in_flight_and_closes_idle_connections(tmp_path: Path) -> None:
    """`drain` (what SIGTERM runs) while one connection idles after a review and another is halfway through
    sending one: the idle one is closed, the half-sent review is answered with `Connection: close`, and
    nothing is left open."""
    ca = TestCA(tmp_path)
    serving = ca.issue(SERVICE_NAME)
    server = WebhookServer("127.0.0.1:0", CertificateReloader(serving.cert_file, serving.key_file))
    server.start()
    client = ssl.create_default_context(cafile=str(ca.ca_file))
    client.check_hostname = False
    body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": create_request(sidecar_pod())}).encode()
    head = (f"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    address = server.server_address[:2]
    with socket.create_connection(address, timeout=15) as idle_plain, \
            socket.create_connection(address, timeout=15) as busy_plain, \
            client.wrap_socket(idle_plain) as idle, client.wrap_socket(busy_plain) as busy:
        idle.sendall(head + body)
        assert read_response(idle).startswith(b"HTTP/1.1 200")  # kept alive: now idle
        busy.sendall(head + body[:100])
        wait_until(lambda: server.connections() == (2, 1), LOG_TIMEOUT_S, "the half-sent review in flight")
        drained: list[int] = []
        stopping = threading.Thread(target=lambda: drained.append(server.drain(DRAIN_TIMEOUT_S)))
        stopping.start()
        assert idle.recv(65536) == b"", "the idle connection is closed"
        busy.sendall(body[100:])
        answer = read_response(busy)
        stopping.join(timeout=10)
    assert answer.startswith(b"HTTP/1.1 200") and b"Connection: close" in answer
    assert drained == [0]


def read_response(tls: ssl.SSLSocket) -> bytes:
    """One HTTP response: headers, then as many body bytes as its Content-Length says."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += tls.recv(65536)
    head, _, rest = data.partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:")))
    while len(rest) < length:
        rest += tls.recv(65536)
    return head + b"\r\n\r\n" + rest


def test_the_reviews_their_latency_and_the_certificates_expiry_are_on_metrics(tmp_path: Path) -> None:
    port = free_port()
    process = WebhookProcess(tmp_path, echo=False, extra=("--metrics-address", f"127.0.0.1:{port}"))
    try:
        process.wait_serving()
        process.wait_for_line("serving /metrics on", LOG_TIMEOUT_S)
        process.review(create_request(sidecar_pod()))
        raw_exchange(process, b"POST /mutate HTTP/1.1\r\nContent-Length: 9\r\n\r\n{not json")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            seen = samples_of(answer.read().decode())
    finally:
        process.stop()
    assert value(seen, "nri_podlevel_webhook_reviews_total", outcome="set") == 1
    assert value(seen, "nri_podlevel_webhook_reviews_total", outcome="left-alone") == 1
    assert value(seen, "nri_podlevel_webhook_reviews_total", outcome="removed") == 0
    assert value(seen, "nri_podlevel_webhook_review_duration_seconds_count") == 2
    assert not [name for name, _ in seen if name.endswith("_created")], "no `_created` series, as the agent's"
    expiry = x509.load_pem_x509_certificate(process.serving.cert_file.read_bytes()).not_valid_after_utc
    assert value(seen, "nri_podlevel_webhook_certificate_expiry_timestamp_seconds") == expiry.timestamp()
    assert value(seen, "nri_podlevel_build_info", version=version(), python=platform.python_version(),
                 nri="v1alpha1") == 1


def test_require_plugin_marks_the_shaped_pod_for_nris_validator(tmp_path: Path) -> None:
    process = WebhookProcess(tmp_path, echo=False, extra=("--require-plugin", "podlevel"))
    try:
        process.wait_serving()
        pod = sidecar_pod()
        response = process.review(create_request(pod))
    finally:
        process.stop()
    after = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(response["patch"])))
    assert yaml.safe_load(after["metadata"]["annotations"][REQUIRED_PLUGINS_ANNOTATION]) == ["podlevel"]
    assert SHAPE_ANNOTATION in after["metadata"]["annotations"]
