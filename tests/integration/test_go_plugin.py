"""nri-podlevel's NRI stub beside an independent plugin on the upstream Go stub, on one containerd.

Both register on the same NRI socket and see the same pod and container; ours pins the container's
cpuset, the Go plugin adds an environment variable and an annotation (fields nri-podlevel never sets: the
runtime refuses a container when two plugins set the same field). The test proves both adjustments land,
neither plugin is dropped or reconnects, and containerd logs no conflict; a second test provokes a real
conflict to show that check can fail.

The Go plugin (tests/integration/goplugin) is built by hack/build-go-nri-plugin from Debian's containerd/nri
sources. The first run downloads about 80 MB (Go and the libraries) and compiles for about a minute; later
runs reuse the binary while it is newer than its sources.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest
from plugin_runner import (
    READY_TIMEOUT_S,
    STOP_TIMEOUT_S,
    ContainerdLog,
    RecordingHandler,
    RunningPlugin,
    cpuset_adjustment,
    running_plugin,
)

from podlevel.nri import CreateResult, api
from testbed import cgroupfs
from testbed.containerd import Containerd
from testbed.cri import CRI, CRIError, Resources
from testbed.wait import wait_until

# A cold build downloads ~80 MB and compiles the stub's dependency tree (about 80 s on 2 cores); the first
# test here pays for it, so the module's tests get that much more than the default timeout.
BUILD_TIMEOUT_S: Final = 480
pytestmark = [pytest.mark.integration, pytest.mark.timeout(BUILD_TIMEOUT_S + 120)]

REPO_ROOT: Final = Path(__file__).resolve().parents[2]
BUILD_GO_PLUGIN: Final = REPO_ROOT / "hack" / "build-go-nri-plugin"
EVENT_TIMEOUT_S: Final = 10.0

# Index 10 runs before ours (20), so the Go plugin records the resources exactly as the runtime built them.
GO_NAME, GO_INDEX = "goplugin", "10"
OUR_NAME, OUR_INDEX = "podlevel", "20"
GO_ENV: Final = ("GOPLUGIN_MARK", "set-by-go")
GO_ANNOTATION: Final = ("goplugin.nri-podlevel.test/mark", "set-by-go")
# The highest CPU this process may use: pinning there differs from the default (all CPUs) on 2+ CPUs.
PIN_CPU: Final = max(os.sched_getaffinity(0))
# What containerd's NRI adaptation logs when it refuses merged adjustments or drops a plugin.
TROUBLE: Final = ("both tried to set", "closing plugin", "connection to plugin",
                  "failed to synchronize plugin", "failed to start external plugin",
                  "failed to create external plugin")


@dataclass
class GoPlugin:
    """The Go plugin process and the files it writes: one JSON record per event, and its own log."""

    process: subprocess.Popen[bytes]
    events: Path
    stderr: Path

    def records(self, pod_uid: str | None = None) -> list[dict[str, Any]]:
        """Records so far (of one pod, if given); each line is one write(2), so every line is whole."""
        if not self.events.exists():
            return []
        records = [json.loads(line) for line in self.events.read_text().splitlines()]
        return [r for r in records if pod_uid in (None, r.get("pod_uid"))]

    def synchronized(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"Go plugin exited {self.process.returncode}:\n{self.stderr.read_text()}")
        return any(record["event"] == "Synchronize" for record in self.records())


@pytest.fixture(scope="session")
def go_plugin() -> Path:
    """The Go plugin binary, built (or found up to date) by hack/build-go-nri-plugin."""
    binary = REPO_ROOT / ".cache" / "go-debs" / "nri-goplugin"
    # Its own session, so a timeout stops apt and the Go compiler under it too, by the group's id.
    build = subprocess.Popen([str(BUILD_GO_PLUGIN), "--out", str(binary)], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = build.communicate(timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(build.pid, signal.SIGKILL)
        output, _ = build.communicate()
        raise RuntimeError(f"{BUILD_GO_PLUGIN.name} took over {BUILD_TIMEOUT_S}s:\n{output}") from None
    if build.returncode != 0:
        raise RuntimeError(f"{BUILD_GO_PLUGIN.name} exited {build.returncode}:\n{output}")
    return binary


@contextlib.contextmanager
def running_go_plugin(binary: Path, socket: Path, work: Path, adjust: Sequence[str]) -> Iterator[GoPlugin]:
    """The Go plugin as a child process with `adjust` flags, synchronized on entry, stopped by PID on exit."""
    events, stderr = work / "goplugin-events.jsonl", work / "goplugin.stderr"
    argv = [str(binary), "-socket", str(socket), "-name", GO_NAME, "-index", GO_INDEX, "-events", str(events),
            *adjust]
    with stderr.open("wb") as err:
        plugin = GoPlugin(subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=err, stderr=err),
                          events, stderr)
    try:
        wait_until(plugin.synchronized, READY_TIMEOUT_S, "Go plugin synchronized with containerd")
        yield plugin
    finally:
        if plugin.process.poll() is None:
            plugin.process.terminate()
            try:
                plugin.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                plugin.process.kill()
                plugin.process.wait()


@contextlib.contextmanager
def both_plugins(ctrd: Containerd, handler: RecordingHandler, go_binary: Path, work: Path,
                 go_adjust: Sequence[str]) -> Iterator[tuple[GoPlugin, RunningPlugin]]:
    """The Go plugin and our stub, both in containerd's plugin list (so both get the next event)."""
    log = ContainerdLog(ctrd)
    with running_go_plugin(go_binary, ctrd.nri_socket, work, go_adjust) as go, \
            running_plugin(ctrd.nri_socket, handler, name=OUR_NAME, index=OUR_INDEX) as ours:
        for name in (f"{GO_INDEX}-{GO_NAME}", f"{OUR_INDEX}-{OUR_NAME}"):
            log.wait_plugin_connected(name)
        yield go, ours


