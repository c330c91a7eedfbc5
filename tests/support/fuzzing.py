"""How long the fuzzers run: a few seconds' worth of cases under `make test`, as many as `hack/fuzz` asks
for through `PODLEVEL_FUZZ_EXAMPLES` (per test and per round; it runs rounds until its time is up)."""

from __future__ import annotations

import os
from typing import Final

from hypothesis import HealthCheck, settings

FUZZ_EXAMPLES_ENV: Final = "PODLEVEL_FUZZ_EXAMPLES"


def fuzz_settings(examples: int) -> settings:
    """`examples` cases per test unless the environment asks for another number."""
    return settings(
        deadline=None,
        max_examples=int(os.environ.get(FUZZ_EXAMPLES_ENV, examples)),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
