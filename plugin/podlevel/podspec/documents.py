"""JSON text from outside (a pod's annotation, an admission review) decoded within the limits, and the checks
YAML text shares (`yaml_documents`, kept apart so that the daemon, which reads only JSON on its event path,
does not load PyYAML).

Python's decoders recurse once per nesting level and convert every integer they meet, so a 143-byte text
can raise RecursionError or spend seconds in `int()`; these loaders refuse such input first, with an
`InputError` naming the rule, in time linear in the text:
- nesting beyond `limits.MAX_NESTING` (JSON: counted before decoding; YAML: while composing);
- integers of more than `limits.MAX_INTEGER_DIGITS` digits, and JSON's `NaN` and `Infinity`;
- text that cannot be encoded as UTF-8 (a lone surrogate from a `\\ud800` escape), anywhere in the document.

JSON numbers are kept as `JSONNumber`, their text: the API server reads a quantity given as a number by its
text too, so `memory: -1` and `memory: "-1"` are one value and meet one rule.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Final

from podlevel.engine.errors import InputError
from podlevel.engine.limits import MAX_INTEGER_DIGITS, MAX_NESTING, encodable, json_depth, quote

_PLAIN_KEY: Final = re.compile(r"[A-Za-z0-9_./-]{1,63}")


class JSONNumber(str):
    """A JSON number, as its text (`"1.5"`, `"-1"`, `"1e3"`)."""

    __slots__ = ()


def load_json(text: str, where: str) -> object:
    """Decode one JSON document. Raises InputError with rule "json" (or "UTF-8") naming `where`."""
    depth = json_depth(text)
    if depth > MAX_NESTING:
        raise InputError("json", f"{where}: nested {depth} levels deep, at most {MAX_NESTING} are read")
    try:
        document = _DECODER.decode(text)
    except ValueError as err:  # JSONDecodeError, or a number the hooks refused
        raise InputError("json", f"{where}: not JSON ({one_line(err)})") from None
    check_text(document, where)
    return document


def _number(text: str) -> JSONNumber:
    if len(text) > MAX_INTEGER_DIGITS + 32:
        raise ValueError(f"a number of {len(text)} characters")
    return JSONNumber(text)


def _constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON number")


_DECODER: Final = json.JSONDecoder(parse_int=_number, parse_float=_number, parse_constant=_constant)
"""Built once: it decodes on the CreateContainer path."""


def check_text(document: object, where: str) -> None:
    """Refuse a document holding a key or string that cannot be encoded as UTF-8. Each node is visited once
    (a YAML alias is not followed twice), so the walk is linear in the document."""
    seen: set[int] = set()
    for path, value in _strings(document, "", seen):
        if not encodable(value):
            raise InputError("UTF-8", f"{where}: {path or 'the document'} holds {quote(value)}, which is not "
                                      "valid Unicode text (a lone surrogate)")


def _strings(node: object, path: str, seen: set[int]) -> Iterator[tuple[str, str]]:
    stack: list[tuple[str, object]] = [(path, node)]
    while stack:
        here, value = stack.pop()
        if isinstance(value, str):
            yield here, value
        elif isinstance(value, dict | list) and id(value) not in seen:
            seen.add(id(value))
            if isinstance(value, dict):
                for key, item in value.items():
                    if isinstance(key, str):
                        yield f"{here} key", key
                    stack.append((_child(here, key), item))
            else:
                stack.extend((f"{here}[{index}]", item) for index, item in enumerate(value))


def _child(path: str, key: object) -> str:
    if isinstance(key, str) and _PLAIN_KEY.fullmatch(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{quote(str(key))}]"


def one_line(err: Exception) -> str:
    """A decoder's message on one line, at most 400 characters."""
    text = " ".join(str(err).split())
    return text if len(text) <= 400 else text[:400] + "... (truncated)"
