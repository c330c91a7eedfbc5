"""The NRI parts: the same calls to nri-podlevel and to the no-op Go plugin, interleaved by block, through a
churn at a steady number of live containers, and Synchronize into freshly launched plugins."""

from __future__ import annotations

import collections
import contextlib
import json
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Final

from google.protobuf.message import Message

from benchmark.cgroup_tree import CgroupTree
from benchmark.messages import REPLY_TYPES, Call, container_message, pod_start, pod_stop, sandbox_message
from benchmark.node import SYNC_CONTAINERS, bench_engine, mix_shapes, pod_level
from benchmark.plugin_process import plugin_command
from benchmark.runtime_peer import LaunchedPlugin, PluginFailed, go_event_names, launched_plugin
from benchmark.stats import (
    FIRST,
    LATER,
    Trip,
    block_order,
    comparison,
    moving_answers,
    percentile,
    ratio,
    summary_us,
)
from podlevel.agent.nri_messages import linux_cpu, runtime_resources, sandbox_of
from podlevel.agent.placement import Placement
from podlevel.agent.plugin import PodLevelPlugin
from podlevel.agent.records import Settings
from podlevel.engine.cpuset import CPUSet
from podlevel.engine.pod import Pod
from podlevel.nri import api
from podlevel.nri.handler import subscribed_events
from podlevel.nri.runtime import describe_mask

SYNC_SIZES: Final = (400, SYNC_CONTAINERS, 5000)
"""The nodes Synchronize is measured on with pod cgroups on: its time per container must not grow."""
SETTLE_S: Final = 0.2
"""After a large Synchronize nri-podlevel hands the freed heap back once its answer is written: VmRSS is read
this long after the answer."""
CGROUP_BASE: Final = "/dev/shm"
"""Where the cgroup tree is made: a tmpfs, as cgroupfs is memory."""


def node_tree(root: Path, spec: str) -> CgroupTree:
    topology = bench_engine(spec).topology
    return CgroupTree(root, str(topology.all_cpus), str(CPUSet(topology.numa_node_ids)))


@contextlib.contextmanager
def ours_and_go(go_binary: str, spec: str,
                cgroup_root: str) -> Iterator[tuple[LaunchedPlugin, LaunchedPlugin]]:
    """nri-podlevel (on a fresh state dir, writing the pod cgroups under `cgroup_root`) and the no-op Go
    plugin, launched one after the other; the Go plugin subscribes to what nri-podlevel answered Configure
    with. Both handshakes are done on an empty node, so each is then ready for events."""
    with tempfile.TemporaryDirectory(prefix="bench-state-") as state_dir, launched_plugin(
        plugin_command(state_dir, spec, cgroup_root)
    ) as ours:
        ours.handshake([], [])
        with launched_plugin([go_binary, "-noop", go_event_names(ours.events)]) as go:
            go.handshake([], [])
            if go.events != ours.events:
                raise PluginFailed(f"the Go plugin subscribed to {describe_mask(go.events)}, nri-podlevel to "
                                   f"{describe_mask(ours.events)}")
            yield ours, go


def _batches(items: Iterable[Pod], size: int) -> Iterator[list[Pod]]:
    batch: list[Pod] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _send_block(
    plugins: Sequence[LaunchedPlugin], block: int, calls: Sequence[Call], churn: bool, tree: CgroupTree
) -> list[Trip]:
    """Send `calls` to each plugin in turn, the first one alternating by block; the bytes are the same
    for both (same calls on connections in the same state). nri-podlevel's answers are applied to `tree`
    as the runtime applies them, between its calls."""
    encoded = [[plugin.encode(call.method, call.message) for call in calls] for plugin in plugins]
    if encoded[0] != encoded[1]:
        raise PluginFailed("the two plugins' requests differ: the connections went out of step")
    elapsed: list[list[int]] = [[], []]
    replies: list[Message] = []
    for index in block_order(block):
        for call, (stream_id, data) in zip(calls, encoded[index], strict=True):
            payload, ns = plugins[index].exchange(call.method, stream_id, data)
            elapsed[index].append(ns)
            if index == 0:
                reply = REPLY_TYPES[call.method].FromString(payload)
                tree.answered(call.method, call.message, reply)
                replies.append(reply)
    return [
        Trip(call.pod, call.label, churn, call.last, ours_ns, go_ns, _updates(reply))
        for call, ours_ns, go_ns, reply in zip(calls, elapsed[0], elapsed[1], replies, strict=True)
    ]


