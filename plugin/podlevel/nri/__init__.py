"""NRI plugin stub: write a `Handler`, run it with `Stub`. Messages are the generated `api` module."""

from podlevel._proto.nri import api_pb2 as api
from podlevel.nri.handler import CreateResult, Handler, UpdateResult, subscribed_events
from podlevel.nri.identity import InvalidIdentity, PluginIdentity
from podlevel.nri.runtime import Event, RuntimeInfo
from podlevel.nri.stub import DEFAULT_SOCKET_PATH, Stub, UpdateFromHandlerError

__all__ = [
    "DEFAULT_SOCKET_PATH",
    "CreateResult",
    "Event",
    "Handler",
    "InvalidIdentity",
    "PluginIdentity",
    "RuntimeInfo",
    "Stub",
    "UpdateFromHandlerError",
    "UpdateResult",
    "api",
    "subscribed_events",
]
