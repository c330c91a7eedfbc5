"""Write a sysfs tree that describes a `Topology`, in the layout `podlevel.sysfs.reader` reads.

It lets the plugin run against a machine it is not on: a test bed on a one-node host that must look like a
four-node server (`--sysfs-root`), `simulate --topology sysfs=DIR`, and the reader's own tests. Only the files
the reader uses are written, with the kernel's formats (Linux CPU lists, `Node N MemTotal: <kB> kB`, one
distance per node in node order). Writing then reading gives back the same groupings, NUMA nodes, memory,
hugepages and distances; CPU ids, core ids, sockets and uncore cache ids survive unchanged too.
"""

from __future__ import annotations

from pathlib import Path

from podlevel.engine.cpuset import CPUSet
from podlevel.engine.topology import Topology


def write_tree(topology: Topology, root: str | Path) -> Path:
    """Write `topology` under `root` (created if needed) and return `root` as a Path."""
    root = Path(root)
    cpu_dir = root / "devices/system/cpu"
    node_dir = root / "devices/system/node"
    all_cpus = str(topology.all_cpus)
    for name in ("online", "possible", "present"):
        _write(cpu_dir / name, all_cpus)
    for cpu in topology.cpus:
        topo = cpu_dir / f"cpu{cpu.cpu}/topology"
        _write(topo / "physical_package_id", str(cpu.socket))
        _write(topo / "core_id", str(cpu.core))
        _write(topo / "thread_siblings_list", str(topology.cpus_by_core[cpu.core]))
        _write(topo / "core_siblings_list", str(topology.cpus_by_socket[cpu.socket]))
        cache = cpu_dir / f"cpu{cpu.cpu}/cache/index3"
        _write(cache / "level", "3")
        _write(cache / "type", "Unified")
        _write(cache / "id", str(cpu.uncore_cache))
        _write(cache / "shared_cpu_list", str(topology.cpus_by_uncore[cpu.uncore_cache]))

    node_ids = CPUSet(topology.numa_node_ids)
    for name in ("online", "possible", "has_cpu", "has_memory"):
        _write(node_dir / name, str(node_ids))
    for node in topology.numa_nodes:
        path = node_dir / f"node{node.id}"
        _write(path / "cpulist", str(topology.cpus_by_numa[node.id]))
        _write(path / "distance", " ".join(str(topology.distance(node.id, other)) for other in node_ids))
        kb = node.memory // 1024
        _write(
            path / "meminfo",
            f"Node {node.id} MemTotal:       {kb} kB\nNode {node.id} MemFree:        {kb} kB\n"
            f"Node {node.id} MemUsed:        0 kB\n",
        )
        for size, pages in node.hugepages.items():
            pool = path / f"hugepages/hugepages-{size // 1024}kB"
            _write(pool / "nr_hugepages", str(pages))
            _write(pool / "free_hugepages", str(pages))
    return root


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")
