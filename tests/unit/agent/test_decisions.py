"""agent.decisions: the bounded log of admissions and refusals, and what Placement records in it."""

from __future__ import annotations

import pytest

from podlevel.agent.decisions import DecisionLog
from podlevel.agent.placement import Placement
from podlevel.agent.records import Sandbox
from podlevel.engine.errors import AdmissionError
from podlevel.podspec.manifest import SHAPE_ANNOTATION, to_annotation
from podlevel.podspec.runtime import sandbox_resources
from support.builders import fast_path, new_engine


def test_the_log_keeps_the_latest_per_pod_and_drops_the_oldest_pod_past_its_limit() -> None:
    engine = new_engine()
    state = engine.initial_state()
    log = DecisionLog(limit=2)
    for name in ("a", "b", "a", "c"):
        log.record(state, fast_path(name))
    assert len(log) == 2
    assert log.latest("default/b") is None, "b was the oldest once a was recorded again"
    recorded = log.latest("default/a")
    assert recorded is not None and recorded.state is state and recorded.within is None


def placed(pod_name: str, cpus: int, exclusive: int) -> Sandbox:
    pod = fast_path(pod_name, cpus, exclusive)
    return Sandbox(f"sb-{pod_name}", pod.uid, pod.name, "default", {SHAPE_ANNOTATION: to_annotation(pod)},
                   sandbox_resources(pod))


def test_placement_records_the_state_each_decision_was_made_on_without_copying_it() -> None:
    placement = Placement(new_engine())
    empty = placement.state
    placement.create(placed("fast", 4, 2), "fast-app", "app")
    after_fast = placement.state
    with pytest.raises(AdmissionError):
        placement.create(placed("no-room", 2, 2), "no-room-app", "app")

    admitted = placement.decisions.latest("default/fast")
    refused = placement.decisions.latest("default/no-room")
    assert admitted is not None and admitted.state is empty and admitted.pod.name == "fast"
    assert refused is not None and refused.state is after_fast
    placement.create(placed("fast", 4, 2), "fast-sidecar", "log")
    assert placement.decisions.latest("default/fast") is admitted, "an admitted pod is not decided again"
