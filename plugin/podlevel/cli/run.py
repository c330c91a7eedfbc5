"""`nri-podlevel run`: the plugin daemon.

Every setting comes from, in falling precedence: the command line, the environment
(`NRI_PODLEVEL_<FLAG>`, e.g. `NRI_PODLEVEL_NRI_SOCKET`, `NRI_PODLEVEL_POLICY`), the YAML file given with
`--config` (keys are the flag names: `nri-socket: /run/nri/nri.sock`), then the defaults. A setting
the file gives is taken unless the command line gave a different value or the environment set it. When
the runtime launched the plugin (`NRI_PLUGIN_SOCKET` set), name and index come from the runtime as NRI
requires. Bad configuration exits with status 2 and a message naming the setting.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import yaml

from podlevel.agent.placement import Placement
from podlevel.agent.plugin import PodLevelPlugin
from podlevel.cli.engine_flags import add_engine_arguments, engine_config
from podlevel.engine.errors import InputError
from podlevel.engine.manager import Engine
from podlevel.nri import DEFAULT_SOCKET_PATH, InvalidIdentity, Stub
from podlevel.sysfs.reader import read_topology

ENV_PREFIX: Final = "NRI_PODLEVEL_"
DEFAULT_NAME: Final = "podlevel"
DEFAULT_INDEX: Final = "10"


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("run", help="run the NRI plugin daemon", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", metavar="FILE", help="YAML file with settings (flag names as keys)")
    parser.add_argument("--nri-socket", default=DEFAULT_SOCKET_PATH, help="runtime NRI socket (%(default)s)")
    parser.add_argument("--plugin-name", default=DEFAULT_NAME, help="NRI plugin name (%(default)s)")
    parser.add_argument("--plugin-index", default=DEFAULT_INDEX, help="NRI plugin index (%(default)s)")
    parser.add_argument("--sysfs-root", default="/sys", help="sysfs to read the machine topology from")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    add_engine_arguments(parser)
    _env_defaults(parser, os.environ)
    parser.set_defaults(handler=run, defaults={a.dest: a.default for a in parser._actions})


def _env_defaults(parser: argparse.ArgumentParser, environ: Mapping[str, str]) -> None:
    """Environment values become the defaults, so a flag on the command line still wins."""
    for action in parser._actions:
        value = environ.get(ENV_PREFIX + action.dest.upper())
        if value is not None and action.dest not in ("help", "handler"):
            parser.set_defaults(**{action.dest: value})


def apply_config_file(
    args: argparse.Namespace, defaults: Mapping[str, Any], environ: Mapping[str, str]
) -> None:
    """Settings from `--config` for everything neither the command line nor the environment set."""
    if not args.config:
        return
    try:
        loaded = yaml.safe_load(Path(args.config).read_text()) or {}
    except (OSError, yaml.YAMLError) as err:
        raise InputError("--config", f"cannot read {args.config}: {err}") from None
    if not isinstance(loaded, dict):
        raise InputError("--config", f"{args.config} must hold a mapping of setting: value")
    for key, value in loaded.items():
        dest = str(key).replace("-", "_")
        if dest not in defaults or dest in ("config", "handler"):
            raise InputError("--config", f"{args.config}: unknown setting {key!r}")
        if getattr(args, dest) == defaults[dest] and ENV_PREFIX + dest.upper() not in environ:
            setattr(args, dest, ",".join(map(str, value)) if isinstance(value, list) else str(value))


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        apply_config_file(args, args.defaults, os.environ)
        topology = read_topology(args.sysfs_root)
        engine = Engine(topology, engine_config(args, topology))
        handler = PodLevelPlugin(Placement(engine))
        if "NRI_PLUGIN_SOCKET" in os.environ:
            stub = Stub.from_environment(handler)
        else:
            stub = Stub(handler, args.plugin_name, args.plugin_index, args.nri_socket)
    except (InputError, InvalidIdentity, OSError) as err:
        print(f"nri-podlevel run: bad configuration: {err}", file=sys.stderr)
        return 2
    logging.getLogger("podlevel.agent").info(
        "node %s, scope %s, policy %s, reserved CPUs %s", topology.describe(), engine.config.scope.value,
        engine.config.topology_policy.value, engine.reserved_cpus or "none",
    )
    try:
        stub.run()
    except KeyboardInterrupt:
        return 0
    return 0
