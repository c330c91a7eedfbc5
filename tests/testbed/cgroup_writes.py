"""Counting writes to cgroup files while a node runs, with inotify: two owners fighting over one file (the
kubelet and the plugin writing different values in turn) show as writes in a window where nothing changed.

A write to a cgroup file goes through the VFS like any other, so it raises IN_MODIFY on a watch of the file;
reads do not. The kernel merges an event with an identical one still unread, so writes in quick succession
may count once: a count is a lower bound, and zero means no write. Linux only (ctypes over libc's inotify).
"""

from __future__ import annotations

import ctypes
import os
import select
import struct
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Final

IN_MODIFY: Final = 0x2
IN_NONBLOCK: Final = 0o4000
IN_CLOEXEC: Final = 0o2000000
_EVENT: Final = struct.Struct("iIII")

_libc = ctypes.CDLL(None, use_errno=True)


def count_writes(files: Mapping[str, Path], seconds: float,
                 during: Callable[[], object] | None = None) -> Counter[str]:
    """Writes to each of `files` (label -> path) during the next `seconds`, `during` called once the
    watches are in place; a file that cannot be watched (gone) counts nothing."""
    fd = _libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "inotify_init1")
    labels: dict[int, str] = {}
    try:
        for label, path in files.items():
            watch = _libc.inotify_add_watch(fd, os.fsencode(path), IN_MODIFY)
            if watch >= 0:
                labels[watch] = label
        if during is not None:
            during()
        counted: Counter[str] = Counter()
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                counted.update(_labels_of(os.read(fd, 65536), labels))
        return counted
    finally:
        os.close(fd)


def _labels_of(data: bytes, labels: Mapping[int, str]) -> Iterable[str]:
    offset = 0
    while offset + _EVENT.size <= len(data):
        watch, mask, _, name_length = _EVENT.unpack_from(data, offset)
        offset += _EVENT.size + name_length
        if mask & IN_MODIFY and watch in labels:
            yield labels[watch]
