"""Events, masks and the runtime's valid events by version."""

from __future__ import annotations

import pytest

from podlevel.nri import api
from podlevel.nri.runtime import (
    EVENTS_BEFORE_V0_10,
    EVENTS_FROM_V0_10,
    Event,
    RuntimeInfo,
    describe_mask,
    events_in,
    mask_of,
    rolls_back_refused_sandbox,
    serves_unsolicited_updates,
    valid_events,
)


def test_event_numbers_match_the_protocol() -> None:
    assert {e.name: e.value for e in Event} == {
        name: number for name, number in api.Event.items() if name != "UNKNOWN"
    }


def test_masks() -> None:
    assert Event.RUN_POD_SANDBOX.bit == 0x1
    assert Event.VALIDATE_CONTAINER_ADJUSTMENT.bit == 0x2000
    assert mask_of(Event) == EVENTS_FROM_V0_10
    assert mask_of(e for e in Event if e <= Event.REMOVE_CONTAINER) == EVENTS_BEFORE_V0_10
    resource_plugin = [
        Event.RUN_POD_SANDBOX,
        Event.STOP_POD_SANDBOX,
        Event.REMOVE_POD_SANDBOX,
        Event.CREATE_CONTAINER,
        Event.START_CONTAINER,
        Event.UPDATE_CONTAINER,
        Event.STOP_CONTAINER,
        Event.REMOVE_CONTAINER,
    ]
    assert mask_of(resource_plugin) == 0x6AF
    assert events_in(0x6AF) == resource_plugin
    assert describe_mask(0x9) == "0x9 (RUN_POD_SANDBOX,CREATE_CONTAINER)"
    assert describe_mask(0) == "0x0 (none)"


@pytest.mark.parametrize(
    ("name", "version", "nri_version", "expected"),
    [
        pytest.param("containerd", "1.7.24~ds1", "", EVENTS_BEFORE_V0_10, id="containerd-1.7-debian"),
        pytest.param("containerd", "2.1.9+unknown", "", EVENTS_BEFORE_V0_10, id="containerd-2.1"),
        pytest.param("v2", "2.0.5", "", EVENTS_BEFORE_V0_10, id="containerd-2.0-named-v2"),
        pytest.param("containerd", "v2.2.0", "", EVENTS_FROM_V0_10, id="containerd-2.2"),
        pytest.param("containerd", "2.3.4", "v0.12.0", EVENTS_FROM_V0_10, id="containerd-2.3"),
        pytest.param("containerd", "10.0.0", "", EVENTS_FROM_V0_10, id="containerd-future"),
        pytest.param("cri-o", "1.33.2", "", EVENTS_BEFORE_V0_10, id="crio-1.33"),
        pytest.param("cri-o", "1.34.0", "", EVENTS_FROM_V0_10, id="crio-1.34"),
        pytest.param("something", "9.9", "", EVENTS_BEFORE_V0_10, id="unknown-runtime"),
        pytest.param("containerd", "devel", "", EVENTS_BEFORE_V0_10, id="unparsable-version"),
        pytest.param("something", "1.0", "devel", EVENTS_FROM_V0_10, id="nri-version-sent-but-unparsable"),
        pytest.param("something", "1.0", "v0.9.0", EVENTS_BEFORE_V0_10, id="nri-version-old"),
    ],
)
def test_valid_events(name: str, version: str, nri_version: str, expected: int) -> None:
    assert valid_events(name, version, nri_version) == expected


def test_runtime_info_from_configure() -> None:
    request = api.ConfigureRequest(
        runtime_name="containerd",
        runtime_version="2.2.1",
        registration_timeout=5000,
        request_timeout=2500,
        NRI_version="",
    )
    assert RuntimeInfo.from_configure(request) == RuntimeInfo(
        "containerd", "2.2.1", "", 5.0, 2.5, EVENTS_FROM_V0_10
    )


@pytest.mark.parametrize(("name", "version", "rolls_back"), [
    ("containerd", "2.1.9+unknown", False),
    ("containerd", "v2.2.5", False),
    ("containerd", "v2.2.6", True),
    ("containerd", "2.3.2", False),
    ("containerd", "2.3.3+unknown", True),
    ("containerd", "v2.4.2", True),
    ("containerd", "2.5.0", True),
    ("containerd", "3.0.0", True),
    ("containerd", "1.7.30", False),
    ("containerd", "v2", False),
    ("cri-o", "1.35.0", False),
])
def test_a_refused_sandbox_is_rolled_back_from_containerd_2_2_6_2_3_3_and_2_4(
        name: str, version: str, rolls_back: bool) -> None:
    assert rolls_back_refused_sandbox(name, version) is rolls_back


@pytest.mark.parametrize(("nri_version", "serves"), [
    ("", False), ("v0.12.0", False), ("v0.12.1", True), ("0.12.3", True), ("v0.13.0", True),
    ("v1.0.0", True), ("v0.11.0", False), ("unknown", False),
])
def test_a_plugins_own_update_is_served_from_nri_0_12_1(nri_version: str, serves: bool) -> None:
    assert serves_unsolicited_updates(nri_version) is serves
