"""Unary ttrpc over the NRI mux, without I/O: `Connection.feed(bytes)` -> messages, `encode(msg)` -> bytes.

A ttrpc message is a 10-byte header (payload length uint32, stream id uint32, type byte, flags byte; big
endian) and a protobuf `ttrpc.Request` or `ttrpc.Response`. One `Connection` is one side of one socket,
told its `Role` once: it serves requests arriving on the role's `serve_conn` and calls the peer on its
`call_conn` (a plugin serves conn 1 and calls on conn 2; a runtime the other way round).

Invariants kept here:
- Inbound bytes are buffered per conn; a message may span frames and frames may hold parts of two messages.
- The client side numbers its requests 1, 3, 5, ... (odd, strictly increasing).
- The server side turns an even or non-increasing stream id into a `Rejected` answer (status
  InvalidArgument), as Go's ttrpc server does, and never hands such a request on.
- `encode` never produces a message over `MAX_OUTBOUND_MESSAGE` (raises MessageTooLarge instead).
- Any framing violation raises ProtocolError, and the connection then stays failed: every later `feed`
  raises again, so no half-parsed state is ever reused.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Final, NamedTuple

from google.protobuf.message import DecodeError

from podlevel._proto.ttrpc import ttrpc_pb2
from podlevel.ttrpc._buffer import RecordBuffer
from podlevel.ttrpc.errors import MessageTooLarge, ProtocolError
from podlevel.ttrpc.mux import PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN, FrameDecoder, frame_message

MESSAGE_HEADER_SIZE: Final = 10

# Go ttrpc (channel.go) discards a larger inbound message and answers ResourceExhausted, and from
# v1.2.6 refuses to send one; a peer must never be sent more.
MAX_OUTBOUND_MESSAGE: Final = 4 << 20

# The largest reply payload an OK response can carry: the ttrpc.Response around it takes the explicit OK
# status (2 bytes) and the payload field's tag and length (at most 1 + 5).
MAX_RESPONSE_PAYLOAD: Final = MAX_OUTBOUND_MESSAGE - 8

# ttrpc < v1.2.6 (containerd <= 1.7.25) sends messages over 4 MiB, e.g. one big Synchronize before NRI
# had chunking; accept them, bounded so that a broken length field cannot make us buffer without limit.
MAX_INBOUND_MESSAGE: Final = 64 << 20

_HEADER = struct.Struct(">IIBB")


class Role(enum.Enum):
    """Which end of the NRI socket this side is; the peer is the other one."""

    PLUGIN = "plugin"
    RUNTIME = "runtime"

    @property
    def serve_conn(self) -> int:
        """The conn carrying the requests this side serves."""
        return PLUGIN_SERVICE_CONN if self is Role.PLUGIN else RUNTIME_SERVICE_CONN

    @property
    def call_conn(self) -> int:
        """The conn carrying this side's calls to the peer."""
        return RUNTIME_SERVICE_CONN if self is Role.PLUGIN else PLUGIN_SERVICE_CONN


class MessageType(enum.IntEnum):
    REQUEST = 1
    RESPONSE = 2
    DATA = 3


class Code(enum.IntEnum):
    """gRPC status codes, as ttrpc carries them in Response.status.code."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


def code_name(code: int) -> str:
    """`Unimplemented(12)` style name; codes outside the enum keep their number."""
    try:
        return f"{Code(code).name}({code})"
    except ValueError:
        return f"code {code}"


@dataclass(frozen=True, slots=True)
class Request:
    """A unary call: run `service`/`method` on `payload` (a serialized protobuf message)."""

    stream_id: int
    service: str
    method: str
    payload: bytes = b""
    timeout_nano: int = 0
    metadata: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Response:
    """The answer on the request's stream id; a non-OK `code` comes with a `message` and no payload."""

    stream_id: int
    payload: bytes = b""
    code: int = Code.OK
    message: str = ""


@dataclass(frozen=True, slots=True)
class Rejected:
    """An inbound request refused by a ttrpc rule; send `response()` and do not run it."""

    stream_id: int
    code: Code
    message: str

    def response(self) -> Response:
        return Response(self.stream_id, code=self.code, message=self.message)


Inbound = Request | Response | Rejected


class _MessageHeader(NamedTuple):
    length: int
    stream_id: int
    msg_type: int
    flags: int


def _message_buffer(conn_id: int) -> RecordBuffer[_MessageHeader]:
    """One conn's byte stream, handing out whole ttrpc messages."""
    return RecordBuffer(
        _HEADER,
        _MessageHeader._make,
        limit=MAX_INBOUND_MESSAGE,
        describe=lambda header: f"ttrpc message on conn {conn_id} stream {header.stream_id}",
    )


