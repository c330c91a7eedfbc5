"""`make demo`: a private containerd with NRI on this machine, `nri-podlevel run` attached as a real plugin
process, the demo pods started through CRI the way a kubelet would, and what landed in each container's
cgroup printed beside the plugin's own log. Everything started is stopped again, pass or fail.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from podlevel.podspec.manifest import load_pods
from testbed import CHECKOUT
from testbed.cgroupfs import cpus_allowed_list, read_cgroup
from testbed.containerd import FLAVOURS, Containerd
from testbed.cri import CRI, CRIError
from testbed.kubelet import start_pod
from testbed.plugin_process import PluginProcess

DEFAULT_PODS = CHECKOUT / "deploy" / "demo" / "pods-2cpu.yaml"


def report(cri: CRI, pod_name: str, containers: dict[str, str]) -> None:
    for name, container_id in containers.items():
        status = cri.container_status(container_id)
        if status.state != "CONTAINER_RUNNING" or not status.pid:
            print(f"  {pod_name}/{name}: {status.state}")
            continue
        values = read_cgroup(status.cgroups_path)
        quota = "max" if values.cpu_quota_us is None else values.cpu_quota_us
        print(
            f"  {pod_name}/{name}: cgroup cpuset.cpus={values.cpus} cpuset.mems={values.mems} "
            f"cfs quota={quota} period={values.cpu_period_us}; process Cpus_allowed_list="
            f"{cpus_allowed_list(status.pid)}"
        )


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
        plugin = PluginProcess(ctrd.nri_socket, args.plugin_args, state_dir=ctrd.base / "plugin-state")
        try:
            plugin.wait_registered()
            with ctrd.cri() as cri:
                started: dict[str, dict[str, str]] = {}
                for pod in pods:
                    print(f"== pod {pod.namespace}/{pod.name} through CRI")
                    try:
                        started[pod.name] = start_pod(cri, pod).containers
                    except CRIError as err:
                        print(f"   refused: {err.details}")
                print("== what the cgroups hold now")
                for name, containers in started.items():
                    report(cri, name, containers)
                cri.remove_all()
        finally:
            plugin.stop()
    print("== stopped: containerd, its shims and containers, and the plugin")
    return 0


if __name__ == "__main__":
    sys.exit(main())
