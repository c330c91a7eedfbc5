"""sysfs reader: synthetic trees written from `from_spec` machines read back the same, odd trees are refused
with messages naming the file, and this host's real /sys reads without error."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from podlevel.engine.cpuset import CPUSet
from podlevel.engine.errors import InputError
from podlevel.engine.topology import Topology, from_spec
from podlevel.sysfs import read_topology, write_tree

SPECS = {
    "1 socket, 1 node, no SMT": "sockets=1,nodes-per-socket=1,cores-per-node=4,threads-per-core=1",
    "2 sockets, 2 nodes, SMT": "sockets=2,nodes-per-socket=1,cores-per-node=4,threads-per-core=2",
    "2 sockets x 2 SNC nodes, hugepages": (
        "sockets=2,nodes-per-socket=2,cores-per-node=3,threads-per-core=2,memory-per-node=8Gi,"
        "hugepages-2Mi=1Gi,hugepages-1Gi=2Gi"
    ),
    "1 socket, 2 uncore caches per node": (
        "sockets=1,nodes-per-socket=2,cores-per-node=4,threads-per-core=2,uncore-caches-per-node=2"
    ),
    "4 threads per core": "sockets=1,nodes-per-socket=1,cores-per-node=2,threads-per-core=4",
}


def assert_same_machine(got: Topology, want: Topology) -> None:
    assert got.all_cpus == want.all_cpus
    assert dict(got.cpus_by_numa) == dict(want.cpus_by_numa)
    assert dict(got.cpus_by_socket) == dict(want.cpus_by_socket)
    assert dict(got.cpus_by_core) == dict(want.cpus_by_core)
    assert set(got.cpus_by_uncore.values()) == set(want.cpus_by_uncore.values())
    assert [(n.id, n.memory, dict(n.hugepages), dict(n.distances)) for n in got.numa_nodes] == [
        (n.id, n.memory, dict(n.hugepages), dict(n.distances)) for n in want.numa_nodes
    ]


@pytest.mark.parametrize("spec", SPECS.values(), ids=SPECS.keys())
def test_written_tree_reads_back_as_the_same_machine(tmp_path: Path, spec: str) -> None:
    want = from_spec(spec)
    got = read_topology(write_tree(want, tmp_path))
    assert_same_machine(got, want)
    assert got.cpus == want.cpus  # core, socket and uncore ids survive too when caches carry an `id`


def test_uncore_groups_fall_back_to_the_smallest_cpu_without_cache_ids(tmp_path: Path) -> None:
    want = from_spec(SPECS["1 socket, 2 uncore caches per node"])
    write_tree(want, tmp_path)
    for cache_id in tmp_path.glob("devices/system/cpu/cpu*/cache/index3/id"):
        cache_id.unlink()
    got = read_topology(tmp_path)
    assert_same_machine(got, want)
    assert sorted(got.cpus_by_uncore) == sorted(min(cpus) for cpus in want.cpus_by_uncore.values())


def test_sockets_stand_in_for_uncore_caches_when_a_cpu_reports_no_l3(tmp_path: Path) -> None:
    topology = from_spec(SPECS["1 socket, 2 uncore caches per node"])
    write_tree(topology, tmp_path)
    shutil.rmtree(tmp_path / "devices/system/cpu/cpu5/cache")
    got = read_topology(tmp_path)
    assert dict(got.cpus_by_uncore) == dict(topology.cpus_by_socket)


def test_l3_is_found_by_level_not_by_index_name(tmp_path: Path) -> None:
    topology = from_spec(SPECS["1 socket, 2 uncore caches per node"])
    write_tree(topology, tmp_path)
    for cache in tmp_path.glob("devices/system/cpu/cpu*/cache"):
        (cache / "index3").rename(cache / "index5")
        (cache / "index2").mkdir()
        (cache / "index2/level").write_text("2\n")
    assert set(read_topology(tmp_path).cpus_by_uncore.values()) == set(topology.cpus_by_uncore.values())


def test_core_ids_are_the_smallest_sibling_and_unique_across_sockets(tmp_path: Path) -> None:
    topology = from_spec(SPECS["2 sockets, 2 nodes, SMT"])
    write_tree(topology, tmp_path)
    # sysfs core_id restarts at 0 on every socket; the reader must not use it
    for cpu in topology.cpus:
        (tmp_path / f"devices/system/cpu/cpu{cpu.cpu}/topology/core_id").write_text("0\n")
    got = read_topology(tmp_path)
    assert {cpu: info.core for cpu, info in got.info.items()} == {cpu: cpu % 8 for cpu in range(16)}


def test_offline_cpus_are_left_out_and_siblings_trimmed(tmp_path: Path) -> None:
    topology = from_spec(SPECS["2 sockets, 2 nodes, SMT"])
    write_tree(topology, tmp_path)
    (tmp_path / "devices/system/cpu/online").write_text("1-15\n")  # CPU 0 (sibling of 8) offline
    got = read_topology(tmp_path)
    assert got.all_cpus == CPUSet.parse("1-15")
    assert got.info[8].core == 8
    assert got.cpus_by_core[8] == CPUSet([8])
    assert got.cpus_by_numa[0] == CPUSet.parse("1-3,8-11")


def test_a_kernel_without_numa_is_one_node_with_proc_meminfo(tmp_path: Path) -> None:
    topology = from_spec(SPECS["1 socket, 1 node, no SMT"])
    write_tree(topology, tmp_path / "sys")
    shutil.rmtree(tmp_path / "sys/devices/system/node")
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:        8000000 kB\nMemFree:         7000000 kB\n")
    got = read_topology(tmp_path / "sys", meminfo)
    assert got.numa_node_ids == (0,)
    assert got.cpus_by_numa[0] == CPUSet.parse("0-3")
    assert got.numa_nodes[0].memory == 8000000 * 1024
    assert dict(got.numa_nodes[0].distances) == {0: 10}


def test_distance_rows_follow_the_online_node_order(tmp_path: Path) -> None:
    topology = from_spec(SPECS["2 sockets x 2 SNC nodes, hugepages"])
    write_tree(topology, tmp_path)
    # nodes 0, 2, 5, 7 as on a machine with sparse node ids: rename the directories
    node_dir = tmp_path / "devices/system/node"
    for old, new in reversed(list(enumerate((0, 2, 5, 7)))):
        (node_dir / f"node{old}").rename(node_dir / f"node{new}")
    (node_dir / "online").write_text("0,2,5,7\n")
    got = read_topology(tmp_path)
    assert got.numa_node_ids == (0, 2, 5, 7)
    assert dict(got.numa_by_id[5].distances) == {0: 20, 2: 20, 5: 10, 7: 12}


def test_memory_only_nodes_are_left_out(tmp_path: Path) -> None:
    topology = from_spec(SPECS["2 sockets, 2 nodes, SMT"])
    write_tree(topology, tmp_path)
    node_dir = tmp_path / "devices/system/node"
    cxl = node_dir / "node2"
    shutil.copytree(node_dir / "node1", cxl)
    (cxl / "cpulist").write_text("\n")
    (node_dir / "online").write_text("0-2\n")
    for node in range(3):
        (node_dir / f"node{node}/distance").write_text(["10 20 30", "20 10 30", "30 30 10"][node] + "\n")
    got = read_topology(tmp_path)
    assert got.numa_node_ids == (0, 1)
    assert dict(got.numa_by_id[0].distances) == {0: 10, 1: 20}


def test_a_missing_file_names_the_path_and_what_it_was_for(tmp_path: Path) -> None:
    write_tree(from_spec(SPECS["2 sockets, 2 nodes, SMT"]), tmp_path)
    missing = tmp_path / "devices/system/node/node1/meminfo"
    missing.unlink()
    with pytest.raises(FileNotFoundError) as err:
        read_topology(tmp_path)
    assert err.value.filename == str(missing)
    assert "memory of NUMA node 1" in str(err.value)
    assert str(missing) in str(err.value)


def test_an_empty_tree_names_the_online_cpu_list(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"online CPUs.*devices/system/cpu/online"):
        read_topology(tmp_path)


@pytest.mark.parametrize(
    ("relative", "content", "message"),
    [
        pytest.param("devices/system/cpu/online", "0-x", r"cpu/online is not a CPU list", id="bad-cpu-list"),
        pytest.param("devices/system/cpu/online", "", r"lists no CPU", id="no-cpus"),
        pytest.param(
            "devices/system/cpu/cpu3/topology/physical_package_id", "zero", r"holds 'zero', not an integer",
            id="bad-socket",
        ),
        pytest.param(
            "devices/system/cpu/cpu3/topology/thread_siblings_list", "2", r"does not contain CPU 3 itself",
            id="siblings-without-self",
        ),
        pytest.param(
            "devices/system/node/node0/distance", "10 20 30", r"has 3 values for 2 online nodes",
            id="distance-row",
        ),
        pytest.param(
            "devices/system/node/node0/meminfo", "Node 0 MemFree: 1 kB", r"no 'MemTotal: <n> kB' line",
            id="no-memtotal",
        ),
        pytest.param(
            "devices/system/node/node1/cpulist", "0-15", r"CPU 0 is listed by NUMA nodes 0 and 1",
            id="cpu-in-two-nodes",
        ),
        pytest.param(
            "devices/system/node/node1/cpulist", "4-7", r"online CPU 12 is in no NUMA node's cpulist",
            id="cpu-in-no-node",
        ),
        pytest.param(
            "devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages", "-", r"not an integer",
            id="bad-hugepages",
        ),
    ],
)
def test_malformed_files_are_refused_naming_the_file(
    tmp_path: Path, relative: str, content: str, message: str
) -> None:
    write_tree(from_spec(SPECS["2 sockets, 2 nodes, SMT"] + ",hugepages-2Mi=2Mi"), tmp_path)
    (tmp_path / relative).write_text(content + "\n")
    with pytest.raises(InputError, match=message) as err:
        read_topology(tmp_path)
    assert err.value.rule == "sysfs"


def test_a_core_spanning_two_nodes_is_refused(tmp_path: Path) -> None:
    write_tree(from_spec(SPECS["2 sockets, 2 nodes, SMT"]), tmp_path)
    node_dir = tmp_path / "devices/system/node"
    (node_dir / "node0/cpulist").write_text("0-3,8-10\n")
    (node_dir / "node1/cpulist").write_text("4-7,11-15\n")
    with pytest.raises(InputError, match="core 3 spans NUMA nodes"):
        read_topology(tmp_path)


def test_this_hosts_sys_reads_as_the_kernel_reports_it() -> None:
    sys_root = Path("/sys")
    got = read_topology(sys_root)
    online = CPUSet.parse((sys_root / "devices/system/cpu/online").read_text())
    assert got.all_cpus == online
    node_dirs = sorted(sys_root.glob("devices/system/node/node[0-9]*"))
    with_cpus = [d for d in node_dirs if CPUSet.parse((d / "cpulist").read_text()) & online]
    assert len(got.numa_nodes) == max(1, len(with_cpus))
    for node in got.numa_nodes:
        assert node.memory > 0
        assert node.distances[node.id] == 10
    for cpu in online:
        siblings = CPUSet.parse(
            (sys_root / f"devices/system/cpu/cpu{cpu}/topology/thread_siblings_list").read_text()
        )
        assert got.cpus_by_core[got.info[cpu].core] == siblings & online
