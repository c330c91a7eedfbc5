"""report.podresources: the PodResources v1 answers, from snapshots of a real Engine and Placement, and the
service on its unix socket (mode, group, what it refuses), called through a real gRPC channel."""

from __future__ import annotations

import grp
import os
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from podlevel._proto.podresources import api_pb2 as pb
from podlevel._proto.podresources import api_pb2_grpc as pb_grpc
from podlevel.agent.placement import Placement
from podlevel.agent.records import Sandbox
from podlevel.agent.snapshot import NodeSnapshot
from podlevel.engine.cpuset import CPUSet
from podlevel.engine.errors import AdmissionError
from podlevel.engine.pod import Pod
from podlevel.engine.topology_manager import Scope
from podlevel.podspec.manifest import SHAPE_ANNOTATION, to_annotation
from podlevel.podspec.runtime import sandbox_resources
from podlevel.report.lazy_grpc import LazyGrpcSocket
from podlevel.report.podresources import allocatable_response, list_response
from podlevel.report.podresources_socket import KUBELET_SOCKET, podresources_socket
from podlevel.report.unix_socket import SocketError, bind_private
from support.builders import GI, MI, app, burstable, fast_path, guaranteed, init, new_engine, pod, sidecar


def sandbox_of(p: Pod) -> Sandbox:
    return Sandbox(f"sb-{p.name}", p.uid, p.name, p.namespace, {SHAPE_ANNOTATION: to_annotation(p)},
                   sandbox_resources(p))


def unmanaged(name: str) -> Sandbox:
    return Sandbox(f"sb-{name}", f"uid-{name}", name, "default", {})


def start(placement: Placement, sandbox: Sandbox, *names: str) -> None:
    for name in names:
        placement.create(sandbox, f"{sandbox.name}-{name}", name)


def snapshot_of(placement: Placement) -> NodeSnapshot:
    return NodeSnapshot(placement.engine, placement.view())


def by_name(snapshot: NodeSnapshot) -> dict[str, pb.PodResources]:
    return {p.name: p for p in list_response(snapshot).pod_resources}


Served = tuple[LazyGrpcSocket, pb_grpc.PodResourcesListerStub]


def cpus(values: object) -> str:
    return str(CPUSet(values))  # type: ignore[arg-type]


def memory(blocks: object) -> list[tuple[str, int, list[int]]]:
    return [(b.memory_type, b.size, [n.ID for n in b.topology.nodes]) for b in blocks]  # type: ignore[attr-defined]


def containers(pod_resources: pb.PodResources) -> dict[str, tuple[str, list[tuple[str, int, list[int]]]]]:
    return {c.name: (cpus(c.cpu_ids), memory(c.memory)) for c in pod_resources.containers}


def shared_pool(listed: pb.PodResources) -> CPUSet:
    """The consumers' formula: pod cpu_ids minus every container's."""
    return CPUSet(listed.cpu_ids) - CPUSet.union_of(CPUSet(c.cpu_ids) for c in listed.containers)


def with_init() -> Pod:
    """A 3-CPU bubble: a standard init container (never listed), a sidecar and a fractional app, pooled."""
    return pod("staged", init("setup"), sidecar("log"), app("work", burstable(500)),
               budget=guaranteed(3000, 512 * MI), uid="uid-staged")


def classic() -> Pod:
    return pod("classic", app("solo", guaranteed(2000, 128 * MI)), uid="uid-classic")


@pytest.fixture
def pod_scope() -> Placement:
    """fast-path (bubble 4: app's slice of 2, log in the pool), staged, classic, web (unmanaged) and no-room
    (refused: the app's slice would take the whole budget)."""
    placement = Placement(new_engine())
    start(placement, sandbox_of(fast_path()), "log", "app")
    start(placement, sandbox_of(with_init()), "setup", "log", "work")
    start(placement, sandbox_of(classic()), "solo")
    start(placement, unmanaged("web"), "server", "helper")
    with pytest.raises(AdmissionError):
        start(placement, sandbox_of(fast_path("no-room", cpus=2, exclusive=2)), "log")
    return placement


