"""`nri-podlevel checkpoint inspect|verify|migrate FILE`: read, check and convert checkpoint files.

Works on the plugin's files and on the kubelet's own (`/var/lib/kubelet/cpu_manager_state`,
`memory_manager_state`, any layout from V1 to the newest); whether a file is a CPU or a memory checkpoint is
told from its content.
- `inspect FILE [--json]`: the layout, policy and assignments (per pod: its bubble and its containers; per
  NUMA node the memory machine state).
- `verify FILE`: exit status 0 only when every checksum in the file is valid in a layout the plugin reads;
  1 naming the failing part otherwise, and what an older kubelet would make of the file.
- `migrate FILE [--to V]`: rewrite the file in place, atomically, in layout V (default the newest); a
  conversion that would lose pod entries, or needs container IDs the file does not hold, is refused.
Exit status 2: the file cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from podlevel.cli.inputs import read_bytes
from podlevel.engine.errors import InputError
from podlevel.engine.memory_policy import MemoryBlock
from podlevel.engine.quantity import format_bytes
from podlevel.state.formats import (
    NEWEST,
    CorruptCheckpoint,
    CPUCheckpoint,
    Decoded,
    LegacyCPUCheckpoint,
    MemoryCheckpoint,
    MigrationError,
    decode,
    encode,
    written_by,
)
from podlevel.state.store import atomic_write

_NOUN = {"cpu": "CPU manager", "memory": "memory manager"}


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "checkpoint",
        help="inspect, verify or migrate a CPU or memory manager checkpoint file",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    inspect = actions.add_parser("inspect", help="summarise a checkpoint file")
    inspect.add_argument("file", type=Path, metavar="FILE")
    inspect.add_argument("--json", action="store_true", help="print the summary as JSON")
    inspect.set_defaults(handler=run_inspect)
    verify = actions.add_parser("verify", help="exit 0 only when every checksum in the file is valid")
    verify.add_argument("file", type=Path, metavar="FILE")
    verify.set_defaults(handler=run_verify)
    migrate = actions.add_parser("migrate", help="rewrite the file in place in another layout")
    migrate.add_argument("file", type=Path, metavar="FILE")
    migrate.add_argument(
        "--to", type=_version, metavar="V", help="target layout, e.g. V2 (default: the newest)"
    )
    migrate.set_defaults(handler=run_migrate)


def _version(text: str) -> int:
    digits = text[1:] if text[:1] in "vV" else text
    if not digits.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a layout version such as V4")
    return int(digits)


def _read(path: Path) -> Decoded | int:
    """The decoded file, or the exit status after saying why there is none."""
    try:
        data = read_bytes(path)
    except OSError as err:
        print(f"nri-podlevel checkpoint: {path}: {err.strerror}", file=sys.stderr)
        return 2
    except InputError as err:
        print(f"nri-podlevel checkpoint: {err}", file=sys.stderr)
        return 2
    try:
        return decode(data)
    except CorruptCheckpoint as err:
        print(f"nri-podlevel checkpoint: {path}: corrupt: {err}", file=sys.stderr)
        return 1


def run_inspect(args: argparse.Namespace) -> int:
    decoded = _read(args.file)
    if isinstance(decoded, int):
        return decoded
    if args.json:
        print(json.dumps({"file": str(args.file), **summary(decoded)}, indent=2))
    else:
        print("\n".join(describe(decoded, str(args.file))))
    return 0


def run_verify(args: argparse.Namespace) -> int:
    decoded = _read(args.file)
    if isinstance(decoded, int):
        return decoded
    print(_headline(decoded, str(args.file)))
    print("\n".join(_checks(decoded)))
    failed = [check for check in decoded.checks if not check.ok]
    if failed:
        print(f"{args.file}: INVALID: {'; '.join(f'{c.part}: {c.detail}' for c in failed)}", file=sys.stderr)
        return 1
    print(f"{args.file}: valid")
    return 0


def run_migrate(args: argparse.Namespace) -> int:
    decoded = _read(args.file)
    if isinstance(decoded, int):
        return decoded
    try:
        data = encode(decoded.content, args.to)
    except MigrationError as err:
        print(f"nri-podlevel checkpoint: {args.file}: refusing to migrate: {err}", file=sys.stderr)
        return 1
    try:
        atomic_write(args.file, data)
    except OSError as err:
        print(f"nri-podlevel checkpoint: {args.file}: {err.strerror}", file=sys.stderr)
        return 2
    target = args.to or NEWEST[decoded.kind]
    print(f"{args.file}: {_NOUN[decoded.kind]} checkpoint V{decoded.version} -> V{target}")
    return 0


def _headline(decoded: Decoded, name: str) -> str:
    return (
        f"{name}: {_NOUN[decoded.kind]} checkpoint V{decoded.version} "
        f"({written_by(decoded.kind, decoded.version)}), policy {decoded.content.policy_name!r}"
    )


def _checks(decoded: Decoded) -> list[str]:
    lines = [f"  {'ok' if c.ok else 'FAIL':4}  {c.part}: {c.detail}" for c in decoded.checks]
    return lines + [f"  note  {note}" for note in decoded.notes]


def _blocks(blocks: tuple[MemoryBlock, ...]) -> str:
    return (
        ", ".join(
            f"{b.type} {format_bytes(b.size)} on node{'s' if len(b.numa_affinity) > 1 else ''} "
            f"{','.join(map(str, b.numa_affinity))}"
            for b in blocks
        )
        or "nothing"
    )


def describe(decoded: Decoded, name: str) -> list[str]:
    """The human summary."""
    content = decoded.content
    lines = [_headline(decoded, name)]
    if isinstance(content, LegacyCPUCheckpoint):
        lines.append(f"default set: {content.default or '(empty)'}")
        lines += [f"container {cid}: {cpus}" for cid, cpus in sorted(content.container_entries.items())]
    elif isinstance(content, CPUCheckpoint):
        lines.append(f"default set: {content.default or '(empty)'}")
        for pod in sorted({*content.entries, *content.pod_entries}):
            bubble = content.pod_entries.get(pod)
            lines.append(f"pod {pod}: " + (f"bubble {bubble}" if bubble is not None else "no bubble"))
            lines += [f"  {ctr}: {cpus}" for ctr, cpus in sorted(content.entries.get(pod, {}).items())]
    else:
        for node, state in sorted(content.machine.items()):
            lines.append(
                f"NUMA node {node}: {state.assignments} assignments, cells {','.join(map(str, state.cells))}"
            )
            lines += [
                f"  {res}: total {format_bytes(t.total)}, system reserved {format_bytes(t.system_reserved)}, "
                f"allocatable {format_bytes(t.allocatable)}, reserved {format_bytes(t.reserved)}, "
                f"free {format_bytes(t.free)}"
                for res, t in sorted(state.memory_map.items())
            ]
        for pod in sorted({*content.entries, *content.pod_entries}):
            pod_blocks = content.pod_entries.get(pod)
            lines.append(
                f"pod {pod}: " + (f"bubble {_blocks(pod_blocks)}" if pod_blocks is not None else "no bubble")
            )
            lines += [
                f"  {ctr}: {_blocks(blocks)}" for ctr, blocks in sorted(content.entries.get(pod, {}).items())
            ]
    return [*lines, "checks:", *_checks(decoded)]


def _block_json(blocks: tuple[MemoryBlock, ...]) -> list[dict[str, Any]]:
    return [{"numaAffinity": list(b.numa_affinity), "type": b.type, "size": b.size} for b in blocks]


def summary(decoded: Decoded) -> dict[str, Any]:
    """The `--json` summary: cpusets as Linux list strings, sizes in bytes."""
    content = decoded.content
    out: dict[str, Any] = {
        "kind": decoded.kind,
        "version": decoded.version,
        "writtenBy": written_by(decoded.kind, decoded.version),
        "policyName": content.policy_name,
        "valid": decoded.valid,
        "checks": [{"part": c.part, "ok": c.ok, "detail": c.detail} for c in decoded.checks],
        "notes": list(decoded.notes),
    }
    if isinstance(content, LegacyCPUCheckpoint):
        out["defaultCpuSet"] = str(content.default)
        out["containers"] = {cid: str(cpus) for cid, cpus in sorted(content.container_entries.items())}
    elif isinstance(content, CPUCheckpoint):
        out["defaultCpuSet"] = str(content.default)
        out["pods"] = {
            pod: {
                "bubble": str(content.pod_entries[pod]) if pod in content.pod_entries else None,
                "containers": {c: str(cpus) for c, cpus in sorted(content.entries.get(pod, {}).items())},
            }
            for pod in sorted({*content.entries, *content.pod_entries})
        }
    else:
        assert isinstance(content, MemoryCheckpoint)
        out["machineState"] = {
            str(node): {
                "numberOfAssignments": s.assignments,
                "cells": list(s.cells),
                "memoryMap": {
                    res: {
                        "total": t.total,
                        "systemReserved": t.system_reserved,
                        "allocatable": t.allocatable,
                        "reserved": t.reserved,
                        "free": t.free,
                    }
                    for res, t in sorted(s.memory_map.items())
                },
            }
            for node, s in sorted(content.machine.items())
        }
        out["pods"] = {
            pod: {
                "bubble": _block_json(content.pod_entries[pod]) if pod in content.pod_entries else None,
                "containers": {c: _block_json(b) for c, b in sorted(content.entries.get(pod, {}).items())},
            }
            for pod in sorted({*content.entries, *content.pod_entries})
        }
    return out
