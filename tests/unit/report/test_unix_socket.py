"""report.unix_socket: a listening socket owner-only from its first moment, replaced only when it is one."""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from podlevel.report.unix_socket import SocketError, bind_private, remove_if_same


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    yield sock
    sock.close()


def bind(sock: socket.socket) -> Callable[[str], None]:
    def to(address: str) -> None:
        sock.bind(address.removeprefix("unix:"))
        sock.listen()
    return to


def test_the_socket_has_its_mode_at_its_path_and_nothing_is_left_beside_it(
        tmp_path: Path, listener: socket.socket) -> None:
    path = tmp_path / "run" / "pod-resources.sock"
    created = bind_private(path, bind(listener), gid=None)
    mode = path.lstat().st_mode
    assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600
    assert sorted(p.name for p in path.parent.iterdir()) == ["pod-resources.sock"], "no staging dir left"
    assert (created.st_dev, created.st_ino) == (path.lstat().st_dev, path.lstat().st_ino)


def test_a_group_gets_0660_and_that_group(tmp_path: Path, listener: socket.socket) -> None:
    path = tmp_path / "pod-resources.sock"
    gid = os.getgid()
    bind_private(path, bind(listener), gid=gid)
    assert (stat.S_IMODE(path.lstat().st_mode), path.lstat().st_gid) == (0o660, gid)


def test_a_stale_socket_is_replaced_and_anything_else_refused(tmp_path: Path,
                                                              listener: socket.socket) -> None:
    path = tmp_path / "pod-resources.sock"
    with socket.socket(socket.AF_UNIX) as stale:
        stale.bind(str(path))
    bind_private(path, bind(listener), gid=None)
    assert stat.S_ISSOCK(path.lstat().st_mode)

    other = tmp_path / "data.sock"
    other.write_text("not a socket")
    with socket.socket(socket.AF_UNIX) as second, pytest.raises(SocketError, match="is not a socket"):
        bind_private(other, bind(second), gid=None)
    assert other.read_text() == "not a socket"


def test_removal_takes_only_the_socket_it_made(tmp_path: Path, listener: socket.socket) -> None:
    path = tmp_path / "pod-resources.sock"
    created = bind_private(path, bind(listener), gid=None)
    path.unlink()
    with socket.socket(socket.AF_UNIX) as newer:
        newer.bind(str(path))  # a newer run's socket at the same path
        remove_if_same(path, created)
        assert path.exists(), "a newer run's socket stays"
    path.unlink()
    remove_if_same(path, created)  # already gone: nothing to do
