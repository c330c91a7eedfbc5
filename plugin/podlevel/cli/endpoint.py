"""The running plugin's operator views (`--debug-address`) as the operator commands reach them: where they
are, and one GET returning the JSON document (`/debug/node`, `/debug/explain`)."""

from __future__ import annotations

import argparse
import http.client
import json
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

from podlevel.cgroups import DEFAULT_CGROUP_ROOT
from podlevel.httpd import parse_address
from podlevel.report import DEFAULT_DEBUG_ADDRESS
from podlevel.state.store import DEFAULT_STATE_DIR

TIMEOUT_S: Final = 5.0


class Unreachable(Exception):
    """The plugin's endpoint did not answer."""


class BadInput(Exception):
    """What the command was given cannot be used (exit status 2)."""


def add_source_arguments(parser: argparse.ArgumentParser, *, local: bool = True) -> None:
    parser.add_argument("--address", default=DEFAULT_DEBUG_ADDRESS,
                        help="HOST:PORT of the plugin's operator views, its --debug-address (%(default)s)")
    if local:
        parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR,
                            help="the plugin's checkpoints (%(default)s)")
        parser.add_argument("--cgroup-root", type=Path, default=None,
                            help="the cgroup mount (default: the running plugin's own --cgroup-root, right "
                            f"inside its container; when it does not answer, {DEFAULT_CGROUP_ROOT})")
        parser.add_argument("--sysfs-root", default="/sys",
                            help="sysfs for the NUMA layout when the plugin is down (%(default)s)")


def fetch(address: str, path: str, **query: str) -> tuple[int, Any]:
    """GET `path` on the endpoint: (status, the JSON body). Unreachable when nothing answers there."""
    try:
        host, port = parse_address(address)
    except ValueError as err:
        raise BadInput(str(err)) from None
    target = path + ("?" + "&".join(f"{k}={quote(v, safe='/')}" for k, v in query.items()) if query else "")
    connection = http.client.HTTPConnection(host, port, timeout=TIMEOUT_S)
    try:
        connection.request("GET", target)
        response = connection.getresponse()
        body = response.read()
    except (OSError, http.client.HTTPException) as err:
        raise Unreachable(f"the plugin endpoint {address} does not answer: {err}") from None
    finally:
        connection.close()
    try:
        return response.status, json.loads(body)
    except ValueError:
        what = f"{address}{path} answered {response.status} without JSON: is it the plugin?"
        raise Unreachable(what) from None
