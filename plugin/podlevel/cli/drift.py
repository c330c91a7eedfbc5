"""A cgroup set beside what it should hold: every field that differs is a `Drift` naming the file, what was
expected and what was found. For a cpuset the configured file is named when it differs (someone wrote it),
else the `.effective` one (a parent clips it). A CFS quota the plugin leaves alone is not compared."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass

from podlevel.cgroups import (
    Cgroup,
    CgroupError,
    cpu_max_file,
    cpu_max_text,
    cpuset_file_names,
    read_configured,
    read_cpu_max,
    read_effective,
)
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
    """The plugin's quota (-1 = no limit, None = left alone) as the cgroup files spell it, to compare."""
    return None if quota_us is None else cpu_max_text(None if quota_us < 0 else quota_us)


def read_cgroup(cgroup: Cgroup, expected: Expected, between: str) -> tuple[Found, list[Drift]]:
    """What the cgroup holds, and every field that is not what it should be."""
    names = cpuset_file_names(cgroup.version)
    try:
        configured = read_configured(cgroup.cpuset_dir, cgroup.version)
        effective = read_effective(cgroup.cpuset_dir, cgroup.version)
        quota, _ = read_cpu_max(cgroup)
    except (CgroupError, InputError, ValueError) as err:
        where = str(cgroup.cpuset_dir)
        return Found(error=str(err)), [Drift(where, expected_text(expected), f"unreadable: {err}", between)]
    found_quota = cpu_max_text(quota)
    drifts: dict[str, Drift] = {}
    for name, want, have, have_effective, file, effective_file in (
        ("cpus", expected.cpus, configured.cpus, effective.cpus, names.cpus, names.effective_cpus),
        ("mems", expected.mems, configured.mems, effective.mems, names.mems, names.effective_mems),
    ):
        if want is None:
            continue
        wanted = CPUSet.parse(want)
        if have and have != wanted:
            drifts[name] = Drift(str(cgroup.cpuset_dir / file), str(wanted), str(have), between)
        elif have_effective != wanted:
            drifts[name] = Drift(str(cgroup.cpuset_dir / effective_file), str(wanted), str(have_effective),
                                 between)
    if expected.quota is not None and found_quota != expected.quota:
        drifts["quota"] = Drift(str(cpu_max_file(cgroup)), expected.quota, found_quota, between)
    found = Found(str(effective.cpus), str(effective.mems), found_quota, None, tuple(drifts))
    return found, list(drifts.values())


def expected_text(expected: Expected) -> str:
    return " ".join(f"{k}={v}" for k, v in asdict(expected).items() if v is not None) or "readable"


def drift_lines(drifts: Iterable[Drift]) -> Iterator[str]:
    for drift in drifts:
        yield f"drift ({drift.between}): {drift.file}: expected {drift.expected}, found {drift.found}"
