"""An immutable set of CPU ids, stored as an int bitmask, with the Linux list syntax (`0-3,8,10-11`).

The engine takes unions, differences and sizes of CPU sets on every admission; one Python int per set makes
those single machine-word-ish operations instead of per-element loops, which is what keeps an admission well
under a millisecond on a 128-CPU node.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Final

from podlevel.engine.errors import InputError
from podlevel.engine.limits import MAX_CPUS, quote

_ELEMENT: Final = re.compile(r"\s*([0-9]+)\s*(?:-\s*([0-9]+)\s*)?", re.ASCII)


class CPUSet:
    """A set of non-negative CPU ids. Equal sets compare and hash equal; iteration is ascending."""

    __slots__ = ("_mask",)

    def __init__(self, cpus: Iterable[int] = ()) -> None:
        mask = 0
        for cpu in cpus:
            if cpu < 0:
                raise InputError("cpuset", f"CPU id {cpu} is negative")
            mask |= 1 << cpu
        self._mask = mask

    @classmethod
    def from_mask(cls, mask: int) -> CPUSet:
        cpuset = cls.__new__(cls)
        cpuset._mask = mask
        return cpuset

    @classmethod
    def union_of(cls, sets: Iterable[CPUSet]) -> CPUSet:
        mask = 0
        for cpuset in sets:
            mask |= cpuset._mask
        return cls.from_mask(mask)

    @classmethod
    def parse(cls, text: str, bound: int = MAX_CPUS, what: str = "CPU") -> CPUSet:
        """Parse the Linux list format; "" is the empty set. Every id must be below `bound` (the machine's,
        or `limits.MAX_CPUS`), checked before any bitmask is built, so `0-4000000000` costs nothing.
        Raises InputError naming the bad element; `what` names the ids in messages ("NUMA node")."""
        mask = 0
        text = text.strip()
        if not text:
            return cls.from_mask(0)
        longest = bound * (len(str(bound)) + 1)
        if len(text) > longest:
            # Every id below `bound` listed once fits; a longer list costs time for nothing.
            raise InputError("cpuset", f"{quote(text)} is longer than {longest} characters, the list of "
                                       f"every {what} id below {bound}")
        for element in text.split(","):
            match = _ELEMENT.fullmatch(element)
            if match is None:
                raise InputError("cpuset", f"{quote(element)} in {quote(text)} is not a {what} id or range")
            lo_text, hi_text = match[1], match[2] or match[1]
            if max(len(lo_text), len(hi_text)) > 9 or max(int(lo_text), int(hi_text)) >= bound:
                raise InputError("cpuset", f"{quote(element)} in {quote(text)}: {what} ids are below {bound}")
            lo, hi = int(lo_text), int(hi_text)
            if hi < lo:
                raise InputError("cpuset", f"range {quote(element)} in {quote(text)} is not ascending")
            mask |= ((1 << (hi - lo + 1)) - 1) << lo
        return cls.from_mask(mask)

    @property
    def mask(self) -> int:
        return self._mask

    def __len__(self) -> int:
        return self._mask.bit_count()

    def __bool__(self) -> bool:
        return self._mask != 0

    def __iter__(self) -> Iterator[int]:
        mask = self._mask
        while mask:
            low = mask & -mask
            yield low.bit_length() - 1
            mask ^= low

    def __contains__(self, cpu: object) -> bool:
        return isinstance(cpu, int) and cpu >= 0 and bool(self._mask >> cpu & 1)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CPUSet) and other._mask == self._mask

    def __hash__(self) -> int:
        return hash(self._mask)

    def __or__(self, other: CPUSet) -> CPUSet:
        return CPUSet.from_mask(self._mask | other._mask)

    def __and__(self, other: CPUSet) -> CPUSet:
        return CPUSet.from_mask(self._mask & other._mask)

    def __sub__(self, other: CPUSet) -> CPUSet:
        return CPUSet.from_mask(self._mask & ~other._mask)

    def is_subset(self, other: CPUSet) -> bool:
        return self._mask & ~other._mask == 0

    def is_disjoint(self, other: CPUSet) -> bool:
        return self._mask & other._mask == 0

    def sorted(self) -> list[int]:
        return list(self)

    def __str__(self) -> str:
        """Linux list syntax, one step per range (not per CPU): large sets are formatted on every answer."""
        ranges: list[str] = []
        mask = self._mask
        while mask:
            start = (mask & -mask).bit_length() - 1
            run = mask >> start
            length = (run ^ (run + 1)).bit_length() - 1
            ranges.append(_range(start, start + length - 1))
            mask &= ~((1 << (start + length)) - 1)
        return ",".join(ranges)

    def __repr__(self) -> str:
        return f"CPUSet({str(self)!r})"


def _range(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else f"{lo}-{hi}"


EMPTY = CPUSet()
