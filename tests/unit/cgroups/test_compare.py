"""cgroups.compare: drift defined once, on real cgroup v2 files. The rows are where the repair loop's old rule
(fall back to `.effective` for both fields when either configured file is empty) and `check`'s (field by
field) used to disagree."""

from __future__ import annotations

from pathlib import Path

import pytest

from podlevel.cgroups import Cgroup, Wanted, compare
from podlevel.engine.cfs import UNLIMITED_QUOTA
from podlevel.engine.cpuset import CPUSet

WANTED = Wanted(CPUSet.parse("2-3"), CPUSet.parse("0"), UNLIMITED_QUOTA)

# configured cpus, configured mems, effective cpus, effective mems, cpu.max; the drifted fields with the
# file that shows each and whether the cgroup's own files can put it back.
ROWS = {
    "as wanted": ("2-3", "0", "2-3", "0", "max 100000", []),
    "mems written, cpus inherited": ("", "0-1", "2-3", "0", "max 100000", [("mems", "cpuset.mems", True)]),
    "cpus inherited from a parent that holds others": ("", "0", "0-7", "0", "max 100000",
                                                       [("cpus", "cpuset.cpus.effective", True)]),
    "clipped by a parent": ("2-3", "0", "2", "0", "max 100000", [("cpus", "cpuset.cpus.effective", False)]),
    "cpus written and quota turned on": ("4", "0", "4", "0", "50000 100000",
                                         [("cpus", "cpuset.cpus", True), ("quota", "cpu.max", True)]),
}


def cgroup(
    tmp_path: Path, cpus: str, mems: str, effective_cpus: str, effective_mems: str, cpu_max: str
) -> Cgroup:
    files = {"cpuset.cpus": cpus, "cpuset.mems": mems, "cpuset.cpus.effective": effective_cpus,
             "cpuset.mems.effective": effective_mems, "cpu.max": cpu_max}
    for name, text in files.items():
        (tmp_path / name).write_text(f"{text}\n")
    return Cgroup(2, tmp_path, tmp_path)


@pytest.mark.parametrize(("cpus", "mems", "effective_cpus", "effective_mems", "cpu_max", "drifted"),
                         ROWS.values(), ids=ROWS.keys())
def test_one_rule_for_check_and_for_the_repair(
    tmp_path: Path, cpus: str, mems: str, effective_cpus: str, effective_mems: str, cpu_max: str,
    drifted: list[tuple[str, str, bool]],
) -> None:
    group = cgroup(tmp_path, cpus, mems, effective_cpus, effective_mems, cpu_max)

    found, drifts = compare(group, WANTED)
    _, repair_drifts = compare(group, WANTED, report=False)

    assert [(d.field, d.file.name, d.repairable) for d in drifts] == drifted
    assert [d for d in drifts if d.repairable] == [d for d in repair_drifts if d.repairable]
    assert found.in_force.cpus == CPUSet.parse(effective_cpus)


def test_the_quota_is_compared_only_where_the_plugin_sets_it(tmp_path: Path) -> None:
    group = cgroup(tmp_path, "2-3", "0", "2-3", "0", "50000 100000")

    assert compare(group, Wanted(CPUSet.parse("2-3"), CPUSet.parse("0"), None))[1] == []
    [drift] = compare(group, Wanted(CPUSet.parse("2-3"), CPUSet.parse("0"), 40000))[1]
    assert (drift.expected, drift.found) == ("40000", "50000")
    [drift] = compare(group, WANTED)[1]
    assert (drift.field, drift.expected, drift.found) == ("quota", "max", "50000")
