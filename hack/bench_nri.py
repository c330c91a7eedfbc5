"""What the NRI plugin costs the runtime: CRI CreateContainer round trips with and without it, as JSON.

For each containerd flavour: a private test bed (tests/testbed) with one pod, and `--calls` timed CRI
CreateContainer calls without any NRI plugin and as many with the project's stub attached, answering each
CreateContainer with a cpuset adjustment as the plugin does. The stub runs as its own process (this
script re-run with --plugin-socket), as it would on a node. Only CreateContainer is timed; each container
is removed again, untimed, so every call meets the same runtime state.

The two series are interleaved in blocks of `--block` calls, in the order bare, plugged, plugged, bare,
bare, ... (the plugin attached for the plugged blocks), so that load from elsewhere on the machine and
any drift land on both alike. After a detach one untimed call lets
containerd notice the plugin is gone (it drops a closed plugin only at its next event, logging "closing
plugin ... ttrpc: closed"); after an attach one untimed call warms the plugin up.

Reported per flavour, in milliseconds: median, p90, min, max of both series and the differences of the
medians and p90s. Numbers only; nothing here asserts a time. Needs root (containerd, runc).

Usage: hack/bench-nri [--flavour 2|1.7 ...] [--calls N] [--block N] [--warmup N]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from types import FrameType
from typing import Final

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugin"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the test bed

from podlevel.nri import CreateResult, Handler, Stub, api
from testbed.containerd import FLAVOURS, Containerd
from testbed.cri import CRI, Resources
from testbed.wait import wait_until

PLUGIN_NAME, PLUGIN_INDEX = "podlevel-bench", "50"
READY_TIMEOUT_S: Final = 15.0
STOP_TIMEOUT_S: Final = 10.0
SLEEP: Final = ["/bin/sh", "-c", "sleep 3600"]
CONTAINER_RESOURCES: Final = Resources.kubelet("500m", "1", "64Mi")


class Pinner(Handler):
    """Pins every container to the highest usable CPU: the adjustment path the real plugin takes."""

    def __init__(self) -> None:
        adjust = api.ContainerAdjustment()
        adjust.linux.resources.cpu.cpus = str(max(os.sched_getaffinity(0)))
        self.result = CreateResult(adjust=adjust)
        self.calls = 0

    def create_container(self, pod: api.PodSandbox, container: api.Container) -> CreateResult:
        self.calls += 1
        return self.result


def serve_plugin(socket_path: str) -> int:
    """The plugin process: serve until SIGTERM, then print what it answered as one JSON line."""
    handler = Pinner()
    stub = Stub(handler, PLUGIN_NAME, PLUGIN_INDEX, socket_path)

    def stop(signum: int, frame: FrameType | None) -> None:
        stub.stop()

    signal.signal(signal.SIGTERM, stop)
    stub.run()
    print(json.dumps({"create_container": handler.calls, "synchronizations": stub.synchronizations}))
    return 0


class PluginProcess:
    """This script as the plugin process, attached to `ctrd` once containerd logs it connected."""

    def __init__(self, ctrd: Containerd) -> None:
        offset = ctrd.log_path.stat().st_size
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--plugin-socket", str(ctrd.nri_socket)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
        connected = re.compile(rf'plugin \\?"{PLUGIN_INDEX}-{PLUGIN_NAME}\\?" connected')

        def attached() -> bool:
            if self.process.poll() is not None:
                raise RuntimeError(f"plugin process exited {self.process.returncode} before registering")
            with ctrd.log_path.open("rb") as log:
                log.seek(offset)
                return connected.search(log.read().decode(errors="replace")) is not None

        wait_until(attached, READY_TIMEOUT_S, "containerd logs the bench plugin connected")

    def stop(self) -> dict[str, int]:
        """SIGTERM; the plugin's own count of what it answered."""
        self.process.terminate()
        out, _ = self.process.communicate(timeout=STOP_TIMEOUT_S)
        if self.process.returncode != 0:
            raise RuntimeError(f"plugin process exited {self.process.returncode}")
        stats: dict[str, int] = json.loads(out)
        return stats


