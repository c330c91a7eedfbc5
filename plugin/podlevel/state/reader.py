"""Reading a checkpoint file as the kubelet does, newest layout first, with a diagnosis of every part: which
checksum verified, what an older kubelet would make of the file, why a file no layout reads is corrupt."""

from __future__ import annotations

import json
from enum import Enum
from typing import NamedTuple

from podlevel.state.checkpoint_content import (
    BAD_CHECKSUM,
    BAD_CONTENT,
    EMPTY,
    FUTURE_VERSION,
    NOT_JSON,
    TRUNCATED,
    UNKNOWN_KIND,
    Check,
    Content,
    CorruptCheckpoint,
    CPUCheckpoint,
    Decoded,
    Kind,
    MemoryCheckpoint,
)
from podlevel.state.checksum import (
    GoValue,
    data_checksum,
    pointer,
    scalar,
    struct_checksum,
)
from podlevel.state.gotypes import (
    CHECKSUM,
    DATA,
    DATA_CHECKSUM,
    DEFAULT_CPU_SET,
    MACHINE_STATE,
    POLICY,
    GoDecodeError,
    JSONObject,
    checkpoint_struct,
    fold,
    parse,
)
from podlevel.state.layouts import FAMILIES, HEAD, NEWEST, Family, Layout, with_field


def parse_object(data: bytes | str) -> JSONObject:
    """The file's top-level JSON object, or CorruptCheckpoint saying why there is none."""
    # Go replaces invalid UTF-8 with U+FFFD rather than failing.
    text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
    if not text.strip():
        raise CorruptCheckpoint(EMPTY, "the file is empty")
    try:
        tree = parse(text)
    except json.JSONDecodeError as err:
        if err.pos >= len(text.rstrip()) or err.msg.startswith("Unterminated string"):
            raise CorruptCheckpoint(TRUNCATED, f"the JSON ends early ({err.msg} at byte {err.pos})") from None
        raise CorruptCheckpoint(NOT_JSON, f"{err.msg} at line {err.lineno} column {err.colno}") from None
    if not isinstance(tree, JSONObject):
        raise CorruptCheckpoint(NOT_JSON, f"the file holds a JSON {type(tree).__name__}, not an object")
    return tree


def detect_kind(obj: JSONObject) -> Kind:
    """CPU or memory, from the fields (inside `data` for the newest layouts), else from the policy name."""
    for pairs in (obj, _data_object(obj)):
        keys = {fold(key) for key, _ in pairs}
        if fold(MACHINE_STATE.json) in keys:
            return "memory"
        if fold(DEFAULT_CPU_SET.json) in keys:
            return "cpu"
    policies = {value for key, value in obj if fold(key) == fold(POLICY.json)}
    if policies & {"Static", "None"}:
        return "memory"
    if policies & {"static", "none"}:
        return "cpu"
    raise CorruptCheckpoint(
        UNKNOWN_KIND,
        "neither a CPU nor a memory manager checkpoint (no defaultCpuSet, "
        "no machineState, no known policy name)",
    )


def _data_object(obj: JSONObject) -> JSONObject:
    data = next((value for key, value in reversed(obj) if fold(key) == fold(DATA.json)), None)
    try:
        tree = parse(data) if isinstance(data, str) else None
    except json.JSONDecodeError:
        tree = None
    return tree if isinstance(tree, JSONObject) else JSONObject()


