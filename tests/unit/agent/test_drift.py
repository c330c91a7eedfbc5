"""agent.drift: container cgroups compared with what the plugin applied, and put back, on a cgroup v2 tree
laid out like the kubelet's (real files read back after the writes)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from podlevel.agent.drift import DriftRepair, find_drifts
from podlevel.agent.events import Observer
from podlevel.agent.plugin import PodLevelPlugin
from podlevel.agent.records import Settings
from podlevel.engine.cfs import UNLIMITED_QUOTA
from podlevel.engine.cpuset import CPUSet
from podlevel.engine.manager import Assignment
from support.builders import fast_path, sandbox, three_pods


class Counting(Observer):
    def __init__(self) -> None:
        self.repaired: list[str] = []

    def cgroup_repaired(self, field: str) -> None:
        self.repaired.append(field)


def lay_out(plugin: PodLevelPlugin, root: Path) -> dict[str, Path]:
    """Each container's cgroup directory holding what the plugin applied (as the runtime wrote it)."""
    (root / "cgroup.controllers").write_text("cpuset cpu memory\n")
    snapshot = plugin.snapshot
    dirs = {}
    for container_id, settings in snapshot.placement.applied.items():
        directory = root / snapshot.cgroups_paths[container_id].lstrip("/")
        directory.mkdir(parents=True)
        (directory / "cpuset.cpus").write_text(f"{settings.cpus}\n")
        (directory / "cpuset.mems").write_text(f"{CPUSet(settings.mems)}\n")
        quota = settings.cpu_quota_us
        (directory / "cpu.max").write_text(
            f"{'max' if quota in (None, UNLIMITED_QUOTA) else quota} {settings.cpu_period_us}\n")
        dirs[container_id] = directory
    return dirs


def repairer(plugin: PodLevelPlugin, root: Path, observer: Observer) -> DriftRepair:
    return DriftRepair(root, lambda: plugin.snapshot, lambda: plugin.handler_lock, plugin.applied,
                       lambda: True, 10.0, observer)


def test_nothing_drifted_nothing_written(tmp_path: Path) -> None:
    plugin = three_pods()
    lay_out(plugin, tmp_path)
    assert list(find_drifts(plugin.snapshot, tmp_path)) == []
    assert repairer(plugin, tmp_path, Counting()).repair(plugin.snapshot) == 0


def test_a_shared_container_moved_onto_exclusive_cpus_is_put_back_and_logged_as_such(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    plugin = three_pods()
    dirs = lay_out(plugin, tmp_path)
    web, app = "web-server", "fast-app"
    wanted = plugin.applied(web)
    assert wanted is not None and wanted.assignment is Assignment.NODE_SHARED
    exclusive = plugin.applied(app)
    assert exclusive is not None and exclusive.assignment is Assignment.POD_EXCLUSIVE
    (dirs[web] / "cpuset.cpus").write_text(f"{wanted.cpus | exclusive.cpus}\n")  # by hand, behind its back
    observer = Counting()

    assert repairer(plugin, tmp_path, observer).repair(plugin.snapshot) == 1

    assert (dirs[web] / "cpuset.cpus").read_text() == str(wanted.cpus)
    assert observer.repaired == ["cpus"]
    [logged] = [r for r in caplog.records if web[:12] in r.getMessage()]
    assert "a shared container found on exclusive CPUs" in logged.getMessage()
    assert list(find_drifts(plugin.snapshot, tmp_path)) == []


def test_an_exclusive_containers_quota_turned_on_is_turned_off_again_and_logged_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    plugin = three_pods()
    dirs = lay_out(plugin, tmp_path)
    observer = Counting()
    repair = repairer(plugin, tmp_path, observer)
    for _ in range(2):
        (dirs["fast-app"] / "cpu.max").write_text("50000 100000\n")
        assert repair.repair(plugin.snapshot) == 1
        assert (dirs["fast-app"] / "cpu.max").read_text().split()[0] == "max"
    assert observer.repaired == ["quota", "quota"]
    assert len([r for r in caplog.records if "fast-app"[:12] in r.getMessage()]) == 1, "one line per drift"


def test_a_value_that_is_a_newer_decision_in_flight_is_not_undone(tmp_path: Path) -> None:
    plugin = three_pods()
    dirs = lay_out(plugin, tmp_path)
    (dirs["web-server"] / "cpuset.cpus").write_text("0\n")
    snapshot = plugin.snapshot
    newer = Settings(plugin.placement.applied["web-server"].cpus, (0,), None, 100000, Assignment.NODE_SHARED)
    repair = DriftRepair(tmp_path, lambda: snapshot, contextlib.nullcontext, lambda _: newer, lambda: True,
                         10.0, Counting())
    assert repair.repair(snapshot) == 0
    assert (dirs["web-server"] / "cpuset.cpus").read_text() == "0\n"


def test_a_container_whose_cgroup_is_gone_is_left_for_the_next_round(tmp_path: Path) -> None:
    plugin = three_pods()
    dirs = lay_out(plugin, tmp_path)
    for name in ("cpuset.cpus", "cpuset.mems", "cpu.max"):
        (dirs["web-server"] / name).unlink()
    dirs["web-server"].rmdir()
    assert [d.container_id for d in find_drifts(plugin.snapshot, tmp_path)] == []


def test_a_container_whose_update_did_not_fit_an_answer_is_left_to_the_runtime(tmp_path: Path) -> None:
    """The pool moved web, but the update that moves it was deferred (it did not fit the answer): the
    runtime, and so web's cgroup, still has the old CPUs, and the repair must not write ahead of it."""
    plugin = three_pods()
    dirs = lay_out(plugin, tmp_path)
    before = plugin.applied("web-server")
    assert before is not None
    plugin.run_pod_sandbox(sandbox(fast_path("late", 4, 2)))
    assert "web-server" in plugin.placement.take_pending_updates()
    plugin.placement.defer(["web-server"])  # as an answer too small for it does
    snapshot = plugin.snapshot
    assert snapshot.placement.applied["web-server"].cpus != before.cpus

    assert plugin.applied("web-server") is None
    assert [d.container_id for d in find_drifts(snapshot, tmp_path)] == []
    assert repairer(plugin, tmp_path, Counting()).repair(snapshot) == 0
    assert (dirs["web-server"] / "cpuset.cpus").read_text() == f"{before.cpus}\n"
