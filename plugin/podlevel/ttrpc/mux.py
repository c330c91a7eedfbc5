"""NRI connection multiplexing: one unix stream socket carries several independent byte streams.

A frame is an 8-byte header (conn id, payload length; both uint32 big-endian) followed by the payload, a
slice of that conn's byte stream. There is no handshake and no open/close signalling. Conn 1 carries the
plugin service (the runtime calls the plugin), conn 2 the runtime service (the plugin calls the runtime).

Invariants kept here:
- `FrameDecoder.feed` returns only whole frames, in arrival order; a partial frame stays buffered.
- `frame_message` puts one ttrpc message in at most two frames, never two messages in one frame, and
  never a first frame larger than `GO_READ_BUFFER_SIZE` — the shape Go's reader needs (see below).
No I/O happens here: bytes in, frames out; a message in, bytes out.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final, NamedTuple

from podlevel.ttrpc._buffer import RecordBuffer

PLUGIN_SERVICE_CONN: Final = 1
RUNTIME_SERVICE_CONN: Final = 2

FRAME_HEADER_SIZE: Final = 8

# Go's ttrpc reads each conn through a bufio.Reader of this size, and the Go mux hands out exactly one
# frame per Read, failing with ENOMEM if the reader's buffer is smaller than the frame (containerd/nri#102).
# A message framed like Go's own bufio.Writer(4096) output — first 4096 bytes, then the rest in one frame
# that the reader reads straight into the message buffer — is always accepted.
GO_READ_BUFFER_SIZE: Final = 4096

# The Go mux queues at most this many unread frames per conn and closes the whole socket on overflow.
# Two frames per message keeps a burst of replies far below it; splitting into small frames would not.
GO_FRAME_QUEUE_LIMIT: Final = 256

# Largest inbound frame payload accepted. Go writers cap frames at 10 + 4 MiB (NRI >= v0.7.0) or 16 MiB
# (older), so this only bounds what a broken peer can make us buffer: one 64 MiB message plus its header.
MAX_INBOUND_FRAME: Final = (64 << 20) + 10

_HEADER = struct.Struct(">II")


@dataclass(frozen=True, slots=True)
class Frame:
    """One mux frame: a slice of conn `conn_id`'s byte stream."""

    conn_id: int
    payload: bytes


class _FrameHeader(NamedTuple):
    conn_id: int
    length: int


class FrameDecoder:
    """Splits the socket's byte stream into frames."""

    def __init__(self) -> None:
        self._buffer = RecordBuffer(
            _HEADER,
            _FrameHeader._make,
            limit=MAX_INBOUND_FRAME,
            describe=lambda header: f"mux frame for conn {header.conn_id}",
        )

    @property
    def buffered(self) -> int:
        """Bytes received that do not yet form a whole frame."""
        return len(self._buffer)

    def feed(self, data: bytes | memoryview) -> list[Frame]:
        """Append `data` and return every frame now complete. Raises ProtocolError on an oversized frame."""
        return [Frame(header.conn_id, payload) for header, payload in self._buffer.feed(data)]


def encode_frame(conn_id: int, payload: bytes) -> bytes:
    """One frame carrying `payload` on conn `conn_id`."""
    return _HEADER.pack(conn_id, len(payload)) + payload


def frame_message(conn_id: int, message: bytes) -> bytes:
    """Frame one whole ttrpc message (header included) the way Go's reader needs it.

    The first frame holds the first min(len, 4096) bytes and a second frame, if needed, all the rest.
    """
    if len(message) <= GO_READ_BUFFER_SIZE:
        return encode_frame(conn_id, message)
    return encode_frame(conn_id, message[:GO_READ_BUFFER_SIZE]) + encode_frame(
        conn_id, message[GO_READ_BUFFER_SIZE:]
    )
