"""What this build of the plugin is, for `nri-podlevel --version` and the `nri_podlevel_build_info` metric:
the installed distribution's version, the Python that runs it and the NRI API package it speaks. Stdlib
only, in the lowest layer, so both the command line and the metrics can name it."""

from __future__ import annotations

import platform
from importlib import metadata
from typing import Final

DISTRIBUTION: Final = "nri-podlevel"
NRI_API: Final = "v1alpha1"
"""The NRI protobuf package the plugin's messages belong to (`nri.pkg.api.v1alpha1`)."""


def version() -> str:
    """The installed distribution's version; `unknown` when run from a tree that was never installed."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


def python_version() -> str:
    return platform.python_version()


def describe() -> str:
    return f"nri-podlevel {version()} (Python {python_version()}, NRI API {NRI_API})"
