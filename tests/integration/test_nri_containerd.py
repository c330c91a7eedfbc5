"""The project's NRI stub against a real containerd (both flavours), and as a process against a bad runtime.

Against containerd: registration and Configure, the pod-level and container resources a kubelet sends
arriving intact, a cpuset adjustment and an update of another container reaching cgroupfs and the
process, Synchronize after a plugin restart, reconnection after a containerd restart, and a failing
handler failing CRI CreateContainer (followed by the runtime's undo events). The stub runs on a thread
of the test process (plugin_runner.running_plugin); every wait is on the plugin's event log or a file
with a deadline.

Against a fake runtime socket served here: the stub as its own process (plugin_runner.py run as a
script) gets broken framing, which must close the connection with a logged reason and make the same
process redial, and bad requests, which must be refused while the connection stays up.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import struct
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

import pytest
from plugin_runner import (
    PLUGIN_INDEX,
    PLUGIN_NAME,
    ContainerdLog,
    RunningPlugin,
    cpuset_adjustment,
    cpuset_update,
    running_plugin,
)

from podlevel.nri import CreateResult, api
from podlevel.nri.runtime import EVENTS_BEFORE_V0_10, EVENTS_FROM_V0_10
from podlevel.ttrpc.codec import Code, Connection, Request, Response, Role
from podlevel.ttrpc.mux import PLUGIN_SERVICE_CONN, encode_frame
from podlevel.ttrpc.transport import RpcError
from testbed import cgroupfs
from testbed.containerd import Containerd
from testbed.cri import CRI, CRIError, Resources
from testbed.wait import wait_until

pytestmark = pytest.mark.integration

PLUGIN: Final = f"{PLUGIN_INDEX}-{PLUGIN_NAME}"
SLEEP: Final = ["/bin/sh", "-c", "sleep 3600"]
# What a kubelet sends for a pod with pod-level requests cpu 1500m / memory 256Mi and limits cpu 2 /
# memory 256Mi (PodSandboxConfig.linux.resources), and for a container of it with 500m / 1 CPU, 64Mi.
POD_RESOURCES: Final = Resources.kubelet("1500m", "2", "256Mi")
CONTAINER_RESOURCES: Final = Resources.kubelet("500m", "1", "64Mi")
# The announced (registration, request) timeouts in seconds: the test bed configures 5 s and 2 s;
# containerd 1.7's NRI predates the Configure timeout fields and sends 0.
ANNOUNCED_TIMEOUTS: Final = {"2": (5.0, 2.0), "1.7": (0.0, 0.0), "2.4": (5.0, 2.0)}
UPDATE_TIMEOUT_S: Final = 10.0
RECONNECT_TIMEOUT_S: Final = 30.0


@pytest.fixture(scope="module")
def two_cpus() -> tuple[str, str]:
    """The lowest and highest CPU this process may use; pinning to either differs from the default."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise RuntimeError(f"cpuset tests need at least 2 usable CPUs, this host offers {cpus}")
    return str(cpus[0]), str(cpus[-1])


@pytest.fixture
def plugin(containerd: Containerd) -> Iterator[RunningPlugin]:
    """The stub with a recording handler, connected to the shared containerd; stopped after the test."""
    log = ContainerdLog(containerd)
    with running_plugin(containerd.nri_socket) as running:
        log.wait_plugin_connected(PLUGIN)
        yield running


def resources_of(linux: api.LinuxResources) -> Resources:
    """NRI LinuxResources in the test bed's CRI terms (unset wrappers read as 0, as in CRI)."""
    return Resources(cpu_shares=linux.cpu.shares.value, cpu_quota=linux.cpu.quota.value,
                     cpu_period=linux.cpu.period.value, memory_limit=linux.memory.limit.value,
                     cpuset_cpus=linux.cpu.cpus, cpuset_mems=linux.cpu.mems, unified=dict(linux.unified))


def run_pod(ctrd: Containerd, cri: CRI, name: str) -> tuple[str, str]:
    """A pod with pod-level resources, as a kubelet runs it; returns (sandbox id, pod uid)."""
    uid = str(uuid.uuid4())
    pod = cri.run_pod(name, uid=uid, cgroup_parent=ctrd.pod_cgroup_parent(uid), resources=POD_RESOURCES)
    return pod, uid


