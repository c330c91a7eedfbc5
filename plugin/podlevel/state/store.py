"""The state directory: `cpu_manager_state` and `memory_manager_state`, written atomically, loaded safely.

Writing is all-or-nothing per file: the new bytes go to a temporary file in the same directory, which takes
the old file's name in one step (`_exchange`, else a rename over it), so a process killed at any moment
leaves either the old or the new file, never a torn one, and a failed write leaves the old file as it was.
Both files of one decision are written by one `StateDir.write` call: temporary files first, swaps last.
Making them survive a power loss (file data fsynced, then the directory) is `StateDir.sync`, which the
checkpoint writer runs off the event path; `atomic_write`, for one-off rewrites, does both at once.

Loading never raises for a bad file: a corrupt one (empty, truncated, not JSON, a bad checksum, an unknown
future layout, a directory or other non-file in its place) is moved aside as `<name>.corrupt-<UTC time>`
with one log line, and the caller gets no state and the reason, to rebuild from the runtime; an older layout
is rewritten in the newest one after it loaded. Only an unusable state directory raises (`StateDirError`).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import stat
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, Generic, TypeVar

from podlevel.eventlog import logger
from podlevel.state.formats import (
    NEWEST,
    NOT_A_FILE,
    Content,
    CorruptCheckpoint,
    CPUCheckpoint,
    Kind,
    LegacyCPUCheckpoint,
    MemoryCheckpoint,
    MigrationError,
    decode,
    encode,
    newest_encoder,
)

log = logger(__name__)

DEFAULT_STATE_DIR: Final = Path("/var/lib/nri-podlevel")
CPU_STATE_FILE: Final = "cpu_manager_state"
MEMORY_STATE_FILE: Final = "memory_manager_state"

Writer = Callable[[int, bytes], None]
"""Writes all of the bytes to a file descriptor; the seam tests use to fail a write."""

T = TypeVar("T", bound=Content)


class StateDirError(Exception):
    """The state directory cannot be used (a symlink, not a directory, not creatable)."""


@dataclass(frozen=True)
class Loaded(Generic[T]):
    """One file's outcome: the content, or None and why (`reason`), and what was done to the file."""

    content: T | None
    version: int | None = None
    reason: str | None = None
    moved_to: Path | None = None
    migrated: bool = False


@dataclass(frozen=True)
class LoadedState:
    cpu: Loaded[CPUCheckpoint]
    memory: Loaded[MemoryCheckpoint]


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def atomic_write(path: Path, data: bytes, writer: Writer = write_all) -> None:
    """Replace `path` with `data` atomically (see the module docstring)."""
    _commit([_stage(path, data, writer)], path.parent)


def _stage(path: Path, data: bytes, writer: Writer, *, durable: bool = True) -> tuple[Path, Path]:
    """`data` in a temporary file beside `path`, synced when `durable`; removed again if anything fails."""
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    temporary = Path(name)
    try:
        try:
            writer(fd, data)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return temporary, path


def _commit(staged: list[tuple[Path, Path]], directory: Path, *, durable: bool = True) -> None:
    try:
        for temporary, path in staged:
            if durable or not _exchange(temporary, path):
                os.replace(temporary, path)
    finally:
        for temporary, _ in staged:
            with contextlib.suppress(OSError):  # one left behind is removed when the directory is next opened
                temporary.unlink(missing_ok=True)
    if durable:
        _fsync(directory, os.O_DIRECTORY)


_RENAME_EXCHANGE: Final = 2
_AT_FDCWD: Final = -100


def _exchange(temporary: Path, path: Path) -> bool:
    """Swap `temporary` and `path` atomically (`renameat2` with RENAME_EXCHANGE); False where that was not
    done (no such file yet, a file system or libc without it), for the caller to rename over instead.

    A rename over an existing file makes ext4 allocate and start writing the new file's blocks first (its
    replace-via-rename heuristic, ~0.1 ms per file), which only guards against a power loss before the
    sync; an exchange does not, and `sync` gives that guarantee anyway. The old bytes end up under the
    temporary name, which the caller removes.
    """
    renameat2 = _renameat2()
    try:
        regular = stat.S_ISREG(os.lstat(path).st_mode)  # never swap a directory or a link into its place
    except OSError:
        return False
    return regular and renameat2 is not None and renameat2(
        _AT_FDCWD, os.fsencode(temporary), _AT_FDCWD, os.fsencode(path), _RENAME_EXCHANGE) == 0


