"""The engine's command-line flags, shared by every command that builds an engine (`simulate`, `run`), so the
same setting has the same name and default everywhere.

Defaults, chosen so the Kubernetes documentation's example pods (`deploy/examples/`) run on a described node
with no other flag:
- scope `pod`, topology policy `single-numa-node`, CPU policy `static`, memory policy `Static`;
- reserved CPUs: the first physical core (CPU 0 and its SMT siblings), the usual `reservedSystemCPUs`
  choice; the static policy needs at least one reserved CPU, as the kubelet's does;
- `--reserved-memory 0:memory=100Mi`: the smallest reservation the kubelet's Static policy accepts with its
  default hard eviction threshold (`memory.available<100Mi`), all on NUMA node 0.
Option values use the kubelet's keys and `strconv.ParseBool` spellings; the engine's option classes
parse them.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Final

from podlevel.engine.cpu_policy import CPUManagerOptions
from podlevel.engine.cpuset import CPUSet
from podlevel.engine.errors import InputError
from podlevel.engine.manager import EngineConfig
from podlevel.engine.quantity import bytes_of
from podlevel.engine.topology import Topology
from podlevel.engine.topology_manager import Scope, TopologyManagerOptions, TopologyPolicyName

DEFAULT_RESERVED_MEMORY: Final = "0:memory=100Mi"


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("resource managers (the kubelet's settings)")
    group.add_argument(
        "--scope",
        choices=[s.value for s in Scope],
        default=Scope.POD.value,
        help="topology manager scope (default %(default)s)",
    )
    group.add_argument(
        "--policy",
        choices=[p.value for p in TopologyPolicyName],
        default=TopologyPolicyName.SINGLE_NUMA_NODE.value,
        help="topology manager policy (default %(default)s)",
    )
    group.add_argument(
        "--cpu-policy",
        choices=["static", "none"],
        default="static",
        help="CPU manager policy (default %(default)s)",
    )
    group.add_argument(
        "--memory-policy",
        choices=["Static", "None"],
        default="Static",
        help="memory manager policy (default %(default)s)",
    )
    group.add_argument(
        "--cpu-options",
        metavar="KEY=VALUE[,KEY=VALUE...]",
        default="",
        help="static CPU policy options, e.g. full-pcpus-only=true",
    )
    group.add_argument(
        "--topology-options",
        metavar="KEY=VALUE[,...]",
        default="",
        help="topology manager options, e.g. prefer-closest-numa-nodes=true",
    )
    group.add_argument(
        "--reserved-cpus",
        metavar="LIST",
        help="reservedSystemCPUs in Linux list syntax (default: CPU 0 and its SMT siblings)",
    )
    group.add_argument(
        "--reserved-memory",
        metavar="NODE:RESOURCE=QUANTITY[,...]",
        action="append",
        help=f"per NUMA node reservation, repeatable (default {DEFAULT_RESERVED_MEMORY})",
    )


def engine_config(args: argparse.Namespace, topology: Topology) -> EngineConfig:
    """The EngineConfig the parsed flags describe. Raises InputError naming the bad flag."""
    policy = TopologyPolicyName(args.policy)
    reserved_cpus = default_reserved_cpus(topology)
    if args.reserved_cpus is not None:
        try:
            reserved_cpus = CPUSet.parse(args.reserved_cpus)
        except InputError as err:
            raise InputError("--reserved-cpus", f"{err.rule}: {err.message}") from None
    return EngineConfig(
        scope=Scope(args.scope),
        topology_policy=policy,
        topology_options=TopologyManagerOptions.parse(
            parse_key_values(args.topology_options, "--topology-options")
        ),
        cpu_options=CPUManagerOptions.parse(
            parse_key_values(args.cpu_options, "--cpu-options"), topology, policy
        ),
        reserved_cpus=reserved_cpus,
        reserved_memory=parse_reserved_memory(args.reserved_memory or [DEFAULT_RESERVED_MEMORY], topology),
        cpu_policy=args.cpu_policy,
        memory_policy=args.memory_policy,
    )


def default_reserved_cpus(topology: Topology) -> CPUSet:
    """The first physical core: CPU 0 (the lowest CPU id) and its SMT siblings."""
    return topology.core_siblings(CPUSet([topology.cpus[0].cpu]))


def parse_key_values(text: str, flag: str) -> Mapping[str, str]:
    """`a=1,b=true` -> {"a": "1", "b": "true"}; "" -> {}."""
    values: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InputError(flag, f"{item!r} is not KEY=VALUE")
        if key.strip() in values:
            raise InputError(flag, f"{key.strip()} is given twice")
        values[key.strip()] = value.strip()
    return MappingProxyType(values)


def parse_reserved_memory(items: Sequence[str], topology: Topology) -> Mapping[int, Mapping[str, int]]:
    """The kubelet's `--reserved-memory` syntax: `0:memory=1Gi,hugepages-2Mi=0`, one item per NUMA node."""
    reserved: dict[int, dict[str, int]] = {}
    for item in items:
        node_text, sep, rest = item.partition(":")
        try:
            node = int(node_text)
        except ValueError:
            node = -1
        if not sep or node not in topology.numa_by_id:
            raise InputError(
                "--reserved-memory",
                f"{item!r} must start with a NUMA node id of this machine ({topology.numa_node_ids}) and ':'",
            )
        if node in reserved:
            raise InputError("--reserved-memory", f"NUMA node {node} is given twice")
        quantities = parse_key_values(rest, "--reserved-memory")
        try:
            reserved[node] = {name: bytes_of(quantity) for name, quantity in quantities.items()}
        except InputError as err:
            raise InputError("--reserved-memory", f"{item!r}: {err.message}") from None
    return MappingProxyType({node: MappingProxyType(values) for node, values in reserved.items()})
