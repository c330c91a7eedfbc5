"""A listening unix socket that nobody but its owner (and one chosen group) can ever reach.

A server library binds and listens in one call, with the mode the process umask gives (0755 under the usual
022), so a socket bound at its final path is open to every local user for a moment. Here the server binds
inside a fresh directory of mode 0700 next to the final path, where no one else can reach it; the socket is
then given its mode (0600, or 0660 and the group) and renamed onto the final path, fully set up. A socket
left by an earlier run is replaced by that rename; any other file there is refused.
"""

from __future__ import annotations

import grp
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Final, Literal

from podlevel.eventlog import logger

log = logger(__name__)

class SocketError(Exception):
    """A socket that cannot be made as asked. `about` says which setting is at fault, `path` (where) or
    `group` (who may connect), for the caller to name it as the user gave it."""

    def __init__(self, about: Literal["path", "group"], message: str) -> None:
        super().__init__(message)
        self.about = about


OWNER_ONLY: Final = 0o600
OWNER_AND_GROUP: Final = 0o660


def group_id(group: str) -> int:
    """A group given by name or number; raises SocketError naming it when the system has no such group."""
    if group.isascii() and group.isdigit():
        return int(group)
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        raise SocketError("group", f"no group named {group!r}") from None


def check_replaceable(path: Path) -> None:
    """Refuse a path that holds something other than a socket (which a run before this one left)."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise SocketError("path", f"{path} exists and is not a socket; refusing to replace it")


def bind_private(path: Path, bind: Callable[[str], None], *, gid: int | None) -> os.stat_result:
    """Have `bind(address)` bind and listen on `unix:<hidden path>`, then put the socket at `path` with mode
    0600 (0660 and group `gid` when given). Returns the socket's stat, to recognise it at removal."""
    check_replaceable(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Short names: the staged path must stay within the 107 bytes a socket address holds.
    hidden = Path(tempfile.mkdtemp(prefix=".sock-", dir=path.parent))
    try:
        staged = hidden / "s"
        bind(f"unix:{staged}")
        if gid is not None:
            os.chown(staged, -1, gid)
        os.chmod(staged, OWNER_ONLY if gid is None else OWNER_AND_GROUP)
        os.rename(staged, path)
    finally:
        for leftover in hidden.iterdir():
            leftover.unlink()
        hidden.rmdir()
    return path.lstat()


def remove_if_same(path: Path, created: os.stat_result) -> None:
    """Unlink the socket at `path` if it is still the one created (a newer run may have replaced it)."""
    try:
        now = path.lstat()
    except FileNotFoundError:
        return
    if (now.st_dev, now.st_ino) == (created.st_dev, created.st_ino):
        path.unlink()


def warn_if_unreachable(path: Path, gid: int) -> None:
    """The group needs to search the socket's directory too; say so when it cannot."""
    directory = path.parent.stat()
    group_may = directory.st_gid == gid and directory.st_mode & stat.S_IXGRP
    if not (group_may or directory.st_mode & stat.S_IXOTH):
        log.warning("{socket_path} is open to group {gid}, but its directory {directory} (mode {mode:o}) "
                    "does not let the group in", socket_path=path, gid=gid, directory=path.parent,
                    mode=stat.S_IMODE(directory.st_mode))
