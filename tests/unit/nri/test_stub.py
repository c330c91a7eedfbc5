"""The NRI stub end to end over real unix sockets, against an in-test runtime written on the codec."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import re
import socket
import threading
from collections.abc import AsyncIterator, Coroutine, Sequence
from pathlib import Path
from typing import Any

import pytest

from podlevel.nri import (
    CreateResult,
    Handler,
    RuntimeInfo,
    Stub,
    StubObserver,
    UpdateFromHandlerError,
    UpdateResult,
    api,
)
from podlevel.nri.runtime import EVENTS_BEFORE_V0_10, EVENTS_FROM_V0_10, Event
from podlevel.ttrpc.codec import Code
from podlevel.ttrpc.mux import encode_frame
from podlevel.ttrpc.transport import RpcError
from support.nri_runtime_peer import FakeRuntime, RuntimeSide
from support.ttrpc_peer import TIMEOUT, wait_until

POD = api.PodSandbox(id="pod-1", name="web", uid="uid-1", namespace="default")
CTR = api.Container(id="ctr-1", pod_sandbox_id="pod-1", name="app")
FAST = {"backoff_initial": 0.01, "backoff_max": 0.05}


def run(coro: Coroutine[Any, Any, None]) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(20):
            await coro

    asyncio.run(bounded())


@contextlib.asynccontextmanager
async def serving(stub: Stub) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.ensure_future(stub.serve())
    try:
        yield task
    finally:
        stub.stop()
        async with asyncio.timeout(5):
            await task


@contextlib.asynccontextmanager
async def runtime_at(tmp_path: Path) -> AsyncIterator[tuple[FakeRuntime, str]]:
    runtime = FakeRuntime()
    path = str(tmp_path / "nri.sock")
    await runtime.listen(path)
    try:
        yield runtime, path
    finally:
        await runtime.close()


class Recorder(Handler):
    """Overrides every event and records each call as a tuple."""

    def __init__(self) -> None:
        self.calls: list[tuple[object, ...]] = []
        self.sync_updates: list[api.ContainerUpdate] = []

    def configure(self, runtime: RuntimeInfo, config: str) -> None:
        self.calls.append(("configure", runtime.name, runtime.version, config))

    def synchronize(self, pods: Sequence[api.PodSandbox], containers: Sequence[api.Container]) -> Any:
        self.calls.append(("synchronize", [p.id for p in pods], [c.id for c in containers]))
        return self.sync_updates

    def run_pod_sandbox(self, pod: api.PodSandbox) -> None:
        self.calls.append(("run_pod_sandbox", pod.id))

    def stop_pod_sandbox(self, pod: api.PodSandbox) -> None:
        self.calls.append(("stop_pod_sandbox", pod.id))

    def remove_pod_sandbox(self, pod: api.PodSandbox) -> None:
        self.calls.append(("remove_pod_sandbox", pod.id))

    def update_pod_sandbox(
        self, pod: api.PodSandbox, overhead: api.LinuxResources, resources: api.LinuxResources
    ) -> None:
        self.calls.append(("update_pod_sandbox", pod.id, overhead.cpu.cpus, resources.cpu.cpus))

    def post_update_pod_sandbox(self, pod: api.PodSandbox) -> None:
        self.calls.append(("post_update_pod_sandbox", pod.id))

    def create_container(self, pod: api.PodSandbox, container: api.Container) -> CreateResult:
        self.calls.append(("create_container", pod.id, container.id))
        adjust = api.ContainerAdjustment()
        adjust.linux.resources.cpu.cpus = "2-3"
        return CreateResult(
            adjust=adjust,
            updates=[api.ContainerUpdate(container_id="other")],
            evictions=[api.ContainerEviction(container_id="victim", reason="no room")],
        )

    def post_create_container(self, pod: api.PodSandbox, container: api.Container) -> None:
        self.calls.append(("post_create_container", pod.id, container.id))

    def start_container(self, pod: api.PodSandbox, container: api.Container) -> None:
        self.calls.append(("start_container", pod.id, container.id))

    def post_start_container(self, pod: api.PodSandbox, container: api.Container) -> None:
        self.calls.append(("post_start_container", pod.id, container.id))

    def update_container(
        self, pod: api.PodSandbox, container: api.Container, resources: api.LinuxResources
    ) -> UpdateResult:
        self.calls.append(("update_container", pod.id, container.id, resources.cpu.cpus))
        return UpdateResult(updates=[api.ContainerUpdate(container_id=container.id)])

    def post_update_container(self, pod: api.PodSandbox, container: api.Container) -> None:
        self.calls.append(("post_update_container", pod.id, container.id))

    def stop_container(self, pod: api.PodSandbox, container: api.Container) -> list[api.ContainerUpdate]:
        self.calls.append(("stop_container", pod.id, container.id))
        return [api.ContainerUpdate(container_id="grown")]

    def remove_container(self, pod: api.PodSandbox, container: api.Container) -> None:
        self.calls.append(("remove_container", pod.id, container.id))

    def validate_container_adjustment(self, request: api.ValidateContainerAdjustmentRequest) -> str | None:
        self.calls.append(("validate_container_adjustment", request.container.id))
        return "cpus taken" if request.adjust.linux.resources.cpu.cpus else None


class CreateOnly(Handler):
    async def create_container(self, pod: api.PodSandbox, container: api.Container) -> CreateResult:
        await asyncio.sleep(0)
        return CreateResult()


def stub_for(handler: Handler, path: str, **options: Any) -> Stub:
    return Stub(handler, "podlevel", "10", path, **{**FAST, **options})


def test_handshake_registers_configures_and_synchronizes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    handler = Recorder()
    handler.sync_updates = [api.ContainerUpdate(container_id="ctr-9")]

    async def main() -> None:
        async with runtime_at(tmp_path) as (runtime, path):
            stub = stub_for(handler, path)
            async with serving(stub):
                side = await runtime.accept()
                register = await side.expect("RegisterPlugin")
                assert api.RegisterPluginRequest.FromString(register.payload) == api.RegisterPluginRequest(
                    plugin_name="podlevel", plugin_idx="10"
                )
                assert register.timeout_nano == 30_000_000_000
                configured = await side.configure(
                    registration_timeout_ms=5000, request_timeout_ms=2000, config="x: 1"
                )
                assert configured.events == EVENTS_BEFORE_V0_10
                (synced,) = await side.synchronize([POD], [CTR])
                assert [u.container_id for u in synced.update] == ["ctr-9"]
                assert not synced.more
                await side.peer.reply(register, b"")
                assert await asyncio.to_thread(stub.wait_ready, 5)
                assert stub.runtime == RuntimeInfo("containerd", "2.1.9", "", 5.0, 2.0, EVENTS_BEFORE_V0_10)
                assert stub.synchronizations == 1

    with caplog.at_level(logging.INFO, logger="podlevel.nri"):
        run(main())
    assert handler.calls == [
        ("configure", "containerd", "2.1.9", "x: 1"),
        ("synchronize", ["pod-1"], ["ctr-1"]),
    ]
    text = caplog.text
    assert "registration timeout 5.000 s, request timeout 2.000 s" in text
    assert (
        "does not offer 0x3800 (UPDATE_POD_SANDBOX,POST_UPDATE_POD_SANDBOX,VALIDATE_CONTAINER_ADJUSTMENT)"
        in text
    )


@pytest.mark.parametrize(
    ("configure", "events"),
    [
        pytest.param({"runtime_version": "1.7.24"}, Event.CREATE_CONTAINER.bit, id="containerd-1.7"),
        pytest.param(
            {"runtime_name": "v2", "runtime_version": "2.0.5"},
            Event.CREATE_CONTAINER.bit,
            id="containerd-2.0",
        ),
        pytest.param({"runtime_version": "v2.2.0"}, 0x808, id="containerd-2.2"),
        pytest.param({"runtime_version": "2.3.1", "nri_version": "v0.12.2"}, 0x808, id="nri-0.12"),
    ],
)
def test_subscription_is_clipped_to_runtime_events(
    tmp_path: Path, configure: dict[str, str], events: int
) -> None:
    class CreateAndPodUpdate(Handler):
        def create_container(self, pod: api.PodSandbox, container: api.Container) -> None: ...

        def update_pod_sandbox(
            self, pod: api.PodSandbox, overhead: api.LinuxResources, resources: api.LinuxResources
        ) -> None: ...

    async def main() -> None:
        async with runtime_at(tmp_path) as (runtime, path), serving(stub_for(CreateAndPodUpdate(), path)):
            side = await runtime.accept()
            assert (await side.handshake(**configure)).events == events

    run(main())


def test_configure_fails_when_no_subscribed_event_is_offered(tmp_path: Path) -> None:
    class PodUpdateOnly(Handler):
        def update_pod_sandbox(
            self, pod: api.PodSandbox, overhead: api.LinuxResources, resources: api.LinuxResources
        ) -> None: ...

    async def main() -> None:
        async with runtime_at(tmp_path) as (runtime, path), serving(stub_for(PodUpdateOnly(), path)):
            side = await runtime.accept()
            await side.expect("RegisterPlugin")
            response = await side.call_raw(
                "Configure", api.ConfigureRequest(runtime_name="containerd", runtime_version="2.1.9")
            )
            assert response.code == Code.FAILED_PRECONDITION
            assert "none of which containerd 2.1.9 offers" in response.message

    run(main())


def test_split_synchronize_is_delivered_once(tmp_path: Path) -> None:
    handler = Recorder()
    handler.sync_updates = [api.ContainerUpdate(container_id="c0")]
    pods = [api.PodSandbox(id=f"p{i}") for i in range(5)]
    containers = [api.Container(id=f"c{i}") for i in range(7)]

    async def main() -> None:
        async with runtime_at(tmp_path) as (runtime, path), serving(stub_for(handler, path)):
            side = await runtime.accept()
            await side.expect("RegisterPlugin")
            await side.configure(nri_version="v0.12.2")
            replies = await side.synchronize(pods, containers, chunks=3)
            assert [(r.more, len(r.update)) for r in replies] == [(True, 0), (True, 0), (False, 1)]

    run(main())
    sync_calls = [c for c in handler.calls if c[0] == "synchronize"]
    assert len(sync_calls) == 1
    _, pod_ids, container_ids = sync_calls[0]
    assert sorted(pod_ids) == sorted(p.id for p in pods)  # type: ignore[call-overload]
    assert sorted(container_ids) == sorted(c.id for c in containers)  # type: ignore[call-overload]


NOTIFICATIONS = [
    ("RunPodSandbox", api.RunPodSandboxRequest(pod=POD), Event.RUN_POD_SANDBOX, ("run_pod_sandbox", "pod-1")),
    (
        "StopPodSandbox",
        api.StopPodSandboxRequest(pod=POD),
        Event.STOP_POD_SANDBOX,
        ("stop_pod_sandbox", "pod-1"),
    ),
    (
        "RemovePodSandbox",
        api.RemovePodSandboxRequest(pod=POD),
        Event.REMOVE_POD_SANDBOX,
        ("remove_pod_sandbox", "pod-1"),
    ),
    (
        "PostUpdatePodSandbox",
        api.PostUpdatePodSandboxRequest(pod=POD),
        Event.POST_UPDATE_POD_SANDBOX,
        ("post_update_pod_sandbox", "pod-1"),
    ),
    (
        "PostCreateContainer",
        api.PostCreateContainerRequest(pod=POD, container=CTR),
        Event.POST_CREATE_CONTAINER,
        ("post_create_container", "pod-1", "ctr-1"),
    ),
    (
        "StartContainer",
        api.StartContainerRequest(pod=POD, container=CTR),
        Event.START_CONTAINER,
        ("start_container", "pod-1", "ctr-1"),
    ),
    (
        "PostStartContainer",
        api.PostStartContainerRequest(pod=POD, container=CTR),
        Event.POST_START_CONTAINER,
        ("post_start_container", "pod-1", "ctr-1"),
    ),
    (
        "PostUpdateContainer",
        api.PostUpdateContainerRequest(pod=POD, container=CTR),
        Event.POST_UPDATE_CONTAINER,
        ("post_update_container", "pod-1", "ctr-1"),
    ),
    (
        "RemoveContainer",
        api.RemoveContainerRequest(pod=POD, container=CTR),
        Event.REMOVE_CONTAINER,
        ("remove_container", "pod-1", "ctr-1"),
    ),
]


def test_every_notification_arrives_by_dedicated_rpc_and_by_state_change(tmp_path: Path) -> None:
    handler = Recorder()

    async def main() -> None:
        async with runtime_at(tmp_path) as (runtime, path), serving(stub_for(handler, path)):
            side = await runtime.accept()
            assert (await side.handshake(nri_version="v0.12.2")).events == EVENTS_FROM_V0_10
            for method, request, event, expected in NOTIFICATIONS:
                handler.calls.clear()
                assert (await side.call_raw(method, request)).payload == b""
                pod = getattr(request, "pod", api.PodSandbox())
                container = getattr(request, "container", api.Container())
                state_change = api.StateChangeEvent(event=event.name, pod=pod, container=container)
                await side.call("StateChange", state_change, api.Empty)
                assert handler.calls == [expected, expected], method

    run(main())


def test_events_with_answers(tmp_path: Path) -> None:
    handler = Recorder()

    async def main() -> None:
        async with runtime_at(tmp_path) as (runtime, path), serving(stub_for(handler, path)):
            side = await runtime.accept()
            await side.handshake(nri_version="v0.12.2")

            created = await side.call(
                "CreateContainer",
                api.CreateContainerRequest(pod=POD, container=CTR),
                api.CreateContainerResponse,
            )
            assert created.adjust.linux.resources.cpu.cpus == "2-3"
            assert [u.container_id for u in created.update] == ["other"]
            assert [(e.container_id, e.reason) for e in created.evict] == [("victim", "no room")]

            resources = api.LinuxResources(cpu=api.LinuxCPU(cpus="0-7"))
            request = api.UpdateContainerRequest(pod=POD, container=CTR, linux_resources=resources)
            updated = await side.call("UpdateContainer", request, api.UpdateContainerResponse)
            assert [u.container_id for u in updated.update] == ["ctr-1"]

            stopped = await side.call(
                "StopContainer", api.StopContainerRequest(pod=POD, container=CTR), api.StopContainerResponse
            )
            assert [u.container_id for u in stopped.update] == ["grown"]

            pod_update = api.UpdatePodSandboxRequest(
                pod=POD,
                overhead_linux_resources=api.LinuxResources(cpu=api.LinuxCPU(cpus="0")),
                linux_resources=api.LinuxResources(cpu=api.LinuxCPU(cpus="1-2")),
            )
            await side.call("UpdatePodSandbox", pod_update, api.UpdatePodSandboxResponse)

            validate = api.ValidateContainerAdjustmentRequest(pod=POD, container=CTR, adjust=created.adjust)
            verdict = await side.call(
                "ValidateContainerAdjustment", validate, api.ValidateContainerAdjustmentResponse
            )
            assert (verdict.reject, verdict.reason) == (True, "cpus taken")
            accept = api.ValidateContainerAdjustmentRequest(pod=POD, container=CTR)
            verdict = await side.call(
                "ValidateContainerAdjustment", accept, api.ValidateContainerAdjustmentResponse
            )
            assert (verdict.reject, verdict.reason) == (False, "")

    run(main())
    assert handler.calls[2:] == [
        ("create_container", "pod-1", "ctr-1"),
        ("update_container", "pod-1", "ctr-1", "0-7"),
        ("stop_container", "pod-1", "ctr-1"),
        ("update_pod_sandbox", "pod-1", "0", "1-2"),
        ("validate_container_adjustment", "ctr-1"),
        ("validate_container_adjustment", "ctr-1"),
    ]


def test_defaults_unknown_methods_and_bad_payloads(tmp_path: Path) -> None:
    async def main() -> None:
        async with runtime_at(tmp_path) as (runtime, path), serving(stub_for(CreateOnly(), path)):
            side = await runtime.accept()
            assert (await side.handshake()).events == Event.CREATE_CONTAINER.bit
            created = await side.call(
                "CreateContainer",
                api.CreateContainerRequest(pod=POD, container=CTR),
                api.CreateContainerResponse,
            )
            assert created == api.CreateContainerResponse()
            # Events the handler does not override still get an answer.
            stopped = await side.call(
                "StopContainer", api.StopContainerRequest(pod=POD, container=CTR), api.StopContainerResponse
            )
            assert stopped == api.StopContainerResponse()
            await side.call("Shutdown", api.Empty(), api.Empty)

            unknown = await side.call_raw("SomeFutureEvent", api.Empty())
            assert unknown.code == Code.UNIMPLEMENTED
            bad = await side.peer.call("nri.pkg.api.v1alpha1.Plugin", "CreateContainer", b"\x0a\x05ab")
            assert bad.code == Code.INVALID_ARGUMENT
            assert "undecodable CreateContainerRequest" in bad.message
            bogus = await side.call_raw(
                "StateChange", api.StateChangeEvent(event=Event.CREATE_CONTAINER.name)
            )
            assert (bogus.code, bogus.message) == (
                Code.INVALID_ARGUMENT,
                "event CREATE_CONTAINER cannot arrive as a notification",
            )
            # The connection survives all of that.
            assert (await side.call_raw("CreateContainer", api.CreateContainerRequest())).code == Code.OK

    run(main())


def test_handler_errors_become_error_statuses(tmp_path: Path) -> None:
    class Failing(Handler):
        def create_container(self, pod: api.PodSandbox, container: api.Container) -> None:
            if container.name == "refused":
                raise RpcError(Code.FAILED_PRECONDITION, "TopologyAffinityError: no NUMA node fits")
            raise KeyError(container.name)

    async def main() -> None:
        async with runtime_at(tmp_path) as (runtime, path), serving(stub_for(Failing(), path)):
            side = await runtime.accept()
            await side.handshake()
            refused = await side.call_raw(
                "CreateContainer", api.CreateContainerRequest(container=api.Container(name="refused"))
            )
            assert (refused.code, refused.message) == (
                Code.FAILED_PRECONDITION,
                "TopologyAffinityError: no NUMA node fits",
            )
            crashed = await side.call_raw(
                "CreateContainer", api.CreateContainerRequest(container=api.Container(name="x"))
            )
            assert (crashed.code, crashed.message) == (
                Code.INTERNAL,
                "CreateContainer: internal error: KeyError: 'x'",
            )

    run(main())


def test_unencodable_answers_and_hostile_names_fail_only_their_event(tmp_path: Path) -> None:
    class Broken(Handler):
        def create_container(self, pod: api.PodSandbox, container: api.Container) -> CreateResult:
            if container.name == "bad-answer":
                return CreateResult(updates=["not an update"])  # type: ignore[list-item]
            if container.name == "hostile":
                raise RpcError(Code.INVALID_ARGUMENT, "container name 'a\ud800' is not UTF-8")
            return CreateResult()

    async def main() -> None:
        async with runtime_at(tmp_path) as (runtime, path), serving(stub_for(Broken(), path)):
            side = await runtime.accept()
            await side.handshake()

            async def create(name: str) -> Any:
                request = api.CreateContainerRequest(container=api.Container(name=name))
                return await side.call_raw("CreateContainer", request)

            bad = await create("bad-answer")
            assert bad.code == Code.INTERNAL
            assert bad.message.startswith("CreateContainer: the handler's answer cannot be encoded: ")
            hostile = await create("hostile")
            assert (hostile.code, hostile.message) == (
                Code.INVALID_ARGUMENT,
                "container name 'a\\ud800' is not UTF-8",
            )
            # The same connection serves the next event.
            assert (await create("good")).code == Code.OK
            assert runtime.accepted() == 1

    run(main())


def test_update_containers_outside_and_inside_handlers(tmp_path: Path) -> None:
    refusals: list[str] = []

    class Updating(Handler):
        stub: Stub

        async def create_container(self, pod: api.PodSandbox, container: api.Container) -> None:
            try:
                await self.stub.update_containers([api.ContainerUpdate(container_id="x")])
            except UpdateFromHandlerError as exc:
                refusals.append(str(exc))

        def start_container(self, pod: api.PodSandbox, container: api.Container) -> None:
            try:
                self.stub.update_containers_blocking([api.ContainerUpdate(container_id="x")])
            except UpdateFromHandlerError as exc:
                refusals.append(str(exc))

    handler = Updating()

    async def main() -> None:
        async with runtime_at(tmp_path) as (runtime, path):
            stub = stub_for(handler, path)
            handler.stub = stub
            with pytest.raises(RpcError, match="not connected"):
                await stub.update_containers([])
            async with serving(stub):
                side = await runtime.accept()
                await side.handshake()

                update = api.ContainerUpdate(container_id="c1", ignore_failure=False)
                call = asyncio.ensure_future(
                    stub.update_containers([update], [api.ContainerEviction(container_id="c2")])
                )
                request = await side.expect("UpdateContainers")
                sent = api.UpdateContainersRequest.FromString(request.payload)
                assert [u.container_id for u in sent.update] == ["c1"]
                assert [e.container_id for e in sent.evict] == ["c2"]
                await side.peer.reply(
                    request, api.UpdateContainersResponse(failed=[update]).SerializeToString()
                )
                assert [u.container_id for u in await call] == ["c1"]

                failing = asyncio.ensure_future(stub.update_containers([update]))
                request = await side.expect("UpdateContainers")
                await side.peer.reply(request, code=Code.UNKNOWN, message="runtime said no")
                with pytest.raises(RpcError, match="runtime said no"):
                    await failing

                await side.call(
                    "CreateContainer",
                    api.CreateContainerRequest(pod=POD, container=CTR),
                    api.CreateContainerResponse,
                )
                await side.call(
                    "StartContainer",
                    api.StartContainerRequest(pod=POD, container=CTR),
                    api.StartContainerResponse,
                )

    run(main())
    assert len(refusals) == 2
    assert "from inside the create_container handler" in refusals[0]
    assert "event loop thread" in refusals[1]


def test_slow_handler_is_logged_with_elapsed_time(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    class Slow(Handler):
        async def create_container(self, pod: api.PodSandbox, container: api.Container) -> None:
            await asyncio.sleep(0.06)

    async def main() -> None:
        async with runtime_at(tmp_path) as (runtime, path), serving(stub_for(Slow(), path)):
            side = await runtime.accept()
            await side.handshake(request_timeout_ms=100)
            await side.call("CreateContainer", api.CreateContainerRequest(), api.CreateContainerResponse)

    with caplog.at_level(logging.WARNING, logger="podlevel.nri"):
        run(main())
    (record,) = [r for r in caplog.records if "took" in r.getMessage()]
    assert re.search(r"handler create_container took \d+\.\d{3} s", record.getMessage())
    assert "over half the runtime's 0.100 s request timeout" in record.getMessage()


class FakeClock:
    """The stub's monotonic clock, moved only by the test."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def slow_handler_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "took" in r.getMessage()]


