"""The agent's structured logger: key-value events carried by stdlib logging records.

A call such as `log.info("placed %s/%s ...", ns, name, pod=name, cpus=cpus)` becomes one `logging` record
whose message is the human sentence and whose extra attributes are the fields, so whatever handler the
process installs sees both (`nri-podlevel run` renders them as JSON or console lines; a test's log capture
reads the sentence). The level check comes first: a call below the logger's level returns before the
sentence is formatted or a field is rendered, which keeps disabled debug lines off the event path's cost.
Field values stay objects (a CPUSet, an int) until a handler renders them.
"""

from __future__ import annotations

import logging
from typing import cast

import structlog

_PROCESSORS = (
    structlog.stdlib.filter_by_level,
    structlog.stdlib.PositionalArgumentsFormatter(),
    structlog.stdlib.render_to_log_kwargs,
)


def logger(name: str) -> structlog.stdlib.BoundLogger:
    """The structured logger over the stdlib logger `name` (independent of structlog's global setup)."""
    # `wrap_logger` hands out a lazy proxy that builds a new bound logger on every attribute access (every
    # `isEnabledFor`, every disabled call on the event path); binding once gives the logger itself.
    return cast(
        structlog.stdlib.BoundLogger,
        structlog.wrap_logger(
            logging.getLogger(name), processors=list(_PROCESSORS), wrapper_class=structlog.stdlib.BoundLogger
        ).bind(),
    )
