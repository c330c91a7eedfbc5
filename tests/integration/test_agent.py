"""`nri-podlevel run` as a real process against a real containerd (both flavours), pods started kubelet-style.

What is asserted is what the kernel applies, read from cgroupfs and /proc/PID/status, next to the plugin's
own log: a pod-level exclusive container gets its slice with CFS quota off, an unmanaged container in the
node shared pool is moved by an update riding on the CreateContainer answer when a bubble is carved, a pod
breaking the empty-shared-pool rule fails CRI CreateContainer and reserves nothing, the pod's own cgroup
holds its bubble with CFS quota lifted, and a restarted plugin restores from its checkpoint: the running
containers keep their allocations and the checkpoint verifies.

Sized for the 2-CPU host: CPU 0 is reserved by default (and stays in the node shared pool), CPU 1 is the
only assignable one. The pods are the demo's (deploy/demo/pods-2cpu.yaml), each started with a fresh uid.
"""

from __future__ import annotations

import contextlib
import http.client
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

from podlevel.engine.errors import EMPTY_POD_SHARED_POOL_ERROR
from podlevel.podspec.manifest import SHAPE_ANNOTATION, to_annotation
from podlevel.podspec.runtime import linux_resources
from podlevel.state.formats import CPUCheckpoint, decode
from podlevel.state.store import CPU_STATE_FILE, MEMORY_STATE_FILE, journal_files
from support.demo_node import (
    ALL,
    ASSIGNABLE,
    RESERVED,
    Applied,
    applied,
    demo_pod,
    quota_off,
    refused_at,
    wait_applied,
    web_and_fast_path,
)
from testbed import cgroupfs
from testbed.containerd import Containerd
from testbed.cri import CRI, CRIError, Resources
from testbed.kubelet import LONG_RUNNING, start_annotated_pod, start_pod
from testbed.plugin_process import REGISTERED, PluginProcess
from testbed.wait import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("demo_node_cpus")]

LOG_TIMEOUT_S: Final = 15.0



def test_exclusive_slice_quota_off_and_node_shared_pool_moved(cri: CRI, plugin: PluginProcess) -> None:
    web = start_pod(cri, demo_pod("web"), with_shape=False)
    server = web.containers["server"]
    shared = applied(cri, server)
    assert (shared.cpus, shared.mems, shared.allowed) == (ALL, "0", ALL)
    marker = len(plugin.lines)

    fast = start_pod(cri, demo_pod("fast-path"))

    main_app = applied(cri, fast.containers["main-app"])
    assert main_app == Applied(ASSIGNABLE, "0", quota_off(), ASSIGNABLE)
    moved = wait_applied(cri, server, RESERVED)
    assert moved.cpus == moved.allowed == RESERVED
    placed = plugin.wait_for_line("container main-app: pod_exclusive cpus=1", LOG_TIMEOUT_S, after=marker)
    assert "quota=off" in placed
    # The move rode on main-app's CreateContainer answer: it is logged by that handler, right after.
    updated = plugin.wait_for_line("updated 1 containers", LOG_TIMEOUT_S, after=marker)
    assert server[:12] in updated and "node_shared cpus=0" in updated
    assert plugin.lines.index(updated) == plugin.lines.index(placed) + 1


def test_pod_cgroup_holds_the_bubble_with_quota_lifted(containerd: Containerd, cri: CRI,
                                                       plugin: PluginProcess) -> None:
    """NRI cannot adjust the pod cgroup: the plugin writes the bubble there itself, and lifts the pod's CFS
    quota because main-app holds CPUs of its own (the kubelet's `DisableCPUQuotaWithExclusiveCPUs`)."""
    web = demo_pod("web")
    start_pod(cri, web, with_shape=False)
    fast_path = demo_pod("fast-path")
    start_pod(cri, fast_path)

    pod_cgroup = cgroupfs.read_cgroup(containerd.pod_cgroup_parent(fast_path.uid, "guaranteed"))
    in_force = (pod_cgroup.cpus, pod_cgroup.effective_cpus, pod_cgroup.effective_mems)
    assert in_force == (ASSIGNABLE, ASSIGNABLE, "0")
    assert pod_cgroup.cpu_quota_us is None
    plugin.wait_for_line(f"pod{fast_path.uid}: cpus={ASSIGNABLE} mems=0 quota=off", LOG_TIMEOUT_S)
    # A pod without a bubble keeps the pod cgroup the kubelet made.
    assert cgroupfs.read_cgroup(containerd.pod_cgroup_parent(web.uid, "burstable")).effective_cpus == ALL