class Connection:
    """Both ttrpc conversations of one mux socket, seen from one side."""

    def __init__(self, role: Role = Role.PLUGIN) -> None:
        self.role = role
        self.dropped_frames = 0
        self._frames = FrameDecoder()
        self._streams = {conn: _message_buffer(conn) for conn in (role.serve_conn, role.call_conn)}
        self._last_served = 0
        self._next_call = 1
        self._failure: ProtocolError | None = None

    def feed(self, data: bytes | memoryview) -> list[Inbound]:
        """Consume socket bytes; return requests to serve, responses to our calls and rejections.

        Frames for other conn ids are dropped (counted in `dropped_frames`), as the Go mux does.
        """
        if self._failure is not None:
            raise ProtocolError(f"connection already failed: {self._failure}")
        try:
            return self._feed(data)
        except ProtocolError as exc:
            self._failure = exc
            raise

    def _feed(self, data: bytes | memoryview) -> list[Inbound]:
        out: list[Inbound] = []
        for frame in self._frames.feed(data):
            stream = self._streams.get(frame.conn_id)
            if stream is None:
                self.dropped_frames += 1
                continue
            for header, body in stream.feed(frame.payload):
                if frame.conn_id == self.role.serve_conn:
                    out.append(self._inbound_request(header.stream_id, header.msg_type, body))
                else:
                    out.append(self._inbound_response(header.stream_id, header.msg_type, body))
        return out

    def _inbound_request(self, stream_id: int, msg_type: int, body: bytes) -> Request | Rejected:
        if msg_type != MessageType.REQUEST:
            raise ProtocolError(
                f"conn {self.role.serve_conn} carries requests to this side, got message type {msg_type} "
                f"on stream {stream_id}"
            )
        if stream_id % 2 == 0:
            return Rejected(stream_id, Code.INVALID_ARGUMENT, f"stream id {stream_id} must be odd")
        if stream_id <= self._last_served:
            return Rejected(
                stream_id,
                Code.INVALID_ARGUMENT,
                f"stream id {stream_id} must be greater than the last one, {self._last_served}",
            )
        self._last_served = stream_id
        try:
            pb = ttrpc_pb2.Request.FromString(body)
        except DecodeError as exc:
            raise ProtocolError(f"undecodable ttrpc Request on stream {stream_id}: {exc}") from exc
        return Request(
            stream_id=stream_id,
            service=pb.service,
            method=pb.method,
            payload=pb.payload,
            timeout_nano=pb.timeout_nano,
            metadata=tuple((kv.key, kv.value) for kv in pb.metadata),
        )

    def _inbound_response(self, stream_id: int, msg_type: int, body: bytes) -> Response:
        if msg_type != MessageType.RESPONSE:
            raise ProtocolError(
                f"conn {self.role.call_conn} carries responses to this side, got message type {msg_type} "
                f"on stream {stream_id}"
            )
        try:
            pb = ttrpc_pb2.Response.FromString(body)
        except DecodeError as exc:
            raise ProtocolError(f"undecodable ttrpc Response on stream {stream_id}: {exc}") from exc
        return Response(stream_id, payload=pb.payload, code=pb.status.code, message=pb.status.message)

    def request(self, service: str, method: str, payload: bytes, *, timeout_nano: int = 0) -> Request:
        """A new outbound request on the next client stream id (1, 3, 5, ...); pass it to `encode`."""
        stream_id = self._next_call
        self._next_call += 2
        return Request(stream_id, service, method, payload, timeout_nano)

    def encode(self, message: Request | Response) -> bytes:
        """Socket bytes for `message`: requests go on the role's call conn, responses on its serve conn."""
        if isinstance(message, Request):
            body = ttrpc_pb2.Request(
                service=message.service,
                method=message.method,
                payload=message.payload,
                timeout_nano=message.timeout_nano,
                metadata=[ttrpc_pb2.KeyValue(key=k, value=v) for k, v in message.metadata],
            ).SerializeToString()
            return self._encode(self.role.call_conn, message.stream_id, MessageType.REQUEST, body)
        # An OK status is sent explicitly (bytes 0a 00), as Go's server does.
        status = ttrpc_pb2.Status(code=message.code, message=message.message)
        body = ttrpc_pb2.Response(status=status, payload=message.payload).SerializeToString()
        return self._encode(self.role.serve_conn, message.stream_id, MessageType.RESPONSE, body)

    @staticmethod
    def _encode(conn_id: int, stream_id: int, msg_type: MessageType, body: bytes) -> bytes:
        if len(body) > MAX_OUTBOUND_MESSAGE:
            raise MessageTooLarge(len(body), MAX_OUTBOUND_MESSAGE)
        return frame_message(conn_id, _HEADER.pack(len(body), stream_id, msg_type, 0) + body)