def test_handler_time_counts_the_wait_for_earlier_handlers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The runtime's request timeout runs from sending the request, so a request queued behind a slow
    handler is late by the time it waited as well."""
    clock = FakeClock()

    async def main() -> None:
        entered, release = asyncio.Event(), asyncio.Event()

        class Gated(Handler):
            async def create_container(self, pod: api.PodSandbox, container: api.Container) -> None:
                if container.name == "first":
                    entered.set()
                    await release.wait()

        async with runtime_at(tmp_path) as (runtime, path), serving(stub_for(Gated(), path, clock=clock)):
            side = await runtime.accept()
            await side.handshake(request_timeout_ms=2000)
            requests = [
                api.CreateContainerRequest(pod=POD, container=api.Container(name=name))
                for name in ("first", "second")
            ]
            calls = asyncio.ensure_future(side.call_together([("CreateContainer", r) for r in requests]))
            # Both arrived in one read: "second" reached the stub and waits for the handler lock.
            await entered.wait()
            clock.now += 1.5
            release.set()
            assert [response.code for response in await calls] == [Code.OK, Code.OK]

    with caplog.at_level(logging.WARNING, logger="podlevel.nri"):
        run(main())
    assert [w.split(": ", 1)[1] for w in slow_handler_warnings(caplog)] == 2 * [
        "handler create_container took 1.500 s (waiting for earlier handlers included), over half the "
        "runtime's 2.000 s request timeout"
    ]


def test_redials_after_runtime_goes_away(tmp_path: Path) -> None:
    handler = Recorder()

    async def main() -> None:
        async with runtime_at(tmp_path) as (runtime, path):
            stub = stub_for(handler, path)
            async with serving(stub):
                first = await runtime.accept()
                await first.handshake()
                first.close()
                second = await runtime.accept()
                await second.handshake(runtime_version="2.1.10")
                assert await asyncio.to_thread(stub.wait_ready, 5)
                assert stub.synchronizations == 2
                assert stub.runtime is not None and stub.runtime.version == "2.1.10"

    run(main())
    assert [c[0] for c in handler.calls] == ["configure", "synchronize", "configure", "synchronize"]


class SeenByObserver(StubObserver):
    def __init__(self) -> None:
        self.seen: list[str] = []
        self.handled: list[tuple[str, float]] = []

    def connected(self) -> None:
        self.seen.append("connected")

    def reconnecting(self) -> None:
        self.seen.append("reconnecting")

    def event_handled(self, method: str, seconds: float) -> None:
        self.handled.append((method, seconds))


def test_the_observer_hears_of_connections_redials_and_every_handler_time(tmp_path: Path) -> None:
    observer, handler = SeenByObserver(), Recorder()
    ticks = itertools.count()

    def clock() -> float:
        return next(ticks) * 0.125

    async def main() -> None:
        async with runtime_at(tmp_path) as (runtime, path):
            stub = stub_for(handler, path, observer=observer, clock=clock)
            async with serving(stub):
                first = await runtime.accept()
                await first.handshake()
                first.close()
                second = await runtime.accept()
                await second.handshake()
                assert await asyncio.to_thread(stub.wait_ready, 5)
                request = api.CreateContainerRequest(pod=POD, container=CTR)
                await second.call("CreateContainer", request, api.CreateContainerResponse)

    run(main())
    assert observer.seen == ["connected", "reconnecting", "connected"]
    assert [method for method, _ in observer.handled] == [
        "configure", "synchronize", "configure", "synchronize", "create_container"
    ]
    assert all(seconds > 0 for _, seconds in observer.handled), "timed from each request's arrival"


def test_redial_delays_double_to_the_cap_and_reset_after_a_synchronized_session(tmp_path: Path) -> None:
    """The default schedule, with a sleep that records each delay instead of sleeping."""
    delays: list[float] = []
    path = str(tmp_path / "nri.sock")
    runtime = FakeRuntime()

    async def main() -> None:
        async def sleep(delay: float) -> None:
            delays.append(delay)
            if len(delays) == 7:
                await runtime.listen(path)
            elif len(delays) == 10:
                stub.stop()
                await asyncio.Event().wait()

        stub = Stub(Recorder(), "podlevel", "10", path, sleep=sleep)
        try:
            async with serving(stub):
                synchronized = await runtime.accept()
                await synchronized.handshake()
                synchronized.close()
                for _ in range(2):
                    unsynchronized = await runtime.accept()
                    await unsynchronized.expect("RegisterPlugin")
                    unsynchronized.close()
                await wait_until(lambda: len(delays) == 10, TIMEOUT, "the redial after the last session")
        finally:
            await runtime.close()
        assert stub.synchronizations == 1

    run(main())
    # Seven failed dials: doubling from 0.5 s, capped at 5 s. A synchronized session resets the delay;
    # sessions that end before Synchronize do not.
    assert delays == [0.5, 1, 2, 4, 5, 5, 5, 0.5, 1, 2]


@pytest.mark.parametrize(
    ("garbage", "reason"),
    [
        pytest.param(
            b"\x00\x00\x00\x01\xff\xff\xff\xff", "declares a 4294967295-byte payload", id="oversized-frame"
        ),
        pytest.param(
            encode_frame(1, b"\x00\x00\x00\x00\x00\x00\x00\x01\x03\x00"), "message type 3", id="data-message"
        ),
        pytest.param(
            encode_frame(1, b"\x00\x00\x00\x02\x00\x00\x00\x63\x01\x00\x0a\x05"), "undecodable", id="envelope"
        ),
    ],
)
def test_bad_input_closes_logs_and_redials(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, garbage: bytes, reason: str
) -> None:
    async def main() -> None:
        async with runtime_at(tmp_path) as (runtime, path):
            stub = stub_for(Recorder(), path)
            async with serving(stub) as task:
                first = await runtime.accept()
                await first.handshake()
                await first.peer.send_raw(garbage)
                await first.peer.wait_eof()
                second = await runtime.accept()
                await second.handshake()
                assert stub.synchronizations == 2
                assert not task.done()

    with caplog.at_level(logging.WARNING):
        run(main())
    assert any("protocol error" in r.getMessage() and reason in r.getMessage() for r in caplog.records)


def test_failed_registration_redials(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        async with runtime_at(tmp_path) as (runtime, path), serving(stub_for(Recorder(), path)):
            first = await runtime.accept()
            register = await first.expect("RegisterPlugin")
            await first.peer.reply(
                register, code=Code.ALREADY_EXISTS, message="plugin 10-podlevel already registered"
            )
            await first.peer.wait_eof()
            await (await runtime.accept()).handshake()

    with caplog.at_level(logging.WARNING):
        run(main())
    assert "registration failed: ALREADY_EXISTS(6): plugin 10-podlevel already registered" in caplog.text


def test_no_runtime_yet_then_runtime_appears(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        path = str(tmp_path / "late.sock")
        stub = stub_for(Recorder(), path)
        async with serving(stub):
            await wait_until(
                lambda: caplog.text.count("cannot connect to the runtime") >= 2, TIMEOUT, "two failed dials"
            )
            runtime = FakeRuntime()
            await runtime.listen(path)
            try:
                await (await runtime.accept()).handshake()
                assert await asyncio.to_thread(stub.wait_ready, 5)
            finally:
                await runtime.close()

    with caplog.at_level(logging.WARNING, logger="podlevel.nri"):
        run(main())


def test_launched_plugin_uses_inherited_socket_and_exits_when_it_closes() -> None:
    async def main() -> None:
        plugin_end, runtime_end = socket.socketpair()
        environ = {"NRI_PLUGIN_SOCKET": str(plugin_end.fileno())}
        stub = Stub.from_environment(Recorder(), environ=environ, argv0="/opt/nri/plugins/05-podlevel")
        assert (stub.identity.name, stub.identity.index, stub.socket_fd) == (
            "podlevel",
            "05",
            plugin_end.fileno(),
        )
        plugin_end.detach()
        task = asyncio.ensure_future(stub.serve())
        side = await RuntimeSide.over(runtime_end)
        register = await side.expect("RegisterPlugin")
        assert api.RegisterPluginRequest.FromString(register.payload).plugin_idx == "05"
        await side.configure()
        await side.synchronize()
        await side.peer.reply(register, b"")
        side.close()
        async with asyncio.timeout(5):
            await task

    run(main())


def test_run_in_a_background_thread(tmp_path: Path) -> None:
    """The way integration tests drive the stub: run() in a thread, wait_ready(), stop()."""

    async def main() -> None:
        async with runtime_at(tmp_path) as (runtime, path):
            stub = stub_for(Recorder(), path)
            thread = threading.Thread(target=stub.run, daemon=True)
            thread.start()
            await (await runtime.accept()).handshake()
            assert await asyncio.to_thread(stub.wait_ready, 5)
            stub.stop()
            await asyncio.to_thread(thread.join, 5)
            assert not thread.is_alive()

    run(main())


def test_stop_while_no_runtime_listens(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        stub = Stub(
            Recorder(), "podlevel", "10", str(tmp_path / "nobody.sock"), backoff_initial=10, backoff_max=10
        )
        task = asyncio.ensure_future(stub.serve())
        await wait_until(lambda: "cannot connect to the runtime" in caplog.text, TIMEOUT, "a failed dial")
        stub.stop()
        async with asyncio.timeout(2):
            await task
        assert not stub.wait_ready(0)

    with caplog.at_level(logging.WARNING, logger="podlevel.nri"):
        run(main())


def test_stub_requires_at_least_one_event() -> None:
    with pytest.raises(ValueError, match="overrides no event method"):
        Stub(Handler(), "podlevel", "10")


def test_runtime_without_announced_timeouts(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """containerd 1.7 sends no timeouts; the stub says so and judges handler speed by the 2 s default."""
    clock = FakeClock()

    class Timed(Handler):
        def create_container(self, pod: api.PodSandbox, container: api.Container) -> None:
            clock.now += {"quick": 0.9, "slow": 1.1}[container.name]

    async def main() -> None:
        async with runtime_at(tmp_path) as (runtime, path):
            stub = stub_for(Timed(), path, clock=clock)
            async with serving(stub):
                side = await runtime.accept()
                await side.handshake(
                    runtime_version="1.7.24", registration_timeout_ms=0, request_timeout_ms=0
                )
                assert stub.runtime is not None
                assert (stub.runtime.registration_timeout, stub.runtime.request_timeout) == (0, 0)
                for name in ("quick", "slow"):
                    request = api.CreateContainerRequest(pod=POD, container=api.Container(name=name))
                    await side.call("CreateContainer", request, api.CreateContainerResponse)

    with caplog.at_level(logging.INFO, logger="podlevel.nri"):
        run(main())
    assert (
        "registration timeout none (runtime default), request timeout none (runtime default)" in caplog.text
    )
    (warning,) = slow_handler_warnings(caplog)
    assert "took 1.100 s" in warning
    assert "over half the runtime's 2.000 s request timeout" in warning


def test_a_synchronize_that_never_ends_is_cut_off_and_redialled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("podlevel.nri.session.MAX_SYNC_OBJECTS", 10)
    handler = Recorder()

    async def main() -> None:
        async with runtime_at(tmp_path) as (runtime, path), serving(stub_for(handler, path)):
            side = await runtime.accept()
            await side.expect("RegisterPlugin")
            await side.configure()
            endless = api.SynchronizeRequest(containers=[CTR] * 4, more=True)
            replies = [await side.call_raw("Synchronize", endless) for _ in range(3)]
            assert [r.code for r in replies] == [Code.OK, Code.OK, Code.RESOURCE_EXHAUSTED]
            assert "over 10 pods and containers" in replies[-1].message
            await side.peer.wait_eof()
            # The stub redials and synchronizes anew; nothing of the cut-off chunks reached the handler.
            again = await runtime.accept()
            await again.handshake()
            assert [c for c in handler.calls if c[0] == "synchronize"] == [("synchronize", [], [])]

    run(main())
