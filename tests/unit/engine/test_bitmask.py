"""NUMA masks against the kubelet's `topologymanager/bitmask/bitmask_test.go` cases."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from podlevel.engine.bitmask import (
    format_nodes,
    iterate_masks,
    mask_of,
    narrowness,
    nodes_of,
    subset_sums,
)
from podlevel.engine.errors import InputError


@pytest.mark.parametrize(
    ("nodes", "expected"),
    [
        pytest.param([], 0b0, id="empty"),
        pytest.param([0], 0b01, id="bit 0"),
        pytest.param([1], 0b10, id="bit 1"),
        pytest.param([0, 1], 0b11, id="bits 0 and 1"),
        pytest.param([1, 0, 1], 0b11, id="repeats are one bit"),
        pytest.param([63], 1 << 63, id="bit 63, the kubelet's highest"),
    ],
)
def test_mask_of(nodes: list[int], expected: int) -> None:
    assert mask_of(nodes) == expected


@pytest.mark.parametrize("node", [-1, 64], ids=["negative", "bit 64"])
def test_mask_of_rejects_bits_outside_0_63(node: int) -> None:
    with pytest.raises(InputError, match=f"NUMA node id {node} is outside 0-63"):
        mask_of([0, node])


@pytest.mark.parametrize(
    ("mask", "expected"),
    [
        pytest.param(0b0, (), id="mask 00"),
        pytest.param(0b01, (0,), id="mask 01"),
        pytest.param(0b11, (0, 1), id="mask 11"),
        pytest.param(0b1000_0101, (0, 2, 7), id="mask 10000101"),
    ],
)
def test_nodes_of(mask: int, expected: tuple[int, ...]) -> None:
    assert nodes_of(mask) == expected


@pytest.mark.parametrize(
    ("masks", "expected"),
    [
        pytest.param([[0, 1], [0, 1]], [0, 1], id="11 AND 11"),
        pytest.param([[0, 1], [1]], [1], id="11 AND 10"),
        pytest.param([[0], [0, 1]], [0], id="01 AND 11"),
        pytest.param([[0, 1], [0, 1], [1]], [1], id="11 AND 11 AND 10"),
        pytest.param([[0], [0], [1], [0, 1]], [], id="01 AND 01 AND 10 AND 11"),
        pytest.param([[0, 1, 2, 3], [1, 2, 3], [2, 3], [3]], [3], id="1111 AND 1110 AND 1100 AND 1000"),
    ],
)
def test_and_of_masks_is_int_and(masks: list[list[int]], expected: list[int]) -> None:
    result = mask_of(masks[0])
    for nodes in masks[1:]:
        result &= mask_of(nodes)
    assert nodes_of(result) == tuple(expected)


@pytest.mark.parametrize(
    ("first", "second", "narrower"),
    [
        pytest.param([0], [0, 1], True, id="unequal bits set 1/2"),
        pytest.param([0, 1], [0], False, id="unequal bits set 2/2"),
        pytest.param([0], [1], True, id="equal bits set 1/2"),
        pytest.param([1], [0], False, id="equal bits set 2/2"),
        pytest.param([3], [0, 1], True, id="one high node beats two low nodes"),
        pytest.param([0, 3], [1, 2], False, id="same size: lower value wins (1001 > 0110)"),
        pytest.param([0, 1], [0, 1], False, id="a mask is not narrower than itself"),
    ],
)
def test_narrowness_orders_as_is_narrower_than(first: list[int], second: list[int], narrower: bool) -> None:
    assert (narrowness(mask_of(first)) < narrowness(mask_of(second))) is narrower


@pytest.mark.parametrize("bits", [1, 2, 4, 8, 16], ids=lambda b: f"{b} bits")
def test_iterate_masks_yields_every_non_empty_subset_once(bits: int) -> None:
    masks = list(iterate_masks(list(range(bits))))
    assert len(masks) == (1 << bits) - 1
    assert len(set(masks)) == len(masks)


def test_iterate_masks_order_is_by_size_then_lexicographic() -> None:
    assert [nodes_of(m) for m in iterate_masks([0, 1, 2])] == [
        (0,), (1,), (2,), (0, 1), (0, 2), (1, 2), (0, 1, 2),
    ]


def test_iterate_masks_follows_the_given_node_order() -> None:
    """The kubelet iterates over the node list it is handed; sparse ids stay in that order."""
    assert [nodes_of(m) for m in iterate_masks([2, 0, 5])] == [
        (2,), (0,), (5,), (0, 2), (2, 5), (0, 5), (0, 2, 5),
    ]


def test_iterate_masks_of_no_nodes_is_empty() -> None:
    assert list(iterate_masks([])) == []


@given(st.integers(0, 2**64 - 1))
def test_nodes_of_inverts_mask_of(mask: int) -> None:
    assert mask_of(nodes_of(mask)) == mask


@pytest.mark.parametrize(
    ("mask", "text"),
    [pytest.param(None, "any", id="no preference"), pytest.param(0b101, "{0,2}", id="nodes 0 and 2")],
)
def test_format_nodes(mask: int | None, text: str) -> None:
    assert format_nodes(mask) == text


def test_subset_sums_index_by_packed_subset() -> None:
    assert subset_sums([1, 10, 100]) == [0, 1, 10, 11, 100, 101, 110, 111]
    assert subset_sums([]) == [0]
