"""Files and standard input as the commands read them: bounded, and text only when it is UTF-8.

Every command reads its inputs through here, so `/dev/zero`, a 10 GiB file or a binary file fail the same
way: an `InputError` naming the input and the rule (exit status 2), never a read without end, a
MemoryError or a UnicodeDecodeError traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path

from podlevel.engine.errors import InputError
from podlevel.engine.limits import MAX_FILE_BYTES

STDIN = "-"


def read_bytes(path: str | Path) -> bytes:
    """At most `limits.MAX_FILE_BYTES` of `path` ("-": standard input). Raises InputError ("input size")
    when there is more, OSError when it cannot be read."""
    if str(path) == STDIN:
        data = sys.stdin.buffer.read(MAX_FILE_BYTES + 1)
    else:
        with open(path, "rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise InputError("input size", f"{source_name(path)}: more than {MAX_FILE_BYTES} bytes; inputs are "
                                       "read up to that size")
    return data


def read_text(path: str | Path) -> str:
    """`read_bytes` decoded as UTF-8. Raises InputError ("UTF-8") naming the first bad byte."""
    data = read_bytes(path)
    try:
        return data.decode()
    except UnicodeDecodeError as err:
        bad = f"byte 0x{data[err.start]:02x} at offset {err.start}"
        raise InputError("UTF-8", f"{source_name(path)}: {bad} is not UTF-8 text") from None


def source_name(path: str | Path) -> str:
    """How messages name the input."""
    return "<stdin>" if str(path) == STDIN else str(path)