def test_pod_scope_bubble_at_pod_level_slices_at_container_level(pod_scope: Placement) -> None:
    listed = by_name(snapshot_of(pod_scope))
    fast = listed["fast"]
    applied = {name: pod_scope.applied[f"fast-{name}"] for name in ("log", "app")}

    bubble = CPUSet(fast.cpu_ids)
    assert len(bubble) == 4 and bubble == applied["log"].cpus | applied["app"].cpus
    [node] = pod_scope.engine.topology.numa_nodes_of(bubble)
    assert memory(fast.memory) == [("memory", GI, [node])]
    assert containers(fast) == {
        "log": ("", []),
        "app": (str(applied["app"].cpus), [("memory", 256 * MI, [node])]),
    }
    assert shared_pool(fast) == applied["log"].cpus, "the consumers' formula gives the pool log runs in"


def test_pool_only_pod_lists_sidecars_and_apps_but_not_init_containers(pod_scope: Placement) -> None:
    staged = by_name(snapshot_of(pod_scope))["staged"]

    assert [c.name for c in staged.containers] == ["log", "work"]
    assert containers(staged) == {"log": ("", []), "work": ("", [])}
    assert shared_pool(staged) == pod_scope.applied["staged-work"].cpus == CPUSet(staged.cpu_ids)
    assert len(staged.cpu_ids) == 3


def test_a_fractional_guaranteed_container_in_a_bubble_reports_its_memory_but_no_cpus() -> None:
    """The kubelet decides the two isolation levels apart (1.37 `GetResourceIsolationLevel` of each
    manager): memory is the container's own when it is Guaranteed-equivalent, CPUs only when the CPU request
    is also an integer. A 1500m Guaranteed container runs in the pod shared pool with its own memory."""
    placement = Placement(new_engine())
    half = pod("half", app("steady", guaranteed(1500, 128 * MI)), app("rest"),
               budget=guaranteed(2000, 512 * MI), uid="uid-half")
    start(placement, sandbox_of(half), "steady", "rest")
    listed = by_name(snapshot_of(placement))["half"]

    [node] = placement.engine.topology.numa_nodes_of(CPUSet(listed.cpu_ids))
    assert memory(listed.memory) == [("memory", 512 * MI, [node])]
    assert containers(listed) == {"steady": ("", [("memory", 128 * MI, [node])]), "rest": ("", [])}
    assert shared_pool(listed) == CPUSet(listed.cpu_ids)


def test_classic_guaranteed_pod_reports_its_container_cpus_only(pod_scope: Placement) -> None:
    solo = pod_scope.applied["classic-solo"]
    listed = by_name(snapshot_of(pod_scope))["classic"]

    assert (list(listed.cpu_ids), list(listed.memory)) == ([], [])
    [(cpu_ids, blocks)] = containers(listed).values()
    assert cpu_ids == str(solo.cpus) and len(solo.cpus) == 2
    assert blocks == [("memory", 128 * MI, list(solo.mems))]


def test_unmanaged_and_refused_pods_are_listed_without_cpus(pod_scope: Placement) -> None:
    listed = by_name(snapshot_of(pod_scope))

    assert containers(listed["web"]) == {"server": ("", []), "helper": ("", [])}
    assert (list(listed["web"].cpu_ids), list(listed["web"].memory)) == ([], [])
    refused = listed["no-room"]
    assert (list(refused.cpu_ids), list(refused.memory), list(refused.containers)) == ([], [], [])
    assert [(p.namespace, p.name) for p in list_response(snapshot_of(pod_scope)).pod_resources] == [
        ("default", name) for name in ("classic", "fast", "no-room", "staged", "web")
    ]


def test_no_cpu_is_reported_twice_across_pods(pod_scope: Placement) -> None:
    seen: list[int] = []
    for listed in list_response(snapshot_of(pod_scope)).pod_resources:
        seen += listed.cpu_ids or [cpu for c in listed.containers for cpu in c.cpu_ids]
    assert len(seen) == len(set(seen)) == 4 + 3 + 2


