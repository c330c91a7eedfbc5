"""JSON and YAML text from outside (a pod's annotation, manifests, a config file) decoded within the limits.

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
from typing import Any, Final

import yaml

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
        raise InputError("json", f"{where}: not JSON ({_short(err)})") from None
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


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing nesting beyond `MAX_NESTING` and over-long integers."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_NESTING:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]  # PyYAML's stubs
                problem = f"nested more than {MAX_NESTING} levels deep"
                raise yaml.composer.ComposerError(None, None, problem, mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_yaml_int(self, node: Any) -> int:
        if len(node.value) > MAX_INTEGER_DIGITS:
            raise yaml.constructor.ConstructorError(
                None, None, f"an integer of {len(node.value)} characters (at most {MAX_INTEGER_DIGITS})",
                node.start_mark,
            )
        value: int = super().construct_yaml_int(node)
        return value


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)


class _TextLoader(_Loader):
    """Every plain scalar the string it was written as (no implicit int, bool or null), for settings files:
    `plugin-index: 05` must not become 5, nor `reserved-cpus: 010` the octal 8."""


_TextLoader.yaml_implicit_resolvers = {}


def load_yaml_all(text: str, where: str, *, as_text: bool = False) -> list[Any]:
    """Every document of a (multi-document) YAML text; `as_text` keeps every scalar a string. Raises
    InputError with rule "yaml" (or "UTF-8") naming `where`."""
    try:
        documents = list(yaml.load_all(text, Loader=_TextLoader if as_text else _Loader))
    except yaml.YAMLError as err:
        raise yaml_error(err, where) from None
    for document in documents:
        check_text(document, where)
    return documents


def yaml_loader(text: str) -> yaml.SafeLoader:
    """PyYAML's safe loader over `text` within the limits, for callers that need the nodes too; its
    `yaml.YAMLError`s become InputErrors with `yaml_error`, and what it constructs is checked with
    `check_text`."""
    return _Loader(text)


def yaml_error(err: yaml.YAMLError, where: str) -> InputError:
    """The InputError (rule "yaml") for a YAML error of the input `where`, on one line."""
    return InputError("yaml", f"{where}: {_short(err)}")


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


def _short(err: Exception) -> str:
    """A decoder's message on one line, without PyYAML's excerpt of the offending text."""
    if isinstance(err, yaml.MarkedYAMLError) and err.problem_mark is not None:
        mark = err.problem_mark
        context = f"{err.context}: " if err.context else ""
        return f"{context}{err.problem} (line {mark.line + 1}, column {mark.column + 1})"
    text = " ".join(str(err).split())
    return text if len(text) <= 400 else text[:400] + "... (truncated)"
