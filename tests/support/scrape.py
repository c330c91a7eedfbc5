"""A Prometheus text exposition read back with prometheus-client's own parser, for the metrics tests."""

from __future__ import annotations

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
