"""Engines and pods the tests build: a small two-node machine, the pod-level shapes on it, resources, and the
repository's example pods."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import Final

from podlevel.engine.cpuset import CPUSet
from podlevel.engine.manager import Engine, EngineConfig
from podlevel.engine.pod import Container, ContainerKind, Pod, Resources
from podlevel.engine.topology import from_spec

MI = 2**20
CHECKOUT: Final = Path(__file__).resolve().parents[2]
EXAMPLES: Final = CHECKOUT / "deploy" / "examples"
"""The Kubernetes documentation's pod-level examples."""
# 16 CPUs: node 0 = CPUs 0-3,8-11, node 1 = CPUs 4-7,12-15; the first core (0,8) is reserved, so node 0 has
# 6 assignable CPUs and node 1 has 8. The node shared pool starts as all 16 (the kubelet's default set).
SMALL = "sockets=1,nodes-per-socket=2,cores-per-node=4,threads-per-core=2"


def new_engine(reserved: str = "0,8") -> Engine:
    """The engine `run` builds by default on SMALL (100Mi reserved on node 0), with `reserved` CPUs."""
    return Engine(
        from_spec(SMALL),
        EngineConfig(
            reserved_cpus=CPUSet.parse(reserved),
            reserved_memory=MappingProxyType({0: MappingProxyType({"memory": 100 * MI})}),
        ),
    )


def guaranteed(millis: int, memory_mi: int) -> Resources:
    values = {"cpu": millis, "memory": memory_mi * MI}
    return Resources(requests=MappingProxyType(values), limits=MappingProxyType(dict(values)))


def fast_path(name: str = "fast", cpus: int = 4, exclusive: int = 2) -> Pod:
    """A bubble of `cpus`, an app with an exclusive slice of `exclusive`, a sidecar in the pod shared pool
    (which is empty, and the pod refused, when `exclusive == cpus`)."""
    return Pod(
        uid=f"uid-{name}",
        name=name,
        resources=guaranteed(cpus * 1000, 1024),
        init_containers=(Container("log", ContainerKind.SIDECAR),),
        containers=(Container("app", resources=guaranteed(exclusive * 1000, 256)),),
    )
