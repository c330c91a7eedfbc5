"""engine.restore: a pod taken back from its checkpoints, its recorded memory kept or placed by today's rules
with the rule that refused the record named."""

from __future__ import annotations

from dataclasses import replace

import pytest

from podlevel.engine.manager import Engine, NodeState
from podlevel.engine.memory_policy import MemoryBlock, MemoryState
from podlevel.engine.restore import Checkpointed, Restored, restore
from podlevel.engine.topology_manager import Scope, TopologyPolicyName
from support.builders import GI, MI, app, guaranteed, new_engine, pod
from support.memory_state import check_memory_state


def engine(policy: TopologyPolicyName, **config: object) -> Engine:
    """The default engine on SMALL (first core reserved, as `simulate` does) under pod scope and `policy`."""
    return new_engine(scope=Scope.POD, topology_policy=policy, **config)


KEPT = pod("kept", app("c", guaranteed(2000, 128 * MI)))
NO_ALIGNMENT = TopologyPolicyName.NONE


def recorded_on_node_1() -> Checkpointed:
    """What the checkpoints hold for KEPT after a pod that filled node 0's memory (all but 64Mi), gone since,
    pushed its memory to node 1 under the topology policy none. Its CPUs are on node 0."""
    live = engine(policy=NO_ALIGNMENT)
    filler = pod("filler", app("c", guaranteed(1000, 16220 * MI)))
    state, _ = live.admit(live.initial_state(), filler)
    state, _ = live.admit(state, KEPT)
    state = live.remove_pod(state, filler.uid)
    return Checkpointed(state.cpu, state.memory)


def with_kept_blocks(recorded: Checkpointed, *blocks: MemoryBlock) -> Checkpointed:
    assert recorded.memory is not None
    return replace(recorded, memory=replace(recorded.memory, entries={KEPT.uid: {"c": blocks}}))


def restored_kept(node: Engine, recorded: Checkpointed, state: NodeState | None = None) -> Restored:
    """KEPT restored from `recorded`; the memory state passes the kubelet's check of a restored state."""
    restored = restore(node, state or node.initial_state(), KEPT, recorded)
    if node.memory_policy is not None:
        check_memory_state(node.memory_policy, restored.state.memory)
    return restored


def test_restore_takes_recorded_memory_back_where_todays_rules_would_not_put_it() -> None:
    recorded = recorded_on_node_1()
    assert recorded.memory is not None
    node = engine(policy=NO_ALIGNMENT)

    restored = restored_kept(node, recorded)

    assert restored.memory_moved is None
    assert restored.state.memory.entries[KEPT.uid] == recorded.memory.entries[KEPT.uid]
    assert [c.mems for c in restored.decision.containers] == [(1,)]
    assert restored.state.cpu.entries[KEPT.uid] == recorded.cpu.entries[KEPT.uid]
    without_memory = restored_kept(node, Checkpointed(recorded.cpu))
    assert [c.mems for c in without_memory.decision.containers] == [(0,)]
    assert without_memory.memory_moved is None


@pytest.mark.parametrize(
    ("config", "blocks", "reason"),
    [
        pytest.param(
            {}, (MemoryBlock((1,), "memory", 64 * MI),),
            "its container c was recorded with 64Mi memory pinned, today's rules give 128Mi memory",
            id="sizes",
        ),
        pytest.param(
            {}, (MemoryBlock((7,), "memory", 128 * MI),),
            "its recorded memory block is on NUMA node 7, where the machine has no memory",
            id="nodes",
        ),
        pytest.param(
            {"reserved_memory": {0: {"memory": 100 * MI}, 1: {"memory": 16 * GI - 64 * MI}}}, None,
            "not enough memory free on NUMA node 1 after reserved memory: 64Mi for its recorded 128Mi block",
            id="reserved memory",
        ),
        pytest.param(
            {"policy": TopologyPolicyName.SINGLE_NUMA_NODE}, None,
            "the topology alignment changed: the topology policy single-numa-node refuses its CPUs with its "
            "recorded memory (TopologyAffinityError)",
            id="alignment",
        ),
        pytest.param(
            {"memory_policy": "None"}, None,
            "memory is no longer managed (memory policy None); its recorded blocks are freed",
            id="memory policy None",
        ),
    ],
)
def test_restore_places_memory_by_todays_rules_and_names_the_rule_that_refused_the_record(
    config: dict[str, object], blocks: tuple[MemoryBlock, ...] | None, reason: str
) -> None:
    recorded = recorded_on_node_1()
    if blocks is not None:
        recorded = with_kept_blocks(recorded, *blocks)
    node = engine(**{"policy": NO_ALIGNMENT, **config})  # type: ignore[arg-type]

    restored = restored_kept(node, recorded)

    assert restored.memory_moved == reason
    admitted, _ = node.admit(node.initial_state(), KEPT, within=recorded.cpu.entries[KEPT.uid]["c"])
    assert restored.state.memory == admitted.memory
    assert restored.state.cpu.entries[KEPT.uid] == recorded.cpu.entries[KEPT.uid]


def test_restore_refuses_recorded_memory_that_would_mix_node_groups() -> None:
    """Another pod holds memory on node 0 alone: a recorded block over nodes 0 and 1 cannot join it."""
    node = engine(policy=NO_ALIGNMENT)
    state, _ = node.admit(node.initial_state(), pod("other", app("c", guaranteed(1000, 128 * MI))))
    recorded = with_kept_blocks(recorded_on_node_1(), MemoryBlock((0, 1), "memory", 128 * MI))

    restored = restored_kept(node, recorded, state)

    assert restored.memory_moved == (
        "its recorded memory on NUMA nodes [0, 1] would mix single-node and multi-node memory allocations on "
        "a node"
    )


def test_restore_says_so_when_memory_recorded_unpinned_is_pinned_now() -> None:
    """The checkpoint was written under the memory policy None: nothing to take back, the pin is a move."""
    recorded = replace(recorded_on_node_1(), memory=MemoryState(machine={}))
    restored = restored_kept(engine(policy=NO_ALIGNMENT), recorded)
    assert restored.memory_moved == "it had no recorded memory blocks; today's rules pin it to NUMA node 0"
