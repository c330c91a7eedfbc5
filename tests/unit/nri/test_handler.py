"""The subscription mask follows from which handler methods a subclass overrides."""

from __future__ import annotations

import inspect

from podlevel.nri import CreateResult, Handler, api, subscribed_events
from podlevel.nri.handler import EVENT_ROUTES
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
    assert set(EVENT_ROUTES) == set(Event)
    methods = [route.method for route in EVENT_ROUTES.values()]
    assert all(getattr(Handler, method.__name__) is method for method in methods)

    everything = type("Everything", (Handler,), {m.__name__: (lambda self, *a: None) for m in methods})
    assert subscribed_events(everything()) == EVENTS_FROM_V0_10


def test_every_route_names_a_plugin_rpc_with_its_request_type() -> None:
    plugin = api.DESCRIPTOR.services_by_name["Plugin"]
    for event, route in EVENT_ROUTES.items():
        rpc = plugin.methods_by_name.get(route.rpc)
        assert rpc is not None, (event, route.rpc)
        assert rpc.input_type is route.request.DESCRIPTOR, (event, route.rpc)


ANSWERED = {
    Event.CREATE_CONTAINER,
    Event.UPDATE_CONTAINER,
    Event.STOP_CONTAINER,
    Event.UPDATE_POD_SANDBOX,
    Event.VALIDATE_CONTAINER_ADJUSTMENT,
}


def test_notification_methods_take_what_the_request_carries() -> None:
    """The stub calls a notification's method with (pod, container) or (pod), as the request type says."""
    for event in set(Event) - ANSWERED:
        route = EVENT_ROUTES[event]
        expected = ["self", "pod", "container"] if route.about_container else ["self", "pod"]
        assert list(inspect.signature(route.method).parameters) == expected, event


def test_only_notifications_may_arrive_as_state_change() -> None:
    """A StateChangeEvent carries pod and container and is answered empty; the other events need their RPC."""
    assert {event for event, route in EVENT_ROUTES.items() if not route.is_notification} == ANSWERED


def test_every_route_unpacks_as_many_arguments_as_its_method_takes() -> None:
    for event, route in EVENT_ROUTES.items():
        taken = len(inspect.signature(route.method).parameters) - 1
        assert len(route.arguments(route.request())) == taken, event
