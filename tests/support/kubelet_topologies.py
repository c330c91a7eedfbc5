"""The machines of the kubelet's CPU manager tests (`cpumanager/policy_test.go`) as engine topologies.

Where the kubelet numbers CPUs the way `from_spec` does, the spec is used; the others are listed CPU by CPU.
Core ids here are the lowest CPU id of the core, which orders cores the same way the kubelet's ids do on
every machine below.
"""

from __future__ import annotations

from collections.abc import Callable

from podlevel.engine.topology import CPUInfo, NUMANode, Topology, from_spec


def _machine(num_cpus: int, place: Callable[[int], tuple[int, int, int, int]]) -> Topology:
    """`place(cpu)` gives (kubelet core id, socket, NUMA node, uncore cache) of each CPU."""
    placed = {cpu: place(cpu) for cpu in range(num_cpus)}
    first_cpu: dict[int, int] = {}
    for cpu, (core, _, _, _) in placed.items():
        first_cpu.setdefault(core, cpu)
    cpus = [
        CPUInfo(cpu, first_cpu[core], socket, numa, uncore)
        for cpu, (core, socket, numa, uncore) in placed.items()
    ]
    nodes = [NUMANode(n, 16 * 2**30) for n in sorted({numa for _, _, numa, _ in placed.values()})]
    return Topology(cpus, nodes)


SINGLE_HT = from_spec("sockets=1,nodes-per-socket=1,cores-per-node=4,threads-per-core=2")
"""topoSingleSocketHT: 8 CPUs, cores {0,4} {1,5} {2,6} {3,7}."""

DUAL_HT = _machine(12, lambda cpu: (cpu % 6, cpu % 6 % 2, cpu % 6 % 2, 0))
"""topoDualSocketHT: socket 0 = cores {0,6} {2,8} {4,10}, socket 1 = cores {1,7} {3,9} {5,11}."""

DUAL_NO_HT = from_spec("sockets=2,nodes-per-socket=1,cores-per-node=4,threads-per-core=1")
"""topoDualSocketNoHT: CPUs 0-3 on socket 0, 4-7 on socket 1."""

TRIPLE_HT = _machine(18, lambda cpu: (cpu // 2, (1, 0, 2)[cpu // 6], (1, 0, 2)[cpu // 6], 0))
"""topoTripleSocketHT: cores are CPU pairs; CPUs 0-5 on socket 1, 6-11 on socket 0, 12-17 on socket 2."""

MULTI_NUMA_HT = from_spec("sockets=2,nodes-per-socket=2,cores-per-node=10,threads-per-core=2")
"""topoDualSocketMultiNumaPerSocketHT: NUMA n = CPUs 10n..10n+9 and their siblings +40."""

SOCKETS_PER_NUMA_HT = _machine(80, lambda cpu: (cpu % 40, cpu % 40 // 10, cpu % 40 // 20, 0))
"""fakeTopoMultiSocketDualSocketPerNumaHT: 4 sockets of 10 cores, 2 sockets per NUMA node, siblings +40."""

LARGE_HT = from_spec("sockets=2,nodes-per-socket=4,cores-per-node=16,threads-per-core=2")
"""topoDualSocketMultiNumaPerSocketHTLarge: 256 CPUs, 8 NUMA nodes of 16 cores, siblings +128."""

UNCORE_1S = _machine(16, lambda cpu: (cpu, 0, 0, cpu // 4))
"""topoUncoreSingleSocketNoSMT: 16 cores, 4 uncore caches of 4."""

UNCORE_2S = _machine(16, lambda cpu: (cpu, cpu // 8, cpu // 8, cpu // 4))
"""topoUncoreDualSocketNoSMT: 2 sockets of 2 uncore caches of 4 cores."""

UNCORE_NUMA = _machine(16, lambda cpu: (cpu, 0, cpu // 8, cpu // 4))
"""topoUncoreSingleSocketMultiNuma: 1 socket, 2 NUMA nodes, 4 uncore caches of 4 cores."""

UNCORE_SMT = _machine(16, lambda cpu: (cpu % 8, 0, 0, cpu % 8 // 4))
"""topoUncoreSingleSocketSMT: 8 cores {0,8}..{7,15}, uncore 0 = cores 0-3, uncore 1 = cores 4-7."""
