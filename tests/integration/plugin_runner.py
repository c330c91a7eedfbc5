"""Run the project's NRI stub against a test bed and wait on what it saw, without sleeping.

- `EventLog`: a thread-safe, append-only record of handler calls; `wait_for(predicate, timeout, what)`
  blocks on a condition variable until the predicate holds or the deadline passes (then it raises
  DeadlineExceeded listing what was seen), so tests never guess a delay.
- `RecordingHandler`: subscribes to every event a runtime with NRI < v0.10 offers, records each call in
  its log before answering, and answers CreateContainer with whatever the test's `on_create` returns (or
  raises). Every other event gets the empty answer.
- `running_plugin`: a `Stub` with such a handler on a background thread, registered and synchronized
  on entry, stopped and joined on exit even when the test failed.
- `ContainerdLog`: containerd's log from a given point on (what it says about plugins).
- Run as a script (`python plugin_runner.py --socket PATH`), it is a stand-alone plugin process whose
  log goes to stderr and which stops cleanly on SIGTERM: the stub as a real process for tests that
  attack it from a fake runtime.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Final, TypeVar

from podlevel.nri import CreateResult, Handler, RuntimeInfo, Stub, UpdateResult, api
from testbed.containerd import Containerd
from testbed.wait import DeadlineExceeded, wait_until

T = TypeVar("T")

PLUGIN_NAME: Final = "podlevel-test"
PLUGIN_INDEX: Final = "50"
READY_TIMEOUT_S: Final = 15.0
EVENT_TIMEOUT_S: Final = 10.0
STOP_TIMEOUT_S: Final = 10.0
# containerd comes back within a few seconds of a restart; a short capped backoff finds it quickly.
BACKOFF_INITIAL_S: Final = 0.1
BACKOFF_MAX_S: Final = 1.0

OnCreate = Callable[[api.PodSandbox, api.Container], CreateResult | None]


@dataclass(frozen=True)
class Seen:
    """One handler call: `event` is the handler method's name; unused fields keep their empty defaults."""

    event: str
    pod: api.PodSandbox = field(default_factory=api.PodSandbox)
    container: api.Container = field(default_factory=api.Container)
    pods: tuple[api.PodSandbox, ...] = ()
    containers: tuple[api.Container, ...] = ()
    runtime: RuntimeInfo | None = None

    def __str__(self) -> str:
        if self.event == "synchronize":
            return f"synchronize({len(self.pods)} pods, {len(self.containers)} containers)"
        what = "/".join(part for part in (self.pod.name, self.container.name) if part)
        return f"{self.event}({what})"


