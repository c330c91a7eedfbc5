"""deploy/monitoring against a real agent: `/metrics` of `nri-podlevel run` on the test bed's containerd
holds every metric the rules and the dashboard use, with the type their queries assume; and the rules,
evaluated by promtool on series made from that scrape, leave a healthy agent alone, while the same series
with the agent disconnected, or its CreateContainers over the runtime's timeout, fire exactly the alerts
meant for that.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Final

import pytest

from podlevel.webhook.metrics import WebhookMetrics
from support.demo_node import demo_pod
from support.scrape import exposition, samples_of, value
from testbed.cri import CRI
from testbed.kubelet import start_pod
from testbed.monitoring import (
    JOB,
    alerts,
    dashboard,
    dashboard_queries,
    exposed,
    input_series,
    metric_names,
    missing,
    render_monitoring,
    rules_spec,
    run_rule_tests,
)
from testbed.plugin_process import PluginProcess
from testbed.wait import wait_until

pytestmark = pytest.mark.integration

SCRAPE_TIMEOUT_S: Final = 15.0
LATENCY: Final = "nri_podlevel_event_duration_seconds"
MINUTES: Final = 60
"""How long the series run; longer than every rule's window and `for`."""
TARGET: Final = {"job": JOB, "namespace": "nri-podlevel", "pod": "nri-podlevel-testbed", "node": "testbed",
                 "instance": "127.0.0.1:9808"}
"""The labels Prometheus gives the agent's series through the PodMonitor."""

Series = list[dict[str, str]]


def handled_create_container(address: str) -> str | None:
    """The exposition once the plugin has answered a CreateContainer (its latency buckets exist then)."""
    text = exposition(address)
    try:
        counted = value(samples_of(text), f"{LATENCY}_count", event="create_container")
    except KeyError:
        return None
    return text if counted >= 1 else None


def quiet_suite(series: Series, names: Iterable[str]) -> dict[str, Any]:
    """A promtool suite expecting no alert at the end of `series`."""
    checks = [{"eval_time": f"{MINUTES}m", "alertname": name, "exp_alerts": []} for name in sorted(names)]
    return {"rule_files": ["rules.yaml"], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": checks}]}


def replaced(series: Series, matches: Callable[[str], bool], values: str) -> Series:
    return [dict(s, values=values) if matches(s["series"]) else s for s in series]


def failed_alerts(done: subprocess.CompletedProcess[str]) -> list[str]:
    """The alerts whose expectation promtool reports failed (it names each `alertname: X, time: ...`)."""
    return sorted(line.split(",")[0].split(": ")[1] for line in (done.stdout + done.stderr).splitlines()
                  if line.strip().startswith("alertname: "))


def test_rules_and_panels_on_a_real_scrape(plugin: PluginProcess, cri: CRI, tmp_path: Path) -> None:
    start_pod(cri, demo_pod("web"), with_shape=False)
    text = wait_until(lambda: handled_create_container(plugin.metrics_address), SCRAPE_TIMEOUT_S,
                      "the plugin to count a CreateContainer")
    objects = render_monitoring()
    spec = rules_spec(objects)
    exprs = [rule["expr"] for rule in alerts(spec)] + dashboard_queries(dashboard(objects))
    # The webhook's own series come from its own scrape (tests/unit/webhook): the agent's must hold the rest.
    webhook = exposed(WebhookMetrics().exposition_text()).keys() - exposed(text).keys()
    assert missing(set().union(*(metric_names(e) for e in exprs)) - webhook, exposed(text)) == []

    matchers = ",".join(f'{k}="{v}"' for k, v in sorted(TARGET.items()))
    up = {"series": f"up{{{matchers}}}", "values": f"1x{MINUTES}"}
    healthy = [*input_series(text, TARGET, MINUTES), up]
    names = [alert["alert"] for alert in alerts(spec)]
    done = run_rule_tests(spec, quiet_suite(healthy, names), tmp_path)
    assert (done.returncode, failed_alerts(done)) == (0, []), done.stdout + done.stderr

    connected = "nri_podlevel_runtime_connected{"
    disconnected = replaced(healthy, lambda s: s.startswith(connected), f"0x{MINUTES}")
    done = run_rule_tests(spec, quiet_suite(disconnected, names), tmp_path)
    assert failed_alerts(done) == ["NriPodlevelRuntimeDisconnected"], done.stderr

    # Every CreateContainer beyond the last finite bucket (2 s): only the +Inf bucket grows, by 10 a minute
    # (the alerts want 10 events in 5 minutes before a p99 says anything).
    create_buckets = f'{LATENCY}_bucket{{event="create_container"'
    slow = replaced(healthy, lambda s: s.startswith(create_buckets) and 'le="+Inf"' not in s, f"0x{MINUTES}")
    slow = replaced(slow, lambda s: s.startswith(create_buckets) and 'le="+Inf"' in s, f"0+10x{MINUTES}")
    done = run_rule_tests(spec, quiet_suite(slow, names), tmp_path)
    assert failed_alerts(done) == ["NriPodlevelEventsOverTimeout", "NriPodlevelEventsSlow"], done.stderr
