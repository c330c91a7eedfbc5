"""Checkpoint writes on a thread of their own, so that an event's answer waits neither for the file system
nor for the disk.

The rule the plugin keeps is that a decision is recorded before any answer applies it, so a plugin killed at
any moment restarts from a state at least as new as what the runtime enforces. A submission carries the
journal record of what it changed (`journal`): it is appended on the caller's thread, and from then on the
decision is recorded (the page cache survives the process), so `wait` returns at once. The whole state is
written later (within `FOLD_WITHIN_S`, encoding and temporary files swapped in on this thread), and once
the files hold it the journal's records up to it are dropped (`StateDir.rotate`, `drop_journal`). Until
the files hold a state that every later submission's record builds on (the first write after the start),
and when an append fails, a submission is not recorded until it is written: `wait` then waits for the
write, as the answers that apply decisions (CreateContainer, UpdateContainer, StopContainer, Synchronize)
call it. The written files are synced to the disk (file data, then the directory) on another thread once
writes pause for `SYNC_AFTER_QUIET_SECONDS`: what a power loss could undo matters to no one, since every
container is gone after it too (a stale checkpoint is reconciled by the first Synchronize, a torn one moved
aside).

Every submission is the whole node state, so only the newest one waiting needs writing: a write that falls
behind skips the states already replaced, and leaves the sync to the newest write. A failed append, write
or sync (an OSError, or any other error, which must not stop the threads `wait` depends on) is reported to
`on_failure` from the thread that met it, and the next submission tries again; `wait` returns either way (a
plugin that fails containers because its disk is full turns a degraded node into a broken one). A failed
write keeps the journal it would have dropped. Success is reported after a sync, unless the newest write
failed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Final

from podlevel.eventlog import logger
from podlevel.state.formats import CPUCheckpoint, MemoryCheckpoint
from podlevel.state.store import StateDir, journal_files

log = logger(__name__)

Contents = tuple[CPUCheckpoint | None, MemoryCheckpoint | None]
SYNC_AFTER_QUIET_SECONDS: Final = 0.5
"""How long writes must pause before the written files are synced to the disk."""
FOLD_WITHIN_S: Final = 0.5
"""A recorded submission is written into the files by then at the latest: under a burst of events one write
serves many decisions, and readers of the files (the kubelet after a removal, `show` without the plugin)
find them at most this old, or replay the journal."""


class CheckpointWriter:
    """Writes the newest submitted checkpoints to `state` in the background, and syncs what it wrote on a
    second thread (a sync takes milliseconds, and the next admission's write must not queue behind it);
    `close` writes and syncs what is left."""

    def __init__(
        self,
        state: StateDir,
        on_failure: Callable[[Exception], None],
        on_success: Callable[[], None] = lambda: None,
        *,
        quiet: float = SYNC_AFTER_QUIET_SECONDS,
    ) -> None:
        self.state = state
        self._quiet = quiet
        self._on_failure = on_failure
        self._on_success = on_success
        self._changed = threading.Condition()
        self._pending: Contents | None = None
        self._due = 0.0
        """When the pending contents are to be written at the latest (monotonic seconds)."""
        self._submitted = 0
        self._attempted = 0
        self._unsynced = 0
        """Writes that succeeded since the last sync began."""
        self._last_write = 0.0
        self._failed = False
        """The last write failed."""
        self._closed = False
        self._recorded = 0
        """The last submission whose record is in the journal."""
        self._based = False
        """The files hold the newest submission once: every later recorded submission builds on them."""
        existing = journal_files(state.path)
        self._rotated: int | None = existing[-1][0] if existing else None
        """The newest journal generation ended for a write (or left from before the start, when the start
        could not fold it); dropped once a write succeeds."""
        self._threads = [
            threading.Thread(target=self._write_loop, name="checkpoint-writer", daemon=True),
            threading.Thread(target=self._sync_loop, name="checkpoint-sync", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def submit(
        self, cpu: CPUCheckpoint | None, memory: MemoryCheckpoint | None, *, within: float = 0.0,
        record: Callable[[], bytes] | None = None,
    ) -> None:
        """Write these contents, replacing any submitted before that are not written yet: at once, or, with
        `within` seconds, by then at the latest (a newer submission or a `wait` writes them sooner). A
        release is written so: the admission that usually follows it writes both in one go. `record` makes
        the journal record of what changed since the previous submission: once the files hold a state to build
        on, it is made and appended, and the submission is recorded at once (written within `FOLD_WITHIN_S`);
        before that it is never made."""
        with self._changed:
            if self._closed:
                raise RuntimeError("checkpoint writer closed")
            recorded = False
            if record is not None and self._based:
                try:
                    self.state.append(record())
                except Exception as err:
                    _report(self._on_failure, err)
                else:
                    recorded, within = True, max(within, FOLD_WITHIN_S)
            due = time.monotonic() + within
            self._due = due if self._pending is None else min(self._due, due)
            self._pending = (cpu, memory)
            self._submitted += 1
            if recorded:
                self._recorded = self._submitted
            self._changed.notify_all()

    def wait(self) -> None:
        """Return once everything submitted so far is recorded: in the journal, or written (or its write
        failed)."""
        with self._changed:
            wanted = self._submitted
            if self._attempted >= wanted or self._recorded >= wanted:
                return  # the common answer: nothing to wait for, and no thread to wake
            self._due = 0.0
            self._changed.notify_all()
            self._changed.wait_for(lambda: self._attempted >= wanted)

    def close(self) -> None:
        """Write and sync what is pending, then stop the threads."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        for thread in self._threads:
            thread.join()

    @property
    def _finished(self) -> bool:
        return self._closed and self._attempted >= self._submitted

    def _write_loop(self) -> None:
        while True:
            with self._changed:
                while not self._closed and (self._pending is None or self._due > time.monotonic()):
                    self._changed.wait(None if self._pending is None else self._due - time.monotonic())
                if self._pending is None:
                    self._attempted = self._submitted
                    self._changed.notify_all()  # the sync loop ends once nothing is left to write
                    return
                contents, self._pending = self._pending, None
                generation = self._submitted
                ended = self.state.rotate()
                if ended is not None:
                    self._rotated = ended
                rotated = self._rotated
            try:
                replaced = self.state.write(*contents)
                if rotated is not None:
                    self.state.drop_journal(rotated)
            except Exception as err:
                _report(self._on_failure, err)
                replaced, failed = False, True
            else:
                failed = False
            with self._changed:
                if not failed and generation == self._submitted:
                    self._based = True
                self._attempted = generation
                self._unsynced += replaced
                self._failed = failed
                self._last_write = time.monotonic()
                self._changed.notify_all()

    def _sync_loop(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._unsynced or self._finished)
                if not self._unsynced:
                    return
                # Wait for a quiet moment: a sync holds the file system's journal, which the next write's
                # rename waits for, and a burst of events (a node starting, a rollout) writes many times.
                while not self._finished:
                    busy = self._attempted < self._submitted
                    left = self._last_write + self._quiet - time.monotonic()
                    if not busy and left <= 0:
                        break
                    self._changed.wait(self._quiet if busy else left)
                self._unsynced = 0
            try:
                self.state.sync()
            except Exception as err:
                _report(self._on_failure, err)
            else:
                if not self._failed:  # a sync of older files says nothing of a newer write that failed
                    _report(self._on_success)


def _report(callback: Callable[..., None], *args: Exception) -> None:
    """Call an outcome callback; an error in it is logged, never allowed to stop a thread `wait` needs."""
    try:
        callback(*args)
    except Exception:
        log.exception("checkpoint writer: reporting the outcome of a write failed")
