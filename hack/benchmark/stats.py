"""The comparison's pure parts: round trips on both plugins, nearest-rank percentiles, the A/B interleaving
and the keys of the comparison (see the package's usage for what each key means)."""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Sequence
from typing import Final, NamedTuple

from podlevel.nri.runtime import Event

FIRST: Final = "first"
LATER: Final = "later"
"""What a CreateContainer round trip is counted as: the pod's first container, or a later one."""


class Trip(NamedTuple):
    """One call's round trip on both plugins, over identical bytes."""

    pod: str
    label: str
    churn: bool
    """Sent during the churn, the steady state (else while filling the node)."""
    last: bool
    ours_ns: int
    go_ns: int
    updates: int
    """Updates of other containers in nri-podlevel's answer."""


def percentile(values: Sequence[int], fraction: float) -> float:
    """The nearest-rank percentile of nanosecond `values`, in microseconds."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] / 1000


PERCENTILES: Final = (("p50", 0.50), ("p90", 0.90), ("p99", 0.99))


def block_order(block: int) -> tuple[int, int]:
    """Which plugin takes block `block` first (0: nri-podlevel, 1: Go): alternating, so that drift and load
    from elsewhere land on both alike."""
    return (0, 1) if block % 2 == 0 else (1, 0)


def ratio(ours: float, go: float) -> float | None:
    return round(ours / go, 2) if go else None


def compared(what: str, ours_ns: Sequence[int], go_ns: Sequence[int]) -> dict[str, object]:
    """`nri_<what>_us_pNN`, `go_noop_<what>_us_pNN` and `<what>_ratio_pNN` (ours over Go), and the count."""
    numbers: dict[str, object] = {f"{what}_samples": len(ours_ns)}
    if not ours_ns or not go_ns:
        return numbers
    for name, fraction in PERCENTILES:
        ours, go = percentile(ours_ns, fraction), percentile(go_ns, fraction)
        numbers[f"nri_{what}_us_{name}"] = ours
        numbers[f"go_noop_{what}_us_{name}"] = go
        numbers[f"{what}_ratio_{name}"] = ratio(ours, go)
    return numbers


def lifecycles(trips: Iterable[Trip]) -> tuple[list[int], list[int]]:
    """Each plugin's total time over every pod whose whole lifecycle was sent during the churn."""
    ours: dict[str, int] = collections.defaultdict(int)
    go: dict[str, int] = collections.defaultdict(int)
    started_in_fill: set[str] = set()
    complete: list[str] = []
    for trip in trips:
        if not trip.churn:
            started_in_fill.add(trip.pod)
        ours[trip.pod] += trip.ours_ns
        go[trip.pod] += trip.go_ns
        if trip.last:
            complete.append(trip.pod)
    whole = [pod for pod in complete if pod not in started_in_fill]
    return [ours[pod] for pod in whole], [go[pod] for pod in whole]


def moving_answers(trips: Iterable[Trip]) -> list[Trip]:
    """The CreateContainer round trips whose nri-podlevel answer moved other containers."""
    return [t for t in trips if t.updates and t.label in (FIRST, LATER)]


def comparison(trips: Sequence[Trip]) -> dict[str, object]:
    """The A/B numbers of the CreateContainer round trips and pod lifecycles (see the module docstring)."""
    creates = [t for t in trips if t.churn and t.label in (FIRST, LATER)]
    moving = moving_answers(trips)
    sandboxes = [t for t in trips if t.churn and t.label == Event.RUN_POD_SANDBOX.name]
    ours_life, go_life = lifecycles(trips)
    return {
        **compared("roundtrip", [t.ours_ns for t in creates], [t.go_ns for t in creates]),
        **{key: value for label in (FIRST, LATER) for key, value in compared(
            f"{label}_container_roundtrip", [t.ours_ns for t in creates if t.label == label],
            [t.go_ns for t in creates if t.label == label]).items()},
        **compared("moving_others_roundtrip", [t.ours_ns for t in moving], [t.go_ns for t in moving]),
        "moving_others_updates_mean": round(sum(t.updates for t in moving) / len(moving), 1) if moving else 0,
        **compared("pod_lifecycle", ours_life, go_life),
        **compared("run_pod_sandbox_roundtrip", [t.ours_ns for t in sandboxes], [t.go_ns for t in sandboxes]),
    }


def summary_us(prefix: str, nanoseconds: Sequence[int]) -> dict[str, float]:
    return {
        f"{prefix}_p50_us": percentile(nanoseconds, 0.50),
        f"{prefix}_p99_us": percentile(nanoseconds, 0.99),
        f"{prefix}_max_us": max(nanoseconds) / 1000,
    }


SCALE_ROWS: Final = (
    ("RunPodSandbox", "run_pod_sandbox_roundtrip"),
    ("CreateContainer, first container", "first_container_roundtrip"),
    ("CreateContainer, later container", "later_container_roundtrip"),
    ("a pod's 9 events", "pod_lifecycle"),
)


def scale_table(churns: dict[int, dict[str, object]], synchronize: dict[str, object]) -> str:
    """The churn's figures at each node size beside the Go plugin's, and Synchronize of the same sizes, as a
    Markdown table: per event nri-podlevel's p50 (p99), the Go plugin's p50 and the p50 ratio; CPU per pod;
    RSS after the churn and after Synchronize. A size Synchronize was not run at shows `-`."""
    sizes = sorted(churns)

    def cells(render: Callable[[int], str]) -> str:
        return " | ".join(render(size) for size in sizes)

    def trip(key: str) -> Callable[[int], str]:
        def render(size: int) -> str:
            at = churns[size]
            return (f"{at[f'nri_{key}_us_p50']:,.0f} µs ({at[f'nri_{key}_us_p99']:,.0f}); "
                    f"Go {at[f'go_noop_{key}_us_p50']:,.0f}; {at[f'{key}_ratio_p50']}x")
        return render

    def synchronized(size: int) -> str:
        ms = synchronize.get(f"nri_synchronize_{size}_cgroups_ms")
        if ms is None:
            return "-"
        return (f"{ms} ms; Go {synchronize[f'go_noop_synchronize_{size}_ms']} ms; "
                f"{synchronize[f'synchronize_{size}_cgroups_ratio']}x")

    def rss(size: int) -> str:
        after_sync = synchronize.get(f"nri_plugin_rss_after_synchronize_{size}_kib")
        synced = f"{int(after_sync) / 1024:.1f}" if isinstance(after_sync, int) else "-"
        at = churns[size]
        return f"{at['nri_rss_mb_steady']} / {synced} MiB; Go {at['go_noop_rss_mb_steady']}"

    lines = [f"| live containers | {' | '.join(f'{size:,}' for size in sizes)} |",
             f"|---|{'---|' * len(sizes)}"]
    lines += [f"| {label} | {cells(trip(key))} |" for label, key in SCALE_ROWS]
    lines.append(f"| CPU per pod | {cells(lambda s: _cpu(churns[s]))} |")
    lines.append(f"| Synchronize of that many | {cells(synchronized)} |")
    lines.append(f"| RSS after the churn / after Synchronize | {cells(rss)} |")
    return "\n".join(lines) + "\n"


def _cpu(at: dict[str, object]) -> str:
    return f"{at['nri_cpu_us_per_pod']:,} µs; Go {at['go_noop_cpu_us_per_pod']:,}; {at['cpu_per_pod_ratio']}x"
