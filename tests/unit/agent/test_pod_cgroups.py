"""agent.pod_cgroups: each wanted pod cgroup written once and located once, a failure retried with backoff,
an unsafe parent refused for good, a pod no longer wanted forgotten; the worker writes on its own thread,
retries without an event and says when a pod's writes are done; on a cgroup v2 tree of real files read
back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from podlevel.agent import pod_cgroups
from podlevel.agent.events import Observer
from podlevel.agent.pod_cgroups import RETRY_FIRST_S, PodCgroups, PodCgroupWorker
from podlevel.agent.records import PodCgroupSettings
from podlevel.cgroups import PodCgroup
from podlevel.engine.cpuset import CPUSet
from support.builders import Gated, fast_path, v2_root
from testbed.wait import wait_until

POD = fast_path()


class Counting(Observer):
    def __init__(self) -> None:
        self.failures = 0

    def pod_cgroup_failed(self) -> None:
        self.failures += 1


def wanted(parent: str = f"/kubepods/pod{POD.uid}", cpus: str = "2-3") -> PodCgroupSettings:
    return PodCgroupSettings("pod default/fast", POD.uid, parent, CPUSet.parse(cpus), (0,), True, 100000)


def test_the_bubble_and_the_quota_are_written_once(tmp_path: Path) -> None:
    root = v2_root(tmp_path, POD)
    pod_dir = root / "kubepods" / f"pod{POD.uid}"
    cgroups = PodCgroups(root)

    cgroups.sync({"sb": wanted()})

    assert (pod_dir / "cpuset.cpus").read_text() == "2-3"
    assert (pod_dir / "cpu.max").read_text() == "max 100000"
    (pod_dir / "cpuset.cpus").write_text("0-1")
    cgroups.sync({"sb": wanted()})
    assert (pod_dir / "cpuset.cpus").read_text() == "0-1", "unchanged wants are not written again"


def test_a_failure_waits_its_backoff_and_a_change_of_wants_is_tried_at_once(tmp_path: Path) -> None:
    root = v2_root(tmp_path, POD)
    (root / "kubepods" / f"pod{POD.uid}" / "cpu.max").unlink()
    now, observer = [0.0], Counting()
    cgroups = PodCgroups(root, observer, clock=lambda: now[0])

    cgroups.sync({"sb": wanted()})
    cgroups.sync({})
    assert (observer.failures, cgroups.pending) == (1, True)
    now[0] += RETRY_FIRST_S
    cgroups.sync({})
    assert observer.failures == 2
    cgroups.sync({"sb": wanted(cpus="4-5")})
    assert observer.failures == 3, "new wants are tried at once"


def test_an_unsafe_parent_is_refused_for_good_and_a_gone_pod_forgotten(tmp_path: Path) -> None:
    root = v2_root(tmp_path, POD)
    now, observer = [0.0], Counting()
    cgroups = PodCgroups(root, observer, clock=lambda: now[0])

    cgroups.sync({"sb": wanted(parent="/../escape")})
    assert "sb" in cgroups.failed and observer.failures == 1
    now[0] += 3600
    cgroups.sync({"sb": wanted(parent="/../escape")})
    assert observer.failures == 1, "refused for good: not tried again until its wants change"

    cgroups.sync({"sb": None})
    assert (cgroups.failed, cgroups.pending) == ({}, False)


def test_a_pod_cgroup_is_located_once_while_its_parent_stays(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = v2_root(tmp_path, POD)
    located: list[str] = []
    real = pod_cgroups.locate_pod_cgroup

    def counting(**kwargs: Any) -> PodCgroup:
        located.append(kwargs["cgroup_parent"])
        return real(**kwargs)

    monkeypatch.setattr(pod_cgroups, "locate_pod_cgroup", counting)
    cgroups = PodCgroups(root)
    cgroups.sync({"sb": wanted(cpus="2-3")})
    cgroups.sync({"sb": wanted(cpus="4-5")})
    assert (root / "kubepods" / f"pod{POD.uid}" / "cpuset.cpus").read_text() == "4-5"
    assert located == [f"/kubepods/pod{POD.uid}"], "new wants in the same pod cgroup: not located again"
    cgroups.sync({"sb": wanted(parent=f"/kubepods/burstable/pod{POD.uid}")})
    assert len(located) == 2, "another parent is located anew"


def test_the_worker_writes_on_its_own_thread_and_wait_says_when(tmp_path: Path) -> None:
    root = v2_root(tmp_path, POD)
    cpus = root / "kubepods" / f"pod{POD.uid}" / "cpuset.cpus"
    gated = Gated(root)
    worker = PodCgroupWorker(gated)
    try:
        worker.submit({"sb": wanted(cpus="2-3")})
        assert worker.wait("sb", 0.05) is False and not cpus.read_text().strip(), "submit returns first"
        assert worker.wait("other", 0.0), "nothing submitted for another sandbox: no wait"
        gated.gate.set()
        assert worker.wait("sb", 30)
        assert cpus.read_text() == "2-3"
    finally:
        gated.gate.set()
        worker.close()


def test_the_worker_retries_when_due_without_any_event(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pod_cgroups, "RETRY_FIRST_S", 0.05)
    root = v2_root(tmp_path, POD)
    cpu_max = root / "kubepods" / f"pod{POD.uid}" / "cpu.max"
    cpu_max.unlink()
    observer = Counting()
    worker = PodCgroupWorker(PodCgroups(root, observer))
    try:
        worker.submit({"sb": wanted()})
        assert worker.wait("sb", 30) and "sb" in worker.failed and worker.version == 1
        cpu_max.write_text("200000 100000\n")
        wait_until(lambda: not worker.failed, 30, "the retry to write cpu.max")
        assert cpu_max.read_text() == "max 100000" and observer.failures >= 1 and worker.version == 2
    finally:
        worker.close()


def test_closing_the_worker_writes_what_was_submitted(tmp_path: Path) -> None:
    root = v2_root(tmp_path, POD)
    worker = PodCgroupWorker(PodCgroups(root))
    worker.submit({"sb": wanted(cpus="2-3")})
    worker.close()
    assert (root / "kubepods" / f"pod{POD.uid}" / "cpuset.cpus").read_text() == "2-3"
