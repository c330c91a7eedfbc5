"""The engine's pod model: QoS classes as the kubelet derives them, KEP-5526 pod-level first."""

from __future__ import annotations

import pytest

from podlevel.engine.pod import Container, ContainerKind, Pod, QOSClass, Resources

G = Resources({"cpu": 1000, "memory": 2**30}, {"cpu": 1000, "memory": 2**30})
B = Resources({"cpu": 500})
NONE = Resources()


@pytest.mark.parametrize(
    ("pod_level", "containers", "qos"),
    [
        (None, [NONE, NONE], QOSClass.BEST_EFFORT),
        (None, [G, G], QOSClass.GUARANTEED),
        (None, [G, NONE], QOSClass.BURSTABLE),
        (None, [B], QOSClass.BURSTABLE),
        (G, [NONE, NONE], QOSClass.GUARANTEED),
        (B, [G], QOSClass.BURSTABLE),
        (Resources(limits={"cpu": 2000, "memory": 2**30}), [NONE], QOSClass.GUARANTEED),
        (Resources({"cpu": 1000, "memory": 2**30, "hugepages-2Mi": 2**21},
                   {"cpu": 1000, "memory": 2**30, "hugepages-2Mi": 2**22}), [NONE], QOSClass.BURSTABLE),
    ],
    ids=["best-effort", "all-guaranteed", "one-empty", "burstable", "pod-level-guaranteed",
         "pod-level-burstable", "limits-imply-requests", "hugepages-request-below-limit"],
)
def test_qos_class(pod_level: Resources | None, containers: list[Resources], qos: QOSClass) -> None:
    pod = Pod("uid", "p", resources=pod_level,
              containers=tuple(Container(f"c{i}", resources=r) for i, r in enumerate(containers)))
    assert pod.qos_class() is qos


def test_aggregate_request_follows_the_init_sidecar_formula() -> None:
    def c(name: str, kind: ContainerKind, cpu: int) -> Container:
        return Container(name, kind, Resources({"cpu": cpu}, {"cpu": cpu}))

    pod = Pod("uid", "p", init_containers=(
        c("sidecar", ContainerKind.SIDECAR, 1000), c("big-init", ContainerKind.INIT, 5000),
    ), containers=(c("app", ContainerKind.APP, 2000),))
    # max(init peak = sidecar + big-init = 6, apps + sidecars = 3)
    assert pod.aggregate_request("cpu") == 6000
    assert pod.container("app") is pod.containers[0]
    assert pod.container("absent") is None