def decode(data: bytes | str, kind: Kind | None = None) -> Decoded:
    """Read a checkpoint file's bytes, newest layout first. Raises CorruptCheckpoint."""
    obj = parse_object(data)
    family = FAMILIES[kind or detect_kind(obj)]
    unknown = sorted({key for key, _ in obj if fold(key) not in family.known_keys})
    try:
        head = HEAD.decode(obj, "", HEAD.zero())
    except GoDecodeError as err:
        raise CorruptCheckpoint(BAD_CONTENT, f"V{NEWEST[family.kind]}: {err}") from None
    text, stored = head.field("Data").text, int(head.field("DataChecksum").text)
    if text or stored:
        return _decode_newest(obj, family, text, stored, unknown)
    failures: list[tuple[Layout, CorruptCheckpoint]] = []
    for layout in family.older:
        try:
            value, verdict = _verify(layout, obj)
        except GoDecodeError as err:
            failures.append((layout, CorruptCheckpoint(BAD_CONTENT, f"as V{layout.version}: {err}")))
            continue
        if verdict.outcome is Outcome.MISMATCH:
            failure = CorruptCheckpoint(BAD_CHECKSUM, f"as V{layout.version}: {verdict.text}")
            failures.append((layout, failure))
            continue
        checks = [Check("checksum", True, verdict.text)]
        notes = [f"ignored fields no layout knows: {', '.join(unknown)}"] if unknown else []
        skipped = _skipped_pod_entries(obj, layout)
        if skipped and layout.drops_pod_entries:
            notes.append(skipped)
        elif skipped:
            checks.append(Check("pod entries", False, skipped))
        if layout.has("podEntries"):
            notes.append(
                "kubelets 1.35 and older, and 1.36 without pod-level resource managers, reject this layout"
            )
        return Decoded(family.kind, layout.version, family.content(value), tuple(checks), tuple(notes))
    raise _failure(obj, family, failures, unknown)


class Outcome(Enum):
    """How a layout's own checksum judged a file."""

    MATCHES = "matches"
    ZERO_ACCEPTED = "checksum 0 accepted"
    MISMATCH = "mismatch"


class Verdict(NamedTuple):
    outcome: Outcome
    text: str
    """The verdict as `verify` and `inspect` print it."""


def _verify(layout: Layout, obj: JSONObject) -> tuple[GoValue, Verdict]:
    """The decoded struct and how its checksum verified."""
    struct = layout.struct()
    value = struct.decode(obj, "", struct.fresh())
    stored = int(value.field("Checksum").text)
    if stored == 0 and layout.zero_ok:
        accepted = "checksum 0: accepted unverified, as the kubelet accepts it"
        return value, Verdict(Outcome.ZERO_ACCEPTED, accepted)
    zeroed = with_field(value, "Checksum", scalar(CHECKSUM.go, "0"))
    sums = {name: struct_checksum(pointer(f"*state.{name}", zeroed)) for name in layout.names}
    for name, computed in sums.items():
        if computed == stored:
            return value, Verdict(Outcome.MATCHES, f"checksum {stored} matches (as state.{name})")
    computed_text = " or ".join(str(s) for s in sums.values())
    return value, Verdict(Outcome.MISMATCH, f"mismatch: checksum {stored}, computed {computed_text}")


def _skipped_pod_entries(obj: JSONObject, layout: Layout) -> str | None:
    if layout.has("podEntries") or not any(fold(key) == "podentries" for key, _ in obj):
        return None
    return (
        f"podEntries present but not covered by a valid checksum: read as V{layout.version} "
        "(checksum 0), the way the kubelet reads it, the pod entries are dropped"
    )


def _decode_newest(obj: JSONObject, family: Family, text: str, stored: int, unknown: list[str]) -> Decoded:
    version = NEWEST[family.kind]
    computed = data_checksum(text)
    if computed != stored:
        hint = ""
        named_checksum = [v for k, v in obj if fold(k) == "checksum"]
        if not any(fold(k) == fold(DATA_CHECKSUM.json) for k, _ in obj) and computed in named_checksum:
            hint = " (the data checksum is under `checksum`: an unmerged early layout the kubelet rejects)"
        raise CorruptCheckpoint(
            BAD_CHECKSUM, f"V{version} data checksum {stored} does not match computed {computed}{hint}"
        )
    try:
        tree = parse(text)
    except json.JSONDecodeError as err:
        raise CorruptCheckpoint(NOT_JSON, f"V{version} data: {err.msg} at byte {err.pos}") from None
    struct = checkpoint_struct(family.data_fields, family.data_type)
    try:
        value, data_unknown = struct.decode_fields(tree, "data", struct.fresh())
    except GoDecodeError as err:
        raise CorruptCheckpoint(BAD_CONTENT, f"V{version} {err}") from None
    content = family.content(value)
    legacy, legacy_notes = _legacy_check(obj, family, content)
    checks = (Check("data", True, f"data checksum {stored} matches"), legacy)
    notes = list(legacy_notes)
    if unknown or data_unknown:
        notes.append(
            f"ignored fields no layout knows: {', '.join(unknown + [f'data/{k}' for k in data_unknown])}"
        )
    return Decoded(family.kind, version, content, checks, tuple(notes))


