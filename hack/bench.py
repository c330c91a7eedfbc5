"""Benchmarks: print one JSON object of numbers (README "Measurements"). Tests never assert times.

Engine part (`engine_*` keys): a synthetic large node (2 sockets x 4 NUMA nodes x 16 cores x 2 threads =
256 CPUs), the default engine settings (scope pod, single-numa-node, static CPU, Static memory), filled to
500 live pods of a fixed mix, then churned: each cycle releases the oldest pod and admits a new one of the
same shape, so the node stays at 500 live pods. Reported: admission and release latency percentiles, the
slowest admission, and cycles (one admission + one release) per second. Latencies are wall-clock; the
`_cpu_` numbers are the thread's CPU time for the same admissions, which a busy machine's scheduling does
not inflate.

NRI part: nri-podlevel side by side with a no-op Go plugin on the upstream NRI stub (tests/integration/
goplugin -noop, built from Debian's packages by hack/build-go-nri-plugin), subscribed to the same events.
Each runs in its own process, launched the way a runtime launches a plugin (one end of a unix socketpair as
NRI_PLUGIN_SOCKET), and this process plays the runtime on the other ends with the ttrpc codec: every
request goes to both plugins with identical bytes, a block of pods at a time, the plugin that goes first
alternating by block. nri-podlevel runs as `nri-podlevel run` does by default where it matters for speed
(`nri_plugin_setup` says how). Keys `nri_X`, `go_noop_X` and `X_ratio` (nri-podlevel over Go) for:
- `roundtrip_us_pNN`: CreateContainer, the runtime's wall clock from request written to answer read (what
  the plugin adds to every container creation), at 500 live pods (560 containers) of the engine part's mix.
  The fill creates the Burstable pods first, then the CPU-holding ones; then `--nri-cycles` times the oldest
  pod of the documentation's pod-level shape (a sidecar and an app) is stopped and removed and a new one
  started. Round trips are from that churn, split into `first_container_roundtrip` (the pod's first
  CreateContainer: shape parsing and admission) and `later_container_roundtrip`.
- `moving_others_roundtrip`: the answers of nri-podlevel carrying updates of other containers (each CPU
  holder created after the 400 Burstable containers moves all of them) against the Go plugin's plain answer
  to the same requests.
- `pod_lifecycle_us_pNN`: each plugin's total over every event of one pod it is subscribed to, from its
  start to its removal, for the pods whose whole lifecycle fell in the churn.
- `run_pod_sandbox_roundtrip_us_pNN`: RunPodSandbox in the churn (where nri-podlevel admits the pod).
- `cpu_us_per_pod`: each plugin process's CPU time over the churn (every thread: nri-podlevel writes its
  checkpoints on threads of their own), divided by the pods replaced: the work a pod costs wherever it
  runs, which round trips do not show for work done between events.
- `synchronize_N_cgroups_ms` for N in 400, 2,000 and 5,000: Synchronize of N containers (the mix's 100
  CPU-holding pods, then Burstable pods) into a freshly launched plugin, every container already where it
  belongs (a restart), the pods' cgroups there to be written, as on a node; the median (nearest rank) of
  `--sync-repeats` launches, and `nri_synchronize_N_cgroups_us_per_container` to see whether it grows with
  the node. At 2,000 also `synchronize_2000_ms` without pod cgroups and with no cpuset set anywhere (every
  container updated: `nri_synchronize_unpinned_*`).
- `rss_mb_steady`: VmRSS after the churn; `startup_to_registered_ms`: from launch to the end of the
  handshake (RegisterPlugin, Configure, an empty Synchronize), when the runtime counts the plugin registered.
The older `nri_create_*` keys are nri-podlevel's churn round trips and its handler's own time,
`nri_synchronize_*` the Synchronize details and `nri_plugin_*` its memory in KiB.

Scale: `--live-containers N` runs the NRI churn at N live containers (the mix's 100 CPU-holding pods, then
Burstable pods; 2000 for the 2,000-container node), `--topology SPEC` puts every part on another node
(`sockets=4,nodes-per-socket=2,cores-per-node=32,threads-per-core=2,memory-per-node=64Gi` for 4 sockets x 2
NUMA nodes x 32 cores x 2 threads); `engine_topology`, `nri_topology`, `nri_live_pods` and
`nri_live_containers` tell the runs apart. The plugin's time per event should stay flat as N grows, but for
the updates it must send (`moving_others_updates_mean`).

Failing pod cgroups: `--pods-with-failing-cgroups N` leaves out the cgroups of the churn's first N pods
(they stay all along), so their pod cgroup writes fail and are retried with backoff; compare the churn's
figures with a run without (`nri_pods_with_failing_cgroups` says how many failed).

Usage: hack/bench [--quick] [--cycles N] [--nri-cycles N] [--block N] [--sync-repeats N] [--go-plugin PATH]
[--live-containers N] [--topology SPEC] [--state-base DIR] [--pods-with-failing-cgroups N] [--profile]
[--profile-plugin DIR]   (--quick: the same keys with fewer samples; --state-base: nri-podlevel's state dirs
there, e.g. on a tmpfs, where the default is the temporary dir on the local disk; --profile: a cProfile of
the engine churn on stderr; --profile-plugin: a cProfile of each nri-podlevel process, the churn's first)
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import gc
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import IO, Final, NamedTuple, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugin"))

from google.protobuf.message import Message

from podlevel.agent.nri_messages import linux_cpu, runtime_resources, sandbox_of
from podlevel.agent.placement import Placement
from podlevel.agent.plugin import PodLevelPlugin
from podlevel.agent.pod_cgroups import PodCgroups
from podlevel.agent.records import Settings
from podlevel.cli.log_output import configure_logging
from podlevel.cli.run import plugin_metrics, report_servers
from podlevel.engine.cpuset import CPUSet
from podlevel.engine.manager import Engine, EngineConfig, NodeState
from podlevel.engine.pod import Container, ContainerKind, Pod, Resources
from podlevel.engine.topology import from_spec
from podlevel.nri import CreateResult, Stub, Updates, api
from podlevel.nri.handler import subscribed_events
from podlevel.nri.runtime import Event, describe_mask, events_in
from podlevel.nri.session import PLUGIN_SERVICE
from podlevel.podspec.manifest import SHAPE_ANNOTATION, to_annotation
from podlevel.podspec.runtime import RuntimeResources, container_resources, sandbox_resources
from podlevel.report.metrics import PluginMetrics
from podlevel.report.podresources import podresources_socket
from podlevel.state.store import StateDir
from podlevel.ttrpc.codec import Connection, Inbound, Request, Response, Role

TOPOLOGY = "sockets=2,nodes-per-socket=4,cores-per-node=16,threads-per-core=2,memory-per-node=64Gi"
LIVE_PODS = 500
LIVE_CONTAINERS = 560
"""The NRI churn's node: the mix's 500 pods."""
SYNC_CONTAINERS = 2000
SYNC_SIZES: Final = (400, SYNC_CONTAINERS, 5000)
SYNC_CHUNK_BYTES: Final = 3 << 20
"""Largest Synchronize message sent: a larger node goes in chunks, as the runtime sends it."""
"""The nodes Synchronize is measured on with pod cgroups on: its time per container must not grow."""
MI = 2**20
SETTLE_S: Final = 0.2
"""After a large Synchronize nri-podlevel hands the freed heap back once its answer is written: VmRSS is read
this long after the answer."""
PLUGIN_PROCESS_FLAG: Final = "--plugin-process"
PLUGIN_CGROUP_ROOT_FLAG: Final = "--plugin-cgroup-root"
CGROUP_BASE: Final = "/dev/shm"
"""Where the pod cgroup tree is made: a tmpfs, as cgroupfs is memory."""
PROFILE_PLUGIN_ENV: Final = "PODLEVEL_BENCH_PROFILE_DIR"
"""Set by --profile-plugin for the plugin processes, which inherit it."""
HACK: Final = Path(__file__).resolve().parent
PLUGIN_SETUP: Final = (
    "as `nri-podlevel run` runs with its default endpoints: checkpoints written (and synced) to a state dir "
    "in the temporary dir, on the local disk unless --state-base says otherwise, info logs as JSON lines "
    "to a file, metrics counted and the HTTP endpoint (probes, /metrics, views) listening on 127.0.0.1, the "
    "PodResources socket listening in the tmp dir (never asked, so gRPC is not loaded, as on a node without "
    "PodResources clients); pod cgroups on: a tree of the kubelet's pod cgroups as regular files on a "
    "tmpfs, each pod's made before its RunPodSandbox as the kubelet makes it (but for the `unpinned` and "
    "`in_place` Synchronize runs, which leave them out to show what they cost); the engine on the "
    "synthetic node above instead of sysfs; the process runs this script (its imports beside the plugin's: "
    "argparse, cProfile, statistics)"
)
GO_SETUP: Final = (
    "tests/integration/goplugin -noop: the upstream NRI stub answering every event with no "
    "change"
)
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


def mix_shapes(containers: int) -> list[Callable[[str], Pod]]:
    """The mix's pods holding CPUs (60 bubbles, 40 classic Guaranteed), then Burstable pods up to
    `containers` containers (at LIVE_CONTAINERS, the mix's 500 pods)."""
    holders = [shape for count, shape in MIX[:2] for _ in range(count)]
    held = sum(len(shape("shape").all_containers) for shape in holders)
    return holders + [_burstable] * max(0, containers - held)


def bench_engine(spec: str = TOPOLOGY) -> Engine:
    """The large node (`spec`, `topology.from_spec`) with the default settings: the first core and 100Mi on
    node 0 reserved."""
    topology = from_spec(spec)
    return Engine(
        topology,
        EngineConfig(
            reserved_cpus=topology.core_siblings(CPUSet([0])),
            reserved_memory=MappingProxyType({0: MappingProxyType({"memory": 100 * MI})}),
        ),
    )


def engine_numbers(cycles: int, profile: bool, spec: str) -> dict[str, object]:
    engine = bench_engine(spec)
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
    # Imported here: the plugin processes run this file too, and should hold what `run` holds.
    import cProfile
    import pstats

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
        "engine_topology": spec,
        "engine_live_pods": LIVE_PODS,
        "engine_cycles": cycles,
        "engine_fill_admissions_per_second": round(LIVE_PODS / fill_seconds),
        "engine_cycles_per_second": round(cycles / churn_seconds),
        "engine_operations_per_second": round(2 * cycles / churn_seconds),
        "engine_admissions_per_second": round(len(admissions) / (sum(admissions) / 1e9)),
        "engine_admission_p50_us": percentile(admissions, 0.50),
        "engine_admission_p99_us": percentile(admissions, 0.99),
        "engine_admission_max_us": max(admissions) / 1000,
        "engine_admission_cpu_p99_us": percentile(admissions_cpu, 0.99),
        "engine_admission_cpu_max_us": max(admissions_cpu) / 1000,
        "engine_release_p50_us": percentile(releases, 0.50),
        "engine_release_p99_us": percentile(releases, 0.99),
        "engine_release_max_us": max(releases) / 1000,
    }