def test_container_scope_leaves_pod_level_fields_empty() -> None:
    placement = Placement(new_engine(scope=Scope.CONTAINER))
    start(placement, sandbox_of(fast_path()), "log", "app")
    app_cpus = placement.applied["fast-app"]

    fast = by_name(snapshot_of(placement))["fast"]

    assert (list(fast.cpu_ids), list(fast.memory)) == ([], [])
    assert containers(fast) == {
        "log": ("", []),
        "app": (str(app_cpus.cpus), [("memory", 256 * MI, list(app_cpus.mems))]),
    }


def test_allocatable_is_every_cpu_but_the_reserved_and_memory_per_node() -> None:
    engine = new_engine()
    answer = allocatable_response(NodeSnapshot(engine, Placement(engine).view()))

    assert cpus(answer.cpu_ids) == "1-7,9-15"
    total = {node.id: node.memory for node in engine.topology.numa_nodes}
    assert memory(answer.memory) == [("memory", total[0] - 100 * MI, [0]), ("memory", total[1], [1])]
    none = new_engine(cpu_policy="none", memory_policy="None")
    nothing = allocatable_response(NodeSnapshot(none, Placement(none).view()))
    assert nothing == pb.AllocatableResourcesResponse()


# -- the service on its socket ---------------------------------------------------------------------------


@pytest.fixture
def served(pod_scope: Placement, tmp_path: Path) -> Iterator[Served]:
    snapshot = snapshot_of(pod_scope)
    server = podresources_socket(tmp_path / "run" / "pod-resources.sock", lambda: snapshot)
    server.start()
    channel = grpc.insecure_channel(f"unix:{server.path}")
    try:
        yield server, pb_grpc.PodResourcesListerStub(channel)
    finally:
        channel.close()
        server.stop()


def test_the_socket_answers_list_get_and_allocatable(
    served: Served, pod_scope: Placement
) -> None:
    _, client = served
    listed = client.List(pb.ListPodResourcesRequest(), timeout=5)
    assert listed == list_response(snapshot_of(pod_scope))
    got = client.Get(pb.GetPodResourcesRequest(pod_name="fast", pod_namespace="default"), timeout=5)
    assert got.pod_resources == by_name(snapshot_of(pod_scope))["fast"]
    allocatable = client.GetAllocatableResources(pb.AllocatableResourcesRequest(), timeout=5)
    assert cpus(allocatable.cpu_ids) == "1-7,9-15"


def test_get_of_an_unknown_pod_answers_unknown_naming_it_as_the_kubelet_does(
    served: Served,
) -> None:
    _, client = served
    with pytest.raises(grpc.RpcError) as missing:
        client.Get(pb.GetPodResourcesRequest(pod_name="ghost", pod_namespace="kube-system"), timeout=5)
    assert missing.value.code() is grpc.StatusCode.UNKNOWN
    assert missing.value.details() == "pod ghost in namespace kube-system not found"


def test_socket_is_owner_only_and_gone_after_stop(
    served: Served,
) -> None:
    server, _ = served
    status = server.path.lstat()
    assert stat.S_ISSOCK(status.st_mode)
    assert (stat.S_IMODE(status.st_mode), status.st_uid) == (0o600, os.getuid())
    assert sorted(p.name for p in server.path.parent.iterdir()) == ["pod-resources.sock"], "no staging left"
    server.stop()
    assert not server.path.exists()


def other_group() -> grp.struct_group:
    """A group other than ours that we may chown to (any, as root)."""
    allowed = grp.getgrall() if os.getuid() == 0 else [grp.getgrgid(g) for g in os.getgroups()]
    for group in allowed:
        if group.gr_gid != os.getgid():
            return group
    pytest.skip("no second group to chown the socket to")


