"""nri-podlevel as the benchmark launches it: `nri-podlevel run`'s own agent (`cli.run.build_agent`, drift
repair included), on the synthetic node, with the handler's CreateContainer and Synchronize times recorded."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import resource
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from podlevel.agent.placement import Placement
from podlevel.agent.plugin import PodLevelPlugin
from podlevel.cli.log_output import configure_logging
from podlevel.cli.run import build_agent, resolve
from podlevel.engine.topology import from_spec
from podlevel.nri import CreateResult, Updates, api

PLUGIN_PROCESS_FLAG: Final = "--plugin-process"
PLUGIN_CGROUP_ROOT_FLAG: Final = "--plugin-cgroup-root"
PROFILE_PLUGIN_ENV: Final = "PODLEVEL_BENCH_PROFILE_DIR"
"""Set by --profile-plugin for the plugin processes, which inherit it."""
PLUGIN_SETUP: Final = (
    "`nri-podlevel run`'s own agent (`build_agent`) with its defaults where they matter for speed: "
    "checkpoints written (and synced) to a state dir in the temporary dir, on the local disk unless "
    "--state-base says otherwise, info logs as JSON lines to a file, metrics counted and the HTTP endpoints "
    "(probes, /metrics, views) listening on 127.0.0.1, the PodResources socket listening in the state dir "
    "(never asked, so gRPC is not loaded, as on a node without PodResources clients), drift repair reading "
    "every container's cgroup every 10 s and after each Synchronize; pod cgroups on: a tree of the kubelet's "
    "pod cgroups and the runtime's container cgroups as regular files on a tmpfs, kept as the kubelet and "
    "the runtime keep them (but for the `unpinned` and `in_place` Synchronize runs, which leave them out to "
    "show what they cost); the engine on the synthetic node above instead of sysfs; the process runs this "
    "package (its imports beside the plugin's: argparse, cProfile, statistics)"
)


class TimedPlugin(PodLevelPlugin):
    """The plugin with the wall-clock time of its CreateContainer and Synchronize handlers recorded."""

    def __init__(self, placement: Placement, **parts: Any) -> None:
        super().__init__(placement, **parts)
        self.create_ns: list[int] = []
        self.synchronize_ns: list[int] = []

    def create_container(self, pod: api.PodSandbox, container: api.Container) -> CreateResult:
        started = time.perf_counter_ns()
        try:
            return super().create_container(pod, container)
        finally:
            self.create_ns.append(time.perf_counter_ns() - started)

    def synchronize(self, pods: Sequence[api.PodSandbox], containers: Sequence[api.Container]) -> Updates:
        started = time.perf_counter_ns()
        try:
            return super().synchronize(pods, containers)
        finally:
            self.synchronize_ns.append(time.perf_counter_ns() - started)


def plugin_process(state_dir: str, spec: str, cgroup_root: str | None = None) -> int:
    """Serve the launch socket as `nri-podlevel run` does (see PLUGIN_SETUP) until the runtime closes it,
    then print the handler times as JSON. With `cgroup_root` the pod cgroups there are written and the
    containers' repaired."""
    configure_logging("info", "auto")
    flags = [f"--state-dir={state_dir}", "--metrics-address=127.0.0.1:0", "--debug-address=localhost:0",
             f"--podresources-socket={Path(state_dir, 'report', 'pod-resources.sock')}",
             f"--cgroup-root={cgroup_root or ''}"]
    agent = build_agent(resolve(flags, {}), launched=True, topology=from_spec(spec), plugin=TimedPlugin)
    handler = agent.handler
    assert isinstance(handler, TimedPlugin)
    agent.start()
    profile_dir = os.environ.get(PROFILE_PLUGIN_ENV)
    if profile_dir:
        import cProfile
    profiler = cProfile.Profile() if profile_dir else None
    gc.freeze()  # as `run` does once started
    try:
        with profiler or contextlib.nullcontext():
            agent.stub.run()
    finally:
        agent.stop()
    if profiler is not None:
        profiler.dump_stats(Path(str(profile_dir), f"plugin-{os.getpid()}.prof"))
    json.dump(
        {
            "create_ns": handler.create_ns,
            "synchronize_ns": handler.synchronize_ns,
            "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        },
        sys.stdout,
    )
    return 0


def plugin_command(state_dir: str, spec: str, cgroup_root: str | None = None) -> list[str]:
    """How the benchmark launches nri-podlevel (`plugin_process`) on the node `spec`, writing the pod
    cgroups under `cgroup_root` when given."""
    return [sys.executable, "-m", "benchmark", "--topology", spec, PLUGIN_PROCESS_FLAG, state_dir,
            *([PLUGIN_CGROUP_ROOT_FLAG, cgroup_root] if cgroup_root else [])]
