"""The topology manager: merge the hint providers' NUMA hints into one affinity and decide admission.

Semantics are the kubelet's (`pkg/kubelet/cm/topologymanager`): each provider answers per resource with a list
of hints; `filter_provider_hints` turns "no answer" into a preferred any-node hint and "no possible placement"
into a non-preferred one; the merge walks the cross product of the per-resource lists, ANDs each permutation's
masks, and keeps the best merged hint by the kubelet's `HintMerger.compare`; the policy decides admission.

The kubelet's walk costs the product of the list lengths (255 x 255 on an 8-node machine). `merge` returns the
identical hint without walking it. The walk's winner depends only on two sets, because `compare` keeps:
- the best preferred candidate, if any permutation is preferred ("fitter" = narrower, or closer with
  prefer-closest-numa-nodes; a total order on distinct masks, so the walk order does not matter);
- otherwise, with B = the largest per-resource narrowest count (`BestNonPreferredAffinityCount`): the fittest
  candidate of count B; failing that, the fittest of the largest count below B; failing that, the fittest.
A preferred permutation picks, in every list, a preferred hint whose mask is nil or one common mask M, so the
preferred candidates are an intersection of per-list sets. The non-preferred candidates are all non-empty ANDs
reachable by picking one mask per list; for long lists that set comes from the 2^n lattice of node subsets
(superset sums, their product and its Moebius inverse count the permutations whose AND is exactly a mask).
tests/unit/test_topology_manager.py checks both paths against a literal permutation walk.
"""

from __future__ import annotations

import re
import sys
from array import array
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from itertools import compress
from math import prod
from operator import mul
from typing import Final, cast

from podlevel.engine.bitmask import mask_of, narrowness
from podlevel.engine.errors import InputError
from podlevel.engine.topology import Topology

PREFER_CLOSEST_NUMA_NODES: Final = "prefer-closest-numa-nodes"
MAX_ALLOWABLE_NUMA_NODES: Final = "max-allowable-numa-nodes"
DEFAULT_MAX_ALLOWABLE_NUMA_NODES: Final = 8
"""The kubelet's default and minimum: beyond 8 nodes the 2^n hint masks explode (KEP-4622)."""

LATTICE_MAX_NODES: Final = 10
"""Above this the 2^n lattice costs more than any realistic permutation walk; the merge walks instead."""
_LATTICE_MIN_PERMUTATIONS: Final = 1024
"""Below this many permutations walking the deduplicated product is cheaper than three lattice transforms."""

_NIL: Final = frozenset({None})
_LANE_BITS: Final = 32
_LANE_BYTES: Final = _LANE_BITS // 8
_LANE_CODE: Final = next(code for code in "IL" if array(code).itemsize == _LANE_BYTES)
_GO_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE: Final = frozenset({"0", "f", "F", "FALSE", "false", "False"})
_GO_INT: Final = re.compile(r"^[+-]?[0-9]+$")


@dataclass(frozen=True, slots=True)
class TopologyHint:
    """One way to place a request: on the NUMA nodes in `affinity`, `preferred` if it is the narrowest way."""

    affinity: int | None
    preferred: bool


class TopologyPolicyName(StrEnum):
    NONE = "none"
    BEST_EFFORT = "best-effort"
    RESTRICTED = "restricted"
    SINGLE_NUMA_NODE = "single-numa-node"


class Scope(StrEnum):
    CONTAINER = "container"
    POD = "pod"


Fitness = Callable[[int], tuple[int, ...]]
"""A sort key over masks: the smaller key is the fitter mask when two hints are otherwise equal."""

ProviderHints = Mapping[str, Sequence[TopologyHint] | None] | None
"""One provider's answer: resource -> hints. A None list means no preference for that resource, an empty list
means the resource cannot be placed at all; a None (or empty) answer means no preference for anything."""


