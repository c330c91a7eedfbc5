"""`nri-podlevel simulate`: admit Pod manifests, in order, on a described node with the plugin's own engine
and print the decisions — tables, or with `--json` one JSON object that scripts rely on:

  {"topology": {"cpus": "0-15", "numa_nodes": {"0": "0-3,8-11", ...}},
   "live_node": null | {"address": "127.0.0.1:9808", "generation": 12, "pods": ["default/fast-path", ...]},
   "pods": [{"name": ..., "namespace": ..., "admitted": true|false,
             "error": null | {"type": "TopologyAffinityError|EmptyPodSharedPoolError|...", "message": ...},
             "bubble": {"cpus": "2-5", "mems": "0"} | null,
             "containers": [{"name": ..., "kind": "init|sidecar|app",
                             "assignment": "pod_exclusive|pod_shared|node_exclusive|node_shared",
                             "cpus": "2-3", "mems": "0", "cpu_quota_us": -1 | N, "cpu_period_us": N}]}],
   "node_shared_pool": "0-1,6-15"}

CPU and node sets are Linux list strings (`0-3,8`); a refused pod has no bubble and reserves nothing.

Workloads count as the pods their controllers run at once, each named `<workload>-<i>` from 0: `replicas`
copies of a Deployment's, ReplicaSet's or StatefulSet's pod template, `parallelism` of a Job's or a
CronJob's, one of a DaemonSet's; `kind: List` items and multi-document files are read in order.

`--node` starts from the live node instead of an empty one: the running plugin (`--address`) gives its engine
settings, its allocations (as its checkpoints hold them) and the pods it admitted, so the answer is "would
this pod fit on this node now, and where?". The machine is read from `--topology` (default `sysfs=/sys`,
this node) and must be the plugin's; the engine flags are the plugin's and cannot be given as well. Nothing
is changed on the node.

Decisions are printed as they stand after the last pod: shared pools are what every admitted pod leaves,
exactly what `run` would hand the runtime at that moment. Exit status: 0 when every pod was admitted, 1 when
any was refused, 2 on bad input (flags, topology, manifests); nothing is printed to stdout on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, cast, get_args

from podlevel.cli.endpoint import BadInput, Unreachable, add_source_arguments, fetch
from podlevel.cli.engine_flags import add_engine_arguments, engine_config
from podlevel.cli.inputs import read_text, source_name
from podlevel.cli.layout import columns
from podlevel.engine.cfs import quota_text
from podlevel.engine.cpu_policy import CPUManagerOptions
from podlevel.engine.cpuset import CPUSet
from podlevel.engine.errors import AdmissionError, InputError
from podlevel.engine.manager import (
    CPUPolicyName,
    Engine,
    EngineConfig,
    MemoryPolicyName,
    NodeState,
    PodDecision,
)
from podlevel.engine.pod import Pod
from podlevel.engine.quantity import format_bytes
from podlevel.engine.topology import Topology, from_spec
from podlevel.engine.topology_manager import Scope, TopologyManagerOptions, TopologyPolicyName
from podlevel.podspec.manifest import from_annotation
from podlevel.podspec.workloads import load_pods
from podlevel.report.schema import EngineDocument, NodeDocument
from podlevel.report.views import decision_json, error_json, nodes_text, topology_json
from podlevel.state.engine_state import node_state
from podlevel.state.formats import CPUCheckpoint, MemoryCheckpoint, decode
from podlevel.sysfs import read_topology

SYSFS_PREFIX = "sysfs="


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "simulate",
        help="admit Pod manifests on a described node and print the decisions",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--topology",
        metavar="SPEC|sysfs=DIR",
        help="sockets=S,nodes-per-socket=N,cores-per-node=C,threads-per-core=T[,memory-per-node=Q] "
        "or sysfs=DIR for a sysfs tree (required without --node; with it, default sysfs=/sys)",
    )
    parser.add_argument("--node", action="store_true",
                        help="start from the live node's state, settings and pods (asked at --address)")
    add_source_arguments(parser, local=False)
    add_engine_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("pods", nargs="+", metavar="FILE",
                        help="Pod, workload or List manifests, YAML or JSON ('-' reads stdin)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        if args.node:
            engine, live = live_node(args)
        elif args.topology is None:
            raise InputError("--topology", "describe the node, or start from the live one with --node")
        else:
            topology = load_topology(args.topology)
            engine, live = Engine(topology, engine_config(args, topology)), None
        pods = read_pods(args.pods)
        result = simulate(engine, pods, live)
    except (InputError, OSError, BadInput, Unreachable) as err:
        print(f"nri-podlevel simulate: {err}", file=sys.stderr)
        return 2
    sys.stdout.write(render_json(result) if args.json else render_table(result))
    return 0 if all(outcome.error is None for outcome in result.outcomes) else 1


@dataclass(frozen=True, slots=True)
class LiveNode:
    address: str
    generation: int
    state: NodeState


def live_node(args: argparse.Namespace) -> tuple[Engine, LiveNode]:
    """The plugin's engine (its settings on this machine) and its state, from `/debug/node`."""
    defaults = _engine_parser().parse_args([])
    given = [k for k, v in vars(defaults).items() if getattr(args, k) != v]
    if given:
        flags = ", ".join("--" + k.replace("_", "-") for k in given)
        raise InputError("--node", f"the engine settings are the node's; {flags} cannot be given as well")
    status, fetched = fetch(args.address, "/debug/node")
    document = cast(NodeDocument, fetched)
    if status != 200:
        raise Unreachable(f"{args.address}/debug/node answered {status}")
    topology = load_topology(args.topology or SYSFS_PREFIX + "/sys")
    if topology_json(topology) != document["topology"]:
        plugin_node = document["topology"]
        raise InputError("--topology", f"{topology.describe()} is not the plugin's node {plugin_node}")
    engine = Engine(topology, engine_config_of(document["engine"], topology))
    pods = {
        pod["uid"]: from_annotation(
            pod["shape"], name=pod["name"], namespace=pod["namespace"], uid=pod["uid"]
        )
        for pod in document["pods"]
        if pod["shape"] is not None
    }
    cpu = decode(document["checkpoint"]["cpu"], "cpu").content
    memory = decode(document["checkpoint"]["memory"], "memory").content
    assert isinstance(cpu, CPUCheckpoint) and isinstance(memory, MemoryCheckpoint)
    return engine, LiveNode(args.address, document["generation"], node_state(cpu, memory, pods))


