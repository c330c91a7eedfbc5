"""Test bed cgroup read-back on synthetic v1 and v2 trees: both spellings of "unlimited" read as None and
each version's files land in the same fields. (The real v1 hierarchy is exercised by the integration
tests; pure v2 only inside the VM, so its file names are pinned here.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.cgroupfs import is_cgroup2, read_cgroup

CGROUP = "/nri-podlevel-test-0.slice/kubepods/podu/ctr"


def _write(root: Path, files: dict[str, str]) -> None:
    for name, value in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(value + "\n")


def _v1_tree(root: Path, quota: str, limit: str) -> None:
    _write(root, {
        f"cpuset{CGROUP}/cpuset.cpus": "2-3", f"cpuset{CGROUP}/cpuset.effective_cpus": "2-3",
        f"cpuset{CGROUP}/cpuset.mems": "0", f"cpuset{CGROUP}/cpuset.effective_mems": "0",
        f"cpu{CGROUP}/cpu.cfs_quota_us": quota, f"cpu{CGROUP}/cpu.cfs_period_us": "100000",
        f"cpu{CGROUP}/cpu.shares": "512", f"memory{CGROUP}/memory.limit_in_bytes": limit,
    })


def _v2_tree(root: Path, cpu_max: str, memory_max: str) -> None:
    _write(root, {"cgroup.controllers": "cpuset cpu memory"})
    _write(root / CGROUP.lstrip("/"), {
        "cpuset.cpus": "", "cpuset.cpus.effective": "0-7", "cpuset.mems": "1", "cpuset.mems.effective": "1",
        "cpu.max": cpu_max, "cpu.weight": "20", "memory.max": memory_max,
    })


def test_v1_limits(tmp_path: Path) -> None:
    _v1_tree(tmp_path, "50000", str(64 << 20))
    values = read_cgroup(CGROUP, tmp_path)
    assert not is_cgroup2(tmp_path)
    assert (values.version, values.cpus, values.effective_cpus, values.mems) == (1, "2-3", "2-3", "0")
    assert (values.cpu_quota_us, values.cpu_period_us, values.cpu_shares, values.cpu_weight) == (
        50000, 100000, 512, None)
    assert values.memory_limit == 64 << 20


def test_v1_unlimited(tmp_path: Path) -> None:
    _v1_tree(tmp_path, "-1", "9223372036854771712")
    values = read_cgroup(CGROUP, tmp_path)
    assert (values.cpu_quota_us, values.memory_limit) == (None, None)


@pytest.mark.parametrize(("cpu_max", "memory_max", "quota", "period", "limit"), [
    ("25000 100000", "100663296", 25000, 100000, 96 << 20),
    ("max 100000", "max", None, 100000, None),
], ids=["limited", "unlimited"])
def test_v2(tmp_path: Path, cpu_max: str, memory_max: str, quota: int | None, period: int,
            limit: int | None) -> None:
    _v2_tree(tmp_path, cpu_max, memory_max)
    values = read_cgroup(CGROUP, tmp_path)
    assert is_cgroup2(tmp_path)
    assert (values.version, values.cpus, values.effective_cpus, values.mems) == (2, "", "0-7", "1")
    assert (values.cpu_quota_us, values.cpu_period_us, values.cpu_shares, values.cpu_weight) == (
        quota, period, None, 20)
    assert values.memory_limit == limit


def test_missing_cgroup_names_the_file(tmp_path: Path) -> None:
    _v2_tree(tmp_path, "max 100000", "max")
    with pytest.raises(FileNotFoundError, match="nope"):
        read_cgroup("/nope", tmp_path)