def _create_round_trips(cri: CRI, pod: str, calls: int, label: str) -> list[float]:
    """Seconds per CreateContainer; each container is removed again outside the timing."""
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        container = cri.create_container(pod, f"{label}-{uuid.uuid4().hex[:8]}", command=SLEEP,
                                         resources=CONTAINER_RESOURCES)
        samples.append(time.perf_counter() - started)
        cri.remove_container(container)
    return samples


def _summary(samples: list[float]) -> dict[str, float]:
    ms = [s * 1000 for s in samples]
    return {"p50": round(statistics.median(ms), 3), "p90": round(statistics.quantiles(ms, n=10)[8], 3),
            "min": round(min(ms), 3), "max": round(max(ms), 3)}


def bench_flavour(flavour: str, calls: int, block: int, warmup: int) -> dict[str, object]:
    base = Path(tempfile.mkdtemp(prefix=f"nri-bench-{flavour}-", dir="/tmp"))
    bare: list[float] = []
    plugged: list[float] = []
    answered = expected = 0
    with Containerd(flavour, base) as ctrd, ctrd.cri() as cri:
        uid = str(uuid.uuid4())
        pod = cri.run_pod("bench", uid=uid, cgroup_parent=ctrd.pod_cgroup_parent(uid),
                          resources=Resources.kubelet("2", "2", "512Mi"))
        _create_round_trips(cri, pod, warmup, "warmup")
        for round_ in range((calls + block - 1) // block):
            size = min(block, calls - len(plugged))
            if round_ % 2 == 0:
                bare += _create_round_trips(cri, pod, size, "bare")
            plugin = PluginProcess(ctrd)
            try:
                _create_round_trips(cri, pod, 1, "attach")
                plugged += _create_round_trips(cri, pod, size, "plugged")
            finally:
                stats = plugin.stop()
            if stats["synchronizations"] != 1:
                raise RuntimeError(f"the plugin reconnected during a block: {stats}")
            answered += stats["create_container"]
            expected += size + 1
            _create_round_trips(cri, pod, 1, "detach")
            if round_ % 2 == 1:
                bare += _create_round_trips(cri, pod, size, "bare")
        version = ctrd.versions.get("containerd", "unknown")
    # Only after a clean stop (which raises if anything is left mounted or running) is the tree removed.
    shutil.rmtree(base)
    if answered != expected:
        raise RuntimeError(f"the plugin answered {answered} of {expected} CreateContainer calls")
    without, with_plugin = _summary(bare), _summary(plugged)
    return {
        "containerd": version,
        "calls": calls,
        "block": block,
        "cri_create_container_ms": {"without_plugin": without, "with_plugin": with_plugin},
        "plugin_overhead_ms": {k: round(with_plugin[k] - without[k], 3) for k in ("p50", "p90")},
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--flavour", action="append", choices=sorted(FLAVOURS),
                        help="containerd flavour (repeatable; default: all)")
    parser.add_argument("--calls", type=int, default=60, help="timed CreateContainer calls per series")
    parser.add_argument("--block", type=int, default=10, help="calls per block of one series")
    parser.add_argument("--warmup", type=int, default=5, help="untimed calls before the first block")
    parser.add_argument("--plugin-socket", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.plugin_socket:
        return serve_plugin(args.plugin_socket)
    if args.calls < 10 or args.block < 1:
        parser.error(f"--calls must be at least 10 (for a p90) and --block at least 1, got {args.calls}, "
                     f"{args.block}")
    if os.geteuid() != 0:
        parser.error("the test bed runs containerd and runc: run as root")
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    flavours = args.flavour or list(FLAVOURS)
    numbers = {"flavours": {f: bench_flavour(f, args.calls, args.block, args.warmup) for f in flavours}}
    print(json.dumps(numbers, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