@functools.cache
def _renameat2() -> Callable[..., int] | None:
    function: Callable[..., int] | None = getattr(ctypes.CDLL(None), "renameat2", None)
    return function


def _fsync(path: Path, flags: int = 0) -> None:
    fd = os.open(path, os.O_RDONLY | flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class StateDir:
    """The plugin's `--state-dir`: created 0700 when missing; a symlink or non-directory is refused, and an
    existing directory that group or others may write is narrowed to 0700 (whoever can replace a checkpoint
    decides which CPUs pods get after a restart). Checkpoints are 0600 from creation (`tempfile.mkstemp`)."""

    def __init__(
        self,
        path: Path = DEFAULT_STATE_DIR,
        *,
        writer: Writer = write_all,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.path = path
        self._writer = writer
        self._now = now
        self._newest = newest_encoder()
        self._written: dict[Path, bytes] = {}
        """What the last successful `write` left in each file: an unchanged file is not written again."""
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            try:
                path.mkdir(mode=0o700, parents=True)
            except OSError as err:
                raise StateDirError(f"state dir {path}: cannot create it: {err.strerror}") from None
            return
        except OSError as err:
            raise StateDirError(f"state dir {path}: {err.strerror}") from None
        if stat.S_ISLNK(mode):
            raise StateDirError(f"state dir {path} is a symlink; refusing to follow it")
        if not stat.S_ISDIR(mode):
            raise StateDirError(f"state dir {path} is not a directory")
        if mode & (stat.S_IWGRP | stat.S_IWOTH):
            try:
                os.chmod(path, 0o700)
            except OSError as err:
                raise StateDirError(f"state dir {path}: writable by others (mode {stat.S_IMODE(mode):o}) "
                                    f"and cannot be narrowed: {err.strerror}") from None
            log.warning("state dir {state_dir} was writable by others (mode {mode:o}); narrowed to 700",
                        state_dir=path, mode=stat.S_IMODE(mode))
        self._remove_leftovers()

    def _remove_leftovers(self) -> None:
        """Temporary files a process killed in mid-write left (the new bytes before the swap, the old after),
        which nothing else would ever remove."""
        for name in (CPU_STATE_FILE, MEMORY_STATE_FILE):
            for leftover in self.path.glob(f".{name}.*.tmp"):
                with contextlib.suppress(OSError):
                    leftover.unlink()
                    log.info("removed {leftover}, left by a write that did not finish", leftover=leftover)

    @property
    def cpu_file(self) -> Path:
        return self.path / CPU_STATE_FILE

    @property
    def memory_file(self) -> Path:
        return self.path / MEMORY_STATE_FILE

    def write(self, cpu: CPUCheckpoint | None, memory: MemoryCheckpoint | None) -> bool:
        """Write the given checkpoints in the newest layouts, both in one step (a policy that is off
        passes None); a file whose bytes this directory last wrote are the same is left alone. Whether any
        file was replaced. Raises OSError when a write fails; the files on disk are then the old ones.

        The files are replaced without waiting for the disk (`sync` does that): a process killed afterwards
        still finds them (they are in the page cache); only a power loss before `sync` can leave the old,
        an empty or a torn file, which loading moves aside."""
        encoded = {
            path: encode(content, newest=self._newest)
            for path, content in ((self.cpu_file, cpu), (self.memory_file, memory))
            if content is not None
        }
        changed = {path: data for path, data in encoded.items() if self._written.get(path) != data}
        if not changed:
            return False
        staged: list[tuple[Path, Path]] = []
        try:
            for path, data in changed.items():
                staged.append(_stage(path, data, self._writer, durable=False))
        except BaseException:
            for temporary, _ in staged:
                temporary.unlink(missing_ok=True)
            raise
        self._written = {}  # unknown until the renames are done
        _commit(staged, self.path, durable=False)
        self._written = encoded
        return True

    def sync(self) -> None:
        """Make the last `write` durable: both files' data, then the directory that names them."""
        for path in (self.cpu_file, self.memory_file):
            if path in self._written:
                _fsync(path)
        _fsync(self.path, os.O_DIRECTORY)

    def load(self, containers: Mapping[str, tuple[str, str]] | None = None) -> LoadedState:
        """Both checkpoints. `containers` (container ID -> (pod UID, container name)) migrates a V1 CPU file
        keyed by container ID; without it such a file is left in place and not used."""
        return LoadedState(
            _narrow(self._load(self.cpu_file, "cpu", containers), CPUCheckpoint),
            _narrow(self._load(self.memory_file, "memory", containers), MemoryCheckpoint),
        )

    def _load(
        self, path: Path, kind: Kind, containers: Mapping[str, tuple[str, str]] | None
    ) -> Loaded[Content]:
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            return Loaded(None, reason="no checkpoint file")
        except OSError as err:
            return Loaded(None, reason=f"cannot read {path}: {err.strerror}")
        try:
            if not stat.S_ISREG(mode):
                raise CorruptCheckpoint(NOT_A_FILE, f"{path} is a {_file_type(mode)}")
            decoded = decode(path.read_bytes(), kind)
        except CorruptCheckpoint as err:
            return self._move_aside(path, err)
        except OSError as err:
            return Loaded(None, reason=f"cannot read {path}: {err.strerror}")
        content: Content = decoded.content
        if isinstance(content, LegacyCPUCheckpoint):
            try:
                if containers is None:
                    raise MigrationError(
                        "V1 entries are keyed by container ID and no container list was given"
                    )
                content = content.migrate(containers)
            except MigrationError as err:
                log.warning("{file}: not used: {reason}", file=path, reason=err)
                return Loaded(None, version=1, reason=str(err))
        migrated = False
        if decoded.version != NEWEST[kind]:
            try:
                atomic_write(path, encode(content), self._writer)
                migrated = True
                log.info("{file}: migrated from V{old} to V{new}", file=path, old=decoded.version,
                         new=NEWEST[kind])
            except OSError as err:
                log.error("{file}: loaded V{old} but could not rewrite it as V{new}: {error}", file=path,
                          old=decoded.version, new=NEWEST[kind], error=err)
        return Loaded(content, version=decoded.version, migrated=migrated)

    def set_aside(self, why: str) -> list[Path]:
        """Rename both checkpoint files to `<name>.<why>-<UTC time>`, a name no restart loads (a node the
        plugin leaves); returns where they went. Raises OSError when a rename fails."""
        moved = []
        for path in (self.cpu_file, self.memory_file):
            if os.path.lexists(path):
                target = self._aside(path, why)
                os.rename(path, target)
                moved.append(target)
        return moved

    def _aside(self, path: Path, why: str) -> Path:
        """A name beside `path` for it set aside, `<name>.<why>-<UTC time>[-n]`, that nothing has yet."""
        stamp = self._now().astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
        target = path.with_name(f"{path.name}.{why}-{stamp}")
        n = 0
        while os.path.lexists(target):
            n += 1
            target = path.with_name(f"{path.name}.{why}-{stamp}-{n}")
        return target

    def _move_aside(self, path: Path, err: CorruptCheckpoint) -> Loaded[Content]:
        target = self._aside(path, "corrupt")
        try:
            os.rename(path, target)
        except OSError as move_error:
            log.error("{file} is corrupt ({reason}) and could not be moved aside ({error}); rebuilding state "
                      "from the runtime", file=path, reason=err, error=move_error.strerror)
            return Loaded(None, reason=str(err))
        log.warning("{file} is corrupt ({reason}); moved aside to {moved_to}, rebuilding state from the "
                    "runtime", file=path, reason=err, moved_to=target.name)
        return Loaded(None, reason=str(err), moved_to=target)


def _narrow(loaded: Loaded[Content], cls: type[T]) -> Loaded[T]:
    assert loaded.content is None or isinstance(loaded.content, cls)
    return loaded  # type: ignore[return-value]


def _file_type(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "special file"
