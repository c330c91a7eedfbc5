"""The kubelet's `validateState` for a memory manager state: the engine's tests check that every state the
memory policy builds or restores is one a kubelet would load."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from podlevel.engine.errors import InputError
from podlevel.engine.memory_policy import MemoryState, NUMANodeState, StaticMemoryPolicy, charge, table_of

MEMORY_STATE_RULE: Final = "memory manager state"


def check_memory_state(policy: StaticMemoryPolicy, state: MemoryState) -> None:
    """The kubelet's `validateState` for a restored state: recharging every recorded block on the
    initial machine must give the recorded machine (same totals, reservations, assignments and groups,
    and the same free and reserved bytes over each group). Raises InputError naming the difference."""
    if state.machine.keys() != policy.initial_state().machine.keys():
        raise InputError(
            MEMORY_STATE_RULE,
            f"the state has NUMA nodes {sorted(state.machine)}, the machine {list(policy.node_ids)}",
        )
    expected = dict(policy.initial_state().machine)
    for pod_uid, containers in state.entries.items():
        pod_blocks = state.pod_entries.get(pod_uid)
        charged = [pod_blocks] if pod_blocks is not None else list(containers.values())
        for blocks in charged:
            for block in blocks:
                unknown = [n for n in block.numa_affinity if n not in expected]
                if unknown or any(block.type not in expected[n].memory_map for n in block.numa_affinity):
                    raise InputError(
                        MEMORY_STATE_RULE,
                        f"pod {pod_uid}: a {block.type} block on NUMA nodes {list(block.numa_affinity)} "
                        "uses a node or resource the machine does not have",
                    )
                charge(expected, block.numa_affinity, block.type, block.size)
    for n in policy.node_ids:
        _compare_node(n, state.machine, expected)



def _compare_node(n: int, actual: Mapping[int, NUMANodeState], expected: Mapping[int, NUMANodeState]) -> None:
    have, want = actual[n], expected[n]
    if have.assignments != want.assignments or sorted(have.cells) != sorted(want.cells):
        raise InputError(
            MEMORY_STATE_RULE,
            f"NUMA node {n}: {have.assignments} assignments over nodes {sorted(have.cells)}, the recorded "
            f"blocks give {want.assignments} over {sorted(want.cells)}",
        )
    if have.memory_map.keys() != want.memory_map.keys():
        raise InputError(
            MEMORY_STATE_RULE,
            f"NUMA node {n}: resources {sorted(have.memory_map)}, the machine has {sorted(want.memory_map)}",
        )
    for name, table in have.memory_map.items():
        target = want.memory_map[name]
        for quantity in ("total", "system_reserved", "allocatable"):
            recorded, machine = getattr(table, quantity), getattr(target, quantity)
            if recorded != machine:
                raise InputError(
                    MEMORY_STATE_RULE,
                    f"NUMA node {n} {name}: {quantity} is {recorded}, the machine and reservation give "
                    f"{machine} (memory or --reserved-memory changed: drain the node and start over)",
                )
        group = have.cells
        for quantity in ("free", "reserved"):
            recorded = sum(getattr(table_of(actual[g], name), quantity) for g in group)
            recharged = sum(getattr(table_of(expected[g], name), quantity) for g in group)
            if recorded != recharged:
                raise InputError(
                    MEMORY_STATE_RULE,
                    f"NUMA nodes {list(group)} {name}: {quantity} is {recorded}, the recorded blocks give "
                    f"{recharged}",
                )
