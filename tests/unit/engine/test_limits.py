"""The limits untrusted input is held to, and the helpers that quote it."""

from __future__ import annotations

import pytest

from podlevel.engine.errors import InputError
from podlevel.engine.limits import (
    check_dns1123_label,
    check_dns1123_subdomain,
    check_resource_name,
    encodable,
    quote,
    shown,
)


def test_quote_cuts_long_text_and_says_so() -> None:
    quoted = quote("x" * (1 << 20))
    assert len(quoted) < 200 and "1048448 more characters, truncated" in quoted
    assert quote("short") == "'short'"


def test_quoted_text_can_always_be_encoded() -> None:
    for text in ("\ud800", "a\x00b", "\udcff" * 1000):
        assert quote(text).encode() and shown(text).encode()


def test_plain_names_are_shown_as_they_are() -> None:
    assert shown("kube-system") == "kube-system"
    assert shown("name with space") == "'name with space'"
    assert len(shown("n" * (1 << 20))) < 200


def test_encodable() -> None:
    assert encodable("ascii") and encodable("ünïcode 😀")
    assert not encodable("lone \ud800 surrogate")


@pytest.mark.parametrize("name", ["a", "app-1", "x" * 63])
def test_dns1123_labels(name: str) -> None:
    check_dns1123_label(name, "field")


@pytest.mark.parametrize("name", ["", "-a", "a-", "A", "a_b", "a.b", "x" * 64, "\ud800", "é"])
def test_bad_dns1123_labels_name_the_rule(name: str) -> None:
    with pytest.raises(InputError) as caught:
        check_dns1123_label(name, "spec.containers[0].name")
    assert caught.value.rule == "DNS-1123 label" and "spec.containers[0].name" in caught.value.message


def test_dns1123_subdomains() -> None:
    check_dns1123_subdomain("web.example-1", "name")
    for bad in ("Web", "a..b", "x" * 254, "a/b"):
        with pytest.raises(InputError, match="DNS-1123 subdomain"):
            check_dns1123_subdomain(bad, "name")


@pytest.mark.parametrize(
    "name", ["cpu", "memory", "hugepages-2Mi", "example.com/gpu", "nvidia.com/gpu.shared"]
)
def test_resource_names(name: str) -> None:
    check_resource_name(name, "requests")


@pytest.mark.parametrize("name", ["", "cpu\ud800", "a b", "Example.com/gpu", "x" * 64, "/cpu"])
def test_bad_resource_names_name_the_rule(name: str) -> None:
    with pytest.raises(InputError) as caught:
        check_resource_name(name, "spec.resources.limits")
    assert caught.value.rule == "qualified name"
