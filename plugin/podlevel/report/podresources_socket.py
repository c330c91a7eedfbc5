"""The PodResources v1 service on its unix socket: the socket made at start-up (so a bad path fails then),
gRPC and the servicer (`podresources_grpc`) loaded when the first client connects (`lazy_grpc`). The
answers themselves are `podresources`, which knows nothing of this transport."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Final

from podlevel.agent.snapshot import NodeSnapshot
from podlevel.report import DEFAULT_PODRESOURCES_SOCKET
from podlevel.report.lazy_grpc import LazyGrpcSocket
from podlevel.report.unix_socket import SocketError, group_id, warn_if_unreachable

if TYPE_CHECKING:
    import grpc

KUBELET_SOCKET: Final = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
"""The kubelet's own socket: never taken over, consumers must be able to ask either."""


def podresources_socket(path: Path, snapshot: Callable[[], NodeSnapshot], *,
                        group: str = "") -> LazyGrpcSocket:
    """The service on a unix socket at `path`, mode 0600 (0660 for `group`, a name or a number), listening
    now (so a bad path fails at start-up), gRPC loaded at the first client (`lazy_grpc`)."""
    path = Path(os.path.abspath(path))
    if os.path.realpath(path) == os.path.realpath(KUBELET_SOCKET):
        raise SocketError("path", f"{path} is the kubelet's own PodResources socket; the plugin "
                         f"needs a path of its own (default {DEFAULT_PODRESOURCES_SOCKET})")
    gid = group_id(group) if group else None

    def make_server() -> grpc.Server:
        from podlevel.report.podresources_grpc import grpc_server

        return grpc_server(snapshot)

    served = LazyGrpcSocket(path, make_server, gid=gid, what="PodResources v1")
    if gid is not None:
        warn_if_unreachable(path, gid)
    return served
