"""Guest-only tests: they run inside the VM `hack/vm-run` boots, never on the host.

The guest has cgroup v2 as its only hierarchy and tells its shape through VM_NUMA_NODES, VM_CPUS,
VM_THREADS_PER_CORE and VM_MEMORY. Anywhere else every test here errors at setup with how to run them, before
any fixture can touch the host's cgroups (the host may be cgroup v1); `make unit` leaves them out by marker.
The cgroup fixtures build throw-away hierarchies under the guest's /sys/fs/cgroup and remove them afterwards,
processes first.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from vm_support import (
    CGROUP_ROOT,
    CONTROLLERS,
    SHAPE_VARIABLES,
    GuestShape,
    Member,
    mkcgroup,
    remove_cgroup,
    write,
)

HOW_TO_RUN = (
    "run them inside the guest: `make vm`, or `hack/vm-run --numa-nodes 2 --cpus 8 --threads-per-core 2 "
    "--memory 4G -- .venv/bin/python -m pytest -m vm tests/vm`"
)


def _not_in_guest() -> list[str]:
    mounts = [line.split() for line in Path("/proc/mounts").read_text().splitlines()]
    problems = []
    if not any(m[1] == str(CGROUP_ROOT) and m[2] == "cgroup2" for m in mounts):
        problems.append(f"{CGROUP_ROOT} is not a cgroup2 mount")
    if v1 := sorted({m[1] for m in mounts if m[2] == "cgroup"}):
        problems.append(f"cgroup v1 is mounted ({', '.join(v1[:3])}...)")
    if unset := [v for v in SHAPE_VARIABLES if v not in os.environ]:
        problems.append(f"{', '.join(unset)} not set")
    return problems


@pytest.fixture(scope="session")
def guest() -> GuestShape:
    if problems := _not_in_guest():
        pytest.fail(f"not inside the hack/vm-run guest ({'; '.join(problems)}); {HOW_TO_RUN}", pytrace=False)
    return GuestShape.from_environment()


@pytest.fixture(autouse=True)
def _only_in_guest(guest: GuestShape) -> None:
    """Runs first for every test, so nothing below touches a host."""


@pytest.fixture
def kubepods(guest: GuestShape, request: pytest.FixtureRequest) -> Iterator[Path]:
    """A `kubepods`-like cgroup with cpuset, cpu and memory enabled from the root down to its children."""
    write(CGROUP_ROOT / "cgroup.subtree_control", CONTROLLERS)
    name = request.node.name.translate(str.maketrans("[]/ ", "____"))
    path = mkcgroup(CGROUP_ROOT / f"kubepods-{name}", enable=True)
    try:
        yield path
    finally:
        remove_cgroup(path)


@pytest.fixture
def member(kubepods: Path) -> Iterator[type[Member]]:
    """Start members with `member(cgroup)`; all are ended after the test, before `kubepods` is removed."""
    started: list[Member] = []

    class Tracked(Member):
        def __init__(self, cgroup: Path) -> None:
            super().__init__(cgroup)
            started.append(self)

    yield Tracked
    for m in started:
        if m.proc.poll() is None:
            m.proc.kill()
        m.close()
