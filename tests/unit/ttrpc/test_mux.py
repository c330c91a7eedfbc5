"""Mux framing: frame boundaries on input, the Go-reader framing rule on output."""

from __future__ import annotations

import struct

import pytest

from podlevel.ttrpc.errors import ProtocolError
from podlevel.ttrpc.mux import (
    GO_READ_BUFFER_SIZE,
    MAX_INBOUND_FRAME,
    Frame,
    FrameDecoder,
    encode_frame,
    frame_message,
)


def split_frames(data: bytes) -> list[tuple[int, int]]:
    """(conn id, payload length) of each frame in `data`, asserting the frames tile it exactly."""
    out = []
    offset = 0
    while offset < len(data):
        conn_id, length = struct.unpack_from(">II", data, offset)
        out.append((conn_id, length))
        offset += 8 + length
    assert offset == len(data)
    return out


def test_encode_frame_layout() -> None:
    assert encode_frame(2, b"abc") == b"\x00\x00\x00\x02\x00\x00\x00\x03abc"


def test_decoder_returns_whole_frames_only_across_any_split() -> None:
    stream = encode_frame(1, b"hello") + encode_frame(2, b"") + encode_frame(7, b"x" * 300)
    for cut in range(len(stream) + 1):
        decoder = FrameDecoder()
        frames = decoder.feed(stream[:cut]) + decoder.feed(stream[cut:])
        assert frames == [Frame(1, b"hello"), Frame(2, b""), Frame(7, b"x" * 300)], cut
        assert decoder.buffered == 0


def test_decoder_byte_by_byte_keeps_partial_frame_buffered() -> None:
    decoder = FrameDecoder()
    data = encode_frame(1, b"payload")
    for byte in data[:-1]:
        assert decoder.feed(bytes([byte])) == []
    assert decoder.buffered == len(data) - 1
    assert decoder.feed(data[-1:]) == [Frame(1, b"payload")]


def test_decoder_rejects_oversized_frame_from_header_alone() -> None:
    decoder = FrameDecoder()
    with pytest.raises(
        ProtocolError,
        match=rf"conn 1 declares a {MAX_INBOUND_FRAME + 1}-byte payload.*{MAX_INBOUND_FRAME}-byte",
    ):
        decoder.feed(struct.pack(">II", 1, MAX_INBOUND_FRAME + 1))


@pytest.mark.parametrize(
    ("size", "expected"),
    [
        pytest.param(10, [(1, 10)], id="small-one-frame"),
        pytest.param(GO_READ_BUFFER_SIZE, [(1, 4096)], id="exactly-4096-one-frame"),
        pytest.param(GO_READ_BUFFER_SIZE + 1, [(1, 4096), (1, 1)], id="4097-two-frames"),
        pytest.param(3 * 1024 * 1024, [(1, 4096), (1, 3 * 1024 * 1024 - 4096)], id="3MiB-two-frames"),
    ],
)
def test_frame_message_first_frame_4096_then_all_the_rest(size: int, expected: list[tuple[int, int]]) -> None:
    message = bytes(range(256)) * (size // 256) + b"\x01" * (size % 256)
    data = frame_message(1, message)
    assert split_frames(data) == expected
    decoder = FrameDecoder()
    assert b"".join(f.payload for f in decoder.feed(data)) == message
