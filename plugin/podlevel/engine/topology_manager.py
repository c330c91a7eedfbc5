"""Topology hints: a provider's statement of which NUMA nodes can satisfy a request.

A hint's affinity is a NUMA bitmask (bit n = node n) or None for "any node / no preference".
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TopologyHint:
    """One way to place a request: on the NUMA nodes in `affinity`, `preferred` if it is the narrowest way."""

    affinity: int | None
    preferred: bool