def _updates(reply: Message) -> int:
    answers = (api.CreateContainerResponse, api.StopContainerResponse)
    return len(reply.update) if isinstance(reply, answers) else 0


def nri_create_numbers(cycles: int, block: int, go_binary: str, spec: str, live: int,
                       failing: int = 0) -> dict[str, object]:
    """Fill to `mix_shapes(live)` on the node `spec`, Burstable pods first so that every later bubble and
    exclusive container moves all of them (the answers carrying the most updates), then churn `cycles` times:
    stop and remove the oldest pod of the documentation's pod-level shape, start a new one. Every call goes to
    both plugins, `block` pods at a time, in alternating order; steady-state numbers come from the churn.
    Each pod's cgroup is made before its block is sent, but for the first `failing` pods of the fill (every
    pod carries a shape, so each is admitted and has a pod cgroup to write), whose writes then fail, and are
    retried, for the whole run."""
    fill = mix_shapes(live)[::-1]
    pods = (shape(f"pod-{serial}") for serial, shape in enumerate(fill))
    churned: collections.deque[Pod] = collections.deque()
    trips: list[Trip] = []
    left_out = failing

    def cgroups_for(batch: Iterable[Pod]) -> None:
        nonlocal left_out
        made = []
        for pod in batch:
            if left_out and pod.uid.startswith("pod-"):  # the fill's Burstable pods, which stay all along
                left_out -= 1
                continue
            made.append(sandbox_message(pod))
        tree.pods(made)

    with tempfile.TemporaryDirectory(prefix="bench-cgroup-", dir=CGROUP_BASE) as cgroup_root, \
            ours_and_go(go_binary, spec, cgroup_root) as plugins:
        tree = node_tree(Path(cgroup_root), spec)
        ours, go = plugins
        mask = ours.events
        for number, batch in enumerate(_batches(pods, block)):
            cgroups_for(batch)
            trips += _send_block(plugins, number, [c for pod in batch for c in pod_start(mask, pod)], False,
                                 tree)
            churned.extend(pod for pod in batch if pod.resources is not None)
        cpu_before = {"nri": ours.cpu_ns(), "go_noop": go.cpu_ns()}
        for number in range(cycles // block):
            calls: list[Call] = []
            started = []
            for serial in range(number * block, (number + 1) * block):
                calls += pod_stop(mask, churned.popleft())
                churned.append(pod_level(f"churn-{serial}"))
                started.append(churned[-1])
                calls += pod_start(mask, churned[-1])
            cgroups_for(started)
            trips += _send_block(plugins, number, calls, True, tree)
        cpu_per_pod = {
            who: (plugin.cpu_ns() - cpu_before[who]) / (cycles // block * block) / 1000
            for who, plugin in (("nri", ours), ("go_noop", go))
        }
        rss = {"nri": ours.status_kib("VmRSS"), "go_noop": go.status_kib("VmRSS")}
        peak = go.status_kib("VmHWM")
        startup = {"nri": ours.registered_ns, "go_noop": go.registered_ns}
        report = json.loads(ours.finish())
        go.finish()
    ours_creates = [t.ours_ns for t in trips if t.churn and t.label in (FIRST, LATER)]
    moving = [t.ours_ns for t in moving_answers(trips)]
    handler_ns = report["create_ns"]
    compared_numbers = comparison(trips)
    return {
        **compared_numbers,
        **{f"{who}_cpu_us_per_pod": round(us) for who, us in cpu_per_pod.items()},
        "cpu_per_pod_ratio": ratio(cpu_per_pod["nri"], cpu_per_pod["go_noop"]),
        **{f"{who}_rss_mb_steady": round(kib / 1024, 1) for who, kib in rss.items()},
        "rss_mb_steady_ratio": ratio(rss["nri"], rss["go_noop"]),
        "go_noop_rss_mb_peak": round(peak / 1024, 1),
        **{f"{who}_startup_to_registered_ms": round(ns / 1e6, 1) for who, ns in startup.items()},
        "startup_to_registered_ratio": ratio(startup["nri"], startup["go_noop"]),
        "nri_topology": spec,
        "nri_live_pods": len(fill),
        "nri_live_containers": sum(1 for t in trips if not t.churn and t.label in (FIRST, LATER)),
        "nri_pods_with_failing_cgroups": failing - left_out,
        "nri_create_containers_timed": len(ours_creates),
        **summary_us("nri_create_container", ours_creates),
        **summary_us("nri_create_handler", handler_ns[-len(ours_creates):]),
        "nri_create_moving_others": len(moving),
        "nri_create_moving_others_updates_mean": compared_numbers["moving_others_updates_mean"],
        **(summary_us("nri_create_moving_others", moving) if moving else {}),
        "nri_plugin_rss_steady_kib": rss["nri"],
        "nri_plugin_maxrss_churn_kib": report["maxrss_kib"],
    }


def sync_node(spec: str, size: int = SYNC_CONTAINERS) -> tuple[list[api.PodSandbox], list[api.Container],
                                                                dict[str, Settings]]:
    """`mix_shapes(size)` on the node `spec`, and where a plugin that created them put each container."""
    pods = [shape(f"sync-{i}") for i, shape in enumerate(mix_shapes(size))]
    sandboxes = [sandbox_message(pod) for pod in pods]
    placement = Placement(bench_engine(spec))
    listed = []
    for pod, sandbox in zip(pods, sandboxes, strict=True):
        for container in pod.all_containers:
            listed.append(container_message(pod, sandbox, container))
            placement.create(sandbox_of(sandbox), listed[-1].id, container.name,
                             runtime_resources(listed[-1].linux.resources))
    placement.take_pending_updates()
    return sandboxes, listed, dict(placement.applied)


def _synchronized(command: Sequence[str], sandboxes: Sequence[api.PodSandbox],
                  listed: Sequence[api.Container], tree: CgroupTree) -> tuple[int, int, int, bytes]:
    """Launch a plugin into a node of `listed` containers: the Synchronize round trip, updates answered,
    VmRSS once it settled, and what the plugin printed. Its answer is applied to `tree`."""
    with launched_plugin(command) as plugin:
        answer, elapsed = plugin.handshake(sandboxes, listed)
        tree.updated(answer.update)
        time.sleep(SETTLE_S)
        rss_kib = plugin.status_kib("VmRSS")
        return elapsed, len(answer.update), rss_kib, plugin.finish()


def in_place_listing(containers: Sequence[api.Container],
                     placed: Mapping[str, Settings]) -> list[api.Container]:
    """The containers as the runtime lists them after a restart: each where the plugin had put it."""
    listed = []
    for container in containers:
        copy = api.Container()
        copy.CopyFrom(container)
        copy.linux.resources.cpu.MergeFrom(linux_cpu(placed[container.id]))
        listed.append(copy)
    return listed


def nri_synchronize_numbers(repeats: int, go_binary: str, spec: str) -> dict[str, object]:
    """Synchronize into freshly launched plugins, `repeats` times each, the order alternating; medians
    (nearest rank). On SYNC_CONTAINERS containers: nri-podlevel with every container already where it
    belongs (a restart), with pod cgroups on (`in_place_cgroups`) and off (`in_place`), and with no cpuset set
    anywhere (`unpinned`), and the Go plugin with the first listing. On the other SYNC_SIZES, the restart
    with pod cgroups on against the Go plugin."""
    events = go_event_names(subscribed_events(PodLevelPlugin(Placement(bench_engine(spec)))))
    numbers: dict[str, object] = {"nri_synchronize_repeats": repeats}
    for size in SYNC_SIZES:
        sandboxes, containers, placed = sync_node(spec, size)
        in_place = in_place_listing(containers, placed)
        elapsed: dict[str, list[int]] = collections.defaultdict(list)
        handler_ns: dict[str, list[int]] = collections.defaultdict(list)
        updates: dict[str, int] = {}
        rss: dict[str, int] = {}
        runs = [("in_place_cgroups", in_place), ("go_noop", in_place)]
        if size == SYNC_CONTAINERS:
            runs += [("in_place", in_place), ("unpinned", containers)]
        for repeat in range(repeats):
            for label, listed in runs if repeat % 2 == 0 else reversed(runs):
                with tempfile.TemporaryDirectory(prefix="bench-state-") as state_dir, \
                        tempfile.TemporaryDirectory(prefix="bench-cgroup-", dir=CGROUP_BASE) as cgroup_root:
                    tree = node_tree(Path(cgroup_root), spec)
                    tree.pods(sandboxes)
                    tree.containers(listed)
                    cgroups = cgroup_root if label.endswith("cgroups") else None
                    command = ([go_binary, "-noop", events] if label == "go_noop" else
                               plugin_command(state_dir, spec, cgroups))
                    ns, updates[label], rss[label], out = _synchronized(command, sandboxes, listed, tree)
                elapsed[label].append(ns)
                if label != "go_noop":
                    handler_ns[label] += json.loads(out)["synchronize_ns"]
        ms = {label: percentile(values, 0.5) / 1000 for label, values in elapsed.items()}
        numbers.update({
            f"nri_synchronize_{size}_cgroups_ms": round(ms["in_place_cgroups"], 2),
            f"nri_synchronize_{size}_cgroups_us_per_container": round(ms["in_place_cgroups"] * 1e3 / size, 1),
            f"go_noop_synchronize_{size}_ms": round(ms["go_noop"], 2),
            f"synchronize_{size}_cgroups_ratio": ratio(ms["in_place_cgroups"], ms["go_noop"]),
            f"nri_synchronize_{size}_pods": len(sandboxes),
            f"nri_plugin_rss_after_synchronize_{size}_kib": rss["in_place_cgroups"],
        })
        if size != SYNC_CONTAINERS:
            continue
        numbers.update({
            "nri_synchronize_2000_ms": round(ms["in_place"], 2),
            "go_noop_synchronize_2000_ms": round(ms["go_noop"], 2),
            "synchronize_2000_ratio": ratio(ms["in_place"], ms["go_noop"]),
            "synchronize_2000_unpinned_ratio": ratio(ms["unpinned"], ms["go_noop"]),
            "nri_synchronize_containers": len(containers),
            "nri_synchronize_pods": len(sandboxes),
            "nri_plugin_rss_after_synchronize_kib": rss["in_place_cgroups"],
        })
        for label, listed in (("in_place", in_place), ("in_place_cgroups", in_place),
                              ("unpinned", containers)):
            numbers.update({
                f"nri_synchronize_{label}_ms": round(ms[label], 2),
                f"nri_synchronize_{label}_handler_ms": round(percentile(handler_ns[label], 0.5) / 1000, 2),
                f"nri_synchronize_{label}_updates": updates[label],
                f"nri_synchronize_{label}_request_kib": round(
                    api.SynchronizeRequest(pods=sandboxes, containers=listed).ByteSize() / 1024
                ),
            })
    return numbers
