"""The kubelet's CPU-to-CFS conversions (`MilliCPUToShares`, `MilliCPUToQuota`) and their constants.

One place for them: the engine's quotas for pod shared pools, the agent's check of a pod-shape annotation
against what the kubelet handed the runtime, and the test bed's kubelet-like CRI driver must agree exactly.
"""

from __future__ import annotations

from typing import Final

CFS_PERIOD_US: Final = 100_000
"""The CFS period the kubelet writes for every container (`cpu.cfs_period_us` default)."""
MIN_CFS_QUOTA_US: Final = 1_000
"""The smallest quota the kernel accepts, which the kubelet also clamps to."""
UNLIMITED_QUOTA: Final = -1
"""No CFS limit: -1 in cgroup v1's `cpu.cfs_quota_us`, `max` in cgroup v2's `cpu.max`. Containers on
exclusive CPUs get it."""
MIN_SHARES: Final = 2
MAX_SHARES: Final = 262_144
SHARES_PER_CPU: Final = 1024


def milli_cpu_to_shares(millis: int) -> int:
    """`cpu.shares` for a CPU request; no request still gets the minimum."""
    return min(MAX_SHARES, max(MIN_SHARES, millis * SHARES_PER_CPU // 1000))


def milli_cpu_to_quota(millis: int, period: int = CFS_PERIOD_US) -> int:
    """CFS quota in microseconds for a CPU limit over `period`; 0 (no limit) for no limit."""
    return max(MIN_CFS_QUOTA_US, millis * period // 1000) if millis else 0


def quota_text(quota_us: int | None) -> str:
    """A container's or pod's CFS quota as logs and views spell it: `off` (no limit), `untouched` (None: the
    plugin leaves it alone), else microseconds."""
    return "untouched" if quota_us is None else "off" if quota_us == UNLIMITED_QUOTA else str(quota_us)
