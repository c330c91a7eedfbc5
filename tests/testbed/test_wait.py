"""Test bed waiting: the first truthy result is returned, a condition that never holds fails naming it."""

from __future__ import annotations

import pytest

from testbed.wait import DeadlineExceeded, wait_until


def test_returns_first_truthy_result() -> None:
    answers = iter([None, 0, "ready"])
    assert wait_until(lambda: next(answers), 5, "answer") == "ready"


def test_deadline_names_the_condition() -> None:
    with pytest.raises(DeadlineExceeded, match=r"sockets up: not reached within 0\.05s"):
        wait_until(lambda: False, 0.05, "sockets up")
