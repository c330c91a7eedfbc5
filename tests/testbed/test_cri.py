"""Test bed CRI resources: `Resources.kubelet` gives what a kubelet sends for given requests and limits, and
survives the protobuf round trip. The vectors follow the kubelet's MilliCPUToShares and MilliCPUToQuota rules;
the period is sent with or without a limit."""

from __future__ import annotations

import pytest

from testbed.cri import CRI, Resources, pod_cgroup_parent


@pytest.mark.parametrize(
    ("request_", "limit", "memory", "want"),
    [
        (
            "500m",
            "500m",
            "64Mi",
            Resources(cpu_shares=512, cpu_quota=50000, cpu_period=100000, memory_limit=64 << 20),
        ),
        (
            "2",
            "2",
            "1Gi",
            Resources(cpu_shares=2048, cpu_quota=200000, cpu_period=100000, memory_limit=1 << 30),
        ),
        ("100m", None, None, Resources(cpu_shares=102, cpu_period=100000)),
        (None, "3", None, Resources(cpu_shares=3072, cpu_quota=300000, cpu_period=100000)),
        (None, None, None, Resources(cpu_shares=2, cpu_period=100000)),
        ("1m", "1m", None, Resources(cpu_shares=2, cpu_quota=1000, cpu_period=100000)),
    ],
    ids=[
        "burstable-half",
        "guaranteed-2",
        "request-only",
        "limit-implies-request",
        "besteffort",
        "below-minimums",
    ],
)
def test_kubelet_conversion(
    request_: str | None, limit: str | None, memory: str | None, want: Resources
) -> None:
    assert Resources.kubelet(request_, limit, memory) == want


def test_proto_round_trip() -> None:
    resources = Resources.kubelet("1500m", "2", "256Mi", cpuset_cpus="2-3", cpuset_mems="1")
    message = resources.to_proto()
    assert (message.cpu_shares, message.cpu_quota, message.cpuset_cpus) == (1536, 200000, "2-3")
    assert Resources.from_proto(message) == resources


def test_pod_cgroup_parent_is_kubelet_shaped_under_the_root() -> None:
    assert pod_cgroup_parent("/tb.slice", "u1") == "/tb.slice/kubepods/podu1"
    assert pod_cgroup_parent("/tb.slice", "u2", "besteffort") == "/tb.slice/kubepods/besteffort/podu2"
    with pytest.raises(ValueError, match="QoS class"):
        pod_cgroup_parent("/tb.slice", "u3", "Guaranteed")


def test_pods_outside_the_cgroup_root_are_refused_before_any_call() -> None:
    with (
        CRI("/nonexistent.sock", cgroup_root="/tb.slice") as cri,
        pytest.raises(ValueError, match=r"must lie under the test bed's '/tb\.slice'"),
    ):
        cri.run_pod("p", cgroup_parent="/kubepods/podx")
