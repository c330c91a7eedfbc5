"""state.journal and the journal files of StateDir: a decision's record, replayed over files that hold none,
some or all of the records before it, gives the state the decision left; a record cut short is ignored and
one that fails its checksum ends the replay; a fold writes the files and drops the journal."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from podlevel.engine.errors import AdmissionError
from podlevel.engine.manager import Engine, NodeState
from podlevel.state import store
from podlevel.state.engine_state import checkpoints_of
from podlevel.state.journal import HEADER, delta_of, encode_record, read_records, replayed
from podlevel.state.store import StateDir, journal_files, read_journal
from support.builders import all_exclusive, burstable, fast_path, new_engine, pod, sidecar

ENGINE = new_engine()


def states(engine: Engine, steps: list[tuple[bool, int]]) -> list[NodeState]:
    """The states a node goes through: each step admits a pod (of a size picked by the step) or releases the
    oldest one left; a pod that does not fit is skipped."""
    state = engine.initial_state()
    seen, live, made = [state], [], 0
    for admit, size in steps:
        if admit or not live:
            made += 1
            shape = [fast_path(f"p{made}", cpus=2 + size, exclusive=1), all_exclusive(f"p{made}", 1 + size),
                     pod(f"p{made}", sidecar("s", burstable(100)))][size % 3]
            try:
                state, _ = engine.admit(state, shape)
            except AdmissionError:
                continue
            live.append(shape.uid)
        else:
            state = engine.remove_pod(state, live.pop(0))
        seen.append(state)
    return seen


def journal_of(seen: list[NodeState]) -> bytes:
    return b"".join(encode_record(delta_of(before, after)) for before, after in itertools.pairwise(seen))


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 5)), min_size=1, max_size=12), st.data())
def test_replaying_the_records_over_any_earlier_fold_gives_the_last_state(
        steps: list[tuple[bool, int]], data: st.DataObject) -> None:
    seen = states(ENGINE, steps)
    folded = data.draw(st.integers(0, len(seen) - 1), label="the state the files hold")
    replay = read_records(journal_of(seen))
    assert replay.problem is None and len(replay.deltas) == len(seen) - 1
    assert replayed(*checkpoints_of(ENGINE, seen[folded]), replay.deltas) == checkpoints_of(ENGINE, seen[-1])


def test_a_record_is_a_few_hundred_bytes_for_a_pod() -> None:
    seen = states(ENGINE, [(True, 0)] * 20)
    assert len(encode_record(delta_of(seen[-2], seen[-1]))) < 1000


def test_a_record_cut_short_is_ignored_and_said() -> None:
    seen = states(ENGINE, [(True, 0), (True, 1), (False, 0)])
    whole = journal_of(seen[:-1])
    last = encode_record(delta_of(seen[-2], seen[-1]))
    for cut in range(1, len(last)):
        replay = read_records(whole + last[:cut])
        assert len(replay.deltas) == len(seen) - 2 and not replay.corrupt
        assert replay.problem is not None and "cut short" in replay.problem


def test_a_record_that_fails_its_checksum_ends_the_replay_as_corrupt() -> None:
    seen = states(ENGINE, [(True, 0), (True, 1), (False, 0)])
    data = bytearray(journal_of(seen))
    data[HEADER.size + 5] ^= 0x20
    replay = read_records(bytes(data))
    assert replay.deltas == () and replay.corrupt
    assert replay.problem is not None and "fails its checksum" in replay.problem


def test_load_replays_the_journal_and_fold_writes_it_in(tmp_path: Path) -> None:
    seen = states(ENGINE, [(True, 0), (True, 1), (True, 2), (False, 0)])
    state = StateDir(tmp_path)
    state.write(*checkpoints_of(ENGINE, seen[0]))
    for before, after in itertools.pairwise(seen[:3]):
        state.append(encode_record(delta_of(before, after)))
    assert state.rotate() == 0
    state.append(encode_record(delta_of(seen[2], seen[3])))
    state.append(encode_record(delta_of(seen[3], seen[4]))[:-3])  # the process killed in mid-append
    state.rotate()
    state.append(encode_record(delta_of(seen[3], seen[4])))  # appends go on in the next file

    restarted = StateDir(tmp_path)
    loaded = restarted.load()
    assert (loaded.cpu.content, loaded.memory.content) == checkpoints_of(ENGINE, seen[4])
    assert loaded.journal.records == 4 and not loaded.journal.corrupt
    assert loaded.journal.problem is not None and "decisions.journal.1" in loaded.journal.problem
    restarted.fold(loaded)
    assert journal_files(tmp_path) == []
    again = StateDir(tmp_path).load()
    assert (again.cpu.content, again.memory.content) == checkpoints_of(ENGINE, seen[4])
    assert again.journal.files == ()


def test_a_corrupt_journal_is_set_aside_at_the_fold(tmp_path: Path) -> None:
    seen = states(ENGINE, [(True, 0), (True, 1)])
    state = StateDir(tmp_path)
    state.write(*checkpoints_of(ENGINE, seen[0]))
    record = bytearray(encode_record(delta_of(seen[0], seen[1])))
    record[-2] ^= 0x01
    state.append(bytes(record))
    state.rotate()
    loaded = StateDir(tmp_path).load()
    assert loaded.journal.corrupt and loaded.cpu.content == checkpoints_of(ENGINE, seen[0])[0]
    StateDir(tmp_path).fold(loaded)
    assert journal_files(tmp_path) == []
    assert [p.name.split("-")[0] for p in tmp_path.glob("decisions.journal.0.corrupt-*")] == [
        "decisions.journal.0.corrupt"]


def test_appends_after_a_restart_go_past_every_journal_file_left(tmp_path: Path) -> None:
    seen = states(ENGINE, [(True, 0)])
    (tmp_path / "decisions.journal.7").write_bytes(b"")
    state = StateDir(tmp_path)
    state.append(encode_record(delta_of(seen[0], seen[1])))
    assert [generation for generation, _ in journal_files(tmp_path)] == [7, 8]
    assert os.stat(tmp_path / "decisions.journal.8").st_mode & 0o777 == 0o600


def test_a_journal_file_dropped_while_it_is_read_is_skipped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`show` beside a running plugin: a file listed, then dropped by a write before it is read."""
    seen = states(ENGINE, [(True, 0)])
    state = StateDir(tmp_path)
    state.append(encode_record(delta_of(seen[0], seen[1])))
    listed = [*journal_files(tmp_path), (9, tmp_path / "decisions.journal.9")]
    monkeypatch.setattr(store, "journal_files", lambda directory: listed)
    replay = read_journal(tmp_path)
    assert len(replay.deltas) == 1 and not replay.corrupt and replay.problem is None
