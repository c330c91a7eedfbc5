"""state.gotypes: JSON strings written as Go's encoder writes them, on the fast path and the escaping one."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from podlevel.state.gotypes import encode_string

GO_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def go_marshal(text: str) -> str:
    """Go's `json.Marshal` of a string: JSON escaping plus its HTML-safe and line-separator escapes."""
    encoded = json.dumps(text, ensure_ascii=False)
    for char, escape in GO_ESCAPES.items():
        encoded = encoded.replace(char, escape)
    return encoded


@given(st.text())
def test_any_text_is_written_as_go_writes_it(text: str) -> None:
    assert encode_string(text) == go_marshal(text)


def test_checkpoint_text_takes_the_plain_path_and_the_rest_is_escaped() -> None:
    assert encode_string("0-3,8") == '"0-3,8"'
    assert encode_string("hugepages-2Mi") == '"hugepages-2Mi"'
    assert encode_string('a"b<c>&') == '"a\\"b\\u003cc\\u003e\\u0026"'
