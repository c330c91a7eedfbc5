"""Waiting on a condition with a deadline, the only synchronization the test bed uses.

Polling keeps the condition the caller's own check (a socket that accepts, a process that is gone), so
there is no guessed sleep that is too short on a slow CI machine and wasted on a fast one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

POLL_INTERVAL_S = 0.02


class DeadlineExceeded(TimeoutError):
    """A condition did not hold before its deadline."""


def wait_until(condition: Callable[[], T | None], timeout: float, what: str) -> T:
    """Return the first truthy result of `condition`, polling until `timeout` seconds have passed.

    Raises DeadlineExceeded naming `what` and the timeout; `condition` may also raise to give up early
    (for example when the process it waits on has exited).
    """
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise DeadlineExceeded(f"{what}: not reached within {timeout:g}s")
        time.sleep(POLL_INTERVAL_S)
