"""ttrpc codec: bytes-level edge cases of feed/encode on both roles."""

from __future__ import annotations

import struct

import pytest

from podlevel._proto.ttrpc import ttrpc_pb2
from podlevel.ttrpc.codec import (
    MAX_INBOUND_MESSAGE,
    MAX_OUTBOUND_MESSAGE,
    Code,
    Connection,
    MessageType,
    Rejected,
    Request,
    Response,
    Role,
    code_name,
)
from podlevel.ttrpc.errors import MessageTooLarge, ProtocolError
from podlevel.ttrpc.mux import PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN, encode_frame, frame_message

SERVICE = "nri.pkg.api.v1alpha1.Plugin"


def plugin() -> Connection:
    return Connection(Role.PLUGIN)


def runtime() -> Connection:
    return Connection(Role.RUNTIME)


def raw_message(stream_id: int, msg_type: int, body: bytes, flags: int = 0) -> bytes:
    return struct.pack(">IIBB", len(body), stream_id, msg_type, flags) + body


def request_body(method: str = "Configure", payload: bytes = b"") -> bytes:
    return ttrpc_pb2.Request(service=SERVICE, method=method, payload=payload).SerializeToString()


def raw_request(stream_id: int, method: str = "Configure", payload: bytes = b"", conn: int = 1) -> bytes:
    return encode_frame(conn, raw_message(stream_id, MessageType.REQUEST, request_body(method, payload)))


def test_request_round_trip_between_roles() -> None:
    client, server = plugin(), runtime()
    request = client.request("nri.pkg.api.v1alpha1.Runtime", "RegisterPlugin", b"\x0a\x01x", timeout_nano=5)
    assert request.stream_id == 1
    (received,) = server.feed(client.encode(request))
    assert received == request


def test_response_round_trip_with_status() -> None:
    server, client = plugin(), runtime()
    wire = server.encode(Response(7, code=Code.UNIMPLEMENTED, message="no such method"))
    assert client.feed(wire) == [Response(7, payload=b"", code=12, message="no such method")]


def test_ok_status_is_sent_explicitly() -> None:
    wire = plugin().encode(Response(1, payload=b"\x10\x01"))
    body = wire[8 + 10 :]
    assert body == b"\x0a\x00\x12\x02\x10\x01"


def test_missing_status_means_ok() -> None:
    body = ttrpc_pb2.Response(payload=b"abc").SerializeToString()
    wire = encode_frame(2, raw_message(1, MessageType.RESPONSE, body))
    assert plugin().feed(wire) == [Response(1, payload=b"abc", code=Code.OK, message="")]


def test_client_stream_ids_are_odd_and_increasing() -> None:
    client = plugin()
    assert [client.request("s", "m", b"").stream_id for _ in range(4)] == [1, 3, 5, 7]


def test_message_split_across_frames_and_reads() -> None:
    message = raw_message(1, MessageType.REQUEST, request_body(payload=b"p" * 100))
    wire = encode_frame(1, message[:3]) + encode_frame(1, message[3:50]) + encode_frame(1, message[50:])
    server = plugin()
    out = []
    for i in range(len(wire)):
        out += server.feed(wire[i : i + 1])
    assert [m.payload for m in out if isinstance(m, Request)] == [b"p" * 100]


def test_two_messages_in_one_frame_and_interleaved_conns() -> None:
    req1 = raw_message(1, MessageType.REQUEST, request_body("Configure"))
    req3 = raw_message(3, MessageType.REQUEST, request_body("Synchronize"))
    resp = raw_message(1, MessageType.RESPONSE, ttrpc_pb2.Response(payload=b"ok").SerializeToString())
    wire = encode_frame(1, req1 + req3[:5]) + encode_frame(2, resp) + encode_frame(1, req3[5:])
    out = plugin().feed(wire)
    assert [type(m).__name__ for m in out] == ["Request", "Response", "Request"]
    assert [m.method for m in out if isinstance(m, Request)] == ["Configure", "Synchronize"]


def test_unknown_conn_ids_are_dropped_and_counted() -> None:
    conn = plugin()
    wire = encode_frame(0, b"junk") + encode_frame(9, b"\xff" * 20) + raw_request(1)
    (only,) = conn.feed(wire)
    assert isinstance(only, Request)
    assert conn.dropped_frames == 2


def test_outbound_over_4mib_refused_naming_size_and_limit() -> None:
    conn = plugin()
    probe = b"x" * MAX_OUTBOUND_MESSAGE
    envelope = ttrpc_pb2.Response(status=ttrpc_pb2.Status(), payload=probe)
    overhead = len(envelope.SerializeToString()) - len(probe)
    fits = Response(1, payload=b"x" * (MAX_OUTBOUND_MESSAGE - overhead))
    assert len(conn.encode(fits)) == MAX_OUTBOUND_MESSAGE + 10 + 2 * 8
    too_big = Response(1, payload=b"x" * (MAX_OUTBOUND_MESSAGE - overhead + 1))
    limits = rf"{MAX_OUTBOUND_MESSAGE + 1} bytes.*{MAX_OUTBOUND_MESSAGE}-byte"
    with pytest.raises(MessageTooLarge, match=limits):
        conn.encode(too_big)


