"""The admission path end to end: pod manifests from deploy/demo, never annotated by hand, go through the
real `nri-podlevel webhook` over TLS (as an API server sends them, `testbed.apiserver`), and the pods the
webhook annotated are managed by the real plugin on the real containerd.

Sized for the 2-CPU host like test_agent: CPU 1 is the only assignable CPU.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest
import yaml

from podlevel.podspec.manifest import SHAPE_ANNOTATION, to_annotation
from support.demo_node import (
    ASSIGNABLE,
    PODS,
    RESERVED,
    Applied,
    applied,
    demo_pod,
    quota_off,
    wait_applied,
)
from testbed.apiserver import WebhookProcess, admit, create_pod
from testbed.cri import CRI
from testbed.plugin_process import PluginProcess

pytestmark = pytest.mark.integration

LOG_TIMEOUT_S: Final = 15.0
FORGED: Final = '{"containers":[{"name":"server","resources":{"limits":{"cpu":"1"}}}],"v":1}'


@pytest.fixture
def webhook(tmp_path: Path) -> Iterator[WebhookProcess]:
    process = WebhookProcess(tmp_path / "webhook")
    try:
        process.wait_serving()
        yield process
    finally:
        process.stop()


def manifest(name: str) -> dict[str, Any]:
    """The demo's manifest of `name` as written: no pod-shape annotation."""
    [found] = [d for d in yaml.safe_load_all(PODS.read_text()) if d["metadata"]["name"] == name]
    assert SHAPE_ANNOTATION not in (found["metadata"].get("annotations") or {})
    return dict(found)


def test_a_demo_pod_admitted_through_the_webhook_is_managed(
    cri: CRI, plugin: PluginProcess, webhook: WebhookProcess
) -> None:
    web_manifest = manifest("web")
    web_manifest["metadata"]["annotations"] = {SHAPE_ANNOTATION: FORGED}  # a pod claiming a shape
    assert SHAPE_ANNOTATION not in admit(webhook, web_manifest)["metadata"]["annotations"]
    server = create_pod(cri, webhook, web_manifest).containers["server"]
    marker = len(plugin.lines)

    fast = create_pod(cri, webhook, manifest("fast-path"))

    assert applied(cri, fast.containers["main-app"]) == Applied(ASSIGNABLE, "0", quota_off(), ASSIGNABLE)
    assert wait_applied(cri, server, RESERVED).cpus == RESERVED
    plugin.wait_for_line("container main-app: pod_exclusive cpus=1", LOG_TIMEOUT_S, after=marker)
    webhook.wait_for_line("pod default/fast-path: pod-shape annotation set", LOG_TIMEOUT_S)
    webhook.wait_for_line("pod default/web: pod-shape annotation removed", LOG_TIMEOUT_S)
    shapes = {p.name: p.annotations.get(SHAPE_ANNOTATION) for p in cri.list_pods()}
    assert shapes["web"] is None, "a forged shape is removed before the runtime sees the pod"
    assert shapes["fast-path"] == to_annotation(demo_pod("fast-path")), "the shape computed from the spec"
