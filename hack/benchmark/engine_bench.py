"""The engine part (`engine_*` keys): the engine alone, filled to 500 live pods of the mix, then churned."""

from __future__ import annotations

import collections
import cProfile
import pstats
import sys
import time

from benchmark.node import LIVE_PODS, bench_engine, shapes
from benchmark.stats import percentile
from podlevel.engine.manager import NodeState
from podlevel.engine.pod import Pod


def engine_numbers(cycles: int, profile: bool, spec: str) -> dict[str, object]:
    engine = bench_engine(spec)
    state: NodeState = engine.initial_state()
    live: collections.deque[Pod] = collections.deque()
    pod_shapes = shapes()
    serial = 0

    def admit(current: NodeState) -> NodeState:
        nonlocal serial
        serial += 1
        pod = next(pod_shapes)(f"pod-{serial}")
        new, _ = engine.admit(current, pod)
        live.append(pod)
        return new

    fill_started = time.perf_counter()
    for _ in range(LIVE_PODS):
        state = admit(state)
    fill_seconds = time.perf_counter() - fill_started

    admissions: list[int] = []
    admissions_cpu: list[int] = []
    releases: list[int] = []
    profiler = cProfile.Profile() if profile else None
    if profiler is not None:
        profiler.enable()
    churn_started = time.perf_counter()
    for _ in range(cycles):
        oldest = live.popleft()
        t0 = time.perf_counter_ns()
        state = engine.remove_pod(state, oldest.uid)
        t1 = time.perf_counter_ns()
        c1 = time.thread_time_ns()
        state = admit(state)
        c2 = time.thread_time_ns()
        t2 = time.perf_counter_ns()
        releases.append(t1 - t0)
        admissions.append(t2 - t1)
        admissions_cpu.append(c2 - c1)
    churn_seconds = time.perf_counter() - churn_started
    if profiler is not None:
        profiler.disable()
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(30)
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(20)
    assert len(state.pods) == LIVE_PODS

    return {
        "engine_topology": spec,
        "engine_live_pods": LIVE_PODS,
        "engine_cycles": cycles,
        "engine_fill_admissions_per_second": round(LIVE_PODS / fill_seconds),
        "engine_cycles_per_second": round(cycles / churn_seconds),
        "engine_operations_per_second": round(2 * cycles / churn_seconds),
        "engine_admissions_per_second": round(len(admissions) / (sum(admissions) / 1e9)),
        "engine_admission_p50_us": percentile(admissions, 0.50),
        "engine_admission_p99_us": percentile(admissions, 0.99),
        "engine_admission_max_us": max(admissions) / 1000,
        "engine_admission_cpu_p99_us": percentile(admissions_cpu, 0.99),
        "engine_admission_cpu_max_us": max(admissions_cpu) / 1000,
        "engine_release_p50_us": percentile(releases, 0.50),
        "engine_release_p99_us": percentile(releases, 0.99),
        "engine_release_max_us": max(releases) / 1000,
    }