def cpus_of(cri: CRI, container: str) -> tuple[str, str, str]:
    """(configured cpuset, effective cpuset, the init process's Cpus_allowed_list) of a container."""
    info = cri.container_status(container)
    values = cgroupfs.read_cgroup(info.cgroups_path)
    return values.cpus, values.effective_cpus, cgroupfs.cpus_allowed_list(info.pid)


def test_plugin_registers_and_learns_the_runtime(containerd: Containerd, cri: CRI,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="podlevel.nri")
    log = ContainerdLog(containerd)
    with running_plugin(containerd.nri_socket) as plugin:
        log.wait_plugin_connected(PLUGIN)
        assert f'external:{PLUGIN}[{os.getpid()}]\\" registered as \\"{PLUGIN}' in "\n".join(log.lines())
        said = [r.getMessage() for r in caplog.records if r.name.startswith("podlevel.nri.")]
        assert [m for m in said if f"NRI plugin {PLUGIN}: registered with containerd " in m], said
        assert [s.event for s in plugin.log.all()] == ["configure", "synchronize"]
        runtime = plugin.log.wait_event("configure").runtime
        assert runtime is not None
        assert plugin.stub.runtime == runtime
        assert (runtime.name, runtime.version) == ("containerd", cri.version().runtime_version)
        assert runtime.version.removeprefix("v").startswith(f"{containerd.flavour.name}.")
        if containerd.flavour.name == "2.4":
            assert (runtime.nri_version, runtime.valid_events) == ("v0.12.3", EVENTS_FROM_V0_10)
            assert runtime.rolls_back_refused_sandbox and runtime.serves_unsolicited_updates
        else:
            assert runtime.valid_events == EVENTS_BEFORE_V0_10, "containerd <= 2.1 ships NRI < v0.10"
            assert not (runtime.rolls_back_refused_sandbox or runtime.serves_unsolicited_updates)
        announced = [m for m in said if "announced registration timeout" in m]
        assert len(announced) == 1, said
        print(f"\n{announced[0]}")
        timeouts = (runtime.registration_timeout, runtime.request_timeout)
        assert timeouts == ANNOUNCED_TIMEOUTS[containerd.flavour.name]
        assert plugin.stub.synchronizations == 1


def test_pod_and_container_resources_arrive_as_sent(containerd: Containerd, cri: CRI,
                                                    plugin: RunningPlugin) -> None:
    pod, uid = run_pod(containerd, cri, "resources")
    container = cri.run_container(pod, "app", command=SLEEP, resources=CONTAINER_RESOURCES)

    plugin.log.wait_event("post_start_container", pod_uid=uid)
    assert plugin.log.of_pod(uid) == [("run_pod_sandbox", ""), ("create_container", "app"),
                                      ("post_create_container", "app"), ("start_container", "app"),
                                      ("post_start_container", "app")]
    ran = plugin.log.wait_event("run_pod_sandbox", pod_uid=uid)
    created = plugin.log.wait_event("create_container", pod_uid=uid)
    assert (ran.pod.id, ran.pod.name, ran.pod.namespace) == (pod, "resources", "default")
    assert ran.pod.linux.cgroup_parent == containerd.pod_cgroup_parent(uid)
    assert resources_of(ran.pod.linux.pod_resources) == POD_RESOURCES
    assert resources_of(created.pod.linux.pod_resources) == POD_RESOURCES
    assert (created.container.id, created.container.pod_sandbox_id) == (container, pod)
    assert resources_of(created.container.linux.resources) == CONTAINER_RESOURCES


def test_cpuset_adjustment_reaches_cgroup_and_process(containerd: Containerd, cri: CRI,
                                                      plugin: RunningPlugin,
                                                      two_cpus: tuple[str, str]) -> None:
    pin = two_cpus[1]
    pod, uid = run_pod(containerd, cri, "pinned")
    plugin.handler.on_create = lambda p, c: cpuset_adjustment(pin) if p.uid == uid else None

    container = cri.run_container(pod, "app", command=SLEEP, resources=CONTAINER_RESOURCES)

    assert cpus_of(cri, container) == (pin, pin, pin)
    info = cri.container_status(container)
    assert info.spec["linux"]["resources"]["cpu"]["cpus"] == pin
    assert f"Cpus_allowed_list:\t{pin}" in cri.exec_sync(container, ["cat", "/proc/self/status"]).stdout


