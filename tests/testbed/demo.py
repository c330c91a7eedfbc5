"""`make demo`: a private containerd with NRI on this machine, `nri-podlevel run` attached as a real plugin
process, the demo pods started through CRI the way a kubelet would, and what landed in each pod's and each
container's cgroup printed beside the plugin's own log. Then the plugin is killed and started again: it
restores from its checkpoint and nothing moves; `nri-podlevel checkpoint inspect` shows the files. Everything
started is stopped again, pass or fail.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Final

from podlevel.engine.pod import Pod
from podlevel.podspec.manifest import load_pods
from podlevel.state.store import CPU_STATE_FILE, MEMORY_STATE_FILE
from testbed import CHECKOUT
from testbed.cgroupfs import CgroupValues, cpus_allowed_list, read_cgroup
from testbed.containerd import FLAVOURS, Containerd
from testbed.cri import CRI, CRIError, pod_cgroup_parent
from testbed.kubelet import qos_tier, start_pod
from testbed.plugin_process import PluginProcess

DEFAULT_PODS = CHECKOUT / "deploy" / "demo" / "pods-2cpu.yaml"
RESTART_TIMEOUT_S: Final = 30.0


def report(cri: CRI, pod: Pod, containers: dict[str, str]) -> list[str]:
    """Print (and return) what the pod cgroup and each container's cgroup hold."""
    lines: list[str] = []
    if cri.cgroup_root is not None:
        values = read_cgroup(pod_cgroup_parent(cri.cgroup_root, pod.uid, qos_tier(pod)))
        lines.append(f"  {pod.name} (pod cgroup): cpuset.cpus.effective={values.effective_cpus} "
                     f"cpuset.mems.effective={values.effective_mems} cfs quota={_quota(values)}")
    for name, container_id in containers.items():
        status = cri.container_status(container_id)
        if status.state != "CONTAINER_RUNNING" or not status.pid:
            lines.append(f"  {pod.name}/{name}: {status.state}")
            continue
        values = read_cgroup(status.cgroups_path)
        lines.append(
            f"  {pod.name}/{name}: cpuset.cpus.effective={values.effective_cpus} "
            f"cpuset.mems.effective={values.effective_mems} cfs quota={_quota(values)} "
            f"period={values.cpu_period_us}; process Cpus_allowed_list={cpus_allowed_list(status.pid)}"
        )
    for line in lines:
        print(line)
    return lines


def _quota(values: CgroupValues) -> str:
    return "max" if values.cpu_quota_us is None else str(values.cpu_quota_us)


def inspect_checkpoints(state_dir: Path) -> None:
    for name in (CPU_STATE_FILE, MEMORY_STATE_FILE):
        print(f"== nri-podlevel checkpoint inspect {state_dir / name}")
        subprocess.run([sys.executable, "-m", "podlevel.cli.main", "checkpoint", "inspect",
                        str(state_dir / name)], check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hack/demo", description=__doc__)
    parser.add_argument("--flavour", choices=sorted(FLAVOURS), default="2")
    parser.add_argument("--base", type=Path, help="containerd's private directory (not on overlayfs)")
    parser.add_argument("--pods", type=Path, default=DEFAULT_PODS, help="Pod manifests (multi-document YAML)")
    parser.add_argument("plugin_args", nargs="*", help="extra `nri-podlevel run` flags (after --)")
    args = parser.parse_args(argv)
    pods = load_pods(args.pods.read_text(), str(args.pods))

    print(f"== private containerd {args.flavour} with NRI")
    with Containerd(args.flavour, args.base) as ctrd:
        print(f"   {ctrd.versions}; CRI {ctrd.cri_socket}, NRI {ctrd.nri_socket}")
        print("== nri-podlevel run")
        state_dir = ctrd.base / "plugin-state"
        plugin = PluginProcess(ctrd.nri_socket, args.plugin_args, state_dir=state_dir)
        try:
            plugin.wait_registered()
            with ctrd.cri() as cri:
                started: list[tuple[Pod, dict[str, str]]] = []
                for pod in pods:
                    print(f"== pod {pod.namespace}/{pod.name} through CRI")
                    try:
                        started.append((pod, start_pod(cri, pod).containers))
                    except CRIError as err:
                        print(f"   refused: {err.details}")
                print("== what the cgroups hold now")
                before = [report(cri, pod, containers) for pod, containers in started]
                print("== the plugin is killed (SIGKILL) and started again; the containers keep running")
                plugin.kill()
                plugin = PluginProcess(ctrd.nri_socket, args.plugin_args, state_dir=state_dir)
                plugin.wait_registered()
                plugin.wait_for_line("synchronized", RESTART_TIMEOUT_S)
                for line in plugin.lines:
                    if "restored" in line or "synchronized" in line:
                        print(f"   {line}")
                print("== what the cgroups hold after the restart")
                after = [report(cri, pod, containers) for pod, containers in started]
                print("   nothing moved" if after == before else "   SOMETHING MOVED (see above)")
                inspect_checkpoints(state_dir)
                cri.remove_all()
        finally:
            plugin.stop()
    print("== stopped: containerd, its shims and containers, and the plugin")
    return 0


if __name__ == "__main__":
    sys.exit(main())
