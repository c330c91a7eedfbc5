"""The sysfs reader on a real kernel: the guest's /sys must read as the machine hack/vm-run booted.

hack/vm-run gives every NUMA node its own socket, numbers vCPUs socket by socket with SMT siblings adjacent
(QEMU's order, unlike the sibling-last order of `from_spec`), splits memory evenly and sets distances 10/20.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from vm_support import GuestShape

from podlevel.engine.cpuset import CPUSet
from podlevel.sysfs import read_topology, write_tree

pytestmark = pytest.mark.vm

# The kernel keeps its image, page tables and per-node structures out of MemTotal; on these small guests
# that is 3-8 % of a node.
MIN_MEMTOTAL_SHARE = 0.85


def test_numa_nodes_cpus_and_sockets(guest: GuestShape) -> None:
    topology = read_topology()
    per_node = guest.cpus // guest.numa_nodes
    assert topology.all_cpus == CPUSet(range(guest.cpus))
    assert topology.numa_node_ids == tuple(range(guest.numa_nodes))
    for node in range(guest.numa_nodes):
        assert topology.cpus_by_numa[node] == CPUSet(range(node * per_node, (node + 1) * per_node))
        assert topology.numa_nodes_of_socket[topology.socket_of_numa[node]] == (node,)
    assert topology.num_sockets == guest.numa_nodes


def test_smt_siblings_and_unique_core_ids(guest: GuestShape) -> None:
    topology = read_topology()
    threads = guest.threads_per_core
    assert topology.cpus_per_core == threads
    assert topology.num_cores == guest.cpus // threads
    for cpu in range(guest.cpus):
        first = cpu - cpu % threads
        assert topology.info[cpu].core == first
        assert topology.core_siblings(CPUSet([cpu])) == CPUSet(range(first, first + threads))


def test_distances_and_memory_per_node(guest: GuestShape) -> None:
    topology = read_topology()
    for node in topology.numa_nodes:
        assert dict(node.distances) == {o: 10 if o == node.id else 20 for o in range(guest.numa_nodes)}
        assert MIN_MEMTOTAL_SHARE * guest.memory_per_node <= node.memory <= guest.memory_per_node
        assert 2 * 2**20 in node.hugepages
        assert set(node.hugepages.values()) == {0}


def test_uncore_caches_stay_within_a_socket(guest: GuestShape) -> None:
    topology = read_topology()
    for cpus in topology.cpus_by_uncore.values():
        assert len({topology.info[cpu].socket for cpu in cpus}) == 1


def test_the_guest_machine_survives_a_written_tree(guest: GuestShape, tmp_path: Path) -> None:
    real = read_topology()
    copy = read_topology(write_tree(real, tmp_path))
    assert copy.cpus == real.cpus
    assert copy.numa_nodes == real.numa_nodes
