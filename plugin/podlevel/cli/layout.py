"""Terminal layout for the operator commands: aligned columns, colour only on a terminal."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence


class Style:
    """ANSI colour when stdout is a terminal (and NO_COLOR is unset), plain text otherwise."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    @classmethod
    def for_stdout(cls) -> Style:
        return cls(sys.stdout.isatty() and "NO_COLOR" not in os.environ)

    def _wrap(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.enabled and text else text

    def bold(self, text: str) -> str:
        return self._wrap("1", text)

    def drift(self, text: str) -> str:
        """A value that is not what it should be: red on a terminal, marked with `!` elsewhere."""
        return self._wrap("1;31", text) if self.enabled else f"{text}!"

    def good(self, text: str) -> str:
        return self._wrap("32", text)


def columns(rows: Sequence[Sequence[str]], indent: str = "", style: Style | None = None) -> list[str]:
    """Rows aligned in columns; widths ignore ANSI codes, so coloured cells line up too."""
    widths = [max(_visible(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [cell + " " * (width - _visible(cell)) for cell, width in zip(row, widths, strict=True)]
        lines.append((indent + "  ".join(cells)).rstrip())
    if style is not None and lines:
        lines[0] = style.bold(lines[0])
    return lines


def _visible(text: str) -> int:
    length, escape = 0, False
    for char in text:
        if char == "\x1b":
            escape = True
        elif escape:
            escape = char != "m"
        else:
            length += 1
    return length