def _legacy_check(obj: JSONObject, family: Family, content: Content) -> tuple[Check, list[str]]:
    """How an older kubelet fares with the inline legacy part of a `data` file."""
    inline = [
        (key, value) for key, value in obj if fold(key) not in {fold(DATA.json), fold(DATA_CHECKSUM.json)}
    ]
    if not inline:
        return Check(
            "legacy part",
            True,
            "absent: kubelets older than 1.37 cannot restore this file (they find no policy name)",
        ), []
    legacy = JSONObject(inline)
    errors: list[str] = []
    for layout in family.inline:
        try:
            value, verdict = _verify(
                Layout(layout.version, layout.fields, layout.names, zero_ok=True), legacy
            )
        except GoDecodeError as err:
            errors.append(f"not V{layout.version}: {err}")
            continue
        if verdict.outcome is Outcome.MISMATCH:
            errors.append(verdict.text)
            continue
        older = family.content(value)
        notes = (
            []
            if _same_legacy(older, content)
            else [
                f"the legacy V{layout.version} part disagrees with data: a downgraded kubelet would restore "
                "other assignments"
            ]
        )
        if verdict.outcome is Outcome.ZERO_ACCEPTED:
            return Check(
                "legacy part",
                True,
                f"V{family.inline[0].version} fields with checksum 0: older kubelets accept them unverified",
            ), notes
        downgrade = (
            "a 1.36 or older kubelet reads it (pod entries dropped)"
            if layout is family.inline[0]
            else "a 1.36 kubelet with pod-level resource managers reads it; older ones reject the file"
        )
        part = f"legacy V{layout.version} part: {verdict.text}; {downgrade}"
        return Check("legacy part", True, part), notes
    return Check(
        "legacy part",
        False,
        f"legacy part verifies as no older layout ({errors[0]}): the 1.37 "
        "kubelet restores the file from data, but a downgrade to 1.36 or older "
        "would reject it",
    ), []


def _same_legacy(older: Content, newest: Content) -> bool:
    if isinstance(older, CPUCheckpoint) and isinstance(newest, CPUCheckpoint):
        return (older.policy_name, older.default, older.entries) == (
            newest.policy_name,
            newest.default,
            newest.entries,
        )
    if isinstance(older, MemoryCheckpoint) and isinstance(newest, MemoryCheckpoint):
        return (older.policy_name, older.machine, older.entries) == (
            newest.policy_name,
            newest.machine,
            newest.entries,
        )
    return False


def _failure(
    obj: JSONObject, family: Family, failures: list[tuple[Layout, CorruptCheckpoint]], unknown: list[str]
) -> CorruptCheckpoint:
    """The most telling error once every layout failed: a newer layout's fields first, then the error of
    the layout the file looks like."""
    if unknown:
        return CorruptCheckpoint(
            FUTURE_VERSION,
            f"fields {', '.join(unknown)} belong to no {family.noun} "
            "layout this plugin reads, and no known layout verifies",
        )
    # No layout verified: report the error of the older layout the file's own keys point at. Pod entries:
    # the last layout before the newest (CPU v3, memory v2); CPU entries whose values are CPU lists, keyed by
    # container id: CPU v1; otherwise the last layout without pod entries (CPU v2, memory v1).
    keys = {fold(key) for key, _ in obj}
    entries = next((value for key, value in obj if fold(key) == "entries"), None)
    if "podentries" in keys:
        likely = NEWEST[family.kind] - 1
    elif (
        family.kind == "cpu"
        and isinstance(entries, JSONObject)
        and any(isinstance(v, str) for _, v in entries)
    ):
        likely = 1
    else:
        likely = family.older[-1].version if family.kind == "memory" else 2
    return next((error for layout, error in failures if layout.version == likely), failures[-1][1])