def test_update_for_another_container_reaches_its_cgroup(containerd: Containerd, cri: CRI,
                                                         plugin: RunningPlugin,
                                                         two_cpus: tuple[str, str]) -> None:
    """Creating B pins B to the first CPU and moves the running A from there to the second."""
    first, second = two_cpus
    pod, uid = run_pod(containerd, cri, "movers")
    created: dict[str, str] = {}

    def on_create(p: api.PodSandbox, c: api.Container) -> CreateResult | None:
        if p.uid != uid:
            return None
        created[c.name] = c.id
        pinned = cpuset_adjustment(first)
        if c.name == "a":
            return pinned
        return CreateResult(adjust=pinned.adjust, updates=[cpuset_update(created["a"], second)])

    plugin.handler.on_create = on_create
    a = cri.run_container(pod, "a", command=SLEEP, resources=CONTAINER_RESOURCES)
    assert cpus_of(cri, a) == (first, first, first)

    b = cri.run_container(pod, "b", command=SLEEP, resources=CONTAINER_RESOURCES)

    wait_until(lambda: cpus_of(cri, a) == (second, second, second), UPDATE_TIMEOUT_S,
               f"container a moved to cpu {second} (now {cpus_of(cri, a)})")
    assert cpus_of(cri, b) == (first, first, first)
    assert cri.container_status(a).resources.cpuset_cpus == second


def test_restarted_plugin_synchronizes_running_pod_and_container(containerd: Containerd, cri: CRI) -> None:
    with running_plugin(containerd.nri_socket) as first:
        pod, uid = run_pod(containerd, cri, "survivor")
        container = cri.run_container(pod, "app", command=SLEEP, resources=CONTAINER_RESOURCES)
        first.log.wait_event("post_start_container", pod_uid=uid)

    log = ContainerdLog(containerd)
    with running_plugin(containerd.nri_socket) as second:
        log.wait_plugin_connected(PLUGIN)
        sync = second.log.wait_event("synchronize")
        (synced_pod,) = [p for p in sync.pods if p.uid == uid]
        assert (synced_pod.id, synced_pod.name) == (pod, "survivor")
        assert resources_of(synced_pod.linux.pod_resources) == POD_RESOURCES
        synced = [(c.id, c.name, c.state) for c in sync.containers if c.pod_sandbox_id == pod]
        assert synced == [(container, "app", api.CONTAINER_RUNNING)]
        (synced_container,) = [c for c in sync.containers if c.id == container]
        assert resources_of(synced_container.linux.resources) == CONTAINER_RESOURCES

        late = cri.run_container(pod, "late", command=SLEEP)
        assert second.log.wait_event("create_container", pod_uid=uid).container.id == late


