"""UpdateBatch: updates grouped by what they share read, size and encode as the protobuf messages would."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from podlevel.nri import MAX_REPLY_BYTES, UpdateBatch, api, updates_within
from podlevel.nri.handler import with_updates
from support.fuzzing import fuzz_settings

container_ids = st.one_of(
    st.text(alphabet="0123456789abcdef", min_size=64, max_size=64),  # what runtimes name containers
    st.text(max_size=200),  # any text: empty, non-ASCII, long enough for two-byte lengths
)


@st.composite
def shared_updates(draw: st.DrawFn) -> api.ContainerUpdate:
    update = api.ContainerUpdate(ignore_failure=draw(st.booleans()))
    cpu = update.linux.resources.cpu
    cpu.cpus = draw(st.text(alphabet="0123456789,-", max_size=300))
    cpu.mems = draw(st.text(alphabet="0123456789,-", max_size=8))
    if draw(st.booleans()):
        cpu.quota.value = draw(st.integers(-1, 2**40))
        cpu.period.value = draw(st.integers(0, 2**20))
    return update


groups = st.lists(st.tuples(st.lists(container_ids, max_size=20), shared_updates()), max_size=5)


def one_by_one(batch_groups: list[tuple[list[str], api.ContainerUpdate]]) -> list[api.ContainerUpdate]:
    """The same updates the plain way: one message per container."""
    updates = []
    for ids, shared in batch_groups:
        for container_id in ids:
            update = api.ContainerUpdate()
            update.CopyFrom(shared)
            update.container_id = container_id
            updates.append(update)
    return updates


@fuzz_settings(200)
@given(groups, st.data())
def test_a_batch_reads_sizes_and_encodes_as_its_messages(
    batch_groups: list[tuple[list[str], api.ContainerUpdate]], data: st.DataObject
) -> None:
    batch = UpdateBatch(batch_groups)
    plain = one_by_one(batch_groups)

    assert list(batch) == plain and batch == plain and len(batch) == len(plain)
    assert batch.container_ids == [update.container_id for update in plain]
    # The bytes are protobuf's own for the same updates ...
    stop = with_updates(api.StopContainerResponse(), "update", batch)
    assert stop == api.StopContainerResponse(update=plain).SerializeToString()
    # ... and they parse back to the same messages when they follow other fields.
    adjust = api.ContainerAdjustment()
    adjust.linux.resources.cpu.cpus = "3"
    created = with_updates(api.CreateContainerResponse(adjust=adjust), "update", batch)
    expected = api.CreateContainerResponse(adjust=adjust, update=plain)
    assert api.CreateContainerResponse.FromString(created) == expected
    # Sizing is exact: what fits in a budget, and no more.
    budget = data.draw(st.integers(-1, len(stop) + 10), label="budget")
    fitting = updates_within(batch, budget)
    assert fitting == updates_within(plain, budget)
    assert len(with_updates(api.StopContainerResponse(), "update", batch[:fitting])) <= max(budget, 0)
    # Slices are batches of the same updates.
    start, stop_at, step = (data.draw(st.integers(-30, 30) | st.none(), label=name) for name in "abc")
    step = step or 1
    assert list(batch[start:stop_at:step]) == plain[start:stop_at:step]
    if plain:
        index = data.draw(st.integers(-len(plain), len(plain) - 1), label="index")
        assert batch[index] == plain[index]


def test_400_containers_moving_together_are_sized_exactly_and_each_carried() -> None:
    shared = api.ContainerUpdate(ignore_failure=True)
    shared.linux.resources.cpu.cpus = "0-63,128-191"
    ids = [f"{n:064x}" for n in range(400)]
    batch = UpdateBatch([(ids, shared)])

    assert updates_within(batch, MAX_REPLY_BYTES) == 400
    # Each entry: tag, length, the 64-byte id with its tag and length, the 22-byte shared update.
    assert (updates_within(batch, 10 * 90), updates_within(batch, 10 * 90 - 1)) == (10, 9)
    encoded = with_updates(api.StopContainerResponse(), "update", batch)
    assert [update.container_id for update in api.StopContainerResponse.FromString(encoded).update] == ids


def test_a_shared_update_names_no_container() -> None:
    try:
        UpdateBatch([(["a"], api.ContainerUpdate(container_id="b"))])
    except ValueError as err:
        assert "names container 'b'" in str(err)
    else:
        raise AssertionError("a shared update naming a container was taken")
