"""The node as the operator commands see it (`show`, `check`, `explain`, `simulate --node`).

Sources, in order: the running plugin's `/debug/node` (`--address`, `cli.endpoint`), which knows every pod by
name; when it does not answer, the checkpoint files in `--state-dir`, which know only pod UIDs and container
names (a pod's cgroup is then found by its UID). The cgroup files under `--cgroup-root` are read directly (v1
or v2) and set beside what the source says each cgroup should hold (`cli.drift`).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Final, cast

from podlevel.cgroups import (
    DEFAULT_CGROUP_ROOT,
    CgroupError,
    cpu_max_text,
    find_pod_cgroup,
    locate_cgroup,
    locate_pod_cgroup,
)
from podlevel.cli.checkpoint import summary
from podlevel.cli.drift import Drift, Expected, Found, expected_quota, expected_text, read_cgroup
from podlevel.cli.endpoint import BadInput, Unreachable, fetch
from podlevel.cli.inputs import read_bytes
from podlevel.engine.errors import InputError
from podlevel.report.schema import BubbleDocument, CheckpointDocument, NodeDocument, NumaDocument
from podlevel.report.views import nodes_text, numa_usage, outside_bubbles
from podlevel.state.engine_state import node_state
from podlevel.state.formats import CorruptCheckpoint, CPUCheckpoint, Decoded, Kind, MemoryCheckpoint, decode
from podlevel.state.journal import replayed
from podlevel.state.store import CPU_STATE_FILE, MEMORY_STATE_FILE, read_journal
from podlevel.sysfs.reader import read_topology

PLUGIN_AND_CGROUP: Final = "plugin and cgroup"
PLUGIN_AND_CHECKPOINT: Final = "plugin and checkpoint"
CHECKPOINT_AND_CGROUP: Final = "checkpoint and cgroup"
_IGNORED_SUMMARY_KEYS: Final = ("kind", "version", "writtenBy", "valid", "checks", "notes")


@dataclass
class CgroupRow:
    """One cgroup (a pod's or a container's) as the source wants it and as the files hold it."""

    expected: Expected
    path: str | None = None
    """The cgroup's cpuset directory; None when it cannot be located."""
    found: Found | None = None
    drifts: list[Drift] = field(default_factory=list)


@dataclass
class ContainerRow:
    name: str
    id: str | None
    assignment: str | None
    cgroup: CgroupRow


@dataclass
class PodRow:
    namespace: str | None
    name: str | None
    uid: str
    status: str
    refusal: str | None
    bubble: BubbleDocument | None
    pod_cgroup: CgroupRow | None
    containers: list[ContainerRow]

    @property
    def title(self) -> str:
        return f"{self.namespace}/{self.name}" if self.name is not None else f"pod {self.uid}"


@dataclass
class Inspection:
    source: str
    """`plugin` (its endpoint answered) or `checkpoint` (it did not: the files in the state dir)."""
    note: str
    numa_nodes: list[NumaDocument]
    node_shared_pool: str | None
    checkpoint_error: str | None
    pods: list[PodRow]
    drifts: list[Drift]
    generation: int | None = None

    def to_json(self) -> dict[str, Any]:
        document = asdict(self)
        for pod, row in zip(document["pods"], self.pods, strict=True):
            for cgroup in [pod["pod_cgroup"], *(c["cgroup"] for c in pod["containers"])]:
                if cgroup is not None:
                    del cgroup["drifts"]  # listed once, in "drifts"
            pod["title"] = row.title
        return document


def inspect_for(command: str, args: argparse.Namespace) -> Inspection | None:
    """`inspect` with the source arguments; None after saying on stderr why the input cannot be used."""
    try:
        return inspect(args.address, args.state_dir, args.cgroup_root, args.sysfs_root)
    except BadInput as err:
        print(f"nri-podlevel {command}: {err}", file=sys.stderr)
        return None


def inspect(address: str, state_dir: Path, cgroup_root: Path | None, sysfs_root: str) -> Inspection:
    """The node from the plugin, or from its checkpoints when it does not answer, beside the cgroups (under
    `cgroup_root`; None: the plugin's own, or the default one when it does not answer)."""
    try:
        _, fetched = fetch(address, "/debug/node")
    except Unreachable as err:
        return from_checkpoints(state_dir, cgroup_root or DEFAULT_CGROUP_ROOT, sysfs_root, str(err))
    document = cast(NodeDocument, fetched)
    if cgroup_root is None:
        cgroup_root = Path(document["paths"]["cgroup_root"] or DEFAULT_CGROUP_ROOT)
    return from_plugin(document, address, state_dir, cgroup_root)