def test_large_outbound_uses_exactly_two_frames() -> None:
    wire = plugin().encode(Response(3, payload=b"y" * 100_000))
    first_len = struct.unpack_from(">I", wire, 4)[0]
    assert first_len == 4096
    second_conn, second_len = struct.unpack_from(">II", wire, 8 + first_len)
    assert second_conn == 1
    assert 8 + first_len + 8 + second_len == len(wire)


def test_inbound_over_4mib_accepted() -> None:
    payload = b"z" * (6 << 20)
    message = raw_message(1, MessageType.REQUEST, request_body("Synchronize", payload))
    # Old Go writers split at 16 MiB frames; here the message arrives in 1 MiB frames.
    step = 1 << 20
    wire = b"".join(encode_frame(1, message[i : i + step]) for i in range(0, len(message), step))
    (received,) = plugin().feed(wire)
    assert isinstance(received, Request)
    assert received.payload == payload


def test_inbound_over_cap_is_a_protocol_error_from_header_alone() -> None:
    header = struct.pack(">IIBB", MAX_INBOUND_MESSAGE + 1, 1, MessageType.REQUEST, 0)
    with pytest.raises(
        ProtocolError,
        match=rf"stream 1 declares a {MAX_INBOUND_MESSAGE + 1}-byte payload.*{MAX_INBOUND_MESSAGE}-byte",
    ):
        plugin().feed(encode_frame(1, header))


def test_truncated_message_waits_for_the_rest() -> None:
    conn = plugin()
    message = raw_message(1, MessageType.REQUEST, request_body())
    assert conn.feed(encode_frame(1, message[:-1])) == []
    (received,) = conn.feed(encode_frame(1, message[-1:]))
    assert isinstance(received, Request)


def test_undecodable_payload_fails_connection_for_good() -> None:
    conn = plugin()
    bad = encode_frame(1, raw_message(1, MessageType.REQUEST, b"\x0a\x05ab"))
    with pytest.raises(ProtocolError, match="undecodable ttrpc Request on stream 1"):
        conn.feed(bad)
    with pytest.raises(ProtocolError, match="already failed"):
        conn.feed(raw_request(3))


def test_undecodable_response_is_a_protocol_error() -> None:
    bad = encode_frame(2, raw_message(1, MessageType.RESPONSE, b"\x0a\xff"))
    with pytest.raises(ProtocolError, match="undecodable ttrpc Response"):
        plugin().feed(bad)


@pytest.mark.parametrize(
    ("conn", "msg_type"),
    [
        pytest.param(1, MessageType.RESPONSE, id="response-on-serve-conn"),
        pytest.param(1, MessageType.DATA, id="data-on-serve-conn"),
        pytest.param(2, MessageType.REQUEST, id="request-on-call-conn"),
        pytest.param(2, 0x7F, id="unknown-type"),
    ],
)
def test_wrong_message_type_for_conn_is_a_protocol_error(conn: int, msg_type: int) -> None:
    with pytest.raises(ProtocolError, match=f"message type {msg_type}"):
        plugin().feed(encode_frame(conn, raw_message(1, msg_type, b"")))


def test_even_stream_id_is_rejected_with_invalid_argument() -> None:
    conn = plugin()
    (rejected,) = conn.feed(raw_request(2))
    assert rejected == Rejected(2, Code.INVALID_ARGUMENT, "stream id 2 must be odd")
    assert isinstance(rejected, Rejected)
    assert conn.encode(rejected.response()) == runtime_side_response(
        2, Code.INVALID_ARGUMENT, rejected.message
    )
    (ok,) = conn.feed(raw_request(1))
    assert isinstance(ok, Request)


def runtime_side_response(stream_id: int, code: int, message: str) -> bytes:
    body = ttrpc_pb2.Response(status=ttrpc_pb2.Status(code=code, message=message)).SerializeToString()
    return frame_message(1, raw_message(stream_id, MessageType.RESPONSE, body))


@pytest.mark.parametrize("repeat", [5, 3], ids=["reused", "backwards"])
def test_non_increasing_stream_id_is_rejected(repeat: int) -> None:
    conn = plugin()
    assert isinstance(conn.feed(raw_request(5))[0], Request)
    (rejected,) = conn.feed(raw_request(repeat))
    assert rejected == Rejected(
        repeat, Code.INVALID_ARGUMENT, f"stream id {repeat} must be greater than the last one, 5"
    )
    assert isinstance(conn.feed(raw_request(7))[0], Request)


def test_the_roles_serve_what_the_other_calls() -> None:
    assert (Role.PLUGIN.serve_conn, Role.PLUGIN.call_conn) == (PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN)
    assert (Role.RUNTIME.serve_conn, Role.RUNTIME.call_conn) == (RUNTIME_SERVICE_CONN, PLUGIN_SERVICE_CONN)


def test_code_name() -> None:
    assert code_name(12) == "UNIMPLEMENTED(12)"
    assert code_name(99) == "code 99"
