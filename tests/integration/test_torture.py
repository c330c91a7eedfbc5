"""A short crash torture on the real private containerd (both flavours): a few dozen rounds of pod and
container churn with the plugin SIGKILLed and containerd restarted, the checkpoint and cgroup invariants
checked after every restart (`hack/torture` runs the long version)."""

from __future__ import annotations

from pathlib import Path
from typing import Final

import pytest

from testbed.containerd import Containerd
from testbed.plugin_process import run_help
from testbed.torture import Capabilities, run

SEED: Final = 7
ROUNDS: Final = 40


@pytest.mark.timeout(300)
def test_a_short_torture_finds_no_violation(containerd: Containerd, tmp_path: Path) -> None:
    assert Capabilities.of(run_help()).skipped() == [], "every invariant is checked, the pod cgroups too"

    tally = run(containerd, seed=SEED, rounds=ROUNDS, run_dir=tmp_path / "torture")

    assert [f"round {r} after {after}: {v}" for r, after, v in tally.violations] == []
    assert tally.rounds == ROUNDS
    assert tally.kills >= 3 and tally.restarts >= 1, "the seed no longer kills and restarts enough"
    assert tally.checks == tally.kills + tally.restarts
