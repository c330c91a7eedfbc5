"""NUMA affinity masks as plain ints: bit n set means NUMA node n is in the mask.

The kubelet's topology manager keeps masks in a uint64 (`bitmask.BitMask`); a Python int does the same job
with `&`, `|` and `bit_count()`. What this module adds is the kubelet's two orderings, which decide which hint
wins and in which order hint providers enumerate masks:
- `iterate_masks`: every non-empty subset of the given nodes, by size 1..n, each size in lexicographic order
  of the node list (`IterateBitMasks`);
- `narrowness`: fewer nodes wins, a tie goes to the lower numeric value (`IsNarrowerThan`, as a sort key).
Masks are never negative; node ids stay below 64 like the kubelet's (`Add` rejects bit 64 and above).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import combinations
from typing import Final

from podlevel.engine.errors import InputError

MAX_NODE_ID: Final = 63


def mask_of(nodes: Iterable[int]) -> int:
    """The mask holding `nodes`. Raises InputError for an id outside 0..63, as `NewBitMask` does."""
    mask = 0
    for node in nodes:
        if not 0 <= node <= MAX_NODE_ID:
            raise InputError("numa mask", f"NUMA node id {node} is outside 0-{MAX_NODE_ID}")
        mask |= 1 << node
    return mask


def nodes_of(mask: int) -> tuple[int, ...]:
    """The node ids in `mask`, ascending (`GetBits`)."""
    nodes = []
    while mask:
        low = mask & -mask
        nodes.append(low.bit_length() - 1)
        mask ^= low
    return tuple(nodes)


def narrowness(mask: int) -> tuple[int, int]:
    """A sort key, narrowest first: `narrowness(a) < narrowness(b)` is the kubelet's `a.IsNarrowerThan(b)`."""
    return mask.bit_count(), mask


def iterate_masks(node_ids: Sequence[int]) -> Iterator[int]:
    """Every non-empty subset of `node_ids` as a mask: size 1 first, then 2, ..., each size in lexicographic
    order of `node_ids` as given. Hint providers walk masks in this order, so hint lists come out in it."""
    for size in range(1, len(node_ids) + 1):
        for combination in combinations(node_ids, size):
            yield mask_of(combination)


def subset_sums(per_node: Sequence[int]) -> list[int]:
    """A per-node quantity summed over every subset of the nodes, indexed by packed subset (bit i = the i-th
    value): 2^n sums in n list doublings, cheaper than one sum per mask."""
    sums = [0]
    for value in per_node:
        sums += [s + value for s in sums]
    return sums


def format_nodes(mask: int | None) -> str:
    """A mask for messages: `{0,2}`, or `any` for None (no NUMA preference)."""
    if mask is None:
        return "any"
    return "{" + ",".join(str(n) for n in nodes_of(mask)) + "}"