def parse_go_bool(option: str, value: str) -> bool:
    """`strconv.ParseBool`, which the kubelet uses for policy option values."""
    if value in _GO_TRUE:
        return True
    if value in _GO_FALSE:
        return False
    raise InputError(option, f"bad value {value!r}: not a boolean (true/false, t/f, 1/0)")


@dataclass(frozen=True, slots=True)
class TopologyManagerOptions:
    prefer_closest_numa_nodes: bool = False
    max_allowable_numa_nodes: int = DEFAULT_MAX_ALLOWABLE_NUMA_NODES

    @classmethod
    def parse(cls, values: Mapping[str, str]) -> TopologyManagerOptions:
        """The kubelet's `topologyManagerPolicyOptions`; InputError names the offending key."""
        prefer_closest = False
        max_allowable = DEFAULT_MAX_ALLOWABLE_NUMA_NODES
        for key, value in values.items():
            if key == PREFER_CLOSEST_NUMA_NODES:
                prefer_closest = parse_go_bool(key, value)
            elif key == MAX_ALLOWABLE_NUMA_NODES:
                if not _GO_INT.match(value):
                    raise InputError(key, f"bad value {value!r}: not an integer")
                max_allowable = int(value)
                if max_allowable < DEFAULT_MAX_ALLOWABLE_NUMA_NODES:
                    raise InputError(
                        key, f"{max_allowable} is below the minimum of {DEFAULT_MAX_ALLOWABLE_NUMA_NODES}"
                    )
            else:
                known = f"{PREFER_CLOSEST_NUMA_NODES}, {MAX_ALLOWABLE_NUMA_NODES}"
                raise InputError(key, f"unknown topology manager policy option (known: {known})")
        return cls(prefer_closest, max_allowable)


def filter_provider_hints(providers: Iterable[ProviderHints]) -> list[Sequence[TopologyHint]]:
    """One hint list per (provider, resource), with the kubelet's defaults for missing answers."""
    any_node = [TopologyHint(None, True)]
    impossible = [TopologyHint(None, False)]
    lists: list[Sequence[TopologyHint]] = []
    for provider in providers:
        if not provider:
            lists.append(any_node)
            continue
        for hints in provider.values():
            if hints is None:
                lists.append(any_node)
            elif not hints:
                lists.append(impossible)
            else:
                lists.append(hints)
    return lists


def single_numa_hints(lists: Iterable[Sequence[TopologyHint]]) -> list[Sequence[TopologyHint]]:
    """single-numa-node keeps only preferred hints for no node in particular or for exactly one node."""
    return [
        [h for h in hints if h.preferred and (h.affinity is None or h.affinity.bit_count() == 1)]
        for hints in lists
    ]


