"""The runtime's end of a launched plugin: a plugin process on a socketpair (its end as NRI_PLUGIN_SOCKET,
as a runtime launches one), spoken to with the ttrpc codec, blocking; and the no-op Go plugin on the
upstream NRI stub, the reference every ratio is taken against."""

from __future__ import annotations

import collections
import contextlib
import os
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Final, TypeVar

from google.protobuf.message import Message

from podlevel.nri import api
from podlevel.nri.runtime import events_in
from podlevel.nri.session import PLUGIN_SERVICE
from podlevel.ttrpc.codec import Connection, Inbound, Request, Response, Role

HACK: Final = Path(__file__).resolve().parents[1]
SYNC_CHUNK_BYTES: Final = 3 << 20
"""Largest Synchronize message sent: a larger node goes in chunks, as the runtime sends it."""
M = TypeVar("M", bound=Message)


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
