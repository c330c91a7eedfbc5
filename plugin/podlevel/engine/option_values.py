"""Policy option values as the kubelet reads them: with Go's `strconv` rules, so `True`, `t` and `1` all
mean true and a stray space is an error. Used by the CPU and the topology manager options."""

from __future__ import annotations

import re
from typing import Final

from podlevel.engine.errors import InputError

_GO_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE: Final = frozenset({"0", "f", "F", "FALSE", "false", "False"})
_GO_INT: Final = re.compile(r"^[+-]?[0-9]+$")


def parse_go_bool(option: str, value: str) -> bool:
    """`strconv.ParseBool`; InputError names the option."""
    if value in _GO_TRUE:
        return True
    if value in _GO_FALSE:
        return False
    raise InputError(option, f"bad value {value!r}: not a boolean (true/false, t/f, 1/0)")


def parse_go_int(option: str, value: str) -> int:
    """`strconv.Atoi` for base-10 values; InputError names the option."""
    if not _GO_INT.match(value):
        raise InputError(option, f"bad value {value!r}: not an integer")
    return int(value)
