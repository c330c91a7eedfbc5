"""The real cluster of `hack/cluster` (testbed.cluster), up once for the session with deploy/ installed as
README's Installing says, and down on every exit path."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest

from testbed import agent_image
from testbed import cluster as testcluster
from testbed.cluster import NAMESPACE, Layout
from testbed.wait import DeadlineExceeded, wait_until

POD_TIMEOUT_S: Final = 300.0
AGENT_READY_TIMEOUT_S: Final = 300.0
TEST_TIMEOUT_S: Final = 2400
"""Per test, the session's cluster brought up included (an image build and minutes of TCG)."""
SECOND_VERSION: Final = "0.1.1"
"""The version of the second image, the one a roll changes to."""


class Kube:
    """kubectl against the test cluster, and the node's files read through the agent's own container (its
    /host/cgroup is the node's cgroup tree), as an operator without a shell on the node would."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout

    def __call__(self, *args: str, stdin: str | None = None, timeout: float = 900) -> str:
        return testcluster.kubectl(self.layout, *args, stdin=stdin, timeout=timeout)

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "-o", "json"))

    def apply(self, manifest: str | Path) -> None:
        text = manifest.read_text() if isinstance(manifest, Path) else manifest
        self("apply", "-f", "-", stdin=text)

    def delete_pod(self, name: str) -> None:
        self("delete", "pod", name, "--ignore-not-found", "--wait=true", "--timeout=300s")

    def agent(self) -> str:
        """The name of the agent pod on the node, once it is the only one and Ready."""
        found: dict[str, Any] = {}

        def one_ready() -> bool:
            found["pods"] = self.json("-n", NAMESPACE, "get", "pods", "-l",
                                      "app.kubernetes.io/component=agent")["items"]
            found["ready"] = [p["metadata"]["name"] for p in found["pods"]
                              if p["metadata"].get("deletionTimestamp") is None
                              and any(c["type"] == "Ready" and c["status"] == "True"
                                      for c in p["status"].get("conditions", []))]
            return len(found["ready"]) == 1 and len(found["pods"]) == 1

        try:
            wait_until(one_ready, AGENT_READY_TIMEOUT_S, "one Ready agent pod")
        except DeadlineExceeded:
            states = {p["metadata"]["name"]: p["status"] for p in found.get("pods", [])}
            raise AssertionError(f"no single Ready agent pod: {json.dumps(states)[:3000]}") from None
        return str(found["ready"][0])

    def in_agent(self, *argv: str, stdin: str | None = None) -> str:
        return self("-n", NAMESPACE, "exec", "-i", self.agent(), "--", *argv, stdin=stdin)

    def settle(self, name: str) -> dict[str, Any]:
        """The pod once every container runs, or once one cannot be created."""
        found: dict[str, Any] = {}

        def settled() -> bool:
            found.update(self.json("get", "pod", name))
            statuses = [*found["status"].get("containerStatuses", []),
                        *found["status"].get("initContainerStatuses", [])]
            if any(s["state"].get("waiting", {}).get("reason") == "CreateContainerError" for s in statuses):
                return True
            main = found["status"].get("containerStatuses", [])
            return bool(main) and all("running" in s["state"] for s in main)

        wait_until(settled, POD_TIMEOUT_S, f"pod {name} running or refused")
        return found

    # the kind end-to-end's reader (testbed.kind.compare), on this node
    def cgroup(self, node: str, container_id: str) -> Path:
        """The container's cgroup directory as the agent's container sees it."""
        del node  # one node
        found = self.in_agent("python3", "-c", (
            "import glob,sys; print('\\n'.join(glob.glob('/host/cgroup/kubepods/**/' + sys.argv[1], "
            "recursive=True)))"), container_id).split()
        assert len(found) == 1, f"container {container_id[:12]}'s cgroup: {found}"
        return Path(found[0])

    def read(self, node: str, path: Path) -> str:
        del node
        return self.in_agent("python3", "-c", "import sys; print(open(sys.argv[1]).read().strip())",
                             str(path)).strip()

    def container_cgroup_files(self, pod: dict[str, Any]) -> dict[str, tuple[str, str]]:
        """container name -> (cpuset.cpus, cpu.max) of each running container."""
        files = {}
        for status in pod["status"].get("containerStatuses", []):
            if "running" not in status["state"]:
                continue
            where = self.cgroup("", status["containerID"].split("://", 1)[1])
            files[status["name"]] = (self.read("", where / "cpuset.cpus"), self.read("", where / "cpu.max"))
        return files


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("cluster"):
            item.add_marker(pytest.mark.timeout(TEST_TIMEOUT_S))


@pytest.fixture(scope="session")
def kube(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    """The cluster with deploy/ installed; its components' logs are kept under .cache/cluster-test/logs
    when a test failed."""
    bumped = agent_image.copy_with_version(tmp_path_factory.mktemp("bumped"), SECOND_VERSION)
    second = agent_image.build(bumped)
    # The guest shares the checkout, not the pytest temporary directory: the state lives under .cache.
    layout = Layout(testcluster.STATE.parent / "cluster-test")
    shutil.rmtree(layout.state, ignore_errors=True)
    try:
        testcluster.up(layout, flavour="2", install=True, images=[second.archive])
    except testcluster.ClusterError as exc:
        pytest.fail(str(exc))
    try:
        yield Kube(layout)
    finally:
        testcluster.down(layout, keep_logs=request.session.testsfailed > 0)
