"""Kubernetes quantities in exact integer units."""

from __future__ import annotations

import pytest

from podlevel.engine.errors import InputError
from podlevel.engine.quantity import bytes_of, format_bytes, milli_cpu


@pytest.mark.parametrize(
    ("text", "millis"),
    [("500m", 500), ("1", 1000), ("2.5", 2500), ("0.1", 100), (3, 3000), ("1e3", 1_000_000),
     ("100u", 1), ("1k", 1_000_000), (".5", 500), ("0", 0)],
    ids=lambda v: str(v),
)
def test_cpu_in_millicores_rounded_up(text: str | int, millis: int) -> None:
    assert milli_cpu(text) == millis


@pytest.mark.parametrize(
    ("text", "value"),
    [("4Gi", 4 * 2**30), ("2Mi", 2 * 2**20), ("128974848", 128974848), ("129M", 129_000_000),
     ("1Ki", 1024), ("1.5Gi", 3 * 2**29), ("100m", 1)],
    ids=lambda v: str(v),
)
def test_memory_in_bytes(text: str, value: int) -> None:
    assert bytes_of(text) == value


@pytest.mark.parametrize("text", ["", "4GB", "abc", "1.2.3", "-1", "Gi", True, "1 Gi"])
def test_bad_quantities_name_the_rule(text: object) -> None:
    with pytest.raises(InputError) as err:
        milli_cpu(text)  # type: ignore[arg-type]
    assert err.value.rule == "quantity"


@pytest.mark.parametrize(
    ("value", "text"),
    [(4 * 2**30, "4Gi"), (2 * 2**20, "2Mi"), (3072, "3Ki"), (1536, "1536"), (1000, "1000"), (0, "0")],
)
def test_format_bytes(value: int, text: str) -> None:
    assert format_bytes(value) == text
