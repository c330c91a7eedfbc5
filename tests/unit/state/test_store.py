"""The state directory: creation and refusal, atomic writes, the corrupt-file corpus, in-place migration."""

from __future__ import annotations

import errno
import logging
import os
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest

from podlevel.engine.cpuset import CPUSet
from podlevel.engine.memory_policy import MemoryTable, NUMANodeState
from podlevel.state import store
from podlevel.state.formats import CPUCheckpoint, LegacyCPUCheckpoint, MemoryCheckpoint, decode, encode
from podlevel.state.store import CPU_STATE_FILE, MEMORY_STATE_FILE, StateDir, StateDirError, atomic_write

NOW = datetime(2026, 7, 31, 12, 30, 5, tzinfo=UTC)
CPU = CPUCheckpoint(
    "static", CPUSet.parse("0-1,6-15"), {"pod": {"app": CPUSet.parse("2-3")}}, {"pod": CPUSet.parse("2-5")}
)
MEMORY = MemoryCheckpoint("Static", {0: NUMANodeState(0, {"memory": MemoryTable(8, 1, 7, 0, 7)}, (0,))})


def _state_dir(path: Path) -> StateDir:
    return StateDir(path, now=lambda: NOW)


def test_state_dir_is_created_0700(tmp_path: Path) -> None:
    StateDir(tmp_path / "a" / "state")
    assert stat.S_IMODE(os.stat(tmp_path / "a" / "state").st_mode) == 0o700


def test_checkpoints_are_0600_from_creation_and_an_open_state_dir_is_narrowed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    os.chmod(state, 0o777)
    modes: list[int] = []
    real_write = os.write

    def observing_write(fd: int, data: bytes | memoryview) -> int:
        modes.append(stat.S_IMODE(os.fstat(fd).st_mode))  # the temporary file, before it holds anything
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", observing_write)
    written = _state_dir(state)
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o700
    written.write(CPU, None)
    assert modes and set(modes) == {0o600}
    assert stat.S_IMODE(os.stat(written.cpu_file).st_mode) == 0o600


def test_symlinked_or_non_directory_state_dir_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(StateDirError, match=f"{tmp_path / 'link'} is a symlink"):
        StateDir(tmp_path / "link")
    (tmp_path / "file").write_text("")
    with pytest.raises(StateDirError, match=f"{tmp_path / 'file'} is not a directory"):
        StateDir(tmp_path / "file")


def test_write_then_load_in_the_newest_layouts(tmp_path: Path) -> None:
    state = _state_dir(tmp_path)
    state.write(CPU, MEMORY)
    assert decode((tmp_path / CPU_STATE_FILE).read_bytes()).version == 4
    assert decode((tmp_path / MEMORY_STATE_FILE).read_bytes()).version == 3
    loaded = state.load()
    assert (loaded.cpu.content, loaded.memory.content) == (CPU, MEMORY)
    assert not loaded.cpu.migrated and loaded.cpu.version == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == [CPU_STATE_FILE, MEMORY_STATE_FILE]


def test_missing_files_are_no_state_without_noise(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    loaded = _state_dir(tmp_path).load()
    assert loaded.cpu.content is None and loaded.cpu.reason == "no checkpoint file"
    assert loaded.memory.moved_to is None and not caplog.records


CORPUS = {
    "empty": (b"", "empty"),
    "truncated": (encode(CPU)[:40], "truncated"),
    "not JSON": (b"\x00\x01binary", "not JSON"),
    "bad checksum": (encode(CPU).replace(b'"dataChecksum":', b'"dataChecksum":1'), "bad checksum"),
    "future version": (
        b'{"policyName":"static","defaultCpuSet":"0-3","version":5,"checksum":3}',
        "unknown future",
    ),
    "directory": (None, "not a regular file"),
}


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_corrupt_file_is_moved_aside_with_one_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, case: str
) -> None:
    data, reason = CORPUS[case]
    path = tmp_path / CPU_STATE_FILE
    if data is None:
        path.mkdir()
    else:
        path.write_bytes(data)
    state = _state_dir(tmp_path)
    state.write(None, MEMORY)
    with caplog.at_level(logging.INFO, logger="podlevel.state.store"):
        loaded = state.load()
    assert loaded.cpu.content is None
    assert loaded.cpu.reason is not None and loaded.cpu.reason.startswith(reason)
    aside = tmp_path / f"{CPU_STATE_FILE}.corrupt-20260731T123005Z"
    assert loaded.cpu.moved_to == aside and os.path.lexists(aside) and not os.path.lexists(path)
    if data is not None:
        assert aside.read_bytes() == data
    assert loaded.memory.content == MEMORY  # the other file is untouched
    assert len(caplog.records) == 1
    record = caplog.records[0]
    assert record.levelno == logging.WARNING
    assert (
        str(path) in record.getMessage()
        and reason in record.getMessage()
        and aside.name in record.getMessage()
    )


