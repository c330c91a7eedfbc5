"""The synthetic machine spec and the Topology groupings the allocators rely on."""

from __future__ import annotations

import pytest

from podlevel.engine.cpuset import CPUSet
from podlevel.engine.errors import InputError
from podlevel.engine.topology import CPUInfo, NUMANode, Topology, from_spec


def test_linux_numbering_first_threads_then_siblings() -> None:
    t = from_spec("sockets=2,nodes-per-socket=2,cores-per-node=2,threads-per-core=2,memory-per-node=8Gi")
    assert t.num_cpus == 16 and t.num_cores == 8 and t.num_sockets == 2 and t.num_numa_nodes == 4
    assert str(t.cpus_by_numa[0]) == "0-1,8-9"
    assert str(t.cpus_by_numa[3]) == "6-7,14-15"
    assert str(t.cpus_by_socket[1]) == "4-7,12-15"
    assert str(t.cpus_by_core[5]) == "5,13"
    assert t.cpus_per_core == 2
    assert t.numa_nodes_of_socket[1] == (2, 3)
    assert t.socket_of_numa[2] == 1
    assert t.numa_by_id[1].memory == 8 * 2**30
    assert [t.distance(0, n) for n in range(4)] == [10, 12, 20, 20]
    assert t.core_siblings(CPUSet([3])) == CPUSet([3, 11])
    assert t.numa_nodes_of(CPUSet([1, 14])) == (0, 3)


def test_uncore_caches_and_hugepages() -> None:
    t = from_spec("sockets=1,nodes-per-socket=1,cores-per-node=4,threads-per-core=1,"
                  "uncore-caches-per-node=2,hugepages-2Mi=1Gi")
    assert [str(c) for c in t.cpus_by_uncore.values()] == ["0-1", "2-3"]
    assert t.numa_by_id[0].hugepages == {2 * 2**20: 512}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("sockets=1,nodes-per-socket=1,cores-per-node=2", "threads-per-core is missing"),
        ("sockets=0,nodes-per-socket=1,cores-per-node=2,threads-per-core=1",
         "sockets must be a positive integer, got '0'"),
        ("sockets=1,nodes-per-socket=1,cores-per-node=2,threads-per-core=1,colour=red",
         r"unknown key\(s\) colour \(known: sockets, "),
        ("sockets=1,sockets=2", r"sockets is given twice \('1' and '2'\)"),
        ("sockets", "not KEY=VALUE"),
        ("sockets=1,nodes-per-socket=1,cores-per-node=2,threads-per-core=1,memory-per-node=1Gi,"
         "hugepages-1Gi=2Gi",
         "hugepages exceed memory-per-node: 2Gi of hugepages per node, memory-per-node is 1Gi"),
        ("sockets=1,nodes-per-socket=1,cores-per-node=3,threads-per-core=1,uncore-caches-per-node=2",
         r"cores-per-node \(3\) must be a multiple of uncore-caches-per-node \(2\)"),
        ("sockets=1,nodes-per-socket=1,cores-per-node=2,threads-per-core=1,hugepages-2Mi=3Mi",
         "hugepages-2Mi: 3Mi per node is not a whole number of 2Mi pages"),
    ],
    ids=["missing", "zero", "unknown", "twice", "no-value", "hugepages", "uncore", "pages"],
)
def test_bad_specs_name_the_rule(spec: str, message: str) -> None:
    with pytest.raises(InputError, match=message) as err:
        from_spec(spec)
    assert err.value.rule == "topology spec"


def test_inconsistent_machines_are_refused() -> None:
    with pytest.raises(InputError, match="not described"):
        Topology([CPUInfo(0, 0, 0, 1, 0)], [NUMANode(0, 2**30)])
    with pytest.raises(InputError, match=r"appears twice: 0$"):
        Topology([CPUInfo(0, 0, 0, 0, 0), CPUInfo(0, 0, 0, 0, 0)], [NUMANode(0, 2**30)])
    spans = r"spans NUMA nodes 0 and 1 \(CPU 0 is on node 0, CPU 1 on node 1\)"
    with pytest.raises(InputError, match=spans):
        Topology([CPUInfo(0, 0, 0, 0, 0), CPUInfo(1, 0, 0, 1, 0)], [NUMANode(0, 2**30), NUMANode(1, 2**30)])
