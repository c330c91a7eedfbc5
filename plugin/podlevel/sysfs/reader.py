"""Read the machine topology from a sysfs tree (`/sys`, or a test tree) into the engine's `Topology`.

Sources, relative to the sysfs root:
- `devices/system/cpu/online`: the CPUs. Offline CPUs are not part of the machine the plugin allocates on.
- `devices/system/cpu/cpuN/topology/physical_package_id` and `thread_siblings_list`: socket and SMT
  siblings. A core's id is the smallest online CPU id among its threads: sysfs `core_id` repeats across
  sockets, this id is unique machine-wide, which is the convention `podlevel.engine.topology` keeps.
- `devices/system/node/nodeN/cpulist`, `distance`, `meminfo` (MemTotal) and
  `hugepages/hugepages-<kB>kB/nr_hugepages`: NUMA nodes. The `distance` row lists one value per online node,
  in `devices/system/node/online` order, as the kernel prints it.
- `devices/system/cpu/cpuN/cache/index*/` with `level` 3: the uncore (last-level) cache.

Decisions the engine depends on:
- A kernel without NUMA directories is one node 0 holding every CPU, with the MemTotal of `meminfo`
  (default `/proc/meminfo`) and the distance table {0: 10}.
- NUMA nodes without an online CPU (memory-only nodes such as CXL expanders) are left out: every node of the
  result has CPUs, so each has a socket, and nothing can be placed on memory no CPU of a pod sits next to.
- Uncore caches: when every CPU reports a level-3 cache, CPUs sharing one form a group, identified by the
  cache's `id` when every such cache has one (the id the kubelet uses) and else by the group's smallest CPU.
  When any CPU reports none, each socket is one group, as the kubelet does on machines without uncore caches.
- Hugepage sizes with zero pages are kept: a size the kernel supports is a resource the node has, even empty.

Errors: a missing or unreadable file raises the OSError subclass the system gave (FileNotFoundError, ...),
with a message naming the path and what it was needed for; malformed content raises `InputError` (rule
"sysfs") naming the path and the text. Nothing is cached: every call reads the tree again.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from podlevel.engine.cpuset import CPUSet
from podlevel.engine.errors import InputError
from podlevel.engine.topology import LOCAL_DISTANCE, CPUInfo, NUMANode, Topology

DEFAULT_SYSFS_ROOT: Final = Path("/sys")
DEFAULT_MEMINFO: Final = Path("/proc/meminfo")

_NODE_DIR: Final = re.compile(r"^node(\d+)$")
_HUGEPAGES_DIR: Final = re.compile(r"^hugepages-(\d+)kB$")
_CACHE_DIR: Final = re.compile(r"^index(\d+)$")
_MEMTOTAL: Final = re.compile(r"^(?:Node \d+ )?MemTotal:\s+(\d+) kB$", re.MULTILINE)


def read_topology(root: str | Path = DEFAULT_SYSFS_ROOT, meminfo: str | Path = DEFAULT_MEMINFO) -> Topology:
    """The machine under the sysfs tree `root`. `meminfo` is read only when the kernel has no NUMA nodes."""
    root = Path(root)
    cpu_dir = root / "devices/system/cpu"
    online = _read_cpuset(cpu_dir / "online", "the list of online CPUs")
    if not online:
        raise InputError("sysfs", f"{cpu_dir / 'online'} lists no CPU")

    node_of_cpu, nodes = _read_numa_nodes(root / "devices/system/node", online, Path(meminfo))
    uncore_of_cpu = _read_uncore_caches(cpu_dir, online)

    cpus: list[CPUInfo] = []
    core_of_cpu: dict[int, int] = {}
    for cpu in online:
        topo = cpu_dir / f"cpu{cpu}/topology"
        socket = _read_int(topo / "physical_package_id", f"the socket of CPU {cpu}")
        if cpu not in core_of_cpu:
            siblings = _read_cpuset(topo / "thread_siblings_list", f"the SMT siblings of CPU {cpu}") & online
            if cpu not in siblings:
                raise InputError("sysfs", f"{topo}/thread_siblings_list does not contain CPU {cpu} itself")
            core = min(siblings)
            core_of_cpu.update(dict.fromkeys(siblings, core))
        if cpu not in node_of_cpu:
            raise InputError("sysfs", f"online CPU {cpu} is in no NUMA node's cpulist under {root}")
        uncore = uncore_of_cpu[cpu] if uncore_of_cpu is not None else socket
        cpus.append(CPUInfo(cpu, core_of_cpu[cpu], socket, node_of_cpu[cpu], uncore))
    return Topology(cpus, nodes)


def _read_numa_nodes(
    node_dir: Path, online_cpus: CPUSet, meminfo: Path
) -> tuple[dict[int, int], list[NUMANode]]:
    """CPU -> node, and the nodes that hold at least one online CPU."""
    ids = _node_ids(node_dir)
    if not ids:
        memory = _read_memtotal(meminfo, "the memory of a machine without NUMA nodes")
        return dict.fromkeys(online_cpus, 0), [NUMANode(0, memory, {}, {0: LOCAL_DISTANCE})]
    listed = node_dir / "online"
    order = _read_cpuset(listed, "the order of the distance rows").sorted() if listed.exists() else ids
    if unlisted := sorted(set(ids) - set(order)):
        raise InputError("sysfs", f"{listed} ({order}) does not list the node directories {unlisted}")

    node_of_cpu: dict[int, int] = {}
    rows: dict[int, list[int]] = {}
    for node in ids:
        path = node_dir / f"node{node}"
        for cpu in _read_cpuset(path / "cpulist", f"the CPUs of NUMA node {node}") & online_cpus:
            if cpu in node_of_cpu:
                raise InputError("sysfs", f"CPU {cpu} is listed by NUMA nodes {node_of_cpu[cpu]} and {node}")
            node_of_cpu[cpu] = node
            rows[node] = []
    for node in rows:
        path = node_dir / f"node{node}/distance"
        row = rows[node] = _read_ints(path, f"the distances of NUMA node {node}")
        if len(row) != len(order):
            raise InputError("sysfs", f"{path} has {len(row)} values for {len(order)} online nodes {order}")
    nodes = [
        NUMANode(
            node,
            _read_memtotal(node_dir / f"node{node}/meminfo", f"the memory of NUMA node {node}"),
            _read_hugepages(node_dir / f"node{node}/hugepages"),
            {other: d for other, d in zip(order, row, strict=True) if other in rows},
        )
        for node, row in rows.items()
    ]
    return node_of_cpu, nodes


def _node_ids(node_dir: Path) -> list[int]:
    if not node_dir.is_dir():
        return []
    return sorted(int(m.group(1)) for entry in node_dir.iterdir() if (m := _NODE_DIR.match(entry.name)))


def _read_hugepages(hugepages_dir: Path) -> dict[int, int]:
    """page size in bytes -> pages; a node without the directory (no hugetlbfs support) has none."""
    if not hugepages_dir.is_dir():
        return {}
    pages: dict[int, int] = {}
    for entry in hugepages_dir.iterdir():
        if m := _HUGEPAGES_DIR.match(entry.name):
            size_kb = int(m.group(1))
            pages[size_kb * 1024] = _read_int(entry / "nr_hugepages", f"the {size_kb} kB hugepages")
    return dict(sorted(pages.items()))


def _read_uncore_caches(cpu_dir: Path, online: CPUSet) -> Mapping[int, int] | None:
    """CPU -> uncore cache id, or None when some CPU reports no level-3 cache (then sockets stand in)."""
    caches: dict[int, tuple[CPUSet, int | None]] = {}
    for cpu in online:
        cache = _level3_cache(cpu_dir / f"cpu{cpu}/cache")
        if cache is None:
            return None
        shared = _read_cpuset(cache / "shared_cpu_list", f"the CPUs sharing CPU {cpu}'s L3 cache") & online
        has_id = (cache / "id").exists()
        caches[cpu] = (shared, _read_int(cache / "id", f"the id of CPU {cpu}'s L3 cache") if has_id else None)
    ids = {cpu: cache_id for cpu, (_, cache_id) in caches.items() if cache_id is not None}
    if len(ids) == len(caches):
        return ids
    return {cpu: min(shared) for cpu, (shared, _) in caches.items()}


def _level3_cache(cache_dir: Path) -> Path | None:
    if not cache_dir.is_dir():
        return None
    indexes = sorted(
        (int(m.group(1)), entry) for entry in cache_dir.iterdir() if (m := _CACHE_DIR.match(entry.name))
    )
    for _, index in reversed(indexes):  # the last level comes last; index3 on x86
        if (index / "level").exists() and _read_int(index / "level", "a cache level") == 3:
            return index
    return None


def _read_text(path: Path, needed_for: str) -> str:
    try:
        return path.read_text()
    except OSError as err:
        raise type(err)(err.errno, f"sysfs: cannot read {needed_for} ({err.strerror})", str(path)) from err


def _read_int(path: Path, needed_for: str) -> int:
    text = _read_text(path, needed_for).strip()
    try:
        return int(text)
    except ValueError:
        raise InputError("sysfs", f"{path} holds {text!r}, not an integer ({needed_for})") from None


def _read_ints(path: Path, needed_for: str) -> list[int]:
    text = _read_text(path, needed_for)
    try:
        return [int(v) for v in text.split()]
    except ValueError:
        raise InputError("sysfs", f"{path} holds {text.strip()!r}, not integers ({needed_for})") from None


def _read_cpuset(path: Path, needed_for: str) -> CPUSet:
    text = _read_text(path, needed_for)
    try:
        return CPUSet.parse(text)
    except InputError as err:
        raise InputError("sysfs", f"{path} is not a CPU list ({needed_for}): {err.message}") from None


def _read_memtotal(path: Path, needed_for: str) -> int:
    text = _read_text(path, needed_for)
    match = _MEMTOTAL.search(text)
    if not match:
        raise InputError("sysfs", f"{path} has no 'MemTotal: <n> kB' line ({needed_for})")
    return int(match.group(1)) * 1024
