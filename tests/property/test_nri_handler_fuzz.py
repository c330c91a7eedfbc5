"""The NRI handler fuzzed: random runtime events, valid and hostile, through the real transport, Session and
PodLevelPlugin over a socketpair, with the engine's invariants checked after every event.

The runtime here is a model of containerd: it remembers the pods and containers it runs and the CPU
settings the plugin last answered for each (the adjustment at creation, then every update riding on an
answer), and synchronizes from exactly that. Hostile events carry shape annotations with names no API
server would accept (lone surrogates as JSON escapes, control characters), quantities off the grammar,
runtime resources that contradict the shape, ids the plugin never saw, and payloads with bytes flipped.

After each event: the connection is up; an error answer has a code naming the fault (never Unknown or
Internal) and a printable, bounded message; no CPU has two exclusive owners and nothing leaked; every
container the plugin tracks holds, as far as the runtime was told, what the plugin recorded as applied;
and after an answered event, what it recorded equals its decision (no update left behind).
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError, Message
from hypothesis import given
from hypothesis import strategies as st

from podlevel.agent.placement import Placement
from podlevel.agent.plugin import PodLevelPlugin
from podlevel.engine.cpuset import CPUSet
from podlevel.engine.pod import Pod
from podlevel.nri import Code, api, subscribed_events
from podlevel.nri.identity import PluginIdentity
from podlevel.nri.session import PLUGIN_SERVICE, Session
from podlevel.podspec.manifest import SHAPE_ANNOTATION, to_annotation
from podlevel.podspec.runtime import container_resources, sandbox_resources
from podlevel.ttrpc.codec import Response, Role
from podlevel.ttrpc.transport import MAX_STATUS_MESSAGE, Transport
from support.builders import MI, app, burstable, guaranteed, new_engine, pod, sidecar
from support.engine_invariants import check_invariants
from support.fuzzing import fuzz_settings
from support.ttrpc_peer import Peer

# Codes that name what was wrong with an event; Unknown or Internal would mean the plugin failed itself.
EXPECTED_ERRORS = {
    Code.INVALID_ARGUMENT, Code.FAILED_PRECONDITION, Code.RESOURCE_EXHAUSTED, Code.UNIMPLEMENTED
}
ANSWERED = {"CreateContainer", "UpdateContainer", "StopContainer", "Synchronize"}
REPLIES: dict[str, type[Message]] = {
    "CreateContainer": api.CreateContainerResponse,
    "UpdateContainer": api.UpdateContainerResponse,
    "StopContainer": api.StopContainerResponse,
    "Synchronize": api.SynchronizeResponse,
}
REQUESTS: dict[str, type[Message]] = {
    "RunPodSandbox": api.RunPodSandboxRequest,
    "StopPodSandbox": api.StopPodSandboxRequest,
    "RemovePodSandbox": api.RemovePodSandboxRequest,
    "CreateContainer": api.CreateContainerRequest,
    "UpdateContainer": api.UpdateContainerRequest,
    "StopContainer": api.StopContainerRequest,
    "RemoveContainer": api.RemoveContainerRequest,
    "Synchronize": api.SynchronizeRequest,
    "StateChange": api.StateChangeEvent,
}

# Text a pod may put in its annotation: any code point, lone surrogates included (JSON escapes them).
hostile_text = st.text(st.characters(codec=None, exclude_categories=()), max_size=40)
# Text the runtime itself may send (protobuf strings are UTF-8, so no lone surrogates), long names included.
runtime_text = st.one_of(
    st.text(max_size=20), st.text(st.sampled_from("ab\x00\x1b\n"), min_size=200, max_size=400)
)
quantities = st.one_of(
    st.sampled_from(["1", "500m", "1.5", "0", "-1", "1Ki", "1Gi", "256Mi", "NaN", "1e3", "1e400", "", "x"]),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    hostile_text,
)


@st.composite
def shapes(draw: st.DrawFn, index: int) -> Pod:
    """A bubble with an exclusive slice and a pod-shared sidecar, a classic Guaranteed or Burstable pod."""
    kind = draw(st.sampled_from(["bubble", "classic", "burstable"]))
    name, uid = f"p{index}", f"uid-{index}"
    if kind == "bubble":
        budget = draw(st.integers(2, 6))
        exclusive = draw(st.integers(1, budget))
        return pod(
            name,
            sidecar("log"),
            app("app", guaranteed(exclusive * 1000, 256 * MI)),
            budget=guaranteed(budget * 1000, 512 * MI),
            uid=uid,
        )
    if kind == "classic":
        return pod(name, app("app", guaranteed(draw(st.integers(1, 4)) * 1000, 256 * MI)), uid=uid)
    return pod(name, app("app", burstable(draw(st.integers(100, 3000)), 64 * MI)), uid=uid)


def _hostile(annotation: str, draw: st.DrawFn) -> str:
    """`annotation` spoilt one way: a hostile name or quantity in the JSON, a cut, or any text at all."""
    document = json.loads(annotation)
    how = draw(st.sampled_from(["name", "quantity", "cut", "text", "nesting"]))
    if how == "name":
        containers = document["containers"]
        containers[draw(st.integers(0, len(containers) - 1))]["name"] = draw(hostile_text)
    elif how == "quantity":
        resources = document.setdefault("resources", {})
        side = resources.setdefault(draw(st.sampled_from(["requests", "limits"])), {})
        side[draw(st.sampled_from(["cpu", "memory", "hugepages-2Mi"]))] = draw(quantities)
    elif how == "cut":
        return annotation[: draw(st.integers(0, len(annotation)))]
    elif how == "text":
        return json.dumps(draw(hostile_text))[1:-1]
    else:
        return "[" * draw(st.integers(1, 600)) + "]" * draw(st.integers(0, 600))
    return json.dumps(document)


def _resources(draw: st.DrawFn, consistent: tuple[int, int, int]) -> api.LinuxResources:
    """Linux resources as the kubelet sends them (`consistent`: shares, quota, memory), or anything."""
    shares, quota, memory = consistent if draw(st.booleans()) else (
        draw(st.integers(0, 2**18)), draw(st.integers(-1, 2**40)), draw(st.integers(-1, 2**60)),
    )
    resources = api.LinuxResources()
    resources.cpu.shares.value = shares
    resources.cpu.quota.value = quota
    resources.cpu.period.value = 100_000
    resources.memory.limit.value = memory
    return resources


@dataclass
class Runtime:
    """What the modelled runtime runs, and what the plugin told it each container should hold."""

    pods: dict[str, api.PodSandbox] = field(default_factory=dict)
    shapes: dict[str, Pod | None] = field(default_factory=dict)
    containers: dict[str, api.Container] = field(default_factory=dict)
    told: dict[str, api.LinuxCPU] = field(default_factory=dict)
    created: int = 0

    def tell(self, container_id: str, cpu: api.LinuxCPU) -> None:
        told = self.told.setdefault(container_id, api.LinuxCPU())
        told.cpus, told.mems = cpu.cpus, cpu.mems
        if cpu.HasField("quota"):
            told.quota.CopyFrom(cpu.quota)
            told.period.CopyFrom(cpu.period)

    def running(self) -> list[api.Container]:
        """The containers as a Synchronize lists them: each holding what it was last told."""
        listed = []
        for container in self.containers.values():
            shown = api.Container()
            shown.CopyFrom(container)
            if container.id in self.told:
                shown.linux.resources.cpu.CopyFrom(self.told[container.id])
            listed.append(shown)
        return listed


@st.composite
def events(draw: st.DrawFn, runtime: Runtime) -> tuple[str, bytes]:
    """The next event the runtime sends: (method, payload)."""
    kind = draw(st.sampled_from(
        ["run", "run", "create", "create", "create", "update", "stop", "remove", "stop-pod", "remove-pod",
         "sync", "mutated"]
    ))
    pod_ids = sorted(runtime.pods)
    container_ids = sorted(runtime.containers)
    if kind == "run" or (kind == "create" and not pod_ids):
        index = len(runtime.shapes)
        shape = draw(st.none() | shapes(index))
        sandbox = api.PodSandbox(id=f"sb-{index}", uid=f"uid-{index}", namespace="default")
        sandbox.name = draw(st.just(f"p{index}") | runtime_text)
        if shape is not None:
            annotation = to_annotation(shape)
            spoilt = draw(st.booleans())
            sandbox.annotations[SHAPE_ANNOTATION] = _hostile(annotation, draw) if spoilt else annotation
            budget = sandbox_resources(shape, 100_000)
            sandbox.linux.pod_resources.CopyFrom(
                _resources(draw, (budget.cpu_shares, budget.cpu_quota, budget.memory_limit))
            )
        runtime.pods[sandbox.id], runtime.shapes[sandbox.id] = sandbox, shape
        return "RunPodSandbox", api.RunPodSandboxRequest(pod=sandbox).SerializeToString()
    if kind == "create":
        sandbox = runtime.pods[draw(st.sampled_from(pod_ids))]
        shape = runtime.shapes[sandbox.id]
        names = [c.name for c in shape.all_containers] if shape is not None else ["server"]
        name = draw(st.sampled_from(names) | runtime_text)
        runtime.created += 1
        container = api.Container(
            id=f"c{runtime.created}", pod_sandbox_id=sandbox.id, name=name, state=api.CONTAINER_RUNNING
        )
        spec = shape.container(name) if shape is not None else None
        sent = container_resources(shape, spec, 100_000) if shape is not None and spec is not None else None
        consistent = (sent.cpu_shares, sent.cpu_quota, sent.memory_limit) if sent is not None else (2, 0, 0)
        container.linux.resources.CopyFrom(_resources(draw, consistent))
        runtime.containers[container.id] = container
        request = api.CreateContainerRequest(pod=sandbox, container=container)
        return "CreateContainer", request.SerializeToString()
    if kind in ("update", "stop", "remove") and container_ids:
        container = runtime.containers[draw(st.sampled_from(container_ids))]
        sandbox = runtime.pods.get(container.pod_sandbox_id, api.PodSandbox(id=container.pod_sandbox_id))
        if kind == "update":
            resources = _resources(draw, (1024, 100_000, 256 * MI))
            message: Message = api.UpdateContainerRequest(
                pod=sandbox, container=container, linux_resources=resources
            )
            return "UpdateContainer", message.SerializeToString()
        if kind == "stop":
            container.state = api.CONTAINER_STOPPED
            message = api.StopContainerRequest(pod=sandbox, container=container)
            return "StopContainer", message.SerializeToString()
        del runtime.containers[container.id]
        message = api.RemoveContainerRequest(pod=sandbox, container=container)
        return "RemoveContainer", message.SerializeToString()
    if kind in ("stop-pod", "remove-pod") and pod_ids:
        sandbox = runtime.pods[draw(st.sampled_from(pod_ids))]
        for container in [c for c in runtime.containers.values() if c.pod_sandbox_id == sandbox.id]:
            container.state = api.CONTAINER_STOPPED
            if kind == "remove-pod":
                del runtime.containers[container.id]
        if kind == "stop-pod":
            return "StopPodSandbox", api.StopPodSandboxRequest(pod=sandbox).SerializeToString()
        del runtime.pods[sandbox.id]
        return "RemovePodSandbox", api.RemovePodSandboxRequest(pod=sandbox).SerializeToString()
    if kind == "mutated":
        method = draw(st.sampled_from([*REQUESTS, "NoSuchMethod"]))
        payload = bytearray(draw(st.binary(max_size=64)))
        if method in REQUESTS and draw(st.booleans()):
            valid = api.CreateContainerRequest(pod=api.PodSandbox(id="sb-x"), container=api.Container(id="x"))
            payload = bytearray(valid.SerializeToString())
            for _ in range(draw(st.integers(1, 3))):
                if payload:
                    payload[draw(st.integers(0, len(payload) - 1))] = draw(st.integers(0, 255))
        return method, bytes(payload)
    return "Synchronize", b""  # filled in by the caller: it must list what runs when it is sent


def _decoded(method: str, payload: bytes) -> Message | None:
    try:
        return REQUESTS[method].FromString(payload) if method in REQUESTS else None
    except DecodeError:
        return None


def learn(runtime: Runtime, method: str, payload: bytes, response: Response) -> None:
    """What the runtime does with an answer: applies the adjustment and every update it carries."""
    if response.code != Code.OK or method not in REPLIES:
        return
    reply = REPLIES[method].FromString(response.payload)
    if isinstance(reply, api.CreateContainerResponse):
        request = _decoded(method, payload)
        assert isinstance(request, api.CreateContainerRequest)
        runtime.tell(request.container.id, reply.adjust.linux.resources.cpu)
    for update in reply.update:  # type: ignore[attr-defined]
        runtime.tell(update.container_id, update.linux.resources.cpu)


def check(plugin: PodLevelPlugin, runtime: Runtime, method: str, response: Response, answered: bool) -> None:
    assert response.code == Code.OK or response.code in EXPECTED_ERRORS, (response.code, response.message)
    assert response.message.isprintable() and len(response.message) <= MAX_STATUS_MESSAGE
    placement = plugin.placement
    check_invariants(placement.engine, placement.state)
    for container_id in placement.container_ids():
        applied = placement.applied.get(container_id)
        told = runtime.told.get(container_id)
        if applied is not None and told is not None:
            assert (told.cpus, told.mems) == (str(applied.cpus), str(CPUSet(applied.mems))), container_id
            if applied.cpu_quota_us is not None:
                assert told.quota.value == applied.cpu_quota_us, container_id
        if answered:
            assert applied == placement.desired(container_id), f"{method} left {container_id} behind"


async def drive(data: st.DataObject) -> int:
    plugin = PodLevelPlugin(Placement(new_engine()))
    session = Session(
        plugin, PluginIdentity("podlevel", "10"), subscribed_events(plugin), lock=asyncio.Lock(),
        clock=time.monotonic, on_synchronized=lambda: None, on_handled=lambda method, seconds: None,
    )
    ours, theirs = socket.socketpair()
    transport = await Transport.from_socket(ours, session.rpc_handlers(), name="fuzz")
    peer = await Peer.over(theirs, role=Role.RUNTIME)
    runtime = Runtime()
    steps = data.draw(st.integers(1, 30), label="steps")
    try:
        for _ in range(steps):
            method, payload = data.draw(events(runtime), label="event")
            if method == "Synchronize" and not payload:
                payload = api.SynchronizeRequest(
                    pods=list(runtime.pods.values()), containers=runtime.running()
                ).SerializeToString()
            async with asyncio.timeout(10):
                response = await peer.call(PLUGIN_SERVICE, method, payload)
            assert not transport.closed, transport.close_reason
            learn(runtime, method, payload, response)
            check(plugin, runtime, method, response, method in ANSWERED and response.code == Code.OK)
    finally:
        transport.close("done")
        peer.close()
    return steps


@fuzz_settings(40)
@given(st.data())
def test_random_and_hostile_events_keep_the_connection_and_the_invariants(data: st.DataObject) -> None:
    asyncio.run(drive(data))
