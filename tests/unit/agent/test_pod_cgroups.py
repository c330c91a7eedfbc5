"""agent.pod_cgroups: each wanted pod cgroup written once, a failure retried with backoff, an unsafe parent
refused for good, a pod no longer wanted forgotten; on a cgroup v2 tree of real files read back."""

from __future__ import annotations

from pathlib import Path

from podlevel.agent.events import Observer
from podlevel.agent.pod_cgroups import RETRY_FIRST_S, PodCgroups
from podlevel.agent.records import PodCgroupSettings
from podlevel.engine.cpuset import CPUSet
from support.builders import fast_path, v2_root

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

    cgroups.sync({"sb": wanted()}, ["sb"])

    assert (pod_dir / "cpuset.cpus").read_text() == "2-3"
    assert (pod_dir / "cpu.max").read_text() == "max 100000"
    (pod_dir / "cpuset.cpus").write_text("0-1")
    cgroups.sync({"sb": wanted()}, ["sb"])
    assert (pod_dir / "cpuset.cpus").read_text() == "0-1", "unchanged wants are not written again"


def test_a_failure_waits_its_backoff_and_a_change_of_wants_is_tried_at_once(tmp_path: Path) -> None:
    root = v2_root(tmp_path, POD)
    (root / "kubepods" / f"pod{POD.uid}" / "cpu.max").unlink()
    now, observer = [0.0], Counting()
    cgroups = PodCgroups(root, observer, clock=lambda: now[0])

    cgroups.sync({"sb": wanted()}, ["sb"])
    cgroups.sync({"sb": wanted()}, [])
    assert (observer.failures, cgroups.pending) == (1, True)
    now[0] += RETRY_FIRST_S
    cgroups.sync({"sb": wanted()}, [])
    assert observer.failures == 2
    cgroups.sync({"sb": wanted(cpus="4-5")}, ["sb"])
    assert observer.failures == 3, "new wants are tried at once"


def test_an_unsafe_parent_is_refused_for_good_and_a_gone_pod_forgotten(tmp_path: Path) -> None:
    root = v2_root(tmp_path, POD)
    now, observer = [0.0], Counting()
    cgroups = PodCgroups(root, observer, clock=lambda: now[0])

    cgroups.sync({"sb": wanted(parent="/../escape")}, ["sb"])
    assert "sb" in cgroups.failed and observer.failures == 1
    now[0] += 3600
    cgroups.sync({"sb": wanted(parent="/../escape")}, ["sb"])
    assert observer.failures == 1, "refused for good: not tried again until its wants change"

    cgroups.sync({}, ["sb"])
    assert (cgroups.failed, cgroups.pending) == ({}, False)


def test_a_limited_sync_writes_that_many_and_returns_the_rest(tmp_path: Path) -> None:
    """A restart leaves every pod's cgroup to write: the handler spreads them over loop steps this way."""
    pods = [fast_path(f"p{i}") for i in range(5)]
    roots = [v2_root(tmp_path / pod.name, pod) for pod in pods]
    root = tmp_path / "node"
    (root / "kubepods").mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpuset cpu memory\n")
    for pod, tree in zip(pods, roots, strict=True):
        (tree / "kubepods" / f"pod{pod.uid}").rename(root / "kubepods" / f"pod{pod.uid}")
    wants = {f"sb-{pod.name}": PodCgroupSettings(f"pod default/{pod.name}", pod.uid,
                                                 f"/kubepods/pod{pod.uid}", CPUSet.parse("2-3"), (0,), True,
                                                 100000) for pod in pods}
    cgroups = PodCgroups(root)

    left = cgroups.sync(wants, wants, limit=2)
    written = {sid for sid, want in wants.items()
               if (root / "kubepods" / f"pod{want.pod_uid}" / "cpuset.cpus").read_text() == "2-3"}
    assert (len(written), left) == (2, wants.keys() - written)
    last = cgroups.sync(wants, left, limit=2)
    assert len(last) == 1 and last < left
    assert cgroups.sync(wants, last) == set()
    assert all((root / "kubepods" / f"pod{w.pod_uid}" / "cpuset.cpus").read_text() == "2-3"
               for w in wants.values())
