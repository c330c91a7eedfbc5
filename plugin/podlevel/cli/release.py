"""`nri-podlevel release`: put a node back as the kubelet leaves it, once the plugin no longer runs there.

Run on the node after the agent is gone (the DaemonSet deleted, or the node unlabelled so its agent pod went).
It connects to the runtime's NRI socket under a name of its own, and its Synchronize answer gives every
running container all the machine's CPUs and memory nodes, with the CFS quota the kubelet gives it where the
plugin managed its pod (`agent.release`); each managed pod's cgroup is widened back and given the kubelet's
pod quota first. Every container's cgroup is then read back until it holds all the CPUs, and the checkpoint
files are renamed (`<name>.released-<time>`) so that an agent installed again starts from the runtime, not
from allocations that no longer hold. It refuses to run while the agent still answers at `--address`: the
agent would put its placement back.

Exit status: 0 when every container and pod cgroup holds what it should, 1 when some did not (each named),
2 on bad input (the agent still running, no runtime at the socket, a machine that cannot be read).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path
from typing import Any, Final

from podlevel.agent.release import Release
from podlevel.cgroups import CgroupError, Wanted, compare, locate_cgroup
from podlevel.cli.endpoint import BadInput, Unreachable, fetch
from podlevel.engine.cpuset import CPUSet
from podlevel.engine.errors import InputError
from podlevel.nri import DEFAULT_SOCKET_PATH, Stub
from podlevel.report import DEFAULT_DEBUG_ADDRESS
from podlevel.state.store import DEFAULT_STATE_DIR, StateDir, StateDirError
from podlevel.sysfs.reader import read_topology

NAME: Final = "podlevel-release"
INDEX: Final = "99"
"""Last among the node's plugins: the widening is the final word on each container."""
READ_BACK_STEP_S: Final = 0.1


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "release", help="put every container and pod cgroup back as the kubelet leaves them (after removal)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--nri-socket", default=DEFAULT_SOCKET_PATH,
                        help="the runtime's NRI socket (%(default)s)")
    parser.add_argument("--sysfs-root", default="/sys", help="where the machine is read (%(default)s)")
    parser.add_argument("--cgroup-root", type=Path, default=Path("/sys/fs/cgroup"),
                        help="the cgroup mount; empty leaves pod cgroups alone and reads nothing back")
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR,
                        help="the agent's checkpoints, set aside (%(default)s)")
    parser.add_argument("--address", default=DEFAULT_DEBUG_ADDRESS,
                        help="where a running agent answers (its --debug-address): refused while it does")
    parser.add_argument("--timeout", type=float, default=30.0,
                        help="seconds to register with the runtime, and to see the cgroups widened "
                             "(%(default)s)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    say = "nri-podlevel release"
    try:
        fetch(args.address, "/debug/node")
    except Unreachable:
        pass
    except BadInput as err:
        print(f"{say}: {err}", file=sys.stderr)
        return 2
    else:
        print(f"{say}: the agent still answers at {args.address}: remove it (or unlabel the node) first, or "
              "it puts its placement back", file=sys.stderr)
        return 2
    try:
        topology = read_topology(args.sysfs_root)
    except (InputError, OSError) as err:
        print(f"{say}: cannot read the machine: {err}", file=sys.stderr)
        return 2
    root = args.cgroup_root if str(args.cgroup_root) not in ("", ".") else None
    handler = Release(topology, root)
    stub = Stub(handler, NAME, INDEX, args.nri_socket)
    serving = threading.Thread(target=stub.run, name="nri", daemon=True)
    serving.start()
    try:
        if not stub.wait_ready(args.timeout):
            print(f"{say}: not registered with the runtime at {args.nri_socket} within {args.timeout:.0f} s "
                  "(is NRI enabled, and the socket this one?)", file=sys.stderr)
            return 2
        released = handler.released
        failed = list(released.failed)
        if root is not None:
            failed += _read_back(handler, root, time.monotonic() + args.timeout)
    finally:
        stub.stop()
        serving.join()
    moved: list[Path] = []
    try:
        if args.state_dir.is_dir():
            moved = StateDir(args.state_dir).set_aside("released")
    except (OSError, StateDirError) as err:
        failed.append(f"checkpoints in {args.state_dir} not set aside: {err}")
    print(f"{say}: {len(released.containers)} containers given CPUs {topology.all_cpus} and NUMA nodes "
          f"{CPUSet(topology.numa_node_ids)}, {len(released.pod_cgroups)} pod cgroups widened; checkpoints "
          f"{', '.join(str(path) for path in moved) or 'none to set aside'}")
    for problem in failed:
        print(f"{say}: {problem}", file=sys.stderr)
    return 1 if failed else 0


def _read_back(handler: Release, root: Path, deadline: float) -> list[str]:
    """Why each container that does not hold its widened settings by `deadline` does not (the runtime
    applies the answer after it leaves)."""
    released = handler.released
    left = dict(released.containers)
    problems: dict[str, str] = {}
    while left:
        for container_id, settings in list(left.items()):
            try:
                cgroup = locate_cgroup(released.cgroups_paths[container_id], root)
                wanted = Wanted(settings.cpus, CPUSet(settings.mems), settings.cpu_quota_us)
                _, drifts = compare(cgroup, wanted)
            except (CgroupError, OSError, InputError, ValueError) as err:
                problems[container_id] = f"cannot be read back: {err}"
                continue
            if drifts:
                problems[container_id] = "; ".join(f"{d.file} holds {d.found}, not {d.expected}"
                                                   for d in drifts)
            else:
                problems.pop(container_id, None)
                del left[container_id]
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(READ_BACK_STEP_S)
    return [f"container {container_id[:12]}: {problems[container_id]}" for container_id in left]
