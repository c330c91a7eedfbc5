"""A pod is admitted when its sandbox starts, on real containerd (every flavour), and what containerd does
with a plugin's error at that point.

containerd tells NRI plugins about a sandbox (RunPodSandbox, a StateChange before NRI v0.12) once the
sandbox is started and before any of its containers; the kubelet pulls the images in between. On 1.7 and
2.x alike a plugin's error there fails the CRI RunPodSandbox ("NRI RunPodSandbox failed: ..."), and the
plugins get StopPodSandbox and RemovePodSandbox. But containerd 2.x before 2.2.6 and 2.3.3 (the test bed's
2.1) leaves the sandbox it had started running: its pause container outlives the failed call, and comes
back as a pod after a containerd restart. So there nri-podlevel refuses nothing at the sandbox: a pod it
cannot admit is decided again at its first CreateContainer, which fails with the kubelet's admission type
and message. containerd 2.4 (and 2.2.6, 2.3.3) shuts the sandbox down, so there the pod is refused at its
sandbox, with the same type and message, and nothing of it runs. Nothing is reserved either way.

Sized for the 2-CPU host (CPU 0 reserved, CPU 1 assignable), with the demo's pods under fresh uids.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path
from typing import Final

import pytest
from plugin_runner import RecordingHandler, running_plugin

from podlevel.cli.endpoint import fetch
from podlevel.engine.errors import EMPTY_POD_SHARED_POOL_ERROR
from podlevel.engine.pod import Pod
from podlevel.nri import Code, RpcError, api
from podlevel.podspec.manifest import SHAPE_ANNOTATION, to_annotation
from podlevel.podspec.runtime import sandbox_resources
from support.demo_node import (
    ALL,
    ASSIGNABLE,
    REFUSED_AT_SANDBOX,
    RESERVED,
    Applied,
    applied,
    demo_pod,
    quota_off,
    wait_applied,
)
from testbed import cgroupfs
from testbed.containerd import Containerd
from testbed.cri import CRI, CRIError, Resources
from testbed.kubelet import cgroup_parent, start_container, start_pod
from testbed.plugin_process import PluginProcess, recorded
from testbed.wait import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("demo_node_cpus")]

LOG_TIMEOUT_S: Final = 15.0
CTR_TIMEOUT_S: Final = 30.0
LEFT_RUNNING: Final = {"2": 1, "1.7": 0, "2.4": 0}
"""How many containers of a sandbox failed by a plugin at RunPodSandbox containerd leaves behind, by flavour
(2.1's pause container; fixed in 2.2.6 and 2.3.3)."""
UNSOLICITED_UPDATES: Final = frozenset({"2.4"})
"""The flavours whose NRI (v0.12.1 and later) serves the plugin's own UpdateContainers at any time."""



def run_sandbox(cri: CRI, pod: Pod) -> str:
    """The kubelet's RunPodSandbox for `pod`, with its shape annotation; no container yet."""
    return cri.run_pod(pod.name, namespace=pod.namespace, uid=pod.uid,
                       resources=Resources.of(sandbox_resources(pod)), cgroup_parent=cgroup_parent(cri, pod),
                       annotations={SHAPE_ANNOTATION: to_annotation(pod)})


def checkpointed_bubbles(state_dir: Path) -> dict[str, str]:
    cpu, _ = recorded(state_dir)
    return {uid: str(cpus) for uid, cpus in cpu.pod_entries.items()}


class RefusingSandboxes(RecordingHandler):
    """Fails RunPodSandbox for one pod, as a plugin refusing it there would."""

    def __init__(self, uid: str) -> None:
        super().__init__()
        self.uid = uid

    def run_pod_sandbox(self, pod: api.PodSandbox) -> None:
        super().run_pod_sandbox(pod)
        if pod.uid == self.uid:
            raise RpcError(Code.FAILED_PRECONDITION, f"{EMPTY_POD_SHARED_POOL_ERROR}: refused at its sandbox")


def runtime_containers(containerd: Containerd) -> set[str]:
    """Every container containerd holds in the CRI namespace, pause containers included."""
    listed = subprocess.run([*containerd.ctr_command(), "containers", "ls", "-q"], capture_output=True,
                            text=True, check=True, timeout=CTR_TIMEOUT_S)
    return set(listed.stdout.split())


def runtime_tasks(containerd: Containerd) -> set[str]:
    """The tasks (running processes) containerd holds in the CRI namespace, pause containers included."""
    listed = subprocess.run([*containerd.ctr_command(), "tasks", "ls", "-q"], capture_output=True, text=True,
                            check=True, timeout=CTR_TIMEOUT_S)
    return set(listed.stdout.split())


def test_an_error_at_run_pod_sandbox_fails_the_sandbox_and_on_2_1_leaves_it_running(
    containerd: Containerd, cri: CRI
) -> None:
    uid = str(uuid.uuid4())
    before = runtime_containers(containerd)
    with running_plugin(containerd.nri_socket, RefusingSandboxes(uid)) as plugin:
        with pytest.raises(CRIError) as refused:
            cri.run_pod("refused", uid=uid)
        plugin.log.wait_event("remove_pod_sandbox", pod_uid=uid)
    # Never ready. Should containerd fail to delete a rolled-back sandbox (2.4.2 under load: it stays listed
    # SANDBOX_NOTREADY or SANDBOX_UNKNOWN), the kubelet's garbage collection removes it; so does this test.
    listed = [p for p in cri.list_pods() if p.uid == uid]
    for pod in listed:
        cri.remove_pod(pod.id)
    left = runtime_containers(containerd) - before
    try:
        assert refused.value.method == "RunPodSandbox"
        assert (f"NRI RunPodSandbox failed: rpc error: code = FailedPrecondition desc = "
                f"{EMPTY_POD_SHARED_POOL_ERROR}: refused at its sandbox") in refused.value.details
        assert {p.state for p in listed} <= {"SANDBOX_NOTREADY", "SANDBOX_UNKNOWN"}
        assert not listed or containerd.flavour.name in REFUSED_AT_SANDBOX, "2.1 and 1.7 list none"
        assert len(left) == LEFT_RUNNING[containerd.flavour.name]
    finally:
        for container_id in left:
            subprocess.run([*containerd.ctr_command(), "tasks", "delete", "--force", container_id],
                           capture_output=True, check=False, timeout=CTR_TIMEOUT_S)
            subprocess.run([*containerd.ctr_command(), "containers", "delete", container_id],
                           capture_output=True, check=True, timeout=CTR_TIMEOUT_S)


def test_a_refused_pod_fails_at_its_sandbox_where_it_is_rolled_back_else_at_its_first_container(
    containerd: Containerd, cri: CRI, plugin: PluginProcess
) -> None:
    no_room = demo_pod("no-room")
    before = runtime_tasks(containerd)
    if containerd.flavour.name in REFUSED_AT_SANDBOX:
        with pytest.raises(CRIError) as refused:
            run_sandbox(cri, no_room)
        assert refused.value.method == "RunPodSandbox"
        plugin.wait_for_line(f"refused default/no-room: {EMPTY_POD_SHARED_POOL_ERROR}", LOG_TIMEOUT_S)
        # Its pause container is killed before the call returns. Should containerd fail to delete what is
        # left (seen under load: "marking sandbox state as SANDBOX_UNKNOWN"), the sandbox stays listed,
        # not ready, until the kubelet removes it.
        assert [p.state for p in cri.list_pods() if p.uid == no_room.uid] in (
            [], ["SANDBOX_NOTREADY"], ["SANDBOX_UNKNOWN"])
        assert runtime_tasks(containerd) == before, "nothing of the refused pod runs"
    else:
        sandbox_id = run_sandbox(cri, no_room)
        sidecar = no_room.container("logging-sidecar")
        assert sidecar is not None
        with pytest.raises(CRIError) as refused:
            start_container(cri, sandbox_id, no_room, sidecar)
        assert refused.value.method == "CreateContainer"
        refusal = f"refused default/no-room container logging-sidecar: {EMPTY_POD_SHARED_POOL_ERROR}"
        plugin.wait_for_line(refusal, LOG_TIMEOUT_S)
    assert f"{EMPTY_POD_SHARED_POOL_ERROR}: pod default/no-room: " in refused.value.details
    assert cri.list_containers() == []
    # show lists it refused either way, from the sandbox the runtime keeps or from the last one it removed.
    listed = {p["name"]: p for p in fetch(plugin.debug_address, "/debug/node")[1]["pods"]}
    assert listed["no-room"]["status"] == "refused", listed["no-room"]
    assert listed["no-room"]["refusal"].startswith(f"{EMPTY_POD_SHARED_POOL_ERROR}: pod default/no-room: ")
    fast_path = demo_pod("fast-path")
    fast = start_pod(cri, fast_path)
    assert applied(cri, fast.containers["main-app"]) == Applied(ASSIGNABLE, "0", quota_off(), ASSIGNABLE)
    assert checkpointed_bubbles(plugin.state_dir) == {fast_path.uid: ASSIGNABLE}


def test_the_pod_is_admitted_at_its_sandbox_and_its_first_container_moves_the_others(
    containerd: Containerd, cri: CRI, plugin: PluginProcess
) -> None:
    server = start_pod(cri, demo_pod("web"), with_shape=False).containers["server"]
    fast_path = demo_pod("fast-path")
    marker = len(plugin.lines)

    sandbox_id = run_sandbox(cri, fast_path)

    plugin.wait_for_line("admitted default/fast-path: bubble 1", LOG_TIMEOUT_S, after=marker)
    # Written by the pod cgroup worker after the answer (the pod's first CreateContainer waits for it).
    pod_cgroup_parent = containerd.pod_cgroup_parent(fast_path.uid, "guaranteed")
    wait_until(lambda: cgroupfs.read_cgroup(pod_cgroup_parent).effective_cpus == ASSIGNABLE, LOG_TIMEOUT_S,
               "the bubble in the pod cgroup")
    # A notification's answer carries no updates: web still runs on both CPUs until the next answer.
    assert applied(cri, server).cpus == ALL
    main_app = fast_path.container("main-app")
    assert main_app is not None

    created = start_container(cri, sandbox_id, fast_path, main_app)

    # The admission is in the checkpoint by the first answer that applies it.
    assert checkpointed_bubbles(plugin.state_dir) == {fast_path.uid: ASSIGNABLE}
    assert applied(cri, created) == Applied(ASSIGNABLE, "0", quota_off(), ASSIGNABLE)
    assert wait_applied(cri, server, RESERVED).allowed == RESERVED
    placed = plugin.wait_for_line("container main-app: pod_exclusive cpus=1", LOG_TIMEOUT_S, after=marker)
    updated = plugin.wait_for_line("updated 1 containers", LOG_TIMEOUT_S, after=marker)
    assert server[:12] in updated and plugin.lines.index(updated) == plugin.lines.index(placed) + 1


def test_freed_cpus_reach_the_node_shared_pool_at_once_where_the_runtime_serves_a_plugins_update(
    containerd: Containerd, cri: CRI, plugin: PluginProcess
) -> None:
    """On NRI v0.12.1 and later (containerd 2.4) the plugin's own UpdateContainers widens the node-shared
    containers right after a pod stops; before, the widening rides on the next answer."""
    server = start_pod(cri, demo_pod("web"), with_shape=False).containers["server"]
    fast = start_pod(cri, demo_pod("fast-path"))
    assert wait_applied(cri, server, RESERVED).cpus == RESERVED
    marker = len(plugin.lines)

    cri.stop_pod(fast.sandbox_id)

    plugin.wait_for_line("released default/fast-path", LOG_TIMEOUT_S, after=marker)
    if containerd.flavour.name in UNSOLICITED_UPDATES:
        assert wait_applied(cri, server, ALL).cpus == ALL
        plugin.wait_for_line(f"updated 1 containers after a release: node_shared cpus={ALL}", LOG_TIMEOUT_S,
                             after=marker)
    else:
        assert applied(cri, server).cpus == RESERVED, "no answer has carried the widening yet"
        start_pod(cri, demo_pod("web"), with_shape=False)  # whose CreateContainer answer carries it
        assert wait_applied(cri, server, ALL).cpus == ALL


def test_a_sandbox_started_while_the_plugin_was_down_is_admitted_at_its_first_container(
    containerd: Containerd, cri: CRI, tmp_path: Path
) -> None:
    fast_path = demo_pod("fast-path")
    sandbox_id = run_sandbox(cri, fast_path)
    plugin = PluginProcess(containerd.nri_socket, state_dir=tmp_path / "state")
    try:
        plugin.wait_registered()
        plugin.wait_for_line("synchronized 1 pods, 0 containers", LOG_TIMEOUT_S)
        main_app = fast_path.container("main-app")
        assert main_app is not None

        created = start_container(cri, sandbox_id, fast_path, main_app)

        assert applied(cri, created) == Applied(ASSIGNABLE, "0", quota_off(), ASSIGNABLE)
        plugin.wait_for_line("placed default/fast-path container main-app: pod_exclusive", LOG_TIMEOUT_S)
        assert checkpointed_bubbles(plugin.state_dir) == {fast_path.uid: ASSIGNABLE}
        assert not any("admitted default/fast-path" in line for line in plugin.lines)
    finally:
        plugin.stop()
