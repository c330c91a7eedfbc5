"""What a restarted agent takes back from its state directory before the runtime's Synchronize.

CPUs come back from the CPU checkpoint as the kubelet's CPU manager restores them; Synchronize then moves
only what no longer fits (`Placement.synchronize`). Reading the files is the store's job; this module
decides what of them is worth restoring and says so in the log.
"""

from __future__ import annotations

import logging

from podlevel.engine.cpu_policy import CPUState
from podlevel.engine.manager import Engine
from podlevel.state.engine_state import recorded_cpus
from podlevel.state.store import StateDir

log = logging.getLogger(__name__)


def restored_cpus(state: StateDir, engine: Engine) -> CPUState | None:
    """The CPU checkpoint a restarted plugin takes its pods back from; None without a usable one (the store
    has logged why and moved a corrupt file aside; pods are then taken back from what the runtime shows)."""
    loaded = state.load().cpu
    if loaded.content is None:
        log.info("no CPU checkpoint to restore from in %s: %s", state.path, loaded.reason)
        return None
    if loaded.content.policy_name != engine.config.cpu_policy:
        log.warning("the checkpoint was written under CPU policy %r, now %r: each pod keeps its CPUs only "
                    "where they are valid under the new settings", loaded.content.policy_name,
                    engine.config.cpu_policy)
    return recorded_cpus(loaded.content)
