"""The two ways the wire layer fails.

`ProtocolError` is the only exception inbound bytes can raise: the peer broke a framing rule, and the
connection that saw it is unusable from then on (the transport closes it and the caller redials).
`MessageTooLarge` is raised on the way out, before any byte is written, when this side tries to send a
message bigger than a Go peer accepts; the connection stays usable.
"""

from __future__ import annotations


class ProtocolError(Exception):
    """The peer sent bytes that break the mux or ttrpc framing rules; the message names rule and numbers."""


class MessageTooLarge(ValueError):
    """An outbound ttrpc message exceeds the size a Go ttrpc peer accepts."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"ttrpc message of {size} bytes exceeds the {limit}-byte limit of Go ttrpc peers")
        self.size = size
        self.limit = limit
