"""The subscription mask follows from which handler methods a subclass overrides."""

from __future__ import annotations

from podlevel.nri import CreateResult, Handler, api, subscribed_events
from podlevel.nri.handler import EVENT_METHODS
from podlevel.nri.runtime import EVENTS_FROM_V0_10, Event


class Base(Handler):
    def run_pod_sandbox(self, pod: api.PodSandbox) -> None: ...


class Derived(Base):
    async def create_container(self, pod: api.PodSandbox, container: api.Container) -> CreateResult:
        return CreateResult()

    def configure(self, runtime: object, config: str) -> None: ...


def test_base_handler_subscribes_to_nothing() -> None:
    assert subscribed_events(Handler()) == 0


def test_overrides_are_found_through_inheritance_sync_or_async() -> None:
    assert subscribed_events(Base()) == Event.RUN_POD_SANDBOX.bit
    assert subscribed_events(Derived()) == Event.RUN_POD_SANDBOX.bit | Event.CREATE_CONTAINER.bit


def test_configure_and_synchronize_are_not_events() -> None:
    class SyncOnly(Handler):
        def synchronize(self, pods: object, containers: object) -> None: ...

    assert subscribed_events(SyncOnly()) == 0


def test_every_event_has_a_method() -> None:
    assert set(EVENT_METHODS) == set(Event)
    assert all(hasattr(Handler, method.__name__) for method in EVENT_METHODS.values())

    everything = type(
        "Everything", (Handler,), {m.__name__: (lambda self, *a: None) for m in EVENT_METHODS.values()}
    )
    assert subscribed_events(everything()) == EVENTS_FROM_V0_10