def pin_pod(uid: str) -> RecordingHandler:
    """Our handler: pins the containers of pod `uid` (only) to PIN_CPU."""
    def on_create(pod: api.PodSandbox, container: api.Container) -> CreateResult | None:
        return cpuset_adjustment(str(PIN_CPU)) if pod.uid == uid else None

    return RecordingHandler(on_create=on_create)


def test_go_plugin_and_ours_both_adjust_one_container(containerd: Containerd, cri: CRI, go_plugin: Path,
                                                      tmp_path: Path) -> None:
    uid = str(uuid.uuid4())
    log = ContainerdLog(containerd)
    go_adjust = ["-env", "=".join(GO_ENV), "-annotation", "=".join(GO_ANNOTATION)]

    with both_plugins(containerd, pin_pod(uid), go_plugin, tmp_path, go_adjust) as (go, ours):
        pod = cri.run_pod("coexist", uid=uid, cgroup_parent=containerd.pod_cgroup_parent(uid),
                          resources=Resources.kubelet("1", "1", "128Mi"))
        container = cri.run_container(pod, "work", command=["/bin/sh", "-c", "sleep 3600"],
                                      resources=Resources.kubelet("500m", "500m", "64Mi"))

        info = cri.container_status(container)
        assert info.state == "CONTAINER_RUNNING"
        assert cgroupfs.read_cgroup(info.cgroups_path).cpus == str(PIN_CPU)
        assert cgroupfs.cpus_allowed_list(info.pid) == str(PIN_CPU)
        environment = cri.exec_sync(container, ["env"])
        assert environment.exit_code == 0
        assert "=".join(GO_ENV) in environment.stdout.splitlines()
        assert info.spec["annotations"].get(GO_ANNOTATION[0]) == GO_ANNOTATION[1]

        cri.stop_container(container)
        cri.remove_container(container)
        ours.log.wait_event("remove_container", pod_uid=uid)

        def go_saw_removal() -> list[dict[str, Any]] | None:
            records = go.records(uid)
            return records if any(r["event"] == "RemoveContainer" for r in records) else None

        seen = wait_until(go_saw_removal, EVENT_TIMEOUT_S, "Go plugin saw RemoveContainer")

        ours_seen = [event for event in ours.log.of_pod(uid) if not event[0].startswith("post_")]
        assert ours_seen == [("run_pod_sandbox", ""), ("create_container", "work"),
                             ("start_container", "work"), ("stop_container", "work"),
                             ("remove_container", "work")]
        assert [(r["event"], r.get("pod"), r.get("container")) for r in seen] == [
            ("RunPodSandbox", "coexist", None),
            ("CreateContainer", "coexist", "work"),
            ("StartContainer", "coexist", "work"),
            ("StopContainer", "coexist", "work"),
            ("RemoveContainer", "coexist", "work"),
        ]
        created = seen[1]
        assert created["resources"] == {"cpus": "", "shares": 512, "quota": 50_000}
        assert created["adjusted"] == {"env": dict([GO_ENV]), "annotations": dict([GO_ANNOTATION])}

        assert go.process.poll() is None, f"Go plugin exited {go.process.returncode}"
        assert ours.stub.synchronizations == 1, "nri-podlevel stub lost its connection and re-registered"
        assert [line for line in log.lines() if any(t in line for t in TROUBLE)] == []

    events = [r["event"] for r in go.records()]
    assert events[0] == "Configure" and "Closed" not in events, events
    assert "level=error" not in go.stderr.read_text()


def test_the_runtime_refuses_two_plugins_pinning_one_container(containerd: Containerd, cri: CRI,
                                                               go_plugin: Path, tmp_path: Path) -> None:
    """The oracle of the test above: a real collision fails CreateContainer and leaves the log line the
    coexistence test looks for, so that test's silence means something."""
    uid = str(uuid.uuid4())
    log = ContainerdLog(containerd)
    with both_plugins(containerd, pin_pod(uid), go_plugin, tmp_path, ["-cpus", "0"]):
        pod = cri.run_pod("collide", uid=uid, cgroup_parent=containerd.pod_cgroup_parent(uid))
        with pytest.raises(CRIError) as refused:
            cri.create_container(pod, "work", command=["/bin/sh", "-c", "sleep 3600"])
    # The runtime names the later plugin first: ours (20) collided with the field the Go plugin (10) set,
    # which NRI before v0.12 calls "CPU pinning" and later releases by its field's name.
    field = "CPUSetCPUs" if containerd.flavour.name == "2.4" else "CPU pinning"
    conflict = f'plugins "{OUR_INDEX}-{OUR_NAME}" and "{GO_INDEX}-{GO_NAME}" both tried to set {field}'
    assert conflict in refused.value.details
    assert any(f"both tried to set {field}" in line for line in log.lines())
    assert cri.list_containers(pod) == []
