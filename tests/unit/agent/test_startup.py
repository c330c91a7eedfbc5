"""agent.startup: a restarted plugin takes back both checkpoints, CPUs even when the memory file is unusable,
and says in the log what it could not take back and which policy changed."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from podlevel.agent.startup import restored_state
from podlevel.engine.manager import Engine, NodeState
from podlevel.engine.restore import Checkpointed
from podlevel.state.engine_state import checkpoints_of
from podlevel.state.store import StateDir
from support.builders import fast_path, new_engine


def written(path: Path) -> tuple[StateDir, NodeState]:
    """A state dir holding the checkpoints of a node with one admitted pod."""
    engine = new_engine()
    state, _ = engine.admit(engine.initial_state(), fast_path())
    store = StateDir(path)
    store.write(*checkpoints_of(engine, state))
    return store, state


def restart_logs(caplog: pytest.LogCaptureFixture, store: StateDir, engine: Engine) -> Checkpointed | None:
    with caplog.at_level(logging.INFO, logger="podlevel.agent.startup"):
        return restored_state(store, engine)


def test_both_checkpoints_are_taken_back(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store, state = written(tmp_path)
    restored = restart_logs(caplog, store, new_engine())
    assert restored is not None and restored.cpu == state.cpu
    assert restored.memory is not None
    memory = restored.memory
    assert (memory.machine, memory.entries, memory.pod_entries) == (
        state.memory.machine, state.memory.entries, state.memory.pod_entries)
    assert caplog.messages == []


def test_an_unusable_memory_checkpoint_leaves_the_cpus_restored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store, state = written(tmp_path)
    store.memory_file.write_text("{")
    restored = restart_logs(caplog, store, new_engine())
    assert restored == Checkpointed(state.cpu)
    [line] = [m for m in caplog.messages if "no memory checkpoint" in m]
    assert "placed by today's rules" in line


def test_a_memory_policy_change_is_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store, _ = written(tmp_path)
    restored = restart_logs(caplog, store, new_engine(memory_policy="None"))
    assert restored is not None and restored.memory is not None
    assert caplog.messages == [
        "the checkpoint was written under memory policy 'Static', now 'None': each pod keeps its memory only "
        "where it is valid under the new settings"
    ]


def test_without_a_cpu_checkpoint_nothing_is_restored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store, _ = written(tmp_path)
    store.cpu_file.unlink()
    assert restart_logs(caplog, store, new_engine()) is None
    assert [m for m in caplog.messages if m.startswith("no CPU checkpoint")]
