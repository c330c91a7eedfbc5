"""CPUSet: the Linux list syntax both ways, set algebra, and bad input."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from podlevel.engine.cpuset import CPUSet
from podlevel.engine.errors import InputError


@pytest.mark.parametrize(
    ("text", "cpus", "canonical"),
    [
        ("", [], ""),
        ("0", [0], "0"),
        ("0-3", [0, 1, 2, 3], "0-3"),
        ("0-3,8,10-11", [0, 1, 2, 3, 8, 10, 11], "0-3,8,10-11"),
        (" 5 , 1-2 ", [1, 2, 5], "1-2,5"),
        ("3,2,1", [1, 2, 3], "1-3"),
        ("0-1,1-2", [0, 1, 2], "0-2"),
        ("255", [255], "255"),
    ],
    ids=["empty", "one", "range", "mixed", "spaces", "unordered", "overlap", "high"],
)
def test_parse_and_format(text: str, cpus: list[int], canonical: str) -> None:
    cpuset = CPUSet.parse(text)
    assert cpuset.sorted() == cpus
    assert str(cpuset) == canonical
    assert len(cpuset) == len(cpus)


@pytest.mark.parametrize("text", ["a", "1-", "-1", "3-1", "1,,2", "0x1", "1-2-3"])
def test_bad_lists_name_the_element(text: str) -> None:
    with pytest.raises(InputError) as err:
        CPUSet.parse(text)
    assert err.value.rule == "cpuset"
    assert repr(text) in err.value.message


def test_negative_cpu_is_refused() -> None:
    with pytest.raises(InputError, match="negative"):
        CPUSet([-1])


@given(st.frozensets(st.integers(0, 300)))
def test_round_trip(cpus: frozenset[int]) -> None:
    cpuset = CPUSet(cpus)
    assert CPUSet.parse(str(cpuset)) == cpuset
    assert set(cpuset) == cpus
    assert all(cpu in cpuset for cpu in cpus)


@given(st.frozensets(st.integers(0, 70)), st.frozensets(st.integers(0, 70)))
def test_algebra_matches_python_sets(a: frozenset[int], b: frozenset[int]) -> None:
    x, y = CPUSet(a), CPUSet(b)
    assert set(x | y) == a | b
    assert set(x & y) == a & b
    assert set(x - y) == a - b
    assert x.is_subset(y) == (a <= b)
    assert x.is_disjoint(y) == a.isdisjoint(b)
    assert (x == y) == (a == b)
    assert bool(x) == bool(a)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("0-4000000000", "ids are below 8192"), ("0-300000", "ids are below 8192"), ("9" * 100, "below"),
     ("0," * 50_000 + "0", "longer than"), ("٣", "not a CPU id")],
    ids=lambda v: str(v)[:20],
)
def test_ids_beyond_the_bound_are_refused_before_a_mask_is_built(
    text: str, fragment: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_mask(mask: int) -> CPUSet:
        raise AssertionError(f"a {mask.bit_length()}-bit mask was built for {text[:20]!r}")

    monkeypatch.setattr(CPUSet, "from_mask", staticmethod(no_mask))
    with pytest.raises(InputError) as caught:
        CPUSet.parse(text)
    assert caught.value.rule == "cpuset" and fragment in caught.value.message
    assert len(caught.value.message) < 400


def test_the_bound_is_the_callers() -> None:
    assert CPUSet.parse("0-3", bound=4) == CPUSet(range(4))
    with pytest.raises(InputError, match="NUMA node ids are below 2"):
        CPUSet.parse("0-2", bound=2, what="NUMA node")
