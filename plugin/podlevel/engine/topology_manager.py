"""The topology manager: merge the hint providers' NUMA hints into one affinity and decide admission.

Semantics are the kubelet's (`pkg/kubelet/cm/topologymanager`):
1. Each provider (the CPU and memory policies) answers per resource with a list of hints.
2. `filter_provider_hints` turns "no answer" into a preferred any-node hint and "no possible placement" into a
   non-preferred one.
3. The merge ANDs the masks of every permutation (one hint per list) and keeps the best merged hint by the
   kubelet's `HintMerger.compare`.
4. The policy decides whether that hint admits the pod.

`merge` returns the hint the kubelet's walk would, without walking every permutation. The winner depends on
two sets only, because `compare` keeps:
- the best preferred candidate, if any permutation is preferred. "Best" is the fittest: the narrowest mask,
  or with prefer-closest-numa-nodes the closest. This is a total order on distinct masks, so the walk order
  does not matter.
- otherwise the fittest non-preferred candidate of B nodes, B being the largest count any one resource needs
  at its narrowest (`BestNonPreferredAffinityCount`); failing that, the fittest of the largest count below
  B; failing that, the fittest of all.
A preferred permutation picks, in every list, a preferred hint whose mask is nil or one common mask, so the
preferred candidates are an intersection of per-list sets (`preferred_candidates`). The non-preferred
candidates are every non-empty AND of one mask per list (`hint_lattice.reachable_ands`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final, cast

from podlevel.engine.bitmask import mask_of, narrowness
from podlevel.engine.errors import InputError
from podlevel.engine.hint_lattice import LATTICE_MAX_NODES, NodeLattice, reachable_ands
from podlevel.engine.option_values import parse_go_bool, parse_go_int
from podlevel.engine.topology import Topology

PREFER_CLOSEST_NUMA_NODES: Final = "prefer-closest-numa-nodes"
MAX_ALLOWABLE_NUMA_NODES: Final = "max-allowable-numa-nodes"
DEFAULT_MAX_ALLOWABLE_NUMA_NODES: Final = 8
"""The kubelet's default and minimum: beyond 8 nodes the 2^n hint masks explode (KEP-4622)."""


_NIL: Final = frozenset({None})


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


@dataclass(frozen=True, slots=True)
class Alignment:
    """One merge as admission made it, for the whole pod (`container` None) or one container: what was
    asked, each provider's hints, the merged hint and whether the policy admits it."""

    container: str | None
    requested: Mapping[str, int]
    providers: tuple[ProviderHints, ...]
    """The CPU manager's answer, then the memory manager's."""
    merged: TopologyHint
    admitted: bool


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
                max_allowable = parse_go_int(key, value)
                if max_allowable < DEFAULT_MAX_ALLOWABLE_NUMA_NODES:
                    raise InputError(
                        key, f"{max_allowable} is below the minimum of {DEFAULT_MAX_ALLOWABLE_NUMA_NODES}"
                    )
            else:
                known = f"{PREFER_CLOSEST_NUMA_NODES}, {MAX_ALLOWABLE_NUMA_NODES}"
                raise InputError(key, f"unknown topology manager policy option (known: {known})")
        return cls(prefer_closest, max_allowable)

    def values(self) -> dict[str, str]:
        """The options off their defaults, as the kubelet's KEY=VALUE map (the inverse of `parse`)."""
        values: dict[str, str] = {}
        if self.prefer_closest_numa_nodes:
            values[PREFER_CLOSEST_NUMA_NODES] = "true"
        if self.max_allowable_numa_nodes != DEFAULT_MAX_ALLOWABLE_NUMA_NODES:
            values[MAX_ALLOWABLE_NUMA_NODES] = str(self.max_allowable_numa_nodes)
        return values


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
        self._unconstrained = self._merge_lists(filter_provider_hints([None]))
        """The merge when no provider has a preference (most pods: nothing exclusive), made once."""

    def merge(self, providers: Sequence[ProviderHints]) -> tuple[TopologyHint, bool]:
        """The best hint and whether the policy admits it (`Policy.Merge`)."""
        if self.policy is TopologyPolicyName.NONE:
            return TopologyHint(None, False), True
        if not any(providers):
            return self._unconstrained
        return self._merge_lists(filter_provider_hints(providers))

    def _merge_lists(self, lists: Sequence[Sequence[TopologyHint]]) -> tuple[TopologyHint, bool]:
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
