"""The newest layouts from kept fragments: the same bytes as made anew, whatever came before."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from podlevel.engine.cpuset import CPUSet
from podlevel.engine.memory_policy import MemoryBlock, MemoryTable, NUMANodeState
from podlevel.engine.shared_map import SharedMap
from podlevel.state.formats import CPUCheckpoint, MemoryCheckpoint, decode, encode, newest_encoder

_names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=4)
_uids = st.sampled_from(["pod-a", "pod-b", "Pod-c", "pod<&>", "pöd", "p\u2028d", 'p"d'])
"""A few UIDs, so that consecutive contents share pods whose entries stay, change or go."""
_cpus = st.builds(CPUSet, st.sets(st.integers(0, 63), max_size=6))
_blocks = st.lists(
    st.builds(
        MemoryBlock,
        st.lists(st.integers(0, 3), max_size=2).map(tuple),
        st.sampled_from(["memory", "hugepages-2Mi"]),
        st.integers(0, 2**64 - 1),
    ),
    max_size=2,
).map(tuple)
_cpu_content = st.builds(
    CPUCheckpoint,
    st.sampled_from(["static", "none"]),
    _cpus,
    st.dictionaries(_uids, st.dictionaries(_names, _cpus, max_size=2), max_size=4),
    st.dictionaries(_uids, _cpus, max_size=3),
)
_memory_content = st.builds(
    MemoryCheckpoint,
    st.sampled_from(["Static", "None"]),
    st.dictionaries(
        st.integers(0, 11),
        st.builds(
            NUMANodeState,
            st.integers(0, 9),
            st.dictionaries(_names, st.builds(MemoryTable, *[st.integers(0, 2**64 - 1)] * 5), max_size=2),
            st.lists(st.integers(0, 11), max_size=2).map(tuple),
        ),
        max_size=3,
    ),
    st.dictionaries(_uids, st.dictionaries(_names, _blocks, max_size=2), max_size=4),
    st.dictionaries(_uids, _blocks, max_size=3),
)


@given(st.lists(st.one_of(_cpu_content, _memory_content), min_size=1, max_size=8))
def test_kept_fragments_write_what_a_fresh_encoder_writes(
    contents: list[CPUCheckpoint | MemoryCheckpoint],
) -> None:
    kept = newest_encoder()
    for content in contents:
        data = encode(content, newest=kept)
        assert data == encode(content)
        decoded = decode(data)
        assert decoded.valid, decoded.checks
        assert decoded.content == content


def test_a_pod_whose_entries_change_is_encoded_anew() -> None:
    kept = newest_encoder()
    before = CPUCheckpoint("static", CPUSet.parse("0-3"), {"pod": {"app": CPUSet([4])}}, {"pod": CPUSet([4])})
    after = CPUCheckpoint("static", CPUSet.parse("0-3"), {"pod": {"app": CPUSet([5])}}, {"pod": CPUSet([5])})
    encode(before, newest=kept)
    data = encode(after, newest=kept)
    assert data == encode(after)
    assert decode(data).content == after



_steps = st.lists(
    st.tuples(_uids, st.one_of(st.none(), st.dictionaries(_names, _cpus, max_size=2))), max_size=40
)


@given(_steps)
def test_states_that_share_storage_write_what_a_fresh_encoder_writes(
    steps: list[tuple[str, dict[str, CPUSet] | None]],
) -> None:
    """Consecutive engine states (SharedMaps on one base, folded now and then): only the keys they may
    differ in are encoded again, and the bytes are the same."""
    kept = newest_encoder()
    entries: SharedMap[str, dict[str, CPUSet]] = SharedMap()
    pods: SharedMap[str, CPUSet] = SharedMap()
    for uid, containers in steps:
        if containers is None:
            entries = entries.delete(uid) if uid in entries else entries
            pods = pods.delete(uid) if uid in pods else pods
        else:
            entries = entries.set(uid, containers)
            pods = pods.set(uid, CPUSet.union_of(containers.values()))
        content = CPUCheckpoint("static", CPUSet.parse("0-3"), entries, pods)
        assert encode(content, newest=kept) == encode(content)
