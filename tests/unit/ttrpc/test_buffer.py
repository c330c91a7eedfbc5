"""ttrpc._buffer: the length-prefixed record splitter under frames and messages, on a header of its own."""

from __future__ import annotations

import struct
from typing import NamedTuple

import pytest

from podlevel.ttrpc._buffer import RecordBuffer
from podlevel.ttrpc.errors import ProtocolError

LAYOUT = struct.Struct(">BH")


class Tagged(NamedTuple):
    tag: int
    length: int


def buffer(limit: int = 100) -> RecordBuffer[Tagged]:
    return RecordBuffer(LAYOUT, Tagged._make, limit=limit, describe=lambda header: f"record {header.tag}")


def record(tag: int, payload: bytes) -> bytes:
    return LAYOUT.pack(tag, len(payload)) + payload


def test_whole_records_come_out_in_order_and_a_partial_one_stays() -> None:
    records = buffer()
    data = record(1, b"ab") + record(2, b"") + record(3, b"xyz")
    assert records.feed(data[:-1]) == [(Tagged(1, 2), b"ab"), (Tagged(2, 0), b"")]
    assert len(records) == LAYOUT.size + 2
    assert records.feed(data[-1:]) == [(Tagged(3, 3), b"xyz")]
    assert len(records) == 0


def test_a_length_over_the_limit_fails_on_the_header_alone() -> None:
    with pytest.raises(ProtocolError, match="record 9 declares a 11-byte payload, over the 10-byte limit"):
        buffer(limit=10).feed(LAYOUT.pack(9, 11))
