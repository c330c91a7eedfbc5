"""deploy/monitoring as the tests read it: the PrometheusRule's rules and the dashboard's queries, the metric
names they use, and `promtool` to check and evaluate the rules.

A query is only as good as the names it uses: a rule on a metric the agent does not export never fires and
says nothing. So every name is looked up in an exposition (a `PluginMetrics` built in the test, or a real
agent's `/metrics`), with the type its suffix promises. Rules are evaluated by Prometheus' own engine through
`promtool test rules`, on hand-written series (deploy/monitoring/rules-test.yaml) or on series made from a
scrape (`input_series`).
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

import yaml
from prometheus_client.parser import text_string_to_metric_families

from testbed.manifests import DEPLOY, Manifest, find, render_directory

MONITORING: Final = DEPLOY / "monitoring"
RULES_TEST: Final = MONITORING / "rules-test.yaml"
DASHBOARD_KEY: Final = "nri-podlevel.json"
"""The dashboard's file name in its ConfigMap."""
JOB: Final = "nri-podlevel"
MADE_ELSEWHERE: Final = frozenset({"up", "kube_node_status_condition", "kube_pod_container_resource_limits",
                                   "apiserver_admission_webhook_fail_open_count"})
"""Series neither the agent nor the webhook exports: `up`, which Prometheus writes for each target itself,
kube-state-metrics' node conditions and container limits, and the API server's webhook counters."""

_STRING = re.compile(r""""(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`""")
_LABEL_LIST = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_BRACES = re.compile(r"\{[^}]*\}")
_BRACKETS = re.compile(r"\[[^\]]*\]")
_NAME = re.compile(r"(?<![\w.$])([A-Za-z_:][\w:]*)(\s*\()?")
_OPERATORS: Final = frozenset({"and", "or", "unless", "offset", "bool", "atan2", "inf", "nan"})


class PromtoolError(RuntimeError):
    """promtool is not installed."""


def render_monitoring() -> list[Manifest]:
    return render_directory(MONITORING)


def rules_spec(objects: Iterable[Manifest]) -> dict[str, Any]:
    """The PrometheusRule's `spec`: a Prometheus rules file as it stands."""
    (rule,) = find(objects, "PrometheusRule")
    spec: dict[str, Any] = rule["spec"]
    return spec


def alerts(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [rule for group in spec["groups"] for rule in group["rules"] if "alert" in rule]


def dashboard(objects: Iterable[Manifest]) -> dict[str, Any]:
    """The dashboard as Grafana's sidecar reads it, from its ConfigMap."""
    (config_map,) = [o for o in find(objects, "ConfigMap") if DASHBOARD_KEY in o.get("data", {})]
    loaded: dict[str, Any] = json.loads(config_map["data"][DASHBOARD_KEY])
    return loaded


def dashboard_queries(board: Mapping[str, Any]) -> list[str]:
    return [target["expr"] for panel in board["panels"] for target in panel.get("targets", [])]


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: what is left once strings, label matchers, ranges,
    grouping label lists, function calls and operators are taken out. Grafana's `$variables` may stand
    inside matchers and ranges."""
    bare = _STRING.sub('""', expr)
    for pattern in (_LABEL_LIST, _BRACES, _BRACKETS):
        bare = pattern.sub(" ", bare)
    return {
        match[1] for match in _NAME.finditer(bare)
        if match[2] is None and match[1].lower() not in _OPERATORS
    }


def exposed(text: str) -> dict[str, str]:
    """Each sample name of a text exposition -> its family's type (`counter`, `gauge`, `histogram`, ...)."""
    return {sample.name: family.type
            for family in text_string_to_metric_families(text) for sample in family.samples}


def expected_type(name: str) -> str:
    """The type a query relies on, from its name: counters end in `_total`, histogram buckets in `_bucket`."""
    if name.endswith("_bucket"):
        return "histogram"
    return "counter" if name.endswith("_total") else "gauge"


def missing(names: Iterable[str], types: Mapping[str, str]) -> list[str]:
    """The names an exposition lacks or exposes with another type, one line each."""
    found = []
    for name in sorted(set(names) - MADE_ELSEWHERE):
        if name not in types:
            found.append(f"{name}: not exposed")
        elif types[name] != expected_type(name):
            found.append(f"{name}: a {types[name]}, used as a {expected_type(name)}")
    return found


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        raise PromtoolError("promtool not found: hack/setup installs it (the Debian package prometheus)")
    return found


def write_rules(spec: Mapping[str, Any], directory: Path) -> Path:
    path = directory / "rules.yaml"
    path.write_text(yaml.safe_dump(dict(spec), sort_keys=False))
    return path


def check_rules(spec: Mapping[str, Any], directory: Path) -> subprocess.CompletedProcess[str]:
    """`promtool check rules` on the spec written out as a rules file."""
    return subprocess.run([promtool(), "check", "rules", str(write_rules(spec, directory))],
                          capture_output=True, text=True, check=False, timeout=60)


def run_rule_tests(spec: Mapping[str, Any], suite: Mapping[str, Any], directory: Path
               ) -> subprocess.CompletedProcess[str]:
    """`promtool test rules` running `suite` (a rules-test file's content, its `rule_files` being
    `rules.yaml`) against the spec."""
    write_rules(spec, directory)
    tests = directory / "rules-test.yaml"
    tests.write_text(yaml.safe_dump(dict(suite), sort_keys=False))
    return subprocess.run([promtool(), "test", "rules", tests.name], cwd=directory, capture_output=True,
                          text=True, check=False, timeout=120)


def _number(value: float) -> str:
    return str(int(value)) if value.is_integer() else repr(value)


def input_series(text: str, labels: Mapping[str, str], minutes: int) -> list[dict[str, str]]:
    """The samples of a scrape as promtool `input_series` over `minutes` minutes, one sample a minute:
    gauges hold their value; counters and histograms grow by it every minute, an agent doing the same work
    again and again, so rates and quantiles are those of the scraped distribution. `labels` are the target
    labels Prometheus adds (job, node, ...). `_created` samples, which Prometheus does not ingest by default,
    are left out."""
    series = []
    for family in text_string_to_metric_families(text):
        grows = family.type in ("counter", "histogram")
        for sample in family.samples:
            if sample.name.endswith("_created") or not math.isfinite(sample.value):
                continue
            every = {**sample.labels, **labels}
            matchers = ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(every.items()))
            value = _number(sample.value)
            values = f"0+{value}x{minutes}" if grows else f"{value}x{minutes}"
            series.append({"series": f"{sample.name}{{{matchers}}}", "values": values})
    return series
