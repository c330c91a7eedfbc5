"""Set one string value in a YAML (or JSON) text by editing the text, not by dumping the data again.

A load/dump round trip rewrites a user's file: comments, quoting, flow style and indentation are lost. The
parser's node positions say exactly where a value is, so the edit touches only it: an existing value is
replaced where it stands; a missing key is inserted before the first key of its block mapping (two spaces
deeper for each new level) or right after the `{` of a flow mapping (JSON stays JSON); an empty or `null`
mapping becomes a flow mapping holding the key.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import yaml

from podlevel.engine.errors import InputError

_INDENT = 2
_NULL = "tag:yaml.org,2002:null"


@dataclass(frozen=True, slots=True)
class Edit:
    """Replace `text[start:end]` with `replacement`."""

    start: int
    end: int
    replacement: str


def node_at(node: yaml.Node, path: Sequence[str | int]) -> yaml.Node:
    """The node at `path` (mapping keys and sequence indexes) below `node`; the path must exist."""
    for step in path:
        if isinstance(step, int):
            assert isinstance(node, yaml.SequenceNode)
            node = node.value[step]
        else:
            found = _value_of(node, step)
            assert found is not None, f"no {step!r} at {node.start_mark}"
            node = found
    return node


def set_value(text: str, node: yaml.Node, keys: Sequence[str], value: str, where: str) -> Edit:
    """The edit that makes `node[keys[0]][keys[1]]...` the string `value`, creating missing mappings."""
    flow = False
    for depth, key in enumerate(keys):
        if not isinstance(node, yaml.MappingNode):
            if _is_null(node):
                return _fill_null(text, node, keys[depth:], value)
            path = ".".join(keys[:depth]) or "the document"
            raise InputError("manifest", f"{where}: {path} must be a mapping to hold {keys[-1]}")
        found = _value_of(node, key)
        if found is None:
            return _insert(node, keys[depth:], value)
        flow = bool(node.flow_style)
        node = found
    if not isinstance(node, yaml.ScalarNode):
        raise InputError("manifest", f"{where}: {'.'.join(keys)} must be a string")
    start, end = node.start_mark.index, node.end_mark.index
    trailing = "\n" if end > start and text[end - 1] == "\n" else ""  # a block scalar ends with its newline
    return Edit(start, end, _quoted(value, flow=flow) + trailing)


def apply_edits(text: str, edits: Sequence[Edit]) -> str:
    """`text` with every edit applied (edits never overlap: each touches a different pod's metadata)."""
    for edit in sorted(edits, key=lambda e: e.start, reverse=True):
        text = text[: edit.start] + edit.replacement + text[edit.end :]
    return text


def _value_of(node: yaml.Node, key: str) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.value == key:
                return value_node  # type: ignore[no-any-return]
    return None


def _is_null(node: yaml.Node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.tag == _NULL


def _insert(mapping: yaml.MappingNode, keys: Sequence[str], value: str) -> Edit:
    if mapping.flow_style or not mapping.value:
        # `{` opens a flow mapping: the new key goes first, JSON-quoted.
        at = mapping.start_mark.index + 1
        rest = ", " if mapping.value else ""
        return Edit(at, at, _flow(keys, value) + rest)
    first_key = mapping.value[0][0]
    column = first_key.start_mark.column
    lines = [f"{' ' * (column + _INDENT * i)}{_plain(key)}:" for i, key in enumerate(keys)]
    lines[-1] += " " + _quoted(value, flow=False)
    block = "\n".join(lines).lstrip(" ") + "\n" + " " * column
    return Edit(first_key.start_mark.index, first_key.start_mark.index, block)


def _fill_null(text: str, node: yaml.Node, keys: Sequence[str], value: str) -> Edit:
    start, end = node.start_mark.index, node.end_mark.index
    space = " " if start == end and text[start - 1 : start] == ":" else ""  # `key:` with nothing after it
    return Edit(start, end, space + "{" + _flow(keys, value) + "}")


def _flow(keys: Sequence[str], value: str) -> str:
    """`"a": {"b": "value"}` for keys (a, b): the entries to put inside a flow mapping's braces."""
    body = json.dumps(value)
    for key in reversed(keys):
        body = f"{{{json.dumps(key)}: {body}}}"
    return body[1:-1]


def _quoted(value: str, *, flow: bool) -> str:
    """A single-quoted YAML scalar in block context (reads like the JSON it holds), JSON-quoted in flow."""
    return json.dumps(value) if flow else "'" + value.replace("'", "''") + "'"


def _plain(key: str) -> str:
    """A mapping key as the user would write it: plain when YAML reads it back as the same string."""
    return key if yaml.safe_load(f"{key}: x") == {key: "x"} else json.dumps(key)
