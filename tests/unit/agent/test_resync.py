"""agent.resync: where a restarted plugin may put a running pod back, narrowest first, and what it held."""

from __future__ import annotations

from podlevel.agent.records import Observed
from podlevel.agent.resync import Confinement, held_cpus, recorded_cpus
from podlevel.engine.cfs import UNLIMITED_QUOTA
from podlevel.engine.cpu_policy import CPUState
from podlevel.engine.cpuset import CPUSet
from podlevel.engine.topology import from_spec
from support.builders import fast_path

TWO_NODES = from_spec("sockets=1,nodes-per-socket=2,cores-per-node=4,threads-per-core=1")


def test_confinements_are_tried_from_its_cpus_to_anywhere() -> None:
    held = CPUSet.parse("1-2")
    assert [c.within(held, TWO_NODES) for c in Confinement] == [held, held, CPUSet.parse("0-3"), None]
    assert [c.within(None, TWO_NODES) for c in Confinement] == [None, None, None, None]


def test_held_cpus_count_every_container_of_a_pod_level_pod_and_only_exclusive_ones_otherwise() -> None:
    pod = fast_path()
    rows = [Observed("a", "s", "app", CPUSet.parse("2"), (0,), UNLIMITED_QUOTA),
            Observed("b", "s", "log", CPUSet.parse("3"), (0,), 50_000),
            Observed("c", "s", "debugger", CPUSet.parse("7"), (1,), None)]
    assert held_cpus(pod, rows, pod_level=True) == CPUSet.parse("2-3")
    assert held_cpus(pod, rows, pod_level=False) == CPUSet.parse("2")
    assert held_cpus(pod, [], pod_level=True) is None


def test_recorded_cpus_are_the_bubble_else_the_exclusive_slices() -> None:
    recorded = CPUState(default=CPUSet.parse("0-7"),
                        entries={"p": {"a": CPUSet.parse("4"), "b": CPUSet.parse("6")}},
                        pod_entries={"q": CPUSet.parse("1-2")})
    assert (recorded_cpus(recorded, "q"), recorded_cpus(recorded, "p"), recorded_cpus(recorded, "r")) == (
        CPUSet.parse("1-2"), CPUSet.parse("4,6"), None)