def _engine_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False)
    add_engine_arguments(parser)
    return parser


def engine_config_of(settings: EngineDocument, topology: Topology) -> EngineConfig:
    """The plugin's engine settings as `/debug/node` reports them, on `topology` (already found to be the
    plugin's); the options are checked as `run` checks them."""
    cpu_policy, memory_policy = settings["cpu_policy"], settings["memory_policy"]
    try:
        policy = TopologyPolicyName(settings["topology_policy"])
        scope = Scope(settings["scope"])
    except ValueError as err:
        raise InputError("--node", f"the plugin reports {err}, which this version does not know") from None
    if cpu_policy not in get_args(CPUPolicyName) or memory_policy not in get_args(MemoryPolicyName):
        raise InputError("--node", f"the plugin reports CPU policy {cpu_policy!r} and memory policy "
                         f"{memory_policy!r}, which this version does not know")
    return EngineConfig(
        scope=scope,
        topology_policy=policy,
        topology_options=TopologyManagerOptions.parse(settings["topology_options"]),
        cpu_options=CPUManagerOptions.parse(settings["cpu_options"], topology, policy),
        reserved_cpus=CPUSet.parse(settings["reserved_cpus"]),
        reserved_memory=MappingProxyType({int(node): MappingProxyType(dict(amounts))
                                          for node, amounts in settings["reserved_memory"].items()}),
        cpu_policy=cast(CPUPolicyName, cpu_policy),
        memory_policy=cast(MemoryPolicyName, memory_policy),
    )


def load_topology(spec: str) -> Topology:
    if spec.startswith(SYSFS_PREFIX):
        return read_topology(spec.removeprefix(SYSFS_PREFIX))
    return from_spec(spec)


def read_inputs(paths: Sequence[str]) -> list[tuple[str, str, str]]:
    """(path, name for messages, text) of each argument; "-" is standard input."""
    return [(path, source_name(path), read_text(path)) for path in paths]


def read_pods(paths: Sequence[str]) -> list[Pod]:
    pods: list[Pod] = []
    where: dict[str, str] = {}
    for path, source, text in read_inputs(paths):
        for pod in load_pods(text, source):
            if pod.uid in where:
                raise InputError(
                    "unique pods",
                    f"{path}: pod {pod.key} (uid {pod.uid}) is also in {where[pod.uid]}",
                )
            where[pod.uid] = path
            pods.append(pod)
    return pods


@dataclass(frozen=True, slots=True)
class Outcome:
    pod: Pod
    error: AdmissionError | None


@dataclass(frozen=True, slots=True)
class Simulation:
    engine: Engine
    state: NodeState
    outcomes: tuple[Outcome, ...]
    live: LiveNode | None = None

    def decision(self, outcome: Outcome) -> PodDecision | None:
        return None if outcome.error is not None else self.engine.decision(self.state, outcome.pod.uid)


def simulate(engine: Engine, pods: Sequence[Pod], live: LiveNode | None = None) -> Simulation:
    """Admit `pods` in order on an empty node, or on the live node's state."""
    state = engine.initial_state() if live is None else live.state
    for pod in pods:
        if pod.uid in state.pods:
            where = f"pod {pod.key} (uid {pod.uid})"
            raise InputError("unique pods", f"{where} runs on the node already")
    outcomes: list[Outcome] = []
    for pod in pods:
        try:
            state, _ = engine.admit(state, pod)
        except AdmissionError as err:
            outcomes.append(Outcome(pod, err))
        else:
            outcomes.append(Outcome(pod, None))
    return Simulation(engine, state, tuple(outcomes), live)


