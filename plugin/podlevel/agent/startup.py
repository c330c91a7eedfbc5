"""What a restarted agent takes back from its state directory before the runtime's Synchronize.

CPUs and memory come back from the checkpoints as the kubelet's CPU and memory managers restore them, with
the journal's decisions the files did not hold yet written into them first;
Synchronize then moves only what no longer fits (`Placement.synchronize`). Reading the files is the store's
job; this module decides what of them is worth restoring and says so in the log.
"""

from __future__ import annotations

from podlevel.engine.manager import Engine
from podlevel.engine.restore import Checkpointed
from podlevel.eventlog import logger
from podlevel.state.engine_state import recorded_cpus, recorded_memory
from podlevel.state.store import LoadedState, StateDir

log = logger(__name__)


def restored_state(state: StateDir, engine: Engine) -> Checkpointed | None:
    """The checkpoints a restarted plugin takes its pods back from; None without a usable CPU checkpoint (the
    store has logged why and moved a corrupt file aside; pods are then taken back from what the runtime
    shows). Without a usable memory checkpoint the CPUs are restored all the same, and each pod's memory is
    placed by today's rules."""
    loaded = state.load()
    _fold_journal(state, loaded)
    cpu, memory = loaded.cpu.content, loaded.memory.content
    if cpu is None:
        log.info("no CPU checkpoint to restore from in {state_dir}: {reason}", state_dir=state.path,
                 reason=loaded.cpu.reason)
        return None
    config = engine.config
    _warn_policy_change("CPU", cpu.policy_name, config.cpu_policy, "its CPUs only where they are")
    if memory is None:
        log.info("no memory checkpoint to restore from in {state_dir}: {reason}; each pod's memory is placed "
                 "by today's rules", state_dir=state.path, reason=loaded.memory.reason)
        return Checkpointed(recorded_cpus(cpu))
    _warn_policy_change("memory", memory.policy_name, config.memory_policy, "its memory only where it is")
    return Checkpointed(recorded_cpus(cpu), recorded_memory(memory))


def _warn_policy_change(manager: str, recorded: str, now: str, keeps: str) -> None:
    if recorded != now:
        log.warning("the checkpoint was written under {manager} policy {recorded!r}, now {now!r}: each pod "
                    "keeps {keeps} valid under the new settings", manager=manager, recorded=recorded, now=now,
                    keeps=keeps)


def _fold_journal(state: StateDir, loaded: LoadedState) -> None:
    """Write what the journal added into the files and drop it, saying what was replayed and what was not."""
    journal = loaded.journal
    if not journal.files:
        return
    if journal.problem is not None:
        log.warning("checkpoint journal in {state_dir}: {problem}", state_dir=state.path,
                    problem=journal.problem)
    try:
        state.fold(loaded)
    except OSError as err:
        log.error("checkpoint journal in {state_dir}: {records} records replayed but not written into the "
                  "checkpoint files ({error}); the first write does", state_dir=state.path,
                  records=journal.records, error=err)
        return
    log.info("checkpoint journal in {state_dir}: {records} records replayed into the checkpoint files",
             state_dir=state.path, records=journal.records)
