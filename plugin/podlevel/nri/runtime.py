"""NRI events, subscription masks, and what the runtime's Configure request tells about it.

The subscription bit of event `e` is `1 << (e - 1)`. A runtime accepts only bits of events its NRI release
knows (`(1 << (LAST - 1)) - 1`; LAST is 12 before NRI v0.10.0 and 15 from it) and drops a plugin that asks
for more, so the mask sent must be clipped to `RuntimeInfo.valid_events`. The runtime reports its NRI
release only from v0.12.0 (`NRI_version`); before that it is inferred from runtime name and version, and
anything unknown is treated as the older, smaller set — the cost is only that pod-update events are not
offered.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from podlevel._proto.nri import api_pb2 as api


class Event(enum.IntEnum):
    """NRI event numbers (api.proto `Event`)."""

    RUN_POD_SANDBOX = 1
    STOP_POD_SANDBOX = 2
    REMOVE_POD_SANDBOX = 3
    CREATE_CONTAINER = 4
    POST_CREATE_CONTAINER = 5
    START_CONTAINER = 6
    POST_START_CONTAINER = 7
    UPDATE_CONTAINER = 8
    POST_UPDATE_CONTAINER = 9
    STOP_CONTAINER = 10
    REMOVE_CONTAINER = 11
    UPDATE_POD_SANDBOX = 12
    POST_UPDATE_POD_SANDBOX = 13
    VALIDATE_CONTAINER_ADJUSTMENT = 14

    @property
    def bit(self) -> int:
        return 1 << (self.value - 1)


# Valid events of NRI < v0.10.0 (containerd <= 2.1, CRI-O <= 1.33): RUN_POD_SANDBOX .. REMOVE_CONTAINER.
EVENTS_BEFORE_V0_10: Final = 0x7FF
# Valid events of NRI >= v0.10.0: adds UPDATE_POD_SANDBOX, POST_UPDATE_POD_SANDBOX and
# VALIDATE_CONTAINER_ADJUSTMENT.
EVENTS_FROM_V0_10: Final = 0x3FFF

# First release of each runtime that ships NRI >= v0.10.0 (nri pkg/api/version.go runtime version map).
# containerd 2.0.x names itself "v2", so it never matches here — correctly, it ships NRI v0.8.0.
_FIRST_RELEASE_WITH_V0_10: Final = {"containerd": (2, 2), "cri-o": (1, 34)}

_VERSION = re.compile(r"v?(\d+)\.(\d+)")
_RELEASE = re.compile(r"v?(\d+)\.(\d+)\.(\d+)")

# The first release of each containerd line whose CRI RunPodSandbox shuts the sandbox down when an NRI
# plugin fails the event (containerd PR 13399, backported as 13644 and 13645); before, the pause container
# kept running and the kubelet retried with new sandboxes. Lines from 2.4 have it; older lines never will.
_SANDBOX_ROLLED_BACK_FROM: Final = {(2, 2): 6, (2, 3): 3}
_SANDBOX_ROLLED_BACK_LINES_FROM: Final = (2, 4)


def mask_of(events: Iterable[Event]) -> int:
    mask = 0
    for event in events:
        mask |= event.bit
    return mask


def events_in(mask: int) -> list[Event]:
    return [event for event in Event if mask & event.bit]


def describe_mask(mask: int) -> str:
    """`0x6af (RUN_POD_SANDBOX,STOP_POD_SANDBOX,...)` for logs and errors."""
    return f"{mask:#x} ({','.join(e.name for e in events_in(mask)) or 'none'})"


def _major_minor(version: str) -> tuple[int, int] | None:
    match = _VERSION.match(version.strip())
    return (int(match[1]), int(match[2])) if match else None


def valid_events(runtime_name: str, runtime_version: str, nri_version: str) -> int:
    """The subscription bits the runtime accepts, from what its Configure request says."""
    if nri_version:
        # Only NRI >= v0.12.0 sends its version, so an unparsable one is new, not old.
        parsed = _major_minor(nri_version)
        return EVENTS_BEFORE_V0_10 if parsed is not None and parsed < (0, 10) else EVENTS_FROM_V0_10
    first = _FIRST_RELEASE_WITH_V0_10.get(runtime_name)
    parsed = _major_minor(runtime_version)
    if first is not None and parsed is not None and parsed >= first:
        return EVENTS_FROM_V0_10
    return EVENTS_BEFORE_V0_10


def rolls_back_refused_sandbox(runtime_name: str, runtime_version: str) -> bool:
    """Whether a RunPodSandbox the plugin fails leaves no sandbox running (containerd 2.2.6, 2.3.3, 2.4 and
    later); False for anything else, including versions that cannot be read."""
    match = _RELEASE.match(runtime_version.strip())
    if runtime_name != "containerd" or match is None:
        return False
    line, patch = (int(match[1]), int(match[2])), int(match[3])
    if line >= _SANDBOX_ROLLED_BACK_LINES_FROM:
        return True
    first = _SANDBOX_ROLLED_BACK_FROM.get(line)
    return first is not None and patch >= first


def serves_unsolicited_updates(nri_version: str) -> bool:
    """Whether a plugin's own UpdateContainers call is safe while runtime events are in flight: NRI from
    v0.12.1 no longer holds its lock across the runtime's update (containerd issue 13733, NRI PR 301);
    before, the call could deadlock the runtime. Only releases that send their NRI version can have it."""
    match = _RELEASE.match(nri_version.strip())
    return match is not None and (int(match[1]), int(match[2]), int(match[3])) >= (0, 12, 1)


@dataclass(frozen=True, slots=True)
class RuntimeInfo:
    """The runtime as its Configure request describes it; timeouts in seconds (0 when not announced)."""

    name: str
    version: str
    nri_version: str
    registration_timeout: float
    request_timeout: float
    valid_events: int
    rolls_back_refused_sandbox: bool = False
    """A failed RunPodSandbox leaves nothing running, so a pod can be refused at its admission."""
    serves_unsolicited_updates: bool = False
    """The plugin may send UpdateContainers of its own at any time (`serves_unsolicited_updates`)."""

    @classmethod
    def from_configure(cls, request: api.ConfigureRequest) -> RuntimeInfo:
        return cls(
            name=request.runtime_name,
            version=request.runtime_version,
            nri_version=request.NRI_version,
            registration_timeout=request.registration_timeout / 1000,
            request_timeout=request.request_timeout / 1000,
            valid_events=valid_events(request.runtime_name, request.runtime_version, request.NRI_version),
            rolls_back_refused_sandbox=rolls_back_refused_sandbox(
                request.runtime_name, request.runtime_version),
            serves_unsolicited_updates=serves_unsolicited_updates(request.NRI_version),
        )