class TopologyManager:
    """A policy over one machine. Immutable; `merge` is a pure function of the providers' hints."""

    def __init__(
        self, topology: Topology, policy: TopologyPolicyName | str, options: TopologyManagerOptions
    ) -> None:
        try:
            self.policy = TopologyPolicyName(policy)
        except ValueError:
            known = ", ".join(p.value for p in TopologyPolicyName)
            raise InputError("topology manager policy", f"unknown policy {policy!r} ({known})") from None
        self.options = options
        self.node_ids: tuple[int, ...] = topology.numa_node_ids
        count = len(self.node_ids)
        if self.policy is not TopologyPolicyName.NONE and count > options.max_allowable_numa_nodes:
            raise InputError(
                MAX_ALLOWABLE_NUMA_NODES,
                f"the machine has {count} NUMA nodes, more than {options.max_allowable_numa_nodes}; "
                f"raise {MAX_ALLOWABLE_NUMA_NODES} to use the {self.policy} policy",
            )
        self.default_affinity = mask_of(self.node_ids)
        self._lattice = NodeLattice(self.node_ids) if count <= LATTICE_MAX_NODES else None
        closest = options.prefer_closest_numa_nodes and self.policy is not TopologyPolicyName.SINGLE_NUMA_NODE
        self._fitness: Fitness = closest_key(topology, self.node_ids) if closest else narrowness

    def merge(self, providers: Sequence[ProviderHints]) -> tuple[TopologyHint, bool]:
        """The best hint and whether the policy admits it (`Policy.Merge`)."""
        if self.policy is TopologyPolicyName.NONE:
            return TopologyHint(None, False), True
        lists = filter_provider_hints(providers)
        if self.policy is TopologyPolicyName.SINGLE_NUMA_NODE:
            best = self.merge_filtered(single_numa_hints(lists))
            if best.affinity == self.default_affinity:
                best = TopologyHint(None, best.preferred)
            return best, best.preferred
        best = self.merge_filtered(lists)
        return best, self.policy is TopologyPolicyName.BEST_EFFORT or best.preferred

    def merge_filtered(self, lists: Sequence[Sequence[TopologyHint]]) -> TopologyHint:
        """`HintMerger.Merge` over already filtered lists, without walking their cross product."""
        default = self.default_affinity
        if any(not hints for hints in lists):
            return TopologyHint(default, False)
        preferred = preferred_candidates(lists, default)
        if preferred:
            return TopologyHint(min(preferred, key=self._fitness), True)
        affinities = [{h.affinity for h in hints} for hints in lists]
        masks = [{default if a is None else a & default for a in raw} for raw in affinities]
        reachable = reachable_ands(masks, default, self._lattice)
        if not reachable:
            return TopologyHint(default, False)
        target = best_non_preferred_count(affinities)
        return TopologyHint(best_non_preferred(reachable, target, self._fitness), False)


def closest_key(topology: Topology, node_ids: Sequence[int]) -> Fitness:
    """Fewer nodes first, then the lower mean distance over all ordered node pairs (self pairs included), then
    the lower mask (`NUMAInfo.Closest`). Masks compared here always have equal size, so sums compare as means.
    """

    def distance_sum(mask: int) -> int:
        nodes = [n for n in node_ids if mask >> n & 1]
        return sum(topology.distance(a, b) for a in nodes for b in nodes)

    if len(node_ids) <= DEFAULT_MAX_ALLOWABLE_NUMA_NODES:
        sums = {mask: distance_sum(mask) for mask in _subsets(mask_of(node_ids))}
        return lambda mask: (mask.bit_count(), sums[mask], mask)
    return lambda mask: (mask.bit_count(), distance_sum(mask), mask)


def _subsets(mask: int) -> Iterable[int]:
    subset = mask
    while subset:
        yield subset
        subset = (subset - 1) & mask


def preferred_candidates(lists: Sequence[Sequence[TopologyHint]], default: int) -> set[int]:
    """Merged masks of the preferred permutations: every pick preferred, every non-nil pick one mask M."""
    constraints: list[set[int | None]] = []
    offered: set[int | None] = set()
    for hints in lists:
        masks = {h.affinity for h in hints if h.preferred}
        if None in masks:
            offered |= masks
        else:
            constraints.append(masks)
    if constraints:
        common = set.intersection(*constraints)
        merged = {m & default for m in common if m is not None}
    else:
        merged = {m & default for m in offered if m is not None} | {default}
    merged.discard(0)
    return merged


def best_non_preferred_count(affinities: Iterable[set[int | None]]) -> int:
    """`maxOfMinAffinityCounts` over each list's distinct affinities: the largest node count any one resource
    needs at its narrowest."""
    best = 0
    for raw in affinities:
        masks = raw - _NIL
        if masks:
            best = max(best, min(map(int.bit_count, cast(set[int], masks))))
    return best


def best_non_preferred(candidates: Collection[int], target: int, fitness: Fitness) -> int:
    """`compare`'s non-preferred cases 1-3cc, resolved over the whole candidate set at once: the fittest mask
    of `target` nodes, else the fittest of the largest size below it, else the fittest of all."""
    exact = [m for m in candidates if m.bit_count() == target]
    if exact:
        return min(exact, key=fitness)
    below = [m for m in candidates if m.bit_count() < target]
    if below:
        widest = max(m.bit_count() for m in below)
        return min((m for m in below if m.bit_count() == widest), key=fitness)
    return min(candidates, key=fitness)


