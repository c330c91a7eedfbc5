"""The torture's oracle on hand-made checkpoints and cgroup readings: a consistent node passes, and each
broken fact is reported once, as its kind, naming the CPUs and owners involved.

The node: CPUs 0-3, CPU 0 reserved; pod `fast` holds the bubble 1-2 with `main` exclusive on 1 and `side` in
the pod shared pool (2); pod `web` runs in the node shared pool 0,3."""

from __future__ import annotations

import json
from collections.abc import Mapping

import pytest

from podlevel.engine.cpuset import CPUSet
from podlevel.state.formats import CPUCheckpoint, encode
from testbed.invariants import (
    CHECKPOINT,
    DOUBLE,
    DRIFT,
    STALE,
    UNOWNED,
    Checks,
    ContainerState,
    Observation,
    PodState,
    Violation,
    check,
)

FAST = "11111111-1111-4111-8111-111111111111"
WEB = "22222222-2222-4222-8222-222222222222"


def cpus(text: str) -> CPUSet:
    return CPUSet.parse(text)


def checkpoint(default: str = "0,3", entries: Mapping[str, Mapping[str, str]] | None = None,
               bubbles: Mapping[str, str] | None = None) -> bytes:
    entries = {FAST: {"main": "1"}} if entries is None else entries
    bubbles = {FAST: "1-2"} if bubbles is None else bubbles
    by_pod = {pod: {name: cpus(c) for name, c in ctrs.items()} for pod, ctrs in entries.items()}
    by_bubble = {pod: cpus(c) for pod, c in bubbles.items()}
    return encode(CPUCheckpoint("static", cpus(default), by_pod, by_bubble))


def pods(fast_cgroup: str | None = "1-2", *extra: PodState) -> dict[str, PodState]:
    found = {
        FAST: PodState(FAST, "fast", pod_level=True, exclusive=frozenset({"main"}),
                       cgroup_cpus=cpus(fast_cgroup) if fast_cgroup is not None else None),
        WEB: PodState(WEB, "web"),
    }
    return {**found, **{pod.uid: pod for pod in extra}}


def running(main: str = "1", side: str = "2", web: str = "0,3", *, main_quota_off: bool = True
            ) -> tuple[ContainerState, ...]:
    return (ContainerState(FAST, "main", "a" * 64, cpus(main), main_quota_off),
            ContainerState(FAST, "side", "b" * 64, cpus(side), False),
            ContainerState(WEB, "server", "c" * 64, cpus(web), False))


def observe(cpu_file: bytes | None = None, **changes: object) -> Observation:
    fields: dict[str, object] = {
        "online": cpus("0-3"), "reserved": cpus("0"),
        "cpu_file": checkpoint() if cpu_file is None else cpu_file, "memory_file": None, "pods": pods(),
        "containers": running(),
    }
    fields.update(changes)
    return Observation(**fields)  # type: ignore[arg-type]


def kinds(found: list[Violation]) -> list[str]:
    return [v.kind for v in found]


def test_a_consistent_node_passes() -> None:
    assert check(observe()) == []


def test_kubelet_style_entries_for_pod_shared_containers_pass() -> None:
    """The kubelet records the pod shared pool as the entry of every container in it."""
    assert check(observe(checkpoint(entries={FAST: {"main": "1", "side": "2"}}))) == []


def test_a_pod_shared_entry_that_is_not_the_pool_is_drift() -> None:
    found = check(observe(checkpoint(entries={FAST: {"main": "1", "side": "1-2"}})))
    assert kinds(found) == [DRIFT]
    assert "checkpoint entry 1-2" in found[0].text and "pod shared pool 2" in found[0].text


def test_standard_init_entries_are_reused_not_double_held() -> None:
    with_init = PodState(FAST, "fast", pod_level=True, exclusive=frozenset({"main", "setup"}),
                         standard_init=frozenset({"setup"}), cgroup_cpus=cpus("1-2"))
    reused = checkpoint(entries={FAST: {"main": "1", "setup": "1"}})
    assert check(observe(reused, pods=pods("1-2", with_init))) == []


def test_two_bubbles_on_one_cpu() -> None:
    other = "33333333-3333-4333-8333-333333333333"
    found = check(observe(checkpoint(bubbles={FAST: "1-2", other: "2"}),
                          pods=pods("1-2", PodState(other, "other", pod_level=True))))
    assert kinds(found) == [DOUBLE]
    assert found[0].text == (f"CPU 2 held by pod fast ({FAST}) bubble and by pod other ({other}) bubble")


def test_exclusive_entry_outside_its_bubble_and_bubble_in_the_shared_pool() -> None:
    found = check(observe(checkpoint(default="0,2-3", entries={FAST: {"main": "3"}}),
                          containers=running(main="3", side="1-2", web="0,2-3")))
    assert kinds(found) == [DOUBLE, DOUBLE]
    assert "exclusive entry main" in found[0].text and "CPU 3 outside the pod's bubble 1-2" in found[0].text
    assert "CPU 2 held by pod fast" in found[1].text and "node shared pool 0,2-3" in found[1].text


