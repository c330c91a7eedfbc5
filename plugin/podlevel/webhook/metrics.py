"""The admission webhook's metrics, on a plain HTTP `/metrics` of their own (`--metrics-address`): the reviews
by outcome and how long each took, when its serving certificate expires, and which build it is.

A webhook that is down is seen from the API server's side (`apiserver_admission_webhook_fail_open_count`:
pods created unannotated, so unplaced); these say what the webhook itself did, and warn of a certificate
about to expire before the API server starts failing the calls.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Final

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from podlevel.build import NRI_API, python_version, version
from podlevel.httpd import Query, Reply, Route
from podlevel.podspec.admission import Action, Answer

DURATION_BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 2.5, 10.0)
"""Seconds, up to the API server's largest webhook timeout (10 s)."""
LEFT_ALONE: Final = "left-alone"
"""The outcome of a review that allowed the pod unchanged for a reason (unreadable, not a pod, an error)."""


class WebhookMetrics:
    """The webhook's registry and what it counts."""

    def __init__(self) -> None:
        # A `_created` series beside every counter doubles a scrape for a timestamp the process start gives
        # (the agent's metrics leave them out the same way).
        disable_created_metrics()  # type: ignore[no-untyped-call]  # the client's annotations lack it
        self.registry = registry = CollectorRegistry()
        self._reviews = Counter("nri_podlevel_webhook_reviews", "Admission reviews answered, by outcome.",
                                ["outcome"], registry=registry)
        for outcome in (*(action.value for action in Action), LEFT_ALONE):
            self._reviews.labels(outcome)
        self._duration = Histogram("nri_podlevel_webhook_review_duration_seconds",
                                   "Time from a review's request read to its answer.",
                                   buckets=DURATION_BUCKETS, registry=registry)
        self._expiry = Gauge("nri_podlevel_webhook_certificate_expiry_timestamp_seconds",
                             "When the serving certificate in use expires (its notAfter), Unix time.",
                             registry=registry)
        build = Gauge("nri_podlevel_build_info", "1, labelled with this build's version, Python and NRI API.",
                      ["version", "python", "nri"], registry=registry)
        build.labels(version(), python_version(), NRI_API).set(1)

    def reviewed(self, answer: Answer, seconds: float) -> None:
        unchanged_for_a_reason = answer.note is not None and answer.action is Action.UNCHANGED
        self._reviews.labels(LEFT_ALONE if unchanged_for_a_reason else answer.action.value).inc()
        self._duration.observe(seconds)

    def certificate_loaded(self, not_after: float) -> None:
        self._expiry.set(not_after)

    def exposition_text(self) -> str:
        return generate_latest(self.registry).decode()

    def route(self) -> Route:
        def metrics(_: Query) -> Reply:
            return Reply(HTTPStatus.OK, generate_latest(self.registry), CONTENT_TYPE_LATEST)

        return metrics