def from_plugin(document: NodeDocument, address: str, state_dir: Path, cgroup_root: Path) -> Inspection:
    pods: list[PodRow] = []
    drifts: list[Drift] = []
    for pod in document["pods"]:
        row = PodRow(pod["namespace"], pod["name"], pod["uid"], pod["status"], pod["refusal"], pod["bubble"],
                     None, [])
        wanted = pod["pod_cgroup"]
        if wanted is not None:
            expected = Expected(wanted["cpus"], wanted["mems"] if wanted["cpus"] else None,
                                cpu_max_text(None) if wanted["unlimited_quota"] else None)
            row.pod_cgroup = _pod_cgroup_row(pod["uid"], pod["cgroup_parent"], cgroup_root, expected,
                                             PLUGIN_AND_CGROUP)
        for container in pod["containers"]:
            quota = expected_quota(container["cpu_quota_us"])
            expected = Expected(container["cpus"], container["mems"], quota)
            cgroup = CgroupRow(expected)
            if container["cgroups_path"]:
                _read_into(cgroup, container["cgroups_path"], cgroup_root)
            row.containers.append(ContainerRow(container["name"], container["id"], container["assignment"],
                                               cgroup))
        pods.append(row)
        drifts += _row_drifts(row)
    drifts += checkpoint_drifts(document["checkpoint"], state_dir)
    return Inspection(
        source="plugin",
        note=f"plugin at {address} (generation {document['generation']}), checkpoints in {state_dir}, "
             f"cgroups under {cgroup_root}",
        numa_nodes=document["numa_nodes"],
        node_shared_pool=document["node_shared_pool"],
        checkpoint_error=document["checkpoint_error"],
        pods=pods,
        drifts=drifts,
        generation=document["generation"],
    )


def _read_into(row: CgroupRow, cgroups_path: str, cgroup_root: Path) -> None:
    try:
        cgroup = locate_cgroup(cgroups_path, cgroup_root)
    except CgroupError as err:
        row.drifts = [Drift(cgroups_path, expected_text(row.expected), f"unreadable: {err}",
                            PLUGIN_AND_CGROUP)]
        return
    row.path = str(cgroup.cpuset_dir)
    row.found, row.drifts = read_cgroup(cgroup, row.expected, PLUGIN_AND_CGROUP)


def _pod_cgroup_row(uid: str, parent: str | None, root: Path, expected: Expected, between: str) -> CgroupRow:
    row = CgroupRow(expected)
    try:
        pod = (locate_pod_cgroup(pod_uid=uid, cgroup_parent=parent, cgroup_root=root) if parent
               else find_pod_cgroup(uid, root))
    except CgroupError as err:
        row.drifts = [Drift(f"pod cgroup of {uid}", expected_text(expected), f"unreadable: {err}", between)]
        return row
    if pod is None:
        row.drifts = [Drift(f"pod cgroup of {uid}", expected_text(expected), "no such cgroup", between)]
        return row
    row.path = str(pod.cpuset_dir)
    row.found, row.drifts = read_cgroup(pod, expected, between)
    return row


def _row_drifts(row: PodRow) -> list[Drift]:
    cgroups = [row.pod_cgroup] if row.pod_cgroup is not None else []
    return [d for cgroup in [*cgroups, *(c.cgroup for c in row.containers)] for d in cgroup.drifts]


# -- checkpoints -------------------------------------------------------------------------------------------


def read_checkpoint(path: Path, kind: Kind) -> Decoded:
    """One checkpoint file, read only (never moved aside or migrated: that is the plugin's business)."""
    try:
        return decode(read_bytes(path), kind)
    except OSError as err:
        raise BadInput(f"{path}: {err.strerror}") from None
    except InputError as err:
        raise BadInput(str(err)) from None
    except CorruptCheckpoint as err:
        raise BadInput(f"{path}: corrupt: {err}") from None


