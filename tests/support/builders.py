"""Engines and pods the tests build: resources, containers and pods in the engine's exact units (`cpu` in
millicores, memory in bytes), a small two-node machine, the repository's example pods, and the NRI pod
sandboxes and containers a runtime would send for them."""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from podlevel.agent.placement import Placement
from podlevel.agent.plugin import PodLevelPlugin
from podlevel.agent.pod_cgroups import Changes, PodCgroups
from podlevel.engine.cpuset import CPUSet
from podlevel.engine.manager import Engine, EngineConfig
from podlevel.engine.pod import HUGEPAGES_PREFIX, Container, ContainerKind, Pod, Resources
from podlevel.engine.topology import from_spec
from podlevel.nri import RpcError, api
from podlevel.podspec.manifest import SHAPE_ANNOTATION, from_annotation, to_annotation
from podlevel.podspec.runtime import RuntimeResources, container_resources, sandbox_resources
from podlevel.podspec.workloads import load_pods
from podlevel.state.store import StateDir

MI: Final = 2**20
GI: Final = 2**30
CHECKOUT: Final = Path(__file__).resolve().parents[2]
EXAMPLES: Final = CHECKOUT / "deploy" / "examples"
"""The Kubernetes documentation's pod-level examples."""
# 16 CPUs: node 0 = CPUs 0-3,8-11, node 1 = CPUs 4-7,12-15; the first core (0,8) is reserved, so node 0 has
# 6 assignable CPUs and node 1 has 8. The node shared pool starts as all 16 (the kubelet's default set).
SMALL: Final = "sockets=1,nodes-per-socket=2,cores-per-node=4,threads-per-core=2"
RESERVED_MEMORY: Final = MappingProxyType({0: MappingProxyType({"memory": 100 * MI})})


def new_engine(reserved: str = "0,8", **config: Any) -> Engine:
    """The engine `run` builds by default on SMALL: `reserved` CPUs, 100Mi reserved on node 0. `config` sets
    any other `EngineConfig` field (scope, topology policy, policies, options)."""
    settings = {"reserved_cpus": CPUSet.parse(reserved), "reserved_memory": RESERVED_MEMORY, **config}
    return Engine(from_spec(SMALL), EngineConfig(**settings))


def example(name: str) -> Pod:
    """The one pod of `deploy/examples/<name>.yaml`."""
    [pod] = load_pods((EXAMPLES / f"{name}.yaml").read_text())
    return pod


def resources(requests: Mapping[str, int], limits: Mapping[str, int] | None = None) -> Resources:
    """Any requests and limits; without `limits`, requests alone."""
    return Resources(MappingProxyType(dict(requests)), MappingProxyType(dict(limits or {})))


def guaranteed(cpu: int = 1000, memory: int = GI, **hugepages: int) -> Resources:
    """Requests equal to limits. Hugepages are named by page size: `hugepages_2Mi=64 * MI` is 64Mi of
    `hugepages-2Mi`."""
    amounts = {"cpu": cpu, "memory": memory}
    for name, amount in hugepages.items():
        amounts[HUGEPAGES_PREFIX + name.removeprefix("hugepages_")] = amount
    return resources(amounts, amounts)


def burstable(
    cpu: int, memory: int | None = None, *, cpu_limit: int | None = None, memory_limit: int | None = None
) -> Resources:
    """A `cpu` request, a `memory` request if given, and only the limits given."""
    requests = {"cpu": cpu} if memory is None else {"cpu": cpu, "memory": memory}
    given = {"cpu": cpu_limit, "memory": memory_limit}
    limits = {name: value for name, value in given.items() if value is not None}
    return resources(requests, limits)


def app(name: str, resources: Resources | None = None) -> Container:
    return Container(name, ContainerKind.APP, resources or Resources())


def sidecar(name: str, resources: Resources | None = None) -> Container:
    """A restartable init container: runs beside everything declared after it."""
    return Container(name, ContainerKind.SIDECAR, resources or Resources())


def init(name: str, resources: Resources | None = None) -> Container:
    """A standard init container: runs to completion beside the sidecars declared before it."""
    return Container(name, ContainerKind.INIT, resources or Resources())


def pod(name: str, *containers: Container, budget: Resources | None = None, uid: str | None = None) -> Pod:
    """A pod in the default namespace whose uid is its name unless given. Init containers and sidecars go to
    `init_containers`, app containers to `containers`, each in the order given; `budget` is the pod-level
    resources."""
    return Pod(
        uid=name if uid is None else uid,
        name=name,
        resources=budget,
        init_containers=tuple(c for c in containers if c.kind is not ContainerKind.APP),
        containers=tuple(c for c in containers if c.kind is ContainerKind.APP),
    )


