"""A gRPC service on a unix socket that loads gRPC only when its first client connects.

Most nodes never ask for PodResources, and gRPC would be a third of the plugin's memory and a good part of its
start-up. So the socket is first a plain listener, bound privately (`unix_socket.bind_private`) so that a bad
path fails at start-up. The first connection loads gRPC and starts its server, bound the same private way and
renamed over the listener, so later clients reach gRPC directly; the connections the listener took before
are relayed to it, byte for byte, for as long as they last. (The kubelet keeps its listener, `server.go`,
apart from its answers, `server_v1.go`, likewise.)
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Final

from podlevel.eventlog import logger
from podlevel.report.unix_socket import SocketError, bind_private, remove_if_same

if TYPE_CHECKING:
    import grpc

log = logger(__name__)

STOP_GRACE_S: Final = 1.0
RELAY_CHUNK: Final = 1 << 16


class LazyGrpcSocket:
    """`make_server()` (a gRPC server with its services, no port yet) served on the unix socket `path`,
    mode 0600 (0660 and group `gid` when given), listening from construction and answering from `start()`
    until `stop()`; a path that cannot be served raises SocketError. `what` names the service."""

    def __init__(self, path: Path, make_server: Callable[[], grpc.Server], *, gid: int | None,
                 what: str) -> None:
        self.path = path
        self._make_server = make_server
        self._gid, self._what = gid, what
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._created = bind_private(self.path, self._listen, gid=gid)
        except BaseException:
            self._listener.close()
            raise
        self._lock = threading.Lock()
        self._stopped = False
        self._server: grpc.Server | None = None
        self._relayed: list[socket.socket] = []
        self._waiting: threading.Thread | None = None

    def _listen(self, address: str) -> None:
        try:
            self._listener.bind(address.removeprefix("unix:"))
            self._listener.listen()
        except OSError as err:
            raise SocketError("path", f"cannot listen on {self.path}: {err.strerror}") from None

    def start(self) -> None:
        self._waiting = threading.Thread(target=self._first_client, name="grpc-listener", daemon=True)
        self._waiting.start()
        log.info("serving {what} on unix:{socket_path}", what=self._what, socket_path=self.path)

    def _first_client(self) -> None:
        try:
            first, _ = self._listener.accept()
        except OSError:  # stop() shut the listener down
            return
        with self._lock:
            if self._stopped:
                first.close()
                return
            try:
                self._start_grpc()
            except Exception as err:  # whatever stops gRPC, the waiting clients get their socket closed
                log.error("cannot serve {what} on unix:{socket_path}: {error}", what=self._what,
                          socket_path=self.path, error=err)
                first.close()
                self._listener.close()
                return
            # After the rename: whoever connects from now on reaches gRPC, the backlog is complete.
            taken = [first, *self._pending()]
            self._listener.close()
            for connection in taken:
                self._relay(connection)

    def _pending(self) -> list[socket.socket]:
        """The connections already waiting in the listener's backlog."""
        self._listener.setblocking(False)
        taken = []
        with contextlib.suppress(OSError):
            while True:
                taken.append(self._listener.accept()[0])
        return taken

    def _start_grpc(self) -> None:
        server = self._make_server()

        def bind(address: str) -> None:
            try:
                server.add_insecure_port(address)
            except RuntimeError as err:
                raise SocketError("path", f"cannot listen on {self.path}: {err}") from None

        self._created = bind_private(self.path, bind, gid=self._gid)
        server.start()
        self._server = server
        log.info("{what}: gRPC started for the first client", what=self._what)

    def _relay(self, client: socket.socket) -> None:
        """Carry one connection the listener took to the gRPC server, each way on its own thread."""
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(str(self.path))
        except OSError as err:
            log.warning("{what}: cannot relay a connection to unix:{socket_path}: {error}", what=self._what,
                        socket_path=self.path, error=err)
            upstream.close()
            client.close()
            return
        self._relayed += [client, upstream]
        to_server = threading.Thread(target=_copy, args=(client, upstream), daemon=True)
        to_server.start()
        threading.Thread(target=self._copy_back, args=(upstream, client, to_server), daemon=True).start()

    def _copy_back(self, upstream: socket.socket, client: socket.socket, to_server: threading.Thread) -> None:
        _copy(upstream, client)
        to_server.join()
        with self._lock:
            for end in (client, upstream):
                self._relayed.remove(end)
                end.close()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            server = self._server
            for end in [self._listener, *self._relayed]:
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)
        if self._waiting is not None:
            self._waiting.join()
        self._listener.close()
        if server is not None:
            server.stop(STOP_GRACE_S).wait()
        remove_if_same(self.path, self._created)


def _copy(source: socket.socket, sink: socket.socket) -> None:
    """Bytes from `source` to `sink` until `source` ends (or either fails), then end `sink`'s direction."""
    with contextlib.suppress(OSError):
        while data := source.recv(RELAY_CHUNK):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)