# -- JSON (contract) -------------------------------------------------------------------------------------


def to_json(result: Simulation) -> dict[str, object]:
    live = result.live
    return {
        "topology": topology_json(result.engine.topology),
        "live_node": None if live is None else {
            "address": live.address, "generation": live.generation, "pods": _live_pods(live),
        },
        "pods": [_pod_json(outcome, result.decision(outcome)) for outcome in result.outcomes],
        "node_shared_pool": str(result.engine.node_shared_pool(result.state)),
    }


def render_json(result: Simulation) -> str:
    return json.dumps(to_json(result), indent=2) + "\n"


def _pod_json(outcome: Outcome, decision: PodDecision | None) -> dict[str, object]:
    error = outcome.error
    return {
        "name": outcome.pod.name,
        "namespace": outcome.pod.namespace,
        "admitted": error is None,
        "error": error_json(error),
        **(decision_json(decision) if decision is not None else {"bubble": None, "containers": []}),
    }


# -- tables ----------------------------------------------------------------------------------------------


def _live_pods(live: LiveNode) -> list[str]:
    return [pod.key for pod in live.state.pods.values()]


def render_table(result: Simulation) -> str:
    lines = [f"node: {result.engine.topology.describe()}"]
    if result.live is not None:
        running = ", ".join(_live_pods(result.live)) or "none"
        lines.append(f"starting from the live node at {result.live.address} (generation "
                     f"{result.live.generation}); pods admitted there: {running}")
    lines += ["", "PODS"]
    for outcome in result.outcomes:
        lines.extend(_pod_lines(outcome, result.decision(outcome)))
    lines += ["", "NUMA NODES"]
    lines.extend(_numa_lines(result))
    lines += ["", f"node shared pool: {result.engine.node_shared_pool(result.state) or '-'}"]
    return "\n".join(lines) + "\n"


def _pod_lines(outcome: Outcome, decision: PodDecision | None) -> list[str]:
    title = outcome.pod.key
    if outcome.error is not None:
        return [f"  {title}  REFUSED  {outcome.error.type}: {outcome.error.message}"]
    assert decision is not None
    bubble = ""
    if decision.bubble_cpus is not None or decision.bubble_mems is not None:
        cpus = str(decision.bubble_cpus) if decision.bubble_cpus is not None else "-"
        mems = nodes_text(decision.bubble_mems) if decision.bubble_mems is not None else "-"
        bubble = f"  bubble cpus={cpus} mems={mems}"
    rows = [["CONTAINER", "KIND", "ASSIGNMENT", "CPUS", "MEMS", "CFS QUOTA"]]
    for c in decision.containers:
        quota = quota_text(c.cpu_quota_us)
        rows.append([c.name, c.kind.value, c.assignment.value, str(c.cpus) or "-", nodes_text(c.mems), quota])
    return [f"  {title}  admitted{bubble}", *columns(rows, "    ")]


def _numa_lines(result: Simulation) -> list[str]:
    engine, state = result.engine, result.state
    holders = _holders(result)
    lines: list[str] = []
    for numa in engine.free_per_numa(state):
        node_cpus = engine.topology.cpus_by_numa[numa.node]
        free = [f"cpu={len(numa.cpus)}", *(f"{name}={format_bytes(n)}" for name, n in numa.memory.items())]
        lines.append(f"  node {numa.node}: cpus {node_cpus}  free {' '.join(free)}")
        rows = [[str(cpus & node_cpus), label] for label, cpus in holders if not cpus.is_disjoint(node_cpus)]
        lines.extend(columns([["CPUS", "HELD BY"], *rows], "    "))
    return lines


def _holders(result: Simulation) -> list[tuple[str, CPUSet]]:
    """Who holds which CPUs: reserved, each exclusive slice, each pod shared pool, the node shared pool."""
    engine, state = result.engine, result.state
    holders: list[tuple[str, CPUSet]] = []
    if engine.reserved_cpus:
        also_shared = engine.reserved_cpus.is_subset(engine.node_shared_pool(state))
        label = "reserved (node shared pool too)" if also_shared else "reserved"
        holders.append((label, engine.reserved_cpus))
    for pod in state.pods.values():
        decision = engine.decision(state, pod.uid)
        title = pod.key
        slices = CPUSet()
        for c in decision.containers:
            if c.assignment.exclusive:
                holders.append((f"{title} {c.name} ({c.assignment.value})", c.cpus))
                slices |= c.cpus
        if decision.bubble_cpus is not None and decision.bubble_cpus - slices:
            holders.append((f"{title} pod shared pool", decision.bubble_cpus - slices))
    shared = engine.node_shared_pool(state) - engine.reserved_cpus
    if shared:
        holders.append(("node shared pool", shared))
    return holders
