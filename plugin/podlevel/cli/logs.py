"""How `nri-podlevel run` writes its log (`--log-format`): JSON lines or a console layout, on stderr.

`auto` (the default) picks the console layout when stderr is a terminal and JSON lines otherwise (a
DaemonSet's log, collected by the node's log agent). Every `logging` record goes through one structlog
`ProcessorFormatter`, the agent's structured events (`agent.logs`: a sentence plus fields as record
attributes) and the plain `logging.getLogger(...)` lines of the other layers alike, so a line carries the
same keys in both layouts: `event` (the sentence), `level`, `logger`, `timestamp` (UTC, ISO 8601) and the
event's fields. JSON renders a value that is not a JSON type (a CPU set, a path) as its text.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any, Final, TextIO

import structlog

LOG_FORMATS: Final = ("auto", "json", "console")


def _as_text(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Fields as their text (`0-3`, not `CPUSet(...)`): the console layout shows values with repr()."""
    for key, value in event_dict.items():
        if not isinstance(value, str | int | float | bool) and value is not None and key != "exc_info":
            event_dict[key] = str(value)
    return event_dict


def formatter(log_format: str, stream: TextIO) -> logging.Formatter:
    """The formatter for `log_format` ("auto" decides by whether `stream` is a terminal)."""
    tty = stream.isatty()
    console = log_format == "console" or (log_format == "auto" and tty)
    renderer: list[Any] = (
        [_as_text, structlog.dev.ConsoleRenderer(colors=tty)]
        if console
        else [structlog.processors.format_exc_info, structlog.processors.JSONRenderer(default=str)]
    )
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            structlog.stdlib.ExtraAdder(),
            structlog.processors.TimeStamper(fmt="iso", utc=True),
        ],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *renderer],
    )


def configure_logging(level: str, log_format: str, stream: TextIO | None = None) -> None:
    """Send every log record at `level` and above to `stream` (stderr) in `log_format`."""
    out = sys.stderr if stream is None else stream
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter(log_format, out))
    root = logging.getLogger()
    for old in root.handlers[:]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
