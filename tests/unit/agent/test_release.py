"""agent.release: the Synchronize answer that puts a node back (every running container on all the machine's
CPUs and memory nodes, the kubelet's quota where the plugin managed the pod), and the pod cgroups widened
first, on a cgroup v2 tree of real files."""

from __future__ import annotations

from pathlib import Path

from podlevel.agent.release import Release
from podlevel.nri import Updates, api
from podlevel.podspec.runtime import container_resources
from support.builders import container, fast_path, new_engine, sandbox, v2_root


def by_container(updates: Updates) -> dict[str, tuple[str, str, int | None]]:
    answer = {}
    for update in updates:
        cpu = update.linux.resources.cpu
        answer[update.container_id] = (cpu.cpus, cpu.mems, cpu.quota.value if cpu.HasField("quota") else None)
    return answer


def test_every_running_container_gets_the_whole_machine_and_managed_ones_the_kubelets_quota() -> None:
    topology = new_engine().topology
    fast, web = sandbox(fast_path()), sandbox(None)
    running = [container(fast, "log"), container(fast, "app"), container(web, "server"),
               container(web, "gone", api.CONTAINER_STOPPED)]

    answer = by_container(Release(topology, None).synchronize([fast, web], running))

    pod = fast_path()
    quotas = {name: container_resources(pod, pod.container(name)).cpu_quota for name in ("log", "app")}
    assert quotas["log"] == 400_000, "a sidecar without a limit of its own: the pod's, as the kubelet sets it"
    assert answer == {
        "fast-log": ("0-15", "0-1", quotas["log"]),
        "fast-app": ("0-15", "0-1", quotas["app"]),
        "web-server": ("0-15", "0-1", None),  # never managed: its quota is the runtime's own
    }


def test_a_managed_pods_cgroup_is_widened_to_its_parent_with_the_kubelets_pod_quota(tmp_path: Path) -> None:
    pod = fast_path()
    root = v2_root(tmp_path, pod)
    pod_dir = root / "kubepods" / f"pod{pod.uid}"
    (root / "kubepods" / "cpuset.cpus.effective").write_text("0-15\n")
    (root / "kubepods" / "cpuset.mems.effective").write_text("0-1\n")
    (pod_dir / "cpuset.cpus.effective").write_text("2-3\n")  # the bubble the plugin wrote
    (pod_dir / "cpu.max").write_text("max 100000\n")  # its quota lifted
    message = sandbox(pod)
    message.linux.cgroup_parent = f"/kubepods/pod{pod.uid}"
    release = Release(new_engine().topology, root)

    release.synchronize([message], [container(message, "app")])

    assert (pod_dir / "cpuset.cpus").read_text().strip() == "0-15"
    assert (pod_dir / "cpuset.mems").read_text().strip() == "0-1"
    pod_quota = message.linux.pod_resources.cpu.quota.value
    assert (pod_dir / "cpu.max").read_text().split() == [str(pod_quota), "100000"]
    assert release.released.pod_cgroups == [f"/kubepods/pod{pod.uid}"] and release.released.failed == []
