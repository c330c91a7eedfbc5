"""The project's structured logger: an event is a sentence built from its fields, carried by a stdlib record.

`log.info("placed {pod} container {container}", pod=key, container=name, cpus=cpus)` becomes one `logging`
record whose attributes are the fields and whose message is the sentence, formatted from those same fields
(`str.format` names), so each value is passed once. Whatever handler the process installs sees both
(`nri-podlevel run` renders them as JSON or console lines; a test's log capture reads the sentence). The
level check comes first: a call below the logger's level returns before anything is built. Above it, only
the record is built on the caller's thread; the sentence is formatted when a handler writes the line (`run`
does that after the event's answer has left), so field values must not change after the call (a CPUSet, an
int, a str). The record names no source file or line: the lines never show them, and finding them walks the
stack. Stdlib only, in the lowest layer, so every layer can log events.
"""

from __future__ import annotations

import logging
import sys
from types import TracebackType
from typing import Any, Final

ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None] | tuple[None, None, None]

RECORD_ATTRIBUTES: Final = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}
"""What every log record has of its own; any other attribute is an event's field."""


class _EventRecord(logging.LogRecord):
    def getMessage(self) -> str:
        return str(self.msg).format_map(self.__dict__)


class EventLogger:
    """`debug`/`info`/`warning`/`error(sentence, **fields)` over the stdlib logger `name`."""

    __slots__ = ("_logger",)

    def __init__(self, name: str) -> None:
        self._logger = logging.getLogger(name)

    def isEnabledFor(self, level: int) -> bool:
        """The stdlib Logger's check, under its name."""
        return self._logger.isEnabledFor(level)

    def log(self, level: int, sentence: str, *, exc_info: ExcInfo | None = None, **fields: Any) -> None:
        logger = self._logger
        if not logger.isEnabledFor(level):
            return
        record = _EventRecord(logger.name, level, "", 0, sentence, None, exc_info)
        clash = RECORD_ATTRIBUTES.intersection(fields)
        if clash:
            raise KeyError(f"event fields {sorted(clash)} would overwrite the log record's own")
        record.__dict__.update(fields)
        logger.handle(record)

    def debug(self, sentence: str, **fields: Any) -> None:
        self.log(logging.DEBUG, sentence, **fields)

    def info(self, sentence: str, **fields: Any) -> None:
        self.log(logging.INFO, sentence, **fields)

    def warning(self, sentence: str, **fields: Any) -> None:
        self.log(logging.WARNING, sentence, **fields)

    def error(self, sentence: str, **fields: Any) -> None:
        self.log(logging.ERROR, sentence, **fields)

    def exception(self, sentence: str, **fields: Any) -> None:
        """`error` with the exception being handled, whose traceback the handler writes after the line."""
        self.log(logging.ERROR, sentence, exc_info=sys.exc_info(), **fields)


def logger(name: str) -> EventLogger:
    """The structured logger over the stdlib logger `name` (give it `__name__`)."""
    return EventLogger(name)
