"""YAML text from outside (manifests, a config file) decoded within the limits `documents` states for JSON:
nesting counted while composing, over-long integers refused, text that cannot be encoded as UTF-8 refused."""

from __future__ import annotations

from typing import Any

import yaml

from podlevel.engine.errors import InputError
from podlevel.engine.limits import MAX_INTEGER_DIGITS, MAX_NESTING
from podlevel.podspec.documents import check_text, one_line


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
    """The InputError (rule "yaml") for a YAML error of the input `where`, on one line, without PyYAML's
    excerpt of the offending text."""
    if isinstance(err, yaml.MarkedYAMLError) and err.problem_mark is not None:
        mark = err.problem_mark
        context = f"{err.context}: " if err.context else ""
        at = f"line {mark.line + 1}, column {mark.column + 1}"
        return InputError("yaml", f"{where}: {context}{err.problem} ({at})")
    return InputError("yaml", f"{where}: {one_line(err)}")
