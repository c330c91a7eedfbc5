"""JSON and YAML from outside decoded within the limits: no RecursionError, no quadratic int(), no text that
cannot be encoded."""

from __future__ import annotations

import pytest

from podlevel.engine.errors import InputError
from podlevel.podspec.documents import JSONNumber, load_json
from podlevel.podspec.yaml_documents import load_yaml_all


def refused(load: object, text: str) -> InputError:
    with pytest.raises(InputError) as caught:
        load(text, "where")  # type: ignore[operator]
    assert caught.value.message.startswith("where: ") and len(caught.value.message) < 600
    return caught.value


@pytest.mark.parametrize(
    ("text", "rule", "fragment"),
    [
        ("[" * 100_000 + "]" * 100_000, "json", "nested 100000 levels deep, at most 64"),
        ('{"a": ' * 65 + "1" + "}" * 65, "json", "nested 65 levels"),
        ('{"cpu": NaN}', "json", "NaN is not a JSON number"),
        ('{"cpu": -Infinity}', "json", "-Infinity is not a JSON number"),
        ('{"cpu": 1' + "0" * 5000 + "}", "json", "a number of 5001 characters"),
        ('{"name": "\\ud800"}', "UTF-8", "name holds '\\ud800'"),
        ('{"\\udfff": 1}', "UTF-8", "key holds"),
        ("not json", "json", "not JSON"),
    ],
    ids=lambda v: str(v)[:24],
)
def test_bad_json_is_refused_naming_the_rule(text: str, rule: str, fragment: str) -> None:
    err = refused(load_json, text)
    assert err.rule == rule and fragment in err.message


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    assert load_json('{"a": "' + "[" * 1000 + '"}', "w") == {"a": "[" * 1000}


def test_json_numbers_keep_their_text() -> None:
    document = load_json('{"a": -1, "b": 1.5e3, "c": "2"}', "w")
    assert document == {"a": "-1", "b": "1.5e3", "c": "2"}
    assert isinstance(document["a"], JSONNumber) and not isinstance(document["c"], JSONNumber)  # type: ignore[index]


def test_a_paired_surrogate_escape_is_ordinary_text() -> None:
    assert load_json('{"a": "\\ud83d\\ude00"}', "w") == {"a": "😀"}


@pytest.mark.parametrize(
    ("text", "rule", "fragment"),
    [
        ("- " * 5000 + "x", "yaml", "nested more than 64 levels deep"),
        ("[" * 5000, "yaml", "nested more than 64 levels deep"),
        ("a: " + "1" * 5000, "yaml", "an integer of 5000 characters"),
        ('a: "\\ud800"', "UTF-8", "a holds '\\ud800'"),
        ("a: [", "yaml", "line"),
    ],
    ids=lambda v: str(v)[:24],
)
def test_bad_yaml_is_refused_naming_the_rule(text: str, rule: str, fragment: str) -> None:
    err = refused(load_yaml_all, text)
    assert err.rule == rule and fragment in err.message


def test_yaml_aliases_are_walked_once() -> None:
    """A 'billion laughs' document is as cheap to check as it is to load."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 12)]
    assert load_yaml_all("\n".join(lines), "w")[0]["a0"] == ["x"] * 10


def test_as_text_keeps_every_scalar_as_written() -> None:
    assert load_yaml_all("a: 010\nb: true\nc: ~\nd: .nan", "w", as_text=True) == [
        {"a": "010", "b": "true", "c": "~", "d": ".nan"}
    ]


def test_workloads_are_read_within_the_limits() -> None:
    from podlevel.podspec.workloads import load_pods

    deployment = ("kind: Deployment\nmetadata: {name: d}\nspec:\n  replicas: 2000000000\n  template:\n"
                  "    spec: {containers: [{name: c}]}\n")
    with pytest.raises(InputError, match="up to 10000"):
        load_pods(deployment, "d.yaml")
    with pytest.raises(InputError, match="nested more than 64"):
        load_pods("kind: Pod\nmetadata: " + "[" * 5000, "deep.yaml")
    with pytest.raises(InputError) as caught:
        load_pods('kind: Pod\nmetadata: {name: "\\ud800"}', "s.yaml")
    assert caught.value.rule == "UTF-8"
