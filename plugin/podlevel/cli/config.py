"""`nri-podlevel config check FILE`: would `run` start on this node with this configuration file?

Reserved CPUs, reserved memory and CPU manager options depend on the hardware, and a value that is wrong for a
node makes its agent exit with status 2 when the DaemonSet rolls there, leaving that node's pods unplaced
until it is fixed. This command reads the file as `run` reads `--config` (flag names or KubeletConfiguration
keys), the machine from `--sysfs-root` (this node's `/sys`, or a copy of another node's), and builds the same
engine `run` would, so it fails with the message `run` would give, naming the setting and the file.

Exit status: 0 when `run` would accept it (one line saying what it would run with), 2 otherwise.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

from podlevel.cli.engine_flags import engine_config
from podlevel.cli.run import origin_of, resolve
from podlevel.engine.errors import InputError
from podlevel.engine.manager import Engine
from podlevel.engine.quantity import format_bytes
from podlevel.sysfs.reader import read_topology


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "config", help="check a configuration file against a node before rolling it out",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    check = actions.add_parser("check", help="exit 0 when `run` would start with FILE on this node, else 2",
                               description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    check.add_argument("file", metavar="FILE", help="the configuration file (the DaemonSet's config.yaml)")
    check.add_argument("--sysfs-root", default="/sys",
                       help="the sysfs tree of the node to check against (%(default)s)")
    check.set_defaults(handler=run_check)


def run_check(args: argparse.Namespace) -> int:
    sources: dict[str, str] = {}
    try:
        settings = resolve(["--config", args.file], {})
        sources = settings.sources
        topology = read_topology(args.sysfs_root)
        engine = Engine(topology, engine_config(settings, topology))
    except (InputError, OSError, ValueError) as err:
        print(f"nri-podlevel config check: bad configuration: {err}{origin_of(sources, str(err))}",
              file=sys.stderr)
        return 2
    for notice in settings.notices:
        print(f"nri-podlevel config check: {notice}", file=sys.stderr)
    config = engine.config
    memory = "; ".join(
        f"node {node} " + ", ".join(f"{name}={format_bytes(amount)}" for name, amount in resources.items())
        for node, resources in config.reserved_memory.items()
    ) or "none"
    print(f"nri-podlevel config check: {args.file} is valid on this node ({topology.describe()}):")
    print(f"  scope {config.scope.value}, topology policy {config.topology_policy.value}, CPU policy "
          f"{config.cpu_policy}, memory policy {config.memory_policy}")
    print(f"  reserved CPUs {engine.reserved_cpus or 'none'}; reserved memory {memory}")
    print(f"  CPU manager options {_options(config.cpu_options.values())}; topology manager options "
          f"{_options(config.topology_options.values())}")
    return 0


def _options(values: Mapping[str, str]) -> str:
    return ", ".join(f"{key}={value}" for key, value in values.items()) or "none"
