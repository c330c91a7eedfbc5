"""The benchmarks' node: a synthetic large machine with `run`'s default engine settings, and the mix of pods
that fills it (pod-level bubbles, classic Guaranteed pods, Burstable pods)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Final

from podlevel.cli.engine_flags import engine_config
from podlevel.cli.run import resolve
from podlevel.engine.manager import Engine
from podlevel.engine.pod import Pod
from podlevel.engine.topology import from_spec
from support.builders import MI, app, burstable, guaranteed, pod, sidecar

TOPOLOGY: Final = "sockets=2,nodes-per-socket=4,cores-per-node=16,threads-per-core=2,memory-per-node=64Gi"
LIVE_PODS: Final = 500
LIVE_CONTAINERS: Final = 560
"""The NRI churn's node: the mix's 500 pods."""
SYNC_CONTAINERS: Final = 2000


def pod_level(uid: str) -> Pod:
    """The documentation's pod-scope shape: a 2 CPU budget, one exclusive CPU for the app, a sidecar in the
    pod shared pool."""
    return pod(uid, sidecar("sidecar"), app("app", guaranteed(1000, 256 * MI)),
               budget=guaranteed(2000, 512 * MI))


def classic(uid: str) -> Pod:
    return pod(uid, app("app", guaranteed(1000, 256 * MI)))


def burstable_pod(uid: str) -> Pod:
    return pod(uid, app("app", burstable(250, 128 * MI)))


MIX: Final[tuple[tuple[int, Callable[[str], Pod]], ...]] = (
    (60, pod_level), (40, classic), (400, burstable_pod))
"""500 live pods holding 160 of the 256 CPUs exclusively, the rest shared."""


def shapes() -> Iterator[Callable[[str], Pod]]:
    while True:
        for count, shape in MIX:
            for _ in range(count):
                yield shape


def mix_shapes(containers: int) -> list[Callable[[str], Pod]]:
    """The mix's pods holding CPUs (60 bubbles, 40 classic Guaranteed), then Burstable pods up to
    `containers` containers (at LIVE_CONTAINERS, the mix's 500 pods)."""
    holders = [shape for count, shape in MIX[:2] for _ in range(count)]
    held = sum(len(shape("shape").all_containers) for shape in holders)
    return holders + [burstable_pod] * max(0, containers - held)


def bench_engine(spec: str = TOPOLOGY) -> Engine:
    """The node `spec` (`topology.from_spec`) with the settings `nri-podlevel run` takes by default (the
    first core and 100Mi on node 0 reserved)."""
    topology = from_spec(spec)
    return Engine(topology, engine_config(resolve([], {}), topology))