def test_a_second_corrupt_file_in_the_same_second_gets_its_own_name(tmp_path: Path) -> None:
    state = _state_dir(tmp_path)
    for _ in range(2):
        (tmp_path / CPU_STATE_FILE).write_bytes(b"{")
        state.load()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f"{CPU_STATE_FILE}.corrupt-20260731T123005Z",
        f"{CPU_STATE_FILE}.corrupt-20260731T123005Z-1",
    ]


def test_older_layout_is_migrated_in_place(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    old = CPUCheckpoint(CPU.policy_name, CPU.default, CPU.entries)
    (tmp_path / CPU_STATE_FILE).write_bytes(encode(old, 2))
    (tmp_path / MEMORY_STATE_FILE).write_bytes(encode(MEMORY, 1))
    with caplog.at_level(logging.INFO, logger="podlevel.state.store"):
        loaded = _state_dir(tmp_path).load()
    assert loaded.cpu.content == old and loaded.cpu.version == 2 and loaded.cpu.migrated
    assert loaded.memory.migrated
    assert (tmp_path / CPU_STATE_FILE).read_bytes() == encode(old)
    assert (tmp_path / MEMORY_STATE_FILE).read_bytes() == encode(MEMORY)
    assert any("migrated from V2 to V4" in r.getMessage() for r in caplog.records)


def test_v1_cpu_file_migrates_only_with_the_container_list(tmp_path: Path) -> None:
    legacy = LegacyCPUCheckpoint("static", CPUSet.parse("0-1,4-15"), {"cid": CPUSet.parse("2-3")})
    path = tmp_path / CPU_STATE_FILE
    path.write_bytes(encode(legacy, 1))
    unused = _state_dir(tmp_path).load().cpu
    assert unused.content is None and unused.version == 1 and "container ID" in (unused.reason or "")
    assert path.read_bytes() == encode(legacy, 1)  # left in place, not corrupt
    loaded = _state_dir(tmp_path).load({"cid": ("pod", "app")}).cpu
    assert loaded.content == CPUCheckpoint("static", legacy.default, {"pod": {"app": CPUSet.parse("2-3")}})
    assert loaded.migrated and decode(path.read_bytes()).version == 4


def _failing_writer(fd: int, data: bytes) -> None:
    os.write(fd, data[: len(data) // 2])
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_failed_write_leaves_the_good_files(tmp_path: Path) -> None:
    _state_dir(tmp_path).write(CPU, MEMORY)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    failing = StateDir(tmp_path, writer=_failing_writer)
    other = CPUCheckpoint("static", CPUSet.parse("0-15"))
    with pytest.raises(OSError, match="No space left"):
        failing.write(other, MEMORY)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # no temporary file left either


def test_a_failed_second_file_keeps_the_first_unreplaced(tmp_path: Path) -> None:
    _state_dir(tmp_path).write(CPU, MEMORY)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    calls = []

    def fail_second(fd: int, data: bytes) -> None:
        calls.append(fd)
        if len(calls) == 2:
            raise OSError(errno.EIO, "Input/output error")
        os.write(fd, data)

    with pytest.raises(OSError):
        StateDir(tmp_path, writer=fail_second).write(CPUCheckpoint("static", CPUSet.parse("0-15")), MEMORY)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_atomic_write_replaces_and_cleans_up(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"old")
    atomic_write(path, b"new")
    assert path.read_bytes() == b"new" and [p.name for p in tmp_path.iterdir()] == ["f"]
    with pytest.raises(OSError):
        atomic_write(path, b"newer", _failing_writer)
    assert path.read_bytes() == b"new" and [p.name for p in tmp_path.iterdir()] == ["f"]


def test_an_unchanged_file_is_not_written_again(tmp_path: Path) -> None:
    state = _state_dir(tmp_path)
    state.write(CPU, MEMORY)
    inodes = {path.name: path.stat().st_ino for path in tmp_path.iterdir()}
    moved = CPUCheckpoint("static", CPUSet.parse("0-15"))
    state.write(moved, MEMORY)
    assert (tmp_path / MEMORY_STATE_FILE).stat().st_ino == inodes[MEMORY_STATE_FILE]
    assert (tmp_path / CPU_STATE_FILE).stat().st_ino != inodes[CPU_STATE_FILE]
    assert decode((tmp_path / CPU_STATE_FILE).read_bytes()).content == moved
    assert state.write(moved, MEMORY) is False  # nothing replaced: nothing for the disk sync either


def test_after_a_failed_write_both_files_are_written_again(tmp_path: Path) -> None:
    calls: list[int] = []

    def fail_second(fd: int, data: bytes) -> None:
        calls.append(fd)
        if len(calls) == 2:
            raise OSError(errno.EIO, "Input/output error")
        os.write(fd, data)

    state = StateDir(tmp_path, writer=fail_second)
    with pytest.raises(OSError):
        state.write(CPU, MEMORY)
    state.write(CPU, MEMORY)
    assert decode((tmp_path / CPU_STATE_FILE).read_bytes()).content == CPU
    assert decode((tmp_path / MEMORY_STATE_FILE).read_bytes()).content == MEMORY


def test_a_write_swaps_the_new_file_in_and_removes_the_old_bytes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The replacement is an exchange of names where there is a file to exchange with and the file system
    has it (tmp_path is on one that does, the local disk or a tmpfs): the old inode leaves the directory
    entirely, no temporary file remains, and a reader holding the old file open still reads the old bytes
    whole."""
    renameat2 = store._renameat2()
    assert renameat2 is not None, "glibc has renameat2 since 2.28"
    results: list[int] = []

    def recorded(*args: object) -> int:
        results.append(renameat2(*args))
        return results[-1]

    monkeypatch.setattr(store, "_renameat2", lambda: recorded)
    state = _state_dir(tmp_path)
    state.write(CPU, MEMORY)
    assert results == []  # nothing to exchange with yet: renamed
    held = (tmp_path / CPU_STATE_FILE).open("rb")
    with held:
        old = os.fstat(held.fileno())
        moved = CPUCheckpoint("static", CPUSet.parse("0-15"))
        assert state.write(moved, MEMORY) is True
        assert results == [0]  # the CPU file exchanged; the memory file unchanged
        assert os.fstat(held.fileno()).st_nlink == 0
        assert decode(held.read()).content == CPU
    assert (tmp_path / CPU_STATE_FILE).stat().st_ino != old.st_ino
    assert sorted(p.name for p in tmp_path.iterdir()) == [CPU_STATE_FILE, MEMORY_STATE_FILE]
    assert decode((tmp_path / CPU_STATE_FILE).read_bytes()).content == moved


def test_without_an_exchange_the_file_is_renamed_over(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store, "_renameat2", lambda: None)
    state = _state_dir(tmp_path)
    state.write(CPU, MEMORY)
    moved = CPUCheckpoint("static", CPUSet.parse("0-15"))
    state.write(moved, MEMORY)
    assert sorted(p.name for p in tmp_path.iterdir()) == [CPU_STATE_FILE, MEMORY_STATE_FILE]
    assert decode((tmp_path / CPU_STATE_FILE).read_bytes()).content == moved


def test_a_directory_in_a_files_place_is_never_swapped_in_and_the_write_fails_cleanly(tmp_path: Path) -> None:
    state = _state_dir(tmp_path)
    (tmp_path / CPU_STATE_FILE).mkdir()
    with pytest.raises(OSError):
        state.write(CPU, MEMORY)
    assert (tmp_path / CPU_STATE_FILE).is_dir()
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_temporary_files_left_by_a_killed_write_are_removed_when_the_directory_is_opened(
        tmp_path: Path) -> None:
    leftovers = [tmp_path / f".{CPU_STATE_FILE}.abc123.tmp", tmp_path / f".{MEMORY_STATE_FILE}.x.tmp"]
    for leftover in leftovers:
        leftover.write_bytes(b"{}")
    (tmp_path / "unrelated.tmp").write_bytes(b"kept")
    _state_dir(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["unrelated.tmp"]
