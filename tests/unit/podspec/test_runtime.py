"""podspec.runtime: the CRI resources a kubelet sends for a pod, against hand-worked vectors."""

from __future__ import annotations

import pytest

from podlevel.podspec.runtime import container_resources, sandbox_resources
from support.kubelet_cri_cases import KUBELET_CASES, Case, cri, pod_of


@pytest.mark.parametrize("case", KUBELET_CASES.values(), ids=KUBELET_CASES.keys())
def test_sandbox_resources(case: Case) -> None:
    assert sandbox_resources(pod_of(case.spec)) == case.sandbox


@pytest.mark.parametrize("case", KUBELET_CASES.values(), ids=KUBELET_CASES.keys())
def test_container_resources(case: Case) -> None:
    pod = pod_of(case.spec)
    assert {c.name: container_resources(pod, c) for c in pod.all_containers} == case.containers


def test_empty_pod_level_resources_are_not_pod_level() -> None:
    """`resources: {}` is not `IsPodLevelResourcesSet`: containers keep exactly their own values."""
    pod = pod_of("""
        resources: {}
        containers: [{name: app, resources: {requests: {cpu: 300m}}}]
        """)
    app = pod.container("app")
    assert app is not None
    assert container_resources(pod, app) == cri(307)
    assert sandbox_resources(pod) == cri(307)
