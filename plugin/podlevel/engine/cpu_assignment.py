"""Which free CPUs satisfy a request for N: the kubelet's topology-aware best fit, in the kubelet's order.

`CPUAccumulator` holds the free CPUs, the CPUs taken so far and how many are still needed, and takes whole
units largest first, returning as soon as the request is met:

1. whole NUMA nodes then whole sockets when sockets >= NUMA nodes (the kubelet's "numaFirst"), else whole
   sockets then whole NUMA nodes;
2. whole uncore caches, or the fewest cores of one uncore cache, when `prefer_uncore`;
3. whole cores, unless `spread` (distribute-cpus-across-cores);
4. single CPUs in the sorted CPU order.

Invariants kept:
- One sort rule orders every level (`CPUAccumulator.order`): ascending number of free CPUs, ties by
  ascending id, i.e. best fit, fill the most used unit first. Levels nest: NUMA nodes, then the sockets of
  each, then the cores of each (or sockets, NUMA nodes, cores when sockets come first).
- Packed CPU order: per sorted core, its free CPUs ascending (siblings together, e.g. 0,6,2,8,...). Spread
  order: per sorted socket, its free CPUs ascending (one thread per core first, e.g. 0,2,4,...). This
  follows the kubelet's code; its doc comment on the sorting strategies shows the two swapped.
- A unit is "free" only when every CPU it has is free, and is taken only when at least its size is needed.
- A result is a subset of the available CPUs of exactly the requested size, or `AllocationFailed` is
  raised; the same inputs always give the same CPUs.
- Sets are int bitmasks (bit n = CPU n); lookup tables are built once per topology by `CPULayout`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from podlevel.engine.cpuset import CPUSet
from podlevel.engine.errors import InputError
from podlevel.engine.topology import Topology


class AllocationFailed(Exception):
    """No choice of CPUs satisfies the request. Internal: policies turn it into an admission error."""


def _bits(mask: int) -> Iterator[int]:
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def _masks(groups: Mapping[int, CPUSet]) -> Mapping[int, int]:
    return MappingProxyType({key: cpus.mask for key, cpus in groups.items()})


def _smallest(masks: Mapping[int, int]) -> int:
    return min(mask.bit_count() for mask in masks.values())


def _frozen_groups(groups: Mapping[int, Iterable[int]]) -> Mapping[int, tuple[int, ...]]:
    return MappingProxyType({key: tuple(sorted(set(ids))) for key, ids in sorted(groups.items())})


@dataclass(frozen=True, slots=True)
class CPULayout:
    """Per-topology lookup tables the accumulator walks. Build once per topology with `CPULayout.of`."""

    all_cpus: int
    numa: Mapping[int, int]
    socket: Mapping[int, int]
    core: Mapping[int, int]
    uncore: Mapping[int, int]
    sockets_of_numa: Mapping[int, tuple[int, ...]]
    numa_of_socket: Mapping[int, tuple[int, ...]]
    cores_of_socket: Mapping[int, tuple[int, ...]]
    cores_of_numa: Mapping[int, tuple[int, ...]]
    cores_of_uncore: Mapping[int, tuple[int, ...]]
    uncores_of_numa: Mapping[int, tuple[int, ...]]
    numa_first: bool
    """NUMA nodes are the top level (sockets >= NUMA nodes), as the kubelet's `numaFirst`."""
    cpus_per_core: int
    cpus_per_uncore: int
    """Machine averages, as the kubelet's `CPUsPerCore()`/`CPUsPerUncore()` (CPUs / units, rounded down)."""
    smallest_numa: int
    smallest_socket: int
    smallest_core: int
    smallest_uncore: int
    """The CPU count of the smallest unit of each level: once fewer are needed, no whole unit is taken."""

    @classmethod
    def of(cls, topology: Topology) -> CPULayout:
        sockets_of_numa: dict[int, set[int]] = {}
        numa_of_socket: dict[int, set[int]] = {}
        cores_of_socket: dict[int, set[int]] = {}
        cores_of_numa: dict[int, set[int]] = {}
        cores_of_uncore: dict[int, set[int]] = {}
        uncores_of_numa: dict[int, set[int]] = {}
        for info in topology.cpus:
            sockets_of_numa.setdefault(info.numa_node, set()).add(info.socket)
            numa_of_socket.setdefault(info.socket, set()).add(info.numa_node)
            cores_of_socket.setdefault(info.socket, set()).add(info.core)
            cores_of_numa.setdefault(info.numa_node, set()).add(info.core)
            cores_of_uncore.setdefault(info.uncore_cache, set()).add(info.core)
            uncores_of_numa.setdefault(info.numa_node, set()).add(info.uncore_cache)

        numa = MappingProxyType({n: topology.cpus_by_numa[n].mask for n in sorted(sockets_of_numa)})
        socket, core, uncore = (
            _masks(topology.cpus_by_socket),
            _masks(topology.cpus_by_core),
            _masks(topology.cpus_by_uncore),
        )
        num_cpus = topology.num_cpus
        return cls(
            all_cpus=topology.all_cpus.mask,
            numa=numa,
            socket=socket,
            core=core,
            uncore=uncore,
            sockets_of_numa=_frozen_groups(sockets_of_numa),
            numa_of_socket=_frozen_groups(numa_of_socket),
            cores_of_socket=_frozen_groups(cores_of_socket),
            cores_of_numa=_frozen_groups(cores_of_numa),
            cores_of_uncore=_frozen_groups(cores_of_uncore),
            uncores_of_numa=_frozen_groups(uncores_of_numa),
            numa_first=topology.num_sockets >= len(numa),
            cpus_per_core=num_cpus // len(core),
            cpus_per_uncore=num_cpus // len(uncore),
            smallest_numa=_smallest(numa),
            smallest_socket=_smallest(socket),
            smallest_core=_smallest(core),
            smallest_uncore=_smallest(uncore),
        )

    def take(
        self, available: CPUSet, count: int, *, spread: bool = False, prefer_uncore: bool = False
    ) -> CPUSet:
        """The packed algorithm (the kubelet's `takeByTopologyNUMAPacked`)."""
        return CPUAccumulator(self, available, count, spread=spread).take_packed(prefer_uncore=prefer_uncore)

    def take_distributed(self, available: CPUSet, count: int, group_size: int) -> CPUSet:
        """KEP-2902 (distribute-cpus-across-numa): spread evenly over the fewest NUMA nodes that can."""
        if group_size < 1:
            raise InputError("cpu group size", f"group size must be at least 1, got {group_size}")
        if count % group_size:
            return self.take(available, count)
        acc = CPUAccumulator(self, available, count)
        if acc.is_satisfied():
            return CPUSet()
        acc.fail_if_short()
        plan = acc.plan_distribution(group_size)
        if plan is None:
            return self.take(available, count)
        combo, remainder_nodes = plan
        distribution = count // len(combo) // group_size * group_size
        for node in combo:
            acc.take(self.take(CPUSet.from_mask(acc.free & self.numa[node]), distribution).mask)
        remainder = count - distribution * len(combo)
        while remainder > 0:
            progressed = False
            for node in remainder_nodes:
                if remainder == 0:
                    break
                node_free = acc.free & self.numa[node]
                if node_free.bit_count() < group_size:
                    continue
                acc.take(self.take(CPUSet.from_mask(node_free), group_size).mask)
                remainder -= group_size
                progressed = True
            if not progressed:
                break
        if acc.needed != 0:
            raise AllocationFailed(
                f"accounting error, {acc.needed} CPUs left unallocated out of {count} spread over NUMA nodes "
                f"{combo} in groups of {group_size}"
            )
        return CPUSet.from_mask(acc.result)


