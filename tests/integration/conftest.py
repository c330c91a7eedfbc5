"""Fixtures for tests against a real, private containerd (tests/testbed); every test here is `integration`.

Fixtures other integration tests reuse:

- `containerd` (session scope, parametrised over the flavours "2" = Debian sid containerd 2.x and "1.7" =
  Debian trixie containerd 1.7): a running `testbed.containerd.Containerd` with CRI, NRI and the
  pause/busybox images. A test that asks for it runs once per flavour (ids `containerd-2`,
  `containerd-1.7`). Useful attributes: `nri_socket` (point the plugin here), `cri_socket`,
  `cgroup_root`, `pod_cgroup_parent(uid, qos)`, `restart()` (containerd goes away and comes back with
  the same containers: reconnect tests), `flavour.name`, `versions`, `log_tail()`. The instance is
  shared by the whole session: leave no pods behind (use `cri`) and do not `stop()` it.
- `cri` (function scope): a `testbed.cri.CRI` client on it; after the test, pass or fail, every
  pod and container is removed.
- `plugin` (function scope): `nri-podlevel run` as a `testbed.plugin_process.PluginProcess` with its
  defaults (CPU 0 reserved, pod cgroups written), registered with `containerd`, its checkpoints and its
  PodResources socket in a fresh state directory; stopped after the test.
- `containerd_flavour` (session scope): just the flavour name, for tests that start their own instance
  with `with Containerd(containerd_flavour, tmp_path_factory.mktemp("ctrd")) as ctrd:`.

`PODLEVEL_CONTAINERD_FLAVOURS=2` (comma-separated) limits the flavours for a quicker local run; CI runs
both. The test bed needs root (it runs containerd and runc). The session summary lists the containerd and
runc versions each flavour ran with and how long its setup took.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.demo_node import ALL
from testbed.containerd import FLAVOURS, Containerd
from testbed.cri import CRI
from testbed.plugin_process import PluginProcess

_HERE = Path(__file__).parent
_FLAVOURS = [f.strip() for f in os.environ.get("PODLEVEL_CONTAINERD_FLAVOURS", ",".join(FLAVOURS)).split(",")]
_SETUPS = pytest.StashKey[list[str]]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in item.path.parents:
            item.add_marker(pytest.mark.integration)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    for line in config.stash.get(_SETUPS, []):
        terminalreporter.write_line(line)


@pytest.fixture(scope="session", params=_FLAVOURS, ids=lambda flavour: f"containerd-{flavour}")
def containerd_flavour(request: pytest.FixtureRequest) -> str:
    flavour: str = request.param
    if flavour not in FLAVOURS:
        raise ValueError(f"PODLEVEL_CONTAINERD_FLAVOURS names {flavour!r}; known: {sorted(FLAVOURS)}")
    if os.geteuid() != 0:
        raise PermissionError("integration tests run containerd and runc and need root")
    return flavour


@pytest.fixture(scope="session")
def containerd(containerd_flavour: str, tmp_path_factory: pytest.TempPathFactory,
               request: pytest.FixtureRequest) -> Iterator[Containerd]:
    started = time.monotonic()
    with Containerd(containerd_flavour, tmp_path_factory.mktemp(f"containerd-{containerd_flavour}")) as ctrd:
        request.config.stash.setdefault(_SETUPS, []).append(
            f"containerd test bed {containerd_flavour}: {ctrd.versions.get('containerd')}, "
            f"{ctrd.versions.get('runc')}, ready in {time.monotonic() - started:.1f}s ({ctrd.base})")
        yield ctrd


@pytest.fixture
def cri(containerd: Containerd) -> Iterator[CRI]:
    with containerd.cri() as client:
        try:
            yield client
        finally:
            client.remove_all()


@pytest.fixture(scope="module")
def demo_node_cpus() -> None:
    """The tests that place pods on the 2-CPU demo node (`support.demo_node`) need exactly its CPUs."""
    cpus = sorted(os.sched_getaffinity(0))
    if cpus != [0, 1]:
        raise RuntimeError(f"these tests are sized for a host with CPUs {ALL}, this process may use {cpus}")


@pytest.fixture
def plugin(containerd: Containerd, tmp_path: Path) -> Iterator[PluginProcess]:
    process = PluginProcess(containerd.nri_socket, state_dir=tmp_path / "state")
    try:
        process.wait_registered()
        yield process
    finally:
        process.stop()
