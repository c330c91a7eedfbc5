"""Invariants of the node engine over random machines and random admit/remove/re-admit sequences."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from podlevel.engine.cpu_policy import CPUManagerOptions
from podlevel.engine.cpuset import CPUSet
from podlevel.engine.errors import AdmissionError
from podlevel.engine.manager import Engine, EngineConfig, NodeState
from podlevel.engine.pod import Container, ContainerKind, Pod, Resources
from podlevel.engine.topology import from_spec
from podlevel.engine.topology_manager import Scope, TopologyPolicyName
from support.builders import MI, RESERVED_MEMORY, burstable, guaranteed, pod
from support.engine_invariants import check_invariants

PROPERTY_SETTINGS = settings(
    deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


@st.composite
def container_resources(draw: st.DrawFn) -> Resources:
    shape = draw(st.sampled_from(["none", "none", "guaranteed", "guaranteed", "fractional", "burstable"]))
    memory = draw(st.integers(1, 8)) * 128 * MI
    if shape == "guaranteed":
        cpu = draw(st.integers(1, 3)) * 1000
        return guaranteed(cpu, memory)
    if shape == "fractional":
        return guaranteed(500, memory)
    if shape == "burstable":
        return burstable(250)
    return Resources()


@st.composite
def pods(draw: st.DrawFn, index: int) -> Pod:
    init_count = draw(st.integers(0, 2))
    init = tuple(
        Container(
            f"init-{i}",
            draw(st.sampled_from([ContainerKind.INIT, ContainerKind.SIDECAR])),
            draw(container_resources()),
        )
        for i in range(init_count)
    )
    apps = tuple(
        Container(f"app-{i}", resources=draw(container_resources())) for i in range(draw(st.integers(1, 3)))
    )
    shape = pod(f"pod-{index}", *init, *apps, uid=f"uid-{index}")
    if not draw(st.booleans()):
        return shape
    cpu = shape.aggregate_request("cpu") + draw(st.sampled_from([0, 0, 1, 2])) * 1000
    cpu = max(1000, -(-cpu // 1000) * 1000) if draw(st.booleans()) else max(cpu, 500)
    memory = shape.aggregate_request("memory") + draw(st.integers(1, 4)) * 128 * MI
    return dataclasses.replace(shape, resources=guaranteed(cpu, memory))


@st.composite
def engines(draw: st.DrawFn) -> Engine:
    sockets, nodes, cores, threads = (draw(st.integers(1, n)) for n in (2, 2, 4, 2))
    spec = (
        f"sockets={sockets},nodes-per-socket={nodes},cores-per-node={cores},threads-per-core={threads},"
        "memory-per-node=4Gi"
    )
    topology = from_spec(spec)
    policy = draw(st.sampled_from(list(TopologyPolicyName)))
    reserved = CPUSet(draw(st.sets(st.sampled_from(sorted(topology.all_cpus)), min_size=1, max_size=2)))
    options = {}
    if draw(st.booleans()):
        options["strict-cpu-reservation"] = "true"
    if threads > 1 and draw(st.booleans()):
        options["full-pcpus-only"] = "true"
    config = EngineConfig(
        scope=draw(st.sampled_from(list(Scope))),
        topology_policy=policy,
        cpu_options=CPUManagerOptions.parse(options, topology, policy.value),
        reserved_cpus=reserved,
        reserved_memory=RESERVED_MEMORY,
    )
    return Engine(topology, config)


operations = st.lists(
    st.tuples(
        st.sampled_from(["admit", "admit", "remove_container", "remove_pod"]),
        st.integers(0, 5),
        st.integers(0, 4),
    ),
    min_size=1,
    max_size=20,
)


def frozen(value: Any) -> Any:
    """A plain, deeply immutable copy of a state, so any in-place change to the original would show."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (
            type(value).__name__,
            tuple(frozen(getattr(value, f.name)) for f in dataclasses.fields(value)),
        )
    if isinstance(value, Mapping):
        return tuple(sorted((repr(k), frozen(v)) for k, v in value.items()))
    if isinstance(value, tuple | list | frozenset | set):
        items = [frozen(v) for v in value]
        return tuple(sorted(items, key=repr)) if isinstance(value, frozenset | set) else tuple(items)
    return value


@PROPERTY_SETTINGS
@given(engine=engines(), data=st.data())
def test_engine_invariants_over_random_sequences(engine: Engine, data: st.DataObject) -> None:
    pool = [data.draw(pods(i), label=f"pod {i}") for i in range(6)]
    start = engine.initial_state()
    state = start
    for op, index, container_index in data.draw(operations, label="operations"):
        target = pool[index]
        if op == "admit":
            before = frozen(state)
            already = target.uid in state.pods
            try:
                new_state, decision = engine.admit(state, target)
            except AdmissionError as err:
                assert frozen(state) == before and not already
                event(f"refused: {err.type}")
                continue
            event("admitted again" if already else "admitted")
            assert decision == engine.decision(new_state, target.uid)
            if already:
                assert new_state is state
            state = new_state
        elif op == "remove_container":
            names = [c.name for c in target.all_containers]
            state = engine.remove_container(state, target.uid, names[container_index % len(names)])
        else:
            state = engine.remove_pod(state, target.uid)
        check_invariants(engine, state)
    for uid in list(state.pods):
        state = engine.remove_pod(state, uid)
    assert not state.pods and not state.removed
    assert state.cpu.default == start.cpu.default
    assert state.memory.machine == start.memory.machine


@PROPERTY_SETTINGS
@given(engine=engines(), data=st.data())
def test_a_refused_pod_leaves_the_state_equal(engine: Engine, data: st.DataObject) -> None:
    state = engine.initial_state()
    for i in range(4):
        target = data.draw(pods(i), label=f"pod {i}")
        before = frozen(state)
        try:
            state, _ = engine.admit(state, target)
        except AdmissionError:
            assert frozen(state) == before
            assert target.uid not in state.pods


@PROPERTY_SETTINGS
@given(engine=engines(), data=st.data(), cpu_policy_none=st.booleans())
def test_confined_admission_takes_only_from_its_set(
    engine: Engine, data: st.DataObject, cpu_policy_none: bool
) -> None:
    """`admit(within=W)`: with W = every CPU it is a plain admission; otherwise every CPU it takes from the
    shared pool lies in W, and the node's invariants hold after it."""
    if cpu_policy_none:
        engine = Engine(engine.topology, dataclasses.replace(engine.config, cpu_policy="none"))
    state = engine.initial_state()
    cpus = sorted(engine.topology.all_cpus)
    for index in range(5):
        target = data.draw(pods(index))
        within = CPUSet(data.draw(st.sets(st.sampled_from(cpus))))
        try:
            plain: tuple[NodeState, Any] | None = engine.admit(state, target)
        except AdmissionError:
            plain = None
        try:
            all_cpus = engine.topology.all_cpus
            everywhere: tuple[NodeState, Any] | None = engine.admit(state, target, within=all_cpus)
        except AdmissionError:
            everywhere = None
        assert (plain is None) == (everywhere is None)
        if plain is not None and everywhere is not None:
            assert frozen(plain[0]) == frozen(everywhere[0])
        try:
            confined, _ = engine.admit(state, target, within=within)
        except AdmissionError:
            if plain is not None:
                state = plain[0]
        else:
            assert (state.cpu.default - confined.cpu.default).is_subset(within)
            state = confined
        check_invariants(engine, state)