def test_node_exclusive_entries_overlapping_and_on_a_reserved_cpu() -> None:
    found = check(observe(checkpoint(default="3", entries={WEB: {"server": "0-1"}, FAST: {"main": "1"}},
                                     bubbles={}),
                          containers=()))
    assert kinds(found) == [DOUBLE, DOUBLE, UNOWNED]
    assert found[0].text.startswith("CPU 1 held by container main")
    assert found[1].text.startswith("reserved CPU 0 held by container server")
    assert found[2].text.startswith("CPU 2 is in no set")


def test_a_cpu_in_no_set() -> None:
    found = check(observe(checkpoint(default="0")))
    assert kinds(found) == [UNOWNED, DRIFT]
    assert found[0].text.startswith("CPU 3 is in no set")


def test_a_cpu_that_is_not_online() -> None:
    found = check(observe(checkpoint(default="0,3-4"), containers=running(web="0,3-4")))
    assert kinds(found) == [UNOWNED]
    assert "CPU 4 is in the checkpoint but not online" in found[0].text


@pytest.mark.parametrize(("changes", "says"), [
    ({"web": "0-3"}, "container server (cccccccccccc) of pod web ({web}) runs on CPUs 0-3, the node shared "
                     "pool is 0,3"),
    ({"side": "1-2"}, "container side (bbbbbbbbbbbb) of pod fast ({fast}) runs on CPUs 1-2, the pod shared "
                      "pool is 2"),
    ({"main_quota_off": False},
     "container main (aaaaaaaaaaaa) of pod fast ({fast}) holds its exclusive entry 1 but its CFS quota "
     "is on"),
])
def test_containers_that_drift(changes: dict[str, object], says: str) -> None:
    found = check(observe(containers=running(**changes)))  # type: ignore[arg-type]
    assert [str(v) for v in found] == [f"(c) drift: {says.format(web=WEB, fast=FAST)}"]


def test_a_bubble_pod_container_without_an_entry_runs_on_the_whole_pool() -> None:
    """With no exclusive entry left, the pod shared pool is the whole bubble."""
    shared_only = PodState(FAST, "fast", pod_level=True, cgroup_cpus=cpus("1-2"))
    containers = running(main="1-2", side="1-2", main_quota_off=False)
    assert check(observe(checkpoint(entries={}), containers=containers, pods=pods("1-2", shared_only))) == []


def test_a_checkpoint_that_does_not_verify() -> None:
    broken = json.loads(checkpoint())
    broken["dataChecksum"] += 1
    found = check(observe(json.dumps(broken).encode()))
    assert kinds(found) == [CHECKPOINT]
    assert found[0].text.startswith("cpu_manager_state does not decode: bad checksum")


def test_a_bad_legacy_part_fails_verification_but_the_data_is_checked() -> None:
    broken = json.loads(checkpoint())
    broken["checksum"] += 1
    found = check(observe(json.dumps(broken).encode()))
    assert kinds(found) == [CHECKPOINT]
    assert found[0].text.startswith("cpu_manager_state does not verify: legacy part")


def test_missing_and_corrupt_files() -> None:
    found = check(Observation(cpus("0-3"), cpus("0"), None, b"{", pods(), running(),
                              ("cpu_manager_state.corrupt-20250101T000000Z",)))
    assert [str(v) for v in found] == [
        "(d) checkpoint: the plugin moved cpu_manager_state.corrupt-20250101T000000Z aside as corrupt",
        "(d) checkpoint: memory_manager_state does not decode: truncated: the JSON ends early "
        "(Expecting property name enclosed in double quotes at byte 1)",
        "(d) checkpoint: cpu_manager_state is missing while pod-level pods run",
    ]


def test_no_checkpoint_is_fine_while_only_node_pool_pods_run() -> None:
    assert check(Observation(cpus("0-3"), cpus("0"), None, None, {WEB: PodState(WEB, "web")},
                             running()[2:])) == []


def test_a_pod_cgroup_that_is_not_the_bubble() -> None:
    obs = observe(pods=pods(fast_cgroup="1-3"))
    assert [str(v) for v in check(obs)] == [
        f"(e) pod cgroup: the pod cgroup of pod fast ({FAST}) holds CPUs 1-3, its bubble is 1-2"]
    assert check(obs, Checks(pod_cgroups=False)) == []
    assert check(observe(pods=pods(fast_cgroup=None))) == []


def test_a_pod_the_runtime_no_longer_has() -> None:
    found = check(observe(pods={WEB: PodState(WEB, "web")}, containers=running()[2:]))
    assert kinds(found) == [STALE]
    assert found[0].text == f"the checkpoint holds pod {FAST}, which the runtime no longer has"