class EventLog:
    """Handler calls in arrival order; written by the stub's thread, read and awaited by the test's."""

    def __init__(self) -> None:
        self._seen: list[Seen] = []
        self._changed = threading.Condition()

    def add(self, seen: Seen) -> None:
        with self._changed:
            self._seen.append(seen)
            self._changed.notify_all()

    def all(self) -> list[Seen]:
        with self._changed:
            return list(self._seen)

    def wait_for(self, predicate: Callable[[list[Seen]], T | None], timeout: float, what: str) -> T:
        """The first truthy `predicate(all calls so far)`, re-evaluated on every new call."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                result = predicate(list(self._seen))
                if result:
                    return result
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    seen = ", ".join(str(s) for s in self._seen[-20:]) or "nothing"
                    raise DeadlineExceeded(f"{what}: not seen within {timeout:g}s; last calls: {seen}")
                self._changed.wait(remaining)

    def wait_event(self, event: str, *, pod_uid: str | None = None, container_id: str | None = None,
                   after: int = 0, timeout: float = EVENT_TIMEOUT_S) -> Seen:
        """The first call of `event` (from index `after` on) matching the given pod uid / container id."""
        def match(seen: list[Seen]) -> Seen | None:
            return next((s for s in seen[after:] if s.event == event
                         and pod_uid in (None, s.pod.uid) and container_id in (None, s.container.id)), None)

        wanted = ", ".join(f"{k}={v}" for k, v in (("pod", pod_uid), ("container", container_id)) if v)
        return self.wait_for(match, timeout, f"{event}({wanted})")

    def of_pod(self, uid: str) -> list[tuple[str, str]]:
        """(event, container name) of every call about pod `uid`, in order."""
        return [(s.event, s.container.name) for s in self.all() if s.pod.uid == uid]


class RecordingHandler(Handler):
    """Records every call in `log`; CreateContainer is answered by `on_create` (None: no adjustment)."""

    def __init__(self, log: EventLog | None = None, on_create: OnCreate | None = None) -> None:
        self.log = log or EventLog()
        self.on_create = on_create

    def configure(self, runtime: RuntimeInfo, config: str) -> None:
        self.log.add(Seen("configure", runtime=runtime))

    def synchronize(self, pods: Sequence[api.PodSandbox],
                    containers: Sequence[api.Container]) -> Sequence[api.ContainerUpdate]:
        self.log.add(Seen("synchronize", pods=tuple(pods), containers=tuple(containers)))
        return ()

    def _pod_event(self, event: str, pod: api.PodSandbox) -> None:
        self.log.add(Seen(event, pod=pod))

    def _container_event(self, event: str, pod: api.PodSandbox, container: api.Container) -> None:
        self.log.add(Seen(event, pod=pod, container=container))

    def run_pod_sandbox(self, pod: api.PodSandbox) -> None:
        self._pod_event("run_pod_sandbox", pod)

    def stop_pod_sandbox(self, pod: api.PodSandbox) -> None:
        self._pod_event("stop_pod_sandbox", pod)

    def remove_pod_sandbox(self, pod: api.PodSandbox) -> None:
        self._pod_event("remove_pod_sandbox", pod)

    def create_container(self, pod: api.PodSandbox, container: api.Container) -> CreateResult | None:
        self._container_event("create_container", pod, container)
        return self.on_create(pod, container) if self.on_create is not None else None

    def post_create_container(self, pod: api.PodSandbox, container: api.Container) -> None:
        self._container_event("post_create_container", pod, container)

    def start_container(self, pod: api.PodSandbox, container: api.Container) -> None:
        self._container_event("start_container", pod, container)

    def post_start_container(self, pod: api.PodSandbox, container: api.Container) -> None:
        self._container_event("post_start_container", pod, container)

    def update_container(self, pod: api.PodSandbox, container: api.Container,
                         resources: api.LinuxResources) -> UpdateResult | None:
        self._container_event("update_container", pod, container)
        return None

    def post_update_container(self, pod: api.PodSandbox, container: api.Container) -> None:
        self._container_event("post_update_container", pod, container)

    def stop_container(self, pod: api.PodSandbox, container: api.Container) -> None:
        self._container_event("stop_container", pod, container)

    def remove_container(self, pod: api.PodSandbox, container: api.Container) -> None:
        self._container_event("remove_container", pod, container)


def cpuset_adjustment(cpus: str) -> CreateResult:
    """Pin the container being created to `cpus`."""
    adjust = api.ContainerAdjustment()
    adjust.linux.resources.cpu.cpus = cpus
    return CreateResult(adjust=adjust)


def cpuset_update(container_id: str, cpus: str) -> api.ContainerUpdate:
    """Move an existing container to `cpus`."""
    update = api.ContainerUpdate(container_id=container_id)
    update.linux.resources.cpu.cpus = cpus
    return update


@dataclass
class RunningPlugin:
    stub: Stub
    handler: RecordingHandler
    thread: threading.Thread

    @property
    def log(self) -> EventLog:
        return self.handler.log


@contextlib.contextmanager
def running_plugin(socket: Path, handler: RecordingHandler | None = None, *, name: str = PLUGIN_NAME,
                   index: str = PLUGIN_INDEX) -> Iterator[RunningPlugin]:
    """A stub on a background thread, registered and synchronized with the runtime at `socket`."""
    handler = handler or RecordingHandler()
    stub = Stub(handler, name, index, str(socket), backoff_initial=BACKOFF_INITIAL_S,
                backoff_max=BACKOFF_MAX_S)
    thread = threading.Thread(target=stub.run, name=f"nri-stub-{index}-{name}", daemon=True)
    thread.start()
    try:
        if not stub.wait_ready(READY_TIMEOUT_S):
            raise DeadlineExceeded(f"stub {index}-{name} not synchronized with {socket} within "
                                   f"{READY_TIMEOUT_S:g}s; calls: {[str(s) for s in handler.log.all()]}")
        yield RunningPlugin(stub, handler, thread)
    finally:
        stub.stop()
        thread.join(STOP_TIMEOUT_S)
        if thread.is_alive():
            raise RuntimeError(f"stub {index}-{name} did not stop within {STOP_TIMEOUT_S:g}s")


class ContainerdLog:
    """containerd's log from the moment this object was made."""

    def __init__(self, ctrd: Containerd) -> None:
        self.path = ctrd.log_path
        self.offset = self.path.stat().st_size

    def lines(self) -> list[str]:
        with self.path.open("rb") as log:
            log.seek(self.offset)
            return log.read().decode(errors="replace").splitlines()

    def plugin_connected(self, plugin: str) -> bool:
        """containerd logs `plugin "NN-name" connected` (2.x adds "and synchronized"; quotes may be escaped)
        once it has synchronized the plugin and will send it events."""
        pattern = re.compile(rf'plugin \\?"{re.escape(plugin)}\\?" connected')
        return any(pattern.search(line) for line in self.lines())

    def wait_plugin_connected(self, plugin: str, timeout: float = READY_TIMEOUT_S) -> None:
        wait_until(lambda: self.plugin_connected(plugin), timeout, f"containerd logs {plugin} connected")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="the NRI stub with a recording handler, as a process")
    parser.add_argument("--socket", required=True, help="the runtime's NRI socket to dial")
    parser.add_argument("--name", default=PLUGIN_NAME)
    parser.add_argument("--index", default=PLUGIN_INDEX)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stub = Stub(RecordingHandler(), args.name, args.index, args.socket, backoff_initial=BACKOFF_INITIAL_S,
                backoff_max=BACKOFF_MAX_S)

    def stop(signum: int, frame: FrameType | None) -> None:
        stub.stop()

    signal.signal(signal.SIGTERM, stop)
    stub.run()


if __name__ == "__main__":
    main()