def test_empty_shared_pool_fails_the_pod_and_reserves_nothing(containerd: Containerd, cri: CRI,
                                                             plugin: PluginProcess) -> None:
    no_room = demo_pod("no-room")
    with pytest.raises(CRIError) as refused:
        start_pod(cri, no_room)
    assert refused.value.method == refused_at(containerd.flavour.name)
    assert f"{EMPTY_POD_SHARED_POOL_ERROR}: " in refused.value.details
    logged = plugin.wait_for_line("refused default/no-room", LOG_TIMEOUT_S)
    assert EMPTY_POD_SHARED_POOL_ERROR in logged
    assert cri.list_containers() == [], "the refused container was not left behind"

    fast = start_pod(cri, demo_pod("fast-path"))

    assert applied(cri, fast.containers["main-app"]) == Applied(ASSIGNABLE, "0", quota_off(), ASSIGNABLE)


def test_a_hostile_name_fails_its_pod_and_the_connection_stays(
    containerd: Containerd, cri: CRI, plugin: PluginProcess
) -> None:
    """A sidecar named with a lone surrogate and a control character (JSON escapes, as a pod may write
    them): the pod fails with a status naming the name, escaped, and the next pod is placed over the same
    connection."""
    no_room = demo_pod("no-room")
    hostile = to_annotation(no_room).replace('"name":"logging-sidecar"', '"name":"logging-\\ud800\\u0007"')
    with pytest.raises(CRIError) as refused:
        start_annotated_pod(cri, no_room, {SHAPE_ANNOTATION: hostile})
    assert refused.value.method == refused_at(containerd.flavour.name)
    assert "code = InvalidArgument" in refused.value.details
    assert "'logging-\\ud800\\x07'" in refused.value.details

    fast = start_pod(cri, demo_pod("fast-path"))

    assert applied(cri, fast.containers["main-app"]) == Applied(ASSIGNABLE, "0", quota_off(), ASSIGNABLE)
    log = "\n".join(plugin.lines)
    assert "connection closed" not in log and log.count(REGISTERED) == 1, "the plugin never reconnected"


@contextlib.contextmanager
def restarted_moving_nothing(containerd: Containerd, plugin: PluginProcess) -> Iterator[PluginProcess]:
    """A plugin started again on the killed one's state directory, once its Synchronize of web and
    fast-path moved nothing; stopped at the end."""
    restarted = PluginProcess(containerd.nri_socket, state_dir=plugin.state_dir)
    try:
        restarted.wait_registered()
        synchronized = restarted.wait_for_line("synchronized 2 pods, 2 containers;", LOG_TIMEOUT_S)
        assert "; 0 updates" in synchronized, synchronized
        yield restarted
    finally:
        restarted.stop()


def test_restarted_plugin_resynchronizes_and_keeps_allocations(containerd: Containerd, cri: CRI,
                                                               plugin: PluginProcess) -> None:
    fast_path, containers, before = web_and_fast_path(cri)

    plugin.kill()
    with restarted_moving_nothing(containerd, plugin) as restarted:
        restarted.wait_for_line("restored 1 pods from the checkpoint, released 0", LOG_TIMEOUT_S)
        for name in (CPU_STATE_FILE, MEMORY_STATE_FILE):
            checkpoint = decode((plugin.state_dir / name).read_bytes())
            assert checkpoint.valid, (name, checkpoint.checks)
        cpu = decode((plugin.state_dir / CPU_STATE_FILE).read_bytes()).content
        assert isinstance(cpu, CPUCheckpoint)
        assert (str(cpu.default), {uid: str(c) for uid, c in cpu.pod_entries.items()}) == (
            RESERVED, {fast_path.uid: ASSIGNABLE})
        assert {name: applied(cri, cid) for name, cid in containers.items()} == before
        # The restarted plugin holds fast-path's CPU again: a second bubble finds none left.
        with pytest.raises(CRIError) as refused:
            start_pod(cri, demo_pod("fast-path"))
        assert "TopologyAffinityError" in refused.value.details
        assert applied(cri, containers["main-app"]) == before["main-app"]
        late = start_pod(cri, demo_pod("web"), with_shape=False)
        assert applied(cri, late.containers["server"]).cpus == RESERVED


