"""`nri-podlevel webhook --tls-cert-file F --tls-private-key-file F [--address HOST:PORT]`: the mutating
admission webhook that sets the pod-shape annotation on every Pod created with pod-level resources.

It answers AdmissionReview v1 on `https://ADDRESS/mutate` (`GET /healthz` for probes): a JSON Patch that
adds or replaces the annotation, recomputed from the pod's spec, or removes one from a pod without
pod-level resources. It never denies a pod; register it with `failurePolicy: Ignore`, for `CREATE` of
`pods`, so a webhook that is down only delays the annotation, never a pod. The certificate and key are read
again whenever the files change. Logs go to stderr as `run`'s do. Exit status 2 on bad flags or TLS files.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from podlevel.cli.log_output import LOG_FORMATS, configure_logging
from podlevel.eventlog import logger
from podlevel.httpd import Server
from podlevel.webhook.metrics import WebhookMetrics
from podlevel.webhook.server import DRAIN_TIMEOUT_S, REQUEST_TIMEOUT_S, CertificateReloader, WebhookServer

log = logger(__name__)


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "webhook",
        help="serve the admission webhook that annotates pods with pod-level resources",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--address", default=":8443", metavar="HOST:PORT",
                        help="where to listen (default :8443, every address)")
    parser.add_argument("--tls-cert-file", type=Path, required=True, metavar="FILE",
                        help="PEM certificate (chain) the API server verifies")
    parser.add_argument("--tls-private-key-file", type=Path, required=True, metavar="FILE",
                        help="PEM private key of the certificate")
    parser.add_argument("--request-timeout", type=float, default=REQUEST_TIMEOUT_S, metavar="SECONDS",
                        help="give up on a connection silent this long, handshake included (default "
                        f"{REQUEST_TIMEOUT_S:g}, the API server's longest wait)")
    parser.add_argument("--require-plugin", action="append", default=[], metavar="NAME",
                        help="mark each shaped pod as requiring this NRI plugin (its name, e.g. podlevel), "
                             "so a runtime with NRI's default validator refuses its containers while the "
                             "plugin is not running (fail closed); repeatable")
    parser.add_argument("--metrics-address", default="", metavar="HOST:PORT",
                        help="plain HTTP `/metrics` of the reviews, their latency and the certificate's "
                             "expiry (empty: off)")
    parser.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    parser.add_argument("--log-format", default="auto", choices=LOG_FORMATS)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    configure_logging(args.log_level, args.log_format)
    try:
        if not args.request_timeout > 0:
            raise ValueError(f"--request-timeout must be positive, not {args.request_timeout:g}")
        metrics = WebhookMetrics() if args.metrics_address else None
        certificates = CertificateReloader(args.tls_cert_file, args.tls_private_key_file,
                                           metrics.certificate_loaded if metrics is not None else None)
        server = WebhookServer(args.address, certificates, timeout=args.request_timeout, metrics=metrics,
                               required_plugins=tuple(args.require_plugin))
        exporter = None
        if metrics is not None:
            try:
                exporter = Server(args.metrics_address, {"/metrics": metrics.route()}, name="webhook-metrics")
            except OSError:
                server.stop()
                raise
    except (ValueError, OSError) as err:  # ssl.SSLError is an OSError
        print(f"nri-podlevel webhook: {err}", file=sys.stderr)
        return 2
    stopping = threading.Event()

    def stop(signum: int, _: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    server.start()
    log.info("serving the admission webhook on {url}", url=server.url)
    if exporter is not None:
        exporter.start()
        log.info("serving /metrics on {url}", url=exporter.url)
    stopping.wait()
    left = server.drain(DRAIN_TIMEOUT_S)
    if exporter is not None:
        exporter.stop()
    if left:
        log.warning("stopped with {reviews} reviews still in flight after {timeout:.0f} s", reviews=left,
                    timeout=DRAIN_TIMEOUT_S)
    else:
        log.info("stopped: every review in flight answered, every connection closed")
    return 0
