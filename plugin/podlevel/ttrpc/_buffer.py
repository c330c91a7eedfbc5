"""Length-prefixed records out of a byte stream: the splitter under both mux frames and ttrpc messages.

A record is a fixed-size header, one field of which is the payload's length, then the payload. Both
layers of the wire have that shape (a frame: conn id, length; a ttrpc message: length, stream id, type,
flags), so one buffer serves both, each with its own named header type.

Invariants kept here:
- `feed` returns only whole records, in order; a partial one stays buffered for the next call.
- A declared length over the limit raises ProtocolError as soon as the header is in, before any of its
  payload is buffered, so a broken length field cannot make us buffer without bound.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from podlevel.ttrpc.errors import ProtocolError


class Header(Protocol):
    @property
    def length(self) -> int:
        """The length of the payload that follows the header."""
        ...


H = TypeVar("H", bound=Header)


class RecordBuffer(Generic[H]):
    """Buffers a byte stream and hands out its whole records as (header, payload).

    `layout` unpacks the header's bytes and `make` names its fields; `describe(header)` names the record
    in the error for an over-`limit` length.
    """

    def __init__(
        self,
        layout: struct.Struct,
        make: Callable[[tuple[Any, ...]], H],
        *,
        limit: int,
        describe: Callable[[H], str],
    ) -> None:
        self._layout = layout
        self._make = make
        self._limit = limit
        self._describe = describe
        self._data = bytearray()

    def __len__(self) -> int:
        """Bytes received that do not yet form a whole record."""
        return len(self._data)

    def feed(self, data: bytes | memoryview) -> list[tuple[H, bytes]]:
        """Append `data` (read only during the call); remove and return every record now whole."""
        # With nothing buffered (the usual case: a read holds whole records), records are cut straight from
        # `data` and only a partial record at its end is kept: this layer copies each payload once.
        buffered = bool(self._data)
        if buffered:
            self._data += data
        source = self._data if buffered else data
        records: list[tuple[H, bytes]] = []
        offset = 0
        size = self._layout.size
        with memoryview(source) as view:
            while len(view) - offset >= size:
                header = self._make(self._layout.unpack_from(view, offset))
                if header.length > self._limit:
                    raise ProtocolError(
                        f"{self._describe(header)} declares a {header.length}-byte payload, over the "
                        f"{self._limit}-byte limit"
                    )
                end = offset + size + header.length
                if end > len(view):
                    break
                records.append((header, view[offset + size : end].tobytes()))
                offset = end
            if not buffered:
                self._data = bytearray(view[offset:])
        if buffered:
            del self._data[:offset]
        return records
