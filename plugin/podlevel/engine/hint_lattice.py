"""The non-preferred candidates of a topology hint merge: every non-empty AND of one mask per hint list.

The kubelet finds them by walking the cross product of the lists, which costs the product of their lengths
(255 x 255 on an 8-node machine). `reachable_ands` finds the same set either by a walk over the distinct masks
(short lists) or on the 2^n lattice of NUMA node subsets (long lists). On the lattice, for each mask y, the
number of list members containing y (a superset sum) is multiplied across two lists; the Moebius inverse of
that product counts the pairs whose AND is exactly y, so the masks with a non-zero count are the reachable
ones. The topology manager uses the result; its tests compare both ways with a literal walk.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterable, Mapping, Sequence
from itertools import compress
from math import prod
from operator import mul
from typing import Final

from podlevel.engine.bitmask import mask_of

LATTICE_MAX_NODES: Final = 10
"""Above this the 2^n lattice costs more than any realistic permutation walk; the merge walks instead."""
_LATTICE_MIN_PERMUTATIONS: Final = 1024
"""Below this many permutations walking the deduplicated product is cheaper than three lattice transforms."""

_LANE_BITS: Final = 32
_LANE_BYTES: Final = _LANE_BITS // 8
_LANE_CODE: Final = next(code for code in "IL" if array(code).itemsize == _LANE_BYTES)


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