def reachable_ands(mask_sets: Sequence[set[int]], default: int, lattice: NodeLattice | None) -> set[int]:
    """Every non-zero AND of one mask from each set (masks already restricted to `default`)."""
    if lattice is not None and prod(len(s) for s in mask_sets) >= _LATTICE_MIN_PERMUTATIONS:
        return lattice.reachable_ands(mask_sets)
    return reachable_ands_walk(mask_sets, default)


def reachable_ands_walk(mask_sets: Sequence[set[int]], default: int) -> set[int]:
    reachable = {default}
    for masks in mask_sets:
        reachable = {r & m for r in reachable for m in masks}
    reachable.discard(0)
    return reachable


class NodeLattice:
    """The 2^n subsets of a machine's NUMA nodes as one big int of 32-bit lanes, lane x for subset x (bit i
    of x stands for the i-th node id): a transform over all subsets is a few whole-int shifts, masks, adds.

    Lanes never carry into each other: superset sums of a 0/1 vector stay below 2^n, the product of two stays
    below 4^n, and every partial Moebius inverse of that product is a count of pairs, so never negative.
    """

    def __init__(self, node_ids: Sequence[int]) -> None:
        self.bits = len(node_ids)
        size = 1 << self.bits
        self.unpack: tuple[int, ...] = tuple(
            mask_of(n for i, n in enumerate(node_ids) if index >> i & 1) for index in range(size)
        )
        self.pack: Mapping[int, int] = {mask: index for index, mask in enumerate(self.unpack)}
        lane = (1 << _LANE_BITS) - 1
        self._without_bit: tuple[int, ...] = tuple(
            sum(lane << (_LANE_BITS * y) for y in range(size) if not y >> bit & 1) for bit in range(self.bits)
        )

    def reachable_ands(self, mask_sets: Sequence[set[int]]) -> set[int]:
        """Every non-zero AND of one mask per set, folding the sets in pairwise: for the reachable masks R
        and the next set S, Z_R(y) * Z_S(y) (Z = how many members contain y) counts the pairs whose AND
        contains y, and its Moebius inverse over supersets counts the pairs whose AND is exactly y."""
        if not mask_sets:
            return {self.unpack[-1]}
        reachable: Iterable[int] = mask_sets[0]
        for masks in mask_sets[1:]:
            pairs = map(mul, self._superset_counts(reachable), self._superset_counts(masks))
            reachable = compress(self.unpack, self._lanes(self._moebius(self._pack_lanes(pairs))))
        found = set(reachable)
        found.discard(0)
        return found

    def _superset_counts(self, masks: Iterable[int]) -> array[int]:
        lanes = self._indicator(masks)
        for bit, without in enumerate(self._without_bit):
            lanes += (lanes >> (_LANE_BITS << bit)) & without
        return self._lanes(lanes)

    def _indicator(self, masks: Iterable[int]) -> int:
        lanes = bytearray(_LANE_BYTES << self.bits)
        for index in map(self.pack.__getitem__, masks):
            lanes[index * _LANE_BYTES] = 1
        return int.from_bytes(lanes, "little")

    def _moebius(self, lanes: int) -> int:
        for bit, without in enumerate(self._without_bit):
            lanes -= (lanes >> (_LANE_BITS << bit)) & without
        return lanes

    def _lanes(self, lanes: int) -> array[int]:
        values = array(_LANE_CODE)
        values.frombytes(lanes.to_bytes(_LANE_BYTES << self.bits, "little"))
        if sys.byteorder == "big":
            values.byteswap()
        return values

    def _pack_lanes(self, values: Iterable[int]) -> int:
        packed = array(_LANE_CODE, values)
        if sys.byteorder == "big":
            packed.byteswap()
        return int.from_bytes(packed.tobytes(), "little")
