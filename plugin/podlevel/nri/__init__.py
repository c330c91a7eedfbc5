"""NRI plugin stub: write a `Handler`, run it with `Stub`. Messages are the generated `api` module.

`RpcError` and `Code` (a handler raises `RpcError(Code.X, message)` to fail an event with that status) are
the wire layer's own types, offered here so that a plugin needs nothing below this package.
"""

from podlevel._proto.nri import api_pb2 as api
from podlevel.nri.handler import (
    MAX_REPLY_BYTES,
    CreateResult,
    Handler,
    UpdateBatch,
    UpdateResult,
    Updates,
    field_size,
    subscribed_events,
    updates_within,
)
from podlevel.nri.identity import InvalidIdentity, PluginIdentity
from podlevel.nri.runtime import Event, RuntimeInfo
from podlevel.nri.stub import DEFAULT_SOCKET_PATH, Stub, StubObserver, UpdateFromHandlerError
from podlevel.ttrpc.codec import Code
from podlevel.ttrpc.transport import RpcError

__all__ = [
    "DEFAULT_SOCKET_PATH",
    "MAX_REPLY_BYTES",
    "Code",
    "CreateResult",
    "Event",
    "Handler",
    "InvalidIdentity",
    "PluginIdentity",
    "RpcError",
    "RuntimeInfo",
    "Stub",
    "StubObserver",
    "UpdateBatch",
    "UpdateFromHandlerError",
    "UpdateResult",
    "Updates",
    "api",
    "field_size",
    "subscribed_events",
    "updates_within",
]
