"""A Prometheus text exposition read back with prometheus-client's own parser, for the metrics tests."""

from __future__ import annotations

import http.client

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
"""(sample name, its labels) -> value."""


def samples_of(text: str) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(seen: Samples, name: str, **labels: str) -> float:
    """The value of the sample `name` with exactly `labels`; KeyError when it is not exposed."""
    return seen[name, frozenset(labels.items())]


def exposition(address: str) -> str:
    """`GET /metrics` from `HOST:PORT`, checked to be the text format."""
    host, port = address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        connection.request("GET", "/metrics")
        response = connection.getresponse()
        assert response.status == 200
        assert response.getheader("Content-Type", "").startswith("text/plain; version=")
        return response.read().decode()
    finally:
        connection.close()
