"""podspec.shape_check: a shape set beside what the kubelet sends for it, on the kubelet's CRI cases."""

from __future__ import annotations

from dataclasses import replace

import pytest

from podlevel.engine.errors import InputError
from podlevel.podspec.runtime import RuntimeResources
from podlevel.podspec.shape_check import claimed_container, claimed_sandbox, kubelet_quota, verify_shape
from support.kubelet_cri_cases import KUBELET_CASES, Case, cri, pod_of

PERIOD = 100_000
FIELDS = ("cpu_shares", "cpu_quota", "memory_limit")


@pytest.mark.parametrize("case", KUBELET_CASES.values(), ids=KUBELET_CASES.keys())
def test_what_the_kubelet_sends_passes(case: Case) -> None:
    pod = pod_of(case.spec)
    verify_shape(claimed_sandbox(pod, PERIOD), case.sandbox, "pod", required=pod.resources is not None)
    for name, sent in case.containers.items():
        claimed = claimed_container(pod, name, PERIOD)
        if claimed is not None:
            verify_shape(claimed, sent, f"container {name}", required=True)


@pytest.mark.parametrize("case", KUBELET_CASES.values(), ids=KUBELET_CASES.keys())
def test_one_unit_off_on_any_compared_value_is_refused_naming_it(case: Case) -> None:
    pod = pod_of(case.spec)
    claimed = claimed_sandbox(pod, PERIOD)
    compared = [name for name in FIELDS if getattr(claimed, name)]
    assert compared, "every shape claims at least the CPU shares"
    for name in compared:
        off = replace(case.sandbox, **{name: getattr(case.sandbox, name) + 1})
        with pytest.raises(InputError, match=rf"pod: .* implies {name} .* but the runtime carries"):
            verify_shape(claimed, off, "pod", required=False)


def test_a_lifted_quota_is_no_claim_and_zero_is_not_compared() -> None:
    claimed = cri(2048, quota=200_000, memory_mi=512)
    verify_shape(claimed, replace(claimed, cpu_quota=-1), "pod", required=True)
    verify_shape(claimed, replace(claimed, memory_limit=0), "pod", required=True)


def test_a_required_claim_the_runtime_carries_nothing_of_is_unverifiable() -> None:
    with pytest.raises(InputError, match="carries none of"):
        verify_shape(cri(2048), RuntimeResources(), "pod", required=True)
    verify_shape(cri(2048), RuntimeResources(), "pod", required=False)


def test_the_kubelet_quota_is_none_when_it_sets_none() -> None:
    pod = pod_of("""
        containers:
        - {name: capped, resources: {limits: {cpu: 500m, memory: 64Mi}}}
        - {name: free, resources: {requests: {cpu: 100m}}}
        """)
    assert (kubelet_quota(pod, "capped", PERIOD), kubelet_quota(pod, "free", PERIOD)) == (50_000, None)
