"""The state directory: `cpu_manager_state` and `memory_manager_state`, written atomically, loaded safely.

Writing is all-or-nothing per file: the new bytes go to a temporary file in the same directory, which takes
the old file's name in one step (`_exchange`, else a rename over it), so a process killed at any moment
leaves either the old or the new file, never a torn one, and a failed write leaves the old file as it was.
Both files of one decision are written by one `StateDir.write` call: temporary files first, swaps last.
Making them survive a power loss (file data fsynced, then the directory) is `StateDir.sync`, which the
checkpoint writer runs off the event path; `atomic_write`, for one-off rewrites, does both at once.

Between writes, each decision is appended to the journal (`decisions.journal.<generation>`, see `journal`):
`append` before the answer, `rotate` when the writer takes a state to write, `drop_journal` once the files
hold it. `load` replays what the journal holds over the files (without changing them); a restarting plugin
then writes the result and drops the journal (`fold`).

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
from dataclasses import dataclass, replace
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
from podlevel.state.journal import Delta, Replay, read_records, replayed

log = logger(__name__)

DEFAULT_STATE_DIR: Final = Path("/var/lib/nri-podlevel")
CPU_STATE_FILE: Final = "cpu_manager_state"
MEMORY_STATE_FILE: Final = "memory_manager_state"
JOURNAL_PREFIX: Final = "decisions.journal."

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
class JournalLoaded:
    """What the journal added to the files: its files, the records replayed, and what stopped the replay."""

    files: tuple[Path, ...] = ()
    records: int = 0
    problem: str | None = None
    corrupt: bool = False


@dataclass(frozen=True)
class LoadedState:
    cpu: Loaded[CPUCheckpoint]
    memory: Loaded[MemoryCheckpoint]
    journal: JournalLoaded = JournalLoaded()


def journal_files(directory: Path) -> list[tuple[int, Path]]:
    """(generation, path) of the journal files in a state directory, oldest first."""
    found = []
    for path in directory.glob(f"{JOURNAL_PREFIX}*"):
        suffix = path.name[len(JOURNAL_PREFIX):]
        if suffix.isdigit():
            found.append((int(suffix), path))
    return sorted(found)


def read_journal(directory: Path) -> Replay:
    """The whole records of a state directory's journal files in order, up to a corrupt one (read only); a
    record cut short ends only its own file (the append that tore it failed, and appends went on in the
    next)."""
    deltas: list[Delta] = []
    problems: list[str] = []
    for _, path in journal_files(directory):
        try:
            replay = read_records(path.read_bytes())
        except FileNotFoundError:
            continue  # dropped since it was listed: the files hold its records now
        except OSError as err:
            return Replay(tuple(deltas), f"{path}: cannot read: {err.strerror}", corrupt=True)
        deltas += replay.deltas
        if replay.problem is not None:
            problems.append(f"{path.name}: {replay.problem}")
        if replay.corrupt:
            return Replay(tuple(deltas), "; ".join(problems), corrupt=True)
    return Replay(tuple(deltas), "; ".join(problems) or None)


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
        self._journal_fd: int | None = None
        self._journal_bytes = 0
        self._generation = 0
        """The journal file appends go to; set past every existing one below."""
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
        self._generation = max((generation for generation, _ in journal_files(self.path)), default=-1) + 1

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
        cpu = _narrow(self._load(self.cpu_file, "cpu", containers), CPUCheckpoint)
        memory = _narrow(self._load(self.memory_file, "memory", containers), MemoryCheckpoint)
        files = tuple(path for _, path in journal_files(self.path))
        if not files:
            return LoadedState(cpu, memory)
        replay = read_journal(self.path)
        if cpu.content is None:
            return LoadedState(cpu, memory, JournalLoaded(files, 0, f"{len(replay.deltas)} journal records "
                                                                  "not replayed: no CPU checkpoint"))
        new_cpu, new_memory = replayed(cpu.content, memory.content, replay.deltas)
        return LoadedState(replace(cpu, content=new_cpu), replace(memory, content=new_memory),
                           JournalLoaded(files, len(replay.deltas), replay.problem, replay.corrupt))

    # -- the journal -----------------------------------------------------------------------------------------

    def append(self, record: bytes) -> None:
        """Append one record to the journal; the page cache keeps it through a killed process. Raises
        OSError; the journal then goes on in a new file, so the torn record stays the last of its file."""
        try:
            if self._journal_fd is None:
                path = self.path / f"{JOURNAL_PREFIX}{self._generation}"
                self._journal_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
            self._writer(self._journal_fd, record)
        except OSError:
            self.rotate()
            raise
        self._journal_bytes += len(record)

    def rotate(self) -> int | None:
        """End the journal file appends go to, when it has any; the generation ended (None: nothing to
        end). Once a write of the state taken with it succeeds, `drop_journal` removes it."""
        if self._journal_fd is None:
            return None
        os.close(self._journal_fd)
        ended, self._journal_fd, self._journal_bytes = self._generation, None, 0
        self._generation += 1
        return ended

    def drop_journal(self, through: int) -> None:
        """Remove the journal files up to generation `through`: the checkpoint files hold them now."""
        for generation, path in journal_files(self.path):
            if generation <= through:
                path.unlink(missing_ok=True)

    def fold(self, loaded: LoadedState) -> None:
        """Write what `load` replayed into the files, durably, then drop the journal (a corrupt one is set
        aside): a restarted plugin starts from files that hold every recorded decision. Raises OSError."""
        journal = loaded.journal
        if not journal.files:
            return
        if journal.records and loaded.cpu.content is not None:
            self.write(loaded.cpu.content, loaded.memory.content)
            self.sync()
        for path in journal.files:
            if journal.corrupt:
                os.rename(path, self._aside(path, "corrupt"))
            else:
                path.unlink(missing_ok=True)

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
        """Rename both checkpoint files and the journal to `<name>.<why>-<UTC time>`, names no restart loads
        (a node the plugin leaves); returns where they went. Raises OSError when a rename fails."""
        moved = []
        for path in (self.cpu_file, self.memory_file, *(path for _, path in journal_files(self.path))):
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
