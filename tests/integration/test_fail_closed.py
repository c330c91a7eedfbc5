"""Fail closed: a pod the webhook marked as requiring the plugin (NRI's required-plugins annotation) cannot
start its containers while the plugin is not running, on the flavour whose NRI default validator is on
(containerd 2.4); on the others nothing enforces the mark, and the pod runs unplaced (fail open)."""

from __future__ import annotations

from pathlib import Path

import pytest

from podlevel.engine.pod import Pod
from podlevel.podspec.admission import REQUIRED_PLUGINS_ANNOTATION
from podlevel.podspec.manifest import SHAPE_ANNOTATION, to_annotation
from support.demo_node import ALL, ASSIGNABLE, applied, demo_pod, quota_off
from testbed.containerd import Containerd
from testbed.cri import CRI, CRIError
from testbed.kubelet import start_annotated_pod
from testbed.plugin_process import PluginProcess

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("demo_node_cpus")]


def marked(name: str = "fast-path") -> tuple[Pod, dict[str, str]]:
    pod = demo_pod(name)
    return pod, {SHAPE_ANNOTATION: to_annotation(pod), REQUIRED_PLUGINS_ANNOTATION: '["podlevel"]'}


def test_a_pod_requiring_the_plugin_starts_only_with_it_where_the_runtime_validates(
    containerd: Containerd, cri: CRI, tmp_path: Path
) -> None:
    pod, annotations = marked()
    if not containerd.flavour.nri_validator:
        started = start_annotated_pod(cri, pod, annotations)
        assert applied(cri, started.containers["main-app"]).cpus == ALL, "nothing enforces the mark here"
        return
    with pytest.raises(CRIError) as refused:
        start_annotated_pod(cri, pod, annotations)
    assert refused.value.method == "CreateContainer"
    assert 'required plugin "podlevel" not present' in refused.value.details

    plugin = PluginProcess(containerd.nri_socket, state_dir=tmp_path / "state")
    try:
        plugin.wait_registered()
        again, annotations = marked()
        started = start_annotated_pod(cri, again, annotations)
        main_app = applied(cri, started.containers["main-app"])
        assert (main_app.cpus, main_app.quota) == (ASSIGNABLE, quota_off())
    finally:
        plugin.stop()