@pytest.mark.parametrize("by", ["name", "number"])
def test_group_socket_is_0660_and_owned_by_the_group(
    tmp_path: Path, pod_scope: Placement, by: str, caplog: pytest.LogCaptureFixture
) -> None:
    group = other_group()
    given = group.gr_name if by == "name" else str(group.gr_gid)
    tmp_path.chmod(0o700)
    server = podresources_socket(tmp_path / "pr.sock", lambda: snapshot_of(pod_scope), group=given)
    try:
        status = server.path.lstat()
        assert (stat.S_IMODE(status.st_mode), status.st_gid) == (0o660, group.gr_gid)
        assert f"its directory {tmp_path} (mode 700) does not let the group in" in caplog.text
    finally:
        server.stop()


def test_unknown_group_is_refused(tmp_path: Path, pod_scope: Placement) -> None:
    with pytest.raises(SocketError, match="no group named 'no-such-group-here'"):
        podresources_socket(tmp_path / "pr.sock", lambda: snapshot_of(pod_scope), group="no-such-group-here")


def test_the_socket_never_appears_at_its_path_before_it_is_private(tmp_path: Path) -> None:
    """What the server binds is in a directory only the owner may enter; at the path it is 0600 already."""
    path = tmp_path / "pr.sock"
    seen: list[tuple[int, bool]] = []
    listener = socket.socket(socket.AF_UNIX)

    def bind(address: str) -> None:
        staged = Path(address.removeprefix("unix:"))
        listener.bind(str(staged))
        listener.listen()
        seen.append((stat.S_IMODE(staged.parent.stat().st_mode), path.exists()))

    with listener:
        bind_private(path, bind, gid=None)
        assert seen == [(0o700, False)]
        assert stat.S_IMODE(path.lstat().st_mode) == 0o600
        assert os.listdir(tmp_path) == ["pr.sock"]


def test_a_stale_socket_is_replaced_and_other_files_refused(tmp_path: Path, pod_scope: Placement) -> None:
    path = tmp_path / "pr.sock"
    with socket.socket(socket.AF_UNIX) as stale:
        stale.bind(str(path))
    server = podresources_socket(path, lambda: snapshot_of(pod_scope))
    server.start()
    try:
        with grpc.insecure_channel(f"unix:{path}") as channel:
            client = pb_grpc.PodResourcesListerStub(channel)
            assert client.List(pb.ListPodResourcesRequest(), timeout=5).pod_resources
    finally:
        server.stop()
    path.write_text("not a socket")
    with pytest.raises(SocketError, match="exists and is not a socket; refusing to replace it"):
        podresources_socket(path, lambda: snapshot_of(pod_scope))
    assert path.read_text() == "not a socket"


def test_the_kubelets_socket_is_refused(pod_scope: Placement) -> None:
    with pytest.raises(SocketError, match="is the kubelet's own PodResources socket"):
        podresources_socket(KUBELET_SOCKET, lambda: snapshot_of(pod_scope))


def test_grpc_is_loaded_only_when_a_client_connects(tmp_path: Path) -> None:
    """A node nobody asks keeps gRPC out of the plugin's memory; the first client still gets its answer,
    relayed, and later clients reach gRPC itself."""
    script = f"""
import sys
from podlevel.report.podresources_socket import podresources_socket
from support.builders import new_engine
from podlevel.agent.placement import Placement
from podlevel.agent.snapshot import NodeSnapshot
engine = new_engine()
snapshot = NodeSnapshot(engine, Placement(engine).view())
server = podresources_socket(__import__("pathlib").Path({str(tmp_path / "pr.sock")!r}), lambda: snapshot)
server.start()
print("grpc" in sys.modules, flush=True)
sys.stdin.readline()
server.stop()
"""
    path = tmp_path / "pr.sock"
    with subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True, cwd=Path(__file__).parents[2]) as served:
        assert served.stdout is not None and served.stdin is not None
        assert served.stdout.readline() == "False\n"
        for _ in range(2):
            with grpc.insecure_channel(f"unix:{path}") as channel:
                client = pb_grpc.PodResourcesListerStub(channel)
                assert cpus(client.GetAllocatableResources(pb.AllocatableResourcesRequest(), timeout=5)
                            .cpu_ids) == "1-7,9-15"
        served.stdin.write("\n")
        served.stdin.flush()
        assert served.wait(timeout=10) == 0
    assert not path.exists()