class CPUAccumulator:
    """The CPUs still free, the CPUs taken and how many are still needed, for one request."""

    __slots__ = ("free", "layout", "needed", "result", "spread")

    def __init__(self, layout: CPULayout, available: CPUSet, count: int, *, spread: bool = False) -> None:
        if count < 0:
            raise InputError("cpu request", f"cannot take {count} CPUs: a request is 0 or more")
        self.layout = layout
        self.free = available.mask & layout.all_cpus
        self.needed = count
        self.result = 0
        self.spread = spread

    # -- bookkeeping -------------------------------------------------------------------------------

    def take(self, cpus: int) -> None:
        self.result |= cpus
        self.free &= ~cpus
        self.needed -= cpus.bit_count()

    def is_satisfied(self) -> bool:
        return self.needed < 1

    def needs_at_least(self, size: int) -> bool:
        return self.needed >= size

    def fail_if_short(self) -> None:
        needed, available = self.needed, self.free.bit_count()
        if needed > available:
            shortage = f"requested={needed}, available={available}"
            raise AllocationFailed(f"not enough cpus available to satisfy request: {shortage}")

    # -- the one sort rule, and the hierarchy built from it ----------------------------------------
    # Each step orders units by the free CPUs as they were when the step began (the kubelet builds its
    # lists up front); the orders are generated lazily, so a small request sorts only what it visits.

    @staticmethod
    def order(ids: Iterable[int], masks: Mapping[int, int], free: int) -> list[int]:
        """Units of `ids` that have free CPUs, by ascending number of free CPUs, ties by ascending id."""
        return sorted((i for i in ids if masks[i] & free), key=lambda i: ((masks[i] & free).bit_count(), i))

    def _within(
        self,
        parents: Iterable[int],
        children: Mapping[int, tuple[int, ...]],
        masks: Mapping[int, int],
        free: int,
    ) -> Iterator[int]:
        """Each parent's children in order, parent by parent: the nesting of the hierarchy."""
        for parent in parents:
            yield from self.order(children[parent], masks, free)

    def numa_order(self, free: int) -> Iterator[int]:
        layout = self.layout
        if layout.numa_first:
            return iter(self.order(layout.numa, layout.numa, free))
        return self._within(self.socket_order(free), layout.numa_of_socket, layout.numa, free)

    def socket_order(self, free: int) -> Iterator[int]:
        layout = self.layout
        if layout.numa_first:
            return self._within(self.numa_order(free), layout.sockets_of_numa, layout.socket, free)
        return iter(self.order(layout.socket, layout.socket, free))

    def core_order(self, free: int) -> Iterator[int]:
        layout = self.layout
        if layout.numa_first:
            return self._within(self.socket_order(free), layout.cores_of_socket, layout.core, free)
        return self._within(self.numa_order(free), layout.cores_of_numa, layout.core, free)

    def uncore_order(self, free: int) -> Iterator[int]:
        return self._within(self.numa_order(free), self.layout.uncores_of_numa, self.layout.uncore, free)

    def cpu_order(self, free: int) -> Iterator[int]:
        """The free CPUs in the order single CPUs are taken, each unit's CPUs ascending. Packed: core by
        core in `core_order`. Spread: socket by socket in `socket_order`."""
        if self.spread:
            units, masks = self.socket_order(free), self.layout.socket
        else:
            units, masks = self.core_order(free), self.layout.core
        for unit in units:
            yield from _bits(masks[unit] & free)

    def wholly_free(self, units: Iterable[int], masks: Mapping[int, int]) -> Iterator[int]:
        """The units all of whose CPUs are still free."""
        return (unit for unit in units if masks[unit] & ~self.free == 0)

    # -- the steps, largest units first ------------------------------------------------------------

    def _take_whole(
        self, order: Callable[[int], Iterable[int]], masks: Mapping[int, int], smallest: int
    ) -> None:
        """Take each wholly free unit, in `order(free)`, while at least its size is still needed. A request
        smaller than the smallest unit orders nothing."""
        if self.needed < smallest:
            return
        for unit in self.wholly_free(order(self.free), masks):
            if self.needed < smallest:
                return
            if self.needs_at_least(masks[unit].bit_count()):
                self.take(masks[unit])

    def take_full_numa_nodes(self) -> None:
        self._take_whole(self.numa_order, self.layout.numa, self.layout.smallest_numa)

    def take_full_sockets(self) -> None:
        self._take_whole(self.socket_order, self.layout.socket, self.layout.smallest_socket)

    def take_full_first_level(self) -> None:
        if self.layout.numa_first:
            self.take_full_numa_nodes()
        else:
            self.take_full_sockets()

    def take_full_second_level(self) -> None:
        if self.layout.numa_first:
            self.take_full_sockets()
        else:
            self.take_full_numa_nodes()

    def take_partial_uncore(self, uncore: int) -> None:
        """Claim the fewest lowest-id cores of `uncore` whose free CPUs are exactly what is still needed."""
        layout = self.layout
        per_core = layout.cpus_per_core
        cores_needed = -(-self.needed // per_core)
        cores = [c for c in layout.cores_of_uncore[uncore] if layout.core[c] & self.free][:cores_needed]
        cpus = 0
        for c in cores:
            cpus |= layout.core[c] & self.free
        if self.needed % 2 and per_core > 1 and cpus.bit_count() > self.needed:
            cpus ^= 1 << (cpus.bit_length() - 1)  # an odd request needs one thread of the last core only
        if cpus.bit_count() == self.needed:
            self.take(cpus)

    def take_uncore_caches(self) -> None:
        """Whole free uncore caches while a cache's worth is needed, then the rest inside one cache.

        The kubelet retries the whole caches before each cache it tries partially; only the first try can
        take anything (what one pass leaves is larger than what is still needed), so it runs once here.
        """
        layout = self.layout
        uncores = list(self.uncore_order(self.free))
        if uncores and self.needs_at_least(layout.cpus_per_uncore):
            self._take_whole(self.uncore_order, layout.uncore, layout.smallest_uncore)
        for uncore in uncores:
            if self.is_satisfied():
                return
            self.take_partial_uncore(uncore)

    def take_full_cores(self) -> None:
        self._take_whole(self.core_order, self.layout.core, self.layout.smallest_core)

    def take_remaining_cpus(self) -> None:
        taken = 0
        for cpu in itertools.islice(self.cpu_order(self.free), self.needed):
            taken |= 1 << cpu
        self.take(taken)

    def take_packed(self, *, prefer_uncore: bool = False) -> CPUSet:
        if self.is_satisfied():
            return CPUSet()
        self.fail_if_short()
        requested, available = self.needed, self.free.bit_count()
        steps = [self.take_full_first_level, self.take_full_second_level]
        if prefer_uncore:
            steps.append(self.take_uncore_caches)
        if not self.spread:
            steps.append(self.take_full_cores)
        steps.append(self.take_remaining_cpus)
        for step in steps:
            step()
            if self.is_satisfied():
                return CPUSet.from_mask(self.result)
        raise AllocationFailed(
            f"failed to allocate cpus: requested={requested}, available={available}, still {self.needed} "
            f"needed after the last step ({steps[-1].__name__}); every free CPU should be in the core order"
        )

    # -- KEP-2902 planning -------------------------------------------------------------------------

    def numa_range(self, group_size: int) -> tuple[int, int]:
        """Fewest and most NUMA nodes that could hold the request in groups of `group_size`."""
        layout = self.layout
        groups = -(-layout.all_cpus.bit_count() // group_size)
        groups_per_node = -(-groups // len(layout.numa))
        groups_needed = -(-self.needed // group_size)
        nodes_with_free = sum(1 for mask in layout.numa.values() if mask & self.free)
        return -(-groups_needed // groups_per_node), min(groups_needed, nodes_with_free)

    def plan_distribution(self, group_size: int) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """The NUMA nodes to split the request over and those that take the remainder, or None.

        For k = fewest..most nodes, every k-combination of the sorted nodes that can give each node an
        even share is scored by the standard deviation of the CPUs left free on every node with free CPUs
        (rounded to 3 decimals); the lowest score wins, a perfect 0 stops the search early.
        """
        numa = self.layout.numa
        nodes = list(self.numa_order(self.free))
        free_of = {n: (numa[n] & self.free).bit_count() for n in nodes}
        needed = self.needed
        lowest, highest = self.numa_range(group_size)
        for k in range(lowest, highest + 1):
            best: tuple[float, tuple[int, ...], tuple[int, ...]] | None = None
            for combo in itertools.combinations(nodes, k):
                if best is not None and best[0] == 0:
                    break
                if sum(free_of[n] for n in combo) < needed:
                    continue
                if sum(free_of[n] // group_size for n in combo) * group_size < needed:
                    continue
                distribution = needed // k // group_size * group_size
                if any(free_of[n] < distribution for n in combo):
                    continue
                after = dict(free_of)
                for n in combo:
                    after[n] -= distribution
                remainder = needed - distribution * k
                scored = _best_remainder(after, combo, remainder, group_size)
                if scored is not None and (best is None or scored[0] < best[0]):
                    best = (scored[0], combo, scored[1])
            if best is not None:
                return best[1], best[2]
        return None


def _best_remainder(
    after: dict[int, int], combo: tuple[int, ...], remainder: int, group_size: int
) -> tuple[float, tuple[int, ...]] | None:
    """The balance score of `combo` and the nodes that take the remainder, one group at a time."""
    if remainder == 0:
        return _stddev(after.values()), ()
    candidates = tuple(n for n in combo if after[n] >= group_size)
    best: tuple[float, tuple[int, ...]] | None = None
    for k in range(len(candidates), 0, -1):
        for subset in itertools.combinations(candidates, k):
            if sum(after[n] for n in subset) < remainder:
                continue
            trial = dict(after)
            left = remainder
            while left > 0:
                progressed = False
                for n in subset:
                    if left == 0:
                        break
                    if trial[n] < group_size:
                        continue
                    trial[n] -= group_size
                    left -= group_size
                    progressed = True
                if not progressed:
                    break
            if left > 0:
                continue  # the kubelet would spin here; the subset simply cannot take the remainder
            score = _stddev(trial.values())
            if best is None or score < best[0]:
                best = (score, subset)
    return best


def _round3(value: float) -> float:
    """Round half away from zero to 3 decimals, as Go's math.Round(x*1000)/1000 does for x >= 0."""
    scaled = value * 1000
    whole = math.floor(scaled)
    if scaled - whole >= 0.5:
        whole += 1
    return whole / 1000


def _stddev(values: Iterable[int]) -> float:
    xs = list(values)
    mean = _round3(sum(float(x) for x in xs) / len(xs))
    return _round3(math.sqrt(sum((x - mean) * (x - mean) for x in xs) / len(xs)))


def take_by_topology(
    topology: Topology, available: CPUSet, count: int, *, spread: bool = False, prefer_uncore: bool = False
) -> CPUSet:
    """`count` CPUs of `available` by the packed algorithm. Builds the layout; hot paths keep a CPULayout."""
    return CPULayout.of(topology).take(available, count, spread=spread, prefer_uncore=prefer_uncore)


def take_by_topology_numa_distributed(
    topology: Topology, available: CPUSet, count: int, group_size: int
) -> CPUSet:
    """`count` CPUs of `available` spread evenly over NUMA nodes in groups of `group_size` (KEP-2902)."""
    return CPULayout.of(topology).take_distributed(available, count, group_size)
