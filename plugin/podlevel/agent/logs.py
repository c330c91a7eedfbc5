"""The agent's structured logger: key-value events carried by stdlib logging records.

A call such as `log.info("placed %s/%s ...", ns, name, pod=name, cpus=cpus)` becomes one `logging` record
whose message is the human sentence and whose extra attributes are the fields, so whatever handler the
process installs sees both (`nri-podlevel run` renders them as JSON or console lines; a test's log capture
reads the sentence). The level check comes first: a call below the logger's level returns before anything
is built. Above it, only the record is built on the caller's thread: the sentence is formatted and the
fields rendered when a handler writes the line (`nri-podlevel run` does that after the event's answer has
left), so field values and arguments must not change after the call (a CPUSet, an int, a str).
The record names no source file or line: the lines never show them, and finding them walks the stack.
"""

from __future__ import annotations

import logging
from typing import Any


class EventLogger:
    """`debug`/`info`/`warning`/`error(sentence, *args, **fields)` over the stdlib logger `name`."""

    __slots__ = ("_logger",)

    def __init__(self, name: str) -> None:
        self._logger = logging.getLogger(name)

    def isEnabledFor(self, level: int) -> bool:
        """The stdlib Logger's check, under its name."""
        return self._logger.isEnabledFor(level)

    def log(self, level: int, sentence: str, *args: object, **fields: Any) -> None:
        logger = self._logger
        if logger.isEnabledFor(level):
            logger.handle(logger.makeRecord(logger.name, level, "", 0, sentence, args, None, extra=fields))

    def debug(self, sentence: str, *args: object, **fields: Any) -> None:
        self.log(logging.DEBUG, sentence, *args, **fields)

    def info(self, sentence: str, *args: object, **fields: Any) -> None:
        self.log(logging.INFO, sentence, *args, **fields)

    def warning(self, sentence: str, *args: object, **fields: Any) -> None:
        self.log(logging.WARNING, sentence, *args, **fields)

    def error(self, sentence: str, *args: object, **fields: Any) -> None:
        self.log(logging.ERROR, sentence, *args, **fields)


def logger(name: str) -> EventLogger:
    """The structured logger over the stdlib logger `name`."""
    return EventLogger(name)