def checkpoint_drifts(embedded: CheckpointDocument, state_dir: Path) -> list[Drift]:
    """Where the files in `state_dir`, with the journal's records replayed over them (read in that order: a
    record replayed over files that hold it changes nothing), differ from what the plugin holds now
    (`/debug/node`'s checkpoint, the files' text as the plugin would write them): the decoded contents are
    compared, and where they differ, each field that does is named."""
    drifts: list[Drift] = []
    files: tuple[tuple[Kind, str, str], ...] = (
        ("cpu", CPU_STATE_FILE, embedded["cpu"]), ("memory", MEMORY_STATE_FILE, embedded["memory"]),
    )
    read: dict[Kind, Decoded] = {}
    for kind, name, _ in files:
        try:
            read[kind] = read_checkpoint(state_dir / name, kind)
        except BadInput as err:
            drifts.append(Drift(str(state_dir / name), "the plugin's checkpoint", str(err),
                                PLUGIN_AND_CHECKPOINT))
    cpu, memory = read.get("cpu"), read.get("memory")
    if cpu is not None and isinstance(cpu.content, CPUCheckpoint):
        kept = memory.content if memory is not None and isinstance(memory.content, MemoryCheckpoint) else None
        replayed_cpu, replayed_memory = replayed(cpu.content, kept, read_journal(state_dir).deltas)
        read["cpu"] = replace(cpu, content=replayed_cpu)
        if memory is not None and replayed_memory is not None:
            read["memory"] = replace(memory, content=replayed_memory)
    for kind, name, text in files:
        path = state_dir / name
        wanted = decode(text, kind)
        found = read.get(kind)
        if found is None:
            continue
        if found.content == wanted.content:
            continue
        want, have = _flat(summary(wanted)), _flat(summary(found))
        for key in sorted(want.keys() | have.keys()):
            if want.get(key) != have.get(key):
                drifts.append(Drift(str(path), f"{key} = {want.get(key, 'absent')}",
                                    f"{key} = {have.get(key, 'absent')}", PLUGIN_AND_CHECKPOINT))
    return drifts


def _flat(value: Any, prefix: str = "") -> dict[str, str]:
    if isinstance(value, dict):
        flat: dict[str, str] = {}
        for key, item in value.items():
            if not prefix and key in _IGNORED_SUMMARY_KEYS:
                continue
            flat.update(_flat(item, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    return {prefix: json.dumps(value) if isinstance(value, list) else str(value)}


def from_checkpoints(state_dir: Path, cgroup_root: Path, sysfs_root: str, why: str) -> Inspection:
    """The node as the checkpoint files and the journal left it, beside the pod cgroups (found by UID)."""
    cpu = read_checkpoint(state_dir / CPU_STATE_FILE, "cpu").content
    memory = read_checkpoint(state_dir / MEMORY_STATE_FILE, "memory").content
    if not isinstance(cpu, CPUCheckpoint) or not isinstance(memory, MemoryCheckpoint):
        raise BadInput(f"{state_dir}: the CPU checkpoint is in the V1 layout, keyed by container ID")
    cpu, replayed_memory = replayed(cpu, memory, read_journal(state_dir).deltas)
    memory = replayed_memory or memory
    try:
        topology = read_topology(sysfs_root)
    except (OSError, InputError) as err:
        raise BadInput(f"cannot read the NUMA layout from {sysfs_root}: {err}") from None
    pods: list[PodRow] = []
    for uid in sorted({*cpu.entries, *cpu.pod_entries, *memory.entries, *memory.pod_entries}):
        bubble_cpus = cpu.pod_entries.get(uid)
        bubble_mems = nodes_text(n for b in memory.pod_entries.get(uid, ()) for n in b.numa_affinity)
        bubble: BubbleDocument | None = None
        if bubble_cpus is not None or bubble_mems:
            shown = str(bubble_cpus) if bubble_cpus is not None else None
            bubble = {"cpus": shown, "mems": bubble_mems or None}
        row = PodRow(None, None, uid, "recorded", None, bubble, None, [])
        if bubble_cpus is not None:
            expected = Expected(str(bubble_cpus), bubble_mems or None, None)
            row.pod_cgroup = _pod_cgroup_row(uid, None, cgroup_root, expected, CHECKPOINT_AND_CGROUP)
        containers = {**dict.fromkeys(memory.entries.get(uid, {})), **dict.fromkeys(cpu.entries.get(uid, {}))}
        for name in containers:
            cpus = cpu.entries.get(uid, {}).get(name)
            mems = nodes_text(n for b in memory.entries.get(uid, {}).get(name, ()) for n in b.numa_affinity)
            expected = Expected(str(cpus) if cpus is not None else None, mems or None, None)
            row.containers.append(ContainerRow(name, None, None, CgroupRow(expected)))
        pods.append(row)
    state = node_state(cpu, memory, {})
    return Inspection(
        source="checkpoint",
        note=f"{why}; from the checkpoint files in {state_dir} (only pod UIDs and container names are "
             f"known), cgroups under {cgroup_root}",
        numa_nodes=numa_usage(topology.cpus_by_numa, None, None, state, outside_bubbles(state.memory)),
        node_shared_pool=str(cpu.default),
        checkpoint_error=None,
        pods=pods,
        drifts=[d for row in pods for d in _row_drifts(row)],
    )