def test_plugin_reconnects_by_itself_after_containerd_restart(
        containerd_flavour: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """An own containerd instance, so that restarting it cannot disturb the shared one."""
    with Containerd(containerd_flavour, tmp_path_factory.mktemp("nri-restart")) as ctrd, ctrd.cri() as cri, \
            running_plugin(ctrd.nri_socket) as plugin:
        pod, uid = run_pod(ctrd, cri, "restart")
        before = cri.run_container(pod, "before", command=SLEEP)
        plugin.log.wait_event("post_start_container", pod_uid=uid)
        old_pid = ctrd.pid
        log = ContainerdLog(ctrd)

        ctrd.restart()

        assert ctrd.pid not in (None, old_pid)
        resync = plugin.log.wait_for(
            lambda seen: [s for s in seen if s.event == "synchronize"][1:], RECONNECT_TIMEOUT_S,
            "a second Synchronize after the containerd restart")[0]
        log.wait_plugin_connected(PLUGIN)
        assert plugin.thread.is_alive()
        assert plugin.stub.synchronizations == 2
        assert [c.id for c in resync.containers if c.pod_sandbox_id == pod] == [before]
        mark = len(plugin.log.all())
        after = cri.run_container(pod, "after", command=SLEEP)
        plugin.log.wait_event("post_start_container", container_id=after, after=mark)
        assert plugin.log.of_pod(uid)[-4:] == [
            ("create_container", "after"), ("post_create_container", "after"), ("start_container", "after"),
            ("post_start_container", "after")]


def test_failing_create_handler_fails_cri_create_and_is_undone(containerd: Containerd, cri: CRI,
                                                               plugin: RunningPlugin) -> None:
    pod, uid = run_pod(containerd, cri, "refusing")

    def refuse(p: api.PodSandbox, c: api.Container) -> CreateResult | None:
        if p.uid == uid:
            raise RpcError(Code.RESOURCE_EXHAUSTED, f"no room for container {c.name} on this node")
        return None

    plugin.handler.on_create = refuse
    with pytest.raises(CRIError) as refused:
        cri.create_container(pod, "app", command=SLEEP, resources=CONTAINER_RESOURCES)

    assert "failed to get NRI adjustment for container" in refused.value.details
    assert "code = ResourceExhausted desc = no room for container app on this node" in refused.value.details
    container = plugin.log.wait_event("create_container", pod_uid=uid).container.id
    plugin.log.wait_event("remove_container", container_id=container)
    assert [s.event for s in plugin.log.all() if s.container.id == container] == [
        "create_container", "stop_container", "remove_container"]
    assert cri.list_containers(pod) == []
    assert plugin.stub.synchronizations == 1, "an error answer must not cost the plugin its connection"


# -- the stub as a process against a fake runtime -------------------------------------------------------

PLUGIN_RUNNER: Final = Path(__file__).with_name("plugin_runner.py")
TESTS: Final = Path(__file__).resolve().parents[1]  # where the runner finds the test bed it imports
PLUGIN_SERVICE: Final = "nri.pkg.api.v1alpha1.Plugin"
RUNTIME_SERVICE: Final = "nri.pkg.api.v1alpha1.Runtime"
SOCKET_TIMEOUT_S: Final = 10.0


class RuntimeEnd:
    """The runtime's side of one accepted plugin connection: blocking, built on the codec, able to send
    any bytes at all. Calls go out on conn 1 (the plugin's service), RegisterPlugin comes in on conn 2."""

    def __init__(self, sock: socket.socket) -> None:
        sock.settimeout(SOCKET_TIMEOUT_S)
        self.sock = sock
        self.codec = Connection(Role.RUNTIME)
        self._inbox: list[Request | Response] = []

    def _next(self) -> Request | Response:
        while not self._inbox:
            data = self.sock.recv(1 << 16)
            if not data:
                raise ConnectionError("plugin closed the connection")
            for message in self.codec.feed(data):
                assert isinstance(message, Request | Response), message
                self._inbox.append(message)
        return self._inbox.pop(0)

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def call(self, method: str, message: bytes, *, stream_id: int | None = None) -> Response:
        """Call the plugin; `stream_id` overrides the codec's next id (to break the numbering rule)."""
        if stream_id is None:
            request = self.codec.request(PLUGIN_SERVICE, method, message)
        else:
            request = Request(stream_id, PLUGIN_SERVICE, method, message)
        self.send_raw(self.codec.encode(request))
        response = self._next()
        assert isinstance(response, Response) and response.stream_id == request.stream_id, response
        return response

    def handshake(self) -> None:
        """RegisterPlugin in, Configure and Synchronize out, then the registration reply, as containerd."""
        register = self._next()
        assert isinstance(register, Request)
        assert (register.service, register.method) == (RUNTIME_SERVICE, "RegisterPlugin")
        configure = api.ConfigureRequest(runtime_name="fake", runtime_version="0.0", request_timeout=2000)
        assert self.call("Configure", configure.SerializeToString()).code == Code.OK
        assert self.call("Synchronize", api.SynchronizeRequest().SerializeToString()).code == Code.OK
        registered = Response(register.stream_id, payload=api.Empty().SerializeToString())
        self.send_raw(self.codec.encode(registered))

    def wait_eof(self) -> None:
        while self.sock.recv(1 << 16):
            pass


@contextlib.contextmanager
def plugin_process(tmp_path: Path) -> Iterator[tuple[socket.socket, subprocess.Popen[bytes], Path]]:
    """A listening fake runtime socket and the stub process dialling it; it must exit 0 on SIGTERM."""
    path, stderr = tmp_path / "nri.sock", tmp_path / "plugin.log"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        listener.listen(4)
        listener.settimeout(SOCKET_TIMEOUT_S)
        with stderr.open("wb") as err:
            process = subprocess.Popen([sys.executable, str(PLUGIN_RUNNER), "--socket", str(path)],
                                       stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                                       env=dict(os.environ, PYTHONPATH=str(TESTS)))
        try:
            yield listener, process, stderr
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                code = process.wait(SOCKET_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                raise
        assert code == 0, f"plugin process exited {code}:\n{stderr.read_text()}"


def accept(listener: socket.socket) -> RuntimeEnd:
    conn, _ = listener.accept()
    return RuntimeEnd(conn)


# A ttrpc message header: data length, stream id, type (1 request, 2 response), flags.
_HEADER = struct.Struct(">IIBB")
EMPTY_CREATE: Final = api.CreateContainerRequest().SerializeToString()

BROKEN_FRAMING = [
    pytest.param(struct.pack(">II", PLUGIN_SERVICE_CONN, 0xFFFFFFFF),
                 "mux frame for conn 1 declares a 4294967295-byte payload", id="oversized-frame"),
    pytest.param(encode_frame(PLUGIN_SERVICE_CONN, _HEADER.pack(2, 99, 1, 0) + b"\x0a\x05"),
                 "undecodable ttrpc Request on stream 99", id="undecodable-envelope"),
    # The header promises 20 bytes, the frame carries 4: the next request's first 16 bytes complete the
    # body, and the rest of it (protobuf text) is read as the next header. ttrpc has no way to resync.
    pytest.param(encode_frame(PLUGIN_SERVICE_CONN, _HEADER.pack(20, 99, 1, 0) + b"\xff\xff\xff\xff"),
                 "-byte payload, over the 67108864-byte limit", id="truncated-message"),
    pytest.param(encode_frame(PLUGIN_SERVICE_CONN, _HEADER.pack(0, 99, 2, 0)),
                 "message type 2 on stream 99", id="response-on-the-request-conn"),
]


@pytest.mark.parametrize(("garbage", "reason"), BROKEN_FRAMING)
def test_broken_framing_closes_the_connection_and_the_same_process_redials(tmp_path: Path, garbage: bytes,
                                                                            reason: str) -> None:
    with plugin_process(tmp_path) as (listener, process, log):
        first = accept(listener)
        first.handshake()
        first.send_raw(garbage)
        with contextlib.suppress(ConnectionError):
            first.call("CreateContainer", EMPTY_CREATE)
            first.wait_eof()
        wait_until(lambda: [line for line in log.read_text().splitlines()
                            if "connection closed: protocol error: " in line and reason in line],
                   SOCKET_TIMEOUT_S, f"the plugin logs closing with a protocol error naming '{reason}'")
        second = accept(listener)
        second.handshake()
        assert process.poll() is None
        assert second.call("CreateContainer", EMPTY_CREATE).code == Code.OK
        first.sock.close()
        second.sock.close()


def _unknown_conn(runtime: RuntimeEnd) -> Response | None:
    runtime.send_raw(encode_frame(7, b"no such conn"))
    return None


def _stream_id_backwards(runtime: RuntimeEnd) -> Response | None:
    # The handshake used stream ids 1 and 3.
    return runtime.call("CreateContainer", EMPTY_CREATE, stream_id=1)


def _undecodable_payload(runtime: RuntimeEnd) -> Response | None:
    return runtime.call("CreateContainer", b"\x0a\x05ab")


BAD_REQUESTS = [
    pytest.param(_unknown_conn, None, id="unknown-conn-id"),
    pytest.param(_stream_id_backwards,
                 (Code.INVALID_ARGUMENT, "stream id 1 must be greater than the last one, 3"),
                 id="stream-id-backwards"),
    pytest.param(_undecodable_payload, (Code.INVALID_ARGUMENT, "undecodable CreateContainerRequest"),
                 id="undecodable-payload"),
]


@pytest.mark.parametrize(("send_bad", "refusal"), BAD_REQUESTS)
def test_bad_requests_are_refused_and_the_connection_stays(
        tmp_path: Path, send_bad: Callable[[RuntimeEnd], Response | None],
        refusal: tuple[Code, str] | None) -> None:
    with plugin_process(tmp_path) as (listener, process, _):
        runtime = accept(listener)
        runtime.handshake()
        answer = send_bad(runtime)
        if refusal is None:
            assert answer is None
        else:
            assert answer is not None and answer.code == refusal[0]
            assert refusal[1] in answer.message
        assert runtime.call("CreateContainer", EMPTY_CREATE).code == Code.OK
        assert process.poll() is None
        runtime.sock.close()
