"""A cgroup set beside what it should hold, for the operator commands: every field that differs is a `Drift`
row naming the file, what was expected and what was found, by the one rule of `cgroups.compare` (which the
agent's drift repair uses too)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass

from podlevel.cgroups import Cgroup, CgroupError, Wanted, compare, cpu_max_text, limit_of
from podlevel.engine.cfs import UNLIMITED_QUOTA
from podlevel.engine.cpuset import CPUSet
from podlevel.engine.errors import InputError


@dataclass(frozen=True)
class Expected:
    """What a cgroup should hold; None: not set by the plugin (not compared)."""

    cpus: str | None
    mems: str | None
    quota: str | None
    """`max` (no limit) or microseconds."""


@dataclass(frozen=True)
class Found:
    cpus: str | None = None
    """`.effective`, as the kernel enforces it."""
    mems: str | None = None
    quota: str | None = None
    error: str | None = None
    drifted: tuple[str, ...] = ()
    """The fields (`cpus`, `mems`, `quota`) that are not what they should be."""


@dataclass(frozen=True)
class Drift:
    file: str
    expected: str
    found: str
    between: str


def expected_quota(quota_us: int | None) -> str | None:
    """The plugin's quota (-1 = no limit, None = left alone) as the cgroup files spell it."""
    return None if quota_us is None else cpu_max_text(limit_of(quota_us))


def read_cgroup(cgroup: Cgroup, expected: Expected, between: str) -> tuple[Found, list[Drift]]:
    """What the cgroup holds, and every field that is not what it should be (`cgroups.compare`'s rule)."""
    try:
        found, drifts = compare(cgroup, _wanted(expected))
    except (CgroupError, OSError, InputError, ValueError) as err:
        where = str(cgroup.cpuset_dir)
        return Found(error=str(err)), [Drift(where, expected_text(expected), f"unreadable: {err}", between)]
    assert found.effective is not None  # read for a report
    shown = Found(str(found.effective.cpus), str(found.effective.mems), cpu_max_text(found.quota_us), None,
                  tuple(d.field for d in drifts))
    return shown, [Drift(str(d.file), d.expected, d.found, between) for d in drifts]


def _wanted(expected: Expected) -> Wanted:
    quota = expected.quota
    quota_us = None if quota is None else UNLIMITED_QUOTA if quota == cpu_max_text(None) else int(quota)
    return Wanted(None if expected.cpus is None else CPUSet.parse(expected.cpus),
                  None if expected.mems is None else CPUSet.parse(expected.mems), quota_us)


def expected_text(expected: Expected) -> str:
    return " ".join(f"{k}={v}" for k, v in asdict(expected).items() if v is not None) or "readable"


def drift_lines(drifts: Iterable[Drift]) -> Iterator[str]:
    for drift in drifts:
        yield f"drift ({drift.between}): {drift.file}: expected {drift.expected}, found {drift.found}"
