"""SharedMap reads exactly as a dict given the same updates, and an update never changes the map it was made
from."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from podlevel.engine.shared_map import SharedMap, with_item, without_item

Op = tuple[str, int, int]

OPS = st.lists(
    st.tuples(st.sampled_from(["set", "set", "delete"]), st.integers(0, 40), st.integers()), max_size=300
)


def _check(shared: SharedMap[int, int], model: dict[int, int]) -> None:
    assert list(shared.items()) == list(model.items())
    assert list(shared) == list(model)
    assert list(shared.values()) == list(model.values())
    assert len(shared) == len(model)
    assert shared == model and model == shared
    for key in range(-1, 42):
        assert (key in shared) == (key in model)
        assert shared.get(key) == model.get(key)
        assert shared.get(key, -7) == model.get(key, -7)
        if key in model:
            assert shared[key] == model[key]


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.integers(0, 40), st.integers(), max_size=30), OPS)
def test_reads_as_a_dict_updated_the_same_way(start: dict[int, int], ops: list[Op]) -> None:
    shared, model = SharedMap(start), dict(start)
    history = [(shared, dict(model))]
    for op, key, value in ops:
        if op == "set":
            shared, model[key] = shared.set(key, value), value
        elif key in model:
            shared = shared.delete(key)
            del model[key]
        history.append((shared, dict(model)))
    _check(shared, model)
    for earlier, contents in history[:: max(1, len(history) // 20)]:
        _check(earlier, contents)


def test_deleting_a_missing_key_raises() -> None:
    shared = SharedMap({1: 1}).delete(1)
    for missing in (1, 2):
        try:
            shared.delete(missing)
        except KeyError:
            continue
        raise AssertionError(f"{missing} deleted")


def test_other_mappings_are_copied_once_and_left_alone() -> None:
    plain = {"a": 1, "b": 2}
    updated = without_item(with_item(plain, "c", 3), "a")
    assert plain == {"a": 1, "b": 2}
    assert isinstance(updated, SharedMap) and updated == {"b": 2, "c": 3}
    assert repr(updated) == "SharedMap({'b': 2, 'c': 3})"


def test_a_key_removed_and_set_again_goes_last_and_a_changed_value_keeps_its_place() -> None:
    shared = SharedMap({"a": 1, "b": 2, "c": 3}).delete("a").set("a", 4).set("b", 5)
    assert list(shared.items()) == [("b", 5), ("c", 3), ("a", 4)]


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.integers(0, 40), st.integers(), max_size=30), OPS)
def test_keys_outside_the_differing_ones_hold_the_same_value(start: dict[int, int], ops: list[Op]) -> None:
    maps = [SharedMap(start)]
    for op, key, value in ops:
        current = maps[-1]
        if op == "set":
            maps.append(current.set(key, value))
        elif key in current:
            maps.append(current.delete(key))
    for later_at, later in enumerate(maps):
        for earlier in (maps[0], maps[max(0, later_at - 1)], maps[max(0, later_at - 5)]):
            differing = later.differing_keys(earlier)
            if differing is None:
                continue
            for key in set(earlier) | set(later):
                if key not in differing:
                    assert key in earlier and key in later and later[key] is earlier[key]


def test_maps_on_different_bases_say_nothing_of_their_keys() -> None:
    assert SharedMap({1: 2}).differing_keys(SharedMap({1: 2})) is None
    assert SharedMap({1: 2}).differing_keys({1: 2}) is None
    shared = SharedMap({1: 2})
    assert shared.set(3, 4).differing_keys(shared) == frozenset({3})
