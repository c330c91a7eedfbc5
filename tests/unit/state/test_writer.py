"""The background checkpoint writer: answers wait for what was submitted, newer states replace older ones."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

from podlevel.engine.cpuset import CPUSet
from podlevel.state.formats import CPUCheckpoint, decode
from podlevel.state.store import CPU_STATE_FILE, StateDir, journal_files
from podlevel.state.writer import CheckpointWriter
from support.builders import CheckpointGate


def _cpu(cpus: str) -> CPUCheckpoint:
    return CPUCheckpoint("static", CPUSet.parse(cpus))


def _on_disk(path: Path) -> object:
    return decode((path / CPU_STATE_FILE).read_bytes()).content


def test_wait_returns_once_the_submitted_state_is_on_disk(tmp_path: Path) -> None:
    writer = CheckpointWriter(StateDir(tmp_path), on_failure=lambda err: None)
    writer.submit(_cpu("0-3"), None)
    writer.wait()
    assert _on_disk(tmp_path) == _cpu("0-3")
    writer.close()


def test_states_submitted_while_a_write_runs_are_replaced_by_the_newest(tmp_path: Path) -> None:
    started, release = threading.Event(), threading.Event()
    written: list[bytes] = []

    def slow(fd: int, data: bytes) -> None:
        started.set()
        release.wait()
        written.append(data)
        os.write(fd, data)

    writer = CheckpointWriter(StateDir(tmp_path, writer=slow), on_failure=lambda err: None)
    writer.submit(_cpu("0"), None)
    started.wait()
    writer.submit(_cpu("1"), None)
    writer.submit(_cpu("2"), None)
    release.set()
    writer.wait()
    assert _on_disk(tmp_path) == _cpu("2")
    assert len(written) == 2  # "1" was never written: "2" replaced it while "0" was being written
    writer.close()


def test_a_failed_write_is_reported_and_does_not_block_the_answer(tmp_path: Path) -> None:
    failures: list[Exception] = []
    attempts: list[int] = []

    def full_then_fine(fd: int, data: bytes) -> None:
        attempts.append(fd)
        if len(attempts) == 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        os.write(fd, data)

    writer = CheckpointWriter(StateDir(tmp_path, writer=full_then_fine), on_failure=failures.append)
    writer.submit(_cpu("0-1"), None)
    writer.wait()
    assert [str(err) for err in failures] == ["[Errno 28] No space left on device"]
    assert not (tmp_path / CPU_STATE_FILE).exists()
    writer.submit(_cpu("0-1"), None)
    writer.wait()
    assert _on_disk(tmp_path) == _cpu("0-1")
    writer.close()


def test_close_writes_what_is_pending(tmp_path: Path) -> None:
    writer = CheckpointWriter(StateDir(tmp_path), on_failure=lambda err: None)
    writer.submit(_cpu("5"), None)
    writer.close()
    assert _on_disk(tmp_path) == _cpu("5")


def test_written_files_are_synced_once_writes_pause(tmp_path: Path) -> None:
    synced = threading.Event()
    writer = CheckpointWriter(StateDir(tmp_path), on_failure=lambda err: None, on_success=synced.set, quiet=0)
    writer.submit(_cpu("0-3"), None)
    assert synced.wait(timeout=30)
    writer.close()


def test_close_syncs_without_waiting_for_a_pause(tmp_path: Path) -> None:
    synced: list[bool] = []
    writer = CheckpointWriter(
        StateDir(tmp_path), on_failure=lambda err: None, on_success=lambda: synced.append(True), quiet=3600
    )
    writer.submit(_cpu("0-3"), None)
    writer.wait()
    assert synced == []  # the hour-long pause has not passed
    writer.close()
    assert synced == [True]


def test_a_submission_with_time_to_spare_waits_for_the_next_one_or_an_answer(tmp_path: Path) -> None:
    written: list[bytes] = []

    def counted(fd: int, data: bytes) -> None:
        written.append(data)
        os.write(fd, data)

    writer = CheckpointWriter(StateDir(tmp_path, writer=counted), on_failure=lambda err: None)
    writer.submit(_cpu("1"), None, within=3600)
    assert not (tmp_path / CPU_STATE_FILE).exists()  # an hour to spare: nothing forces it yet
    writer.submit(_cpu("2"), None, within=3600)
    writer.wait()  # an answer that applies it: written now, once, the newest
    assert _on_disk(tmp_path) == _cpu("2") and len(written) == 1
    writer.submit(_cpu("3"), None, within=3600)
    writer.close()
    assert _on_disk(tmp_path) == _cpu("3")


def test_a_sync_after_a_failed_write_reports_no_success(tmp_path: Path) -> None:
    outcomes: list[str] = []
    calls: list[int] = []

    def second_fails(fd: int, data: bytes) -> None:
        calls.append(fd)
        if len(calls) == 2:
            raise OSError(errno.EIO, "Input/output error")
        os.write(fd, data)

    writer = CheckpointWriter(
        StateDir(tmp_path, writer=second_fails),
        on_failure=lambda err: outcomes.append(f"failed: {err.strerror}"),  # type: ignore[attr-defined]
        on_success=lambda: outcomes.append("synced"),
        quiet=3600,
    )
    writer.submit(_cpu("0"), None)
    writer.wait()
    writer.submit(_cpu("1"), None)
    writer.wait()
    writer.close()  # syncs the first file; the newest decision is still not on disk
    assert outcomes == ["failed: Input/output error"]


def test_a_failing_outcome_callback_stops_no_thread(tmp_path: Path) -> None:
    def broken(err: Exception) -> None:
        raise RuntimeError("the metrics are gone")

    attempts: list[int] = []

    def fails_once(fd: int, data: bytes) -> None:
        attempts.append(fd)
        if len(attempts) == 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        os.write(fd, data)

    writer = CheckpointWriter(StateDir(tmp_path, writer=fails_once), on_failure=broken)
    writer.submit(_cpu("0"), None)
    writer.submit(_cpu("2"), None)
    # A writer thread stopped by the callback would never answer: the waiting thread must not hold the test.
    answered = threading.Thread(target=writer.wait, daemon=True)
    answered.start()
    answered.join(timeout=30)
    assert not answered.is_alive()
    writer.submit(_cpu("2"), None)
    writer.wait()
    assert _on_disk(tmp_path) == _cpu("2")
    writer.close()


# -- the journal ---------------------------------------------------------------------------------------------


def _answered(writer: CheckpointWriter) -> bool:
    """Whether `wait` returns while the checkpoint writes are held."""
    waiting = threading.Thread(target=writer.wait, daemon=True)
    waiting.start()
    waiting.join(timeout=5)
    return not waiting.is_alive()


def test_a_recorded_submission_is_answered_before_the_files_are_written(tmp_path: Path) -> None:
    gate = CheckpointGate()
    writer = CheckpointWriter(StateDir(tmp_path, writer=gate), on_failure=lambda err: None)
    made: list[bytes] = []

    def record() -> bytes:
        made.append(b"\0\0\0\0before the base")
        return made[-1]

    writer.submit(_cpu("0"), None, record=record)
    writer.wait()
    assert journal_files(tmp_path) == [], "no record is kept before the files hold a state to build on"
    assert made == [], "nor made"
    gate.open.clear()
    writer.submit(_cpu("1"), None, record=lambda: b"\0\0\0\0one")
    writer.submit(_cpu("2"), None, record=lambda: b"\0\0\0\0two")
    assert _answered(writer)
    assert _on_disk(tmp_path) == _cpu("0")
    [(_, journal)] = journal_files(tmp_path)
    assert journal.read_bytes() == b"\0\0\0\0one\0\0\0\0two"
    gate.open.set()
    writer.close()
    assert _on_disk(tmp_path) == _cpu("2") and journal_files(tmp_path) == []


def test_a_failed_write_keeps_the_journal_until_a_write_succeeds(tmp_path: Path) -> None:
    gate = CheckpointGate()
    failures: list[Exception] = []
    writer = CheckpointWriter(StateDir(tmp_path, writer=gate), on_failure=failures.append)
    writer.submit(_cpu("0"), None)
    writer.wait()
    gate.fail_next = True
    writer.submit(_cpu("1"), None, record=lambda: b"\0\0\0\0one", within=0)
    assert _answered(writer) and gate.failed.wait(30)
    writer.wait()
    assert [path.read_bytes() for _, path in journal_files(tmp_path)] == [b"\0\0\0\0one"]
    writer.submit(_cpu("2"), None, record=lambda: b"\0\0\0\0two")
    writer.close()
    assert _on_disk(tmp_path) == _cpu("2") and journal_files(tmp_path) == []
    assert len(failures) == 1
