"""The ttrpc codec over random byte streams: framing never changes what decodes, and junk fails cleanly.

The two "any bytes" tests are fuzzers: `hack/fuzz` runs them for as long as it is asked to.

Seen from the plugin: the runtime's requests arrive on conn 1 and its responses on conn 2. A mux frame may
hold any slice of a conn's byte stream and the socket may cut anywhere, so however the same streams are
framed, interleaved and cut, the plugin must decode the same messages; and bytes that follow no rule must
end in the codec's own ProtocolError, never in another exception.
"""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podlevel.ttrpc.codec import Code, Connection, Inbound, MessageType, Request, Response, Role
from podlevel.ttrpc.errors import ProtocolError
from podlevel.ttrpc.mux import PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN, FrameDecoder, encode_frame
from support.fuzzing import fuzz_settings

PROPERTY_SETTINGS = settings(deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow])

# A conn id neither side uses; its frames are dropped.
FOREIGN_CONN = 7

names = st.text(max_size=12)
payloads = st.binary(max_size=600)


def plugin() -> Connection:
    return Connection(Role.PLUGIN)


def runtime() -> Connection:
    return Connection(Role.RUNTIME)


@st.composite
def runtime_messages(draw: st.DrawFn) -> list[Request | Response]:
    """What a runtime sends in one session: requests on fresh stream ids, responses on any."""
    sender = runtime()
    messages: list[Request | Response] = []
    for _ in range(draw(st.integers(0, 8))):
        if draw(st.booleans()):
            messages.append(
                sender.request(
                    draw(names), draw(names), draw(payloads), timeout_nano=draw(st.integers(0, 2**40))
                )
            )
        else:
            code = draw(st.sampled_from([Code.OK, Code.UNKNOWN, Code.UNIMPLEMENTED]))
            messages.append(
                Response(
                    draw(st.integers(1, 2**31)),
                    payload=draw(payloads) if code == Code.OK else b"",
                    code=code,
                    message="" if code == Code.OK else draw(names),
                )
            )
    return messages


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted(cuts), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def pieces_of(data: bytes) -> st.SearchStrategy[list[bytes]]:
    """`data` cut at random points, empty pieces included."""
    return st.lists(st.integers(0, len(data)), max_size=8).map(lambda cuts: split(data, cuts))


@st.composite
def framed(draw: st.DrawFn) -> tuple[list[Request | Response], list[bytes]]:
    """Messages, and mux frames carrying them: each conn's stream cut anywhere, conns interleaved."""
    messages = draw(runtime_messages())
    streams = {PLUGIN_SERVICE_CONN: b"", RUNTIME_SERVICE_CONN: b""}
    for message in messages:
        for frame in FrameDecoder().feed(runtime().encode(message)):
            streams[frame.conn_id] += frame.payload
    queues = {conn_id: draw(pieces_of(data)) for conn_id, data in streams.items()}
    queues[FOREIGN_CONN] = draw(st.lists(payloads, max_size=3))
    frames: list[bytes] = []
    while any(queues.values()):
        conn_id = draw(st.sampled_from(sorted(c for c, q in queues.items() if q)))
        frames.append(encode_frame(conn_id, queues[conn_id].pop(0)))
    return messages, frames


def feed_all(connection: Connection, pieces: list[bytes]) -> list[Inbound]:
    return [message for piece in pieces for message in connection.feed(piece)]


@PROPERTY_SETTINGS
@given(framed(), st.data())
def test_any_framing_and_any_cut_decode_the_messages_sent(
    sent: tuple[list[Request | Response], list[bytes]], data: st.DataObject
) -> None:
    messages, frames = sent
    whole = plugin()
    decoded = feed_all(whole, frames)
    for kind in (Request, Response):
        # Each conn keeps its order; frames of the two conns interleave freely.
        assert [m for m in decoded if isinstance(m, kind)] == [m for m in messages if isinstance(m, kind)]
    cut = plugin()
    assert feed_all(cut, data.draw(pieces_of(b"".join(frames)))) == decoded
    assert cut.dropped_frames == whole.dropped_frames


def ttrpc_message(stream_id: int, msg_type: int, body: bytes, flags: int) -> bytes:
    return struct.pack(">IIBB", len(body), stream_id, msg_type, flags) + body


@st.composite
def junk(draw: st.DrawFn) -> bytes:
    """Noise that looks like the protocol to varying depth: raw, in mux frames, behind a ttrpc header."""
    kind = draw(st.sampled_from(["raw", "frame", "message"]))
    if kind == "raw":
        return draw(st.binary(max_size=64))
    conn_id = draw(st.sampled_from([PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN, FOREIGN_CONN, 0]))
    if kind == "frame":
        return encode_frame(conn_id, draw(st.binary(max_size=64)))
    message = ttrpc_message(
        draw(st.integers(0, 2**32 - 1)),
        draw(st.sampled_from([*MessageType, 0, 255])),
        draw(st.binary(max_size=64)),
        draw(st.integers(0, 255)),
    )
    return encode_frame(conn_id, message)


def decodes_or_fails_cleanly(stream: bytes, pieces: list[bytes]) -> None:
    """Fed in `pieces`, `stream` gives messages or ends in ProtocolError; after one the codec stays failed."""
    connection = plugin()
    for piece in pieces:
        try:
            connection.feed(piece)
        except ProtocolError:
            with pytest.raises(ProtocolError, match="already failed"):
                connection.feed(b"")
            return


@fuzz_settings(300)
@given(st.lists(junk(), max_size=10), st.data())
def test_any_bytes_either_decode_or_raise_protocol_error(pieces: list[bytes], data: st.DataObject) -> None:
    stream = b"".join(pieces)
    decodes_or_fails_cleanly(stream, data.draw(pieces_of(stream)))


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """Valid frames with a few bytes flipped, overwritten, inserted, deleted or repeated, or cut short: the
    near misses that reach deepest into the decoder."""
    _, frames = draw(framed())
    data = bytearray(b"".join(frames))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        kind = draw(st.sampled_from(["flip", "set", "insert", "delete", "repeat", "cut"]))
        if kind in ("flip", "set") and at < len(data):
            bit = 1 << draw(st.integers(0, 7))
            data[at] = data[at] ^ bit if kind == "flip" else draw(st.integers(0, 255))
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del data[at : at + draw(st.integers(1, 8))]
        elif kind == "repeat":
            data[at:at] = data[at : at + draw(st.integers(1, 24))]
        elif kind == "cut":
            del data[at:]
    return bytes(data)


@fuzz_settings(300)
@given(mutated(), st.data())
def test_mutated_frames_either_decode_or_raise_protocol_error(stream: bytes, data: st.DataObject) -> None:
    decodes_or_fails_cleanly(stream, data.draw(pieces_of(stream)))