def test_a_restart_from_the_previous_checkpoint_generation_takes_the_newer_pod_back_where_it_runs(
        containerd: Containerd, cri: CRI, plugin: PluginProcess) -> None:
    """What a power loss may leave: the files of the generation before the newest decision (the files are
    synced to the disk only once writes pause, the journal never). The restarted plugin must not trust them
    blindly or lose the pod they miss: fast-path, admitted after that generation, is taken back onto the CPU
    it runs on, nothing moves, and the new checkpoint holds its bubble."""
    web = start_pod(cri, demo_pod("web"), with_shape=False)
    wait_applied(cri, web.containers["server"], ALL)
    previous = {name: (plugin.state_dir / name).read_bytes() for name in (CPU_STATE_FILE, MEMORY_STATE_FILE)}
    older = decode(previous[CPU_STATE_FILE]).content
    assert isinstance(older, CPUCheckpoint) and not older.pod_entries
    fast_path = demo_pod("fast-path")
    fast = start_pod(cri, fast_path)
    containers = {"web": web.containers["server"], "main-app": fast.containers["main-app"]}
    before = {name: wait_applied(cri, cid, RESERVED if name == "web" else ASSIGNABLE)
              for name, cid in containers.items()}

    plugin.kill()
    for name, data in previous.items():
        (plugin.state_dir / name).write_bytes(data)
    for _, journal in journal_files(plugin.state_dir):  # never synced to the disk: a power loss takes it too
        journal.unlink()
    with restarted_moving_nothing(containerd, plugin) as restarted:
        restarted.wait_for_line("took back 1 pods the checkpoint did not hold", LOG_TIMEOUT_S)
        assert {name: applied(cri, cid) for name, cid in containers.items()} == before
        cpu = decode((plugin.state_dir / CPU_STATE_FILE).read_bytes())
        assert cpu.valid and isinstance(cpu.content, CPUCheckpoint)
        assert (str(cpu.content.default), {uid: str(c) for uid, c in cpu.content.pod_entries.items()}) == (
            RESERVED, {fast_path.uid: ASSIGNABLE})
        with pytest.raises(CRIError) as refused:
            start_pod(cri, demo_pod("fast-path"))
        assert "TopologyAffinityError" in refused.value.details


def test_shape_claiming_more_than_the_kubelet_granted_is_refused(containerd: Containerd, cri: CRI,
                                                                plugin: PluginProcess) -> None:
    """The annotation says a 1-CPU bubble; the sandbox the kubelet made carries a 100m budget."""
    fast = demo_pod("fast-path")
    with pytest.raises(CRIError) as refused:
        sandbox = cri.run_pod(
            fast.name, uid=fast.uid, annotations={SHAPE_ANNOTATION: to_annotation(fast)},
            resources=Resources.kubelet(cpu_request="100m", cpu_limit="100m", memory_limit="256Mi"),
        )
        cri.run_container(sandbox, "main-app", command=list(LONG_RUNNING),
                          resources=Resources.of(linux_resources(fast.containers[0].resources)))
    assert refused.value.method == refused_at(containerd.flavour.name)
    assert "InvalidArgument" in refused.value.details and SHAPE_ANNOTATION in refused.value.details
    assert "cpu_shares 1024" in refused.value.details and "carries 102" in refused.value.details
    plugin.wait_for_line(f"bad pod shape for default/{fast.name}", LOG_TIMEOUT_S)

    honest = start_pod(cri, demo_pod("fast-path"))
    assert applied(cri, honest.containers["main-app"]) == Applied(ASSIGNABLE, "0", quota_off(), ASSIGNABLE)


def test_containerd_restart_keeps_every_allocation(containerd: Containerd, cri: CRI,
                                                   plugin: PluginProcess) -> None:
    """containerd goes away and comes back with the same containers: the plugin reconnects, the Synchronize
    moves nothing, and the checkpoint still holds the bubble."""
    fast_path, containers, before = web_and_fast_path(cri)
    marker = len(plugin.lines)

    containerd.restart()

    synchronized = plugin.wait_for_line("synchronized 2 pods, 2 containers;", LOG_TIMEOUT_S, after=marker)
    assert "; 0 updates" in synchronized, synchronized
    with containerd.cri() as again:
        assert {name: applied(again, cid) for name, cid in containers.items()} == before
    pod_cgroup = cgroupfs.read_cgroup(containerd.pod_cgroup_parent(fast_path.uid, "guaranteed"))
    assert pod_cgroup.effective_cpus == ASSIGNABLE
    cpu = decode((plugin.state_dir / CPU_STATE_FILE).read_bytes())
    assert cpu.valid and isinstance(cpu.content, CPUCheckpoint)
    assert {uid: str(c) for uid, c in cpu.content.pod_entries.items()} == {fast_path.uid: ASSIGNABLE}


