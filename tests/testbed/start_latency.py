"""Pod start latency a user sees under a real kubelet, with and without the plugin (`hack/kubelet-compare
--latency N`): from a static pod's manifest landing in the kubelet's manifest directory to the moment its
last container started (the runtime's own `started_at`, so no polling interval adds to it).

Three ways to run the node, in blocks of `BLOCK` pods, interleaved until each has N pods (the machine is
shared and noisy, so each way meets the same moments): the kubelet's own managers on (the reference), the
managers off with no plugin (what the plugin adds to), and the managers off with the plugin. The pod is the
demo's fast-path (a 2-CPU bubble: an exclusive container and one in the pod shared pool); each is deleted
before the next is written, so every start meets the same free node.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any, Final

import yaml

from testbed.containerd import Containerd
from testbed.node_record import live_sandboxes, manifest_name, newest_containers
from testbed.real_kubelet import NODE_NAME, RealKubelet, annotated, delete_pod, start_plugin
from testbed.scenario import SCENARIOS, static_pod
from testbed.wait import wait_until

POD: Final = SCENARIOS / "02-empty-shared-pool" / "fast-path.yaml"
BLOCK: Final = 5
START_TIMEOUT_S: Final = 120.0
MODES: Final = ("kubelet managers", "managers off, no plugin", "managers off, plugin")


def _started_at(kubelet: RealKubelet, name: str, containers: int) -> int | None:
    """The start time (ns) of the pod's last container once all `containers` run, else None."""
    with kubelet.ctrd.cri() as cri:
        sandbox = next((s for s in live_sandboxes(cri) if manifest_name(s, NODE_NAME) == name), None)
        if sandbox is None:
            return None
        started = [cri.container_status(c.id) for c in newest_containers(cri, sandbox).values()]
    if len(started) < containers or any(c.state != "CONTAINER_RUNNING" for c in started):
        return None
    return max(c.started_at for c in started)


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def measure(ctrd: Containerd, kubelet_binary: Path, base: Path, pods: int,
            settings: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Median and p90 start latency (ms) per mode, `pods` each; `settings` has each mode's kubelet
    settings (and `plugin` the plugin's)."""
    name, text = static_pod(POD.read_text(), str(POD))
    containers = len(yaml.safe_load(text)["spec"]["containers"])
    samples: dict[str, list[float]] = {mode: [] for mode in MODES}
    block = 0
    while any(len(s) < pods for s in samples.values()):
        for mode in MODES:
            where = base / f"block{block}-{MODES.index(mode)}"
            where.mkdir(parents=True, exist_ok=True)
            plugin = start_plugin(ctrd, where, settings["plugin"]) if mode == MODES[2] else None
            kubelet = RealKubelet(kubelet_binary, ctrd, where / "kubelet",
                                  settings["reference"] if mode == MODES[0] else settings["managers off"])
            try:
                kubelet.start()
                for i in range(min(BLOCK, pods - len(samples[mode]))):
                    pod = f"{name}-{block}-{i}"
                    manifest = yaml.safe_load(text)
                    manifest["metadata"]["name"] = pod
                    body = yaml.safe_dump(manifest, sort_keys=False)
                    if plugin is not None:
                        body = annotated(body, where / f"{pod}.source.yaml")
                    landed = time.time_ns()
                    (kubelet.manifests / f"{pod}.yaml").write_text(body)
                    started = wait_until(partial(_started_at, kubelet, pod, containers), START_TIMEOUT_S,
                                         f"pod {pod} to start")
                    samples[mode].append((started - landed) / 1e6)
                    delete_pod(kubelet, pod)
            finally:
                kubelet.stop()
                kubelet.clear()
                if plugin is not None:
                    plugin.stop()
        block += 1
    return {mode: {"median_ms": round(statistics.median(s), 1), "p90_ms": round(_percentile(s, 0.9), 1),
                   "pods": len(s)} for mode, s in samples.items()}
