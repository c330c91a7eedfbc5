"""Drift, defined once: a cgroup's files beside what it should hold, field by field. `check` and `show` report
every drifted field; the agent's drift repair writes back those the cgroup's own files can fix.

Per cpuset field (`cpus`, `mems`): the configured file set to another value has drifted (someone wrote it);
an empty configured file (cgroup v2: the parent's) has drifted when the value in force (`.effective`) is
another; a configured file that holds the wanted value while `.effective` does not is clipped by a parent:
drifted, but not repairable here (the parent is another cgroup's business). The CFS quota is compared only
where the plugin sets it (`Wanted.quota_us` not None), -1 meaning no limit, as the engine spells it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from podlevel.cgroups.paths import Cgroup
from podlevel.cgroups.pod_cgroup import (
    Cpuset,
    cpu_max_file,
    cpu_max_text,
    cpuset_file_names,
    read_configured,
    read_cpu_max,
    read_effective,
)
from podlevel.engine.cfs import UNLIMITED_QUOTA
from podlevel.engine.cpuset import CPUSet


@dataclass(frozen=True, slots=True)
class Wanted:
    """What a cgroup should hold; a None field is not the plugin's to set, and is not compared."""

    cpus: CPUSet | None = None
    mems: CPUSet | None = None
    quota_us: int | None = None
    """-1: no limit; None: left alone."""


@dataclass(frozen=True, slots=True)
class Found:
    """What a cgroup's files hold."""

    configured: Cpuset
    effective: Cpuset | None
    """None: not read (the repair reads it only when a configured field is empty)."""
    quota_us: int | None
    """None: no limit."""

    @property
    def in_force(self) -> Cpuset:
        return self.effective if self.effective is not None else self.configured


@dataclass(frozen=True, slots=True)
class FieldDrift:
    """One field of a cgroup that is not what it should be."""

    field: str
    """`cpus`, `mems` or `quota`."""
    file: Path
    """The file that shows it: the configured one when it holds another value, else the one in force."""
    expected: str
    found: str
    repairable: bool
    """Writing the cgroup's own file puts it back (False: a parent clips what it configures)."""


def limit_of(quota_us: int) -> int | None:
    """A quota as the engine spells it (-1: no limit) as the cgroup files do (None: no limit)."""
    return None if quota_us == UNLIMITED_QUOTA else quota_us


def compare(
    cgroup: Cgroup, wanted: Wanted, *, report: bool = True
) -> tuple[Found, list[FieldDrift]]:
    """What the cgroup holds, and every field that is not `wanted`.

    `report` reads every file (for the operator commands). Without it `.effective` is read only when a
    configured field is empty, and the quota only when it is compared: clipping by a parent, which the repair
    cannot fix, may then go unseen. Raises CgroupError (or OSError) when a file cannot be read, InputError or
    ValueError when one cannot be parsed.
    """
    names = cpuset_file_names(cgroup.version)
    configured = read_configured(cgroup.cpuset_dir, cgroup.version)
    effective = None
    if report or not (configured.cpus and configured.mems):
        effective = read_effective(cgroup.cpuset_dir, cgroup.version)
    quota = read_cpu_max(cgroup)[0] if report or wanted.quota_us is not None else None
    drifts = []
    for name, want, have, in_force, file, effective_file in (
        ("cpus", wanted.cpus, configured.cpus, effective.cpus if effective else None, names.cpus,
         names.effective_cpus),
        ("mems", wanted.mems, configured.mems, effective.mems if effective else None, names.mems,
         names.effective_mems),
    ):
        if want is None:
            continue
        if have and have != want:
            drifts.append(FieldDrift(name, cgroup.cpuset_dir / file, str(want), str(have), True))
        elif in_force is not None and in_force != want:
            drifts.append(FieldDrift(name, cgroup.cpuset_dir / effective_file, str(want), str(in_force),
                                     repairable=not have))
    if wanted.quota_us is not None and quota != limit_of(wanted.quota_us):
        drifts.append(FieldDrift("quota", cpu_max_file(cgroup), cpu_max_text(limit_of(wanted.quota_us)),
                                 cpu_max_text(quota), True))
    return Found(configured, effective, quota), drifts
