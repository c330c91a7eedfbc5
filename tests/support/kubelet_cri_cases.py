"""What a kubelet 1.34+ with PodLevelResources sends over CRI for a pod, per sandbox and per container
(rules and sources in `podlevel.podspec.runtime`), as table-driven vectors worked out by hand. Shared by the
model's own tests and the agent's shape-check tests."""

from __future__ import annotations

from textwrap import dedent, indent
from typing import NamedTuple

from podlevel.engine.pod import Pod
from podlevel.podspec.runtime import RuntimeResources
from podlevel.podspec.workloads import load_pods
from support.builders import MI

PERIOD = 100_000


def cri(shares: int, quota: int = 0, memory_mi: int = 0) -> RuntimeResources:
    """What the kubelet sends: the period goes along whether or not there is a quota."""
    return RuntimeResources(shares, quota, PERIOD, memory_mi * MI)


def pod_of(spec: str) -> Pod:
    body = indent(dedent(spec).strip(), "  ")
    return load_pods(f"kind: Pod\nmetadata: {{name: p}}\nspec:\n{body}\n")[0]


class Case(NamedTuple):
    spec: str
    sandbox: RuntimeResources
    containers: dict[str, RuntimeResources]


KUBELET_CASES: dict[str, Case] = {
    "pod-level-both-container-bare": Case(
        """
        resources: {limits: {cpu: "2", memory: 1Gi}}
        containers: [{name: app}]
        """,
        cri(2048, 200_000, 1024),
        {"app": cri(2048, 200_000, 1024)},
    ),
    "pod-level-memory-only-container-bare": Case(
        """
        resources: {limits: {memory: 512Mi}}
        containers: [{name: app}]
        """,
        cri(2, 0, 512),
        {"app": cri(2, 0, 512)},
    ),
    "pod-level-cpu-only-container-bare": Case(
        """
        resources: {limits: {cpu: 1500m}}
        containers: [{name: app}]
        """,
        cri(1536, 150_000),
        {"app": cri(1536, 150_000)},
    ),
    "pod-level-cpu-only-container-with-request-and-memory": Case(
        """
        resources: {limits: {cpu: 1500m}}
        containers: [{name: app, resources: {requests: {cpu: 250m}, limits: {memory: 128Mi}}}]
        """,
        cri(1536, 150_000, 128),
        {"app": cri(256, 150_000, 128)},
    ),
    "pod-level-memory-only-cpu-from-containers": Case(
        """
        resources: {limits: {memory: 1Gi}}
        containers:
        - {name: a, resources: {limits: {cpu: 500m}}}
        - {name: b, resources: {requests: {cpu: 250m}}}
        """,
        cri(768, 50_000, 1024),
        {"a": cri(512, 50_000, 1024), "b": cri(256, 0, 1024)},
    ),
    "pod-level-requests-only": Case(
        """
        resources: {requests: {cpu: "1", memory: 256Mi}}
        containers: [{name: app}]
        """,
        cri(1024),
        {"app": cri(2)},
    ),
    "pod-level-container-own-limits-kept": Case(
        """
        resources: {limits: {cpu: "4", memory: 1Gi}}
        containers:
        - {name: app, resources: {limits: {cpu: "2", memory: 256Mi}}}
        - {name: side}
        """,
        cri(4096, 400_000, 1024),
        {"app": cri(2048, 200_000, 256), "side": cri(4096, 400_000, 1024)},
    ),
    "no-pod-level-partial-limits-still-sum": Case(
        """
        containers:
        - {name: a, resources: {limits: {cpu: "1"}}}
        - {name: b}
        """,
        cri(1024, 100_000),
        {"a": cri(1024, 100_000), "b": cri(2)},
    ),
    "no-pod-level-init-peak-and-sidecar": Case(
        """
        initContainers:
        - {name: setup, resources: {limits: {cpu: "2", memory: 64Mi}}}
        - {name: log, restartPolicy: Always, resources: {limits: {cpu: 500m, memory: 32Mi}}}
        containers: [{name: app, resources: {limits: {cpu: "1", memory: 128Mi}}}]
        """,
        cri(2048, 200_000, 160),
        {"setup": cri(2048, 200_000, 64), "log": cri(512, 50_000, 32), "app": cri(1024, 100_000, 128)},
    ),
    "best-effort": Case(
        """
        containers: [{name: app}]
        """,
        cri(2),
        {"app": cri(2)},
    ),
}
