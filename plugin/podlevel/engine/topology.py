"""The machine model the engine allocates on: CPUs, cores, sockets, NUMA nodes, distances, memory.

Built once (from sysfs by `podlevel.sysfs`, or from a synthetic spec here) and never mutated. Every grouping
the allocation algorithms ask for (CPUs of a NUMA node, of a socket, of a core, of an uncore cache) is
precomputed as a CPUSet so lookups cost nothing on the admission path.

Invariants: every CPU belongs to exactly one core, socket, NUMA node and uncore cache; a core never spans two
NUMA nodes; core ids are the smallest CPU id among the core's threads (unique machine-wide, as the kubelet's
`getUniqueCoreID` makes them); NUMA node ids are those Linux reports.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final, TypedDict

from podlevel.engine.cpuset import CPUSet
from podlevel.engine.errors import InputError
from podlevel.engine.limits import MAX_CPUS, MAX_NUMA_NODES, quote
from podlevel.engine.quantity import bytes_of, format_bytes

DEFAULT_MEMORY_PER_NODE: Final = 16 * 2**30
LOCAL_DISTANCE: Final = 10
REMOTE_DISTANCE: Final = 20  # the ACPI SLIT value QEMU and most two-socket BIOSes report for the other socket
SAME_SOCKET_DISTANCE: Final = 12  # sub-NUMA clustering nodes on one socket, as SNC BIOSes report


@dataclass(frozen=True, slots=True)
class CPUInfo:
    cpu: int
    core: int
    socket: int
    numa_node: int
    uncore_cache: int


@dataclass(frozen=True, slots=True)
class NUMANode:
    id: int
    memory: int
    """MemTotal of the node in bytes (hugepages included, as the kubelet's machine info has it)."""
    hugepages: Mapping[int, int] = field(default_factory=dict)
    """page size in bytes -> number of pages."""
    distances: Mapping[int, int] = field(default_factory=dict)
    """node id -> SLIT distance (self included)."""


class Topology:
    """An immutable machine description with precomputed CPU groupings."""

    def __init__(self, cpus: Iterable[CPUInfo], numa_nodes: Iterable[NUMANode]) -> None:
        self.cpus: tuple[CPUInfo, ...] = tuple(sorted(cpus, key=lambda c: c.cpu))
        self.numa_nodes: tuple[NUMANode, ...] = tuple(sorted(numa_nodes, key=lambda n: n.id))
        self.numa_node_ids: tuple[int, ...] = tuple(n.id for n in self.numa_nodes)
        if not self.cpus:
            raise InputError("topology", "the machine has no CPUs")
        node_ids = {n.id for n in self.numa_nodes}
        self.all_cpus = CPUSet(c.cpu for c in self.cpus)
        if len(self.all_cpus) != len(self.cpus):
            twice = sorted({a.cpu for a, b in itertools.pairwise(self.cpus) if a.cpu == b.cpu})
            raise InputError("topology", f"a CPU id appears twice: {', '.join(map(str, twice))}")
        by_numa: dict[int, set[int]] = {n: set() for n in node_ids}
        by_socket: dict[int, set[int]] = {}
        by_core: dict[int, set[int]] = {}
        by_uncore: dict[int, set[int]] = {}
        for c in self.cpus:
            if c.numa_node not in node_ids:
                raise InputError(
                    "topology", f"CPU {c.cpu} is on NUMA node {c.numa_node}, which is not described"
                )
            by_numa[c.numa_node].add(c.cpu)
            by_socket.setdefault(c.socket, set()).add(c.cpu)
            by_core.setdefault(c.core, set()).add(c.cpu)
            by_uncore.setdefault(c.uncore_cache, set()).add(c.cpu)
        self.info: Mapping[int, CPUInfo] = MappingProxyType({c.cpu: c for c in self.cpus})
        self.cpus_by_numa: Mapping[int, CPUSet] = _freeze(by_numa)
        self.cpus_by_socket: Mapping[int, CPUSet] = _freeze(by_socket)
        self.cpus_by_core: Mapping[int, CPUSet] = _freeze(by_core)
        self.cpus_by_uncore: Mapping[int, CPUSet] = _freeze(by_uncore)
        self.numa_by_id: Mapping[int, NUMANode] = MappingProxyType({n.id: n for n in self.numa_nodes})
        numa_of_socket: dict[int, set[int]] = {}
        socket_of_numa: dict[int, int] = {}
        first_of_core: dict[int, CPUInfo] = {}
        for c in self.cpus:
            numa_of_socket.setdefault(c.socket, set()).add(c.numa_node)
            socket_of_numa[c.numa_node] = c.socket
            first = first_of_core.setdefault(c.core, c)
            if first.numa_node != c.numa_node:
                raise InputError(
                    "topology",
                    f"core {c.core} spans NUMA nodes {first.numa_node} and {c.numa_node} (CPU {first.cpu} "
                    f"is on node {first.numa_node}, CPU {c.cpu} on node {c.numa_node}); a core's threads "
                    "share one node",
                )
        self.numa_nodes_of_socket: Mapping[int, tuple[int, ...]] = MappingProxyType(
            {s: tuple(sorted(ns)) for s, ns in numa_of_socket.items()}
        )
        self.socket_of_numa: Mapping[int, int] = MappingProxyType(socket_of_numa)
        threads = {len(cs) for cs in self.cpus_by_core.values()}
        self.cpus_per_core = max(threads)

    @property
    def num_cpus(self) -> int:
        return len(self.cpus)

    @property
    def num_cores(self) -> int:
        return len(self.cpus_by_core)

    @property
    def num_sockets(self) -> int:
        return len(self.cpus_by_socket)

    @property
    def num_numa_nodes(self) -> int:
        return len(self.numa_nodes)

    def core_siblings(self, cpus: CPUSet) -> CPUSet:
        """`cpus` plus every SMT sibling of each of them."""
        mask = 0
        for cpu in cpus:
            mask |= self.cpus_by_core[self.info[cpu].core].mask
        return CPUSet.from_mask(mask)

    def numa_nodes_of(self, cpus: CPUSet) -> tuple[int, ...]:
        return tuple(n for n, node_cpus in self.cpus_by_numa.items() if not node_cpus.is_disjoint(cpus))

    def distance(self, a: int, b: int) -> int:
        distances = self.numa_by_id[a].distances
        if b in distances:
            return distances[b]
        return LOCAL_DISTANCE if a == b else REMOTE_DISTANCE

    def describe(self) -> str:
        return (
            f"{self.num_sockets} socket(s), {self.num_numa_nodes} NUMA node(s), {self.num_cores} cores, "
            f"{self.num_cpus} CPUs"
        )


def _freeze(groups: Mapping[int, set[int]]) -> Mapping[int, CPUSet]:
    return MappingProxyType({k: CPUSet(v) for k, v in sorted(groups.items())})


_SPEC_RULE: Final = "topology spec"
_SPEC_KEYS: Final = ("sockets", "nodes-per-socket", "cores-per-node", "threads-per-core")
_UNCORES_KEY: Final = "uncore-caches-per-node"


class _SyntheticMachine(TypedDict):
    """`synthetic_topology`'s arguments, as a spec gives them."""

    sockets: int
    nodes_per_socket: int
    cores_per_node: int
    threads_per_core: int
    uncore_caches_per_node: int
    memory_per_node: int
    hugepages: Mapping[int, int]


def from_spec(spec: str) -> Topology:
    """Build a machine from a spec:
    `sockets=S,nodes-per-socket=N,cores-per-node=C,threads-per-core=T[,memory-per-node=Q]`.

    Optional keys: `hugepages-<size>=<quantity per node>` (e.g. `hugepages-2Mi=1Gi`) and
    `uncore-caches-per-node=U`. The machine is `synthetic_topology`'s.
    """
    return synthetic_topology(**_parse_spec(spec))


def _parse_spec(spec: str) -> _SyntheticMachine:
    """The spec's values, or InputError naming the key that is missing, repeated, unknown or malformed."""
    values: dict[str, str] = {}
    for item in spec.split(","):
        key, sep, value = item.strip().partition("=")
        if not sep or not value:
            raise InputError(_SPEC_RULE, f"{quote(item)} is not KEY=VALUE (spec {quote(spec)})")
        if key in values:
            raise InputError(_SPEC_RULE, f"{key} is given twice ({quote(values[key])} and {quote(value)})")
        values[key] = value
    counts: dict[str, int] = {}
    for key in _SPEC_KEYS:
        if key not in values:
            raise InputError(_SPEC_RULE, f"{key} is missing (need {', '.join(_SPEC_KEYS)})")
        counts[key] = _positive(key, values.pop(key))
    nodes = counts["sockets"] * counts["nodes-per-socket"]
    cpus = nodes * counts["cores-per-node"] * counts["threads-per-core"]
    if nodes > MAX_NUMA_NODES or cpus > MAX_CPUS:
        raise InputError(_SPEC_RULE, f"{nodes} NUMA nodes and {cpus} CPUs: Linux numbers at most "
                                     f"{MAX_NUMA_NODES} nodes and {MAX_CPUS} CPUs")
    uncores = _positive(_UNCORES_KEY, values.pop(_UNCORES_KEY)) if _UNCORES_KEY in values else 1
    memory = bytes_of(values.pop("memory-per-node", DEFAULT_MEMORY_PER_NODE))
    hugepages: dict[int, int] = {}
    for key in [k for k in values if k.startswith("hugepages-")]:
        page = bytes_of(key.removeprefix("hugepages-"))
        total = bytes_of(values.pop(key))
        if page == 0 or total % page:
            raise InputError(
                _SPEC_RULE,
                f"{key}: {format_bytes(total)} per node is not a whole number of {format_bytes(page)} pages",
            )
        hugepages[page] = total // page
    if values:
        known = ", ".join((*_SPEC_KEYS, _UNCORES_KEY, "memory-per-node", "hugepages-<size>"))
        raise InputError(_SPEC_RULE, f"unknown key(s) {', '.join(sorted(values))} (known: {known})")
    return _SyntheticMachine(
        sockets=counts["sockets"],
        nodes_per_socket=counts["nodes-per-socket"],
        cores_per_node=counts["cores-per-node"],
        threads_per_core=counts["threads-per-core"],
        uncore_caches_per_node=uncores,
        memory_per_node=memory,
        hugepages=hugepages,
    )


def _positive(key: str, raw: str) -> int:
    digits = raw.isascii() and raw.isdigit()
    if digits and len(raw) > 9:
        raise InputError(_SPEC_RULE, f"{key} {quote(raw)}: Linux numbers at most {MAX_CPUS} CPUs")
    count = int(raw) if digits else 0
    if count < 1:
        raise InputError(_SPEC_RULE, f"{key} must be a positive integer, got {quote(raw)}")
    return count


def synthetic_topology(
    sockets: int,
    nodes_per_socket: int,
    cores_per_node: int,
    threads_per_core: int,
    *,
    uncore_caches_per_node: int = 1,
    memory_per_node: int = DEFAULT_MEMORY_PER_NODE,
    hugepages: Mapping[int, int] | None = None,
) -> Topology:
    """A regular machine, numbered as Linux numbers common x86 servers; `simulate`, tests and demos use it.

    CPU ids: the first thread of every core in socket, node, core order, then the second threads in the same
    order. Distances: 10 local, 12 between nodes of one socket, 20 across sockets. Every node has
    `memory_per_node` bytes, of which `hugepages` (page size in bytes -> pages per node) are hugepages.
    """
    pages = MappingProxyType(dict(hugepages or {}))
    pages_total = sum(page * count for page, count in pages.items())
    if pages_total > memory_per_node:
        raise InputError(
            _SPEC_RULE,
            f"hugepages exceed memory-per-node: {format_bytes(pages_total)} of hugepages per node, "
            f"memory-per-node is {format_bytes(memory_per_node)}",
        )
    if cores_per_node % uncore_caches_per_node:
        raise InputError(
            _SPEC_RULE,
            f"cores-per-node ({cores_per_node}) must be a multiple of uncore-caches-per-node "
            f"({uncore_caches_per_node})",
        )
    node_count = sockets * nodes_per_socket
    cores_per_socket = nodes_per_socket * cores_per_node
    cores_per_uncore = cores_per_node // uncore_caches_per_node
    total_cores = sockets * cores_per_socket
    cpus: list[CPUInfo] = []
    for core in range(total_cores):
        socket, core_in_socket = divmod(core, cores_per_socket)
        node = socket * nodes_per_socket + core_in_socket // cores_per_node
        uncore = node * uncore_caches_per_node + (core_in_socket % cores_per_node) // cores_per_uncore
        for thread in range(threads_per_core):
            cpus.append(CPUInfo(thread * total_cores + core, core, socket, node, uncore))
    nodes = []
    for node in range(node_count):
        distances = {
            other: LOCAL_DISTANCE if other == node
            else SAME_SOCKET_DISTANCE if other // nodes_per_socket == node // nodes_per_socket
            else REMOTE_DISTANCE
            for other in range(node_count)
        }
        nodes.append(NUMANode(node, memory_per_node, pages, MappingProxyType(distances)))
    return Topology(cpus, nodes)
