"""The kubelet's CPU-to-CFS conversions (values from its own `MilliCPUToShares`/`MilliCPUToQuota` tests)."""

from __future__ import annotations

import pytest

from podlevel.engine.cfs import milli_cpu_to_quota, milli_cpu_to_shares


@pytest.mark.parametrize(
    ("millis", "shares"),
    [(0, 2), (1, 2), (100, 102), (500, 512), (1000, 1024), (2000, 2048), (10**9, 262144)],
)
def test_shares(millis: int, shares: int) -> None:
    assert milli_cpu_to_shares(millis) == shares


@pytest.mark.parametrize(
    ("millis", "period", "quota"),
    [(0, 100_000, 0), (5, 100_000, 1000), (9, 100_000, 1000), (10, 100_000, 1000), (200, 100_000, 20_000),
     (500, 100_000, 50_000), (1000, 100_000, 100_000), (1500, 100_000, 150_000), (1000, 50_000, 50_000)],
)
def test_quota(millis: int, period: int, quota: int) -> None:
    assert milli_cpu_to_quota(millis, period) == quota
