"""`nri-podlevel check`: do the plugin's view, its checkpoint files and the cgroup files agree?

Three ways: what the running plugin holds (its endpoint, `--address`) against every container's and pod's
cgroup files under `--cgroup-root` and against the checkpoint files in `--state-dir`; when the plugin does not
answer, the checkpoint files against the pod cgroups (found by UID). Every drift is printed on its own line
with the file, what was expected and what was found.

Exit status: 0 when everything agrees, 1 when anything drifted, 2 on bad input (a bad address, neither the
plugin nor readable checkpoints, a cgroup root that is no cgroup mount).
"""

from __future__ import annotations

import argparse
from typing import Any

from podlevel.cli.drift import drift_lines
from podlevel.cli.endpoint import add_source_arguments
from podlevel.cli.inspection import inspect_for


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "check", help="exit 0 when the plugin, its checkpoints and the cgroups agree, 1 naming each drift",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_source_arguments(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    node = inspect_for("check", args)
    if node is None:
        return 2
    print(f"nri-podlevel check: {node.note}")
    if node.checkpoint_error is not None:
        print(f"the plugin's last checkpoint write failed: {node.checkpoint_error}")
    containers = sum(len(pod.containers) for pod in node.pods)
    if node.drifts:
        print("\n".join(drift_lines(node.drifts)))
        print(f"{len(node.drifts)} drift{'s' if len(node.drifts) > 1 else ''}")
        return 1
    agree = "the plugin, its checkpoints and the cgroups" if node.source == "plugin" else (
        "the checkpoints and the pod cgroups")
    print(f"{agree} agree: {len(node.pods)} pods, {containers} containers")
    return 0
