"""A plugin's NRI identity (name and two-digit index) and where it comes from.

Rules (nri pkg/api/plugin.go): the index is exactly two ASCII digits; the name is non-empty and, from
NRI v0.12.0, made of `[A-Za-z0-9_.+-]` only — enforced here for every runtime so that a name that works
on one containerd works on all. Sources, first match wins: explicit values, then the environment a
runtime gives a plugin it launched (`NRI_PLUGIN_NAME`, `NRI_PLUGIN_IDX`), then the `NN-name` form of the
executable's file name. A `PluginIdentity` is valid by construction.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

NAME_ENV: Final = "NRI_PLUGIN_NAME"
INDEX_ENV: Final = "NRI_PLUGIN_IDX"
SOCKET_ENV: Final = "NRI_PLUGIN_SOCKET"

_NAME = re.compile(r"[A-Za-z0-9_.+-]+")
_INDEX = re.compile(r"[0-9]{2}")
_LAUNCHED_FILE = re.compile(r"([0-9]{2})-(.+)")


class InvalidIdentity(ValueError):
    """A plugin name, index or launch environment that breaks NRI's rules."""


@dataclass(frozen=True, slots=True)
class PluginIdentity:
    name: str
    index: str

    def __post_init__(self) -> None:
        if not self.name:
            raise InvalidIdentity("plugin name must not be empty")
        if not _NAME.fullmatch(self.name):
            raise InvalidIdentity(
                f"plugin name {self.name!r} may only contain characters from [A-Za-z0-9_.+-]"
            )
        if not _INDEX.fullmatch(self.index):
            raise InvalidIdentity(f"plugin index {self.index!r} must be exactly two digits (00-99)")

    def __str__(self) -> str:
        return f"{self.index}-{self.name}"


def resolve_identity(
    name: str | None, index: str | None, environ: Mapping[str, str], argv0: str
) -> PluginIdentity:
    """Fill in what was not given explicitly from the launch environment, then from `NN-name` in argv0."""
    name = name or environ.get(NAME_ENV) or None
    index = index or environ.get(INDEX_ENV) or None
    if name is None or index is None:
        match = _LAUNCHED_FILE.fullmatch(os.path.basename(argv0))
        if match is None:
            missing = " and ".join(
                what for what, value in (("name", name), ("index", index)) if value is None
            )
            raise InvalidIdentity(
                f"plugin {missing} not given, {NAME_ENV}/{INDEX_ENV} not set, and the executable name "
                f"{os.path.basename(argv0)!r} is not of the form NN-name"
            )
        index = index or match[1]
        name = name or match[2]
    return PluginIdentity(name, index)


def launched_socket_fd(environ: Mapping[str, str]) -> int | None:
    """The connected socket a runtime passes to a plugin it launched, or None for an external plugin."""
    text = environ.get(SOCKET_ENV)
    if not text:
        return None
    if not text.isascii() or not text.isdigit():
        raise InvalidIdentity(f"{SOCKET_ENV}={text!r} is not a file descriptor number")
    return int(text)
