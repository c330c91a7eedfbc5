"""Benchmarks: print one JSON object of numbers (README "Measurements"). Tests never assert times.

Engine part (`engine_*` keys): a synthetic large node (2 sockets x 4 NUMA nodes x 16 cores x 2 threads =
256 CPUs), the default engine settings (scope pod, single-numa-node, static CPU, Static memory), filled to
500 live pods of a fixed mix, then churned: each cycle releases the oldest pod and admits a new one of the
same shape, so the node stays at 500 live pods. Reported: admission and release latency percentiles, the
slowest admission, and cycles (one admission + one release) per second. Latencies are wall-clock; the
`_cpu_` numbers are the thread's CPU time for the same admissions, which a busy machine's scheduling does
not inflate.

NRI part (`nri_*` keys): the real plugin (Stub + PodLevelPlugin on an engine of the same node and settings,
no sysfs) in its own process, launched the way a runtime launches a plugin (one end of a unix socketpair as
NRI_PLUGIN_SOCKET), and this process playing the runtime on the other end with the ttrpc codec:
- CreateContainer round trips at the same 500 live pods (560 containers). The fill creates the Burstable pods
  first, so each later bubble or exclusive container moves all of them: `nri_create_moving_others_*` are
  those answers (count, updates carried, round trips). Then `--nri-cycles` pods are replaced as in the
  engine churn, each with StopContainer/RemoveContainer/StopPodSandbox/RemovePodSandbox before its
  replacement's CreateContainers: `nri_create_container_*` is the runtime's wall clock from request written
  to answer read (what the plugin adds to every container creation), `nri_create_handler_*` the time
  inside the plugin's handler.
- Synchronize of 2,000 containers (the mix's 100 CPU-holding pods, then Burstable pods) into a freshly
  started plugin: once with every container already where it belongs (a plugin restart) and once with no
  cpuset set anywhere (every container updated in the answer); runtime wall clock and handler time.
- The plugin process's resident memory: VmRSS at steady state after the churn and after the 2,000-container
  Synchronize, and its peak (ru_maxrss).

Usage: hack/bench [--cycles N] [--nri-cycles N] [--profile]   (--profile: a cProfile of the engine churn on
stderr)
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import cProfile
import json
import logging
import os
import pstats
import resource
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import IO, Final, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugin"))

from google.protobuf.message import Message

from podlevel.agent.placement import Placement, Sandbox, Settings
from podlevel.agent.plugin import PodLevelPlugin, linux_cpu
from podlevel.engine.cpuset import CPUSet
from podlevel.engine.manager import Engine, EngineConfig, NodeState
from podlevel.engine.pod import Container, ContainerKind, Pod, Resources
from podlevel.engine.topology import from_spec
from podlevel.nri import CreateResult, Stub, api
from podlevel.nri.session import PLUGIN_SERVICE
from podlevel.podspec.manifest import SHAPE_ANNOTATION, to_annotation
from podlevel.ttrpc.codec import Connection, Inbound, Request, Response, Role

TOPOLOGY = "sockets=2,nodes-per-socket=4,cores-per-node=16,threads-per-core=2,memory-per-node=64Gi"
LIVE_PODS = 500
SYNC_CONTAINERS = 2000
MI = 2**20
PLUGIN_PROCESS_FLAG: Final = "--plugin-process"
M = TypeVar("M", bound=Message)


def _resources(cpu: int, memory: int, *, guaranteed: bool = True) -> Resources:
    values = {"cpu": cpu, "memory": memory}
    return Resources(
        requests=MappingProxyType(values), limits=MappingProxyType(dict(values) if guaranteed else {})
    )


def _pod_level(uid: str) -> Pod:
    """The documentation's pod-scope shape: a 2 CPU budget, one exclusive CPU for the app, a sidecar in
    the pod shared pool."""
    return Pod(
        uid=uid,
        name=uid,
        resources=_resources(2000, 512 * MI),
        init_containers=(Container("sidecar", ContainerKind.SIDECAR),),
        containers=(Container("app", resources=_resources(1000, 256 * MI)),),
    )


def _classic(uid: str) -> Pod:
    return Pod(uid=uid, name=uid, containers=(Container("app", resources=_resources(1000, 256 * MI)),))


def _burstable(uid: str) -> Pod:
    return Pod(
        uid=uid,
        name=uid,
        containers=(Container("app", resources=_resources(250, 128 * MI, guaranteed=False)),),
    )


MIX: tuple[tuple[int, Callable[[str], Pod]], ...] = ((60, _pod_level), (40, _classic), (400, _burstable))
"""500 live pods holding 160 of the 256 CPUs exclusively, the rest shared."""


def _shapes() -> Iterator[Callable[[str], Pod]]:
    while True:
        for count, shape in MIX:
            for _ in range(count):
                yield shape


def _percentile(values: list[int], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] / 1000


def bench_engine() -> Engine:
    """The large node with the default settings: the first core and 100Mi on node 0 reserved."""
    topology = from_spec(TOPOLOGY)
    return Engine(
        topology,
        EngineConfig(
            reserved_cpus=topology.core_siblings(CPUSet([0])),
            reserved_memory=MappingProxyType({0: MappingProxyType({"memory": 100 * MI})}),
        ),
    )


def engine_numbers(cycles: int, profile: bool) -> dict[str, object]:
    engine = bench_engine()
    state: NodeState = engine.initial_state()
    live: collections.deque[Pod] = collections.deque()
    shapes = _shapes()
    serial = 0

    def admit(current: NodeState) -> NodeState:
        nonlocal serial
        serial += 1
        pod = next(shapes)(f"pod-{serial}")
        new, _ = engine.admit(current, pod)
        live.append(pod)
        return new

    fill_started = time.perf_counter()
    for _ in range(LIVE_PODS):
        state = admit(state)
    fill_seconds = time.perf_counter() - fill_started

    admissions: list[int] = []
    admissions_cpu: list[int] = []
    releases: list[int] = []
    profiler = cProfile.Profile() if profile else None
    if profiler is not None:
        profiler.enable()
    churn_started = time.perf_counter()
    for _ in range(cycles):
        oldest = live.popleft()
        t0 = time.perf_counter_ns()
        state = engine.remove_pod(state, oldest.uid)
        t1 = time.perf_counter_ns()
        c1 = time.thread_time_ns()
        state = admit(state)
        c2 = time.thread_time_ns()
        t2 = time.perf_counter_ns()
        releases.append(t1 - t0)
        admissions.append(t2 - t1)
        admissions_cpu.append(c2 - c1)
    churn_seconds = time.perf_counter() - churn_started
    if profiler is not None:
        profiler.disable()
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(30)
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(20)
    assert len(state.pods) == LIVE_PODS

    return {
        "engine_topology": TOPOLOGY,
        "engine_live_pods": LIVE_PODS,
        "engine_cycles": cycles,
        "engine_fill_admissions_per_second": round(LIVE_PODS / fill_seconds),
        "engine_cycles_per_second": round(cycles / churn_seconds),
        "engine_operations_per_second": round(2 * cycles / churn_seconds),
        "engine_admissions_per_second": round(len(admissions) / (sum(admissions) / 1e9)),
        "engine_admission_p50_us": _percentile(admissions, 0.50),
        "engine_admission_p99_us": _percentile(admissions, 0.99),
        "engine_admission_max_us": max(admissions) / 1000,
        "engine_admission_cpu_p99_us": _percentile(admissions_cpu, 0.99),
        "engine_admission_cpu_max_us": max(admissions_cpu) / 1000,
        "engine_release_p50_us": _percentile(releases, 0.50),
        "engine_release_p99_us": _percentile(releases, 0.99),
        "engine_release_max_us": max(releases) / 1000,
    }


# -- NRI: the plugin process -----------------------------------------------------------------------------


class TimedPlugin(PodLevelPlugin):
    """The plugin with the wall-clock time of its CreateContainer and Synchronize handlers recorded."""

    def __init__(self, placement: Placement) -> None:
        super().__init__(placement)
        self.create_ns: list[int] = []
        self.synchronize_ns: list[int] = []

    def create_container(self, pod: api.PodSandbox, container: api.Container) -> CreateResult:
        started = time.perf_counter_ns()
        try:
            return super().create_container(pod, container)
        finally:
            self.create_ns.append(time.perf_counter_ns() - started)

    def synchronize(
        self, pods: Sequence[api.PodSandbox], containers: Sequence[api.Container]
    ) -> list[api.ContainerUpdate]:
        started = time.perf_counter_ns()
        try:
            return super().synchronize(pods, containers)
        finally:
            self.synchronize_ns.append(time.perf_counter_ns() - started)


def plugin_process() -> int:
    """Serve the launch socket until the runtime closes it, then print the handler times as JSON."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    handler = TimedPlugin(Placement(bench_engine()))
    Stub.from_environment(handler).run()
    json.dump(
        {
            "create_ns": handler.create_ns,
            "synchronize_ns": handler.synchronize_ns,
            "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        },
        sys.stdout,
    )
    return 0


# -- NRI: the runtime's end ------------------------------------------------------------------------------


class PluginFailed(RuntimeError):
    """The plugin answered with an error, closed the socket, or its process failed."""


class LaunchedPlugin:
    """A plugin process launched on a socketpair; this side is the runtime's end, blocking, on the ttrpc
    codec. The plugin's log goes to `stderr`."""

    def __init__(self, stderr: IO[bytes]) -> None:
        self.sock, plugin_end = socket.socketpair()
        self._stderr = stderr
        environment = {
            **os.environ,
            "NRI_PLUGIN_SOCKET": str(plugin_end.fileno()),
            "NRI_PLUGIN_NAME": "podlevel-bench",
            "NRI_PLUGIN_IDX": "50",
        }
        self.process = subprocess.Popen(
            [sys.executable, __file__, PLUGIN_PROCESS_FLAG],
            pass_fds=[plugin_end.fileno()],
            env=environment,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
        )
        plugin_end.close()
        self.conn = Connection(Role.RUNTIME)
        self._requests: collections.deque[Request] = collections.deque()
        self._responses: dict[int, Response] = {}

    def _receive(self) -> None:
        data = self.sock.recv(1 << 20)
        if not data:
            raise PluginFailed(f"the plugin closed the socket; its log ends: {self.log_tail()}")
        for message in self.conn.feed(data):
            self._file(message)

    def _file(self, message: Inbound) -> None:
        if isinstance(message, Request):
            self._requests.append(message)
        elif isinstance(message, Response):
            self._responses[message.stream_id] = message
        else:
            raise PluginFailed(f"the plugin sent a request the codec rejects: {message.message}")

    def call(self, method: str, message: Message, reply_type: type[M]) -> tuple[M, int]:
        """Call the plugin; returns its answer and the nanoseconds from request written to answer read."""
        request = self.conn.request(
            PLUGIN_SERVICE, method, message.SerializeToString(), timeout_nano=2_000_000_000
        )
        data = self.conn.encode(request)
        started = time.perf_counter_ns()
        self.sock.sendall(data)
        while request.stream_id not in self._responses:
            self._receive()
        elapsed = time.perf_counter_ns() - started
        response = self._responses.pop(request.stream_id)
        if response.code:
            raise PluginFailed(f"{method}: code {response.code}: {response.message}")
        return reply_type.FromString(response.payload), elapsed

    def handshake(self, pods: Sequence[api.PodSandbox], containers: Sequence[api.Container]) -> tuple[
        api.SynchronizeResponse, int
    ]:
        """Answer RegisterPlugin after Configure and one Synchronize, as containerd does; the Synchronize
        answer and its round trip."""
        while not self._requests:
            self._receive()
        register = self._requests.popleft()
        if register.method != "RegisterPlugin":
            raise PluginFailed(f"expected RegisterPlugin first, got {register.method}")
        configure = api.ConfigureRequest(
            runtime_name="containerd", runtime_version="2.1.4", registration_timeout=5000,
            request_timeout=2000,
        )
        self.call("Configure", configure, api.ConfigureResponse)
        sync = api.SynchronizeRequest(pods=pods, containers=containers)
        answer, elapsed = self.call("Synchronize", sync, api.SynchronizeResponse)
        self.sock.sendall(self.conn.encode(Response(register.stream_id, api.Empty().SerializeToString())))
        return answer, elapsed

    def notify(self, event: api.Event, pod: api.PodSandbox, container: api.Container | None = None) -> None:
        """A notification as containerd before NRI v0.12 sends it: StateChange."""
        self.call("StateChange", api.StateChangeEvent(event=event, pod=pod, container=container), api.Empty)

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise PluginFailed(f"/proc/{self.process.pid}/status has no VmRSS")

    def log_tail(self, lines: int = 20) -> str:
        self._stderr.seek(0)
        return "\n".join(self._stderr.read().decode(errors="replace").splitlines()[-lines:])

    def finish(self) -> dict[str, object]:
        """Close the socket, which ends a launched plugin; its report."""
        self.sock.close()
        out, _ = self.process.communicate(timeout=60)
        if self.process.returncode != 0:
            raise PluginFailed(f"the plugin exited with {self.process.returncode}: {self.log_tail()}")
        report: dict[str, object] = json.loads(out)
        return report

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.sock.close()


@contextlib.contextmanager
def launched_plugin() -> Iterator[LaunchedPlugin]:
    """A plugin process for the block; killed at its end unless `finish()` ended it."""
    with tempfile.TemporaryFile() as stderr:
        plugin = LaunchedPlugin(stderr)
        try:
            yield plugin
        finally:
            plugin.kill()


# -- NRI: what the runtime sends ---------------------------------------------------------------------------


def sandbox_message(pod: Pod) -> api.PodSandbox:
    """A sandbox with what a kubelet-created one carries besides the shape: labels, annotations, cgroup."""
    message = api.PodSandbox(
        id=f"sandbox-{pod.uid}",
        name=pod.name,
        uid=pod.uid,
        namespace=pod.namespace,
        labels={"app": pod.name, "io.kubernetes.pod.name": pod.name, "io.kubernetes.pod.uid": pod.uid},
        annotations={
            SHAPE_ANNOTATION: to_annotation(pod),
            "kubernetes.io/config.source": "api",
            "kubernetes.io/config.seen": "2025-01-01T00:00:00.000000000Z",
        },
        runtime_handler="runc",
    )
    message.linux.cgroup_parent = f"/kubepods/burstable/pod{pod.uid}"
    return message


def container_message(sandbox: api.PodSandbox, container: Container) -> api.Container:
    """A running container with what the runtime reports besides its name: args, env, mounts, resources."""
    message = api.Container(
        id=f"{sandbox.id}-{container.name}",
        pod_sandbox_id=sandbox.id,
        name=container.name,
        state=api.CONTAINER_RUNNING,
        labels={"io.kubernetes.container.name": container.name, "io.kubernetes.pod.name": sandbox.name},
        args=["/bin/server", "--port=8080"],
        env=[f"VARIABLE_{i}=value-{i}" for i in range(10)],
        mounts=[
            api.Mount(destination=f"/mnt/volume-{i}", type="bind", source=f"/var/lib/kubelet/pods/{i}",
                      options=["rbind", "rprivate", "rw"])
            for i in range(4)
        ],
    )
    message.linux.resources.cpu.shares.value = max(2, container.resources.request("cpu") * 1024 // 1000)
    message.linux.cgroups_path = f"{sandbox.linux.cgroup_parent}/{message.id}"
    return message


def _summary_us(prefix: str, nanoseconds: Sequence[int]) -> dict[str, float]:
    return {
        f"{prefix}_p50_us": _percentile(list(nanoseconds), 0.50),
        f"{prefix}_p99_us": _percentile(list(nanoseconds), 0.99),
        f"{prefix}_max_us": max(nanoseconds) / 1000,
    }


def nri_create_numbers(cycles: int) -> dict[str, object]:
    """Fill to LIVE_PODS pods through CreateContainer, Burstable pods first so that every later bubble and
    exclusive container moves all of them (the answers carrying the most updates), then churn `cycles` times:
    stop and remove the oldest pod, create one of the same shape. Steady-state numbers come from the churn."""
    fill = [shape for count, shape in reversed(MIX) for _ in range(count)]
    live: collections.deque[tuple[Callable[[str], Pod], api.PodSandbox, list[api.Container]]] = (
        collections.deque()
    )
    churn: list[int] = []
    moving: list[int] = []
    moved: list[int] = []

    def start(plugin: LaunchedPlugin, shape: Callable[[str], Pod], serial: int) -> list[int]:
        pod = shape(f"pod-{serial}")
        sandbox = sandbox_message(pod)
        containers = [container_message(sandbox, c) for c in pod.all_containers]
        trips = []
        for container in containers:
            answer, elapsed = plugin.call(
                "CreateContainer", api.CreateContainerRequest(pod=sandbox, container=container),
                api.CreateContainerResponse,
            )
            trips.append(elapsed)
            if answer.update:
                moving.append(elapsed)
                moved.append(len(answer.update))
        live.append((shape, sandbox, containers))
        return trips

    def stop_oldest(plugin: LaunchedPlugin) -> Callable[[str], Pod]:
        shape, sandbox, containers = live.popleft()
        for container in containers:
            plugin.call("StopContainer", api.StopContainerRequest(pod=sandbox, container=container),
                        api.StopContainerResponse)
            plugin.notify(api.REMOVE_CONTAINER, sandbox, container)
        plugin.notify(api.STOP_POD_SANDBOX, sandbox)
        plugin.notify(api.REMOVE_POD_SANDBOX, sandbox)
        return shape

    with launched_plugin() as plugin:
        plugin.handshake([], [])
        for serial, shape in enumerate(fill):
            start(plugin, shape, serial)
        live_containers = sum(len(containers) for _, _, containers in live)
        for serial in range(len(fill), len(fill) + cycles):
            churn.extend(start(plugin, stop_oldest(plugin), serial))
        rss_kib = plugin.rss_kib()
        report = plugin.finish()
    handler_ns = report["create_ns"]
    assert isinstance(handler_ns, list)
    return {
        "nri_live_pods": LIVE_PODS,
        "nri_live_containers": live_containers,
        "nri_create_containers_timed": len(churn),
        **_summary_us("nri_create_container", churn),
        **_summary_us("nri_create_handler", handler_ns[-len(churn):]),
        "nri_create_moving_others": len(moving),
        "nri_create_moving_others_updates_mean": round(sum(moved) / len(moved), 1) if moved else 0,
        **(_summary_us("nri_create_moving_others", moving) if moving else {}),
        "nri_plugin_rss_steady_kib": rss_kib,
        "nri_plugin_maxrss_churn_kib": report["maxrss_kib"],
    }


def sync_node() -> tuple[list[api.PodSandbox], list[api.Container], dict[str, Settings]]:
    """The mix's pods holding CPUs (60 bubbles, 40 classic Guaranteed), then Burstable pods up to
    SYNC_CONTAINERS containers; and where a plugin that created them put each container."""
    shapes = [shape for count, shape in MIX[:2] for _ in range(count)]
    pods = [shape(f"sync-{i}") for i, shape in enumerate(shapes)]
    containers = sum(len(pod.all_containers) for pod in pods)
    while containers < SYNC_CONTAINERS:
        pods.append(_burstable(f"sync-{len(pods)}"))
        containers += 1
    sandboxes = [sandbox_message(pod) for pod in pods]
    placement = Placement(bench_engine())
    listed = []
    for pod, sandbox in zip(pods, sandboxes, strict=True):
        shape = Sandbox(sandbox.id, sandbox.uid, sandbox.name, sandbox.namespace, dict(sandbox.annotations))
        for container in pod.all_containers:
            listed.append(container_message(sandbox, container))
            placement.create(shape, listed[-1].id, container.name)
    placement.pending_updates()
    return sandboxes, listed, dict(placement.applied)


def nri_synchronize_numbers() -> dict[str, object]:
    sandboxes, containers, placed = sync_node()
    in_place = []
    for container in containers:
        copy = api.Container()
        copy.CopyFrom(container)
        copy.linux.resources.cpu.MergeFrom(linux_cpu(placed[container.id]))
        in_place.append(copy)
    numbers: dict[str, object] = {"nri_synchronize_containers": len(containers),
                                  "nri_synchronize_pods": len(sandboxes)}
    for label, listed in (("in_place", in_place), ("unpinned", containers)):
        with launched_plugin() as plugin:
            answer, elapsed = plugin.handshake(sandboxes, listed)
            rss_kib = plugin.rss_kib()
            report = plugin.finish()
        handler_ns = report["synchronize_ns"]
        assert isinstance(handler_ns, list) and len(handler_ns) == 1
        numbers.update({
            f"nri_synchronize_{label}_ms": round(elapsed / 1e6, 2),
            f"nri_synchronize_{label}_handler_ms": round(handler_ns[0] / 1e6, 2),
            f"nri_synchronize_{label}_updates": len(answer.update),
            f"nri_synchronize_{label}_request_kib": round(
                api.SynchronizeRequest(pods=sandboxes, containers=listed).ByteSize() / 1024
            ),
        })
        if label == "in_place":
            numbers["nri_plugin_rss_after_synchronize_kib"] = rss_kib
    return numbers


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cycles", type=int, default=5000, help="release+admit cycles at 500 live pods")
    parser.add_argument("--nri-cycles", type=int, default=1000,
                        help="pod replacements through the NRI socket at 500 live pods")
    parser.add_argument("--profile", action="store_true", help="cProfile the churn, report to stderr")
    parser.add_argument(PLUGIN_PROCESS_FLAG, action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.plugin_process:
        return plugin_process()
    numbers: dict[str, object] = {}
    numbers.update(engine_numbers(args.cycles, args.profile))
    numbers.update(nri_create_numbers(args.nri_cycles))
    numbers.update(nri_synchronize_numbers())
    print(json.dumps(numbers, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