def test_a_cpuset_changed_behind_the_plugins_back_is_put_back_within_a_period(
        containerd: Containerd, cri: CRI, tmp_path: Path) -> None:
    """web's container runs on CPU 0 once fast-path holds CPU 1: someone writes CPU 1 (main-app's exclusive
    CPU) into web's cpuset; the next reconcile round puts CPU 0 back, logs it and counts it."""
    plugin = PluginProcess(containerd.nri_socket, ["--reconcile-period", "1"], state_dir=tmp_path / "state")
    try:
        plugin.wait_registered()
        server = start_pod(cri, demo_pod("web"), with_shape=False).containers["server"]
        start_pod(cri, demo_pod("fast-path"))
        wait_applied(cri, server, RESERVED)
        relative = cri.container_status(server).cgroups_path.strip("/")
        hierarchy = cgroupfs.CGROUP_MOUNT if cgroupfs.is_cgroup2() else cgroupfs.CGROUP_MOUNT / "cpuset"
        (hierarchy / relative / "cpuset.cpus").write_text(ALL)

        assert wait_applied(cri, server, RESERVED).cpus == RESERVED
        repaired = plugin.wait_for_line("a shared container found on exclusive CPUs", LOG_TIMEOUT_S)
        assert server[:12] in repaired and f"put back to cpus={RESERVED}" in repaired
        assert 'nri_podlevel_cgroup_repairs_total{field="cpus"} 1.0' in answer(plugin, "/metrics")[1]
    finally:
        plugin.stop()


def test_readiness_follows_a_stopped_and_restarted_containerd(containerd: Containerd,
                                                             plugin: PluginProcess) -> None:
    """containerd stops: /readyz answers 503 saying why before the plugin's second redial; containerd comes
    back: 200 once the new registration is synchronized."""
    assert probe(plugin, "/readyz") == 200
    marker = len(plugin.lines)
    containerd.stop_daemon()
    try:
        unready = wait_until(lambda: (got := answer(plugin, "/readyz"))[0] == 503 and got, LOG_TIMEOUT_S,
                             "/readyz to answer 503 once containerd is gone")
        redials = [line for line in plugin.lines[marker:] if "reconnecting in" in line]
        assert len(redials) <= 1, redials
        assert "not registered and synchronized with the runtime" in unready[1]
    finally:
        containerd.start_daemon()
    plugin.wait_for_line("registered with containerd", LOG_TIMEOUT_S * 4, after=marker)
    wait_until(lambda: probe(plugin, "/readyz") == 200, LOG_TIMEOUT_S, "/readyz 200 after the Synchronize")


def answer(plugin: PluginProcess, path: str) -> tuple[int, str]:
    """Status and body of GET `path` on the plugin's endpoint; -1 and "" if nothing answers."""
    host, port = plugin.metrics_address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read().decode()
    except OSError:
        return -1, ""
    finally:
        connection.close()


def probe(plugin: PluginProcess, path: str) -> int:
    return answer(plugin, path)[0]


def test_probes_say_alive_and_ready_only_while_synchronized(plugin: PluginProcess, tmp_path: Path) -> None:
    """/healthz answers while the process serves; /readyz only while registered and synchronized: a plugin
    whose runtime socket is missing keeps redialling, alive but not ready."""
    assert (probe(plugin, "/healthz"), probe(plugin, "/readyz")) == (200, 200)
    lonely = PluginProcess(tmp_path / "no-runtime.sock", state_dir=tmp_path / "lonely", prefix="  lonely | ")
    try:
        wait_until(lambda: probe(lonely, "/healthz") == 200, LOG_TIMEOUT_S, "/healthz of the lonely plugin")
        assert probe(lonely, "/readyz") == 503
    finally:
        lonely.stop()
