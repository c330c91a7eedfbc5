"""agent.pool_followers: containers filed by what they keep, each in one group, moved one group at a time."""

from __future__ import annotations

from podlevel.agent.pool_followers import Follows, PoolFollowers
from podlevel.agent.records import Settings
from podlevel.engine.cpuset import CPUSet
from podlevel.engine.manager import Assignment

PLAIN = Follows((0, 1), None, 100_000)
CAPPED = Follows((0,), 50_000, 100_000)


def test_a_group_is_made_once_and_handed_to_all_its_members() -> None:
    followers = PoolFollowers()
    for cid, kept in (("a", PLAIN), ("b", PLAIN), ("c", CAPPED)):
        followers.file(cid, kept)
    asked: list[Follows] = []

    def settings_of(kept: Follows) -> Settings:
        asked.append(kept)
        return Settings(CPUSet.parse("4-7"), kept.mems, kept.cpu_quota_us, kept.cpu_period_us,
                        Assignment.NODE_SHARED)

    moved = followers.at_pool(settings_of)
    assert sorted(asked) == sorted([PLAIN, CAPPED])
    assert moved.keys() == {"a", "b", "c"} and moved["a"] is moved["b"]
    assert moved["c"].cpu_quota_us == 50_000


def test_refiling_moves_a_container_and_none_or_drop_takes_it_out() -> None:
    followers = PoolFollowers()
    followers.file("a", PLAIN)
    followers.file("a", CAPPED)
    assert {kept: set(ids) for kept, ids in followers.groups().items()} == {CAPPED: {"a"}}
    followers.file("b", PLAIN)
    followers.file("a", None)
    followers.drop("b")
    followers.drop("never-filed")
    assert followers.groups() == {}
    assert followers.at_pool(lambda kept: Settings(CPUSet(), (), None, 1, Assignment.NODE_SHARED)) == {}
