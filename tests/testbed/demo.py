"""`make demo`: a private containerd with NRI on this machine, `nri-podlevel run` attached as a real plugin
process, the demo pods started through CRI the way a kubelet would, and what landed in each pod's and each
container's cgroup printed beside the plugin's own log (console layout) and its metrics' decision counters.
Then the plugin is killed and started again: it restores from its checkpoint and nothing moves; `nri-podlevel
checkpoint inspect` shows the files. Before the restart the operator commands run against the live plugin:
`show`, `check`, `explain` of every pod, and `check` again after one container's cpuset was written behind
the plugin's back (then put back). Everything
started is stopped again, pass or fail.
"""

from __future__ import annotations

import argparse
import http.client
import subprocess
import sys
from pathlib import Path
from typing import Final

from podlevel.engine.cpuset import CPUSet
from podlevel.engine.pod import Pod
from podlevel.podspec.workloads import load_pods
from podlevel.state.store import CPU_STATE_FILE, MEMORY_STATE_FILE
from testbed import CHECKOUT
from testbed.cgroupfs import CGROUP_MOUNT, CgroupValues, cpus_allowed_list, is_cgroup2, read_cgroup
from testbed.containerd import FLAVOURS, Containerd
from testbed.cri import CRI, CRIError, pod_cgroup_parent
from testbed.kubelet import qos_tier, start_pod
from testbed.plugin_process import PluginProcess

DEFAULT_PODS = CHECKOUT / "deploy" / "demo" / "pods-2cpu.yaml"
RESTART_TIMEOUT_S: Final = 30.0
DECISION_METRICS: Final = ("resource_manager_", "nri_podlevel_admissions_refused", "nri_podlevel_free_")


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


def nri_podlevel(*args: str, check: bool = True) -> None:
    print(f"== nri-podlevel {' '.join(args)}", flush=True)
    subprocess.run([sys.executable, "-m", "podlevel.cli.main", *args], check=check)


def operator_commands(cri: CRI, plugin: PluginProcess, started: list[tuple[Pod, dict[str, str]]],
                      refused: list[Pod]) -> None:
    """show, check, explain; then a drift: the first container's cpuset written behind the plugin's back."""
    source = ["--address", plugin.debug_address, "--state-dir", str(plugin.state_dir)]
    nri_podlevel("show", *source)
    nri_podlevel("check", *source)
    for pod in [pod for pod, _ in started] + refused:
        nri_podlevel("explain", f"{pod.namespace}/{pod.name}", "--address", plugin.debug_address)
    if not started or not started[0][1]:
        return
    container_id = next(iter(started[0][1].values()))
    relative = cri.container_status(container_id).cgroups_path.strip("/")
    cpus = (CGROUP_MOUNT if is_cgroup2() else CGROUP_MOUNT / "cpuset") / relative / "cpuset.cpus"
    before = cpus.read_text().strip()
    others = CPUSet.parse((cpus.parent.parent / "cpuset.cpus").read_text().strip()) - CPUSet.parse(before)
    if not others:
        return
    other = str(CPUSet([min(others)]))
    print(f"== echo {other} > {cpus}", flush=True)
    cpus.write_text(other)
    try:
        nri_podlevel("check", *source, check=False)
    finally:
        cpus.write_text(before)


def inspect_checkpoints(state_dir: Path) -> None:
    for name in (CPU_STATE_FILE, MEMORY_STATE_FILE):
        print(f"== nri-podlevel checkpoint inspect {state_dir / name}")
        subprocess.run([sys.executable, "-m", "podlevel.cli.main", "checkpoint", "inspect",
                        str(state_dir / name)], check=True)


def print_metrics(plugin: PluginProcess) -> None:
    """The decision counters and free resources of the plugin's `/metrics`, the series with a value."""
    host, port = plugin.metrics_address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        connection.request("GET", "/metrics")
        text = connection.getresponse().read().decode()
    finally:
        connection.close()
    for line in text.splitlines():
        if line.startswith(DECISION_METRICS) and not line.endswith(" 0.0"):
            print(f"   {line}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hack/demo", description=__doc__)
    parser.add_argument("--flavour", choices=sorted(FLAVOURS), default="2")
    parser.add_argument("--base", type=Path, help="containerd's private directory (not on overlayfs)")
    parser.add_argument("--pods", type=Path, default=DEFAULT_PODS, help="Pod manifests (multi-document YAML)")
    parser.add_argument("plugin_args", nargs="*", help="extra `nri-podlevel run` flags (after --)")
    args = parser.parse_args(argv)
    pods = load_pods(args.pods.read_text(), str(args.pods))
    # For a reader; no repair, so the drift the demo writes stays for `check` to show; later flags override.
    plugin_args = ["--log-format", "console", "--reconcile-period", "0", *args.plugin_args]

    print(f"== private containerd {args.flavour} with NRI")
    with Containerd(args.flavour, args.base) as ctrd:
        print(f"   {ctrd.versions}; CRI {ctrd.cri_socket}, NRI {ctrd.nri_socket}")
        print("== nri-podlevel run")
        state_dir = ctrd.base / "plugin-state"
        plugin = PluginProcess(ctrd.nri_socket, plugin_args, state_dir=state_dir)
        try:
            plugin.wait_registered()
            with ctrd.cri() as cri:
                started: list[tuple[Pod, dict[str, str]]] = []
                refused: list[Pod] = []
                for pod in pods:
                    print(f"== pod {pod.namespace}/{pod.name} through CRI")
                    try:
                        started.append((pod, start_pod(cri, pod).containers))
                    except CRIError as err:
                        print(f"   refused: {err.details}")
                        refused.append(pod)
                print("== what the cgroups hold now")
                before = [report(cri, pod, containers) for pod, containers in started]
                print(f"== the plugin's decisions in its metrics (http://{plugin.metrics_address}/metrics)")
                print_metrics(plugin)
                operator_commands(cri, plugin, started, refused)
                print("== the plugin is killed (SIGKILL) and started again; the containers keep running")
                plugin.kill()
                plugin = PluginProcess(ctrd.nri_socket, plugin_args, state_dir=state_dir)
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
