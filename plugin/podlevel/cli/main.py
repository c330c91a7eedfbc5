"""The `nri-podlevel` console script: argument parsing and dispatch, nothing else.

Each subcommand lives in a sibling module `podlevel.cli.<name>` that defines `add_parser(subparsers)`; the
parser it adds sets `handler`, a function from the parsed arguments to the exit status. Adding a command is
adding its module name to `COMMANDS`. Only the command asked for is imported (all of them when the first
argument names none, for the overview): `run` is the node daemon, and the other commands' modules (the
webhook server, YAML editing, the simulator) would cost it memory and start-up time.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Final

from podlevel.build import describe

COMMANDS: Final = (
    "annotate", "check", "checkpoint", "config", "explain", "release", "run", "show", "simulate", "webhook",
)


def build_parser(commands: Sequence[str] = COMMANDS) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nri-podlevel",
        description="containerd NRI plugin: the kubelet's pod-level resource managers, NUMA-aligned.",
    )
    parser.add_argument("--version", action="version", version=describe())
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in commands:
        importlib.import_module(f"podlevel.cli.{name}").add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    chosen = arguments[:1] if arguments[:1] and arguments[0] in COMMANDS else COMMANDS
    args = build_parser(chosen).parse_args(arguments)
    # The command's own arguments, for commands that merge them with other sources (`run`).
    args.argv = arguments[arguments.index(args.command) + 1 :]
    status: int = args.handler(args)
    return status


if __name__ == "__main__":
    sys.exit(main())
