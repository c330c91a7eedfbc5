"""`nri-podlevel show [--json]`: the node at a glance, the plugin's decisions beside the cgroup files.

Per NUMA node the CPUs and memory reserved, in bubbles, exclusive and free; per pod and container the
assignment, the CPUs, memory nodes and CFS quota the plugin gave it, next to what its cgroup enforces
(`cpuset.cpus.effective`, `cpuset.mems.effective`, `cpu.max`; v1 `cpuset.effective_cpus`, ...,
`cpu.cfs_quota_us`), and the pod cgroup's bubble (memory resources the machine has none of are left out of
the table). A value that differs is a drift: red on a terminal, marked
`!` otherwise, and listed at the end. The plugin is asked at `--address`; when it does not answer, the
checkpoint files in `--state-dir` are shown instead (the output says so): pods are then known by UID only,
containers by name, and only the pod cgroups (found by UID) are read.

`--json` prints one object:

  {"source": "plugin" | "checkpoint", "note": "where it all came from",
   "generation": 12 | null, "checkpoint_error": null | "...", "node_shared_pool": "0" | null,
   "numa_nodes": [{"node": 0,
                   "cpus": {"all": "0-1", "reserved": "0" | null, "bubbles": "1", "exclusive": "1" | null,
                            "free": ""},
                   "memory": {"memory": {"total": N, "reserved": N, "allocatable": N, "bubbles": N,
                                         "exclusive": N, "free": N}}}],
   "pods": [{"title": "default/fast-path", "namespace": "default" | null, "name": "fast-path" | null,
             "uid": "...", "status": "admitted" | "refused" | "kept-out" | "pending" | "unmanaged" |
             "recorded", "refusal": null | "...", "bubble": null | {"cpus": "1", "mems": "0"},
             "pod_cgroup": null | CGROUP,
             "containers": [{"name": "main-app", "id": "..." | null,
                             "assignment": "pod_exclusive" | ... | null, "cgroup": CGROUP}]}],
   "drifts": [{"file": "/sys/fs/cgroup/cpuset/.../cpuset.cpus", "expected": "0", "found": "1",
               "between": "plugin and cgroup" | "plugin and checkpoint" | "checkpoint and cgroup"}]}

  CGROUP = {"expected": {"cpus": "1" | null, "mems": "0" | null, "quota": "max" | "50000" | null},
            "path": "<its cpuset directory>" | null,
            "found": null | {"cpus": "1", "mems": "0", "quota": "max", "error": null | "...",
                             "drifted": ["cpus" | "mems" | "quota", ...]}}

CPU and node sets are Linux list strings, memory in bytes; a null expected field is one the plugin leaves
alone; `reserved` and `exclusive` CPUs are null when only the checkpoints are known, and `exclusive` memory
then counts only containers outside bubbles (a checkpoint cannot tell a pod shared pool's blocks from a
container's own). Exit status 0, or 2 when neither the plugin nor its checkpoints can be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from podlevel.cli.drift import drift_lines
from podlevel.cli.endpoint import add_source_arguments
from podlevel.cli.inspection import CgroupRow, Inspection, inspect_for
from podlevel.cli.layout import Style, columns
from podlevel.engine.quantity import format_bytes
from podlevel.report.schema import NumaMemory


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "show", help="the node's allocations beside what the cgroup files hold", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_source_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object (shape above)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    node = inspect_for("show", args)
    if node is None:
        return 2
    if args.json:
        print(json.dumps(node.to_json(), indent=2))
    else:
        sys.stdout.write(render(node, Style.for_stdout()))
    return 0


def render(node: Inspection, style: Style) -> str:
    lines = [f"nri-podlevel show: {node.note}", ""]
    lines += _numa_lines(node, style)
    lines += ["", f"node shared pool: {node.node_shared_pool or '-'}", ""]
    lines += _pod_lines(node, style)
    if node.checkpoint_error is not None:
        lines += ["", style.drift(f"checkpoint not written: {node.checkpoint_error}")]
    lines.append("")
    if node.drifts:
        lines += [style.drift(line) if style.enabled else line for line in drift_lines(node.drifts)]
    else:
        lines.append(style.good("no drift"))
    return "\n".join(lines) + "\n"


def _set(text: str | None) -> str:
    return "?" if text is None else text or "-"


def _numa_lines(node: Inspection, style: Style) -> list[str]:
    rows = [["NUMA", "CPUS", "RESERVED", "BUBBLES", "EXCLUSIVE", "FREE",
             "MEMORY", "RESERVED", "BUBBLES", "EXCLUSIVE", "FREE"]]
    for numa in node.numa_nodes:
        cpus = numa["cpus"]
        cpu_cells = [str(numa["node"]), *map(_set, (cpus["all"], cpus["reserved"], cpus["bubbles"],
                                                     cpus["exclusive"], cpus["free"]))]
        memory = [(name, _amounts(table)) for name, table in numa["memory"].items() if table["total"]]
        for i, (resource, amounts) in enumerate(memory or [("-", ["-"] * 4)]):
            rows.append([*(cpu_cells if i == 0 else [""] * 6), resource, *amounts])
    return columns(rows, style=style)


def _amounts(table: NumaMemory) -> list[str]:
    values = (table["reserved"], table["bubbles"], table["exclusive"], table["free"])
    return [format_bytes(value) if value else "0" for value in values]


def _quota(text: str | None) -> str:
    return "-" if text is None else text


def _cgroup_cells(row: CgroupRow, style: Style) -> list[str]:
    expected = row.expected
    wanted = [_set(expected.cpus) if expected.cpus is not None else "-", expected.mems or "-",
              _quota(expected.quota)]
    found = row.found
    if found is None or found.error is not None:
        return [*wanted, style.drift("unreadable") if row.drifts else "-", "", ""]
    cells = {"cpus": _set(found.cpus), "mems": _set(found.mems), "quota": _quota(found.quota)}
    return [*wanted, *(style.drift(cell) if name in found.drifted else cell for name, cell in cells.items())]


def _pod_lines(node: Inspection, style: Style) -> list[str]:
    rows = [["POD / CONTAINER", "STATUS / ASSIGNMENT", "CPUS", "MEMS", "QUOTA",
             "CGROUP CPUS", "MEMS", "QUOTA"]]
    notes: list[str] = []
    for pod in node.pods:
        bubble = ""
        if pod.bubble is not None:
            bubble = f" (bubble cpus {_set(pod.bubble['cpus'])} mems {_set(pod.bubble['mems'])})"
        rows.append([pod.title, pod.status + bubble, "", "", "", "", "", ""])
        if pod.pod_cgroup is not None:
            rows.append(["  (pod cgroup)", "bubble", *_cgroup_cells(pod.pod_cgroup, style)])
        for container in pod.containers:
            rows.append([f"  {container.name}", container.assignment or "-", *_cgroup_cells(container.cgroup,
                                                                                            style)])
        if pod.refusal is not None:
            notes.append(f"{pod.title} refused: {pod.refusal}")
    return columns(rows, style=style) + (["", *notes] if notes else [])
