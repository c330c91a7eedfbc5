"""How `nri-podlevel run` writes its log (`--log-format`): JSON lines or a console layout, on stderr.

`auto` (the default) picks the console layout when stderr is a terminal and JSON lines otherwise (a
DaemonSet's log, collected by the node's log agent). Every `logging` record, the structured events
(`podlevel.eventlog`: a sentence built from fields that are record attributes) and the plain
`logging.getLogger(...)` lines alike, becomes one event with the same keys in both layouts: `event` (the
sentence), `level`, `logger`, the event's fields, `timestamp` (the record's time, UTC, ISO 8601). JSON
renders a value that is not a JSON type (a CPU set, a path) as its text; the console layout is structlog's.

A line logged on a thread running an event loop (the NRI handlers) is formatted and written after the
event's answer has left: the record waits until the loop runs its next callbacks. Only the record is built
on the event path (~3 us of the ~10 us a line costs). Lines logged elsewhere are written at once, after
whatever still waits, so each thread's lines stay in order. `flush()` on the root handler writes what
waits; `logging.shutdown` (at exit) does too.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import logging.handlers
import sys
from collections.abc import Callable
from typing import Any, Final, TextIO

from podlevel.eventlog import RECORD_ATTRIBUTES

LOG_FORMATS: Final = ("auto", "json", "console")


_to_json: Final = json.JSONEncoder(default=str).encode


def event_of(record: logging.LogRecord) -> dict[str, Any]:
    """The record as an event: sentence, level, logger, fields, timestamp (exc_info when it has one)."""
    event: dict[str, Any] = {"event": record.getMessage(), "level": record.levelname.lower(),
                             "logger": record.name}
    for key, value in record.__dict__.items():
        if key not in RECORD_ATTRIBUTES:
            event[key] = value
    created = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
    event["timestamp"] = created.isoformat().replace("+00:00", "Z")
    if record.exc_info:
        event["exc_info"] = record.exc_info
    return event


ConsoleRenderer = Callable[[Any, str, dict[str, Any]], str]
"""structlog's processor signature: (logger, method name, event) -> the line."""


class EventFormatter(logging.Formatter):
    """A record's event rendered as one JSON object, or by a console renderer."""

    def __init__(self, console: ConsoleRenderer | None = None) -> None:
        super().__init__()
        self._console = console

    def format(self, record: logging.LogRecord) -> str:
        event = event_of(record)
        if self._console is not None:
            # Fields as their text (`0-3`, not `CPUSet(...)`): the console layout shows values with repr().
            for key, value in event.items():
                if key != "exc_info" and not isinstance(value, str | int | float | bool | None):
                    event[key] = str(value)
            return self._console(None, event["level"], event)
        exc_info = event.pop("exc_info", None)
        if exc_info is not None:
            event["exception"] = self.formatException(exc_info)
        return _to_json(event)


def formatter(log_format: str, stream: TextIO) -> logging.Formatter:
    """The formatter for `log_format` ("auto" decides by whether `stream` is a terminal)."""
    tty = stream.isatty()
    if log_format == "console" or (log_format == "auto" and tty):
        # Imported for the console layout only: structlog and rich take ~75 ms to import, a third of the
        # agent's start, and memory it has no use for when it writes JSON.
        import structlog.dev

        return EventFormatter(structlog.dev.ConsoleRenderer(colors=tty))
    return EventFormatter()


class AfterAnswerHandler(logging.handlers.MemoryHandler):
    """The stdlib's buffer in front of `target`, flushed by when, not how much: a record logged on an event
    loop's thread waits for the loop's next callbacks; one logged elsewhere is written at once, after those
    that wait."""

    def __init__(self, target: logging.Handler) -> None:
        super().__init__(capacity=0, target=target)
        self._drain_on: asyncio.AbstractEventLoop | None = None
        """The loop a `flush` is scheduled on (should it close first, the next record schedules anew)."""

    def shouldFlush(self, record: logging.LogRecord) -> bool:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return True
        if self._drain_on is not loop:
            self._drain_on = loop
            loop.call_soon(self.flush)
        return False

    def flush(self) -> None:
        """Write every record that waits."""
        self.acquire()
        try:
            self._drain_on = None
            super().flush()
        finally:
            self.release()


def configure_logging(level: str, log_format: str, stream: TextIO | None = None) -> None:
    """Send every log record at `level` and above to `stream` (stderr) in `log_format`."""
    out = sys.stderr if stream is None else stream
    target = logging.StreamHandler(out)
    target.setFormatter(formatter(log_format, out))
    root = logging.getLogger()
    for old in root.handlers[:]:
        root.removeHandler(old)
        if isinstance(old, AfterAnswerHandler):
            old.close()
    root.addHandler(AfterAnswerHandler(target))
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