def fast_path(name: str = "fast", cpus: int = 4, exclusive: int = 2) -> Pod:
    """A bubble of `cpus`, an app with an exclusive slice of `exclusive`, a sidecar in the pod shared pool
    (which is empty, and the pod refused, when `exclusive == cpus`)."""
    return pod(
        name,
        sidecar("log"),
        app("app", guaranteed(exclusive * 1000, 256 * MI)),
        budget=guaranteed(cpus * 1000, GI),
        uid=f"uid-{name}",
    )


def all_exclusive(name: str = "solo", cpus: int = 2) -> Pod:
    """A bubble of `cpus` whose one app holds all of them: every container exclusive, so the kubelet lifts
    the pod cgroup's CFS quota too."""
    return pod(name, app("app", guaranteed(cpus * 1000, 256 * MI)), budget=guaranteed(cpus * 1000, GI),
               uid=f"uid-{name}")


def linux_resources(sent: RuntimeResources) -> api.LinuxResources:
    """NRI's LinuxResources carrying what the kubelet sends over CRI."""
    resources = api.LinuxResources()
    resources.cpu.shares.value = sent.cpu_shares
    resources.cpu.quota.value = sent.cpu_quota
    resources.cpu.period.value = sent.cpu_period
    resources.memory.limit.value = sent.memory_limit
    return resources


def sandbox(pod: Pod | None, name: str = "web") -> api.PodSandbox:
    """The NRI sandbox of `pod` with its shape annotation and the kubelet's pod resources; None: an
    unmanaged pod called `name`."""
    if pod is None:
        return api.PodSandbox(id=f"sb-{name}", name=name, uid=f"uid-{name}", namespace="default")
    created = api.PodSandbox(
        id=f"sb-{pod.name}", name=pod.name, uid=pod.uid, namespace="default",
        annotations={SHAPE_ANNOTATION: to_annotation(pod)},
    )
    created.linux.pod_resources.CopyFrom(linux_resources(sandbox_resources(pod)))
    return created


def container(
    pod: api.PodSandbox, name: str, state: api.ContainerState = api.CONTAINER_RUNNING
) -> api.Container:
    """The NRI container `name` of `pod`, with the resources the kubelet sends for it when the pod has a
    shape."""
    created = api.Container(id=f"{pod.name}-{name}", pod_sandbox_id=pod.id, name=name, state=state)
    shape = pod.annotations.get(SHAPE_ANNOTATION)
    if shape is not None:
        described = from_annotation(shape, name=pod.name, namespace=pod.namespace)
        created.linux.resources.CopyFrom(
            linux_resources(container_resources(described, described.container(name)))
        )
    return created


def three_pods(state: StateDir | None = None) -> PodLevelPlugin:
    """A plugin that placed web (no shape) in the node shared pool, gave fast a 4-CPU bubble and refused
    no-room; each pod's cgroup is `/kubepods/pod<uid>`, each container's one below it, named by its id."""
    plugin = PodLevelPlugin(Placement(new_engine()), state=state)
    for shape, name in ((None, "server"), (fast_path(), "app")):
        pod = sandbox(shape)
        pod.linux.cgroup_parent = f"/kubepods/pod{pod.uid}"
        created = container(pod, name)
        created.linux.cgroups_path = f"/kubepods/pod{pod.uid}/{created.id}"
        plugin.create_container(pod, created)
    no_room = sandbox(fast_path("no-room", 2, 2))
    try:
        plugin.create_container(no_room, container(no_room, "app"))
    except RpcError:
        return plugin
    raise AssertionError("no-room was admitted")


class CheckpointGate:
    """The file writes of a StateDir (its `writer`): checkpoint files (JSON, `{` first) wait while `open` is
    clear, or fail once after `fail_next` is set; journal appends (a binary header first) always go through:
    what a slow or full disk looks like to the checkpoint writer."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.open.set()
        self.fail_next = False
        self.failed = threading.Event()

    def __call__(self, fd: int, data: bytes) -> None:
        if data.startswith(b"{"):
            if self.fail_next:
                self.fail_next = False
                self.failed.set()
                raise OSError(errno.ENOSPC, "No space left on device")
            assert self.open.wait(30), "the test never opened the gate"
        os.write(fd, data)


class Gated(PodCgroups):
    """Real pod cgroup writes, held until the test opens `gate`: what a slow cgroupfs looks like."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.gate = threading.Event()

    def sync(self, changes: Changes) -> None:
        assert self.gate.wait(30), "the test never opened the gate"
        super().sync(changes)


def v2_root(tmp_path: Path, pod: Pod) -> Path:
    """A cgroup v2 tree shaped like the kubelet's, with the pod cgroup of `pod` (Guaranteed tier)."""
    root = tmp_path / "cgroup"
    pod_dir = root / "kubepods" / f"pod{pod.uid}"
    pod_dir.mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpuset cpu memory\n")
    for name in ("cpuset.cpus", "cpuset.mems", "cpuset.cpus.effective", "cpuset.mems.effective"):
        (pod_dir / name).write_text("\n")
    (pod_dir / "cpu.max").write_text("200000 100000\n")
    return root
