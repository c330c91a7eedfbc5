"""Benchmarks: print one JSON object of numbers (README "Measurements"). Tests never assert times.

Engine part (`engine_*` keys): a synthetic large node (2 sockets x 4 NUMA nodes x 16 cores x 2 threads =
256 CPUs), the default engine settings (scope pod, single-numa-node, static CPU, Static memory), filled to
500 live pods of a fixed mix, then churned: each cycle releases the oldest pod and admits a new one of the
same shape, so the node stays at 500 live pods. Reported: admission and release latency percentiles, the
slowest admission, and cycles (one admission + one release) per second. Latencies are wall-clock; the
`_cpu_` numbers are the thread's CPU time for the same admissions, which a busy machine's scheduling does
not inflate.

NRI part: nri-podlevel side by side with a no-op Go plugin on the upstream NRI stub (tests/integration/
goplugin -noop, built from Debian's packages by hack/build-go-nri-plugin), subscribed to the same events.
Each runs in its own process, launched the way a runtime launches a plugin (one end of a unix socketpair as
NRI_PLUGIN_SOCKET), and this process plays the runtime on the other ends with the ttrpc codec: every
request goes to both plugins with identical bytes, a block of pods at a time, the plugin that goes first
alternating by block. nri-podlevel runs as `nri-podlevel run` does by default where it matters for speed:
it is built by `cli.run.build_agent`, drift repair included (`nri_plugin_setup` says how). Keys `nri_X`,
`go_noop_X` and `X_ratio` (nri-podlevel over Go) for:
- `roundtrip_us_pNN`: CreateContainer, the runtime's wall clock from request written to answer read (what
  the plugin adds to every container creation), at 500 live pods (560 containers) of the engine part's mix.
  The fill creates the Burstable pods first, then the CPU-holding ones; then `--nri-cycles` times the oldest
  pod of the documentation's pod-level shape (a sidecar and an app) is stopped and removed and a new one
  started. Round trips are from that churn, split into `first_container_roundtrip` (the pod's first
  CreateContainer: shape parsing and admission) and `later_container_roundtrip`.
- `moving_others_roundtrip`: the answers of nri-podlevel carrying updates of other containers (each CPU
  holder created after the 400 Burstable containers moves all of them) against the Go plugin's plain answer
  to the same requests.
- `pod_lifecycle_us_pNN`: each plugin's total over every event of one pod it is subscribed to, from its
  start to its removal, for the pods whose whole lifecycle fell in the churn.
- `run_pod_sandbox_roundtrip_us_pNN`: RunPodSandbox in the churn (where nri-podlevel admits the pod).
- `cpu_us_per_pod`: each plugin process's CPU time over the churn (every thread: nri-podlevel writes its
  checkpoints on threads of their own), divided by the pods replaced: the work a pod costs wherever it
  runs, which round trips do not show for work done between events.
- `synchronize_N_cgroups_ms` for N in 400, 2,000 and 5,000: Synchronize of N containers (the mix's 100
  CPU-holding pods, then Burstable pods) into a freshly launched plugin, every container already where it
  belongs (a restart), the pods' cgroups there to be written and the containers' to be read by the drift
  repair that follows the resync, as on a node; the median (nearest rank) of
  `--sync-repeats` launches, and `nri_synchronize_N_cgroups_us_per_container` to see whether it grows with
  the node. At 2,000 also `synchronize_2000_ms` without pod cgroups and with no cpuset set anywhere (every
  container updated: `nri_synchronize_unpinned_*`).
- `rss_mb_steady`: VmRSS after the churn; `startup_to_registered_ms`: from launch to the end of the
  handshake (RegisterPlugin, Configure, an empty Synchronize), when the runtime counts the plugin registered.
The older `nri_create_*` keys are nri-podlevel's churn round trips and its handler's own time,
`nri_synchronize_*` the Synchronize details and `nri_plugin_*` its memory in KiB.

Scale: `--live-containers N` runs the NRI churn at N live containers (the mix's 100 CPU-holding pods, then
Burstable pods; 2000 for the 2,000-container node), `--topology SPEC` puts every part on another node
(`sockets=4,nodes-per-socket=2,cores-per-node=32,threads-per-core=2,memory-per-node=64Gi` for 4 sockets x 2
NUMA nodes x 32 cores x 2 threads); `engine_topology`, `nri_topology`, `nri_live_pods` and
`nri_live_containers` tell the runs apart. The plugin's time per event should stay flat as N grows, but for
the updates it must send (`moving_others_updates_mean`).

Across node sizes: `--scale 400,2000,5000` runs the churn at each size (the JSON's `scale` holds each run's
churn keys by size) and prints to stderr a Markdown table of them beside Synchronize of the same sizes:
per event p50 (p99) with the Go plugin's p50 and the ratio, CPU per pod, and RSS.

Failing pod cgroups: `--pods-with-failing-cgroups N` leaves out the cgroups of the churn's first N pods
(they stay all along), so their pod cgroup writes fail and are retried with backoff; compare the churn's
figures with a run without (`nri_pods_with_failing_cgroups` says how many failed).

Usage: hack/bench [--quick] [--cycles N] [--nri-cycles N] [--block N] [--sync-repeats N] [--go-plugin PATH]
[--live-containers N | --scale N,N,...] [--topology SPEC] [--state-base DIR]
[--pods-with-failing-cgroups N] [--profile] [--profile-plugin DIR]   (--quick: the same keys with fewer
samples; --state-base: nri-podlevel's state dirs there, e.g. on a tmpfs, where the default is the temporary
dir on the local disk; --profile: a cProfile of the engine churn on stderr; --profile-plugin: a cProfile of
each nri-podlevel process, the churn's first)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from benchmark.engine_bench import engine_numbers
from benchmark.node import LIVE_CONTAINERS, TOPOLOGY
from benchmark.nri_runs import nri_create_numbers, nri_synchronize_numbers
from benchmark.plugin_process import (
    PLUGIN_CGROUP_ROOT_FLAG,
    PLUGIN_PROCESS_FLAG,
    PLUGIN_SETUP,
    PROFILE_PLUGIN_ENV,
    plugin_process,
)
from benchmark.runtime_peer import go_plugin
from benchmark.stats import scale_table

GO_SETUP = "tests/integration/goplugin -noop: the upstream NRI stub answering every event with no change"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true",
                        help="fewer cycles and repeats: the same keys in well under two minutes")
    parser.add_argument("--cycles", type=int, help="release+admit cycles at 500 live pods (5000; quick 1000)")
    parser.add_argument("--nri-cycles", type=int,
                        help="pod replacements through the NRI socket at 500 live pods (2000; quick 300)")
    parser.add_argument("--block", type=int, default=10, help="pods per block of one plugin (10)")
    parser.add_argument("--sync-repeats", type=int, help="Synchronize launches per plugin (3; quick 1)")
    parser.add_argument("--go-plugin", metavar="PATH", help="the Go plugin binary (default: build it)")
    parser.add_argument("--profile", action="store_true", help="cProfile the churn, report to stderr")
    parser.add_argument("--state-base", metavar="DIR",
                        help="nri-podlevel's state dirs in DIR, not the temporary dir (a tmpfs shows what "
                             "the disk adds)")
    parser.add_argument("--profile-plugin", metavar="DIR",
                        help="cProfile each nri-podlevel process into DIR/plugin-PID.prof (pstats)")
    parser.add_argument("--topology", metavar="SPEC", default=TOPOLOGY,
                        help="the node of every part, as `topology.from_spec` reads it (%(default)s)")
    parser.add_argument("--live-containers", metavar="N", type=int, default=LIVE_CONTAINERS,
                        help="containers live through the NRI churn: the mix's CPU holders, then Burstable "
                             "pods (%(default)s: the mix's 500 pods)")
    parser.add_argument("--scale", metavar="N,N,...", type=_sizes,
                        help="run the NRI churn at each of these live-container counts instead (e.g. "
                             "400,2000,5000): the JSON gets `scale` (size -> the churn's keys) and stderr a "
                             "table of them beside Synchronize of the same sizes")
    parser.add_argument("--pods-with-failing-cgroups", metavar="N", type=int, default=0,
                        help="leave out the cgroups of the NRI churn's first N pods, whose pod cgroup writes "
                             "then fail all along (compare with a run without)")
    parser.add_argument(PLUGIN_PROCESS_FLAG, metavar="STATE_DIR", help=argparse.SUPPRESS)
    parser.add_argument(PLUGIN_CGROUP_ROOT_FLAG, metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.plugin_process:
        return plugin_process(args.plugin_process, args.topology, args.plugin_cgroup_root)
    cycles = args.cycles or (1000 if args.quick else 5000)
    nri_cycles = args.nri_cycles or (300 if args.quick else 2000)
    sync_repeats = args.sync_repeats or (1 if args.quick else 3)
    if args.state_base:
        tempfile.tempdir = str(Path(args.state_base).resolve())
    if args.profile_plugin:
        profiles = Path(args.profile_plugin).resolve()
        profiles.mkdir(parents=True, exist_ok=True)
        os.environ[PROFILE_PLUGIN_ENV] = str(profiles)
    if args.block < 1 or nri_cycles < 2 * args.block:
        parser.error("--block must be at least 1 and --nri-cycles at least two blocks")
    go_binary = go_plugin(args.go_plugin)
    started = time.perf_counter()
    numbers: dict[str, object] = {"nri_plugin_setup": PLUGIN_SETUP, "go_noop_plugin": GO_SETUP}
    numbers.update(engine_numbers(cycles, args.profile, args.topology))
    if args.scale:
        churns = {size: nri_create_numbers(nri_cycles, args.block, go_binary, args.topology, size,
                                           args.pods_with_failing_cgroups) for size in args.scale}
        numbers["scale"] = {str(size): churn for size, churn in churns.items()}
    else:
        numbers.update(nri_create_numbers(nri_cycles, args.block, go_binary, args.topology,
                                          args.live_containers, args.pods_with_failing_cgroups))
    synchronize = nri_synchronize_numbers(sync_repeats, go_binary, args.topology)
    numbers.update(synchronize)
    if args.scale:
        print(scale_table(churns, synchronize), file=sys.stderr)
    numbers["bench_seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(numbers, indent=2))
    return 0


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of container counts: {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"container counts must be positive: {text!r}")
    return sizes


if __name__ == "__main__":
    sys.exit(main())