# -- NRI: the plugin processes -----------------------------------------------------------------------------


class TimedPlugin(PodLevelPlugin):
    """The plugin with the wall-clock time of its CreateContainer and Synchronize handlers recorded."""

    def __init__(self, placement: Placement, state: StateDir, observer: PluginMetrics,
                 pod_cgroups: PodCgroups | None = None) -> None:
        super().__init__(placement, state=state, pod_cgroups=pod_cgroups, observer=observer)
        self.create_ns: list[int] = []
        self.synchronize_ns: list[int] = []

    def create_container(self, pod: api.PodSandbox, container: api.Container) -> CreateResult:
        started = time.perf_counter_ns()
        try:
            return super().create_container(pod, container)
        finally:
            self.create_ns.append(time.perf_counter_ns() - started)

    def synchronize(self, pods: Sequence[api.PodSandbox], containers: Sequence[api.Container]) -> Updates:
        started = time.perf_counter_ns()
        try:
            return super().synchronize(pods, containers)
        finally:
            self.synchronize_ns.append(time.perf_counter_ns() - started)


def plugin_process(state_dir: str, spec: str, cgroup_root: str | None = None) -> int:
    """Serve the launch socket as `nri-podlevel run` would (see PLUGIN_SETUP) until the runtime closes it,
    then print the handler times as JSON. With `cgroup_root` the pod cgroups there are written."""
    configure_logging("info", "auto")
    metrics = plugin_metrics(lambda: handler.snapshot)
    cgroups = PodCgroups(Path(cgroup_root), metrics) if cgroup_root else None
    handler = TimedPlugin(Placement(bench_engine(spec)), StateDir(Path(state_dir)), metrics, cgroups)
    stub = Stub.from_environment(handler, observer=metrics)
    # Every endpoint `run` serves, probes, metrics and the operator views, on two free loopback ports.
    addresses = argparse.Namespace(metrics_address="127.0.0.1:0", debug_address="localhost:0")
    servers = report_servers(addresses, stub, metrics, handler, contextlib.ExitStack())
    podresources = podresources_socket(Path(state_dir) / "report" / "pod-resources.sock",
                                       lambda: handler.snapshot)
    for server in servers:
        server.start()
    podresources.start()
    profile_dir = os.environ.get(PROFILE_PLUGIN_ENV)
    if profile_dir:
        import cProfile
    profiler = cProfile.Profile() if profile_dir else None
    gc.freeze()  # as `run` does once started
    with profiler or contextlib.nullcontext():
        stub.run()
    handler.close()
    podresources.stop()
    for server in servers:
        server.stop()
    if profiler is not None:
        profiler.dump_stats(Path(str(profile_dir), f"plugin-{os.getpid()}.prof"))
    json.dump(
        {
            "create_ns": handler.create_ns,
            "synchronize_ns": handler.synchronize_ns,
            "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        },
        sys.stdout,
    )
    return 0


def go_plugin(path: str | None) -> str:
    """The no-op Go plugin's binary: `path`, or built (or found up to date) by hack/build-go-nri-plugin."""
    if path is not None:
        return path
    built = subprocess.run(
        [str(HACK / "build-go-nri-plugin")], stdout=subprocess.PIPE, text=True, check=False
    )
    if built.returncode != 0:
        raise SystemExit("hack/bench: cannot build the Go NRI plugin (above); --go-plugin takes a built one")
    return next(line.split(": ", 1)[1] for line in built.stdout.splitlines() if line.startswith("plugin: "))


def go_event_names(mask: int) -> str:
    """A subscription mask as the Go plugin's -noop flag takes it (NRI's ParseEventMask names)."""
    return ",".join(event.name.replace("_", "").lower() for event in events_in(mask))


# -- NRI: the runtime's end ------------------------------------------------------------------------------


class PluginFailed(RuntimeError):
    """The plugin answered with an error, closed the socket, or its process failed."""


class LaunchedPlugin:
    """A plugin process launched on a socketpair; this side is the runtime's end, blocking, on the ttrpc
    codec. The plugin's log goes to `stderr`."""

    def __init__(self, command: Sequence[str], stderr: IO[bytes]) -> None:
        self.sock, plugin_end = socket.socketpair()
        self._stderr = stderr
        environment = {
            **os.environ,
            "NRI_PLUGIN_SOCKET": str(plugin_end.fileno()),
            "NRI_PLUGIN_NAME": "bench",
            "NRI_PLUGIN_IDX": "50",
        }
        self.launched = time.perf_counter_ns()
        self.process = subprocess.Popen(
            command, pass_fds=[plugin_end.fileno()], env=environment, stdout=subprocess.PIPE,
            stderr=self._stderr,
        )
        plugin_end.close()
        self.conn = Connection(Role.RUNTIME)
        self._requests: collections.deque[Request] = collections.deque()
        self._responses: dict[int, Response] = {}
        self.events = 0
        """The subscription the plugin answered Configure with."""
        self.registered_ns = 0
        """From launch to the end of the handshake: the runtime then counts the plugin registered."""

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

    def encode(self, method: str, message: Message) -> tuple[int, bytes]:
        """The stream id and socket bytes of a call to the plugin."""
        request = self.conn.request(
            PLUGIN_SERVICE, method, message.SerializeToString(), timeout_nano=2_000_000_000
        )
        return request.stream_id, self.conn.encode(request)

    def exchange(self, method: str, stream_id: int, data: bytes) -> tuple[bytes, int]:
        """Send an encoded call; the answer's payload and the nanoseconds from request written to answer
        read."""
        started = time.perf_counter_ns()
        self.sock.sendall(data)
        while stream_id not in self._responses:
            self._receive()
        elapsed = time.perf_counter_ns() - started
        response = self._responses.pop(stream_id)
        if response.code:
            raise PluginFailed(f"{method}: code {response.code}: {response.message}")
        return response.payload, elapsed

    def call(self, method: str, message: Message, reply_type: type[M]) -> tuple[M, int]:
        """Call the plugin; returns its answer and the nanoseconds from request written to answer read."""
        payload, elapsed = self.exchange(method, *self.encode(method, message))
        return reply_type.FromString(payload), elapsed

    def handshake(self, pods: Sequence[api.PodSandbox], containers: Sequence[api.Container]) -> tuple[
        api.SynchronizeResponse, int
    ]:
        """Answer RegisterPlugin, then Configure and Synchronize the plugin, as containerd does (the Go stub
        serves no Synchronize before its registration is answered); the Synchronize answer and its round
        trip."""
        while not self._requests:
            self._receive()
        register = self._requests.popleft()
        if register.method != "RegisterPlugin":
            raise PluginFailed(f"expected RegisterPlugin first, got {register.method}")
        self.sock.sendall(self.conn.encode(Response(register.stream_id, api.Empty().SerializeToString())))
        configure = api.ConfigureRequest(
            runtime_name="containerd", runtime_version="2.1.4", registration_timeout=5000,
            request_timeout=2000,
        )
        self.events = self.call("Configure", configure, api.ConfigureResponse)[0].events
        # A node too large for one message is sent in chunks, all but the last with more=true, as containerd
        # splits it (a ttrpc message stays under 4 MiB); the round trip is that of every chunk.
        chunks = -(-api.SynchronizeRequest(pods=pods, containers=containers).ByteSize() // SYNC_CHUNK_BYTES)
        elapsed = 0
        for i in range(max(chunks, 1)):
            part = api.SynchronizeRequest(
                pods=pods[i * len(pods) // chunks:(i + 1) * len(pods) // chunks] if chunks else pods,
                containers=(containers[i * len(containers) // chunks:(i + 1) * len(containers) // chunks]
                            if chunks else containers),
                more=i < chunks - 1,
            )
            answer, took = self.call("Synchronize", part, api.SynchronizeResponse)
            elapsed += took
        self.registered_ns = time.perf_counter_ns() - self.launched
        return answer, elapsed

    def status_kib(self, field: str) -> int:
        """A size from /proc/PID/status: VmRSS now, VmHWM the peak."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
        raise PluginFailed(f"/proc/{self.process.pid}/status has no {field}")

    def cpu_ns(self) -> int:
        """The CPU time the process used so far, every thread (/proc/PID/stat utime + stime)."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")

    def log_tail(self, lines: int = 20) -> str:
        self._stderr.seek(0)
        return "\n".join(self._stderr.read().decode(errors="replace").splitlines()[-lines:])

    def finish(self) -> bytes:
        """Close the socket, which ends a launched plugin; what it printed."""
        self.sock.close()
        out, _ = self.process.communicate(timeout=60)
        if self.process.returncode != 0:
            raise PluginFailed(f"the plugin exited with {self.process.returncode}: {self.log_tail()}")
        return out

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.sock.close()


@contextlib.contextmanager
def launched_plugin(command: Sequence[str]) -> Iterator[LaunchedPlugin]:
    """A plugin process for the block; killed at its end unless `finish()` ended it."""
    with tempfile.TemporaryFile() as stderr:
        plugin = LaunchedPlugin(command, stderr)
        try:
            yield plugin
        finally:
            plugin.kill()


def plugin_command(state_dir: str, spec: str, cgroup_root: str | None = None) -> list[str]:
    """How this script launches nri-podlevel (`plugin_process`) on the node `spec`, writing the pod cgroups
    under `cgroup_root` when given."""
    return [sys.executable, __file__, "--topology", spec, PLUGIN_PROCESS_FLAG, state_dir,
            *([PLUGIN_CGROUP_ROOT_FLAG, cgroup_root] if cgroup_root else [])]


def pod_cgroup_tree(root: Path, sandboxes: Iterable[api.PodSandbox], cpus: str, mems: str) -> None:
    """A cgroup v2 tree of regular files laid out as the kubelet's pod cgroups (`cgroup_parent` of each
    sandbox), as wide as the node, made before the plugin sees the pods, as the kubelet makes them; called
    again, it adds the cgroups of more pods."""
    (root / "cgroup.controllers").write_text("cpuset cpu memory\n")
    for sandbox in sandboxes:
        directory = root / sandbox.linux.cgroup_parent.lstrip("/")
        # The pod's cgroup and the ancestors not made yet (the QoS cgroups), each with its files.
        fresh = [d for d in (directory, *directory.parents) if root in d.parents and not d.exists()]
        directory.mkdir(parents=True)
        for cgroup in fresh:
            for name, text in (("cpuset.cpus", cpus), ("cpuset.mems", mems), ("cpu.max", "max 100000")):
                (cgroup / name).write_text(text + "\n")
            # What the kernel keeps in force is what was written (the parents are as wide as the node):
            # each `.effective` file is the same file, so a write shows in it as it would on a node.
            for name in ("cpuset.cpus", "cpuset.mems"):
                os.link(cgroup / name, cgroup / f"{name}.effective")


@contextlib.contextmanager
def ours_and_go(go_binary: str, spec: str,
                cgroup_root: str) -> Iterator[tuple[LaunchedPlugin, LaunchedPlugin]]:
    """nri-podlevel (on a fresh state dir, writing the pod cgroups under `cgroup_root`) and the no-op Go
    plugin, launched one after the other; the Go plugin subscribes to what nri-podlevel answered Configure
    with. Both handshakes are done on an empty node, so each is then ready for events."""
    with tempfile.TemporaryDirectory(prefix="bench-state-") as state_dir, launched_plugin(
        plugin_command(state_dir, spec, cgroup_root)
    ) as ours:
        ours.handshake([], [])
        with launched_plugin([go_binary, "-noop", go_event_names(ours.events)]) as go:
            go.handshake([], [])
            if go.events != ours.events:
                raise PluginFailed(f"the Go plugin subscribed to {describe_mask(go.events)}, nri-podlevel to "
                                   f"{describe_mask(ours.events)}")
            yield ours, go


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
    _set_resources(message.linux.pod_resources, sandbox_resources(pod))
    return message


def _set_resources(message: api.LinuxResources, sent: RuntimeResources) -> None:
    """The kubelet's CPU and memory settings as the runtime passes them on; what is unset stays absent."""
    message.cpu.shares.value = sent.cpu_shares
    message.cpu.period.value = sent.cpu_period
    if sent.cpu_quota:
        message.cpu.quota.value = sent.cpu_quota
    if sent.memory_limit:
        message.memory.limit.value = sent.memory_limit


def container_message(pod: Pod, sandbox: api.PodSandbox, container: Container) -> api.Container:
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
    _set_resources(message.linux.resources, container_resources(pod, container))
    message.linux.cgroups_path = f"{sandbox.linux.cgroup_parent}/{message.id}"
    return message


@dataclass(frozen=True)
class Call:
    """One message the runtime sends a plugin about a pod; `label` is what its round trip is counted as
    (FIRST or LATER for CreateContainer, else the event's name)."""

    method: str
    message: Message
    pod: str
    label: str
    last: bool = False
    """The last event of the pod's lifecycle."""


FIRST: Final = "first"
LATER: Final = "later"


def _notification(event: Event, sandbox: api.PodSandbox, container: api.Container | None = None) -> Message:
    """A notification as containerd before NRI v0.12 sends it: StateChange."""
    return api.StateChangeEvent(event=api.Event.Name(event), pod=sandbox, container=container)


def pod_start(mask: int, pod: Pod) -> list[Call]:
    """What a runtime sends a plugin subscribed to `mask` while a pod starts, in the runtime's order."""
    sandbox = sandbox_message(pod)
    calls = []
    if mask & Event.RUN_POD_SANDBOX.bit:
        calls.append(Call("StateChange", _notification(Event.RUN_POD_SANDBOX, sandbox), pod.uid,
                          Event.RUN_POD_SANDBOX.name))
    for index, spec in enumerate(pod.all_containers):
        container = container_message(pod, sandbox, spec)
        if mask & Event.CREATE_CONTAINER.bit:
            calls.append(Call("CreateContainer", api.CreateContainerRequest(pod=sandbox, container=container),
                              pod.uid, LATER if index else FIRST))
        for event in (Event.POST_CREATE_CONTAINER, Event.START_CONTAINER, Event.POST_START_CONTAINER):
            if mask & event.bit:
                notification = _notification(event, sandbox, container)
                calls.append(Call("StateChange", notification, pod.uid, event.name))
    return calls


def pod_stop(mask: int, pod: Pod) -> list[Call]:
    """What a runtime sends a plugin subscribed to `mask` while a pod stops and is removed."""
    sandbox = sandbox_message(pod)
    calls = []
    for spec in pod.all_containers:
        container = container_message(pod, sandbox, spec)
        if mask & Event.STOP_CONTAINER.bit:
            calls.append(Call("StopContainer", api.StopContainerRequest(pod=sandbox, container=container),
                              pod.uid, Event.STOP_CONTAINER.name))
        if mask & Event.REMOVE_CONTAINER.bit:
            notification = _notification(Event.REMOVE_CONTAINER, sandbox, container)
            calls.append(Call("StateChange", notification, pod.uid, Event.REMOVE_CONTAINER.name))
    for event in (Event.STOP_POD_SANDBOX, Event.REMOVE_POD_SANDBOX):
        if mask & event.bit:
            calls.append(Call("StateChange", _notification(event, sandbox), pod.uid, event.name))
    if calls:
        calls[-1] = dataclasses.replace(calls[-1], last=True)
    return calls


REPLY_TYPES: Final[dict[str, type[Message]]] = {
    "CreateContainer": api.CreateContainerResponse,
    "StopContainer": api.StopContainerResponse,
    "StateChange": api.Empty,
}


# -- NRI: the comparison's pure parts ----------------------------------------------------------------------


class Trip(NamedTuple):
    """One call's round trip on both plugins, over identical bytes."""

    pod: str
    label: str
    churn: bool
    """Sent during the churn, the steady state (else while filling the node)."""
    last: bool
    ours_ns: int
    go_ns: int
    updates: int
    """Updates of other containers in nri-podlevel's answer."""


def percentile(values: Sequence[int], fraction: float) -> float:
    """The nearest-rank percentile of nanosecond `values`, in microseconds."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] / 1000


PERCENTILES: Final = (("p50", 0.50), ("p90", 0.90), ("p99", 0.99))


def block_order(block: int) -> tuple[int, int]:
    """Which plugin takes block `block` first (0: nri-podlevel, 1: Go): alternating, so that drift and load
    from elsewhere land on both alike."""
    return (0, 1) if block % 2 == 0 else (1, 0)


def ratio(ours: float, go: float) -> float | None:
    return round(ours / go, 2) if go else None


def compared(what: str, ours_ns: Sequence[int], go_ns: Sequence[int]) -> dict[str, object]:
    """`nri_<what>_us_pNN`, `go_noop_<what>_us_pNN` and `<what>_ratio_pNN` (ours over Go), and the count."""
    numbers: dict[str, object] = {f"{what}_samples": len(ours_ns)}
    if not ours_ns or not go_ns:
        return numbers
    for name, fraction in PERCENTILES:
        ours, go = percentile(ours_ns, fraction), percentile(go_ns, fraction)
        numbers[f"nri_{what}_us_{name}"] = ours
        numbers[f"go_noop_{what}_us_{name}"] = go
        numbers[f"{what}_ratio_{name}"] = ratio(ours, go)
    return numbers


def lifecycles(trips: Iterable[Trip]) -> tuple[list[int], list[int]]:
    """Each plugin's total time over every pod whose whole lifecycle was sent during the churn."""
    ours: dict[str, int] = collections.defaultdict(int)
    go: dict[str, int] = collections.defaultdict(int)
    started_in_fill: set[str] = set()
    complete: list[str] = []
    for trip in trips:
        if not trip.churn:
            started_in_fill.add(trip.pod)
        ours[trip.pod] += trip.ours_ns
        go[trip.pod] += trip.go_ns
        if trip.last:
            complete.append(trip.pod)
    whole = [pod for pod in complete if pod not in started_in_fill]
    return [ours[pod] for pod in whole], [go[pod] for pod in whole]


def moving_answers(trips: Iterable[Trip]) -> list[Trip]:
    """The CreateContainer round trips whose nri-podlevel answer moved other containers."""
    return [t for t in trips if t.updates and t.label in (FIRST, LATER)]


def comparison(trips: Sequence[Trip]) -> dict[str, object]:
    """The A/B numbers of the CreateContainer round trips and pod lifecycles (see the module docstring)."""
    creates = [t for t in trips if t.churn and t.label in (FIRST, LATER)]
    moving = moving_answers(trips)
    sandboxes = [t for t in trips if t.churn and t.label == Event.RUN_POD_SANDBOX.name]
    ours_life, go_life = lifecycles(trips)
    return {
        **compared("roundtrip", [t.ours_ns for t in creates], [t.go_ns for t in creates]),
        **{key: value for label in (FIRST, LATER) for key, value in compared(
            f"{label}_container_roundtrip", [t.ours_ns for t in creates if t.label == label],
            [t.go_ns for t in creates if t.label == label]).items()},
        **compared("moving_others_roundtrip", [t.ours_ns for t in moving], [t.go_ns for t in moving]),
        "moving_others_updates_mean": round(sum(t.updates for t in moving) / len(moving), 1) if moving else 0,
        **compared("pod_lifecycle", ours_life, go_life),
        **compared("run_pod_sandbox_roundtrip", [t.ours_ns for t in sandboxes], [t.go_ns for t in sandboxes]),
    }


# -- NRI: the runs ------------------------------------------------------------------------------------------


def _batches(items: Iterable[Pod], size: int) -> Iterator[list[Pod]]:
    batch: list[Pod] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _send_block(
    plugins: Sequence[LaunchedPlugin], block: int, calls: Sequence[Call], churn: bool
) -> list[Trip]:
    """Send `calls` to each plugin in turn, the first one alternating by block; the bytes are the same
    for both (same calls on connections in the same state)."""
    encoded = [[plugin.encode(call.method, call.message) for call in calls] for plugin in plugins]
    if encoded[0] != encoded[1]:
        raise PluginFailed("the two plugins' requests differ: the connections went out of step")
    elapsed: list[list[int]] = [[], []]
    replies: list[bytes] = []
    for index in block_order(block):
        for call, (stream_id, data) in zip(calls, encoded[index], strict=True):
            payload, ns = plugins[index].exchange(call.method, stream_id, data)
            elapsed[index].append(ns)
            if index == 0:
                replies.append(payload)
    return [
        Trip(call.pod, call.label, churn, call.last, ours_ns, go_ns, _updates(call.method, reply))
        for call, ours_ns, go_ns, reply in zip(calls, elapsed[0], elapsed[1], replies, strict=True)
    ]


def _updates(method: str, payload: bytes) -> int:
    reply = REPLY_TYPES[method].FromString(payload)
    answers = (api.CreateContainerResponse, api.StopContainerResponse)
    return len(reply.update) if isinstance(reply, answers) else 0


def nri_create_numbers(cycles: int, block: int, go_binary: str, spec: str, live: int,
                       failing: int = 0) -> dict[str, object]:
    """Fill to `mix_shapes(live)` on the node `spec`, Burstable pods first so that every later bubble and
    exclusive container moves all of them (the answers carrying the most updates), then churn `cycles` times:
    stop and remove the oldest pod of the documentation's pod-level shape, start a new one. Every call goes to
    both plugins, `block` pods at a time, in alternating order; steady-state numbers come from the churn.
    Each pod's cgroup is made before its block is sent, but for the first `failing` pods of the fill (every
    pod carries a shape, so each is admitted and has a pod cgroup to write), whose writes then fail, and are
    retried, for the whole run."""
    fill = mix_shapes(live)[::-1]
    pods = (shape(f"pod-{serial}") for serial, shape in enumerate(fill))
    churned: collections.deque[Pod] = collections.deque()
    trips: list[Trip] = []
    topology = bench_engine(spec).topology
    all_cpus, all_mems = str(topology.all_cpus), str(CPUSet(topology.numa_node_ids))
    left_out = failing

    def cgroups_for(batch: Iterable[Pod]) -> None:
        nonlocal left_out
        made = []
        for pod in batch:
            if left_out and pod.uid.startswith("pod-"):  # the fill's Burstable pods, which stay all along
                left_out -= 1
                continue
            made.append(sandbox_message(pod))
        pod_cgroup_tree(Path(cgroup_root), made, all_cpus, all_mems)

    with tempfile.TemporaryDirectory(prefix="bench-cgroup-", dir=CGROUP_BASE) as cgroup_root, \
            ours_and_go(go_binary, spec, cgroup_root) as plugins:
        ours, go = plugins
        mask = ours.events
        for number, batch in enumerate(_batches(pods, block)):
            cgroups_for(batch)
            trips += _send_block(plugins, number, [c for pod in batch for c in pod_start(mask, pod)], False)
            churned.extend(pod for pod in batch if pod.resources is not None)
        cpu_before = {"nri": ours.cpu_ns(), "go_noop": go.cpu_ns()}
        for number in range(cycles // block):
            calls: list[Call] = []
            started = []
            for serial in range(number * block, (number + 1) * block):
                calls += pod_stop(mask, churned.popleft())
                churned.append(_pod_level(f"churn-{serial}"))
                started.append(churned[-1])
                calls += pod_start(mask, churned[-1])
            cgroups_for(started)
            trips += _send_block(plugins, number, calls, True)
        cpu_per_pod = {
            who: (plugin.cpu_ns() - cpu_before[who]) / (cycles // block * block) / 1000
            for who, plugin in (("nri", ours), ("go_noop", go))
        }
        rss = {"nri": ours.status_kib("VmRSS"), "go_noop": go.status_kib("VmRSS")}
        peak = go.status_kib("VmHWM")
        startup = {"nri": ours.registered_ns, "go_noop": go.registered_ns}
        report = json.loads(ours.finish())
        go.finish()
    ours_creates = [t.ours_ns for t in trips if t.churn and t.label in (FIRST, LATER)]
    moving = [t.ours_ns for t in moving_answers(trips)]
    handler_ns = report["create_ns"]
    compared_numbers = comparison(trips)
    return {
        **compared_numbers,
        **{f"{who}_cpu_us_per_pod": round(us) for who, us in cpu_per_pod.items()},
        "cpu_per_pod_ratio": ratio(cpu_per_pod["nri"], cpu_per_pod["go_noop"]),
        **{f"{who}_rss_mb_steady": round(kib / 1024, 1) for who, kib in rss.items()},
        "rss_mb_steady_ratio": ratio(rss["nri"], rss["go_noop"]),
        "go_noop_rss_mb_peak": round(peak / 1024, 1),
        **{f"{who}_startup_to_registered_ms": round(ns / 1e6, 1) for who, ns in startup.items()},
        "startup_to_registered_ratio": ratio(startup["nri"], startup["go_noop"]),
        "nri_topology": spec,
        "nri_live_pods": len(fill),
        "nri_live_containers": sum(1 for t in trips if not t.churn and t.label in (FIRST, LATER)),
        "nri_pods_with_failing_cgroups": failing - left_out,
        "nri_create_containers_timed": len(ours_creates),
        **_summary_us("nri_create_container", ours_creates),
        **_summary_us("nri_create_handler", handler_ns[-len(ours_creates):]),
        "nri_create_moving_others": len(moving),
        "nri_create_moving_others_updates_mean": compared_numbers["moving_others_updates_mean"],
        **(_summary_us("nri_create_moving_others", moving) if moving else {}),
        "nri_plugin_rss_steady_kib": rss["nri"],
        "nri_plugin_maxrss_churn_kib": report["maxrss_kib"],
    }


def _summary_us(prefix: str, nanoseconds: Sequence[int]) -> dict[str, float]:
    return {
        f"{prefix}_p50_us": percentile(nanoseconds, 0.50),
        f"{prefix}_p99_us": percentile(nanoseconds, 0.99),
        f"{prefix}_max_us": max(nanoseconds) / 1000,
    }


def sync_node(spec: str, size: int = SYNC_CONTAINERS) -> tuple[list[api.PodSandbox], list[api.Container],
                                                                dict[str, Settings]]:
    """`mix_shapes(size)` on the node `spec`, and where a plugin that created them put each container."""
    pods = [shape(f"sync-{i}") for i, shape in enumerate(mix_shapes(size))]
    sandboxes = [sandbox_message(pod) for pod in pods]
    placement = Placement(bench_engine(spec))
    listed = []
    for pod, sandbox in zip(pods, sandboxes, strict=True):
        for container in pod.all_containers:
            listed.append(container_message(pod, sandbox, container))
            placement.create(sandbox_of(sandbox), listed[-1].id, container.name,
                             runtime_resources(listed[-1].linux.resources))
    placement.take_pending_updates()
    return sandboxes, listed, dict(placement.applied)


def _synchronized(command: Sequence[str], sandboxes: Sequence[api.PodSandbox],
                  listed: Sequence[api.Container]) -> tuple[int, int, int, bytes]:
    """Launch a plugin into a node of `listed` containers: the Synchronize round trip, updates answered,
    VmRSS once it settled, and what the plugin printed."""
    with launched_plugin(command) as plugin:
        answer, elapsed = plugin.handshake(sandboxes, listed)
        time.sleep(SETTLE_S)
        rss_kib = plugin.status_kib("VmRSS")
        return elapsed, len(answer.update), rss_kib, plugin.finish()


def in_place_listing(containers: Sequence[api.Container],
                     placed: Mapping[str, Settings]) -> list[api.Container]:
    """The containers as the runtime lists them after a restart: each where the plugin had put it."""
    listed = []
    for container in containers:
        copy = api.Container()
        copy.CopyFrom(container)
        copy.linux.resources.cpu.MergeFrom(linux_cpu(placed[container.id]))
        listed.append(copy)
    return listed


def nri_synchronize_numbers(repeats: int, go_binary: str, spec: str) -> dict[str, object]:
    """Synchronize into freshly launched plugins, `repeats` times each, the order alternating; medians
    (nearest rank). On SYNC_CONTAINERS containers: nri-podlevel with every container already where it
    belongs (a restart), with pod cgroups on (`in_place_cgroups`) and off (`in_place`), and with no cpuset set
    anywhere (`unpinned`), and the Go plugin with the first listing. On the other SYNC_SIZES, the restart
    with pod cgroups on against the Go plugin."""
    events = go_event_names(subscribed_events(PodLevelPlugin(Placement(bench_engine(spec)))))
    topology = bench_engine(spec).topology
    all_cpus, all_mems = str(topology.all_cpus), str(CPUSet(topology.numa_node_ids))
    numbers: dict[str, object] = {"nri_synchronize_repeats": repeats}
    for size in SYNC_SIZES:
        sandboxes, containers, placed = sync_node(spec, size)
        in_place = in_place_listing(containers, placed)
        elapsed: dict[str, list[int]] = collections.defaultdict(list)
        handler_ns: dict[str, list[int]] = collections.defaultdict(list)
        updates: dict[str, int] = {}
        rss: dict[str, int] = {}
        runs = [("in_place_cgroups", in_place), ("go_noop", in_place)]
        if size == SYNC_CONTAINERS:
            runs += [("in_place", in_place), ("unpinned", containers)]
        for repeat in range(repeats):
            for label, listed in runs if repeat % 2 == 0 else reversed(runs):
                with tempfile.TemporaryDirectory(prefix="bench-state-") as state_dir, \
                        tempfile.TemporaryDirectory(prefix="bench-cgroup-", dir=CGROUP_BASE) as cgroup_root:
                    pod_cgroup_tree(Path(cgroup_root), sandboxes, all_cpus, all_mems)
                    cgroups = cgroup_root if label.endswith("cgroups") else None
                    command = ([go_binary, "-noop", events] if label == "go_noop" else
                               plugin_command(state_dir, spec, cgroups))
                    ns, updates[label], rss[label], out = _synchronized(command, sandboxes, listed)
                elapsed[label].append(ns)
                if label != "go_noop":
                    handler_ns[label] += json.loads(out)["synchronize_ns"]
        ms = {label: percentile(values, 0.5) / 1000 for label, values in elapsed.items()}
        numbers.update({
            f"nri_synchronize_{size}_cgroups_ms": round(ms["in_place_cgroups"], 2),
            f"nri_synchronize_{size}_cgroups_us_per_container": round(ms["in_place_cgroups"] * 1e3 / size, 1),
            f"go_noop_synchronize_{size}_ms": round(ms["go_noop"], 2),
            f"synchronize_{size}_cgroups_ratio": ratio(ms["in_place_cgroups"], ms["go_noop"]),
            f"nri_synchronize_{size}_pods": len(sandboxes),
            f"nri_plugin_rss_after_synchronize_{size}_kib": rss["in_place_cgroups"],
        })
        if size != SYNC_CONTAINERS:
            continue
        numbers.update({
            "nri_synchronize_2000_ms": round(ms["in_place"], 2),
            "go_noop_synchronize_2000_ms": round(ms["go_noop"], 2),
            "synchronize_2000_ratio": ratio(ms["in_place"], ms["go_noop"]),
            "synchronize_2000_unpinned_ratio": ratio(ms["unpinned"], ms["go_noop"]),
            "nri_synchronize_containers": len(containers),
            "nri_synchronize_pods": len(sandboxes),
            "nri_plugin_rss_after_synchronize_kib": rss["in_place_cgroups"],
        })
        for label, listed in (("in_place", in_place), ("in_place_cgroups", in_place),
                              ("unpinned", containers)):
            numbers.update({
                f"nri_synchronize_{label}_ms": round(ms[label], 2),
                f"nri_synchronize_{label}_handler_ms": round(percentile(handler_ns[label], 0.5) / 1000, 2),
                f"nri_synchronize_{label}_updates": updates[label],
                f"nri_synchronize_{label}_request_kib": round(
                    api.SynchronizeRequest(pods=sandboxes, containers=listed).ByteSize() / 1024
                ),
            })
    return numbers


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true",
                        help="fewer cycles and repeats: the same keys in well under two minutes")
    parser.add_argument("--cycles", type=int, help="release+admit cycles at 500 live pods (5000; quick 1000)")
    parser.add_argument("--nri-cycles", type=int,
                        help="pod replacements through the NRI socket at 500 live pods (2000; quick 300)")
    parser.add_argument("--block", type=int, default=10, help="pods per block of one plugin (10)")
    parser.add_argument("--sync-repeats", type=int, help="Synchronize launches per plugin (3; quick 1)")
    parser.add_argument("--go-plugin", metavar="PATH", help="the Go plugin binary (default: build it)")
    parser.add_argument("--profile", action="store_true", help="cProfile the churn, report to stderr")
    parser.add_argument("--state-base", metavar="DIR",
                        help="nri-podlevel's state dirs in DIR, not the temporary dir (a tmpfs shows what "
                             "the disk adds)")
    parser.add_argument("--profile-plugin", metavar="DIR",
                        help="cProfile each nri-podlevel process into DIR/plugin-PID.prof (pstats)")
    parser.add_argument("--topology", metavar="SPEC", default=TOPOLOGY,
                        help="the node of every part, as `topology.from_spec` reads it (%(default)s)")
    parser.add_argument("--live-containers", metavar="N", type=int, default=LIVE_CONTAINERS,
                        help="containers live through the NRI churn: the mix's CPU holders, then Burstable "
                             "pods (%(default)s: the mix's 500 pods)")
    parser.add_argument("--pods-with-failing-cgroups", metavar="N", type=int, default=0,
                        help="leave out the cgroups of the NRI churn's first N pods, whose pod cgroup writes "
                             "then fail all along (compare with a run without)")
    parser.add_argument(PLUGIN_PROCESS_FLAG, metavar="STATE_DIR", help=argparse.SUPPRESS)
    parser.add_argument(PLUGIN_CGROUP_ROOT_FLAG, metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.plugin_process:
        return plugin_process(args.plugin_process, args.topology, args.plugin_cgroup_root)
    cycles = args.cycles or (1000 if args.quick else 5000)
    nri_cycles = args.nri_cycles or (300 if args.quick else 2000)
    sync_repeats = args.sync_repeats or (1 if args.quick else 3)
    if args.state_base:
        tempfile.tempdir = str(Path(args.state_base).resolve())
    if args.profile_plugin:
        profiles = Path(args.profile_plugin).resolve()
        profiles.mkdir(parents=True, exist_ok=True)
        os.environ[PROFILE_PLUGIN_ENV] = str(profiles)
    if args.block < 1 or nri_cycles < 2 * args.block:
        parser.error("--block must be at least 1 and --nri-cycles at least two blocks")
    go_binary = go_plugin(args.go_plugin)
    started = time.perf_counter()
    numbers: dict[str, object] = {"nri_plugin_setup": PLUGIN_SETUP, "go_noop_plugin": GO_SETUP}
    numbers.update(engine_numbers(cycles, args.profile, args.topology))
    numbers.update(nri_create_numbers(nri_cycles, args.block, go_binary, args.topology, args.live_containers,
                                      args.pods_with_failing_cgroups))
    numbers.update(nri_synchronize_numbers(sync_repeats, go_binary, args.topology))
    numbers["bench_seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(numbers, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
